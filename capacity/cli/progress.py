"""A profiler run as the terminal sees it: one progress line per phase, and a --cpu-probe run's cost estimated first."""

from __future__ import annotations

import sys
import time
from typing import Any


class PhaseProgress:
    """One progress line per profiler phase on stderr, with the phase's estimated time when there is one.

    On a terminal a rich progress display; elsewhere (a pipe, a CI log) plain lines, printed as each phase starts,
    so a long run is never silent.
    """

    def __init__(self, cost: Any = None) -> None:
        from rich.console import Console

        self.cost = cost
        self.console = Console(stderr=True)
        self.start = time.perf_counter()
        self.rich: Any = None
        self.tasks: list[Any] = []

    def __enter__(self) -> PhaseProgress:
        if self.console.is_terminal:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.rich = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=self.console)
            self.rich.__enter__()
        return self

    def __call__(self, name: str, detail: str) -> None:
        from profilers.cpu_cost import duration

        seconds = self.cost.phase_seconds(name) if self.cost is not None else None
        about = f" (about {duration(seconds)})" if seconds is not None else ""
        if self.rich is None:
            print(f"capacity: [{time.perf_counter() - self.start:.0f} s] {name}: {detail}{about}", file=sys.stderr, flush=True)
            return
        if self.tasks:
            self.rich.update(self.tasks[-1], total=1, completed=1)
        self.tasks.append(self.rich.add_task(f"{name}: {detail}{about}", total=None))

    def __exit__(self, *exc: Any) -> None:
        if self.rich is not None:
            if self.tasks:
                self.rich.update(self.tasks[-1], total=1, completed=1)
            self.rich.__exit__(*exc)
        elif exc[0] is None:
            print(f"capacity: [{time.perf_counter() - self.start:.0f} s] phases done", file=sys.stderr, flush=True)


def checked_cpu_probe_cost(command: str, plan: Any, *, force: bool, warmup: bool = True, steps: int = 3) -> Any:
    """Estimate a --cpu-probe run's host memory and time from the formula plan; refuse it above the limits."""
    from profilers.cpu_cost import CpuProbeLimits, check_cost, duration, estimate_profile_cost, estimate_verify_cost, measure_host_rates

    rates = measure_host_rates(plan.serving.dtype)
    if command == "profile":
        cost = estimate_profile_cost(plan, rates, warmup=warmup)
    else:
        cost = estimate_verify_cost(plan, rates, steps=steps)
    if not force:
        check_cost(cost, CpuProbeLimits.for_this_host(), plan.source.name)
    print(
        f"capacity: --cpu-probe: about {cost.host_bytes / 1e9:.1f} GB of host memory and {duration(cost.seconds)} on this CPU "
        f"(estimated; matrix products at {rates.matmul_flops_per_s / 1e9:.1f} GFLOP/s in {plan.serving.dtype}, measured now)",
        file=sys.stderr,
    )
    return cost


def profile_with_progress(
    model: str,
    args: Any,
    gpu: str | None,
    *,
    cpu_probe: bool = False,
    attn: str = "sdpa",
    graphs: bool = True,
    warmup: bool = True,
    force: bool = False,
    timings: Any = None,
    release_memory: bool = True,
) -> tuple[Any, Any]:
    """Run the profiler with one progress line per phase on stderr; returns (plan, profile).

    A --cpu-probe run is estimated first (host memory, time) and refused above the limits unless `force`.
    `timings` (profilers.startup.Timings, begun by the command) gets each step's wall time; `release_memory=False`
    (a command that exits after planning) leaves the run's cached GPU blocks to the driver's cleanup at exit."""
    from profilers.api import profile_model
    from profilers.probes import CpuProbe

    cost = None
    if cpu_probe:
        from capacity.planning.planner import plan_for

        cost = checked_cpu_probe_cost("profile", plan_for(model, args, gpu), force=force, warmup=warmup)
        if timings is not None:
            timings.lap("cpu_probe_estimate")
    with PhaseProgress(cost) as on_phase:
        return profile_model(
            model, args, gpu_name=gpu, probe=CpuProbe() if cpu_probe else None, attn_implementation=attn, on_phase=on_phase, capture_graphs=graphs, warmup=warmup,
            timings=timings, release_memory=release_memory,
        )  # fmt: skip
