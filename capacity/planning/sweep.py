"""Sweeps: re-plan one model over a grid of GPUs, tensor-, pipeline- and data-parallel sizes, max_num_seqs and
max_model_len.

A point with DP engines is one engine's plan (each engine planned as one, capacity/planning/data_parallel.py) and the
engines' total requests at once (dp x one engine's). PP with DP is not planned (placement_of refuses it): a grid with
both above 1 is refused before any work.

Every grid point is a full `build_plan` with the knobs of that point, exactly what `capacity plan`
computes for them (from the measured terms of one GPU profile, when given); a `SweepPoint` keeps the
figures a grid compares. Pure Python (no pandas here:
`reports.frames.sweep_frame` turns a result into a DataFrame).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from capacity.errors import BadInput
from capacity.gpu.catalog import Gpu
from capacity.gpu.detect import resolve_gpu
from capacity.memory.measured_profile import MemoryProfile, require_profile_of
from capacity.model.registry import load_model
from capacity.model.spec import ModelSpec
from capacity.planning.plan import ERROR, WARNING, Plan
from capacity.planning.planner import build_plan, serving_under
from capacity.serving.config import ServingArgs, ServingConfig
from capacity.source.resolve import ModelSource
from capacity.units import COUNT_FORMS, MAX_MODEL_LEN_FORMS, parse_human_int, plural
from capacity.vllm.serve_flags import release_of, require_flags
from capacity.vllm.versions import LATEST, VllmSemantics, planned_semantics

AUTO = -1  # max_model_len "auto": fit it to memory, as `--max-model-len auto` does
# The largest grid `capacity sweep` plans: 100,000 points take ~12 s on one core (bench/results/sweep-2026-11-30.json:
# 10,000 in 1.05-1.34 s) and ~100 MB for the points and their JSON; larger grids are refused before any work.
MAX_SWEEP_POINTS = 100_000

Progress = Callable[[int, int], None]  # (points planned, points in the grid)
Knobs = tuple[int | None, int | None, int | None, int | None, int | None]  # a point's requested (tp, max_num_seqs, max_model_len, pp, dp)


def parse_int_list(text: str, flag: str, *, allow_auto: bool = False) -> tuple[int, ...]:
    """`16,64,256` (vLLM's human-readable integers: `4k`, `8K`); with allow_auto also `auto` / `-1`."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise BadInput(f"{flag}: {text!r} must be a comma-separated list of integers, e.g. 16,64,256")
    out: list[int] = []
    seen: set[int] = set()
    for item in items:
        if allow_auto and item.lower() in ("auto", "-1"):
            value = AUTO
        else:
            value = parse_human_int(item, flag, MAX_MODEL_LEN_FORMS if allow_auto else COUNT_FORMS)
            if value <= 0:
                raise BadInput(f"{flag}: {item!r} must be a positive integer")
        if value in seen:
            raise BadInput(f"{flag}: {item!r} is listed twice")
        seen.add(value)
        out.append(value)
    return tuple(out)


def parse_name_list(text: str, flag: str) -> tuple[str, ...]:
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise BadInput(f"{flag}: {text!r} must be a comma-separated list, e.g. L4,L40S,H100-80GB,H200")
    return tuple(items)


@dataclass(frozen=True)
class SweepAxes:
    """The grid. None in an axis means "the base knobs' value" (vLLM's default when the base has none)."""

    gpus: tuple[str | None, ...] = (None,)
    tensor_parallel_sizes: tuple[int | None, ...] = (None,)
    max_num_seqs: tuple[int | None, ...] = (None,)
    max_model_lens: tuple[int | None, ...] = (None,)
    vllm_versions: tuple[str | None, ...] = (None,)  # releases (--vllm-version 0.10.2,0.33); None: 0.33.0
    pipeline_parallel_sizes: tuple[int | None, ...] = (None,)
    data_parallel_sizes: tuple[int | None, ...] = (None,)

    @property
    def size(self) -> int:
        parallel = len(self.tensor_parallel_sizes) * len(self.pipeline_parallel_sizes) * len(self.data_parallel_sizes)
        return len(self.gpus) * parallel * len(self.max_num_seqs) * len(self.max_model_lens) * len(self.vllm_versions)

    def require_within_limit(self, limit: int = MAX_SWEEP_POINTS) -> None:
        """Refuse (BadInput) a grid larger than `limit` points, naming its size and each axis's length."""
        if self.size > limit:
            axes = (
                f"{plural(len(self.gpus), 'GPU')} x {plural(len(self.tensor_parallel_sizes), 'TP size')} x "
                + (f"{plural(len(self.pipeline_parallel_sizes), 'PP size')} x " if len(self.pipeline_parallel_sizes) > 1 else "")
                + (f"{plural(len(self.data_parallel_sizes), 'DP size')} x " if len(self.data_parallel_sizes) > 1 else "")
                + f"{len(self.max_num_seqs)} max_num_seqs x "
                f"{len(self.max_model_lens)} max_model_len" + (f" x {len(self.vllm_versions)} vLLM versions" if len(self.vllm_versions) > 1 else "")
            )
            raise BadInput(f"the sweep grid has {self.size:,} points ({axes}), above the limit of {limit:,}: give fewer values per axis, or split the grid")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SweepPoint:
    """One grid point's plan, reduced to what a grid compares. `requested_*` are the axis values (None = default)."""

    gpu: str
    gpu_total_memory_bytes: int
    vllm_version: str  # the release planned for (capacity.vllm.versions.planned_semantics)
    vllm_rules: str  # the range of rules that release plans with
    requested_tensor_parallel_size: int | None
    requested_max_num_seqs: int | None
    requested_max_model_len: int | None  # -1 = auto
    tensor_parallel_size: int
    max_num_seqs: int
    max_model_len: int  # after auto-fit
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    verdict: str
    fits: bool
    actual_requests: int  # concurrency.actual_requests: whole requests at max_model_len the KV cache holds
    max_concurrent_requests: int  # min(max_num_seqs, actual_requests): what the server really runs at once
    concurrency_actual: float
    concurrency_vllm_reported: float
    tokens_vllm_reported: int
    num_blocks: int
    bytes_per_block: int
    available_kv_bytes: int
    non_kv_bytes: int
    weights_bytes: int
    max_model_len_that_fits: int
    errors: str  # error hazard ids, space-separated
    warnings: str
    requested_pipeline_parallel_size: int | None = None
    requested_data_parallel_size: int | None = None
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1  # engines; every figure above is one engine's
    total_max_concurrent_requests: int = 0  # dp x max_concurrent_requests: what the DP engines run at once

    def layout(self) -> str:
        """'TP 2', 'TP 4 x PP 2', 'TP 8 x DP 2'."""
        return f"TP {self.tensor_parallel_size}" + "".join(f" x {k} {n}" for k, n in (("PP", self.pipeline_parallel_size), ("DP", self.data_parallel_size)) if n > 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def point_from_plan(plan: Plan, tp: int | None, seqs: int | None, max_model_len: int | None, pp: int | None = None, dp: int | None = None) -> SweepPoint:
    s, c = plan.serving, plan.concurrency
    return SweepPoint(
        gpu=plan.gpu.name,
        gpu_total_memory_bytes=plan.gpu.total_memory_bytes,
        vllm_version=plan.semantics.release or plan.semantics.name,
        vllm_rules=plan.semantics.name,
        requested_tensor_parallel_size=tp,
        requested_max_num_seqs=seqs,
        requested_max_model_len=max_model_len,
        tensor_parallel_size=s.tensor_parallel_size,
        max_num_seqs=s.max_num_seqs,
        max_model_len=s.max_model_len,
        max_num_batched_tokens=s.max_num_batched_tokens,
        gpu_memory_utilization=s.gpu_memory_utilization,
        verdict=plan.verdict,
        fits=plan.fits,
        actual_requests=c.actual_requests,
        max_concurrent_requests=plan.max_concurrent_requests,
        concurrency_actual=round(c.actual, 2),
        concurrency_vllm_reported=round(c.vllm_reported, 2),
        tokens_vllm_reported=c.tokens_vllm_reported,
        num_blocks=plan.kv.num_blocks,
        bytes_per_block=plan.kv.bytes_per_block,
        available_kv_bytes=plan.kv.available_bytes,
        non_kv_bytes=plan.non_kv_bytes,
        weights_bytes=plan.memory["weights"].bytes,
        max_model_len_that_fits=plan.max_model_len_that_fits,
        errors=" ".join(h.id for h in plan.hazards if h.severity == ERROR),
        warnings=" ".join(h.id for h in plan.hazards if h.severity == WARNING),
        requested_pipeline_parallel_size=pp,
        requested_data_parallel_size=dp,
        pipeline_parallel_size=s.pipeline_parallel_size,
        data_parallel_size=s.data_parallel_size,
        total_max_concurrent_requests=plan.total_max_concurrent_requests,
    )


@dataclass(frozen=True)
class SweepResult:
    source: ModelSource
    spec: ModelSpec
    base: ServingArgs
    axes: SweepAxes
    points: tuple[SweepPoint, ...]
    notes: tuple[str, ...] = ()
    profile: MemoryProfile | None = None  # every point re-planned from this profile's measured terms

    @property
    def fitting(self) -> int:
        return sum(p.fits for p in self.points)

    def to_dict(self) -> dict[str, Any]:
        import capacity

        return {
            "capacity_sweep_version": 1,
            "model": {**self.source.to_dict(), "architecture": self.spec.architecture, "family": self.spec.family.name},
            "capacity_version": capacity.__version__,
            "vllm_semantics_version": capacity.VLLM_VERSION,  # the default; each point's vllm_version / vllm_rules say which it used
            "vllm_versions": sorted({p.vllm_version for p in self.points}),
            "base_knobs": asdict(self.base),
            "axes": self.axes.to_dict(),
            "points": [p.to_dict() for p in self.points],
            "fitting_points": self.fitting,
            "notes": list(self.notes),
            "profile": None if self.profile is None else asdict(self.profile.fingerprint),
        }


def _gpus(names: Sequence[str | None]) -> tuple[list[Gpu], tuple[str, ...]]:
    gpus, notes = [], []
    for name in names:
        gpu, note = resolve_gpu(name)
        if any(g.name == gpu.name for g in gpus):
            raise BadInput(f"--gpu lists {gpu.name} twice")
        gpus.append(gpu)
        if note:
            notes.append(note)
    return gpus, tuple(notes)


# Measures one grid point's terms the way `capacity plan` does by default (a fake-tensor trace); returns
# None with a reason when the family cannot be traced (the point is then planned from the formulas, as plan does).
Profiler = Callable[[ModelSource, ModelSpec, ServingConfig, Gpu], tuple[MemoryProfile | None, str]]
Prepare = Callable[[ModelSource, ModelSpec, list[tuple[ServingConfig, Gpu]]], None]  # sees every point's knobs before any is planned


def sweep_source(
    source: ModelSource,
    spec: ModelSpec,
    base: ServingArgs,
    axes: SweepAxes,
    notes: tuple[str, ...] = (),
    profile: MemoryProfile | None = None,
    on_progress: Progress | None = None,
    profiler: Profiler | None = None,
    prepare: Prepare | None = None,
) -> SweepResult:
    """Plan every grid point (order: GPU, TP, max_num_seqs, max_model_len) with build_plan, from `profile` if
    given, else from what `profiler` measures for the point's knobs (the default plan's trace), else formulas;
    `prepare` is first handed every point's knobs (to trace the distinct ones at once); `on_progress(done, total)`
    is called after each point."""
    axes.require_within_limit()
    if profile is not None:
        require_profile_of(profile, source)
    gpus, gpu_notes = _gpus(axes.gpus)

    releases = [LATEST if v is None else planned_semantics(v) for v in axes.vllm_versions]
    if len({r.release for r in releases}) < len(releases):
        raise BadInput(f"--vllm-version lists a release twice: {', '.join(v or LATEST.release for v in axes.vllm_versions)}")
    for sem in releases:
        if sem.release:
            require_flags(base, release_of(sem), sem.release)
    pps = [base.pipeline_parallel_size if v is None else v for v in axes.pipeline_parallel_sizes]
    dps = [base.data_parallel_size if v is None else v for v in axes.data_parallel_sizes]
    if max(pps) > 1 and max(dps) > 1:
        raise BadInput(
            f"pipeline-parallel sizes {', '.join(map(str, pps))} with data-parallel sizes {', '.join(map(str, dps))}: PP with DP is not planned "
            "(stages of several engines); sweep one of them at a time"
        )

    def each_point() -> Iterator[tuple[Gpu, Knobs, VllmSemantics, ServingConfig]]:
        for gpu in gpus:
            for tp in axes.tensor_parallel_sizes:
                at_tp = base if tp is None else replace(base, tensor_parallel_size=tp)
                for pp in axes.pipeline_parallel_sizes:
                    at_pp = at_tp if pp is None else replace(at_tp, pipeline_parallel_size=pp)
                    for dp in axes.data_parallel_sizes:
                        at_dp = at_pp if dp is None else replace(at_pp, data_parallel_size=dp)
                        for seqs in axes.max_num_seqs:
                            at_seqs = at_dp if seqs is None else replace(at_dp, max_num_seqs=seqs)
                            for mml in axes.max_model_lens:
                                args = at_seqs if mml is None else replace(at_seqs, max_model_len=mml)
                                for sem in releases:  # each release's defaults (utilization, batch) resolve the knobs
                                    yield gpu, (tp, seqs, mml, pp, dp), sem, serving_under(sem, args, spec, gpu)

    grid: Iterable[tuple[Gpu, Knobs, VllmSemantics, ServingConfig]] = each_point()
    if profile is None and profiler is not None and prepare is not None:  # the knobs of every point first (a traced grid is small)
        grid = list(grid)
        prepare(source, spec, [(serving, gpu) for gpu, _, _, serving in grid])
    points: list[SweepPoint] = []
    reasons: list[str] = []
    for gpu, requested, sem, serving in grid:
        measured = profile
        if measured is None and profiler is not None:  # the trace depends on the knobs, not on the release's rules
            measured, reason = profiler(source, spec, serving, gpu)
            if reason and reason not in reasons:
                reasons.append(reason)
        plan = build_plan(source, spec, gpu, serving, profile=measured, semantics=sem)
        points.append(point_from_plan(plan, *requested))
        if on_progress is not None:
            on_progress(len(points), axes.size)
    return SweepResult(source, spec, base, axes, tuple(points), notes + gpu_notes + tuple(reasons), profile)


def run_sweep(
    model: str,
    base: ServingArgs,
    axes: SweepAxes,
    profile: MemoryProfile | None = None,
    on_progress: Progress | None = None,
    profiler: Profiler | None = None,
    prepare: Prepare | None = None,
) -> SweepResult:
    """Resolve the model once and plan every grid point (offline: traced by `profiler` or formulas; or from one GPU profile)."""
    axes.require_within_limit()
    source, spec = load_model(model, base.revision, base.mm_processor_kwargs, base.hf_overrides)
    notes = (source.alias_note,) if source.alias_note else ()
    return sweep_source(source, spec, base, axes, notes, profile, on_progress, profiler, prepare)
