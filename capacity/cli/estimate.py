"""Which estimate a plan comes from: a saved profile, the local GPU, a fake-tensor trace or the formulas (--estimate,
CAPACITY_ESTIMATE)."""

from __future__ import annotations

import os
from typing import Any

from capacity.cli.progress import profile_with_progress
from capacity.errors import EXIT_BAD_INPUT, BadInput, CapacityError

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

    how = chosen_estimate(estimate)
    if measured is not None:
        return plan_for(model, args, gpu, measured)
    if not offline and local_cuda_gpu():
        return profile_with_progress(model, args, gpu)[0]
    if how == "formula":
        return plan_for(model, args, gpu)
    import logging

    from profilers.api import trace_model

    # torch logs an op that fails under fake tensors (e.g. numel overflow for absurd knobs) as an ERROR with its
    # traceback before raising; the exception is handled below (fallback to formulas, with a note), so keep stderr clean
    # (a filter, not a level: importing torch re-sets its loggers' levels)
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    quiet = logging.Filter("capacity.quiet")  # passes only records of a logger named capacity.quiet...: none of torch's
    fake_log.addFilter(quiet)
    try:
        result, _ = trace_model(model, args, gpu_name=gpu)
        return result
    except CapacityError as exc:
        if exc.exit_code != EXIT_BAD_INPUT or "not implemented yet" not in str(exc):
            raise
        reason = f"no fake-tensor trace for this family ({exc}); the activation terms are formulas"
    except Exception as exc:  # a data-dependent op (.item(), nonzero) stops a fake trace: documented fallback
        reason = f"the fake-tensor trace stopped at {type(exc).__name__}: {' '.join(str(exc).split())[:160]}; the activation terms are formulas"
    finally:
        fake_log.removeFilter(quiet)
    result = plan_for(model, args, gpu)
    return replace(result, notes=(*result.notes, reason))
