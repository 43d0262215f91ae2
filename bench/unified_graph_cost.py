"""The CUDA-graph capture cost on a unified-memory GPU, fitted on the one calibration-half log that prints vLLM's
graph estimate on one (bench/vllm_logs/qwen3-30b-a3b-thinking-2507-fp8-gb10-util0.55-len32768-v0.30.0-excerpt.log).

    PYTHONPATH=. python bench/unified_graph_cost.py bench/results/unified-graph-cost-2026-12-02/fit.json

vLLM 0.30.0's gpu_worker prints "The current --gpu-memory-utilization=0.5500 is equivalent to
--gpu-memory-utilization=0.5410 without CUDA graph memory profiling": its estimate is (0.5500 - 0.5410) x the GPU's
total (each figure printed to 4 decimals, so +-0.0001 of the total between them). On a GB10 vLLM reads free memory
from MemAvailable (capacity/memory/unified_memory.py), so each captured graph's host side moves it too; on the H200,
where capacity's capture costs were measured, cudaMemGetInfo sees the device side only. The fit scales the two
per-graph costs (each PIECEWISE graph, each FULL graph's per-layer cost) by one factor k and keeps the once-per-run
parts (torch's pool and warmup cache, the driver's first instantiation); the estimate E(k) grows with k (not
linearly: the FULL extrapolation's 1 MiB floor), so k is found by bisection, to 1e-4, for E(k) = vLLM's estimate.

The held-out GB10 log of the same report (gpt-oss-20b) is not used.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from capacity.gpu.catalog import gpu_by_name
from capacity.memory.cuda_graphs import H200_CAPTURE, graph_estimate
from capacity.model.registry import load_model
from capacity.planning.planner import serving_under
from capacity.serving.config import ServingArgs
from capacity.vllm.versions import semantics_for

LOG = "bench/vllm_logs/qwen3-30b-a3b-thinking-2507-fp8-gb10-util0.55-len32768-v0.30.0-excerpt.log"
MODEL = "Qwen/Qwen3-30B-A3B-FP8"  # the sidecar's stand-in for the Thinking-2507-FP8 checkpoint (same shapes)
UTILIZATION, WITHOUT_GRAPHS = 0.5500, 0.5410  # the log's CUDA-graph line


def main(out: Path) -> None:
    line = next(line for line in Path(LOG).read_text().splitlines() if "CUDA graph memory profiling is enabled" in line)
    assert f"--gpu-memory-utilization={UTILIZATION:.4f} is equivalent to --gpu-memory-utilization={WITHOUT_GRAPHS:.4f}" in line
    gpu = gpu_by_name("GB10")
    semantics = semantics_for("0.30.0")
    assert semantics is not None
    _, spec = load_model(MODEL)
    serving = serving_under(semantics, ServingArgs(gpu_memory_utilization=UTILIZATION, max_model_len=32768), spec, gpu)
    vllm_bytes = (UTILIZATION - WITHOUT_GRAPHS) * gpu.total_memory_bytes
    spread = 0.0001 * gpu.total_memory_bytes  # both figures rounded to 4 decimals
    def estimate(k: float) -> int:
        cost = replace(H200_CAPTURE, piece_graph_bytes=round(H200_CAPTURE.piece_graph_bytes * k), full_graph_bytes_per_layer=round(H200_CAPTURE.full_graph_bytes_per_layer * k))
        e = graph_estimate(spec, serving, gpu.sm100, "MRV2", cost)
        assert e is not None
        return e.total_bytes

    def solve(target: float) -> float:
        low, high = 1.0, 10.0
        while high - low > 1e-4:
            mid = (low + high) / 2
            low, high = (mid, high) if estimate(mid) < target else (low, mid)
        return (low + high) / 2

    e1 = graph_estimate(spec, serving, gpu.sm100, "MRV2", H200_CAPTURE)
    assert e1 is not None
    k = solve(vllm_bytes)
    result = {
        "log": LOG,
        "model": MODEL,
        "gpu": gpu.name,
        "gpu_total_bytes": gpu.total_memory_bytes,
        "vllm_version": "0.30.0",
        "line": line.split("] ", 1)[1],
        "vllm_estimate_bytes": round(vllm_bytes),
        "vllm_estimate_range_bytes": [round(vllm_bytes - spread), round(vllm_bytes + spread)],
        "piecewise_sizes": e1.piecewise_sizes,
        "full_sizes": e1.full_sizes,
        "h200_cost_estimate_bytes": e1.total_bytes,
        "k": round(k, 3),
        "k_range": [round(solve(vllm_bytes - spread), 3), round(solve(vllm_bytes + spread), 3)],
        "estimate_at_k_bytes": estimate(round(k, 3)),
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
