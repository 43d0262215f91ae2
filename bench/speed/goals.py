"""Issue 23's speed goals, each timed as a user runs it: `capacity` commands in fresh processes, wall clock.

    .venv/bin/python bench/speed/goals.py [--reps 5] [--out bench/results/speed-goals-<date>]

- formula: `capacity plan --model ID --estimate formula` for every catalog id, median of --reps (goal <= 0.8 s),
  and whether the process imported torch or transformers (it must not);
- default: `capacity plan --model nvidia/Nemotron-Parse` with an empty disk cache (CPU seconds, goal <= 6 s) and
  again with the trace cached (wall, goal <= 1.0 s);
- sweeps: the README's 72-point sweep and a 200-point one (Nemotron-Parse, 4 GPUs x TP 1,2 x 5 max_num_seqs x
  5 max_model_len), first with an empty cache (goals <= 10 s and <= 20 s) and again cached;
- listings: `capacity models`, `capacity gpus`, `capacity --help`, `capacity plan --help` (goal <= 0.5 s each, and
  nothing on stderr).

`--only sweeps` runs the sweep goals alone (into bench/results/speed-sweeps-<date> unless --out says otherwise).

Every run gets its own empty CAPACITY_CACHE_DIR unless it is the cached repeat. The result (results.json and
README.md) records the machine, its load, the commit and the versions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_SWEEP = ["--max-num-seqs", "16,64,256", "--max-model-len", "2048,4096,9000", "--gpu", "L4,L40S,H100-80GB,H200", "--tensor-parallel-size", "1,2"]
SWEEP_200 = ["--max-num-seqs", "8,16,64,128,256", "--max-model-len", "2048,3072,4096,6144,9000", "--gpu", "L4,L40S,H100-80GB,H200", "--tensor-parallel-size", "1,2"]
PROBE = "import atexit, sys\natexit.register(lambda: print('HEAVY', sorted(m for m in ('torch', 'transformers') if m in sys.modules), file=sys.stderr))\n"


def run(args: list[str], cache: str, python: str) -> dict[str, object]:
    """One `capacity ARGS` in a fresh interpreter: wall and CPU seconds, exit code, stderr, heavy imports."""
    env = {**os.environ, "CAPACITY_CACHE_DIR": cache, "HF_HUB_OFFLINE": "1"}
    code = PROBE + "from capacity.cli.app import main\nsys.exit(main(sys.argv[1:]))\n"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([python, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    heavy = next((line.split(" ", 1)[1] for line in done.stderr.splitlines() if line.startswith("HEAVY ")), "?")
    stderr = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("HEAVY "))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"args": args, "exit": done.returncode, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "heavy_imports": heavy, "stderr": stderr[-300:]}


def fresh_cache() -> str:
    return tempfile.mkdtemp(prefix="capacity-cache-")


def catalog_ids(python: str) -> list[str]:
    out = subprocess.run([python, "-c", "from capacity.source.resolve import catalog; print('\\n'.join(catalog()))"], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def median(rows: list[dict[str, object]], key: str = "wall_s") -> float:
    return round(statistics.median(float(r[key]) for r in rows), 3)  # type: ignore[arg-type]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/speed-goals-<date> (speed-sweeps-<date> with --only sweeps)")
    parser.add_argument("--only", choices=("sweeps",), default=None, help="run only these goals (the sweeps: first and cached, --reps // 2 runs each)")
    args = parser.parse_args()
    py = args.python
    args.out = args.out or ROOT / "bench" / "results" / f"speed-{args.only or 'goals'}-{datetime.now(timezone.utc):%Y-%m-%d}"
    results: dict[str, object] = {}
    if args.only == "sweeps":
        results["sweeps"] = sweep_goals(args.reps, py)
        return write(results, args, py)

    formula = {}
    for model in catalog_ids(py):
        rows = [run(["plan", "--model", model, "--gpu", "H200", "--estimate", "formula"], fresh_cache(), py) for _ in range(args.reps)]
        formula[model] = {"median_wall_s": median(rows), "exits": sorted({r["exit"] for r in rows}), "heavy_imports": rows[0]["heavy_imports"]}
        print(f"formula {model}: {formula[model]}", flush=True)
    results["formula"] = formula

    default = []
    for _ in range(args.reps):
        cache = fresh_cache()
        first = run(["plan", "--model", "nvidia/Nemotron-Parse"], cache, py)
        second = run(["plan", "--model", "nvidia/Nemotron-Parse"], cache, py)
        default.append({"first": first, "cached": second})
    results["default"] = {
        "first_median_cpu_s": statistics.median(float(d["first"]["cpu_s"]) for d in default),  # type: ignore[index]
        "first_median_wall_s": statistics.median(float(d["first"]["wall_s"]) for d in default),  # type: ignore[index]
        "cached_median_wall_s": statistics.median(float(d["cached"]["wall_s"]) for d in default),  # type: ignore[index]
        "cached_heavy_imports": default[0]["cached"]["heavy_imports"],
        "runs": default,
    }
    print(f"default: {({k: v for k, v in results['default'].items() if k != 'runs'})}", flush=True)  # type: ignore[union-attr]

    results["sweeps"] = sweep_goals(args.reps, py)

    listings = {}
    for argv in (["models"], ["models", "--json"], ["gpus"], ["--help"], ["plan", "--help"]):
        rows = [run(argv, fresh_cache(), py) for _ in range(args.reps)]
        listings[" ".join(argv)] = {"median_wall_s": median(rows), "stderr": sorted({str(r["stderr"]) for r in rows}), "heavy_imports": rows[0]["heavy_imports"]}
        print(f"{' '.join(argv)}: {listings[' '.join(argv)]}", flush=True)
    results["listings"] = listings
    return write(results, args, py)


def sweep_goals(reps: int, py: str) -> dict[str, object]:
    """The README's sweep and the 200-point one, each first with an empty cache and again cached, --reps // 2 times."""
    sweeps: dict[str, object] = {}
    for name, grid in (("readme-72", README_SWEEP), ("grid-200", SWEEP_200)):
        rows = []
        for _ in range(max(1, reps // 2)):
            cache = fresh_cache()
            rows.append({"first": run(["sweep", "--model", "nvidia/Nemotron-Parse", *grid], cache, py), "cached": run(["sweep", "--model", "nvidia/Nemotron-Parse", *grid], cache, py)})
        sweeps[name] = {
            "first_median_wall_s": statistics.median(float(r["first"]["wall_s"]) for r in rows),  # type: ignore[index]
            "first_median_cpu_s": statistics.median(float(r["first"]["cpu_s"]) for r in rows),  # type: ignore[index]
            "cached_median_wall_s": statistics.median(float(r["cached"]["wall_s"]) for r in rows),  # type: ignore[index]
            "exits": sorted({r["first"]["exit"] for r in rows} | {r["cached"]["exit"] for r in rows}),  # type: ignore[index]
            "runs": rows,
        }
        print(f"sweep {name}: first {sweeps[name]['first_median_wall_s']} s, cached {sweeps[name]['cached_median_wall_s']} s", flush=True)  # type: ignore[index]
    return sweeps


def write(results: dict[str, object], args: argparse.Namespace, py: str) -> int:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    versions = subprocess.run([py, "-c", "from importlib.metadata import version as v; print(v('torch'), v('transformers'))"], capture_output=True, text=True).stdout.split()
    results["machine"] = {
        "cpus": len(os.sched_getaffinity(0)),
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
        "commit": commit,
        "torch": versions[0] if versions else None,
        "transformers": versions[1] if len(versions) > 1 else None,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "reps": args.reps,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "README.md").write_text(report(results))
    print(f"-> {args.out}")
    return 0


def report(results: dict) -> str:  # type: ignore[type-arg]
    m = results["machine"]
    lines = [
        f"# Issue 23's speed goals, measured {m['date']}" + ("" if "formula" in results else " (the sweeps only: `--only sweeps`)"),
        "",
        f"{m['cpus']} CPUs ({m['cpu']}), Python {m['python']}, torch {m['torch']}, transformers {m['transformers']}, commit {m['commit'][:10]}, "
        f"load average at the end {', '.join(f'{x:.2f}' for x in m['load_average'])}; median of {m['reps']} fresh processes (sweeps: of {max(1, m['reps'] // 2)}). "
        "Made by `bench/speed/goals.py`; the raw runs are in results.json.",
        "",
        "| goal | target | measured | met |",
        "|---|---|---|---|",
    ]
    formula = results.get("formula")
    if formula is not None:
        worst = max(formula.items(), key=lambda kv: kv[1]["median_wall_s"])
        heavy = [k for k, v in formula.items() if v["heavy_imports"] != "[]"]
        lines += [
            f"| `plan --estimate formula`, every catalog id (slowest: {worst[0]}) | <= 0.8 s wall | {worst[1]['median_wall_s']:.2f} s | {'yes' if worst[1]['median_wall_s'] <= 0.8 else 'no'} |",
            f"| ... importing neither torch nor transformers | every id | {len(formula) - len(heavy)} of {len(formula)} | {'yes' if not heavy else 'no'} |",
            f"| default `plan --model nvidia/Nemotron-Parse`, first (empty cache) | <= 6 s CPU | {results['default']['first_median_cpu_s']:.2f} s CPU ({results['default']['first_median_wall_s']:.2f} s wall) | {'yes' if results['default']['first_median_cpu_s'] <= 6 else 'no'} |",
            f"| the same, trace cached | <= 1.0 s wall | {results['default']['cached_median_wall_s']:.2f} s | {'yes' if results['default']['cached_median_wall_s'] <= 1.0 else 'no'} |",
        ]
    for name, target in (("readme-72", 10), ("grid-200", 20)):
        s = results["sweeps"][name]
        cpu = f" ({s['first_median_cpu_s']:.2f} s CPU)" if "first_median_cpu_s" in s else ""
        lines.append(f"| sweep {name}, default estimate, empty cache | <= {target} s wall | {s['first_median_wall_s']:.2f} s{cpu} | {'yes' if s['first_median_wall_s'] <= target else 'no'} |")
        lines.append(f"| sweep {name}, traces cached | - | {s['cached_median_wall_s']:.2f} s | - |")
    for argv, row in results.get("listings", {}).items():
        quiet = row["stderr"] == [""]
        lines.append(f"| `capacity {argv}` | <= 0.5 s wall, stderr empty | {row['median_wall_s']:.2f} s, stderr {'empty' if quiet else 'NOT empty'} | {'yes' if row['median_wall_s'] <= 0.5 and quiet else 'no'} |")
    if formula is not None:
        lines += ["", "## `plan --estimate formula` per catalog id", "", "| id | median wall (s) | torch / transformers imported |", "|---|---|---|"]
        lines += [f"| {k} | {v['median_wall_s']:.2f} | {v['heavy_imports']} |" for k, v in sorted(formula.items(), key=lambda kv: -kv[1]["median_wall_s"])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
