"""Which estimate a plan comes from: a saved profile, the local GPU, a fake-tensor trace or the formulas (--estimate,
CAPACITY_ESTIMATE)."""

from __future__ import annotations

import os
from typing import Any

from capacity.cli.progress import profile_with_progress
from capacity.errors import BadInput

ESTIMATES = ("trace", "formula")


def chosen_estimate(estimate: str | None) -> str:
    how = (estimate or os.environ.get("CAPACITY_ESTIMATE") or "trace").strip().lower()
    if how not in ESTIMATES:
        raise BadInput(f"--estimate {how!r}: use trace or formula")
    return how


def estimate_asked(estimate: str | None) -> bool:
    """Whether the user chose an estimate (--estimate, CAPACITY_ESTIMATE): then it is the one used, and a local GPU is
    not profiled first."""
    return bool(estimate or os.environ.get("CAPACITY_ESTIMATE"))


def local_cuda_gpu() -> bool:
    """An NVIDIA GPU here that torch can use (NVML first: it is cheap and needs no CUDA context)."""
    from capacity.gpu.detect import detect_local_gpu

    if detect_local_gpu() is None:
        return False
    from profilers.api import cuda_available

    return cuda_available()


def trace_or_reason(model: str, args: Any, gpu_name: str | None) -> tuple[Any, Any] | str:
    """profilers.api.trace_model(model, args): its (plan, profile), or, where the trace cannot run (a family with no
    trace, a data-dependent op such as .item() or nonzero), the reason, which the caller's formula plan carries.

    torch logs an op that fails under fake tensors (e.g. numel overflow for absurd knobs) as an ERROR with its
    traceback before raising; that is handled here, so stderr is kept clean (a filter, not a level: importing torch
    re-sets its loggers' levels). The trace imports torch and transformers: the process's last collections skip
    their heap (freeze_heap_at_exit)."""
    import logging

    from profilers.api import TraceStopped, stopped_reason, trace_model
    from profilers.startup import freeze_heap_at_exit

    freeze_heap_at_exit()
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    quiet = logging.Filter("capacity.quiet")  # passes only records of a logger named capacity.quiet...: none of torch's
    fake_log.addFilter(quiet)
    try:
        return trace_model(model, args, gpu_name=gpu_name)
    except TraceStopped as stopped:
        return stopped.reason
    except Exception as exc:
        found = stopped_reason(exc)
        if found is None:
            raise
        return found
    finally:
        fake_log.removeFilter(quiet)


def plan_with_estimate(model: str, args: Any, gpu: str | None, measured: Any, *, offline: bool, estimate: str | None, semantics: Any = None) -> Any:
    """The plan from a saved profile, else from profiling the local GPU, else from a fake-tensor trace or formulas;
    under `semantics` (another vLLM release's rules, --vllm-version) when given, else 0.33's."""
    from dataclasses import replace

    from capacity.planning.planner import plan_for
    from capacity.serving.data_parallel import node_gpu_name
    from capacity.vllm.versions import LATEST

    gpu = node_gpu_name(args.node, gpu)  # --node "8x H200" names the GPU
    how = chosen_estimate(estimate)
    if semantics is not None and semantics is not LATEST:
        return plan_for_release(model, args, gpu, measured, offline=offline, how=how, semantics=semantics, asked=estimate_asked(estimate))
    if measured is not None:
        return plan_for(model, args, gpu, measured)
    if not offline and not estimate_asked(estimate) and local_cuda_gpu():
        return profile_with_progress(model, args, gpu)[0]
    if how == "formula":
        return plan_for(model, args, gpu)
    traced = trace_or_reason(model, args, gpu)
    if not isinstance(traced, str):
        return traced[0]
    result = plan_for(model, args, gpu)
    return replace(result, notes=(*result.notes, traced))


def plan_for_release(model: str, args: Any, gpu: str | None, measured: Any, *, offline: bool, how: str, semantics: Any, asked: bool = False) -> Any:
    """`plan_with_estimate` under another vLLM release's rules. The measurement (a GPU profile or the fake-tensor trace)
    runs on the knobs that release resolves (its utilization and batch defaults: the formula plan resolves them), and
    the plan is made from it with the release's rules. The trace does not depend on the release otherwise (it runs
    0.33's phases on those knobs; the release's sampler and graph rules are applied to its figures in build_plan), so
    its disk-cache key, which holds every resolved knob, needs no version."""
    from dataclasses import replace

    from capacity.planning.planner import plan_for

    if measured is not None:
        return plan_for(model, args, gpu, measured, semantics=semantics)
    base = plan_for(model, args, gpu, semantics=semantics)
    profile_here = not offline and not asked and local_cuda_gpu()
    if how == "formula" and not profile_here:
        return base
    s = base.serving
    resolved = replace(args, gpu_memory_utilization=s.gpu_memory_utilization, max_num_batched_tokens=s.max_num_batched_tokens, max_num_seqs=s.max_num_seqs)
    if profile_here:
        profile = profile_with_progress(model, resolved, gpu)[1]
        return plan_for(model, args, gpu, profile, semantics=semantics)
    traced = trace_or_reason(model, resolved, gpu)
    if isinstance(traced, str):
        return replace(base, notes=(*base.notes, traced))
    return plan_for(model, args, gpu, traced[1], semantics=semantics)


def default_estimate(model: str, semantics: Any = None) -> Any:
    """`capacity plan`'s default estimate of a configuration, offline: the fake-tensor trace (formulas where a family
    has none), under `semantics` (a --vllm-version release's rules) when given."""

    def plan(gpu: Any, args: Any) -> Any:
        return plan_with_estimate(model, args, gpu.name, None, offline=True, estimate="trace", semantics=semantics)

    return plan
