"""What vLLM's "Model loading took X GiB" holds besides the checkpoint's parameters.

vLLM measures the load with `DeviceMemoryProfiler` (vllm/utils/mem_utils.py) around `model_loader.load_model` in the
V1 runner (`GPUModelRunner.load_model`), the MRV2 runner (`vllm/v1/worker/gpu/model_runner.py: load_model`) and the
V0 worker: `CudaPlatform.get_current_memory_usage` resets torch's peak and reads `max_memory_allocated`, i.e. torch's
*allocated* bytes after minus before (read in 0.9.0.1, 0.23.0, 0.27.1, 0.28.0 and 0.33.0). Besides the parameters,
these persist inside that window:

1. Rotary caches (exact): `get_rope` builds one `RotaryEmbedding` per distinct key and caches it in `_ROPE_DICT`, so
   all decoder layers share one `cos_sin_cache` buffer of `rows x rotary_dim` elements in the model dtype (built on
   the GPU inside `initialize_model`'s device context; `RotaryEmbeddingBase.__init__`, `register_buffer`).
   rows = max_position_embeddings (default, llama3, dynamic, ntk); x factor (linear; yarn and deepseek_yarn from
   original_max_position_embeddings); x 4 for `MRotaryEmbedding` (`cache_max_position_num`, read in 0.8.5, 0.9.0.1,
   0.21.0, 0.23.0, 0.24.0, 0.27.1; 0.33's `positions_factor` default 4). Qwen2-VL / Qwen2.5-VL vision towers add a
   second cache, `get_rope(head_dim, max_position=8192, partial_rotary_factor=0.5)` (0.21.0, 0.23.0, 0.24.0, 0.27.1,
   0.33.0; 0.9.0.1 keeps only an inv_freq of head_dim / 4 float32).
2. The CUDA caching allocator's rounding (estimated): torch counts a block's whole size as allocated. A request of
   10 MiB or more (kMinLargeAlloc) gets a segment rounded up to 2 MiB (kRoundLarge, `get_allocation_size`), and the
   segment is split only when more than 1 MiB would remain (`should_split`, kSmallSize): a 31.5 MiB fused qkv_proj
   counts 32 MiB. Applied here to the decoder's large fused tensors (qkv_proj, o_proj, gate_up_proj, down_proj,
   embed_tokens, lm_head) as if each took a fresh segment; blocks reused from freed temporaries and the packing of
   1-10 MiB tensors into 20 MiB segments are not modelled. vLLM does not turn expandable segments on by default.

3. Buffers a model class allocates in its constructor (exact; the family's `load_buffers`): Gemma-4's E-series
   `per_layer_embeddings`, max_num_batched_tokens x layers x hidden_size_per_layer_input in the model dtype;
   Qwen3-VL's `deepstack_input_embeds`, one max_num_batched_tokens x hidden_size tensor per deepstack level.

The attention scale scalars (`Attention._k_scale` ...) are 512-byte blocks, below every figure printed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from capacity.memory.term import ESTIMATED, EXACT, MemoryTerm
from capacity.memory.weights import skipped_towers, weight_layout
from capacity.model.family import ModelBuffer
from capacity.model.spec import keyed_by_layer_type
from capacity.serving.config import ServingConfig
from capacity.source.resolve import ModelSource
from capacity.units import MiB
from capacity.weights.parallel_layers import pad_vocab_size
from capacity.weights.per_rank import WeightsBreakdown

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.model.spec import ModelSpec
    from capacity.vllm.versions import VllmSemantics
    from capacity.weights.parallel_layers import WeightLayout

MROPE_POSITIONS_FACTOR = 4  # MRotaryEmbedding: cache_max_position_num = max_position_embeddings * 4
VISION_ROPE_POSITIONS = 8192  # qwen2_5_vl.py / qwen2_vl.py vision tower: get_rope(max_position=8192)
VISION_ROPE_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")  # towers that build that get_rope cache

# torch c10/cuda/CUDACachingAllocator.cpp
MIN_BLOCK_BYTES = 512  # kMinBlockSize: every request rounded up to a multiple of 512 B
SMALL_SIZE_BYTES = 1 * MiB  # kSmallSize: a large-pool block splits only when more than this remains
MIN_LARGE_ALLOC_BYTES = 10 * MiB  # kMinLargeAlloc: requests from here get their own segment
ROUND_LARGE_BYTES = 2 * MiB  # kRoundLarge: such a segment is rounded up to 2 MiB

_ROWS_TIMES_FACTOR = ("linear",)
_ROWS_FROM_ORIGINAL_TIMES_FACTOR = ("yarn", "deepseek_yarn")
_ROWS_MAX_POSITION = ("default", "llama3", "dynamic", "ntk", "mrope", "proportional")
_CACHE_HEAD_WIDE = ("proportional",)  # Gemma4RotaryEmbedding: a head_size-wide cache whatever partial_rotary_factor says


def allocated_block_bytes(request: int) -> int:
    """Bytes torch counts as allocated for one tensor of `request` bytes in a fresh segment (round_size,
    get_allocation_size, should_split)."""
    size = max(MIN_BLOCK_BYTES, -(-request // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES)
    if size < MIN_LARGE_ALLOC_BYTES:
        return size  # small pool (2 MiB) or a 20 MiB large buffer: split, the rest stays free
    segment = -(-size // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES
    return segment if segment - size <= SMALL_SIZE_BYTES else size


@dataclass(frozen=True)
class RotaryCache:
    """One `cos_sin_cache` buffer: rows x rotary_dim elements of dtype_bytes each."""

    owner: str  # "decoder" or "vision tower"
    rope_type: str
    rows: int
    rotary_dim: int
    dtype_bytes: int
    exact: bool = True

    @property
    def bytes(self) -> int:
        return self.rows * self.rotary_dim * self.dtype_bytes

    def describe(self) -> str:
        how = "" if self.exact else f", rope type {self.rope_type!r} sized as max_position (not read)"
        return f"{self.owner} cos_sin_cache {self.rows:,} x {self.rotary_dim} x {self.dtype_bytes} B ({self.rope_type}{how})"


@dataclass(frozen=True)
class LoadAllocations:
    """What the load window holds besides the parameters, on one rank."""

    caches: tuple[RotaryCache, ...]
    rounding_bytes: int  # allocator rounding of the large tensors (estimated)
    rounded_tensors: int  # how many of them round up
    buffers: tuple[ModelBuffer, ...] = ()  # the model class's own buffers (exact)

    @property
    def cache_bytes(self) -> int:
        return sum(c.bytes for c in self.caches)

    @property
    def buffer_bytes(self) -> int:
        return sum(b.bytes for b in self.buffers)

    @property
    def total_bytes(self) -> int:
        return self.cache_bytes + self.buffer_bytes + self.rounding_bytes

    @property
    def exact(self) -> bool:
        return self.rounding_bytes == 0 and all(c.exact for c in self.caches)

    def describe(self) -> str:
        parts = [c.describe() for c in self.caches] + [b.describe() for b in self.buffers]
        if self.rounding_bytes:
            parts.append(f"allocator rounding of {self.rounded_tensors} large tensors to 2 MiB segments {self.rounding_bytes:,} B (estimated)")
        return "; ".join(parts) if parts else "none"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(cache_bytes=self.cache_bytes, buffer_bytes=self.buffer_bytes, total_bytes=self.total_bytes)
        return out


def _rope_entries(text: dict[str, Any], head_size: int) -> list[tuple[dict[str, Any], int]]:
    """(rope parameter set, head size) of each distinct get_rope call of a text config, [] when the model has no
    rotary embedding. transformers 5 keys the sets by layer type: taken in the order the layers first use them, and
    Gemma-4's full-attention layers call get_rope with `global_head_dim` (Gemma4DecoderLayer: per_layer_config)."""
    params = text.get("rope_parameters")
    if keyed_by_layer_type(params):
        types = text.get("layer_types")
        order = list(dict.fromkeys(t for t in types if t in params)) if isinstance(types, list) else []
        order += [k for k in params if k not in order]
        global_head = text.get("global_head_dim")  # Gemma-4 only
        distinct: list[tuple[dict[str, Any], int]] = []
        for kind in order:
            call = (params[kind], int(global_head) if kind == "full_attention" and isinstance(global_head, int) else head_size)
            if call not in distinct:
                distinct.append(call)
        return distinct
    scaling = params if isinstance(params, dict) and params else text.get("rope_scaling")
    if isinstance(scaling, dict) and scaling:
        return [(scaling, head_size)]
    return [({}, head_size)] if "rope_theta" in text else []


def _rows(entry: dict[str, Any], max_position: int) -> tuple[str, int, bool]:
    """(rope type, cache rows, exact) of one get_rope call (vllm/model_executor/layers/rotary_embedding)."""
    rope_type = str(entry.get("rope_type", entry.get("type", "default")))
    factor = entry.get("factor")
    if "mrope_section" in entry:
        # MRotaryEmbedding.cache_max_position_num; with YaRN scaling it sizes from original_max_position (not read)
        return "mrope", max_position * MROPE_POSITIONS_FACTOR, rope_type in ("default", "mrope")
    if rope_type in _ROWS_MAX_POSITION:
        return rope_type, max_position, True
    if rope_type in _ROWS_TIMES_FACTOR and isinstance(factor, (int, float)):
        return rope_type, int(max_position * factor), True  # LinearScalingRotaryEmbedding: max_len = max_pos * factor
    original = entry.get("original_max_position_embeddings")
    if rope_type in _ROWS_FROM_ORIGINAL_TIMES_FACTOR and isinstance(factor, (int, float)) and isinstance(original, int):
        return rope_type, int(original * factor), True  # YaRNScalingRotaryEmbedding: arange(max_pos * scaling_factor)
    return rope_type, max_position, False


def decoder_rotary_caches(text: dict[str, Any], head_size: int, dtype_bytes: int) -> tuple[RotaryCache, ...]:
    """The decoder's get_rope caches (one per distinct rope parameter set; layers share it through _ROPE_DICT)."""
    max_position = text.get("max_position_embeddings")
    if not isinstance(max_position, int) or head_size <= 0:
        return ()
    caches = []
    for entry, head in _rope_entries(text, head_size):
        partial = entry.get("partial_rotary_factor", text.get("partial_rotary_factor", 1.0))
        rotary_dim = int(entry.get("rope_dim") or int(head * float(partial)))
        rope_type, rows, exact = _rows(entry, max_position)
        if rope_type in _CACHE_HEAD_WIDE:
            rotary_dim = head  # Gemma4RotaryEmbedding: the base class built with rotary_dim = head_size (zero-padded angles)
        caches.append(RotaryCache("decoder", rope_type, rows, rotary_dim, dtype_bytes, exact))
    return tuple(caches)


def vision_rotary_caches(config: dict[str, Any], dtype_bytes: int, builds_vision_cache: bool) -> tuple[RotaryCache, ...]:
    """Qwen2-VL / Qwen2.5-VL vision tower: get_rope(head_dim, max_position=8192, partial_rotary_factor=0.5)."""
    vision = config.get("vision_config")
    if not builds_vision_cache or config.get("model_type") not in VISION_ROPE_MODEL_TYPES or not isinstance(vision, dict):
        return ()
    width = vision.get("hidden_size") or vision.get("embed_dim")
    heads = vision.get("num_heads")
    if not isinstance(width, int) or not isinstance(heads, int) or heads <= 0:
        return ()
    return (RotaryCache("vision tower", "default", VISION_ROPE_POSITIONS, width // heads // 2, dtype_bytes),)


def decoder_large_tensors(spec: ModelSpec, layout: WeightLayout, tp: int, dtype_bytes: int) -> list[tuple[int, int]]:
    """(bytes on one rank, count) of the decoder's tensors as vLLM allocates them: fused qkv_proj (QKVParallelLinear),
    o_proj, gate_up_proj (MergedColumnParallelLinear) or fc1, down_proj, embed_tokens and an untied lm_head (vocab
    padded to 64). Dense decoders only: MoE experts and unusual attention are left out (returns what is known)."""
    d = spec.decoder
    hidden, layers = d.hidden_size, d.num_layers
    out: list[tuple[int, int]] = []
    if layout.head_size and layout.num_attention_heads and layout.num_kv_heads:
        q = layout.num_attention_heads // tp * layout.head_size
        kv = max(layout.num_kv_heads // tp, 1) * layout.head_size
        out += [((q + 2 * kv) * hidden * dtype_bytes, layers), (hidden * q * dtype_bytes, layers)]
    if not layout.num_experts and d.ffn_size:
        ffn = d.ffn_size // tp
        out += [((2 if d.gated_ffn else 1) * ffn * hidden * dtype_bytes, layers), (hidden * ffn * dtype_bytes, layers)]
    vocab = pad_vocab_size(d.vocab_size) // tp * hidden * dtype_bytes
    out.append((vocab, 1 if layout.tie_word_embeddings else 2))
    return out


def allocator_rounding(sizes: list[tuple[int, int]]) -> tuple[int, int]:
    """(bytes torch counts beyond the requests, tensors that round up) for (request bytes, count) pairs."""
    extra = tensors = 0
    for request, count in sizes:
        over = allocated_block_bytes(request) - request
        if over:
            extra += over * count
            tensors += count
    return extra, tensors


def load_allocations(
    spec: ModelSpec,
    config: dict[str, Any],
    layout: WeightLayout,
    tp: int,
    dtype_bytes: int,
    builds_vision_cache: bool = True,
    buffers: tuple[ModelBuffer, ...] = (),
) -> LoadAllocations:
    """Rotary caches (exact), the model class's own buffers (exact) and allocator rounding (estimated) inside vLLM's
    model-load window, on one rank."""
    text = spec.family.text_config(config)
    if text is not config and "max_position_embeddings" not in text:
        text = {**config, **text}
    head_size = int(text.get("qk_rope_head_dim") or text.get("head_dim") or layout.head_size or 0)  # MLA: rope on qk_rope_head_dim
    caches = decoder_rotary_caches(text, head_size, dtype_bytes) + vision_rotary_caches(config, dtype_bytes, builds_vision_cache)
    fresh = [(c.bytes, 1) for c in caches] + [(b.bytes, 1) for b in buffers]
    rounding, rounded = allocator_rounding(decoder_large_tensors(spec, layout, tp, dtype_bytes) + fresh)
    return LoadAllocations(caches, rounding, rounded, buffers)


# --- the load-buffers term ----------------------------------------------------------------------------


def load_buffers_term(
    spec: ModelSpec,
    source: ModelSource,
    serving: ServingConfig,
    wb: WeightsBreakdown,
    semantics: VllmSemantics,
    rounding: bool = True,
    towers_built: bool = True,
) -> MemoryTerm:
    """What vLLM's "Model loading took" holds besides the parameters (`load_allocations`): the rotary
    cos_sin_cache buffers (exact) and, for unquantized checkpoints, the caching allocator's rounding of the decoder's
    large tensors (estimated). `rounding=False` where a GPU measurement of the load already holds the rounding;
    `towers_built=False` on a pipeline stage whose towers are StageMissingLayer on the meta device, as they are where
    --limit-mm-per-prompt 0 leaves them unbuilt (skipped_towers): no vision rotary cache, no tower-side buffers."""
    layout = weight_layout(spec, source.config, class_default_tie=False)
    towers_built = towers_built and not skipped_towers(spec, source, serving)
    buffers = spec.family.load_buffers(source.config, serving.max_num_batched_tokens, serving.dtype_bytes, towers_built)
    loads = load_allocations(
        spec, source.config, layout, serving.tensor_parallel_size, serving.dtype_bytes, semantics.vision_rope_cache and towers_built, buffers
    )
    if not rounding or wb.quantization != "none":
        loads = replace(loads, rounding_bytes=0, rounded_tensors=0)
    kind = EXACT if loads.exact else ESTIMATED
    return MemoryTerm(loads.total_bytes, kind, f"{loads.describe()} (vLLM {semantics.name}: allocated inside the load window besides the parameters)")
