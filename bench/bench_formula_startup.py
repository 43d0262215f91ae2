"""Startup of a config-only plan: `capacity plan --estimate formula` in a fresh process, per model source.

    PYTHONPATH=.:tests python3 bench/bench_formula_startup.py [OUT.json]

Cases (each REPEATS fresh interpreters running `capacity.cli.app.main`, `--gpu L4 --offline --estimate formula --json`):
- hub-cache: a Hub id planned from the HF cache with HF_HUB_OFFLINE=1, its weights from the safetensors header
  summary recorded when it was fetched (the fetch is one earlier run against tests/support/hub_server.py on 127.0.0.1,
  timed as hub-fetch);
- folder: a model folder with config.json and a model.safetensors;
- catalog-meta: a catalog id without recorded headers (openai/whisper-tiny): the weights come from a meta-device
  build, so torch and transformers are imported (what every formula plan cost before issue 9).
For each run: wall time (time.perf_counter around the subprocess), CPU time of the child (user + sys, from
resource.getrusage), and whether torch / transformers / huggingface_hub / pandas ended up in sys.modules.
Goal (issue 9): <= 1.0 s wall for a config-only plan of a Hub or catalog model whose parameter count the
safetensors headers give. On a shared machine the wall time includes waiting for a core: the load average
before and after is recorded, and the CPU time is the load-independent figure.
"""

from __future__ import annotations

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

from machine import cpu_model, package_versions

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tests.support.safetensors_files import safetensors_bytes  # noqa: E402

REPEATS = 7
GOAL_S = 1.0
FLAGS = ["--gpu", "L4", "--offline", "--estimate", "formula", "--json"]
CHILD = """
import sys, json
from capacity.cli.app import main
rc = main(sys.argv[1:])
print(json.dumps({m: m in sys.modules for m in ("torch", "transformers", "huggingface_hub", "pandas")}), file=sys.stderr)
sys.exit(rc)
"""


def versions() -> dict[str, str]:
    return package_versions(("huggingface_hub", "typer", "rich", "torch", "transformers"), missing="absent")


def run(model: str, env: dict[str, str]) -> dict[str, object]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, "plan", "--model", model, *FLAGS], capture_output=True, text=True, env=env, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{model}: exit {proc.returncode}: {proc.stderr.strip()}")
    plan = json.loads(proc.stdout)
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 3),
        "modules": json.loads(proc.stderr.strip().splitlines()[-1]),
        "origin": plan["model"]["origin"],
        "weights_method": plan["memory"]["weights"]["method"],
    }


def summary(runs: list[dict[str, object]]) -> dict[str, object]:
    walls = [float(r["wall_s"]) for r in runs]  # type: ignore[arg-type]
    cpus = [float(r["cpu_s"]) for r in runs]  # type: ignore[arg-type]
    return {
        "wall_median_s": round(statistics.median(walls), 3),
        "wall_min_s": round(min(walls), 3),
        "cpu_median_s": round(statistics.median(cpus), 3),
        "meets_goal_wall_median": statistics.median(walls) <= GOAL_S,
        "modules": runs[-1]["modules"],
        "origin": runs[-1]["origin"],
        "weights_method": runs[-1]["weights_method"],
        "runs": runs,
    }


def main() -> None:
    from capacity.source.resolve import resolve_model
    from tests.support.hub_server import add_repo, serve

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    whisper = json.dumps(resolve_model("openai/whisper-tiny").config).encode()
    checkpoint = safetensors_bytes({"model.encoder.conv1.weight": ("F32", [384, 80, 3]), "model.decoder.embed_tokens.weight": ("F32", [51865, 384])})
    with tempfile.TemporaryDirectory() as tmp:
        home, root, folder = Path(tmp) / "hf-home", Path(tmp) / "hub-root", Path(tmp) / "folder"
        folder.mkdir()
        (folder / "config.json").write_bytes(whisper)
        (folder / "model.safetensors").write_bytes(checkpoint)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "CAPACITY_"))}
        base.update(HF_HOME=str(home), PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), base.get("PYTHONPATH", "")]))
        add_repo(root, "bench/whisper-tiny-hub", {"main": {"config.json": whisper, "model.safetensors": checkpoint}})
        load_before = os.getloadavg()
        with serve(root) as server:
            fetch = run("bench/whisper-tiny-hub", {**base, "HF_ENDPOINT": server.url})
        offline = {**base, "HF_HUB_OFFLINE": "1"}
        cases = {
            "hub-cache": summary([run("bench/whisper-tiny-hub", offline) for _ in range(REPEATS)]),
            "folder": summary([run(str(folder), offline) for _ in range(REPEATS)]),
            "catalog-meta": summary([run("openai/whisper-tiny", offline) for _ in range(3)]),
        }
        load_after = os.getloadavg()
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "platform": platform.platform(), "loadavg_before": load_before, "loadavg_after": load_after},
        "versions": versions(),
        "command": "capacity plan --model M " + " ".join(FLAGS),
        "goal_s": GOAL_S,
        "hub-fetch": fetch,
        "cases": cases,
    }
    text = json.dumps(result, indent=2) + "\n"
    if out:
        out.write_text(text)
    for name, case in cases.items():
        print(f"{name:13s} wall median {case['wall_median_s']:.2f} s (min {case['wall_min_s']:.2f}), cpu {case['cpu_median_s']:.2f} s, modules {case['modules']}")
    print(f"hub-fetch     wall {fetch['wall_s']:.2f} s, cpu {fetch['cpu_s']:.2f} s; load {load_before} -> {load_after}")


if __name__ == "__main__":
    main()
