"""Sweep benchmark: 10,000 grid points (4 GPUs x 4 TP sizes x 25 max_num_seqs x 25 max_model_len), one process.

    PYTHONPATH=. python3 bench/bench_sweep.py [OUT.json]

Per model it times (time.perf_counter, best and median of REPEATS runs):
- warm: `sweep_source` over the grid once the model is resolved and its meta-device build is cached
  (what a second sweep in one process, or every point after the first, costs);
- frame: turning the result into the pandas DataFrame (`reports.frames.sweep_frame`);
- cold: a fresh interpreter planning one point (imports, torch and transformers, and the meta-device
  build: cold_first_point_s) and then the grid: the whole of it is cold_s.
The goal (issue 4) is <= 2 s for 10,000 points on 2 cores; the result says whether each run met it.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from machine import cpu_model, package_versions

GPUS = ("L4", "L40S", "H100-80GB", "H200")
TPS = (1, 2, 4, 8)
SEQS = tuple(range(16, 16 + 25 * 16, 16))  # 16 .. 400
REPEATS = 5
GOAL_S = 2.0
MODELS = {
    "nvidia/Nemotron-Parse": tuple(range(1024, 1024 + 25 * 512, 512)),  # 1,024 .. 13,312 (above 9,000 some points fail)
    "openai/whisper-large-v3": tuple(range(16, 16 + 25 * 18, 18)),  # 16 .. 448 (max_target_positions)
    "google/gemma-3-4b-it": tuple(range(1024, 1024 + 25 * 1024, 1024)),  # 1,024 .. 25,600
}

COLD = """
import sys, time
t = time.perf_counter()
from capacity.serving.config import ServingArgs
from capacity.planning.sweep import SweepAxes, run_sweep
run_sweep({model!r}, ServingArgs(), SweepAxes(("H200",), (1,), (16,), ({first!r},)))
first = time.perf_counter() - t
result = run_sweep({model!r}, ServingArgs(), SweepAxes({gpus!r}, {tps!r}, {seqs!r}, {lens!r}))
print(time.perf_counter() - t, len(result.points), first)
"""


def versions() -> dict[str, str]:
    return package_versions(("capacity", "pandas", "torch", "transformers"), missing="not installed")


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def bench_model(model: str, lens: tuple[int, ...]) -> dict[str, object]:
    from capacity.model.registry import model_spec
    from capacity.planning.sweep import SweepAxes, sweep_source
    from capacity.serving.config import ServingArgs
    from capacity.source.resolve import resolve_model
    from reports.frames import sweep_frame

    axes = SweepAxes(GPUS, TPS, SEQS, lens)
    assert axes.size == 10_000
    cold = subprocess.run(
        [sys.executable, "-c", COLD.format(gpus=GPUS, tps=TPS, seqs=SEQS, lens=lens, model=model, first=lens[0])],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    cold_s, cold_points, first_s = cold.stdout.split()
    source = resolve_model(model)
    spec = model_spec(source)
    sweep_source(source, spec, ServingArgs(), SweepAxes(("H200",), (1,), (16,), (lens[0],)))  # the meta-device build, once
    warm, frame = [], []
    result = None
    for _ in range(REPEATS):
        t = time.perf_counter()
        result = sweep_source(source, spec, ServingArgs(), axes)
        warm.append(time.perf_counter() - t)
        t = time.perf_counter()
        df = sweep_frame(result)
        frame.append(time.perf_counter() - t)
        assert len(df) == 10_000
    assert result is not None
    return {
        "model": model,
        "grid": {"gpus": list(GPUS), "tensor_parallel_sizes": list(TPS), "max_num_seqs": list(SEQS), "max_model_lens": list(lens)},
        "points": len(result.points),
        "fitting_points": result.fitting,
        "warm_s": {"best": round(min(warm), 3), "median": round(statistics.median(warm), 3), "runs": [round(x, 3) for x in warm]},
        "frame_s": {"best": round(min(frame), 3), "median": round(statistics.median(frame), 3)},
        "cold_s": round(float(cold_s), 3),
        "cold_first_point_s": round(float(first_s), 3),
        "cold_points": int(cold_points),
        "warm_median_meets_goal": statistics.median(warm) <= GOAL_S,
        "warm_plus_frame_median_meets_goal": statistics.median(warm) + statistics.median(frame) <= GOAL_S,
    }


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    report = {
        "benchmark": "capacity sweep, 10,000 grid points, one process",
        "goal_s": GOAL_S,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "commit": git_commit(),
        "machine": {
            "cpu": cpu_model(),
            "cpu_count": os.cpu_count(),
            "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "platform": platform.platform(),
        },
        "versions": versions(),
        "results": [bench_model(model, lens) for model, lens in MODELS.items()],
    }
    text = json.dumps(report, indent=2) + "\n"
    if out:
        out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
