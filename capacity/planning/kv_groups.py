"""A whole model's KV specs under the knobs: vLLM 0.33's block-size decisions, then its groups.

Before any layer builds its spec vLLM picks the block size for the attention backend
(Platform.update_block_size_for_backend: MLA backends want 16, 32, 64 or 128 tokens) and, for hybrid
attention + Mamba / linear-attention models, raises the attention block size until an attention page
holds a Mamba state and pads the Mamba page to exactly that size (Platform._align_hybrid_block_size).
Layers that read another layer's KV (kv_sharing_target_layer_name) build no spec and are left out.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from typing import Any

from capacity.gpu.catalog import Gpu
from capacity.kv.specs import BlockContext, KVCacheSpec, KVGroup, KVKnobs, kv_cache_groups
from capacity.model.spec import ModelSpec
from capacity.serving.config import ServingConfig
from capacity.units import cdiv

FLASH_ATTN_KERNEL_BLOCK = 16  # FlashAttention (and FlashAttention-MLA, Triton-MLA): MultipleOf(16)


def block_context(serving: ServingConfig, max_model_len: int | None = None, window_batches: int = 2) -> BlockContext:
    """`window_batches`: the batches a sliding-window or chunked-local layer reserves for, vLLM 0.33's
    max_concurrent_batches (2 with async scheduling); 1 for versions before 0.27 (VllmSemantics.window_batches)."""
    return BlockContext(
        max_model_len=serving.max_model_len if max_model_len is None else max_model_len,
        max_num_batched_tokens=serving.max_num_batched_tokens,
        decode_context_parallel_size=serving.decode_context_parallel_size,
        max_concurrent_batches=window_batches,
    )


def mamba_cache_mode(serving: ServingConfig) -> str:
    """MambaModelConfig: "align" when prefix caching is on (vLLM 0.33's default for generative hybrid models), else "none"."""
    return "align" if serving.enable_prefix_caching else "none"


def mla_block_size(spec: ModelSpec, serving: ServingConfig, gpu: Gpu) -> int:
    """The block size of the MLA backend vLLM 0.33 picks on this GPU, unless --block-size was given
    (Platform.update_block_size_for_backend, phase 1); `serving.block_size` for models without MLA."""
    if "block_size" not in serving.defaulted:
        return serving.block_size
    sizes = {layer.backend_block_size(gpu.compute_capability_major, serving.kv_cache_dtype) for layer in spec.layers} - {None}
    return max(sizes) if sizes else serving.block_size


def hybrid_block_size(attn_page_per_token: int, mamba_page: int, block_size: int, kernel_alignment: int) -> int:
    """Platform._align_hybrid_block_size: the smallest multiple of the kernel alignment whose attention page holds
    a Mamba state (attn_block_size), or the configured block size when that is already larger."""
    attn_block = kernel_alignment * cdiv(mamba_page, kernel_alignment * attn_page_per_token)
    attn_block = FLASH_ATTN_KERNEL_BLOCK * cdiv(attn_block, FLASH_ATTN_KERNEL_BLOCK)  # lcm of the backends' kernel blocks
    return max(block_size, attn_block)


def model_knobs(spec: ModelSpec, serving: ServingConfig, gpu: Gpu) -> KVKnobs:
    """The knobs every layer builds its spec with, after vLLM's block-size decisions for the whole model."""
    mode = mamba_cache_mode(serving)
    mla_bs = mla_block_size(spec, serving, gpu)
    knobs = KVKnobs(
        block_size=serving.block_size,
        tensor_parallel_size=serving.tensor_parallel_size,
        kv_dtype_bytes=serving.kv_cache_dtype_bytes,
        model_dtype_bytes=serving.dtype_bytes,
        num_speculative_tokens=serving.num_speculative_tokens,
        mla_block_size=mla_bs,
        mamba_cache_mode=mode,
        mamba_block_size=serving.block_size if mode == "align" else serving.max_model_len,
        compute_capability_major=gpu.compute_capability_major,
    )
    states = [layer for layer in spec.layers if layer.is_state]
    attention = [s for s in (layer.kv_spec(knobs) for layer in spec.layers if not layer.is_state) if s is not None]
    if not states or not attention:
        return knobs
    # The attention page of one token, from the model's attention layers (vLLM: model_config head size and KV heads).
    page_per_token = _page_per_token(attention[0])
    mamba_page = max(layer.aligned_state_bytes(knobs) for layer in states)
    base = attention[0].block_size
    kernel = max(FLASH_ATTN_KERNEL_BLOCK, base, *(s.hybrid_kernel_block for s in attention))
    if mode == "align":
        alignments = [layer.checkpoint_alignment(knobs) for layer in states]
        checkpoint = 1 if None in alignments else math.lcm(*alignments)  # get_mamba_prefill_checkpoint_alignment or 1
        kernel = math.lcm(kernel, checkpoint)
    block = hybrid_block_size(page_per_token, mamba_page, base, kernel)
    attn_page = block * page_per_token
    return replace(
        knobs,
        block_size=block,
        mla_block_size=block,
        mamba_block_size=block if mode == "align" else serving.max_model_len,
        mamba_page_size_padded=attn_page if attn_page != mamba_page else None,
    )


def _page_per_token(spec: KVCacheSpec) -> int:
    return spec.page_size_bytes // spec.block_size


def layer_specs(spec: ModelSpec, serving: ServingConfig, gpu: Gpu) -> list[KVCacheSpec]:
    """Each layer's spec on one rank; layers that share another layer's KV build none (left out of allocation)."""
    knobs = model_knobs(spec, serving, gpu)
    return [s for s in (layer.kv_spec(knobs) for layer in spec.layers) if s is not None]


# kv_groups_for memo: keyed by the identity of the model's layer tuple and the knobs the specs depend on.
# The entry keeps a reference to the tuple, so its id cannot be reused while the entry lives.
_GROUPS_MEMO: dict[tuple[Any, ...], tuple[tuple[Any, ...], tuple[KVGroup, ...]]] = {}
_GROUPS_MEMO_SIZE = 256


def kv_groups_for(spec: ModelSpec, serving: ServingConfig, gpu: Gpu) -> list[KVGroup]:
    """`kv_cache_groups(layer_specs(...))`, memoized on what the specs depend on (a sweep varies far more)."""
    key = (
        id(spec.layers),
        serving.block_size,
        "block_size" in serving.defaulted,
        serving.tensor_parallel_size,
        serving.kv_cache_dtype,
        serving.kv_cache_dtype_bytes,
        serving.dtype_bytes,
        serving.num_speculative_tokens,
        serving.enable_prefix_caching,
        serving.max_model_len if any(layer.is_state for layer in spec.layers) else 0,
        gpu.compute_capability_major,
    )
    hit = _GROUPS_MEMO.get(key)
    if hit is not None and hit[0] is spec.layers:
        return list(hit[1])
    groups = kv_cache_groups(layer_specs(spec, serving, gpu))
    if len(_GROUPS_MEMO) >= _GROUPS_MEMO_SIZE:
        _GROUPS_MEMO.clear()
    _GROUPS_MEMO[key] = (spec.layers, tuple(groups))
    return groups


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


def max_model_len_that_fits(groups: list[KVGroup], bpb: int, serving: ServingConfig, available: int, upper: int, window_batches: int = 2) -> int:
    """vLLM: _estimate_max_model_len_from_groups: binary search in [1, upper]; 0 when one token does not fit."""
    budget = available - bpb  # the null block is held back
    # Groups of one spec need the same blocks: count each distinct spec once per step (Gemma-3: 6 equal sliding groups).
    distinct = list(Counter(g.spec for g in groups).items())
    lo, hi, best = 1, upper, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        ctx = block_context(serving, mid, window_batches)
        if bpb * sum(n * spec.blocks_per_request_vllm(ctx) for spec, n in distinct) <= budget:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best
