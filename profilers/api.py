"""Profile a model and plan from the measurements: the entry point the CLI and benchmarks use."""

from __future__ import annotations

from dataclasses import replace

from capacity.budget import build_budget
from capacity.families import model_spec
from capacity.gpus import DEFAULT_GPU, Gpu, detect_local_gpu, gpu_by_name, resolve_gpu
from capacity.models import resolve_model
from capacity.plan import Plan
from capacity.planner import build_plan
from capacity.profile import MemoryProfile
from capacity.serving import ServingArgs, resolve_serving
from profilers.probes import CpuProbe, CudaProbe, MemoryProbe
from profilers.run import PhaseCallback, run_profile


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
) -> tuple[Plan, MemoryProfile]:
    source = resolve_model(model, args.revision)
    spec = model_spec(source.config, source.name, source.preprocessor, source.processor)
    if probe is None:
        probe = CudaProbe() if cuda_available() else CpuProbe()
    probe.init()
    gpu, gpu_note = profiling_gpu(probe, gpu_name)
    serving = resolve_serving(args, spec, gpu)
    budget = build_budget(spec, serving, enable_cache=False)
    profile = run_profile(
        source, spec, serving, budget, gpu, probe, attn_implementation=attn_implementation, on_phase=on_phase, capture_graphs=capture_graphs, warmup=warmup
    )
    notes = tuple(n for n in (source.alias_note, gpu_note) if n)
    return build_plan(source, spec, gpu, serving, notes, profile), profile


def trace_model(model: str, args: ServingArgs, *, gpu_name: str | None = None) -> tuple[Plan, MemoryProfile]:
    """The profile phases run on fake tensors (no GPU, no memory): the offline estimate of every phase."""
    from profilers.probes import FakeProbe

    return profile_model(model, args, gpu_name=gpu_name, probe=FakeProbe(), capture_graphs=False)
