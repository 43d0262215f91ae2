"""capacity's CUDA-graph estimate (capacity/memory/cuda_graphs.py) against the figures public vLLM logs printed.

For each start of `dataset.json` whose model capacity can plan (its catalog, or the model of the benchmark log it
came from) and that ran no speculative decoding: capacity's estimate for the runner that start ran (V1 or MRV2), with
the graph counts the log printed (`Profiling CUDA graph memory: PIECEWISE=n (largest=l), FULL=m`) or else the sizes
vLLM 0.33's rule gives for the start's knobs, against vLLM's estimate (printed, or from the utilization line) or,
where only that is printed, the real capture. Nothing here is calibrated: the constants are the H200's.

    python bench/cuda_graphs/compare.py [--out bench/cuda_graphs/compare.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from capacity.errors import BadInput  # noqa: E402
from capacity.memory.activations import decoder_activation_bytes  # noqa: E402
from capacity.memory.cuda_graphs import graph_estimate, mrv2_estimate, v1_estimate  # noqa: E402
from capacity.planning.planner import plan_for  # noqa: E402
from capacity.serving.config import ServingArgs  # noqa: E402
from capacity.units import GiB  # noqa: E402

HERE = Path(__file__).resolve().parent
LOGS = ROOT / "bench" / "vllm_logs"
# the same decoder as a catalog model (a quantized checkpoint of it: its graphs and activations do not change)
SAME_DECODER = {"Qwen/Qwen3.5-35B-A3B-FP8": "Qwen/Qwen3.5-35B-A3B"}
UNIFIED = ("GB10", "DGX Spark", "Jetson")


def _model(entry: dict) -> str | None:
    bench = entry.get("in_capacity_benchmark")
    name = str(entry.get("model") or "").split(" ")[0]
    if bench:
        sidecar = LOGS / bench.replace(".log", ".json")
        if sidecar.exists():
            meta = json.loads(sidecar.read_text())
            if meta.get("not_plannable"):
                return None
            name = meta.get("capacity_model") or meta.get("model") or name
    if "/" not in name or name.startswith("/"):
        return None
    name = SAME_DECODER.get(name, name)
    local = LOGS / "configs" / name.replace("/", "--")  # the benchmark's published configs (bench/vllm_logs/configs)
    return str(local.relative_to(ROOT)) if local.is_dir() else name


def _vllm_figure(entry: dict) -> tuple[float, str] | None:
    if entry.get("estimate_gib") is not None:
        return entry["estimate_gib"], "estimate"
    util, total = entry.get("util_equivalent"), entry.get("gpu_total_gib")
    if util and util[1] is not None and total:
        return round((util[0] - util[1]) * total, 3), "estimate (utilization line)"
    for key, what in (("capture_took_gib", "capture"), ("pool_actual_gib", "capture"), ("budget_cudagraph_gib", "capture")):
        if entry.get(key) is not None:
            return entry[key], what
    return None


def compare(entry: dict, index: int) -> dict | None:
    if entry.get("speculative_config") or (entry.get("data_parallel_size") or 1) > 1:
        return None
    model, figure = _model(entry), _vllm_figure(entry)
    if model is None or figure is None:
        return None
    knobs = {k: entry[k] for k in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "tensor_parallel_size") if entry.get(k)}
    try:
        plan = plan_for(model, ServingArgs(**knobs), "H200")
    except BadInput as exc:
        return {"index": index, "model": model, "skipped": str(exc)[:120]}
    spec, serving = plan.spec, plan.serving
    version = str(entry.get("vllm_version") or "")
    runner = entry.get("runner") or ("MRV2" if version[:4] in ("0.29", "0.30", "0.31", "0.32", "0.33") else "V1")
    if entry.get("full_graphs") is not None:  # the counts the log printed, in the planner's estimate
        largest = entry.get("piecewise_largest") or entry.get("full_largest") or 512
        act = decoder_activation_bytes(spec.decoder, largest, serving.dtype_bytes, serving.tensor_parallel_size)
        estimate = (mrv2_estimate if runner == "MRV2" else v1_estimate)(spec.decoder, act, entry.get("piecewise_graphs") or 0, entry["full_graphs"])
        counts = "printed"
    else:  # the planner's own estimate: vLLM 0.33's sizes for the start's knobs
        estimate = graph_estimate(spec, serving, False, runner)
        counts = "vLLM 0.33's rule"
    n_pw, n_full = estimate.piecewise_sizes, estimate.full_sizes
    vllm_gib, kind = figure
    cap_gib = estimate.total_bytes / GiB
    return {
        "index": index,
        "model": model,
        "gpu": str(entry.get("gpu"))[:40],
        "unified_memory": any(u in str(entry.get("gpu")) for u in UNIFIED),
        "vllm_version": version,
        "runner": runner,
        "tp": serving.tensor_parallel_size,
        "piecewise": n_pw,
        "full": n_full,
        "counts": counts,
        "vllm_gib": vllm_gib,
        "vllm_kind": kind,
        "capacity_gib": round(cap_gib, 3),
        "ratio": round(cap_gib / vllm_gib, 2) if vllm_gib > 0 else None,
        "in_capacity_benchmark": entry.get("in_capacity_benchmark"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=HERE / "compare.md")
    ns = ap.parse_args()
    dataset = json.loads((HERE / "dataset.json").read_text())
    rows = [r for i, e in enumerate(dataset) if (r := compare(e, i)) is not None]
    lines = [
        "# capacity's CUDA-graph estimate against public vLLM logs",
        "",
        "`python bench/cuda_graphs/compare.py` (this file is its output). capacity: `capacity/memory/cuda_graphs.py` with the H200-measured",
        "capture costs, for the runner the start ran; vLLM: the log's estimate, else its real capture. Ratio = capacity / vLLM.",
        "",
        "| # | model | GPU | vLLM | runner | TP | PIECEWISE / FULL (counts) | vLLM GiB (what) | capacity GiB | ratio |",
        "|---|---|---|---|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['index']} | {r['model']} | | | | | not planned: {r['skipped']} | | | |")
            continue
        lines.append(
            f"| {r['index']} | {r['model']} | {r['gpu']}{' (unified)' if r['unified_memory'] else ''} | {r['vllm_version']} | {r['runner']} | {r['tp']} | "
            f"{r['piecewise']} / {r['full']} ({r['counts']}) | {r['vllm_gib']:.3f} ({r['vllm_kind']}) | {r['capacity_gib']:.3f} | {r['ratio']} |"
        )
    discrete = sorted(r["ratio"] for r in rows if "skipped" not in r and not r["unified_memory"] and r["ratio"] is not None)
    unified = sorted(r["ratio"] for r in rows if "skipped" not in r and r["unified_memory"] and r["ratio"] is not None)
    lines += ["", f"Discrete GPUs: ratios {discrete}; unified memory: {unified}."]
    ns.out.write_text("\n".join(lines) + "\n")
    (ns.out.with_suffix(".json")).write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
