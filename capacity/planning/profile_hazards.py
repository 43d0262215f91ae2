"""The hazards of what a plan's measurements rest on: the profile's knobs, its GPU and TP size, a CUDA OOM while
profiling, and the fake-tensor trace's known undercount (registered last by capacity/planning/hazards.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from capacity.planning.kv_groups import max_model_len_that_fits
from capacity.planning.plan import ERROR, INFO, WARNING, Hazard
from capacity.units import gib

if TYPE_CHECKING:
    from capacity.planning.plan import Plan


def profile_provenance(plan: Plan) -> Iterator[Hazard]:
    profile = plan.profile
    if profile is None:
        return
    fp = profile.fingerprint
    if profile.oom is not None:
        yield Hazard(
            "profile_out_of_memory",
            ERROR,
            f"CUDA out of memory while profiling, in phase '{profile.oom.phase}' ({profile.oom.detail}): {profile.oom.message}",
            "lower --max-num-batched-tokens / --max-num-seqs / --limit-mm-per-prompt, or use a larger GPU or more tensor parallelism",
        )
    s, b = plan.serving, plan.budget
    now = {
        "max_num_batched_tokens": s.max_num_batched_tokens,
        "max_num_seqs": s.max_num_seqs,
        "num_speculative_tokens": s.num_speculative_tokens,
        "dtype": s.dtype,
        "enforce_eager": s.enforce_eager,
        "encoder_items": b.profile_items,
        "encoder_tokens_per_item": b.profile_tokens_per_item,
    }
    differ = [f"{k} {fp.knobs.get(k)} profiled, {v} now" for k, v in now.items() if fp.knobs.get(k) != v]
    if differ:
        more_items = b.profile_items > int(fp.knobs.get("encoder_items", 0) or 0)
        yield Hazard(
            "profile_knobs_differ",
            WARNING,
            "the measured terms were sized by other knobs: " + "; ".join(differ) + (" (more encoder items per batch than profiled)" if more_items else ""),
            "re-run `capacity profile` with these knobs on the GPU",
        )
    if profile.measured_tensor_parallel_size != s.tensor_parallel_size and fp.device != "fake":
        yield Hazard(
            "profile_other_tensor_parallel_size",
            INFO,
            f"the profile measured the model split over {profile.measured_tensor_parallel_size} rank(s), the plan is for TP {s.tensor_parallel_size}: "
            "one rank's weights come from vLLM's parallel layout, its activations and CUDA graphs from the measured ones divided as the formula divides them",
            f"profile with --tensor-parallel-size {s.tensor_parallel_size} on {s.tensor_parallel_size} GPUs for measured per-rank figures",
        )
    gap = plan.spec.family.trace_undercount_percent
    if fp.device == "fake" and gap:
        yield trace_misses_workspaces(plan, gap)
    if fp.device == "fake":
        yield Hazard(
            "estimated_by_fake_trace",
            INFO,
            "weights, encoder outputs and activations come from the real model's phases run on fake tensors (no GPU); "
            "device-level memory is an H200-measured constant and CUDA graphs a formula",
            "profile on the target GPU (`capacity profile`) for measured figures",
        )
    elif fp.device != "cuda":
        yield Hazard("profile_from_cpu_probe", INFO, "this profile was taken with the CPU probe (live tensor bytes), not on a GPU", "profile on the target GPU for real measurements")
    elif fp.gpu_name.lower().replace("nvidia ", "") != plan.gpu.name.lower().replace("nvidia ", ""):
        yield Hazard(
            "profile_gpu_differs",
            INFO,
            f"measured on {fp.gpu_name}, planning for {plan.gpu.name}: weights, encoder outputs and activations carry over; CUDA context, allocator reserve and graph memory may differ",
            f"profile on a {plan.gpu.name} for exact figures",
        )


def kv_with_less_memory(plan: Plan, less: int) -> tuple[int, int, bool]:
    """(num_blocks, whole requests at max_model_len, vLLM refuses to start) had the KV cache `less` bytes fewer:
    the planner's num_blocks = available // bytes_per_block, requests = (num_blocks - 1 null block) // blocks per
    request, and vLLM's _check_enough_kv_cache_memory (one request at max_model_len must fit beside a block)."""
    kv = plan.kv
    available = kv.available_bytes - less
    blocks = max(available, 0) // kv.bytes_per_block
    requests = max(blocks - 1, 0) // kv.blocks_per_request_actual
    return blocks, requests, available - kv.bytes_per_block < kv.needed_for_one_request_bytes


def trace_misses_workspaces(plan: Plan, gap: int) -> Hazard:
    """A family whose fake-tensor trace undercounts the activation peak (its encoder's cuDNN / attention workspaces).

    vLLM measures the real peak at startup (Worker.determine_available_memory: torch.cuda.memory_stats' peak, the
    workspaces included, since torch allocates them through its caching allocator), so the undercount cannot make vLLM
    run out of memory: it makes this plan's KV cache up to that much larger than vLLM's. A warning when that changes
    what the plan says the deployment does (requests run at once, or starting at all), else an info with the margin.
    """
    s = plan.serving
    missed = plan.memory["activation_peak"].bytes * gap // 100
    blocks, requests, refuses = kv_with_less_memory(plan, missed)
    runs = min(requests, s.max_num_seqs)
    shorter = 0
    if s.auto_fit_max_model_len:  # --max-model-len auto: vLLM would fit a shorter length into the smaller cache
        groups = [g.group for g in plan.kv.groups]
        fit = max_model_len_that_fits(groups, plan.kv.bytes_per_block, s, plan.kv.available_bytes - missed, s.max_model_len, plan.semantics.window_batches)
        shorter = fit if 0 < fit < s.max_model_len else 0
    changes = refuses or runs < plan.max_concurrent_requests or bool(shorter)
    found = (
        f"on the H200 this family's measured activation peak was {gap} % above its fake-tensor trace (its encoder's convolution and attention "
        "workspaces come from the CUDA allocator, which fake tensors cannot see; vLLM measures them at startup, so its KV cache, not its "
        f"safety, takes the difference): the KV cache may be up to {gib(missed)} ({plan.kv.num_blocks - blocks:,} blocks) smaller than planned"
    )
    if refuses:
        found += f"; it would then have no room for one request at max_model_len {s.max_model_len:,} and vLLM would refuse to start"
    elif shorter:
        found += f"; --max-model-len auto would then fit {shorter:,} tokens, not {s.max_model_len:,}"
    elif changes:
        found += f"; it would then hold {requests:,} requests at max_model_len, and the server run {runs:,} at once, not {plan.max_concurrent_requests:,}"
    else:
        found += f"; it would still hold {requests:,} requests at max_model_len, and the server still run {runs:,} at once (max_num_seqs {s.max_num_seqs})"
    return Hazard(
        "trace_misses_workspaces",
        WARNING if changes else INFO,
        found,
        "profile on a GPU (`capacity profile`) before planning a tight deployment, or keep gpu_memory_utilization headroom"
        if changes
        else "none needed here; profile on a GPU (`capacity profile`) for the measured figure",
    )
