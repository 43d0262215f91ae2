"""LoRA's GPU memory as vLLM 0.33 allocates it with --enable-lora (exact where vLLM's shapes fix it), and 0.8 to
0.32 where they differ from it (capacity/vllm/lora_rules.py: the punica index, the classes wrapped, the LM head's
vocabulary limit, the runners' graph cases, and before 0.12 the extra vocabulary).

What vLLM does (vllm/lora, vllm/v1/worker):
- Inside the model load (GPUModelRunner.load_model / MRV2 ModelRunner.load_model: `load_lora_model` runs inside the
  DeviceMemoryProfiler, so "Model loading took" includes it), LoRAModelManager wraps every supported module and each
  wrapper's `create_lora_weights` allocates zeroed stacked buffers for `max_loras` adapters of `max_lora_rank`:
  - a merged column layer (qkv_proj: 3 slices, gate_up_proj: 2) holds per slice lora_a (max_loras, 1, r', input) and
    lora_b (max_loras, 1, slice_out / tp, r); r' = r, or r / tp with --fully-sharded-loras;
  - a row layer (o_proj, down_proj) holds lora_a (max_loras, 1, r, input / tp) and lora_b (max_loras, 1, out', r);
    out' = out, or out / tp with --fully-sharded-loras;
  - where the model class lists embedding_modules (Qwen3, Llama; not Qwen2 or Mistral): the input embedding
    (VocabParallelEmbeddingWithLoRA: lora_a (max_loras, vocab, r), lora_b (max_loras, 1, hidden, r), both unsharded)
    and the LM head (LogitsProcessorWithLoRA: lora_a (max_loras, 1, r, hidden), lora_b (max_loras, 1, vocab, r),
    unsharded, plus at TP > 1 an int64 index of the padded vocabulary, sharded_to_full_mapping_gpu);
  - the punica wrapper's metadata (PunicaWrapperBase + two LoRAKernelMeta): int64 and int32 vectors sized by
    max_num_batched_tokens, max_num_seqs and max_loras.
  The dummy adapters of the profile run and the graph capture are built on the host (create_dummy_lora, "cpu") and
  copied into these buffers: no further GPU memory.
- In the forward pass every wrapped linear layer allocates a float32 shrink buffer (n_slices, tokens, r)
  (PunicaWrapperGPU.add_lora_linear): transient, on top of the layer's activations.
- CUDA graphs: both runners capture every size once without and once with LoRA active (cudagraph_specialize_lora,
  default on: lora cases [0, max_loras + 1]), so the graph count doubles.

Each allocation is counted as PyTorch's caching allocator counts it (max_memory_allocated, which "Model loading took"
reads): rounded up to 512 B.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from capacity.errors import BadInput
from capacity.kv.layers import DTYPE_BYTES
from capacity.memory.cuda_graphs import H200_CAPTURE, MIN_GRAPH_BYTES, GraphCaptureCost, graph_estimate, pieces_per_size
from capacity.memory.term import ESTIMATED, EXACT, MemoryTerm
from capacity.memory.weights import weight_layout
from capacity.model.spec import ModelSpec
from capacity.serving.config import ServingConfig
from capacity.serving.lora import LoraConfig
from capacity.source.resolve import ModelSource
from capacity.units import plural
from capacity.vllm.lora_rules import LoraRules
from capacity.weights.parallel_layers import pad_vocab_size

ALLOCATION_ROUNDING = 512  # CUDACachingAllocator round_size: every block a multiple of 512 B
EXTRA_VOCAB_PADDING = 256  # lora_vocab_padding_size (vLLM 0.8-0.11)

# The decoder-only classes whose vLLM 0.33 LoRA layout capacity models: packed qkv_proj (q, k, v) and gate_up_proj
# (gate, up), row-parallel o_proj and down_proj; True where the class lists embedding_modules (embed_tokens, lm_head).
LORA_ARCHITECTURES = {
    "Qwen3ForCausalLM": True,  # qwen3.py: embedding_modules = {embed_tokens, lm_head}
    "LlamaForCausalLM": True,  # llama.py: embedding_modules = {embed_tokens, lm_head}
    "Qwen2ForCausalLM": False,  # qwen2.py: no embedding_modules (SupportsLoRA's default {})
    "MistralForCausalLM": False,  # mistral.py: embedding_modules = {}
}


def allocated(*shape: int, dtype_bytes: int) -> int:
    """One torch.zeros / torch.empty of `shape` as the caching allocator counts it."""
    size = dtype_bytes
    for dim in shape:
        size *= dim
    return -(-size // ALLOCATION_ROUNDING) * ALLOCATION_ROUNDING


@dataclass(frozen=True)
class LoraShapes:
    """The decoder facts the LoRA buffers depend on (totals, before tensor parallelism)."""

    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    vocab_size: int
    num_layers: int
    embeddings: bool  # the class wraps embed_tokens and lm_head


@dataclass(frozen=True)
class LoraMemory:
    """LoRA's GPU memory on one rank, by part (bytes)."""

    per_layer_bytes: int  # one decoder layer's stacked lora_a / lora_b buffers
    layers_bytes: int  # all decoder layers
    embedding_bytes: int  # embed_tokens' lora_a / lora_b (0 where not wrapped)
    lm_head_bytes: int  # the logits processor's lora_a / lora_b and (TP > 1) its vocab index
    punica_bytes: int  # the punica wrapper's metadata tensors
    shrink_buffer_bytes: int  # the largest float32 shrink buffer of one layer in the profile run
    graph_bytes: int  # the CUDA graphs captured with LoRA active (estimated)
    extra_graphs: int
    one_graph_set: bool = False  # the runner captures each size once, with LoRA active (MRV2 0.20-0.23, V1 before 0.12)
    extra_vocab: int = 0  # lora_extra_vocab_size in force (before 0.12, wrapped classes only)
    extra_vocab_weights_bytes: int = 0  # the rows it adds to embed_tokens and lm_head (in the model load)
    extra_logits_bytes: int = 0  # the sampler's wider logits (vocab + extra) in the profile run
    long_lora_unknown: bool = False  # _long_lora_indices counted for a range whose later releases lack it (0.8-0.10)

    @property
    def buffers_bytes(self) -> int:
        return self.layers_bytes + self.embedding_bytes + self.lm_head_bytes + self.punica_bytes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"buffers_bytes": self.buffers_bytes}


def lora_shapes(spec: ModelSpec, source: ModelSource, rules: LoraRules, version: str) -> LoraShapes:
    """The shapes of a model whose LoRA layout is modelled in vLLM `version` (`rules`); BadInput (one line) for any other."""
    arch = spec.architecture
    layout = weight_layout(spec, source.config)
    if layout.num_experts:
        raise BadInput(
            f"--enable-lora: {spec.name} is a MoE model; vLLM's expert LoRA buffers (FusedMoEWithLoRA) are not modelled: plan without --enable-lora"
        )
    if arch not in LORA_ARCHITECTURES:
        known = ", ".join(sorted(LORA_ARCHITECTURES))
        raise BadInput(f"--enable-lora: vLLM {version}'s LoRA layout of {arch} is not modelled (modelled: {known}); plan without --enable-lora")
    if arch in rules.refused:
        raise BadInput(f"--enable-lora: {arch} under vLLM {version}: {rules.refused[arch]}; plan with a release outside that range")
    wrapped = (LORA_ARCHITECTURES[arch] or arch in rules.wrapped_embeddings) and arch not in rules.unwrapped_embeddings
    if wrapped and rules.extra_vocab and layout.tie_word_embeddings:
        raise BadInput(f"--enable-lora: {spec.name} ties its LM head to the embedding, whose LoRA extra vocabulary under vLLM {version} is not modelled; plan with --vllm-version 0.12 or later")
    d = spec.decoder
    if not d.gated_ffn or not layout.head_size:
        raise BadInput(f"--enable-lora: {spec.name} lacks the gated MLP or attention heads of the modelled LoRA layout; plan without --enable-lora")
    return LoraShapes(
        hidden_size=d.hidden_size,
        intermediate_size=d.ffn_size,
        num_heads=layout.num_attention_heads,
        num_kv_heads=layout.num_kv_heads,
        head_size=layout.head_size,
        vocab_size=d.vocab_size,
        num_layers=d.num_layers,
        embeddings=wrapped,
    )


def merged_column_bytes(input_size: int, slice_outputs: tuple[int, ...], lora: LoraConfig, tp: int, b: int) -> int:
    """MergedColumnParallelLinearWithLoRA / MergedQKVParallelLinearWithLoRA.create_lora_weights: per slice lora_a
    (max_loras, 1, r or r / tp, input) and lora_b (max_loras, 1, slice output on this rank, r)."""
    r, n = lora.max_lora_rank, lora.max_loras
    a_rows = r // tp if lora.fully_sharded_loras else r
    return sum(allocated(n, 1, a_rows, input_size, dtype_bytes=b) + allocated(n, 1, out, r, dtype_bytes=b) for out in slice_outputs)


def row_bytes(input_per_rank: int, output_size: int, lora: LoraConfig, tp: int, b: int) -> int:
    """RowParallelLinearWithLoRA (BaseLinearLayerWithLoRA.create_lora_weights): lora_a (max_loras, 1, r, input / tp),
    lora_b (max_loras, 1, output or output / tp, r)."""
    r, n = lora.max_lora_rank, lora.max_loras
    b_rows = output_size // tp if lora.fully_sharded_loras else output_size
    return allocated(n, 1, r, input_per_rank, dtype_bytes=b) + allocated(n, 1, b_rows, r, dtype_bytes=b)


def layer_bytes(s: LoraShapes, lora: LoraConfig, tp: int) -> int:
    """One decoder layer: qkv_proj (3 slices), o_proj, gate_up_proj (2 slices), down_proj."""
    b = DTYPE_BYTES[lora.lora_dtype]
    heads = s.num_heads // tp  # QKVParallelLinear.num_heads
    kv_heads = max(s.num_kv_heads // tp, 1)  # QKVParallelLinear.num_kv_heads (replicated when tp > total KV heads)
    qkv = merged_column_bytes(s.hidden_size, (heads * s.head_size, kv_heads * s.head_size, kv_heads * s.head_size), lora, tp, b)
    o_proj = row_bytes(s.num_heads * s.head_size // tp, s.hidden_size, lora, tp, b)
    gate_up = merged_column_bytes(s.hidden_size, (s.intermediate_size // tp, s.intermediate_size // tp), lora, tp, b)
    down = row_bytes(s.intermediate_size // tp, s.hidden_size, lora, tp, b)
    return qkv + o_proj + gate_up + down


def embedding_bytes(s: LoraShapes, lora: LoraConfig, extra: int = 0, model_bytes: int = 2) -> int:
    """VocabParallelEmbeddingWithLoRA: lora_a (max_loras, org_vocab_size + extra, r), lora_b (max_loras, 1,
    embedding_dim, r); with an extra vocabulary (before 0.12) embeddings_tensors (max_loras, extra, hidden) in the
    model's dtype."""
    b, r, n = DTYPE_BYTES[lora.lora_dtype], lora.max_lora_rank, lora.max_loras
    added = allocated(n, extra, s.hidden_size, dtype_bytes=model_bytes) if extra else 0
    return allocated(n, s.vocab_size + extra, r, dtype_bytes=b) + allocated(n, 1, s.hidden_size, r, dtype_bytes=b) + added


def lm_head_bytes(s: LoraShapes, lora: LoraConfig, tp: int, extra: int = 0, model_bytes: int = 2) -> int:
    """LogitsProcessorWithLoRA: lora_a (max_loras, 1, r, hidden), lora_b (max_loras, 1, vocab, r); at TP > 1 the int64
    sharded_to_full_mapping_gpu over the padded vocabulary (ParallelLMHead.get_sharded_to_full_mapping). With an
    extra vocabulary (before 0.12) the head's vocabulary is padded to 256 plus the extra rows (lora_b and the index
    that long) and embeddings_tensors (max_loras, extra, hidden) is in the model's dtype."""
    b, r, n = DTYPE_BYTES[lora.lora_dtype], lora.max_lora_rank, lora.max_loras
    width = pad_vocab_size(s.vocab_size, EXTRA_VOCAB_PADDING) + extra if extra else s.vocab_size
    index_rows = width if extra else padded_vocab(s.vocab_size, tp)
    index = allocated(index_rows, dtype_bytes=8) if tp > 1 else 0
    added = allocated(n, extra, s.hidden_size, dtype_bytes=model_bytes) if extra else 0
    return allocated(n, 1, r, s.hidden_size, dtype_bytes=b) + allocated(n, 1, width, r, dtype_bytes=b) + index + added


def extra_vocab_weights_bytes(s: LoraShapes, lora: LoraConfig, tp: int, extra: int, model_bytes: int) -> int:
    """The rows vLLM before 0.12 adds to the model itself for LoRA's extra vocabulary (llama.py): embed_tokens holds
    pad(vocab, 64) + max_loras x extra rows instead of pad(vocab, 64), the (untied) lm_head pad(vocab, 256) + extra
    instead of pad(vocab, 64), each split over TP ranks."""
    base = pad_vocab_size(s.vocab_size) // tp
    embed = allocated((pad_vocab_size(s.vocab_size) + lora.max_loras * extra) // tp, s.hidden_size, dtype_bytes=model_bytes)
    head = allocated((pad_vocab_size(s.vocab_size, EXTRA_VOCAB_PADDING) + extra) // tp, s.hidden_size, dtype_bytes=model_bytes)
    return embed + head - 2 * allocated(base, s.hidden_size, dtype_bytes=model_bytes)


def padded_vocab(vocab: int, tp: int) -> int:
    """The length of get_sharded_to_full_mapping: tp x num_embeddings_per_partition = num_embeddings_padded, the
    vocabulary padded to a multiple of 64 (DEFAULT_VOCAB_PADDING_SIZE; no added vocabulary in vLLM 0.33)."""
    return pad_vocab_size(vocab)


def punica_bytes(lora: LoraConfig, max_num_batched_tokens: int, max_num_seqs: int, rules: LoraRules) -> int:
    """PunicaWrapperGPU(max_num_batched_tokens, max_batches=max_num_seqs): PunicaWrapperBase's four int64 token vectors
    (_embeddings_indices has `rules.embedding_index_rows` of them: 2 before 0.29; 0.8-0.9 a fifth, _long_lora_indices)
    and three int64 batch vectors, and two LoRAKernelMeta.make (token and prompt mapping), each two int32 vectors of
    tokens (of max_num_seqs for the prompt mapping before 0.12) and three int32 vectors of max_loras + 1, + 1, + 2."""
    t, seqs, n = max_num_batched_tokens, max_num_seqs, lora.max_loras
    base = 3 * allocated(t, dtype_bytes=8) + allocated(rules.embedding_index_rows, t, dtype_bytes=8) + 3 * allocated(seqs, dtype_bytes=8)
    long_lora = allocated(t, dtype_bytes=8) if rules.long_lora_indices is not False else 0

    def meta(rows: int) -> int:
        return 2 * allocated(rows, dtype_bytes=4) + 2 * allocated(n + 1, dtype_bytes=4) + allocated(n + 2, dtype_bytes=4)

    return base + long_lora + meta(t) + meta(seqs if rules.prompt_meta_by_seqs else t)


def shrink_buffer_bytes(lora: LoraConfig, tokens: int) -> int:
    """PunicaWrapperGPU.add_lora_linear: torch.empty((n_slices, tokens, r), float32); the largest is qkv_proj's
    (3 slices); r is lora_b's last dimension, the full rank."""
    return allocated(3, tokens, lora.max_lora_rank, dtype_bytes=4)


def lora_graph_bytes(spec: ModelSpec, serving: ServingConfig, sm100: bool, runner: str, cost: GraphCaptureCost = H200_CAPTURE) -> tuple[int, int]:
    """(bytes, graphs) of the second set of graphs vLLM captures with LoRA active, at `cost`'s per-graph costs (the
    GPU's: capacity/memory/unified_memory.py capture_cost): MRV2 measures every PIECEWISE graph (pieces x one piece's
    cost) and extrapolates FULL graphs at max(s2, 1 MiB); the V1 runner charges max(per size, 1 MiB) for both modes
    (capacity/memory/cuda_graphs.py)."""
    estimate = graph_estimate(spec, serving, sm100, runner, cost)
    if estimate is None:
        return 0, 0
    pieces = pieces_per_size(spec.decoder)
    full_graph = max(cost.full_graph_bytes(spec.decoder), MIN_GRAPH_BYTES)
    piece_bytes = pieces * cost.piece_graph_bytes
    if runner != "MRV2":
        piece_bytes = max(piece_bytes, MIN_GRAPH_BYTES)
    return estimate.piecewise_sizes * piece_bytes + estimate.full_sizes * full_graph, estimate.piecewise_sizes + estimate.full_sizes


def lora_memory(
    spec: ModelSpec,
    source: ModelSource,
    serving: ServingConfig,
    sm100: bool,
    runner: str,
    rules: LoraRules,
    version: str,
    logits_cost: Callable[[int], int],
    graph_cost: GraphCaptureCost = H200_CAPTURE,
) -> LoraMemory:
    """LoRA's memory on rank 0 under `serving.lora` (which must be set), as vLLM `version` allocates it (`rules`).
    `logits_cost(columns)`: what that many more logit columns cost the sampler (the planner's sampler form), for the
    extra vocabulary before 0.12; `graph_cost`: what one CUDA graph costs on the GPU (the plan's graphs use the same)."""
    lora = serving.lora
    if lora is None:
        raise ValueError("lora_memory needs serving.lora")
    s = lora_shapes(spec, source, rules, version)
    extra = extra_vocab(s, lora, rules, version)
    tp, model_bytes = serving.tensor_parallel_size, serving.dtype_bytes
    if lora.max_lora_rank not in rules.ranks:
        raise BadInput(f"--max-lora-rank {lora.max_lora_rank}: vLLM {version} accepts only {', '.join(map(str, rules.ranks))}")
    limit = rules.lm_head_vocab_limit  # LogitsProcessorWithLoRA.create_lora_weights: "vocab size must be <= ..."
    if s.embeddings and s.vocab_size + extra > limit:
        raise BadInput(f"--enable-lora: {spec.name}'s vocabulary of {s.vocab_size + extra:,} is above {limit:,}, which vLLM {version}'s LoRA LM head refuses")
    per_layer = layer_bytes(s, lora, tp)
    # each size captured once, with LoRA active: MRV2 before 0.24, the V1 runner before 0.12
    one_set = not (rules.mrv2_lora_graphs if runner == "MRV2" else rules.v1_lora_graphs)
    graphs, n_extra = (0, 0) if serving.enforce_eager or one_set else lora_graph_bytes(spec, serving, sm100, runner, graph_cost)
    return LoraMemory(
        per_layer_bytes=per_layer,
        layers_bytes=per_layer * s.num_layers,
        embedding_bytes=embedding_bytes(s, lora, extra, model_bytes) if s.embeddings else 0,
        lm_head_bytes=lm_head_bytes(s, lora, tp, extra, model_bytes) if s.embeddings else 0,
        punica_bytes=punica_bytes(lora, serving.max_num_batched_tokens, serving.max_num_seqs, rules),
        shrink_buffer_bytes=shrink_buffer_bytes(lora, serving.max_num_batched_tokens),
        graph_bytes=graphs,
        extra_graphs=n_extra,
        one_graph_set=one_set and not serving.enforce_eager,
        extra_vocab=extra,
        extra_vocab_weights_bytes=extra_vocab_weights_bytes(s, lora, tp, extra, model_bytes) if extra else 0,
        extra_logits_bytes=logits_cost(extra) if extra else 0,
        long_lora_unknown=rules.long_lora_indices is None,
    )


def extra_vocab(s: LoraShapes, lora: LoraConfig, rules: LoraRules, version: str) -> int:
    """The extra vocabulary rows per adapter vLLM `version` builds for the model (0 from 0.12, or where the class wraps
    no embedding); BadInput for a --lora-extra-vocab-size the version does not take."""
    given = lora.extra_vocab_size
    if given is not None and not rules.extra_vocab_choices:
        raise BadInput(f"--lora-extra-vocab-size {given}: vLLM {version} has no such option (removed in 0.12.0: its LoRA adapters add no vocabulary); drop it")
    if given is not None and given not in rules.extra_vocab_choices:
        raise BadInput(f"--lora-extra-vocab-size {given}: vLLM {version} accepts only {' or '.join(map(str, rules.extra_vocab_choices))}")
    return (rules.extra_vocab if given is None else given) if s.embeddings else 0


def lora_terms(memory: LoraMemory, lora: LoraConfig, layers: int, version: str, graphs_in_budget: bool = True) -> dict[str, MemoryTerm]:
    """The plan's LoRA terms: the buffers (in the model load), the rows an extra vocabulary adds to the model (before
    0.12), the shrink buffer (activation peak), the LoRA graphs: 0 where the version captures its graphs after sizing
    the KV cache (`graphs_in_budget` False), as the plan's own graphs."""
    shape = f"{plural(lora.max_loras, 'adapter')} of rank {lora.max_lora_rank} in {lora.lora_dtype}" + (", fully sharded" if lora.fully_sharded_loras else "")
    lm = f" + embedding {memory.embedding_bytes:,} + LM head {memory.lm_head_bytes:,}" if memory.embedding_bytes else " (the class wraps no embedding or LM head)"
    vocab = f" with {memory.extra_vocab} extra vocabulary rows per adapter" if memory.extra_vocab else ""
    long_lora = "; _long_lora_indices (0.8-0.9 only, 8 B a token) counted: give the release to know" if memory.long_lora_unknown else ""
    terms = {
        # LoRAModelManager._create_lora_modules -> create_lora_weights, _init_punica_wrapper (inside "Model loading took")
        "lora_buffers": MemoryTerm(
            memory.buffers_bytes,
            ESTIMATED if memory.long_lora_unknown else EXACT,
            f"vLLM {version} stacked LoRA buffers, {shape}{vocab}: {layers} layers x {memory.per_layer_bytes:,} B (qkv 3 slices, o, gate_up 2 slices, down)"
            f"{lm} + punica metadata {memory.punica_bytes:,}; each allocation rounded to 512 B; counted in 'Model loading took'{long_lora}",
        ),
    }
    if memory.extra_vocab:
        # llama.py before 0.12: VocabParallelEmbedding(vocab + max_loras x extra), ParallelLMHead(vocab + extra, padding 256)
        terms["lora_extra_vocabulary"] = MemoryTerm(
            memory.extra_vocab_weights_bytes,
            EXACT,
            f"vLLM {version} builds embed_tokens with {lora.max_loras} x {memory.extra_vocab} more rows and the LM head padded to 256 plus "
            f"{memory.extra_vocab} (lora_extra_vocab_size); counted in 'Model loading took'",
        )
    # PunicaWrapperGPU.add_lora_linear: the float32 (n_slices, tokens, rank) shrink buffer of the layer running
    wider = f" + {memory.extra_logits_bytes:,} B for the sampler's {memory.extra_vocab} extra logit columns" if memory.extra_logits_bytes else ""
    terms["lora_activations"] = MemoryTerm(
        memory.shrink_buffer_bytes + memory.extra_logits_bytes,
        ESTIMATED,
        f"the profile run's largest LoRA shrink buffer (qkv_proj: 3 x max_num_batched_tokens x rank x 4 B){wider}, taken as on top of the activation peak",
    )
    # CudagraphDispatcher._get_lora_cases / MRV2 get_lora_capture_cases (0.24+): [0, max_loras + 1]
    again = f"{plural(memory.extra_graphs, 'graph')} captured again with LoRA active (cudagraph_specialize_lora)"
    terms["lora_cuda_graphs"] = MemoryTerm(
        memory.graph_bytes if graphs_in_budget else 0,
        ESTIMATED if memory.extra_graphs and graphs_in_budget else EXACT,
        f"{again}, at capacity's per-graph capture costs (LoRA's graphs hold more kernels: likely low)"
        if memory.extra_graphs and graphs_in_budget
        else f"{again}, after the KV cache is sized: vLLM {version} sets no memory aside for them (they come out of the "
        f"utilization headroom); capacity's estimate would be {memory.graph_bytes:,} B"
        if memory.extra_graphs
        else f"vLLM {version}'s runner captures each size once, with LoRA active: no second set"
        if memory.one_graph_set
        else "no CUDA graphs",
    )
    return terms
