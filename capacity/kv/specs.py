"""Per-rank KV-cache specs, one small class per kind, and vLLM 0.33's grouping of them.

Mirrors vllm/v1/kv_cache_interface.py (each spec owns its page size, its blocks per request at
max_model_len, its block-table width and its warmup reservation) and vllm/v1/core/kv_cache_planning.py
(get_kv_cache_groups, unify_kv_cache_spec_page_size, _get_kv_cache_bytes_per_block) for the layer-outer
KV layout (LBNHC) that FlashAttention / FlashInfer use on CUDA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from capacity.errors import BadInput
from capacity.units import cdiv

BLOCK_TABLE_TOKEN_ALIGNMENT = 128  # KVCacheSpec.block_table_token_alignment (MRV2 get_block_table_width)


@dataclass(frozen=True)
class BlockContext:
    """The serving values per-request block counts depend on."""

    max_model_len: int
    max_num_batched_tokens: int  # = scheduler max_num_encoder_input_tokens in 0.33
    decode_context_parallel_size: int = 1
    max_concurrent_batches: int = 2  # MRV2 with async scheduling: pipeline_parallel_size + 1

    @property
    def max_in_flight_tokens(self) -> int:
        """vLLM: VllmConfig.max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens."""
        return self.max_concurrent_batches * self.max_num_batched_tokens


def kv_heads_per_rank(total_kv_heads: int, tp: int) -> int:
    """vLLM: ModelConfig.get_num_kv_heads = max(1, total_num_kv_heads // tensor_parallel_size)."""
    return max(1, total_kv_heads // tp)


def aligned_width(blocks: int, block_size: int, token_alignment: int | None) -> int:
    """vLLM: get_block_table_width: round up so the row covers a multiple of `token_alignment` tokens."""
    if token_alignment is None:
        return blocks
    align = token_alignment // math.gcd(token_alignment, block_size)
    return cdiv(blocks, align) * align


# --- the specs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KVCacheSpec:
    """One layer's KV cache on one rank (vLLM: KVCacheSpec)."""

    kind: ClassVar[str]
    reads_encoder_output: ClassVar[bool] = False
    hybrid_kernel_block: ClassVar[int] = 16  # _align_hybrid_block_size: the manager block is a multiple of this
    block_size: int

    @property
    def page_size_bytes(self) -> int:
        raise NotImplementedError

    def blocks_per_request_vllm(self, ctx: BlockContext) -> int:
        """cdiv(max_memory_usage_bytes, page_size_bytes): what vLLM's memory check and concurrency count."""
        raise NotImplementedError

    def max_memory_usage_bytes(self, ctx: BlockContext) -> int:
        """vLLM: KVCacheSpec.max_memory_usage_bytes: one request at max_model_len, in whole pages."""
        return self.blocks_per_request_vllm(ctx) * self.page_size_bytes

    def blocks_per_request_actual(self, ctx: BlockContext, encoder_tokens: int) -> int:
        """Blocks one request really holds at max_model_len."""
        return self.blocks_per_request_vllm(ctx)

    def block_table_width(self, max_len: int, dcp: int) -> int:
        """vLLM: max_num_blocks_per_req, then MRV2 get_block_table_width."""
        return aligned_width(cdiv(max_len, self.block_size), self.block_size, BLOCK_TABLE_TOKEN_ALIGNMENT)

    def warmup_blocks(self, num_tokens: int, *, lookahead: int, max_model_len: int, max_encoder_len: int) -> int:
        """MRV2 warmup _reserved_block_count: what allocate_slots would hold for `num_tokens`."""
        return cdiv(min(num_tokens + lookahead, max_model_len), self.block_size)

    def unified_to(self, page: int) -> KVCacheSpec:
        """vLLM: unify_kv_cache_spec_page_size for a layer whose page is smaller than `page`."""
        raise NotImplementedError

    def merge_key(self) -> tuple[Any, ...] | None:
        """Layers with equal keys but unequal specs form vLLM's UniformTypeKVCacheSpecs (not modelled)."""
        return None

    @property
    def overflows_page(self) -> bool:
        """What the layer keeps does not fit the page it was given (vLLM does not start); see MambaSpec."""
        return False

    def describe(self) -> dict[str, Any]:
        """The spec's own fields for reports (kind-specific ones only where they apply)."""
        return {"num_kv_heads_per_rank": None, "head_size": None, "sliding_window": None}


@dataclass(frozen=True)
class AttentionSpec(KVCacheSpec):
    """vLLM: AttentionSpec: page = num_kv_heads x block_size x (head_size + head_size_v) x dtype, or the padded page."""

    num_kv_heads: int
    head_size: int
    dtype_bytes: int
    page_size_padded: int | None = field(default=None, kw_only=True)

    @property
    def head_size_v(self) -> int:
        return self.head_size

    @property
    def page_size_bytes(self) -> int:
        unpadded = self.num_kv_heads * self.block_size * (self.head_size + self.head_size_v) * self.dtype_bytes
        return self.page_size_padded if self.page_size_padded is not None else unpadded

    def block_table_width(self, max_len: int, dcp: int) -> int:
        # AttentionSpec.max_num_blocks_per_req: DCP shards the token positions.
        return aligned_width(cdiv(max_len, self.block_size * dcp), self.block_size, BLOCK_TABLE_TOKEN_ALIGNMENT)

    def unified_to(self, page: int) -> KVCacheSpec:
        if page % self.page_size_bytes == 0:
            return replace(self, block_size=self.block_size * (page // self.page_size_bytes))
        return replace(self, page_size_padded=page)  # non-MLA attention pads its page

    def merge_key(self) -> tuple[Any, ...] | None:
        return (type(self).__name__, self.block_size)

    def describe(self) -> dict[str, Any]:
        return {"num_kv_heads_per_rank": self.num_kv_heads, "head_size": self.head_size, "sliding_window": None}


@dataclass(frozen=True)
class FullAttentionSpec(AttentionSpec):
    kind: ClassVar[str] = "full"

    def blocks_per_request_vllm(self, ctx: BlockContext) -> int:
        """FullAttentionSpec.max_memory_usage_bytes: cdiv(max_model_len (/ DCP), block_size) pages."""
        length = ctx.max_model_len
        if ctx.decode_context_parallel_size > 1:
            length = cdiv(length, ctx.decode_context_parallel_size)
        return cdiv(length, self.block_size)


@dataclass(frozen=True)
class MLAAttentionSpec(FullAttentionSpec):
    """vLLM: MLAAttentionSpec: one latent head, no separate V (head_size_v = 0)."""

    kind: ClassVar[str] = "mla"
    hybrid_kernel_block: ClassVar[int] = 128  # TRTLLM / FlashInfer MLA decode kernels: 128 / kernel block alignment

    @property
    def head_size_v(self) -> int:
        return 0

    def unified_to(self, page: int) -> KVCacheSpec:
        if page % self.page_size_bytes:
            raise BadInput(
                f"an MLA page of {self.page_size_bytes} B does not divide the largest page {page} B; vLLM cannot pad MLA pages "
                "(unify_kv_cache_spec_page_size raises), so this layout is not served"
            )
        return replace(self, block_size=self.block_size * (page // self.page_size_bytes))


@dataclass(frozen=True)
class SlidingWindowSpec(AttentionSpec):
    kind: ClassVar[str] = "sliding_window"
    sliding_window: int = field(kw_only=True)
    extra_retained_tokens: int = field(default=0, kw_only=True)

    def blocks_per_request_vllm(self, ctx: BlockContext) -> int:
        """SlidingWindowSpec.max_admission_blocks_per_request: window - 1 + retained + in-flight tokens, + 1 block."""
        tokens = min(self.sliding_window - 1 + self.extra_retained_tokens + ctx.max_in_flight_tokens, ctx.max_model_len)
        return cdiv(tokens, self.block_size) + 1

    def merge_key(self) -> tuple[Any, ...] | None:
        return (type(self).__name__, self.block_size, self.sliding_window)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "sliding_window": self.sliding_window}


@dataclass(frozen=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    kind: ClassVar[str] = "chunked_local"
    attention_chunk_size: int = field(kw_only=True)

    def blocks_per_request_vllm(self, ctx: BlockContext) -> int:
        """ChunkedLocalAttentionSpec.max_admission_blocks_per_request: one chunk plus the in-flight tokens."""
        return cdiv(min(self.attention_chunk_size + ctx.max_in_flight_tokens, ctx.max_model_len), self.block_size)

    def merge_key(self) -> tuple[Any, ...] | None:
        return (type(self).__name__, self.block_size, self.attention_chunk_size)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "attention_chunk_size": self.attention_chunk_size}


@dataclass(frozen=True)
class CrossAttentionSpec(AttentionSpec):
    kind: ClassVar[str] = "cross"
    reads_encoder_output: ClassVar[bool] = True

    def blocks_per_request_vllm(self, ctx: BlockContext) -> int:
        """CrossAttentionSpec: cdiv(max_num_encoder_input_tokens, block_size) = max_num_batched_tokens in 0.33."""
        return cdiv(ctx.max_num_batched_tokens, self.block_size)

    def blocks_per_request_actual(self, ctx: BlockContext, encoder_tokens: int) -> int:
        return cdiv(encoder_tokens, self.block_size)

    def warmup_blocks(self, num_tokens: int, *, lookahead: int, max_model_len: int, max_encoder_len: int) -> int:
        return cdiv(max_encoder_len, self.block_size)  # cross-attention reserves the encoder length (PR #47308)


@dataclass(frozen=True)
class MambaSpec(KVCacheSpec):
    """vLLM: MambaSpec: a fixed-size state per request (conv + SSM / recurrent), whatever the block size."""

    kind: ClassVar[str] = "mamba"
    state_bytes: tuple[int, ...]  # prod(shape) x dtype bytes of each state tensor
    mamba_cache_mode: str = "none"  # "align" with prefix caching (vLLM's default for hybrid models)
    num_speculative_blocks: int = 0
    num_prefill_checkpoint_blocks: int = 0
    page_size_padded: int | None = None

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded if self.page_size_padded is not None else sum(self.state_bytes)

    @property
    def overflows_page(self) -> bool:
        """The state is larger than the page it was padded to: vLLM asserts (MambaSpec.page_size_bytes:
        page_size_padded >= page_size) when it builds the KV cache groups, and does not start."""
        return self.page_size_padded is not None and self.page_size_padded < sum(self.state_bytes)

    def blocks_per_request_vllm(self, ctx: BlockContext) -> int:
        """MambaSpec.max_memory_usage_bytes: 1 + speculative blocks; align mode 2 + speculative + checkpoint blocks."""
        if self.mamba_cache_mode == "align":
            return 2 + self.num_speculative_blocks + self.num_prefill_checkpoint_blocks
        return 1 + self.num_speculative_blocks

    def block_table_width(self, max_len: int, dcp: int) -> int:
        # MambaSpec.max_num_blocks_per_req (never DCP-sharded); block_table_token_alignment is None.
        if self.mamba_cache_mode == "align":
            return cdiv(max_len, self.block_size) + self.num_speculative_blocks
        return 1 + self.num_speculative_blocks

    def warmup_blocks(self, num_tokens: int, *, lookahead: int, max_model_len: int, max_encoder_len: int) -> int:
        if self.mamba_cache_mode == "align":
            return cdiv(num_tokens, self.block_size) + self.num_speculative_blocks
        return cdiv(min(num_tokens + lookahead, max_model_len), self.block_size) + self.num_speculative_blocks

    def unified_to(self, page: int) -> KVCacheSpec:
        return replace(self, page_size_padded=page)  # a state page does not scale with the block size: padded

    def merge_key(self) -> tuple[Any, ...] | None:
        return (type(self).__name__, self.page_size_bytes, self.num_speculative_blocks, self.num_prefill_checkpoint_blocks)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "state_bytes": list(self.state_bytes), "mamba_cache_mode": self.mamba_cache_mode}


# --- knobs the specs are built with -------------------------------------------------------------------


@dataclass(frozen=True)
class KVKnobs:
    """The knobs a layer's spec depends on, after vLLM's block-size decisions for the whole model."""

    block_size: int  # attention block size (after hybrid alignment)
    tensor_parallel_size: int
    kv_dtype_bytes: int
    model_dtype_bytes: int
    num_speculative_tokens: int = 0
    mla_block_size: int = 16
    mamba_cache_mode: str = "none"
    mamba_block_size: int = 16
    mamba_page_size_padded: int | None = None
    sliding_window_extra_retained_tokens: int = 0
    compute_capability_major: int = 9

    def gdn_flashinfer_prefill(self, head_k_dim: int) -> bool:
        """vLLM _resolve_gdn_prefill_backend("auto"): FlashInfer on Hopper, and on Blackwell with head_k_dim 128."""
        return self.compute_capability_major == 9 or (self.compute_capability_major in (10, 12) and head_k_dim == 128)

    def mamba_spec(self, state_bytes: tuple[int, ...], checkpoint_blocks: int) -> MambaSpec:
        """MambaBase.get_kv_cache_spec: block size mamba_block_size, page padded to the attention page."""
        return MambaSpec(
            self.mamba_block_size,
            state_bytes=state_bytes,
            mamba_cache_mode=self.mamba_cache_mode,
            num_speculative_blocks=self.num_speculative_tokens,
            num_prefill_checkpoint_blocks=checkpoint_blocks,
            page_size_padded=self.mamba_page_size_padded,
        )


# --- grouping -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KVGroup:
    """A KV-cache group: layers of one spec sharing block ids (vLLM: KVCacheGroupSpec)."""

    spec: KVCacheSpec
    num_layers: int  # real layers
    num_padding_layers: int  # added so every group has group_size layer slots

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def page_size_bytes(self) -> int:
        return self.spec.page_size_bytes

    @property
    def bytes_per_block(self) -> int:
        return (self.num_layers + self.num_padding_layers) * self.spec.page_size_bytes


def unify_page_size(specs: list[KVCacheSpec]) -> list[KVCacheSpec]:
    """vLLM: unify_kv_cache_spec_page_size: smaller pages grow their block size, or are padded (Mamba, attention)."""
    largest = max(s.page_size_bytes for s in specs)
    return [s if s.page_size_bytes == largest else s.unified_to(largest) for s in specs]


def kv_cache_groups(specs: list[KVCacheSpec]) -> list[KVGroup]:
    """vLLM: get_kv_cache_groups (hybrid allocator on, layer-outer layout).

    One group when every layer has the same spec; otherwise pages are unified, layers bucketed by spec and
    cut into groups of `group_size` = the smallest bucket (or the largest when largest < 1.5 x smallest),
    the last group of a bucket padded (vLLM: "Add %d padding layers").
    """
    if not specs:
        return []
    if len(set(specs)) == 1:
        return [KVGroup(specs[0], len(specs), 0)]
    keys = {s.merge_key() for s in specs}
    if len(keys) == 1 and None not in keys:
        raise BadInput(
            "the model's KV layers are of one kind but differ in shape; vLLM 0.33 puts them in one UniformTypeKVCacheSpecs "
            "group, which capacity does not model"
        )
    specs = unify_page_size(specs)
    buckets: dict[KVCacheSpec, int] = {}
    for s in specs:
        buckets[s] = buckets.get(s, 0) + 1
    sizes = list(buckets.values())
    smallest, largest = min(sizes), max(sizes)
    group_size = largest if largest < 1.5 * smallest else smallest
    groups: list[KVGroup] = []
    for s, n in buckets.items():
        num_groups = cdiv(n, group_size)
        for i in range(num_groups):
            real = len(range(i, n, num_groups))  # layers taken with stride num_groups
            groups.append(KVGroup(s, real, group_size - real))
    return groups


def group_slots(specs: list[KVCacheSpec]) -> list[tuple[int, int]]:
    """(group index, layer slot) of each layer, in kv_cache_groups' order: a bucket's j-th layer goes to its
    (j % num_groups)-th group, slot j // num_groups (vLLM: layers taken with stride num_groups)."""
    if not specs:
        return []
    if len(set(specs)) == 1:
        return [(0, j) for j in range(len(specs))]
    unified = unify_page_size(specs)
    buckets: dict[KVCacheSpec, list[int]] = {}
    for i, s in enumerate(unified):
        buckets.setdefault(s, []).append(i)
    sizes = [len(v) for v in buckets.values()]
    smallest, largest = min(sizes), max(sizes)
    group_size = largest if largest < 1.5 * smallest else smallest
    places: list[tuple[int, int]] = [(0, 0)] * len(specs)
    first = 0
    for members in buckets.values():
        num_groups = cdiv(len(members), group_size)
        for j, layer in enumerate(members):
            places[layer] = (first + j % num_groups, j // num_groups)
        first += num_groups
    return places


def bytes_per_block(groups: list[KVGroup]) -> int:
    """vLLM: _get_kv_cache_bytes_per_block = max over groups of the group's summed page (groups share one pool)."""
    return max(g.bytes_per_block for g in groups)


def group_to_dict(g: KVGroup) -> dict[str, Any]:
    return {
        "kind": g.kind,
        "num_layers": g.num_layers,
        "num_padding_layers": g.num_padding_layers,
        "block_size": g.spec.block_size,
        **g.spec.describe(),
        "page_size_bytes": g.page_size_bytes,
    }
