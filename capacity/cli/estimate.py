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


def local_cuda_gpu() -> bool:
    """An NVIDIA GPU here that torch can use (NVML first: it is cheap and needs no CUDA context)."""
    from capacity.gpu.detect import detect_local_gpu

    if detect_local_gpu() is None:
        return False
    from profilers.api import cuda_available

    return cuda_available()


def plan_with_estimate(model: str, args: Any, gpu: str | None, measured: Any, *, offline: bool, estimate: str | None) -> Any:
    """The plan from a saved profile, else from profiling the local GPU, else from a fake-tensor trace or formulas."""
    from dataclasses import replace

    from capacity.planning.planner import plan_for
    from capacity.serving.data_parallel import node_gpu_name

    gpu = node_gpu_name(args.node, gpu)  # --node "8x H200" names the GPU
    how = chosen_estimate(estimate)
    if measured is not None:
        return plan_for(model, args, gpu, measured)
    if not offline and local_cuda_gpu():
        return profile_with_progress(model, args, gpu)[0]
    if how == "formula":
        return plan_for(model, args, gpu)
    import logging

    from profilers.api import TraceStopped, stopped_reason, trace_model

    # torch logs an op that fails under fake tensors (e.g. numel overflow for absurd knobs) as an ERROR with its
    # traceback before raising; the exception is handled below (fallback to formulas, with a note), so keep stderr clean
    # (a filter, not a level: importing torch re-sets its loggers' levels)
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    quiet = logging.Filter("capacity.quiet")  # passes only records of a logger named capacity.quiet...: none of torch's
    fake_log.addFilter(quiet)
    try:
        result, _ = trace_model(model, args, gpu_name=gpu)
        return result
    except TraceStopped as stopped:  # a family with no trace, a data-dependent op (.item(), nonzero): documented fallback
        reason = stopped.reason
    except Exception as exc:
        found = stopped_reason(exc)
        if found is None:
            raise
        reason = found
    finally:
        fake_log.removeFilter(quiet)
    result = plan_for(model, args, gpu)
    return replace(result, notes=(*result.notes, reason))
