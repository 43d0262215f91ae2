"""A sweep's fake-tensor traces: each distinct one once, the disk cache's entries read instead, one trace for all
the knobs whose phases read the same (phase_inputs), the rest in worker processes (one per core), every trace of a
process on one shared fake model (profilers/shared_model.py).

Traces are keyed by the knobs that size the traced phases. Tensor parallelism is not among them: a trace builds the
whole model, and the planner turns its terms into one rank's (capacity/memory/rank_scaling.py RankScaling), so a
sweep over TP traces each point once, and every point equals `capacity plan` on its knobs.

Where a first sweep's time goes (Nemotron-Parse, 2 cores, measured 2026-12-02; bench/results/speed-sweeps-2026-12-02):
a process that traces imports torch and transformers (about 2 s), then its first trace imports torch._dynamo (in
FakeTensorMode) and transformers' model code and builds and adopts the model (about 2.7 s in all); every later trace
on the shared model takes about 0.35 s (0.9 s when each built and adopted its own). So the sweep's process runs the
first trace itself and the workers are copies of it made then (fork, where safe): none of them pays that again. The
README's 72-point sweep has 15 distinct traces, of which 12 are run; the 200-point one 45, of which 30.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
from dataclasses import replace
from typing import Any

from capacity.gpu.catalog import Gpu
from capacity.memory.measured_profile import MemoryProfile
from capacity.memory.sampler import sampler_form
from capacity.model.spec import ModelSpec
from capacity.serving.config import ServingConfig
from capacity.serving.encoder_budget import build_budget
from capacity.source.resolve import ModelSource
from profilers.api import TraceStopped, cached_trace, store_trace, stored_trace
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


def phase_inputs(source: ModelSource, spec: ModelSpec, serving: ServingConfig, gpu: Gpu) -> tuple[Any, ...]:
    """What the phases of a sweep's trace read (profilers/run.py run_profile on fake tensors, without CUDA graphs
    or warmup): the model and its dtype (weights), the encoder's profiled items (encoder), the batch of
    max_num_batched_tokens tokens over min(max_num_batched_tokens, max_num_seqs) requests (decoder, sampler) and the
    sampler's path on this GPU (and the GPU's name, which that phase's words give). Of the profiled knobs,
    max_model_len, the block size, the KV cache dtype and the speculative tokens are read by the planner only: two
    sweep keys with the same inputs measure the same bytes, and their profiles differ in the knobs their
    fingerprints record (`for_knobs`)."""
    budget = build_budget(spec, serving, enable_cache=False)
    batch = (serving.max_num_batched_tokens, min(serving.max_num_batched_tokens, serving.max_num_seqs))
    encoder = (budget.profile_items, budget.profile_tokens_per_item, budget.modality_with_max_tokens, json.dumps(dict(serving.mm_processor_kwargs), sort_keys=True, default=str))
    return (source.config_sha256, spec.family.name, serving.dtype, batch, encoder, sampler_form(gpu, warmup_pass=True).flashinfer, gpu.name)


def for_knobs(traced: MemoryProfile | TraceStopped, spec: ModelSpec, serving: ServingConfig) -> MemoryProfile | TraceStopped:
    """The trace of other knobs with the same phase_inputs: the same measurements (or the same stop), the
    fingerprint recording these knobs, as their own trace's would."""
    if isinstance(traced, TraceStopped):
        return traced
    knobs = profiled_knobs(serving, build_budget(spec, serving, enable_cache=False))
    return replace(traced, fingerprint=replace(traced.fingerprint, knobs=knobs))


def trace_in_parallel(source: ModelSource, spec: ModelSpec, points: list[tuple[ServingConfig, Gpu]], workers: int | None = None) -> int:
    """A sweep's traces: each distinct one (sweep_key) once, the disk cache's entries read instead, and of those
    whose phases read the same (phase_inputs) one traced and the others given its measurements (for_knobs, kept in
    the disk cache too). The traces run in as many processes as the machine has cores for: copies of this process
    made after its own first trace where that is safe (_forkable), else new processes; a single one here. Returns
    how many keys it has a trace for now. A trace that fails is left to traced_profile, which runs it again and
    reports why."""
    pending: dict[tuple[Any, ...], tuple[ServingConfig, Gpu]] = {}
    known: dict[tuple[Any, ...], MemoryProfile | TraceStopped] = {}  # phase_inputs -> a trace already here
    for serving, gpu in points:
        key = sweep_key(source, spec, serving, gpu)
        if key in pending:
            continue
        if key not in _TRACES and (stored := stored_trace(source, spec, serving, gpu, warmup=False)) is not None:
            _TRACES[key] = stored
        if key in _TRACES:
            known.setdefault(phase_inputs(source, spec, serving, gpu), _TRACES[key])
        else:
            pending[key] = (serving, gpu)
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for key, (serving, gpu) in pending.items():
        groups.setdefault(phase_inputs(source, spec, serving, gpu), []).append(key)
    to_trace = [inputs for inputs in groups if inputs not in known]
    jobs = [(source, spec, *pending[groups[inputs][0]]) for inputs in to_trace]
    usable = workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    if len(jobs) < 2 or usable < 2:
        results = [_trace_for_sweep(job) for job in jobs]
    else:
        results = _forked(jobs, usable) if _forkable() else _spawned(jobs, min(len(jobs), usable))
    for inputs, traced in zip(to_trace, results, strict=True):
        if traced is not None:
            _TRACES[groups[inputs][0]] = known[inputs] = traced
    for inputs, keys in groups.items():
        for key in keys:
            if key not in _TRACES and inputs in known:
                serving, gpu = pending[key]
                _TRACES[key] = for_knobs(known[inputs], spec, serving)
                store_trace(source, spec, serving, gpu, _TRACES[key], warmup=False)
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
