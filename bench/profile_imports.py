"""What transformers' model code costs a profile to import, tree against tree, in interleaved pairs of fresh
processes (issue 23, section 6). A whole profile's wall time drifts by ±20 % from run to run on a lent VM, which
hides a change of half a second; the import step alone, paired, does not.

    PYTHONPATH=. python3 bench/profile_imports.py OUT.json --pairs 10 --tree before=DIR --tree after=DIR

Each process imports torch first (untimed, as the CLI does before the run), then times what a profile's run
imports (profilers.startup.RUN_MODULES, as `profilers.run` does, with the collector paused) and the model family's
module (whisper's, as the weights phase does), and says which optional packages came with them. The trees run in
each pair in turn (before, after; then after, before), so a drift treats them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

MODEL_MODULE = "transformers.models.whisper.modeling_whisper"
OPTIONAL = ("scipy", "scipy.optimize", "sklearn", "accelerate", "sympy", "torch._dynamo")

CHILD = f"""
import json, sys, time
import torch
import profilers.startup as startup
t0 = time.perf_counter()
with startup.collector_paused():
    startup.import_modules(startup.RUN_MODULES)
t1 = time.perf_counter()
startup.import_modules([{MODEL_MODULE!r}])
t2 = time.perf_counter()
print(json.dumps({{"run_modules_s": round(t1 - t0, 4), "model_module_s": round(t2 - t1, 4),
                  "imported": {{m: m in sys.modules for m in {OPTIONAL!r}}}, "startup": startup.__file__}}))
"""


def one(tree: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=tree, env=env, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["total_s"] = round(result["run_modules_s"] + result["model_module_s"], 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=DIR")
    args = parser.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    names = list(trees)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for pair in range(args.pairs):
        for name in names if pair % 2 == 0 else reversed(names):
            runs[name].append(one(trees[name]))
    first, last = names[0], names[-1]
    ratios = [b["total_s"] / a["total_s"] for a, b in zip(runs[first], runs[last], strict=True)]
    summary = {
        "trees": trees,
        "pairs": args.pairs,
        "median_total_s": {name: statistics.median(r["total_s"] for r in runs[name]) for name in names},
        "median_saving_s": statistics.median(a["total_s"] - b["total_s"] for a, b in zip(runs[first], runs[last], strict=True)),
        "median_ratio": statistics.median(ratios),
        "pairs_faster": sum(ratio < 1 for ratio in ratios),
        "imported": {name: runs[name][0]["imported"] for name in names},
        "runs": runs,
    }
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
