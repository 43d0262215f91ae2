"""A sweep's fake-tensor traces: each distinct one once, the disk cache's entries read instead, the rest in worker
processes (one per core), every trace in a process on one shared fake model (profilers/shared_model.py).

Traces are keyed by the knobs that size the traced phases. Tensor parallelism is not among them: a trace builds the
whole model, and the planner turns its terms into one rank's (capacity/memory/rank_scaling.py RankScaling), so a
sweep over TP traces each point once, and every point equals `capacity plan` on its knobs.

Where the time of a first sweep goes (bench/results/speed-sweeps-2026-12-02, Nemotron-Parse on 2 cores): each
worker imports torch and transformers (about 2 s), builds and adopts the model and runs its first trace (about
2.7 s, transformers' model code imported then); each later trace on the shared model about 0.35 s (0.9 s when each
built and adopted its own model).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
from typing import Any

from capacity.gpu.catalog import Gpu
from capacity.memory.measured_profile import MemoryProfile
from capacity.memory.sampler import sampler_form
from capacity.model.spec import ModelSpec
from capacity.serving.config import ServingConfig
from capacity.serving.encoder_budget import build_budget
from capacity.source.resolve import ModelSource
from profilers.api import TraceStopped, cached_trace, stored_trace
from profilers.run import profiled_knobs
from profilers.shared_model import SharedFakeModel

Job = tuple[ModelSource, ModelSpec, ServingConfig, Gpu]
_TRACES: dict[tuple[Any, ...], MemoryProfile | TraceStopped] = {}  # this process's sweep traces, by sweep_key
_SHARED = SharedFakeModel()  # the model every sweep trace of this process runs on


def sweep_key(source: ModelSource, spec: ModelSpec, serving: ServingConfig, gpu: Gpu) -> tuple[Any, ...]:
    """What a sweep's trace depends on: the config, the knobs that size the phases (not TP), and the one thing the
    GPU changes in a trace without warmup: the sampler's FlashInfer or Triton top-k/top-p path (sampler_form)."""
    knobs = profiled_knobs(serving, build_budget(spec, serving, enable_cache=False))
    knobs.pop("tensor_parallel_size")
    return (source.config_sha256, json.dumps(knobs, sort_keys=True, default=str), sampler_form(gpu, warmup_pass=True).flashinfer)


def traced_profile(source: ModelSource, spec: ModelSpec, serving: ServingConfig, gpu: Gpu) -> tuple[MemoryProfile | None, str]:
    """The fake-tensor trace `capacity plan` runs by default for these knobs (memoized); (None, reason) when
    this family cannot be traced, as plan falls back to the formulas."""
    key = sweep_key(source, spec, serving, gpu)
    if key not in _TRACES:
        try:
            _TRACES[key] = cached_trace(source, spec, serving, gpu, warmup=False, shared=_SHARED)
        except TraceStopped as stopped:
            _TRACES[key] = stopped
    found = _TRACES[key]
    return (None, found.reason) if isinstance(found, TraceStopped) else (found, "")


def trace_in_parallel(source: ModelSource, spec: ModelSpec, points: list[tuple[ServingConfig, Gpu]], workers: int | None = None) -> int:
    """A sweep's traces, each distinct one (sweep_key) traced once, in as many processes as the machine
    has cores for, the disk cache's entries read instead; returns how many it traced (0 where fewer than two are
    left: traced_profile traces those in this process). The workers are copies of this process made after its own
    first trace where that is safe (_forkable), else new processes. A trace that fails in a worker is left to
    traced_profile, which runs it again and reports why."""
    pending: dict[tuple[Any, ...], tuple[ServingConfig, Gpu]] = {}
    for serving, gpu in points:
        key = sweep_key(source, spec, serving, gpu)
        if key in _TRACES or key in pending:
            continue
        stored = stored_trace(source, spec, serving, gpu, warmup=False)
        if stored is not None:
            _TRACES[key] = stored
        else:
            pending[key] = (serving, gpu)
    usable = workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    count = min(len(pending), usable)
    if count < 2:
        return 0
    jobs = [(source, spec, serving, gpu) for serving, gpu in pending.values()]
    for key, traced in zip(pending, _forked(jobs, usable) if _forkable() else _spawned(jobs, count), strict=True):
        if traced is not None:
            _TRACES[key] = traced
    return sum(1 for key in pending if key in _TRACES)


def _forkable() -> bool:
    """Whether this process may be copied (fork) into the workers: on Linux, with no other Python thread (a lock
    that thread held, the import lock among them, would stay held in every copy; a test runner's threads)."""
    return sys.platform == "linux" and threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods()


def _forked(jobs: list[Job], usable: int) -> list[MemoryProfile | TraceStopped | None]:
    """The first trace here, then the others in copies of this process: each copy starts with torch, transformers
    and the model's code imported and the shared model built, which spawned workers each paid again (about 7 s of
    CPU each). This process runs on one intra-op thread meanwhile: its copies then hold no OpenMP team (libgomp's
    threads are not copied, and a copy that used them would wait on them forever)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        first = _trace_for_sweep(jobs[0])
        rest = jobs[1:]
        if len(rest) < 2 or usable < 2:
            return [first, *map(_trace_for_sweep, rest)]
        with multiprocessing.get_context("fork").Pool(min(len(rest), usable)) as pool:
            return [first, *pool.map(_trace_for_sweep, rest, chunksize=1)]
    finally:
        torch.set_num_threads(threads)


def _spawned(jobs: list[Job], count: int) -> list[MemoryProfile | TraceStopped | None]:
    """Every trace in `count` new processes, each importing torch and transformers and building the model once."""
    with multiprocessing.get_context("spawn").Pool(count, initializer=_one_thread) as pool:
        return pool.map(_trace_for_sweep, jobs, chunksize=1)


def _one_thread() -> None:
    """A worker among one per core: one intra-op thread each (the host-side preprocessing is all they compute)."""
    import torch

    torch.set_num_threads(1)


def _trace_for_sweep(job: Job) -> MemoryProfile | TraceStopped | None:
    """One worker's trace, on the worker's shared model, or why it stopped (None on any other error: traced_profile
    runs it again in the parent, which reports it)."""
    try:
        return cached_trace(*job, warmup=False, shared=_SHARED)
    except TraceStopped as stopped:
        return stopped
    except Exception:
        return None
