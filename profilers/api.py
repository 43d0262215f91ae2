"""Profile a model and plan from the measurements: the entry point the CLI and benchmarks use."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from capacity.disk_cache import read, remembered, sha256_of, write
from capacity.errors import EXIT_BAD_INPUT, CapacityError
from capacity.gpu.catalog import DEFAULT_GPU, Gpu, gpu_by_name
from capacity.gpu.detect import detect_local_gpu, resolve_gpu
from capacity.memory.measured_profile import MemoryProfile, combine_ranks
from capacity.model.registry import load_model
from capacity.model.spec import ModelSpec
from capacity.planning.plan import Plan
from capacity.planning.planner import build_plan
from capacity.serving.config import ServingArgs, ServingConfig, resolve_serving
from capacity.serving.encoder_budget import build_budget
from capacity.source.resolve import ModelSource
from profilers.launcher import LaunchEnv
from profilers.probes import CpuProbe, CudaProbe, MemoryProbe
from profilers.run import PhaseCallback, profiled_knobs, run_profile
from profilers.shared_model import SharedFakeModel
from profilers.startup import Timings


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def profiling_gpu(probe: MemoryProbe, gpu_name: str | None) -> tuple[Gpu, str | None]:
    """The GPU the defaults are resolved for, and a note: --gpu, else the one being profiled (its CUDA total),
    else (CPU probe, fake tensors) the local GPU or the default one, as `plan --estimate formula` resolves it."""
    if gpu_name:
        return gpu_by_name(gpu_name), None
    if isinstance(probe, CudaProbe):
        local = detect_local_gpu(probe.index)
        info = probe.describe()
        base = local or gpu_by_name(DEFAULT_GPU)
        return replace(base, name=str(info["gpu_name"]), total_memory_bytes=int(info["gpu_total_memory_bytes"]), source="cuda", provenance="cudaMemGetInfo on this machine"), None
    return resolve_gpu(None)


def profile_model(
    model: str,
    args: ServingArgs,
    *,
    gpu_name: str | None = None,
    probe: MemoryProbe | None = None,
    attn_implementation: str = "sdpa",
    on_phase: PhaseCallback | None = None,
    capture_graphs: bool = True,
    warmup: bool = True,
    timings: Timings | None = None,
    release_memory: bool = True,
) -> tuple[Plan, MemoryProfile]:
    """Profile `model` on `probe` (the local GPU by default) and plan from it. `timings`, begun by a caller that
    timed its own steps first (the CLI), gets every step's wall time; the profile records them (`timings_s`), the
    plan's own step (`plan`) included. `release_memory=False`: see run_profile (a process that exits next)."""
    timings = timings or Timings()
    source, spec = load_model(model, args.revision, args.mm_processor_kwargs, args.hf_overrides)
    timings.lap("load_model")
    if probe is None:
        probe = CudaProbe() if cuda_available() else CpuProbe()
    probe.init()
    gpu, gpu_note = profiling_gpu(probe, gpu_name)
    serving = resolve_serving(args, spec, gpu)
    budget = build_budget(spec, serving, enable_cache=False)
    timings.lap("cuda_init")
    profile = run_profile(
        source, spec, serving, budget, gpu, probe, attn_implementation=attn_implementation, on_phase=on_phase, capture_graphs=capture_graphs, warmup=warmup,
        timings=timings, release_memory=release_memory,
    )  # fmt: skip
    notes = tuple(n for n in (source.alias_note, gpu_note) if n)
    plan = build_plan(source, spec, gpu, serving, notes, profile)
    if not profile.timings_s:  # a fake-tensor trace records none
        return plan, profile
    timings.lap("plan")
    profile = replace(profile, timings_s=dict(timings.seconds))
    return replace(plan, profile=profile), profile


def trace_model(model: str, args: ServingArgs, *, gpu_name: str | None = None) -> tuple[Plan, MemoryProfile]:
    """The profile phases run on fake tensors (no GPU, no memory): the offline estimate of every phase, read from
    capacity's disk cache when this very trace ran before (`cached_trace`)."""
    source, spec = load_model(model, args.revision, args.mm_processor_kwargs, args.hf_overrides)
    gpu, gpu_note = resolve_gpu(gpu_name)  # as profiling_gpu resolves it for fake tensors
    serving = resolve_serving(args, spec, gpu)
    profile = cached_trace(source, spec, serving, gpu, warmup=True)
    notes = tuple(n for n in (source.alias_note, gpu_note) if n)
    return build_plan(source, spec, gpu, serving, notes, profile), profile


def trace_key(source: ModelSource, spec: ModelSpec, serving: ServingConfig, gpu: Gpu, *, warmup: bool) -> dict[str, Any]:
    """Everything a fake-tensor trace depends on besides capacity's code and the torch and transformers versions
    (which capacity/disk_cache.py adds): the model's files, the family that reads them, and the knobs. With `warmup`
    (a plan's trace: the warmup batches are sized by a plan mid-profile) every knob and the GPU; without (a sweep's),
    the knobs that size the traced phases (profiled_knobs) and the GPU."""
    budget = build_budget(spec, serving, enable_cache=False)
    files = {"preprocessor_config.json": source.preprocessor, **source.files}
    knobs: dict[str, Any] = asdict(serving) if warmup else profiled_knobs(serving, budget)
    return {
        "model": source.name,
        "config_sha256": source.config_sha256,
        "files_sha256": sha256_of(files),
        "family": spec.family.name,
        "knobs": knobs,
        "budget": asdict(budget),
        "gpu": asdict(gpu),
        "warmup": warmup,
    }


class TraceStopped(Exception):
    """A fake-tensor trace that cannot run on these inputs (a family with no trace, a data-dependent op such as
    repeat_interleave on a tensor): the reason, in the words of the plan's note. It is as deterministic as a trace,
    so the disk cache keeps it too and a second plan does not run the trace again only to stop at the same op."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def stopped_reason(exc: Exception) -> str | None:
    """The note a plan gives when the trace raised `exc`, or None when `exc` is no reason to fall back to formulas."""
    if isinstance(exc, CapacityError):
        if exc.exit_code != EXIT_BAD_INPUT or "not implemented yet" not in str(exc):
            return None
        return f"no fake-tensor trace for this family ({exc}); the activation terms are formulas"
    if isinstance(exc, MemoryError):  # the host, not the inputs: not a result to keep
        return None
    return f"the fake-tensor trace stopped at {type(exc).__name__}: {' '.join(str(exc).split())[:160]}; the activation terms are formulas"


def cached_trace(source: ModelSource, spec: ModelSpec, serving: ServingConfig, gpu: Gpu, *, warmup: bool, shared: SharedFakeModel | None = None) -> MemoryProfile:
    """The fake-tensor trace of these knobs, kept in capacity's disk cache by `trace_key` (a cached trace imports
    no torch). A trace that stops raises TraceStopped, from the cache as from the run; any other error is raised as
    run_profile raises it, and not kept. `shared`: run on the model it lends (a sweep's traces), the same figures."""

    def trace() -> MemoryProfile | TraceStopped:
        from profilers.probes import FakeProbe

        budget = build_budget(spec, serving, enable_cache=False)
        try:
            if shared is None:
                return run_profile(source, spec, serving, budget, gpu, FakeProbe(), capture_graphs=False, warmup=warmup)
            try:
                return run_profile(source, spec, serving, budget, gpu, shared.probe(), capture_graphs=False, warmup=warmup, placement=shared)
            except BaseException:
                shared.discard()  # whatever the run left in the model is not lent again
                raise
        except Exception as exc:
            reason = stopped_reason(exc)
            if reason is None:
                raise
            return TraceStopped(reason)

    result = remembered("trace", trace_key(source, spec, serving, gpu, warmup=warmup), trace, _stored_form, _from_stored)
    if isinstance(result, TraceStopped):
        raise result
    return result


def _stored_form(result: MemoryProfile | TraceStopped) -> dict[str, Any]:
    return {"stopped": result.reason} if isinstance(result, TraceStopped) else result.to_dict()


def _from_stored(stored: dict[str, Any]) -> MemoryProfile | TraceStopped:
    return TraceStopped(str(stored["stopped"])) if "stopped" in stored else MemoryProfile.from_dict(stored)


def profile_model_tensor_parallel(
    model: str,
    args: ServingArgs,
    *,
    gpu_name: str | None = None,
    cpu: bool = False,
    encoder_tp_mode: str = "weights",
    attn_implementation: str = "sdpa",
    capture_graphs: bool = True,
    warmup: bool = True,
    timeout_s: float = 900.0,
    collective_timeout_s: float = 300.0,
    launch: LaunchEnv | None = None,
) -> tuple[Plan | None, MemoryProfile | None]:
    """Profile one process per rank (NCCL on the local GPUs, or gloo + the CPU probe) and plan from the rank
    with the least KV budget. The parent process makes no CUDA context (NVML names the GPU).

    TP x PP ranks (args.pipeline_parallel_size): each builds its stage (profilers/pipeline_stage.py); the profile
    holds every rank and no plan is made (per-stage plans are not built yet: the plan is None).
    `launch` (torchrun's environment): this process is one rank, nothing is spawned; rank 0 gets the result,
    every other rank (None, None)."""
    from profilers.tensor_parallel import launched_outcomes, require_ranks, run_launched, run_tensor_parallel, tensor_parallel_job

    source, spec = load_model(model, args.revision, args.mm_processor_kwargs, args.hf_overrides)
    backend = "gloo" if cpu else "nccl"
    pp = args.pipeline_parallel_size
    if launch is None:
        require_ranks(args.tensor_parallel_size * pp, backend)
    gpu = gpu_by_name(gpu_name) if gpu_name else (detect_local_gpu(launch.local_rank if launch else 0) if not cpu else None) or gpu_by_name("H200")
    # the stages are the job's; the knobs are resolved as one stage's engine would read them (ServingConfig has no PP yet)
    serving = resolve_serving(replace(args, pipeline_parallel_size=1, pp_layer_partition=None), spec, gpu)
    budget = build_budget(spec, serving, enable_cache=False)
    job = tensor_parallel_job(
        source, spec, serving, budget, gpu, backend=backend, encoder_tp_mode=encoder_tp_mode, collective_timeout_s=collective_timeout_s,
        attn_implementation=attn_implementation, capture_graphs=capture_graphs, warmup=warmup, pipeline_parallel_size=pp,
        pp_layer_partition=args.pp_layer_partition,
    )  # fmt: skip
    if launch is None:
        profile = run_tensor_parallel(job, timeout_s=timeout_s)
    else:
        messages = run_launched(job, launch)
        if messages is None:
            return None, None
        profile = combine_ranks(tuple(MemoryProfile.from_dict(d) for d in launched_outcomes(messages).values()))
    if pp > 1:
        return None, profile
    if not gpu_name and not cpu:  # plan for the GPU as CUDA reports it on the ranks
        gpu = replace(gpu, total_memory_bytes=profile.fingerprint.gpu_total_memory_bytes, name=profile.fingerprint.gpu_name, source="cuda", provenance="cudaMemGetInfo on the profiled ranks")
    notes = tuple(n for n in (source.alias_note,) if n)
    return build_plan(source, spec, gpu, serving, notes, profile), profile


def verify_tensor_parallel_plan(
    plan: Plan, *, cpu: bool = False, steps: int = 3, reproducer: str = "", encoder_tp_mode: str = "weights", timeout_s: float = 900.0, launch: LaunchEnv | None = None
) -> Any:
    """`capacity verify` on one process per rank: each allocates its share of the plan's KV pool next to its shard.
    `launch`: this process is one rank of torchrun's; rank 0 gets the result, every other rank None."""
    from capacity.planning.verify_result import combine_verify_ranks
    from profilers.tensor_parallel import launched_outcomes, run_launched, tensor_parallel_job, verify_tensor_parallel

    budget = build_budget(plan.spec, plan.serving, enable_cache=False)
    job = tensor_parallel_job(
        plan.source, plan.spec, plan.serving, budget, plan.gpu, backend="gloo" if cpu else "nccl", encoder_tp_mode=encoder_tp_mode,
        collective_timeout_s=min(timeout_s, 300.0), plan=plan, steps=steps, reproducer=reproducer,
    )  # fmt: skip
    if launch is None:
        return verify_tensor_parallel(job, timeout_s=timeout_s)
    messages = run_launched(replace(job, task="verify"), launch)
    return None if messages is None else combine_verify_ranks(tuple(launched_outcomes(messages).values()), ())


def store_trace(source: ModelSource, spec: ModelSpec, serving: ServingConfig, gpu: Gpu, result: MemoryProfile | TraceStopped, *, warmup: bool) -> None:
    """Keep `result` in the disk cache as the trace of these knobs (cached_trace's entry): a sweep's trace of other
    knobs whose phases read the same (profilers/sweep_traces.py phase_inputs)."""
    write("trace", trace_key(source, spec, serving, gpu, warmup=warmup), _stored_form(result))


def stored_trace(source: ModelSource, spec: ModelSpec, serving: ServingConfig, gpu: Gpu, *, warmup: bool) -> MemoryProfile | TraceStopped | None:
    """The trace of these knobs (or why it stopped) when the disk cache holds it (cached_trace's entry), else None."""
    stored = read("trace", trace_key(source, spec, serving, gpu, warmup=warmup))
    try:
        return None if stored is None else _from_stored(stored)
    except Exception:  # not trusted: traced again
        return None
