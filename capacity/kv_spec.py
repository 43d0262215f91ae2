"""KV-cache specs, page sizes, grouping, blocks per request and block-table widths (vLLM 0.33).

Mirrors vllm/v1/kv_cache_interface.py (AttentionSpec and subclasses) and
vllm/v1/core/kv_cache_planning.py (get_kv_cache_groups). Per TP rank throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from capacity.errors import BadInput
from capacity.serving import ServingConfig
from capacity.spec import CROSS, FULL, SLIDING, ModelSpec
from capacity.units import cdiv

BLOCK_TABLE_TOKEN_ALIGNMENT = 128  # MRV2 get_block_table_width: widths cover a multiple of 128 tokens


@dataclass(frozen=True)
class KVCacheSpec:
    """One attention layer's KV spec on one rank (vLLM: FullAttentionSpec / SlidingWindowSpec / CrossAttentionSpec)."""

    kind: str
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype_bytes: int
    sliding_window: int | None = None

    @property
    def page_size_bytes(self) -> int:
        """vLLM: AttentionSpec.page_size_bytes = 2 * block_size * num_kv_heads * head_size * dtype_size."""
        return 2 * self.block_size * self.num_kv_heads * self.head_size * self.dtype_bytes


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


def kv_heads_per_rank(total_kv_heads: int, tp: int) -> int:
    """vLLM: ModelConfig.get_num_kv_heads = max(1, total_num_kv_heads // tensor_parallel_size)."""
    return max(1, total_kv_heads // tp)


def layer_specs(spec: ModelSpec, serving: ServingConfig) -> list[KVCacheSpec]:
    return [
        KVCacheSpec(
            kind=layer.kind,
            block_size=serving.block_size,
            num_kv_heads=kv_heads_per_rank(layer.num_kv_heads, serving.tensor_parallel_size),
            head_size=layer.head_size,
            dtype_bytes=serving.kv_cache_dtype_bytes,
            sliding_window=layer.sliding_window,
        )
        for layer in spec.layers
    ]


def unify_page_size(specs: list[KVCacheSpec]) -> list[KVCacheSpec]:
    """vLLM: unify_kv_cache_spec_page_size: grow the block size of smaller-page layers to the largest page."""
    largest = max(s.page_size_bytes for s in specs)
    out = []
    for s in specs:
        if s.page_size_bytes == largest:
            out.append(s)
            continue
        if largest % s.page_size_bytes:
            raise BadInput(
                f"KV page sizes {s.page_size_bytes} and {largest} do not divide: vLLM would pad them, which capacity does not model"
            )
        ratio = largest // s.page_size_bytes
        out.append(KVCacheSpec(s.kind, s.block_size * ratio, s.num_kv_heads, s.head_size, s.dtype_bytes, s.sliding_window))
    return out


def kv_cache_groups(specs: list[KVCacheSpec]) -> list[KVGroup]:
    """vLLM: get_kv_cache_groups for attention-only models.

    One group when every layer has the same spec; otherwise layers are bucketed by spec and cut
    into groups of `group_size` = the smallest bucket (or the largest when largest < 1.5 x smallest),
    padding the last group of a bucket.
    """
    if not specs:
        return []
    if len(set(specs)) == 1:
        return [KVGroup(specs[0], len(specs), 0)]
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


# kv_groups_for memo: keyed by the identity of the model's layer tuple and the knobs the specs depend on.
# The entry keeps a reference to the tuple, so its id cannot be reused while the entry lives.
_GROUPS_MEMO: dict[tuple[int, int, int, int], tuple[tuple[Any, ...], tuple[KVGroup, ...]]] = {}
_GROUPS_MEMO_SIZE = 256


def kv_groups_for(spec: ModelSpec, serving: ServingConfig) -> list[KVGroup]:
    """`kv_cache_groups(layer_specs(spec, serving))`, memoized: the groups depend only on the model's layers,
    the block size, the tensor-parallel size and the KV dtype, which a sweep varies far less than the rest."""
    key = (id(spec.layers), serving.block_size, serving.tensor_parallel_size, serving.kv_cache_dtype_bytes)
    hit = _GROUPS_MEMO.get(key)
    if hit is not None and hit[0] is spec.layers:
        return list(hit[1])
    groups = kv_cache_groups(layer_specs(spec, serving))
    if len(_GROUPS_MEMO) >= _GROUPS_MEMO_SIZE:
        _GROUPS_MEMO.clear()
    _GROUPS_MEMO[key] = (spec.layers, tuple(groups))
    return groups


def bytes_per_block(groups: list[KVGroup]) -> int:
    """vLLM: _get_kv_cache_bytes_per_block = max over groups of the group's summed page (groups share one pool)."""
    return max(g.bytes_per_block for g in groups)


@dataclass(frozen=True)
class BlockContext:
    """The serving values that per-request block counts depend on."""

    max_model_len: int
    max_num_batched_tokens: int  # = scheduler max_num_encoder_input_tokens in 0.33
    decode_context_parallel_size: int
    max_concurrent_batches: int  # MRV2 with async scheduling, PP=1: 2


def block_context(serving: ServingConfig, max_model_len: int | None = None) -> BlockContext:
    return BlockContext(
        max_model_len=serving.max_model_len if max_model_len is None else max_model_len,
        max_num_batched_tokens=serving.max_num_batched_tokens,
        decode_context_parallel_size=serving.decode_context_parallel_size,
        max_concurrent_batches=2,
    )


def blocks_per_request_vllm(spec: KVCacheSpec, ctx: BlockContext) -> int:
    """cdiv(max_memory_usage_bytes, page_size_bytes): what vLLM's memory check and concurrency count."""
    bs = spec.block_size
    if spec.kind == FULL:
        length = ctx.max_model_len
        if ctx.decode_context_parallel_size > 1:
            length = cdiv(length, ctx.decode_context_parallel_size)
        return cdiv(length, bs)
    if spec.kind == SLIDING:
        assert spec.sliding_window is not None
        in_flight = ctx.max_concurrent_batches * ctx.max_num_batched_tokens
        return cdiv(min(spec.sliding_window - 1 + in_flight, ctx.max_model_len), bs) + 1
    if spec.kind == CROSS:
        # CrossAttentionSpec: cdiv(max_num_encoder_input_tokens, block_size), which is
        # max_num_batched_tokens in 0.33 (not the encoder length).
        return cdiv(ctx.max_num_batched_tokens, bs)
    raise ValueError(f"unknown KV spec kind {spec.kind}")


def blocks_per_request_actual(spec: KVCacheSpec, ctx: BlockContext, encoder_tokens: int) -> int:
    """Blocks one request really holds at max_model_len: cross-attention holds its encoder tokens only."""
    if spec.kind == CROSS:
        return cdiv(encoder_tokens, spec.block_size)
    return blocks_per_request_vllm(spec, ctx)


def block_table_width(spec: KVCacheSpec, max_len: int, dcp: int) -> int:
    """vLLM: max_num_blocks_per_req, then MRV2 get_block_table_width (a multiple of 128 tokens)."""
    blocks = cdiv(max_len, spec.block_size * dcp)
    align = BLOCK_TABLE_TOKEN_ALIGNMENT // math.gcd(BLOCK_TABLE_TOKEN_ALIGNMENT, spec.block_size)
    return cdiv(blocks, align) * align


def block_table_max_len(spec: ModelSpec, serving: ServingConfig) -> int:
    """MRV2 initialize_kv_cache after PR #46753: encoder-decoder tables cover the encoder input budget too."""
    if not spec.is_encoder_decoder:
        return serving.max_model_len
    return max(serving.max_model_len, serving.max_num_batched_tokens, spec.max_source_positions or 0)


def block_table_max_len_pre_fix(spec: ModelSpec, serving: ServingConfig) -> int:
    """The rule before PR #46753: max(max_model_len, max_source_positions)."""
    if not spec.is_encoder_decoder:
        return serving.max_model_len
    return max(serving.max_model_len, spec.max_source_positions or 0)


def group_to_dict(g: KVGroup) -> dict[str, Any]:
    return {
        "kind": g.kind,
        "num_layers": g.num_layers,
        "num_padding_layers": g.num_padding_layers,
        "block_size": g.spec.block_size,
        "num_kv_heads_per_rank": g.spec.num_kv_heads,
        "head_size": g.spec.head_size,
        "sliding_window": g.spec.sliding_window,
        "page_size_bytes": g.page_size_bytes,
    }
