"""`capacity verify`: allocate the planned KV pool next to the model and run the worst steady state.

The pool is one allocation of num_blocks x bytes_per_block, laid out as vLLM's attention layers see
it (per layer slot: K and V, num_blocks x block_size x kv_heads x head_size). Each of the plan's
concurrent requests gets its self-attention blocks (max_model_len tokens) and cross-attention blocks
(its encoder tokens) inside the pool; one encoder batch of max-size items is run and its K/V written
into every request's cross blocks; then decode steps run one token per request with self-attention
over the full context and cross-attention over the full encoder length, reading K/V from the pool
(as vLLM's kernels do), followed by the sampler. This is the path of encoder-decoder models with BART-style
decoder layers (Whisper, Nemotron-Parse); every text decoder transformers runs with a cache (decoder-only LLMs and
VLMs, sliding windows, MoE, Llama-3.2-Vision's cross-attention layers) runs over the same pool as its transformers
cache instead (profilers/verify_text.py).
"""

from __future__ import annotations

import gc
import time
from dataclasses import replace
from typing import Any

from capacity.errors import BadInput
from capacity.memory.activations import tower_excess_bytes
from capacity.planning.plan import Plan
from capacity.planning.verify_result import VerifyResult
from capacity.serving.encoder_budget import build_budget
from capacity.units import cdiv
from profilers.probes import MemoryProbe
from profilers.run import PhaseCallback, Placement, WholeModel, _Phases, _randomize, profilable_family, profiled_item, released, sampler_pass
from profilers.verify_text import check_pool_layers, pool_tensor, runs_with_cache, steady_state


class RandomWholeModel(WholeModel):
    """verify's model: the whole architecture with random weights (the pool, not the values, is under test)."""

    def load(self, spec: Any, source: Any, serving: Any, probe: MemoryProbe, device: str, attn: str) -> tuple[Any, str]:
        model = spec.family.build_module(dict(source.config), device=device, dtype=serving.dtype, init_weights=False).eval()
        _randomize(model)
        return model, "random"


def _attend(attn: Any, x: Any, keys: Any, values: Any) -> Any:
    """Multi-head attention of x's queries over cached keys/values [R, L, heads, head_dim] (pool views)."""
    import torch

    batch = x.shape[0]
    q = attn.q_proj(x).view(batch, -1, keys.shape[2], keys.shape[3]).transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(q, keys.transpose(1, 2), values.transpose(1, 2))
    return attn.out_proj(out.transpose(1, 2).reshape(batch, -1, keys.shape[2] * keys.shape[3]))


def check_verifiable_family(spec: Any) -> None:
    """BadInput when verify cannot run this model's family at all (checked before it is profiled)."""
    family = profilable_family(spec)
    if not family.verify_decoder_path and not runs_with_cache(family):
        from capacity.model.family import all_families

        verifiable = ", ".join(f.name for f in all_families() if f.verify_decoder_path or runs_with_cache(f))
        raise BadInput(f"verify runs BART-style encoder-decoders and text decoders transformers runs with a cache ({verifiable}); {family.name} is not one yet")


def check_verifiable(plan: Plan) -> None:
    """BadInput when verify cannot run this plan (checked before anything is estimated or allocated)."""
    spec, serving, kv = plan.spec, plan.serving, plan.kv
    check_verifiable_family(spec)
    family = spec.family
    if serving.kv_cache_dtype_bytes != serving.dtype_bytes:
        raise BadInput("verify runs attention on the pool in the model dtype: plan it with --kv-cache-dtype auto")
    if not family.verify_decoder_path:
        check_pool_layers(plan)
    elif any(g.group.num_padding_layers for g in kv.groups) or len({g.group.spec.page_size_bytes for g in kv.groups}) != 1:
        raise BadInput("verify needs KV groups of equal layers and pages (self + cross attention)")


def _over_pool_cache(
    plan: Plan, family: Any, model: Any, placement: Placement, phases: _Phases, state: dict[str, Any], probe: MemoryProbe, track: Any, device: str, dtype: Any, requests: int, steps: int
) -> None:
    """A text decoder over the pool as its transformers cache (profilers/verify_text.py): the pool, the encoder's
    items (kept alive: the encoder cache), then prefill and decode."""
    import torch

    kv = plan.kv
    with phases.phase("kv_pool", f"{kv.num_blocks:,} blocks x {kv.bytes_per_block:,} B + block tables"):
        state["pool"] = pool_tensor(plan, dtype, device)
        state["tables"] = torch.zeros(plan.memory["block_tables"].bytes // 4, dtype=torch.int32, device=device)
    track()
    if requests < 1:
        raise BadInput("the plan holds no whole request at max_model_len: nothing to verify")
    budget = build_budget(plan.spec, plan.serving)
    if budget.profile_items:
        detail = f"{budget.profile_items} max-size {budget.modality_with_max_tokens} items of {budget.profile_tokens_per_item} tokens, kept as the encoder cache"
        with phases.phase("encoder", detail):
            with probe.host():
                item = profiled_item(family, plan.spec, plan.source, device, dtype, budget.profile_tokens_per_item)
            item = replace(item, tensors={k: probe.adopt(v) for k, v in item.tensors.items()})
            state["encoder_outputs"] = placement.encode(family, model, item, budget.profile_items)
            del item
        track()
    steady_state(plan, family, model, state["encoder_outputs"], state["pool"], requests, device, steps, phases.phase, track, sampler_pass)


def run_verify(
    plan: Plan, probe: MemoryProbe, *, steps: int = 3, reproducer: str = "", on_phase: PhaseCallback | None = None, placement: Placement | None = None
) -> VerifyResult:
    """`placement`: the whole model (default) or one tensor-parallel rank's shard (its pool holds the rank's KV heads)."""
    import torch

    spec, serving, kv = plan.spec, plan.serving, plan.kv
    check_verifiable(plan)
    family = spec.family
    placement = placement or RandomWholeModel()
    phases = _Phases(probe, on_phase)
    state: dict[str, Any] = {}
    probe.init()
    info = probe.describe()
    device = getattr(probe, "device", "cpu")
    dtype = getattr(torch, serving.dtype)
    probe.empty_cache()
    baseline_used = probe.device_used()
    requests = min(plan.concurrency.actual_requests, serving.max_num_seqs)
    # the plan charges vLLM's encoder kernels (the family's factor); the run's tower is transformers': hold back that
    # many pool blocks (capacity/memory/activations.py tower_excess_bytes), so the run's memory stands for vLLM's
    excess = tower_excess_bytes(family, plan.memory["activation_peak"]) if not family.verify_decoder_path else 0
    held = cdiv(excess, kv.bytes_per_block) if excess else 0
    group = kv.groups[0].group.spec
    bs, heads, head = group.block_size, group.num_kv_heads, group.head_size
    slots = kv.bytes_per_block // group.page_size_bytes
    self_blocks, cross_blocks = cdiv(serving.max_model_len, bs), cdiv(spec.encoder_tokens_per_request, bs)
    start = time.perf_counter()
    peak_alloc = 0
    peak_used = 0

    def track() -> None:
        nonlocal peak_alloc, peak_used
        last = phases.done[-1]
        peak_alloc = max(peak_alloc, last.peak_allocated_bytes)
        used = last.device_used_bytes
        peak_used = max(peak_used, (used - (baseline_used or 0)) if used is not None else last.peak_allocated_bytes)

    with released(state, probe) as caught, probe.tracking(), torch.inference_mode():
        with phases.phase("weights", f"{spec.architecture} {placement.describe()} in {serving.dtype}"):
            state["model"], _ = placement.load(spec, plan.source, serving, probe, device, "sdpa")
        track()
        model = state["model"]
        decoder = pool = None
        if not family.verify_decoder_path:
            state["encoder_outputs"] = []
            if held:  # transformers' tower needs `excess` more than the plan charges: its blocks wait, with their requests
                per_request = sum(g.blocks_per_request_actual for g in kv.groups)
                requests = min(requests, (kv.num_blocks - held - 1) // per_request)
                pool_plan = replace(plan, kv=replace(kv, num_blocks=kv.num_blocks - held))
            else:
                pool_plan = plan
            _over_pool_cache(pool_plan, family, model, placement, phases, state, probe, track, device, dtype, requests, steps)
        else:
            decoder = family.verify_decoder(model)
            with phases.phase("kv_pool", f"{kv.num_blocks:,} blocks x {kv.bytes_per_block:,} B + block tables"):
                state["pool"] = torch.zeros(slots, 2, kv.num_blocks, bs, heads, head, dtype=dtype, device=device)
                state["tables"] = torch.zeros(plan.memory["block_tables"].bytes // 4, dtype=torch.int32, device=device)
            track()
            if requests < 1:
                raise BadInput("the plan holds no whole request at max_model_len: nothing to verify")
            pool = state["pool"]
            first_cross = 1 + requests * self_blocks  # block 0 is the null block

            def self_kv(layer: int, which: int) -> Any:
                return pool[layer, which, 1:first_cross].reshape(requests, self_blocks * bs, heads, head)[:, : serving.max_model_len]

            def cross_kv(layer: int, which: int) -> Any:
                region = pool[layer, which, first_cross : first_cross + requests * cross_blocks]
                return region.reshape(requests, cross_blocks * bs, heads, head)[:, : spec.encoder_tokens_per_request]

            budget = build_budget(spec, serving)
            items = max(budget.profile_items, 1)
            with phases.phase("encoder", f"{items} max-size items; their K/V written into {requests} requests' cross-attention blocks"):
                with probe.host():
                    item = family.encoder_input(spec, plan.source, device, dtype, budget.profile_tokens_per_item)
                outputs = placement.encode(family, model, item, items)
                enc = outputs[0].unsqueeze(0)
                del item, outputs
                for i, layer in enumerate(decoder.layers):
                    cross_kv(i, 0).copy_(layer.encoder_attn.k_proj(enc).view(1, -1, heads, head).expand(requests, -1, -1, -1))
                    cross_kv(i, 1).copy_(layer.encoder_attn.v_proj(enc).view(1, -1, heads, head).expand(requests, -1, -1, -1))
                del enc
            track()
            for step in range(steps):
                with phases.phase(
                    f"decode_{step}", f"{requests} requests x 1 token: self-attention over {serving.max_model_len}, cross over {spec.encoder_tokens_per_request}"
                ):
                    ids = torch.zeros(requests, 1, dtype=torch.long, device=device)
                    x = decoder.embed_tokens(ids)
                    if getattr(decoder, "layernorm_embedding", None) is not None:
                        x = decoder.layernorm_embedding(x)
                    for i, layer in enumerate(decoder.layers):
                        h = layer.self_attn_layer_norm(x)
                        keys, values = self_kv(i, 0), self_kv(i, 1)
                        keys[:, -1:].copy_(layer.self_attn.k_proj(h).view(requests, 1, heads, head))
                        values[:, -1:].copy_(layer.self_attn.v_proj(h).view(requests, 1, heads, head))
                        x = x + _attend(layer.self_attn, h, keys, values)
                        x = x + _attend(layer.encoder_attn, layer.encoder_attn_layer_norm(x), cross_kv(i, 0), cross_kv(i, 1))
                        x = x + layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(x))))
                    logits = family.lm_head(model, decoder.layer_norm(x)[:, -1, :])
                    sampler_pass(logits)
                    del ids, x, logits
                track()
    oom = caught[0] if caught else None
    # The caching allocator's reserve: memory_reserved only grows between empty_cache calls (none during the run),
    # so the last phase's reserved bytes are the run's reserved peak (the CPU probe reserves exactly what is live).
    peak_reserved = max((ph.reserved_bytes for ph in phases.done), default=0)
    if device == "cpu":  # no device here: the plan's GPU and its CUDA-context estimate stand in
        gpu_total, headroom = plan.gpu.total_memory_bytes, plan.free_at_startup_bytes - plan.requested_memory_bytes
    else:
        gpu_total = int(info["gpu_total_memory_bytes"])
        headroom = gpu_total - (baseline_used or 0) - plan.requested_memory_bytes
    model = decoder = pool = None  # the last references: release the cached blocks too
    gc.collect()
    probe.empty_cache()
    return VerifyResult(
        model=plan.source.name,
        gpu_name=str(info["gpu_name"]),
        device=str(info["device"]),
        requested_bytes=plan.requested_memory_bytes,
        baseline_device_used_bytes=baseline_used or 0,
        kv_pool_bytes=kv.num_blocks * kv.bytes_per_block,
        block_tables_bytes=plan.memory["block_tables"].bytes,
        requests=requests,
        context_len=serving.max_model_len,
        encoder_len=spec.encoder_tokens_per_request,
        decode_steps=steps,
        peak_allocated_bytes=peak_alloc,
        peak_used_bytes=peak_used,
        wall_s=round(time.perf_counter() - start, 3),
        phases=tuple(phases.done),
        oom=oom,
        reproducer=reproducer,
        peak_reserved_bytes=peak_reserved,
        gpu_total_bytes=gpu_total,
        headroom_bytes=headroom,
        gpu_memory_utilization=serving.gpu_memory_utilization,
        rank=placement.rank,
        tower_excess_bytes=excess,
        pool_held_back_bytes=held * kv.bytes_per_block,
        notes=(f"the encoder ran transformers' tower, {excess:,} B above the vLLM-kernel activation the plan charges "
               f"(x {family.trace_encoder_to_vllm}): {held:,} of the pool's {kv.num_blocks:,} blocks were held back for it, "
               f"and {requests} of the plan's {min(plan.concurrency.actual_requests, serving.max_num_seqs)} requests ran",) if excess else (),
    )
