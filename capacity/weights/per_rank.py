"""Weights per rank, as vLLM 0.33's parallel layers lay them out (pure Python, no torch).

Every stored tensor of a model (from safetensors headers, or from the parameter list of the real
architecture built on the meta device) is classified by its name into the parallel layer vLLM loads
it into, and that layer's rule gives the bytes one tensor-parallel rank holds:

- column-parallel (q/k/v, gate/up, fc1: `ColumnParallelLinear`, `QKVParallelLinear`,
  `MergedColumnParallelLinear`): the output dimension is split by TP, biases and per-channel
  scales with it; a K/V projection with fewer KV heads than TP keeps one head per rank
  (`QKVParallelLinear`: num_kv_heads = 1, num_kv_head_replicas = tp / total_num_kv_heads);
- row-parallel (o_proj, down_proj, fc2: `RowParallelLinear`): the input dimension is split, its bias and
  per-output-channel scales are whole on every rank;
- vocab-parallel (embed_tokens, lm_head: `VocabParallelEmbedding`, `ParallelLMHead`): rows padded to a
  multiple of 64 (`pad_vocab_size`, DEFAULT_VOCAB_PADDING_SIZE), then divided by TP; a tied LM head is
  the embedding itself (`tie_weights`), counted once;
- MoE experts (`FusedMoE`): all experts resident on every rank, each expert's intermediate size split
  by TP; with --enable-expert-parallel the experts are divided instead (`determine_expert_map`: the
  first `num_experts % ep` ranks hold one more, rank 0 is the largest) and not split;
- state-space mixers (Mamba-2 `MambaMixer2`, the gated delta net of Qwen3-Next / Qwen3.5): conv1d column-parallel,
  the per-head A / A_log / D / dt_bias divided by TP (A and A_log in float32), Mamba-2's gated norm divided;
- replicated: norms, convolutions, position and patch embeddings, routers, scalars, and anything no
  rule names (counted whole, and listed as unclassified).

Quantized checkpoints: tensors stored in a quantized format keep their stored bytes (headers: exact);
a config with a `quantization_config` but no headers has its linear layers' stored tensors worked out
per scheme (fp8, AWQ, GPTQ, compressed-tensors, NVFP4, MXFP4), and an unknown scheme is refused.
gpt-oss's MXFP4 experts are not the checkpoint's tensors but what vLLM's MoE method allocates for the GPU's
backend (capacity/weights/mxfp4.py): `gpt_oss_expert_tensors` puts them in place of the stored ones.
"""

from __future__ import annotations

import fnmatch
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from capacity.errors import BadInput
from capacity.weights.mxfp4 import GptOssMxfp4

DEFAULT_VOCAB_PADDING_SIZE = 64  # vllm/model_executor/layers/vocab_parallel_embedding.py

# Bits per element of the safetensors dtype names.
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "E8M0": 8, "F8_E4M3FN": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64,
    "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}  # fmt: skip
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
MODEL_DTYPE = "MODEL"  # a dense tensor loaded in the serving dtype (meta-build parameters)

# Tensor names (last component) of quantization metadata: kept in their stored dtype.
QUANT_AUX = re.compile(
    r"(scales?|scale_inv|scale_2|zero_point|zeros|qzeros|g_idx|global_scale|input_scale|weight_shape|k_scale|v_scale|_blocks)$"
)


def pad_vocab_size(vocab_size: int, pad_to: int = DEFAULT_VOCAB_PADDING_SIZE) -> int:
    """vLLM pad_vocab_size: round the vocabulary up to a multiple of pad_to."""
    return -(-vocab_size // pad_to) * pad_to


@dataclass(frozen=True)
class StoredTensor:
    """One parameter as it is stored: name, shape and dtype (MODEL_DTYPE: loaded in the serving dtype)."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def module(self) -> str:
        return self.name.rsplit(".", 1)[0] if "." in self.name else ""

    @property
    def leaf(self) -> str:
        """The parameter's own name: weight, bias, qweight, scales, ..."""
        return self.name.rsplit(".", 1)[-1]

    @property
    def layer(self) -> str:
        """The module's own name: q_proj, fc1, embed_tokens, ..."""
        return self.module.rsplit(".", 1)[-1]

    def loaded_bytes(self, model_dtype_bytes: int) -> int:
        """Bytes once vLLM loaded it: dense float tensors in the model dtype, quantized ones as stored."""
        if self.dtype == MODEL_DTYPE or (self.dtype in FLOAT_DTYPES and not QUANT_AUX.search(self.leaf)):
            return self.numel * model_dtype_bytes
        bits = DTYPE_BITS.get(self.dtype)
        if bits is None:
            raise BadInput(f"tensor {self.name}: safetensors dtype {self.dtype!r} is not known to capacity")
        return -(-self.numel * bits // 8)


@dataclass(frozen=True)
class WeightLayout:
    """What the parallel rules need from the config (totals before tensor parallelism)."""

    num_attention_heads: int  # decoder query heads
    num_kv_heads: int  # decoder KV heads
    head_size: int
    num_experts: int = 0  # routed experts per MoE layer (0: dense)
    tie_word_embeddings: bool = False
    replicated_modules: tuple[str, ...] = ()  # module names vLLM builds unsharded for this family (regexes)
    # module names (regexes) the family says vLLM builds as ColumnParallelLinear / RowParallelLinear, where the
    # name alone does not tell (LLaVA's multi_modal_projector.linear_1 / linear_2; other models' are nn.Linear)
    column_modules: tuple[str, ...] = ()
    row_modules: tuple[str, ...] = ()
    # Layers (regexes) whose bias vLLM allocates although the checkpoint has none: a fused qkv_proj built with
    # bias=True allocates the K part too (Whisper's k_proj has no bias; vLLM's QKVParallelLinear does).
    added_biases: tuple[str, ...] = ()
    mxfp4: GptOssMxfp4 | None = None  # gpt-oss MXFP4 experts: sizes and the GPU's MoE backend (capacity/weights/mxfp4.py)
    # (KV heads, head size) of every decoder attention kind, when they differ (Gemma-4's sliding and full layers);
    # a K/V projection's width picks its kind's KV heads. () = num_kv_heads x head_size only.
    kv_shapes: tuple[tuple[int, int], ...] = ()

    def kv_heads_of_width(self, width: int | None) -> int:
        """KV heads of the attention kind whose K (or fused K+V) projection is `width` wide (num_kv_heads if none)."""
        for fused in (1, 2):  # a K (or V) projection's own width first, then a fused K+V one
            for heads, size in self.kv_shapes:
                if width == fused * heads * size:
                    return heads
        return self.num_kv_heads


@dataclass(frozen=True)
class Parallelism:
    """The knobs that divide weights: tensor_parallel_size, --enable-expert-parallel, the model dtype."""

    tensor_parallel_size: int = 1
    enable_expert_parallel: bool = False
    dtype_bytes: int = 2
    rank: int = 0  # which rank (only expert parallelism places unequal shares; rank 0 holds the most)


# --- parallel kinds ------------------------------------------------------------------------------------


def split_bytes(full: int, dim: int, parts: int) -> int:
    """Bytes of one rank's share when a tensor of `full` bytes is split along a dimension of size `dim`."""
    return full * -(-dim // parts) // dim


class ParallelKind(ABC):
    """How one vLLM layer kind lays a tensor out on a rank."""

    name: str

    def loaded_bytes(self, tensor: StoredTensor, par: Parallelism) -> int:
        """The whole tensor's bytes once loaded (dense floats in the model dtype, quantized ones as stored)."""
        return tensor.loaded_bytes(par.dtype_bytes)

    @abstractmethod
    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int: ...


def _out_axis(t: StoredTensor) -> int | None:
    """The output-features axis: AWQ/GPTQ store qweight/qzeros/scales as [in, out]; the rest as [out, in]."""
    if len(t.shape) == 0 or t.leaf == "g_idx":
        return None
    if t.leaf in ("qweight", "qzeros", "scales") and len(t.shape) == 2:
        return 1
    return 0


def _in_axis(t: StoredTensor) -> int | None:
    if t.leaf == "g_idx" and len(t.shape) == 1:
        return 0
    if len(t.shape) < 2:
        return None  # biases and per-output-channel vectors
    if t.leaf in ("qweight", "qzeros", "scales"):
        return 0
    return 1


class Replicated(ParallelKind):
    name = "replicated"

    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int:
        return full


class Unclassified(Replicated):
    """No rule names the tensor's layer: counted whole on every rank (an upper bound)."""

    name = "unclassified (counted replicated)"


class ReplicatedLinear(Replicated):
    """vLLM ReplicatedLinear: a linear layer whole on every rank (MLA's q_a_proj / kv_a_proj_with_mqa); quantized
    like the parallel ones."""

    name = "replicated-linear"


class ColumnParallel(ParallelKind):
    """ColumnParallelLinear: output features divided by TP (vLLM divide(output_size, tp_size))."""

    name = "column-parallel"

    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int:
        axis = _out_axis(tensor)
        if axis is None or tensor.numel <= 1 or tensor.shape[axis] <= 1:
            return full
        return split_bytes(full, tensor.shape[axis], par.tensor_parallel_size)


class Float32PerHead(ColumnParallel):
    """A per-head parameter vLLM allocates in float32 whatever the model dtype, divided by TP: MambaMixer2's A
    (the checkpoint's A_log, `torch.empty(num_heads // tp, dtype=torch.float32)`) and the gated delta net's A_log."""

    name = "per-head float32 (column-parallel)"

    def loaded_bytes(self, tensor: StoredTensor, par: Parallelism) -> int:
        return tensor.numel * 4


class KVProjection(ColumnParallel):
    """The K or V part of QKVParallelLinear: heads divided by TP, one head per rank when KV heads < TP."""

    name = "kv-projection"

    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int:
        tp, kv = par.tensor_parallel_size, layout.kv_heads_of_width(_logical_out(tensor))
        if tp <= kv or tensor.numel <= 1:
            return super().rank_bytes(tensor, full, layout, par)
        return full // kv  # num_kv_heads = 1 per rank, replicated tp / total_num_kv_heads times


class FusedQKV(ColumnParallel):
    """A fused q/k/v tensor of a GQA decoder: q heads / TP + 2 x max(kv / TP, 1) heads per rank."""

    name = "qkv-fused"

    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int:
        tp, q, kv = par.tensor_parallel_size, layout.num_attention_heads, layout.num_kv_heads
        if tp <= kv or tensor.numel <= 1:
            return super().rank_bytes(tensor, full, layout, par)
        return full * (q // tp + 2) // (q + 2 * kv)


class RowParallel(ParallelKind):
    """RowParallelLinear: input features divided by TP; bias and per-output vectors whole on every rank."""

    name = "row-parallel"

    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int:
        axis = _in_axis(tensor)
        if axis is None or tensor.shape[axis] <= 1:
            return full
        return split_bytes(full, tensor.shape[axis], par.tensor_parallel_size)


class VocabParallel(ParallelKind):
    """VocabParallelEmbedding / ParallelLMHead: rows padded to a multiple of 64, then divided by TP."""

    name = "vocab-parallel"

    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int:
        if not tensor.shape:
            return full
        rows = tensor.shape[0]
        per_rank = pad_vocab_size(rows) // par.tensor_parallel_size  # num_embeddings_per_partition
        return full * per_rank // rows


class TiedHead(ParallelKind):
    """An LM head tied to the embedding: vLLM's tie_weights points it at the embedding, no bytes of its own."""

    name = "tied (counted in the embedding)"

    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int:
        return 0


class Experts(ParallelKind):
    """FusedMoE expert weights: every expert resident, each split by TP; with EP, whole experts divided."""

    name = "moe-experts"

    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int:
        tp = par.tensor_parallel_size
        experts = layout.num_experts
        if tensor.numel <= 1:
            return full
        if par.enable_expert_parallel and tp > 1:
            if not experts:
                raise BadInput("--enable-expert-parallel: the config names no number of experts (num_experts / n_routed_experts / num_local_experts)")
            # determine_expert_map ("linear"): base = E // ep, the first E % ep ranks hold one more, rank r
            # starting at r x base + min(r, E % ep): a checkpoint's per-expert tensor is there whole or not at
            # all, a fused [E, ...] tensor keeps local of its E slices.
            base, extra, r = experts // tp, experts % tp, par.rank
            local = base + (1 if r < extra else 0)
            start = r * base + min(r, extra)
            index = _EXPERT_INDEX.search(tensor.name)
            if index is not None:
                return full if start <= int(index.group(1)) < start + local else 0
            return full * local // experts
        return full // tp  # intermediate_size_per_partition = intermediate_size // tp_size


class Mxfp4Experts(ParallelKind):
    """gpt-oss's MXFP4 expert tensors as GptOssMxfp4MoEMethod.create_weights allocates them on the rank: the
    tensor's leaf names which (w13_weight, w13_weight_scale, w2_weight, w2_weight_scale, w13_bias, w2_bias)."""

    name = "moe-experts (mxfp4, as vLLM creates them)"

    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int:
        assert layout.mxfp4 is not None
        return layout.mxfp4.shapes(par.tensor_parallel_size, par.enable_expert_parallel, par.rank).created()[tensor.leaf]


class Mxfp4Conversion(ParallelKind):
    """What one MoE layer's load-time conversion to the backend's kernel format adds (capacity/weights/mxfp4.py)."""

    name = "mxfp4 kernel format (load-time conversion)"

    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int:
        assert layout.mxfp4 is not None
        return layout.mxfp4.backend.conversion_bytes(layout.mxfp4.shapes(par.tensor_parallel_size, par.enable_expert_parallel, par.rank))


# --- the classifier --------------------------------------------------------------------------------------

REPLICATED = Replicated()
REPLICATED_LINEAR = ReplicatedLinear()
UNCLASSIFIED = Unclassified()
COLUMN = ColumnParallel()
FLOAT32_PER_HEAD = Float32PerHead()
KV = KVProjection()
QKV = FusedQKV()
ROW = RowParallel()
VOCAB = VocabParallel()
TIED = TiedHead()
EXPERTS = Experts()
MXFP4_EXPERTS = Mxfp4Experts()
MXFP4_CONVERSION = Mxfp4Conversion()
MXFP4_EXPERT_LEAVES = ("w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale", "w13_bias", "w2_bias")
MXFP4_CONVERSION_LEAF = "kernel_format"

# Layers (module names) and the vLLM layer they load into.
_COLUMN_LAYERS = {
    "q_proj", "query", "q", "q_b_proj", "kv_b_proj", "gate_proj", "up_proj", "gate_up_proj", "fc1", "wi", "wi_0",
    "wi_1", "c_fc", "w1", "w3", "sum_proj", "linear_fc1", "in_proj", "c_attn", "dense_h_to_4h",
    "per_layer_model_projection",  # Gemma-4 / Gemma-3n: ColumnParallelLinear(hidden, layers x per-layer width)
    # gated delta net (qwen_gdn_linear_attn.py): MergedColumnParallelLinear in_proj_qkvz / in_proj_ba (Qwen3-Next),
    # in_proj_qkv / in_proj_z / in_proj_b / in_proj_a as Qwen3.5 stores them
    "in_proj_qkvz", "in_proj_ba", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
}  # fmt: skip
_KV_LAYERS = {"k_proj", "v_proj", "key", "value", "k", "v", "kv_proj"}
_QKV_LAYERS = {"qkv_proj", "qkv", "query_key_value", "Wqkv"}
_ROW_LAYERS = {"o_proj", "out_proj", "down_proj", "fc2", "wo", "o", "proj", "c_proj", "w2", "linear_fc2", "dense_4h_to_h"}
_VOCAB_LAYERS = {"embed_tokens", "word_embeddings", "shared", "embed_in", "wte", "tok_embeddings", "embed_tokens_per_layer"}
_HEAD_LAYERS = {"lm_head", "embed_out", "output", "proj_out"}
# Path parts vLLM always builds unsharded: norms, convolutions, position/patch embeddings, MoE routers.
_REPLICATED_PATH = re.compile(
    r"(norm|layernorm|ln_|conv|position|pos_embed|tile_embedding|patch_embed|patch_projection|image_projection|"
    r"relative_attention_bias|layer_scale|cls_|register_token|class_embedding|mm_input_projection)",
    re.IGNORECASE,
)
_ROUTER_LAYERS = {"gate", "router", "e_score_correction_bias"}
# ReplicatedLinear: deepseek_v2.py's q_a_proj / kv_a_proj_with_mqa, qwen3_next.py's shared_expert_gate (hidden -> 1)
_REPLICATED_LINEAR_LAYERS = {"q_a_proj", "kv_a_proj_with_mqa", "fused_qkv_a_proj", "shared_expert_gate"}
_EXPERT_PATH = re.compile(r"\.experts\.")
_EXPERT_INDEX = re.compile(r"\.experts\.(\d+)\.")
_MERGER_MLP = re.compile(r"merger\.mlp\.(\d+)$")  # Qwen2-VL's patch merger: mlp.0 column, mlp.2 row
# LFM2's gated short convolution (transformers' Lfm2ShortConv at `<layer>.conv`; vLLM ShortConv): conv
# (ColumnParallelLinear conv_L_cache -> conv_dim) and in_proj (MergedColumnParallelLinear, 3 x conv_dim) column, out_proj row.
_SHORT_CONV = re.compile(r"\.conv\.(conv|in_proj|out_proj)$")
# State-space mixers: Mamba-2 (vLLM MambaMixer2, transformers `<layer>.mixer`) and the gated delta net (vLLM
# qwen_gdn_linear_attn.py, `<layer>.linear_attn`). conv1d is a ColumnParallelLinear (conv channels / TP, its bias
# too); the per-head A / A_log / D / dt_bias are divided by TP, A and A_log in float32; Mamba-2's gated norm
# (Mixer2RMSNormGated) holds intermediate / TP, the gated delta net's (head_v_dim wide) is whole.
_STATE_MIXER = re.compile(r"\.(mixer|linear_attn)$")
_STATE_HEADS = {"A", "A_log", "D", "dt_bias"}
# Nemotron-H's embedding (vLLM nemotron_h.py maps `embeddings` to its VocabParallelEmbedding `embed_tokens`)
_HYBRID_EMBEDDING = re.compile(r"^(model|backbone)\.embeddings\.weight$")


def _state_mixer_kind(tensor: StoredTensor) -> ParallelKind | None:
    """The parallel kind of a Mamba-2 / gated-delta-net mixer's own tensors (conv1d, per-head scalars, gated norm)."""
    if tensor.leaf in _STATE_HEADS and _STATE_MIXER.search(tensor.module):
        return FLOAT32_PER_HEAD if tensor.leaf in ("A", "A_log") else COLUMN
    parent, _, layer = tensor.module.rpartition(".")
    if layer == "conv1d" and _STATE_MIXER.search(parent):
        return COLUMN
    if layer == "norm" and parent.endswith(".mixer"):  # Mamba-2's gated norm; the gated delta net's is whole
        return COLUMN
    return None


def classify(tensor: StoredTensor, layout: WeightLayout) -> ParallelKind:
    """The vLLM parallel layer a stored tensor is loaded into, from its name."""
    module, layer = tensor.module, tensor.layer
    if any(re.search(p, module) for p in layout.replicated_modules):
        return REPLICATED
    if any(re.search(p, module) for p in layout.column_modules):
        return COLUMN
    if any(re.search(p, module) for p in layout.row_modules):
        return ROW
    if layout.mxfp4 is not None and module.endswith(".experts"):
        if tensor.leaf == MXFP4_CONVERSION_LEAF:
            return MXFP4_CONVERSION
        if tensor.leaf in MXFP4_EXPERT_LEAVES:
            return MXFP4_EXPERTS
    if _EXPERT_PATH.search(tensor.name + ".") and "shared_expert" not in module:
        return EXPERTS
    if tensor.leaf == "sinks":
        return COLUMN  # make_attention_sink(num_attention_heads // tp): one value per local head
    if layer in _HEAD_LAYERS:
        return TIED if layout.tie_word_embeddings else VOCAB
    if layer in _VOCAB_LAYERS or _HYBRID_EMBEDDING.match(tensor.name):
        return VOCAB
    short_conv = _SHORT_CONV.search(module)
    if short_conv:
        return ROW if short_conv.group(1) == "out_proj" else COLUMN
    state = _state_mixer_kind(tensor)
    if state is not None:
        return state
    if _REPLICATED_PATH.search(tensor.name) or layer in _ROUTER_LAYERS or tensor.numel <= 1:
        return REPLICATED
    if layer in _REPLICATED_LINEAR_LAYERS:
        return REPLICATED_LINEAR
    merger = _MERGER_MLP.search(module)
    if merger:
        return COLUMN if merger.group(1) == "0" else ROW
    if layer in _KV_LAYERS:
        return KV if _decoder_kv_width(tensor, layout) else COLUMN
    if layer in _QKV_LAYERS:
        return QKV if _decoder_qkv_width(tensor, layout) else COLUMN
    if layer in _COLUMN_LAYERS:
        return COLUMN
    if layer in _ROW_LAYERS:
        return ROW
    if len(tensor.shape) <= 1:
        return REPLICATED
    return UNCLASSIFIED


def _logical_out(t: StoredTensor) -> int | None:
    axis = _out_axis(t)
    if axis is None:
        return None
    size = t.shape[axis]
    if t.leaf == "qzeros":
        return None  # packed along out: not the logical width
    if t.leaf == "qweight" and t.dtype in ("I32", "U32"):
        return None  # AWQ packs out; GPTQ does not: the scales carry the width
    return size


def _decoder_kv_width(t: StoredTensor, layout: WeightLayout) -> bool:
    """A K or V projection of the GQA decoder (its width is kv_heads x head_size), not of an MHA encoder."""
    out = _logical_out(t)
    widths = {w for heads, size in ((layout.num_kv_heads, layout.head_size), *layout.kv_shapes) for w in (heads * size, 2 * heads * size)}
    return out is None or out in widths


def _decoder_qkv_width(t: StoredTensor, layout: WeightLayout) -> bool:
    out = _logical_out(t)
    return out == (layout.num_attention_heads + 2 * layout.num_kv_heads) * layout.head_size


# --- the breakdown -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KindBytes:
    """The bytes of one parallel kind: the whole model's and one rank's."""

    kind: str
    tensors: int
    full_bytes: int
    rank_bytes: int


@dataclass(frozen=True)
class WeightsBreakdown:
    """Weights of one rank (rank 0, the largest, unless asked), by parallel kind, as vLLM 0.33 lays them out."""

    tensor_parallel_size: int
    enable_expert_parallel: bool
    kinds: tuple[KindBytes, ...]
    source: str  # where the tensor list came from
    quantization: str  # "none", or the scheme and how its bytes were obtained
    unclassified: tuple[str, ...] = field(default=())  # tensor names no rule named (counted replicated)
    rank: int = 0
    # A checkpoint's stored bytes known without tensor names (a header summary): the kinds' rank/full share of it.
    checkpoint_bytes: int = 0
    # The quantized tensors are what vLLM's quantization method allocates and its kernel leaves for the planned GPU
    # (AWQ: capacity/weights/awq.py), not only the checkpoint's format.
    quantized_layout_modelled: bool = False

    @property
    def total_bytes(self) -> int:
        """Bytes on one rank."""
        rank = sum(k.rank_bytes for k in self.kinds)
        if self.checkpoint_bytes and self.full_bytes:
            return self.checkpoint_bytes * rank // self.full_bytes
        return rank

    @property
    def full_bytes(self) -> int:
        """Bytes of the whole model (TP 1)."""
        return sum(k.full_bytes for k in self.kinds)

    def bytes_of(self, kind: str) -> int:
        return sum(k.rank_bytes for k in self.kinds if k.kind == kind)

    def describe(self) -> str:
        parts = ", ".join(f"{k.kind} {k.rank_bytes:,} B" for k in self.kinds if k.full_bytes or k.rank_bytes)
        ep = " + expert parallel" if self.enable_expert_parallel else ""
        return f"per rank at TP {self.tensor_parallel_size}{ep} as vLLM's parallel layers lay them out: {parts}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(total_bytes=self.total_bytes, full_bytes=self.full_bytes)
        return out


def with_added_biases(tensors: Iterable[StoredTensor], layout: WeightLayout) -> list[StoredTensor]:
    """The tensors plus the biases vLLM allocates for `layout.added_biases` layers that store none."""
    tensors = list(tensors)
    if not layout.added_biases:
        return tensors
    names = {t.name for t in tensors}
    added = [
        StoredTensor(f"{t.module}.bias", (t.shape[0],), MODEL_DTYPE)
        for t in tensors
        if t.leaf == "weight" and t.shape and f"{t.module}.bias" not in names and any(re.search(p, t.module) for p in layout.added_biases)
    ]
    return tensors + added


def weights_per_rank(tensors: Iterable[StoredTensor], layout: WeightLayout, par: Parallelism, *, source: str = "", quantization: str = "none") -> WeightsBreakdown:
    """Bytes one rank holds, per parallel kind (vLLM 0.33 parallel layers; rank 0 when ranks differ)."""
    tensors = with_added_biases(tensors, layout)
    sums: dict[str, list[int]] = {}
    order: list[str] = []
    unclassified: list[str] = []
    for t in tensors:
        kind = classify(t, layout)
        full = kind.loaded_bytes(t, par)
        rank = kind.rank_bytes(t, full, layout, par)  # at TP 1 too: vocab padding, tied heads
        if kind.name not in sums:
            sums[kind.name] = [0, 0, 0]
            order.append(kind.name)
        entry = sums[kind.name]
        entry[0] += 1
        entry[1] += 0 if kind is TIED else full
        entry[2] += rank
        if kind is UNCLASSIFIED:
            unclassified.append(t.name)
    kinds = tuple(KindBytes(k, sums[k][0], sums[k][1], sums[k][2]) for k in order)
    return WeightsBreakdown(par.tensor_parallel_size, par.enable_expert_parallel, kinds, source, quantization, tuple(unclassified), par.rank)


# --- quantization_config: the stored tensors of each scheme -------------------------------------------


class QuantScheme(ABC):
    """A checkpoint format: which tensors one quantized linear layer stores, worked out from its definition."""

    name: str
    ignore: tuple[str, ...] = ()  # module names or `re:` patterns left unquantized

    @abstractmethod
    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        """The tensors of a linear layer of `out` x `inp` (with leading expert dims `lead`)."""

    def applies_to(self, module: str) -> bool:
        """False for a module the ignore list names: `re:` regexes (compressed-tensors), module paths or their
        prefixes with `*` wildcards (modules_to_not_convert, exclude_modules), or a bare module name (lm_head)."""
        for pattern in self.ignore:
            if pattern.startswith("re:"):
                if re.match(pattern[3:], module):
                    return False
            elif fnmatch.fnmatchcase(module, pattern) or fnmatch.fnmatchcase(module, pattern + ".*") or pattern in module.split("."):
                return False
        return True


def _t(module: str, leaf: str, shape: Sequence[int], dtype: str) -> StoredTensor:
    return StoredTensor(f"{module}.{leaf}", tuple(int(s) for s in shape), dtype)


def _groups(inp: int, group_size: int) -> int:
    return 1 if group_size in (-1, 0) else -(-inp // group_size)


@dataclass(frozen=True)
class Fp8Scheme(QuantScheme):
    """vLLM Fp8LinearMethod: fp8 weight; fp32 per-tensor scale, or fp32 block scales [out/b0, in/b1]
    (`weight_scale_inv`); a static activation scheme adds an fp32 input scale."""

    block: tuple[int, int] | None = None
    static_activations: bool = False
    ignore: tuple[str, ...] = ()
    name: str = "fp8"

    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        out_t = [_t(module, "weight", (*lead, out, inp), "F8_E4M3")]
        if self.block:
            out_t.append(_t(module, "weight_scale_inv", (*lead, -(-out // self.block[0]), -(-inp // self.block[1])), "F32"))
        else:
            out_t.append(_t(module, "weight_scale", (*lead, 1) if lead else (), "F32"))
        if self.static_activations:
            out_t.append(_t(module, "input_scale", (*lead, 1) if lead else (), "F32"))
        return out_t


@dataclass(frozen=True)
class AwqScheme(QuantScheme):
    """AutoAWQ (vLLM AWQLinearMethod): qweight int32 [in, out / (32 / bits)], qzeros int32
    [in / group, out / (32 / bits)], scales fp16 [in / group, out]."""

    bits: int = 4
    group_size: int = 128
    ignore: tuple[str, ...] = ()
    name: str = "awq"

    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        pack = 32 // self.bits
        g = _groups(inp, self.group_size)
        return [
            _t(module, "qweight", (*lead, inp, out // pack), "I32"),
            _t(module, "qzeros", (*lead, g, out // pack), "I32"),
            _t(module, "scales", (*lead, g, out), "F16"),
        ]


@dataclass(frozen=True)
class GptqScheme(QuantScheme):
    """AutoGPTQ (vLLM GPTQ / gptq_marlin): qweight int32 [in / (32 / bits), out], g_idx int32 [in],
    qzeros int32 [in / group, out / (32 / bits)], scales fp16 [in / group, out]."""

    bits: int = 4
    group_size: int = 128
    ignore: tuple[str, ...] = ()
    name: str = "gptq"

    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        pack = 32 // self.bits
        g = _groups(inp, self.group_size)
        return [
            _t(module, "qweight", (*lead, inp // pack, out), "I32"),
            _t(module, "g_idx", (*lead, inp), "I32"),
            _t(module, "qzeros", (*lead, g, out // pack), "I32"),
            _t(module, "scales", (*lead, g, out), "F16"),
        ]


@dataclass(frozen=True)
class PackedIntScheme(QuantScheme):
    """compressed-tensors pack-quantized (WNA16): weight_packed int32 [out, in / (32 / bits)], weight_scale
    [out, groups] in the model dtype, weight_zero_point int32 [out / (32 / bits), groups] when asymmetric,
    weight_shape int64 [2]."""

    bits: int = 4
    group_size: int = -1  # -1: channel-wise
    symmetric: bool = True
    ignore: tuple[str, ...] = ()
    name: str = "compressed-tensors pack-quantized"

    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        pack = 32 // self.bits
        g = _groups(inp, self.group_size)
        tensors = [
            _t(module, "weight_packed", (*lead, out, inp // pack), "I32"),
            _t(module, "weight_scale", (*lead, out, g), "BF16"),
            _t(module, "weight_shape", (*lead, 2), "I64"),
        ]
        if not self.symmetric:
            tensors.append(_t(module, "weight_zero_point", (*lead, out // pack, g), "I32"))
        return tensors


@dataclass(frozen=True)
class FloatQuantScheme(QuantScheme):
    """compressed-tensors float-/int-quantized (W8A8): 8-bit weight [out, in]; fp32 scale per tensor [1],
    per channel [out, 1], per group [out, in / group] or per block [out / b0, in / b1]; static input scale."""

    weight_dtype: str = "F8_E4M3"
    strategy: str = "tensor"
    group_size: int = 0
    block: tuple[int, int] | None = None
    static_activations: bool = False
    ignore: tuple[str, ...] = ()
    name: str = "compressed-tensors float-quantized"

    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        scale_shape = {
            "tensor": (1,),
            "channel": (out, 1),
            "group": (out, _groups(inp, self.group_size)),
            "block": (-(-out // self.block[0]), -(-inp // self.block[1])) if self.block else (1,),
        }[self.strategy]
        tensors = [_t(module, "weight", (*lead, out, inp), self.weight_dtype), _t(module, "weight_scale", (*lead, *scale_shape), "F32")]
        if self.static_activations:
            tensors.append(_t(module, "input_scale", (*lead, 1), "F32"))
        return tensors


@dataclass(frozen=True)
class Fp4Scheme(QuantScheme):
    """FP4 with block scales: NVFP4 (weight uint8 [out, in / 2], fp8-e4m3 scale [out, in / 16], fp32 global
    scales) and MXFP4 (uint8 [out, in / 2], e8m0 scale [out, in / 32]). modelopt names the global scales
    weight_scale_2 / input_scale, compressed-tensors weight_global_scale / input_global_scale."""

    block_size: int = 16
    scale_dtype: str = "F8_E4M3"
    global_scales: tuple[str, ...] = ("weight_scale_2", "input_scale")
    weight_name: str = "weight"
    ignore: tuple[str, ...] = ()
    name: str = "nvfp4"

    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        tensors = [
            _t(module, self.weight_name, (*lead, out, inp // 2), "U8"),
            _t(module, "weight_scale", (*lead, out, -(-inp // self.block_size)), self.scale_dtype),
        ]
        tensors += [_t(module, g, (*lead, 1) if lead else (), "F32") for g in self.global_scales]
        return tensors


def quant_scheme(config: dict[str, Any]) -> QuantScheme | None:
    """The checkpoint's quantization scheme from config.json's `quantization_config` (None: not quantized).

    Unknown methods and formats fail closed, naming the field."""
    qc = config.get("quantization_config")
    if qc is None:
        text = config.get("text_config")
        qc = text.get("quantization_config") if isinstance(text, dict) else None
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise BadInput("config.json: quantization_config must be an object")
    method = str(qc.get("quant_method", "")).lower()
    maker = _SCHEMES.get(method)
    if maker is None:
        raise BadInput(
            f"config.json: quantization_config.quant_method {qc.get('quant_method')!r} is not modelled "
            f"(capacity knows {', '.join(sorted(_SCHEMES))}): plan from a folder with its safetensors for exact bytes, or open an issue"
        )
    return maker(qc)


def _int(qc: dict[str, Any], key: str, default: int) -> int:
    value = qc.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadInput(f"config.json: quantization_config.{key} must be an integer, got {value!r}")
    return value


def _bits(qc: dict[str, Any], key: str, allowed: tuple[int, ...], method: str) -> int:
    bits = _int(qc, key, 4)
    if bits not in allowed:
        raise BadInput(f"config.json: quantization_config.{key} = {bits} is not modelled for {method} (known: {allowed})")
    return bits


def _block(qc: dict[str, Any], key: str) -> tuple[int, int] | None:
    value = qc.get(key)
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value)):
        raise BadInput(f"config.json: quantization_config.{key} must be two positive integers, got {value!r}")
    return (value[0], value[1])


def _fp8(qc: dict[str, Any]) -> QuantScheme:
    ignore = tuple(qc.get("ignored_layers") or qc.get("modules_to_not_convert") or ())
    return Fp8Scheme(block=_block(qc, "weight_block_size"), static_activations=qc.get("activation_scheme") == "static", ignore=ignore)


def _awq(qc: dict[str, Any]) -> QuantScheme:
    if qc.get("version", "gemm") not in ("gemm", "GEMM", None):
        raise BadInput(f"config.json: quantization_config.version {qc.get('version')!r} is not modelled for awq (known: gemm)")
    return AwqScheme(
        bits=_bits(qc, "bits" if "bits" in qc else "w_bit", (4,), "awq"),
        group_size=_int(qc, "group_size" if "group_size" in qc else "q_group_size", 128),
        ignore=tuple(qc.get("modules_to_not_convert") or ()),
    )


def _gptq(qc: dict[str, Any]) -> QuantScheme:
    if qc.get("dynamic"):
        raise BadInput("config.json: quantization_config.dynamic (per-module GPTQ overrides) is not modelled")
    return GptqScheme(bits=_bits(qc, "bits", (2, 4, 8), "gptq"), group_size=_int(qc, "group_size", 128), ignore=tuple(qc.get("modules_to_not_convert") or ()))


def _compressed_tensors(qc: dict[str, Any]) -> QuantScheme:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise BadInput("config.json: quantization_config.config_groups must hold exactly one group to be modelled from the config")
    group = next(iter(groups.values()))
    weights = group.get("weights") if isinstance(group, dict) else None
    if not isinstance(weights, dict):
        raise BadInput("config.json: quantization_config.config_groups.<group>.weights is missing")
    fmt = str(group.get("format") or qc.get("format") or "")
    ignore = tuple(qc.get("ignore") or ())
    bits = _int(weights, "num_bits", 8)
    wtype = weights.get("type", "int")
    strategy = str(weights.get("strategy", "tensor"))
    group_size = weights.get("group_size") or -1
    inputs = group.get("input_activations") or {}
    static = isinstance(inputs, dict) and bool(inputs) and not inputs.get("dynamic", False)
    if fmt == "nvfp4-pack-quantized" or (wtype == "float" and bits == 4 and group_size == 16):
        return Fp4Scheme(global_scales=("weight_global_scale", "input_global_scale"), weight_name="weight_packed", ignore=ignore, name="compressed-tensors nvfp4")
    if fmt == "mxfp4-pack-quantized" or (wtype == "float" and bits == 4 and group_size == 32):
        return Fp4Scheme(block_size=32, scale_dtype="U8", global_scales=(), weight_name="weight_packed", ignore=ignore, name="compressed-tensors mxfp4")
    if fmt == "pack-quantized" and wtype == "int" and bits in (4, 8):
        return PackedIntScheme(bits=bits, group_size=int(group_size), symmetric=bool(weights.get("symmetric", True)), ignore=ignore)
    if fmt in ("float-quantized", "int-quantized", "naive-quantized") and bits == 8 and strategy in ("tensor", "channel", "group", "block"):
        block = tuple(weights["block_structure"]) if strategy == "block" and weights.get("block_structure") else None
        return FloatQuantScheme(
            weight_dtype="F8_E4M3" if wtype == "float" else "I8",
            strategy=strategy,
            group_size=int(group_size),
            block=block,  # type: ignore[arg-type]
            static_activations=static,
            ignore=ignore,
        )
    raise BadInput(
        f"config.json: quantization_config (compressed-tensors) format {fmt!r}, {wtype} {bits}-bit {strategy} is not modelled: "
        "plan from a folder with its safetensors for exact bytes"
    )


def _modelopt(qc: dict[str, Any]) -> QuantScheme:
    inner = qc.get("quantization", qc)
    algo = str(inner.get("quant_algo", "")).upper()
    ignore = tuple(inner.get("exclude_modules") or ())
    if algo == "NVFP4":
        return Fp4Scheme(block_size=_int(inner, "group_size", 16), ignore=ignore, name="modelopt nvfp4")
    if algo == "FP8":
        return Fp8Scheme(static_activations=True, ignore=ignore, name="modelopt fp8")
    raise BadInput(f"config.json: quantization_config.quant_algo {algo!r} is not modelled for modelopt (known: FP8, NVFP4)")


def _mxfp4(qc: dict[str, Any]) -> QuantScheme:
    # gpt-oss: only the MoE experts are MXFP4 (uint8 blocks of 32 values + an e8m0 scale per block).
    return Fp4Scheme(block_size=32, scale_dtype="U8", global_scales=(), weight_name="weight", ignore=tuple(qc.get("modules_to_not_convert") or ()), name="mxfp4")


_SCHEMES = {
    "fp8": _fp8,
    "awq": _awq,
    "gptq": _gptq,
    "compressed-tensors": _compressed_tensors,
    "modelopt": _modelopt,
    "modelopt_fp4": _modelopt,
    "mxfp4": _mxfp4,
}

_QUANTIZED_KINDS = (COLUMN, KV, QKV, ROW, EXPERTS, REPLICATED_LINEAR)


def quantized_tensors(tensors: Iterable[StoredTensor], scheme: QuantScheme, layout: WeightLayout) -> list[StoredTensor]:
    """The dense parameter list with each quantized linear weight replaced by the scheme's stored tensors.

    Linear layers (column, row, experts) are quantized unless the scheme's ignore list names them;
    embeddings, the LM head, norms and replicated layers stay in the model dtype."""
    out: list[StoredTensor] = []
    for t in tensors:
        kind = classify(t, layout)
        is_weight = t.leaf == "weight" or (kind is EXPERTS and t.leaf.endswith("proj"))
        if kind not in _QUANTIZED_KINDS or not is_weight or len(t.shape) < 2 or not scheme.applies_to(t.module):
            out.append(t)
            continue
        if isinstance(scheme, Fp4Scheme) and scheme.name == "mxfp4" and kind is not EXPERTS:
            out.append(t)  # gpt-oss keeps attention in the model dtype
            continue
        *lead, rows, cols = t.shape
        module = t.name if t.leaf != "weight" else t.module
        out.extend(scheme.stored(module, rows, cols, tuple(lead)))
    return out


def is_quantized_header(tensors: Sequence[StoredTensor]) -> bool:
    return any(t.dtype not in FLOAT_DTYPES for t in tensors)


def with_dtype(tensors: Iterable[StoredTensor], dtype: str) -> list[StoredTensor]:
    return [replace(t, dtype=dtype) for t in tensors]


def gpt_oss_expert_tensors(tensors: Iterable[StoredTensor], moe: GptOssMxfp4) -> list[StoredTensor]:
    """The tensors with each MoE layer's stored experts (a checkpoint's *_blocks / *_scales / *_bias, or a meta
    build's gate_up_proj / down_proj) replaced by the ones vLLM's GptOssMxfp4MoEMethod allocates, named by its
    parameters (shapes here unpadded, whole: the Mxfp4Experts kind sizes them per rank and backend), plus one
    zero-size marker for the layer's load-time conversion."""
    e, h, i = moe.num_experts, moe.hidden_size, moe.intermediate_size
    logical = {
        "w13_weight": ((e, 2 * i, h // 2), "U8"),
        "w13_weight_scale": ((e, 2 * i, h // 32), "U8"),
        "w2_weight": ((e, h, i // 2), "U8"),
        "w2_weight_scale": ((e, h, i // 32), "U8"),
        "w13_bias": ((e, 2 * i), "BF16"),
        "w2_bias": ((e, h), "BF16"),
    }
    out: list[StoredTensor] = []
    seen: set[str] = set()
    for t in tensors:
        experts = _EXPERTS_MODULE.search(t.name)
        if experts is None:
            out.append(t)
            continue
        module = experts.group(1)
        if module in seen:
            continue
        seen.add(module)
        out.extend(StoredTensor(f"{module}.{leaf}", shape, dtype) for leaf, (shape, dtype) in logical.items())
        out.append(StoredTensor(f"{module}.{MXFP4_CONVERSION_LEAF}", (0,), "U8"))
    return out


_EXPERTS_MODULE = re.compile(r"^(.*\.mlp\.experts)\.")
