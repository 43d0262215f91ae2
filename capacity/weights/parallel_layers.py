"""vLLM 0.33's parallel layers: which layer a stored tensor loads into, and the bytes one tensor-parallel rank holds.

Every stored tensor is classified by its name (`classify`) into the parallel layer vLLM loads it into, and that
layer's rule gives the bytes one rank holds:

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

gpt-oss's MXFP4 experts are sized as vLLM's MoE method allocates them for the GPU's backend (capacity/weights/mxfp4.py).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from capacity.errors import BadInput
from capacity.weights.mxfp4 import MXFP4_CONVERSION_LEAF, MXFP4_EXPERT_LEAVES, GptOssMxfp4
from capacity.weights.stored_tensor import MODEL_DTYPE, StoredTensor

DEFAULT_VOCAB_PADDING_SIZE = 64  # vllm/model_executor/layers/vocab_parallel_embedding.py


def pad_vocab_size(vocab_size: int, pad_to: int = DEFAULT_VOCAB_PADDING_SIZE) -> int:
    """vLLM pad_vocab_size: round the vocabulary up to a multiple of pad_to."""
    return -(-vocab_size // pad_to) * pad_to


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
    # linear layers (regexes) vLLM builds whole on every rank but quantized (disable_tp=True: DeepSeek's shared experts
    # under sequence-parallel MoE, capacity/serving/data_parallel.py)
    replicated_linear_modules: tuple[str, ...] = ()

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
    data_parallel_size: int = 1  # --data-parallel-size: the MoE layers' ranks are tp x dp (FusedMoEParallelConfig.make)

    @property
    def moe_ranks(self) -> int:
        """flatten_tp_across_dp_and_pcp: the ranks one MoE layer is split (or, with EP, divided) over, tp x dp."""
        return self.tensor_parallel_size * self.data_parallel_size


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
        tp = par.moe_ranks  # FusedMoEParallelConfig: tp flattened across DP (ep_size = tp x dp with EP)
        experts = layout.num_experts
        if tensor.numel <= 1:
            return full
        if par.enable_expert_parallel and tp > 1:
            if not experts:
                raise BadInput("--enable-expert-parallel: the config names no number of experts (num_experts / n_routed_experts / num_local_experts)")
            # determine_expert_map ("linear"): ep = tp x dp ranks, base = E // ep, the first E % ep ranks hold one more, rank r
            # starting at r x base + min(r, E % ep): a checkpoint's per-expert tensor is there whole or not at
            # all, a fused [E, ...] tensor keeps local of its E slices.
            base, extra, r = experts // tp, experts % tp, par.rank
            local = base + (1 if r < extra else 0)
            start = r * base + min(r, extra)
            index = _EXPERT_INDEX.search(tensor.name)
            if index is not None:
                return full if start <= int(index.group(1)) < start + local else 0
            return full * local // experts
        return full // tp  # intermediate_size_per_partition = intermediate_size // tp_size (tp x dp ranks)


class Mxfp4Experts(ParallelKind):
    """gpt-oss's MXFP4 expert tensors as GptOssMxfp4MoEMethod.create_weights allocates them on the rank: the
    tensor's leaf names which (w13_weight, w13_weight_scale, w2_weight, w2_weight_scale, w13_bias, w2_bias)."""

    name = "moe-experts (mxfp4, as vLLM creates them)"

    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int:
        assert layout.mxfp4 is not None
        return layout.mxfp4.shapes(par.moe_ranks, par.enable_expert_parallel, par.rank).created()[tensor.leaf]


class Mxfp4Conversion(ParallelKind):
    """What one MoE layer's load-time conversion to the backend's kernel format adds (capacity/weights/mxfp4.py)."""

    name = "mxfp4 kernel format (load-time conversion)"

    def rank_bytes(self, tensor: StoredTensor, full: int, layout: WeightLayout, par: Parallelism) -> int:
        assert layout.mxfp4 is not None
        return layout.mxfp4.backend.conversion_bytes(layout.mxfp4.shapes(par.moe_ranks, par.enable_expert_parallel, par.rank))


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


# classify's answers per layout (a sweep or a search re-plans the same tensors under the same layout): at most a few
# layouts' worth, each tensor once.
_CLASSIFIED: dict[WeightLayout, dict[StoredTensor, ParallelKind]] = {}


def classified(tensor: StoredTensor, layout: WeightLayout, memo: dict[StoredTensor, ParallelKind]) -> ParallelKind:
    """classify(tensor, layout), answered from `memo` (`classifications(layout)`) once it was worked out."""
    kind = memo.get(tensor)
    if kind is None:
        kind = memo[tensor] = classify(tensor, layout)
    return kind


def classifications(layout: WeightLayout) -> dict[StoredTensor, ParallelKind]:
    """The memo of classify's answers under `layout` (classify is a function of the tensor's name, shape and dtype
    and of the layout alone)."""
    memo = _CLASSIFIED.get(layout)
    if memo is None:
        if len(_CLASSIFIED) >= 16:
            _CLASSIFIED.clear()
        memo = _CLASSIFIED[layout] = {}
    return memo


@cache
def _any_of(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex that finds what any of `patterns` finds (none: a regex that finds nothing)."""
    return re.compile("|".join(f"(?:{p})" for p in patterns) if patterns else r"(?!)")


def classify(tensor: StoredTensor, layout: WeightLayout) -> ParallelKind:
    """The vLLM parallel layer a stored tensor is loaded into, from its name."""
    module, layer = tensor.module, tensor.layer
    if _any_of(layout.replicated_modules).search(module):
        return REPLICATED
    if _any_of(layout.replicated_linear_modules).search(module):
        return REPLICATED_LINEAR
    if _any_of(layout.column_modules).search(module):
        return COLUMN
    if _any_of(layout.row_modules).search(module):
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
