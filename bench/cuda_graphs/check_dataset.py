"""Check bench/cuda_graphs/dataset.json against its own verbatim log lines, then print a summary table.

Stdlib only. Run from anywhere:  python3 bench/cuda_graphs/check_dataset.py [dataset.json]
Exit status 0 when every check passes, 1 otherwise (each failure is printed on one line).

What is checked, per entry:
  - every required key is present (null allowed where the value was not printed or stated);
  - each number read from a log line appears, in that line's own wording, in one of the entry's `lines`:
      piecewise_graphs/largest, full_graphs/largest  -> "PIECEWISE=n (largest=m)" / "FULL=n" in a Profiling line,
                                                        or "n/n" in a Capturing/Profiling progress bar (graph counts);
      estimate_gib        -> "Estimated [MRV2 ]CUDA graph memory: X GiB" or "X GiB (estimated)";
      util_equivalent     -> "--gpu-memory-utilization=C is equivalent to --gpu-memory-utilization=E"
                             and "increase --gpu-memory-utilization to S" (or the 0.19 form "from C to S");
      capture_took_gib/secs -> "Graph capturing finished in S secs, took X GiB";
      pool_actual/estimated -> "CUDA graph pool memory: A GiB (actual), E GiB (estimated)";
      available_kv_gib    -> "Available KV cache memory: X GiB";
      model_loading_gib   -> "Model loading took X GiB";
      budget_cudagraph_gib -> "X GiB for CUDAGraph memory";
      gpu_total_gib       -> "Free memory on device (f/T GiB)" when such a line is kept (else it is stated; see source);
  - the util_equivalent difference times the GPU total is consistent with the estimate where both are known.
Numbers compare as printed: 0.4 matches "0.40", 0.9 matches "0.9000".
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

DATASET = Path(__file__).with_name("dataset.json")

REQUIRED = (
    "source", "vllm_version", "version_basis", "runner", "runner_basis", "model", "architecture", "dtype",
    "quantization", "kv_cache_dtype", "gpu", "gpu_total_gib", "tensor_parallel_size", "data_parallel_size",
    "enable_expert_parallel", "pipeline_parallel_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
    "gpu_memory_utilization", "enforce_eager", "cudagraph_mode", "compilation_config", "speculative_config",
    "piecewise_graphs", "piecewise_largest", "full_graphs", "full_largest", "estimate_gib", "util_equivalent",
    "capture_took_gib", "capture_secs", "pool_actual_gib", "pool_estimated_gib", "available_kv_gib",
    "model_loading_gib", "budget_cudagraph_gib", "num_layers", "num_layers_basis", "in_capacity_benchmark", "notes",
    "lines",
)
NUM = r"(-?\d+(?:\.\d+)?)"


def same(printed: str, value: float) -> bool:
    return abs(float(printed) - float(value)) < 1e-9


def found(lines: list[str], pattern: str, *values: float) -> bool:
    """True when some line matches `pattern` with its groups equal to `values` (None values are skipped)."""
    for line in lines:
        for m in re.finditer(pattern, line):
            if all(v is None or same(g, v) for g, v in zip(m.groups(), values, strict=True)):
                return True
    return False


def graph_count_found(lines: list[str], kind: str, count: int, largest: int | None) -> bool:
    profile = rf"{kind}=(\d+)(?: \(largest=(\d+)\))?"
    for line in lines:
        if "Profiling CUDA graph memory:" in line:
            m = re.search(profile, line)
            if m and int(m.group(1)) == count and (largest is None or (m.group(2) and int(m.group(2)) == largest)):
                return True
    if largest is not None:
        return False
    bar = rf"(?:Capturing|Profiling) CUDA graph[^|]*{kind}[^|]*\|[^|]*\|\s*\d+/(\d+)"
    return found(lines, bar, count)


def check_entry(i: int, e: dict) -> list[str]:
    errs = [f"entry {i}: missing key {k}" for k in REQUIRED if k not in e]
    if errs:
        return errs
    lines = e["lines"]
    if not lines or not all(isinstance(s, str) for s in lines):
        return [f"entry {i}: `lines` must be a non-empty list of strings"]

    def need(ok: bool, what: str) -> None:
        if not ok:
            errs.append(f"entry {i} ({e['model']}): {what} not found in its lines")

    for kind, n_key, l_key in (("PIECEWISE", "piecewise_graphs", "piecewise_largest"),
                               ("FULL", "full_graphs", "full_largest")):
        if e[n_key] is not None:
            need(graph_count_found(lines, kind, e[n_key], e[l_key]), f"{n_key}={e[n_key]} {l_key}={e[l_key]}")
        elif e[l_key] is not None:
            errs.append(f"entry {i}: {l_key} without {n_key}")
    if e["estimate_gib"] is not None:
        need(found(lines, r"Estimated (?:MRV2 )?CUDA graph memory: " + NUM + " GiB", e["estimate_gib"])
             or found(lines, NUM + r" GiB \(estimated\)", e["estimate_gib"]), f"estimate_gib={e['estimate_gib']}")
    if e["util_equivalent"] is not None:
        cur, eq, sug = e["util_equivalent"]
        if eq is not None:
            need(found(lines, r"--gpu-memory-utilization=" + NUM + r" is equivalent to --gpu-memory-utilization="
                       + NUM, cur, eq), f"util_equivalent current/equivalent {cur}/{eq}")
            if sug is not None:  # None where the author's copy cut the line short
                need(found(lines, r"increase --gpu-memory-utilization to " + NUM, sug), f"util suggested {sug}")
        else:
            need(found(lines, r"increase --gpu-memory-utilization from " + NUM + " to " + NUM, cur, sug),
                 f"util_equivalent (0.19 form) {cur} -> {sug}")
    if e["capture_took_gib"] is not None or e["capture_secs"] is not None:
        need(found(lines, r"Graph capturing finished in " + NUM + r" secs?, took " + NUM + " GiB",
                   e["capture_secs"], e["capture_took_gib"]),
             f"capture {e['capture_secs']} s / {e['capture_took_gib']} GiB")
    if e["pool_actual_gib"] is not None or e["pool_estimated_gib"] is not None:
        need(found(lines, r"CUDA graph pool memory: " + NUM + r" GiB \(actual\), " + NUM + r" GiB \(estimated\)",
                   e["pool_actual_gib"], e["pool_estimated_gib"]),
             f"pool {e['pool_actual_gib']}/{e['pool_estimated_gib']}")
    if e["available_kv_gib"] is not None:
        need(found(lines, r"Available KV cache memory: " + NUM + " GiB", e["available_kv_gib"]),
             f"available_kv_gib={e['available_kv_gib']}")
    if e["model_loading_gib"] is not None:
        need(found(lines, r"Model loading took " + NUM + " GiB", e["model_loading_gib"]),
             f"model_loading_gib={e['model_loading_gib']}")
    if e["budget_cudagraph_gib"] is not None:
        need(found(lines, NUM + r" GiB for CUDAGraph memory", e["budget_cudagraph_gib"]),
             f"budget_cudagraph_gib={e['budget_cudagraph_gib']}")
    if e["gpu_total_gib"] is not None and any("Free memory on device" in s for s in lines):
        need(found(lines, r"Free memory on device \(" + NUM + "/" + NUM + r" GiB\)", None, e["gpu_total_gib"]),
             f"gpu_total_gib={e['gpu_total_gib']}")
    # Cross-check: (current - equivalent) x total = estimate, to the printing precision (4 decimals, 2 decimals).
    if e["util_equivalent"] and e["util_equivalent"][1] is not None and e["gpu_total_gib"] and e["estimate_gib"]:
        cur, eq, _ = e["util_equivalent"]
        implied = (cur - eq) * e["gpu_total_gib"]
        tolerance = 0.0001 * e["gpu_total_gib"] + 0.005
        if abs(implied - e["estimate_gib"]) > tolerance:
            errs.append(f"entry {i}: (util {cur} - {eq}) x {e['gpu_total_gib']} GiB = {implied:.3f} != estimate "
                        f"{e['estimate_gib']}")
    return errs


def fmt(v, width: int) -> str:
    s = "-" if v is None else str(v)
    return s[:width].ljust(width)


def summary(entries: list[dict]) -> None:
    cols = (("#", 3), ("runner", 6), ("version", 12), ("model", 38), ("GPU", 30), ("TP", 2), ("PW n/lg", 8),
            ("FULL n/lg", 9), ("est", 5), ("took", 5), ("pool a/e", 10), ("bench", 5))
    print(" ".join(name.ljust(w) for name, w in cols))
    for i, e in enumerate(entries):
        pw = None if e["piecewise_graphs"] is None else f"{e['piecewise_graphs']}/{e['piecewise_largest'] or '?'}"
        fu = None if e["full_graphs"] is None else f"{e['full_graphs']}/{e['full_largest'] or '?'}"
        pool = None if e["pool_actual_gib"] is None else f"{e['pool_actual_gib']}/{e['pool_estimated_gib']}"
        row = (i, e["runner"], e["vllm_version"], e["model"], e["gpu"], e["tensor_parallel_size"], pw, fu,
               e["estimate_gib"], e["capture_took_gib"], pool, "yes" if e["in_capacity_benchmark"] else "")
        print(" ".join(fmt(v, w) for v, (_, w) in zip(row, cols, strict=True)))


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DATASET
    entries = json.loads(path.read_text(encoding="utf-8"))
    errors = [err for i, e in enumerate(entries) for err in check_entry(i, e)]
    summary(entries)
    n_est = sum(e["estimate_gib"] is not None for e in entries)
    n_took = sum(e["capture_took_gib"] is not None or e["pool_actual_gib"] is not None for e in entries)
    n_both = sum(e["estimate_gib"] is not None and (e["capture_took_gib"] is not None or e["pool_actual_gib"]
                                                    is not None) for e in entries)
    print(f"\n{len(entries)} entries: {n_est} with an estimate, {n_took} with a measured capture/pool, "
          f"{n_both} with both; {sum(bool(e['in_capacity_benchmark']) for e in entries)} also in "
          "bench/vllm_logs")
    for err in errors:
        print("FAIL", err)
    print("OK" if not errors else f"{len(errors)} failure(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
