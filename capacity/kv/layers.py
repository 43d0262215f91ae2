"""What one decoder layer keeps per request, as the model describes it (totals before tensor parallelism).

One small frozen class per kind. Each turns itself into the per-rank KV spec vLLM 0.33 builds for it
(`kv_spec`, mirroring the layer's `get_kv_cache_spec`), or into nothing when the layer allocates no KV
(a layer that reads another layer's cache: `kv_sharing_target_layer_name`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from capacity.kv.specs import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    KVKnobs,
    MLAAttentionSpec,
    SlidingWindowSpec,
    kv_heads_per_rank,
)

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def tp_share(total: int, tp: int) -> int:
    """vLLM: vllm.distributed.divide (total / tp, asserted exact). A TP that does not divide `total` stops vLLM at
    model construction; the layer reports it (`KVLayer.tp_indivisible`, an error hazard) and the figure is the
    largest rank's share (rounded up)."""
    return -(-total // tp)


def indivisible(tp: int, *parts: tuple[str, int]) -> tuple[str, ...]:
    """The named totals that `tp` does not divide, as 'name (total)'."""
    return tuple(f"{name} ({total})" for name, total in parts if total % tp)


@dataclass(frozen=True)
class KVLayer:
    """Base of the per-kind layer descriptions."""

    kind: ClassVar[str]
    reads_encoder_output: ClassVar[bool] = False  # cross-attention: keys are the encoder's outputs
    supports_decode_context_parallel: ClassVar[bool] = True
    is_state: ClassVar[bool] = False  # Mamba / linear attention: a fixed-size state per request

    def kv_spec(self, knobs: KVKnobs) -> KVCacheSpec | None:
        raise NotImplementedError

    def kv_heads(self) -> int | None:
        """KV heads split across TP ranks (None: the layer has none to split)."""
        return None

    def tp_indivisible(self, tp: int) -> tuple[str, ...]:
        """What of this layer vLLM splits exactly over the TP ranks but `tp` does not divide ('name (total)')."""
        return ()

    def backend_block_size(self, compute_capability_major: int, kv_cache_dtype: str) -> int | None:
        """The block size this layer's attention backend prefers over the default 16 (None: no preference)."""
        return None

    def state_bytes(self, knobs: KVKnobs) -> tuple[int, ...]:
        """A state layer's tensors on one rank (prod(shape) x dtype bytes each): what its MambaSpec holds."""
        raise NotImplementedError

    def aligned_state_bytes(self, knobs: KVKnobs) -> int:
        """The state size Platform._align_hybrid_block_size sizes the attention block and the padded Mamba page for
        (the model class's get_mamba_state_shape_from_config); the layer's own state unless the class reads less."""
        return sum(self.state_bytes(knobs))

    def with_aligned_channels(self, channels: int) -> KVLayer:
        """This layer as seen by a model class whose get_mamba_state_shape_from_config reads `channels` channels
        where the layer has its own (LFM2-VL: the text hidden_size for conv_dim); unchanged for other kinds."""
        return self


@dataclass(frozen=True)
class FullAttentionLayer(KVLayer):
    kind: ClassVar[str] = "full"
    num_kv_heads: int
    head_size: int

    def kv_heads(self) -> int | None:
        return self.num_kv_heads

    def kv_spec(self, knobs: KVKnobs) -> KVCacheSpec:
        return FullAttentionSpec(knobs.block_size, kv_heads_per_rank(self.num_kv_heads, knobs.tensor_parallel_size), self.head_size, knobs.kv_dtype_bytes)


@dataclass(frozen=True)
class SlidingWindowLayer(KVLayer):
    kind: ClassVar[str] = "sliding_window"
    supports_decode_context_parallel: ClassVar[bool] = False  # SlidingWindowSpec: "DCP not support sliding window"
    num_kv_heads: int
    head_size: int
    sliding_window: int

    def kv_heads(self) -> int | None:
        return self.num_kv_heads

    def kv_spec(self, knobs: KVKnobs) -> KVCacheSpec:
        return SlidingWindowSpec(
            knobs.block_size,
            kv_heads_per_rank(self.num_kv_heads, knobs.tensor_parallel_size),
            self.head_size,
            knobs.kv_dtype_bytes,
            sliding_window=self.sliding_window,
            extra_retained_tokens=knobs.sliding_window_extra_retained_tokens,
        )


@dataclass(frozen=True)
class ChunkedLocalAttentionLayer(KVLayer):
    """Llama-4's local layers: attention inside chunks of `attention_chunk_size` tokens."""

    kind: ClassVar[str] = "chunked_local"
    num_kv_heads: int
    head_size: int
    attention_chunk_size: int

    def kv_heads(self) -> int | None:
        return self.num_kv_heads

    def kv_spec(self, knobs: KVKnobs) -> KVCacheSpec:
        return ChunkedLocalAttentionSpec(
            knobs.block_size,
            kv_heads_per_rank(self.num_kv_heads, knobs.tensor_parallel_size),
            self.head_size,
            knobs.kv_dtype_bytes,
            attention_chunk_size=self.attention_chunk_size,
        )


@dataclass(frozen=True)
class CrossAttentionLayer(KVLayer):
    kind: ClassVar[str] = "cross"
    reads_encoder_output: ClassVar[bool] = True
    num_kv_heads: int
    head_size: int

    def kv_heads(self) -> int | None:
        return self.num_kv_heads

    def kv_spec(self, knobs: KVKnobs) -> KVCacheSpec:
        return CrossAttentionSpec(knobs.block_size, kv_heads_per_rank(self.num_kv_heads, knobs.tensor_parallel_size), self.head_size, knobs.kv_dtype_bytes)


@dataclass(frozen=True)
class MLALayer(KVLayer):
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi): one latent "head" of kv_lora_rank + qk_rope_head_dim,
    replicated on every TP rank (vLLM: MLAAttention.get_kv_cache_spec, num_kv_heads=1)."""

    kind: ClassVar[str] = "mla"
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int

    @property
    def head_size(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    def backend_block_size(self, compute_capability_major: int, kv_cache_dtype: str) -> int | None:
        """vLLM 0.33 on CUDA (platforms/cuda.py _get_backend_priorities, then get_preferred_block_size):
        Hopper: FlashAttention-MLA (multiple of 16; no fp8 KV), else FlashMLA (64). Blackwell (SM100):
        FlashInfer-MLA (32 or 64) when qk_nope_head_dim is 64, 128 or 192, else CUTLASS-MLA (128).
        Others: Triton-MLA (multiple of 16)."""
        if compute_capability_major == 9:
            return 64 if kv_cache_dtype.startswith("fp8") else 16
        if compute_capability_major == 10:
            return 32 if self.qk_nope_head_dim in (64, 128, 192) else 128
        return 16

    def kv_spec(self, knobs: KVKnobs) -> KVCacheSpec:
        return MLAAttentionSpec(knobs.mla_block_size, 1, self.head_size, knobs.kv_dtype_bytes)


@dataclass(frozen=True)
class GatedDeltaNetLayer(KVLayer):
    """Qwen3-Next / Qwen3.5 linear attention: a conv state and a recurrent state per request
    (vLLM: MambaStateShapeCalculator.gated_delta_net_state_shape)."""

    kind: ClassVar[str] = "linear_attention"
    is_state: ClassVar[bool] = True
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int
    ssm_dtype: str | None = None  # the config's mamba_ssm_dtype (Qwen3.5), else the model dtype

    @property
    def conv_dim(self) -> int:
        return self.head_k_dim * self.num_k_heads * 2 + self.head_v_dim * self.num_v_heads

    def tp_indivisible(self, tp: int) -> tuple[str, ...]:
        # vLLM gated_delta_net_state_shape: divide(conv_dim, tp), divide(num_v_heads, tp)
        return indivisible(tp, ("linear_num_value_heads", self.num_v_heads), ("linear attention conv dim", self.conv_dim))

    def state_bytes(self, knobs: KVKnobs) -> tuple[int, ...]:
        tp = knobs.tensor_parallel_size
        conv_dim = tp_share(self.conv_dim, tp)
        conv = conv_dim * (self.conv_kernel - 1 + knobs.num_speculative_tokens) * knobs.model_dtype_bytes
        v_heads = tp_share(self.num_v_heads, tp)
        recurrent = v_heads * self.head_v_dim * self.head_k_dim * (DTYPE_BYTES[self.ssm_dtype] if self.ssm_dtype else knobs.model_dtype_bytes)
        return conv, recurrent

    def checkpoint_alignment(self, knobs: KVKnobs) -> int | None:
        """FlashInfer's GDN prefill exports align-mode checkpoints on a 64-token grid (FLASHINFER_GDN_CHECKPOINT_ALIGNMENT);
        the Triton/FLA prefill cannot (None)."""
        return 64 if knobs.mamba_cache_mode == "align" and knobs.gdn_flashinfer_prefill(self.head_k_dim) else None

    def kv_spec(self, knobs: KVKnobs) -> KVCacheSpec:
        return knobs.mamba_spec(self.state_bytes(knobs), 0 if self.checkpoint_alignment(knobs) is None else 1)


@dataclass(frozen=True)
class Mamba2Layer(KVLayer):
    """Mamba-2 mixer (Nemotron-H, Granite-4, Falcon-H1): conv state + SSM state per request
    (vLLM: MambaStateShapeCalculator.mamba2_state_shape)."""

    kind: ClassVar[str] = "mamba"
    is_state: ClassVar[bool] = True
    num_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int
    intermediate_size: int  # mamba_num_heads x mamba_head_dim (Nemotron-H), mamba_expand x hidden (Granite/Falcon)
    ssm_dtype: str | None = None  # mamba_ssm_cache_dtype (Nemotron-H: the config's, else float32)

    def conv_dim(self, tp: int) -> int:
        """vLLM mamba2_state_shape: intermediate_size + 2 x (n_groups + extra_groups_for_head_shards) x state_size."""
        groups = self.n_groups + (0 if self.n_groups % tp == 0 else tp - self.n_groups)  # extra_groups_for_head_shards
        return self.intermediate_size + 2 * groups * self.state_size

    def tp_indivisible(self, tp: int) -> tuple[str, ...]:
        # vLLM MambaMixer2 asserts num_heads % tp == 0 and (n_groups % tp == 0 or n_groups == 1);
        # mamba2_state_shape: divide(conv_dim, tp)
        groups = () if self.n_groups == 1 else (("mamba n_groups", self.n_groups),)
        return indivisible(tp, ("mamba heads", self.num_heads), *groups, ("mamba conv dim", self.conv_dim(tp)))

    def state_bytes(self, knobs: KVKnobs) -> tuple[int, ...]:
        tp = knobs.tensor_parallel_size
        conv = tp_share(self.conv_dim(tp), tp) * (self.conv_kernel - 1 + knobs.num_speculative_tokens) * knobs.model_dtype_bytes
        ssm = tp_share(self.num_heads, tp) * self.head_dim * self.state_size
        return conv, ssm * (DTYPE_BYTES[self.ssm_dtype] if self.ssm_dtype else knobs.model_dtype_bytes)

    def checkpoint_alignment(self, knobs: KVKnobs) -> int | None:
        return 1  # MambaMixer2: any token position works

    def kv_spec(self, knobs: KVKnobs) -> KVCacheSpec:
        # MambaMixer2.get_kv_cache_spec: num_prefill_checkpoint_blocks=1 always (read only in align mode).
        return knobs.mamba_spec(self.state_bytes(knobs), 1)


@dataclass(frozen=True)
class ShortConvLayer(KVLayer):
    """LFM2's gated short convolution (LiquidAI LFM2 / LFM2-VL / LFM2-MoE "conv" layers): one conv state per
    request, the last conv_L_cache - 1 (+ speculative) inputs of conv_dim channels, in the model dtype
    (vLLM: ShortConv.get_state_shape -> MambaStateShapeCalculator.short_conv_state_shape,
    MambaStateDtypeCalculator.short_conv_state_dtype with mamba_cache_dtype "auto"). No SSM state."""

    kind: ClassVar[str] = "short_conv"
    is_state: ClassVar[bool] = True
    conv_dim: int
    conv_kernel: int  # conv_L_cache
    aligned_conv_dim: int | None = None  # the channels the model class sizes pages for, when not conv_dim

    def with_aligned_channels(self, channels: int) -> KVLayer:
        return replace(self, aligned_conv_dim=channels)

    def tp_indivisible(self, tp: int) -> tuple[str, ...]:
        # vLLM short_conv_state_shape: divide(intermediate_size=conv_dim, tp); ColumnParallelLinear splits conv_dim
        return indivisible(tp, ("conv_dim", self.conv_dim))

    def state_bytes(self, knobs: KVKnobs) -> tuple[int, ...]:
        conv_dim = tp_share(self.conv_dim, knobs.tensor_parallel_size)
        return (conv_dim * (self.conv_kernel - 1 + knobs.num_speculative_tokens) * knobs.model_dtype_bytes,)

    def aligned_state_bytes(self, knobs: KVKnobs) -> int:
        """Lfm2ForCausalLM / Lfm2VLForConditionalGeneration.get_mamba_state_shape_from_config call short_conv_state_shape
        without num_spec: the page is padded for the state without its speculative slots (a state that outgrows it
        trips MambaSpec.page_size_bytes' assert at startup: `MambaSpec.overflows_page`)."""
        conv_dim = tp_share(self.aligned_conv_dim or self.conv_dim, knobs.tensor_parallel_size)
        return conv_dim * (self.conv_kernel - 1) * knobs.model_dtype_bytes

    def checkpoint_alignment(self, knobs: KVKnobs) -> int | None:
        return None  # MambaBase.get_prefill_checkpoint_alignment: ShortConv exports no prefill checkpoints

    def kv_spec(self, knobs: KVKnobs) -> KVCacheSpec:
        # MambaBase.get_kv_cache_spec: no prefill checkpoint blocks (num_prefill_checkpoint_blocks keeps its 0).
        return knobs.mamba_spec(self.state_bytes(knobs), 0)


@dataclass(frozen=True)
class SharedKVLayer(KVLayer):
    """A layer that reads another layer's KV (kv_sharing_target_layer_name): vLLM leaves it out of allocation."""

    kind: ClassVar[str] = "shared"
    target_layer: int
    num_kv_heads: int
    head_size: int

    def kv_heads(self) -> int | None:
        return self.num_kv_heads

    def kv_spec(self, knobs: KVKnobs) -> None:
        return None
