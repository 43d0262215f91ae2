"""The planned KV pool as a transformers cache: each attention layer's keys and values are views of the pool's
blocks, laid out as vLLM's block tables hand them to the kernels, so a decoder run through transformers reads and
writes the pool and allocates no cache of its own.

Layout (`KvPool`): one tensor of layer slots x {K, V} x num_blocks x a page's half (block_size x kv heads x head
size), one slot per layer of a KV group (vLLM: the i-th layer of every group shares the i-th tensor), blocks handed
out per group in request order after the null block 0. A request's blocks of one group are contiguous, so its
context is a view, never a copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from capacity.errors import BadInput


@dataclass(frozen=True)
class GroupLayout:
    """One KV group's blocks in the pool: the first block, blocks per request, and a block's shape."""

    first_block: int
    blocks_per_request: int
    block_size: int
    kv_heads: int
    head_size: int

    @property
    def tokens_per_request(self) -> int:
        return self.blocks_per_request * self.block_size


def group_layouts(groups: list[tuple[int, int, int, int]], requests: int, num_blocks: int) -> list[GroupLayout]:
    """Each group's place for `requests` requests, given (blocks per request, block size, kv heads, head size) per
    group: groups one after another, after the null block (vLLM's BlockPool reserves block 0)."""
    layouts: list[GroupLayout] = []
    first = 1
    for blocks, block_size, heads, head in groups:
        layouts.append(GroupLayout(first, blocks, block_size, heads, head))
        first += requests * blocks
    if first > num_blocks:
        raise BadInput(f"{requests} requests need {first:,} blocks but the planned pool holds {num_blocks:,}: the plan's concurrency does not fit its pool")
    return layouts


def context(pool: Any, slot: int, which: int, layout: GroupLayout, requests: int) -> Any:
    """A group layer's keys (which 0) or values (1) of every request: [requests, kv heads, tokens, head size], a view."""
    blocks = pool[slot, which, layout.first_block : layout.first_block + requests * layout.blocks_per_request]
    return blocks.reshape(requests, layout.tokens_per_request, layout.kv_heads, layout.head_size).transpose(1, 2)


@lru_cache(maxsize=1)
def pool_layer_class() -> type:
    """transformers' cache layer over pool views (built on first use: transformers is imported only here)."""
    from transformers.cache_utils import CacheLayerMixin

    class PoolLayer(CacheLayerMixin):
        """Keys and values of one layer for a batch of requests, already `length` tokens long; a sliding-window
        layer holds only its window (vLLM's SlidingWindowSpec frees the blocks behind it), a cross-attention layer
        the encoder's positions, which decoding never extends."""

        is_compileable = False

        def __init__(self, keys: Any, values: Any, length: int, window: int | None = None) -> None:
            super().__init__()
            self.keys, self.values = keys, values
            self.length = length
            self.window = window
            self.is_sliding = window is not None
            self.is_initialized = True

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            return None

        def offset(self) -> int:
            """Where the next tokens go in the view: after the context, or after the window's last window - 1."""
            return self.length if self.window is None else min(self.length, self.window - 1)

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            n, at = key_states.shape[-2], self.offset()
            self.keys[:, :, at : at + n].copy_(key_states)
            self.values[:, :, at : at + n].copy_(value_states)
            self.length += n
            return self.keys[:, :, : at + n], self.values[:, :, : at + n]

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            if self.window is None or self.length < self.window:
                return self.length + query_length, 0
            return self.window - 1 + query_length, self.length - self.window + 1

        def get_seq_length(self) -> int:
            return self.length

        def get_max_length(self) -> int:
            return int(self.keys.shape[-2])

    return PoolLayer


def pool_cache(layers: list[Any]) -> Any:
    """A transformers Cache of these PoolLayers (one per text layer, in order)."""
    from transformers.cache_utils import Cache

    return Cache(layers=layers)
