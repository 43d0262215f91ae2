"""`capacity verify` on a text decoder transformers runs with a cache (decoder-only LLMs and VLMs, MoE decoders,
Llama-3.2-Vision's cross-attention layers): the planned pool is that cache (profilers/pool_cache.py).

The steady state the plan promises, in vLLM's terms: every concurrent request holds its blocks at max_model_len
(and its encoder positions' cross-attention blocks); the encoder runs one batch of max-size items, whose outputs
stay alive as the encoder cache (and, for cross-attention, are written into every request's cross blocks); one
prefill chunk of max_num_batched_tokens runs through the decoder and the sampler; then decode steps run one token
per request, each attending its whole context in the pool (a sliding-window layer its window), followed by the
sampler over every request's logits.

The prefill chunk is a request's first (its queries attend only the chunk): transformers materialises a mask for a
chunk behind a context, where vLLM's kernels take none; the chunk's activations (MLP, logits) are those of any chunk.
"""

from __future__ import annotations

import inspect
from typing import Any

from capacity.errors import BadInput
from capacity.kv.specs import group_slots
from capacity.model.family import Family
from capacity.planning.kv_groups import layer_specs
from capacity.planning.plan import Plan
from profilers.pool_cache import GroupLayout, context, group_layouts, pool_cache, pool_layer_class

POOL_KINDS = ("full", "sliding_window", "cross")  # the layer kinds whose K/V the pool holds as attention pages


def runs_with_cache(family: Family) -> bool:
    """The family names a text model verify can run with the pool as its cache."""
    return type(family).cached_text_model is not Family.cached_text_model


def check_pool_layers(plan: Plan) -> None:
    """BadInput unless every KV layer is attention the pool can hold as plain pages, one per text layer."""
    spec = plan.spec
    other = sorted({layer.kind for layer in spec.layers if layer.kind not in POOL_KINDS})
    if other:
        raise BadInput(f"verify runs attention KV layers ({', '.join(POOL_KINDS)}); {spec.name} has {', '.join(other)} layers, which it does not model yet")
    specs = layer_specs(spec, plan.serving, plan.gpu)
    if len(specs) != len(spec.layers):
        raise BadInput(f"verify needs one KV layer per text layer; {spec.name} shares KV between layers, which it does not model yet")
    for g in plan.kv.groups:
        s = g.group.spec
        if s.page_size_bytes != 2 * s.block_size * s.num_kv_heads * s.head_size * plan.serving.kv_cache_dtype_bytes:
            raise BadInput(f"verify needs KV pages of exactly K and V; the {g.group.kind} group's page is padded to {s.page_size_bytes:,} B")


def steady_state(
    plan: Plan, family: Family, model: Any, outputs: list[Any], pool: Any, requests: int, device: str, steps: int, phase: Any, track: Any, sampler: Any
) -> None:
    """The prefill and decode phases over the pool (`phase(name, detail)` measures one; `track()` records it)."""
    import torch

    spec, serving, kv = plan.spec, plan.serving, plan.kv
    text = family.cached_text_model(model)
    # transformers 5.17 names the cache past_key_values; later 5.x `cache` (past_key_values deprecated)
    cache_kwarg = "cache" if "cache" in inspect.signature(text.forward).parameters else "past_key_values"
    if len(text.layers) != len(spec.layers):
        raise BadInput(f"verify: {spec.architecture}'s text model has {len(text.layers)} layers where the plan counts {len(spec.layers)} KV layers")
    specs = layer_specs(spec, serving, plan.gpu)
    places = group_slots(specs)
    layouts = group_layouts(
        [(g.blocks_per_request_actual, g.group.spec.block_size, g.group.spec.num_kv_heads, g.group.spec.head_size) for g in kv.groups],
        requests,
        kv.num_blocks,
    )
    enc_len = spec.encoder_tokens_per_request
    if spec.has_cross_attention:  # the image's keys and values, written into every request's cross blocks
        with phase("cross_kv", f"the first item's keys and values written into {requests} requests' cross-attention blocks ({enc_len} positions)"):
            states = outputs[0].unsqueeze(0)
            for i, layer in enumerate(spec.layers):
                if layer.kind == "cross":
                    group, slot = places[i]
                    keys, values = family.cross_attention_kv(model, i, states)
                    context(pool, slot, 0, layouts[group], requests)[:, :, :enc_len].copy_(keys.transpose(1, 2).expand(requests, -1, -1, -1))
                    context(pool, slot, 1, layouts[group], requests)[:, :, :enc_len].copy_(values.transpose(1, 2).expand(requests, -1, -1, -1))
            del states, keys, values
        track()

    def cache(batch: int, length: int) -> Any:
        """The first `batch` requests' layers, each `length` tokens into its context (cross layers: the encoder's)."""
        layers = []
        for i, layer in enumerate(spec.layers):
            group, slot = places[i]
            keys, values = (context(pool, slot, w, layouts[group], requests)[:batch] for w in (0, 1))
            if layer.kind == "cross":
                layers.append(pool_layer_class()(keys[:, :, :enc_len], values[:, :, :enc_len], enc_len))
            else:
                window = getattr(specs[i], "sliding_window", None)
                layers.append(pool_layer_class()(keys, values, length, window))
        return pool_cache(layers)

    chunk = min(serving.max_num_batched_tokens, serving.max_model_len)
    with phase("prefill", f"one request's first {chunk} tokens (max_num_batched_tokens {serving.max_num_batched_tokens}) through the decoder and the sampler"):
        ids = torch.zeros(1, chunk, dtype=torch.long, device=device)
        hidden = text(input_ids=ids, **{cache_kwarg: cache(1, 0)}, use_cache=True).last_hidden_state
        sampler(family.lm_head(model, hidden[:, -1, :]))
        del ids, hidden
    track()
    full = serving.max_model_len
    for step in range(steps):
        cross = f", cross over {enc_len}" if spec.has_cross_attention else ""
        with phase(f"decode_{step}", f"{requests} requests x 1 token: self-attention over {full}{cross}"):
            ids = torch.zeros(requests, 1, dtype=torch.long, device=device)
            hidden = text(input_ids=ids, **{cache_kwarg: cache(requests, full - 1)}, use_cache=True).last_hidden_state
            sampler(family.lm_head(model, hidden[:, -1, :]))
            del ids, hidden
        track()


def pool_tensor(plan: Plan, dtype: Any, device: str) -> Any:
    """The pool: layer slots x {K, V} x num_blocks x half a page, in the KV dtype (one allocation, as vLLM's)."""
    import torch

    kv = plan.kv
    first = kv.groups[0].group.spec
    half_page = first.block_size * first.num_kv_heads * first.head_size
    slots = kv.bytes_per_block // first.page_size_bytes
    return torch.zeros(slots, 2, kv.num_blocks, half_page, dtype=dtype, device=device)


__all__ = ["GroupLayout", "check_pool_layers", "pool_tensor", "runs_with_cache", "steady_state"]
