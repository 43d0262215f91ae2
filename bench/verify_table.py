"""A markdown table of `bench/verify_models.py` runs: each model's planned budget against what the GPU used.

    python3 bench/verify_table.py bench/results/h200-catalog-2026-12-01/verify [MORE_FOLDERS ...]

Each folder holds `verify-*.json` (one per model). Columns, in GiB (2^30 B) unless said: the requested memory
(total x gpu_memory_utilization), the allocator's peak (as vLLM's: plus the pool blocks held back for transformers'
tower where the plan charges vLLM's smaller encoder kernels, less that tower's excess), the device's peak use above the baseline (cudaMemGetInfo),
the allocator's slack at the peak (reserved - allocated), and the outcome `capacity/planning/verify_result.py` reads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GiB = 2**30


def row(folder: Path, doc: dict) -> str:
    if "verify" not in doc:
        return f"| {doc['model']} | {folder.name} | — | — | — | — | — | — | refused: {doc['error']} |"
    v = doc["verify"]
    # a tower the plan scales to vLLM's kernels: the run held pool blocks back for it (capacity/planning/verify_result.py)
    held, excess = v.get("pool_held_back_bytes", 0), v.get("tower_excess_bytes", 0)
    allocated = v["peak_allocated_bytes"] + held - excess
    over_alloc = allocated - v["requested_bytes"]
    return (
        f"| {v['model']} | {folder.name} | {v['requests']:,} | {v['requested_bytes'] / GiB:.2f} | {allocated / GiB:.2f} "
        f"({100 * over_alloc / v['requested_bytes']:+.2f} %) | {v['peak_used_bytes'] / GiB:.2f} ({100 * -v['unused_fraction']:+.2f} %) | "
        f"{v['allocator_slack_bytes'] / GiB:.2f} | {'pass' if v['passed'] else 'FAIL'} | {v['outcome']} |"
    )


def main(folders: list[Path]) -> None:
    print("| model | run | requests | requested | allocated peak (vs requested) | device used (vs requested) | allocator slack | verdict | outcome |")
    print("|---|---|---|---|---|---|---|---|---|")
    for folder in folders:
        for path in sorted(folder.glob("verify-*.json")):
            print(row(folder, json.loads(path.read_text())))


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])
