"""How long `capacity profile --model openai/whisper-large-v3` takes on the local GPU, where the time goes, and
the bytes each run measured (issue 23, section 6: a faster GPU profile).

    PYTHONPATH=. python3 bench/profile_speed.py OUT_DIR [--runs 3] [--tree before=DIR --tree after=DIR]
        [--setting NAME:KEY=VALUE,...] [--warmup-runs 1] [--diagnose]
    python3 bench/profile_speed.py --compare OUT_DIR/summary.json   # the bytes of every tree and setting against the first

Every run is a fresh `python3 -m capacity.cli profile` process (imports, CUDA context and kernel loading included),
timed from outside with time.perf_counter. Each --tree is a source tree of capacity (default: this one), run with
its folder as the working directory and first on PYTHONPATH; each --setting is a set of environment variables for
the runs. Runs are interleaved (tree after tree, run after run) so that a machine whose speed drifts treats every
tree alike; --warmup-runs first runs each tree that many times uncounted (to fill a bytecode cache, say).

The profile JSON of a run gives each phase's wall time and the measured bytes; a capacity that records the whole
run's steps (`timings_s`) gives those too. `summary.json` and `summary.md` hold every run, the medians, and every
measured figure.

--diagnose adds, in fresh processes: the floor (`import torch; torch.zeros(1, device="cuda"); import transformers`),
stamped start-up steps (CUDA init, cuBLAS, transformers' modeling import; sequential and overlapped in threads), one
run under `python -X importtime` and one under cProfile (its top functions as text).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODEL = "openai/whisper-large-v3"

FLOOR = 'import torch; torch.zeros(1, device="cuda"); import transformers'

# Stamped start-up steps in one process: each line "STEP seconds-since-start".
STEPS_SEQUENTIAL = r"""
import time; t0 = time.perf_counter()
def stamp(name): print(f"{name} {time.perf_counter() - t0:.3f}", flush=True)
import torch; stamp("import_torch")
torch.cuda.init(); stamp("cuda_init")
a = torch.randn(16, 16, device="cuda"); torch.nn.functional.linear(a, a, a[0]); torch.cuda.synchronize(); stamp("cublas")
import transformers; stamp("import_transformers")
import transformers.models.whisper.modeling_whisper; stamp("import_modeling_whisper")
from transformers import WhisperFeatureExtractor; stamp("import_feature_extractor")
"""

STEPS_OVERLAPPED = r"""
import time; t0 = time.perf_counter()
def stamp(name): print(f"{name} {time.perf_counter() - t0:.3f}", flush=True)
import threading
import torch; stamp("import_torch")
def cuda():
    torch.cuda.init(); stamp("thread_cuda_init")
    a = torch.randn(16, 16, device="cuda"); torch.nn.functional.linear(a, a, a[0]); torch.cuda.synchronize(); stamp("thread_cublas")
t = threading.Thread(target=cuda); t.start()
import transformers; stamp("import_transformers")
import transformers.models.whisper.modeling_whisper; stamp("import_modeling_whisper")
from transformers import WhisperFeatureExtractor; stamp("import_feature_extractor")
t.join(); stamp("joined")
"""

STEPS_OVERLAPPED_CTYPES = r"""
import time; t0 = time.perf_counter()
def stamp(name): print(f"{name} {time.perf_counter() - t0:.3f}", flush=True)
import ctypes, threading
import torch; stamp("import_torch")
lib = next(line.split()[-1] for line in open("/proc/self/maps") if "libcudart" in line)
def cuda():
    ctypes.CDLL(lib).cudaFree(ctypes.c_void_p(0)); stamp("thread_cudaFree0")
t = threading.Thread(target=cuda); t.start()
import transformers; stamp("import_transformers")
import transformers.models.whisper.modeling_whisper; stamp("import_modeling_whisper")
t.join(); stamp("joined")
torch.cuda.init(); stamp("cuda_init")
a = torch.randn(16, 16, device="cuda"); torch.nn.functional.linear(a, a, a[0]); torch.cuda.synchronize(); stamp("cublas")
"""

# The measured figures a faster profile must keep (bytes).
TOP_FIGURES = (
    "baseline_device_used_bytes",
    "weights_bytes",
    "encoder_cache_bytes",
    "total_consumed_bytes",
    "transient_peak_headroom_bytes",
    "warmup_peak_bytes",
)


def timed(cmd: list[str], log: Path, env: dict[str, str], cwd: str | None = None) -> tuple[float, int]:
    """Wall seconds of a fresh process; its stdout and stderr go to `log`."""
    start = time.perf_counter()
    with log.open("w") as f:
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    return time.perf_counter() - start, done.returncode


def figures(profile: dict[str, Any]) -> dict[str, int | None]:
    """Every measured byte count of a profile JSON, by a flat name."""
    out: dict[str, int | None] = {k: profile.get(k) for k in TOP_FIGURES}
    graphs = profile.get("cuda_graphs") or {}
    for size, sample in zip(graphs.get("sampled_sizes", ()), graphs.get("samples_bytes", ()), strict=False):
        out[f"cuda_graph_sample_{size}"] = sample
    if graphs:
        out["cuda_graphs_estimate_bytes"] = graphs.get("estimate_bytes")
    for ph in profile.get("phases", ()):
        name = ph["name"]
        out[f"{name}.peak_above_start"] = ph["peak_allocated_bytes"] - ph["allocated_before_bytes"]
        out[f"{name}.allocated_after"] = ph["allocated_after_bytes"]
        out[f"{name}.reserved"] = ph["reserved_bytes"]
        out[f"{name}.device_used"] = ph["device_used_bytes"]
    return out


def phase_walls(profile: dict[str, Any]) -> dict[str, float]:
    """Each phase's wall seconds: the whole run's steps when the profile records them (`run.` names), and the measured phases."""
    walls = {f"run.{k}": v for k, v in (profile.get("timings_s") or {}).items()}
    walls.update({ph["name"]: ph["wall_s"] for ph in profile.get("phases", ())})
    return walls


def tree_env(base: dict[str, str], tree: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (tree, base.get("PYTHONPATH", "")) if p)
    return {**base, "PYTHONPATH": path}


def one_run(out: Path, stem: str, tree: str, env: dict[str, str], model: str, cli_args: list[str]) -> dict[str, Any]:
    path = out / f"profile-{stem}.json"
    cmd = [sys.executable, "-m", "capacity.cli", "profile", "--model", model, "-o", str(path), *cli_args]
    wall, rc = timed(cmd, out / f"{stem}.log", tree_env(env, tree), cwd=tree)
    row: dict[str, Any] = {"run": stem, "wall_s": round(wall, 3), "exit_code": rc}
    if path.exists():
        profile = json.loads(path.read_text())
        row["phases_s"] = phase_walls(profile)
        row["bytes"] = figures(profile)
    print(json.dumps({k: v for k, v in row.items() if k != "bytes"}), flush=True)
    return row


def interleaved(
    out: Path, trees: dict[str, str], settings: dict[str, dict[str, str]], runs: int, warmup: int, model: str, cli_args: list[str]
) -> dict[str, Any]:
    """Per setting, per tree: its runs, interleaved with the other trees' (the warm-up runs first, not counted)."""
    base = {**os.environ, "PYTHONUNBUFFERED": "1"}
    results: dict[str, Any] = {}
    for setting, extra in settings.items():
        env = {**base, **extra}
        warm: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for name, tree in trees.items():
            for i in range(warmup):
                warm[name].append(one_run(out, f"{setting}-{name}-warmup{i + 1}", tree, env, model, cli_args))
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for i in range(runs):
            for name, tree in trees.items():
                rows[name].append(one_run(out, f"{setting}-{name}-run{i + 1}", tree, env, model, cli_args))
        for name in trees:
            walls = [r["wall_s"] for r in rows[name] if r["exit_code"] == 0]
            results[f"{setting}/{name}"] = {
                "env": extra,
                "tree": trees[name],
                "warmup_runs": warm[name],
                "runs": rows[name],
                "median_wall_s": statistics.median(walls) if walls else None,
            }
    return results


def stamps(text: str) -> dict[str, float]:
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                found[parts[0]] = float(parts[1])
            except ValueError:
                continue
    return found


def diagnose(out: Path, model: str, tree: str) -> dict[str, Any]:
    env = tree_env({**os.environ, "PYTHONUNBUFFERED": "1"}, tree)
    result: dict[str, Any] = {"floor_s": round(timed([sys.executable, "-c", FLOOR], out / "floor.log", env)[0], 3)}
    for name, code in (("sequential", STEPS_SEQUENTIAL), ("overlapped", STEPS_OVERLAPPED), ("overlapped_ctypes", STEPS_OVERLAPPED_CTYPES)):
        wall, _ = timed([sys.executable, "-c", code], out / f"steps-{name}.log", env)
        result[f"steps_{name}"] = {"wall_s": round(wall, 3), **stamps((out / f"steps-{name}.log").read_text())}
    cmd = [sys.executable, "-X", "importtime", "-m", "capacity.cli", "profile", "--model", model, "-o", str(out / "profile-importtime.json")]
    result["importtime_run_s"] = round(timed(cmd, out / "importtime.log", env, cwd=tree)[0], 3)
    prof = out / "profile.prof"
    cmd = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "capacity.cli", "profile", "--model", model, "-o", str(out / "profile-cprofile.json")]
    result["cprofile_run_s"] = round(timed(cmd, out / "cprofile.log", env, cwd=tree)[0], 3)
    if prof.exists():
        import io
        import pstats

        text = io.StringIO()
        stats = pstats.Stats(str(prof), stream=text)
        stats.sort_stats("cumulative").print_stats(120)
        stats.sort_stats("tottime").print_stats(40)
        (out / "cprofile-top.txt").write_text(text.getvalue())
    return result


def versions() -> dict[str, Any]:
    code = (
        "import json, os, platform, sys, torch, transformers; p = torch.cuda.get_device_properties(0); "
        "print(json.dumps({'gpu': p.name, 'total_memory_bytes': torch.cuda.mem_get_info()[1], 'torch': torch.__version__, "
        "'cuda': torch.version.cuda, 'transformers': transformers.__version__, 'python': platform.python_version(), "
        "'PYTHONDONTWRITEBYTECODE': os.environ.get('PYTHONDONTWRITEBYTECODE'), 'CUDA_MODULE_LOADING': os.environ.get('CUDA_MODULE_LOADING')}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    info = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-500:]}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True)
        info["driver"] = smi.stdout.strip()
    except OSError:
        info["driver"] = None
    info["cpus"] = os.cpu_count()
    info["date"] = time.strftime("%Y-%m-%d")
    return info


def markdown(summary: dict[str, Any]) -> str:
    lines = [f"# {summary['model']}", "", "```", json.dumps(summary["machine"], indent=1), "```", ""]
    for key, group in summary["groups"].items():
        runs = [r for r in group["runs"] if "phases_s" in r]
        lines += [f"## {key}", "", f"env {group['env'] or '{}'}, tree {group['tree']}", "", "| run | wall (s) | exit |", "|---|---|---|"]
        lines += [f"| {r['run']} (not counted) | {r['wall_s']:.2f} | {r['exit_code']} |" for r in group.get("warmup_runs", ())]
        lines += [f"| {r['run']} | {r['wall_s']:.2f} | {r['exit_code']} |" for r in group["runs"]]
        lines += ["", f"median wall: {group['median_wall_s']} s", ""]
        if not runs:
            continue
        names = list(dict.fromkeys(k for r in runs for k in r["phases_s"]))
        lines += ["| phase (s) | " + " | ".join(r["run"] for r in runs) + " |", "|---|" + "---|" * len(runs)]
        lines += [f"| {n} | " + " | ".join(f"{r['phases_s'].get(n, float('nan')):.3f}" for r in runs) + " |" for n in names]
        lines += [""]
    lines += ["## measured bytes against the first group's first run", "", "```", json.dumps(compare(summary), indent=1), "```"]
    if summary.get("diagnose"):
        lines += ["", "## diagnose", "", "```", json.dumps(summary["diagnose"], indent=1), "```"]
    return "\n".join(lines) + "\n"


def compare(summary: dict[str, Any]) -> dict[str, Any]:
    """Every run's measured figures against the first run of the first group: the largest relative difference."""
    runs = [r for g in summary["groups"].values() for r in (*g.get("warmup_runs", ()), *g["runs"]) if "bytes" in r]
    if not runs:
        return {}
    reference = runs[0]["bytes"]
    worst: dict[str, Any] = {"reference": runs[0]["run"], "runs": len(runs), "figures": len(reference), "max_relative_difference": 0.0, "where": None}
    for r in runs:
        for k, v in r["bytes"].items():
            ref = reference.get(k)
            if v is None or ref is None:
                if v != ref:
                    worst["missing"] = f"{r['run']}: {k}"
                continue
            diff = abs(v - ref) / max(abs(ref), 1)
            if diff > worst["max_relative_difference"]:
                worst.update(max_relative_difference=diff, where=f"{r['run']}: {k} {v} vs {ref}")
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup-runs", type=int, default=0)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=DIR", help="a capacity source tree to time (default: this one)")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME:KEY=VALUE,...", help="environment for the runs (default: as is)")
    parser.add_argument("--cli-args", default="", help="more `capacity profile` arguments (e.g. --cpu-probe for a smoke test)")
    parser.add_argument("--diagnose", action="store_true", help="the floor, stamped start-up steps, one run under -X importtime, one under cProfile")
    parser.add_argument("--compare", type=Path, metavar="SUMMARY", help="print the bytes comparison of a summary.json and stop")
    args = parser.parse_args()
    if args.compare:
        print(json.dumps(compare(json.loads(args.compare.read_text())), indent=1))
        return
    if args.out is None:
        parser.error("OUT_DIR is required")
    args.out.mkdir(parents=True, exist_ok=True)
    trees = dict(t.split("=", 1) for t in args.tree) or {"tree": str(Path(__file__).resolve().parents[1])}
    trees = {name: str(Path(tree).resolve()) for name, tree in trees.items()}
    settings: dict[str, dict[str, str]] = {}
    for s in args.setting:
        name, _, pairs = s.partition(":")
        settings[name] = dict(kv.split("=", 1) for kv in pairs.split(",") if kv)
    settings = settings or {"default": {}}
    summary: dict[str, Any] = {"model": args.model, "machine": versions()}
    print(json.dumps(summary["machine"]), flush=True)
    summary["groups"] = interleaved(args.out, trees, settings, args.runs, args.warmup_runs, args.model, args.cli_args.split())
    if args.diagnose:
        summary["diagnose"] = diagnose(args.out, args.model, next(iter(trees.values())))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    text = markdown(summary)
    (args.out / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
