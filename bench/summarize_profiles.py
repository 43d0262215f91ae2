"""Markdown tables from saved profiles: every term per phase, and the offline estimate for the same knobs.

    python3 bench/summarize_profiles.py bench/results/h200-profiles-2026-11-30 > bench/results/h200-profiles-2026-11-30/README.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from capacity.memory.measured_profile import load_profile
from capacity.planning.plan import NON_KV_TERMS
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs

MiB = 2**20


def mib(n: int | None) -> str:
    return "—" if n is None else f"{n / MiB:,.1f}"


def main(folder: Path) -> None:
    profiles = sorted(folder.glob("profile-*.json"))
    first = load_profile(profiles[0]).fingerprint
    print(f"# H200 profiles ({first.created[:10]})\n")
    print(f"GPU {first.gpu_name} ({first.gpu_total_memory_bytes:,} B by cudaMemGetInfo), driver {first.driver}, CUDA {first.cuda}, "
          f"torch {first.torch}, transformers {first.transformers}, capacity {first.capacity}, attention {first.attn_implementation}. "
          "Knobs: vLLM 0.33's defaults for this GPU (`vllm serve`). Raw JSON beside this file. MiB = 2^20 B.\n")
    print("## Terms (measured) against the offline estimate for the same knobs\n")
    print("| model | weights | encoder cache | activation peak (est.) | non-torch + reserve (est.) | CUDA graphs (est.) | non-KV total (est.) | KV cache (est.) |")
    print("|---|---|---|---|---|---|---|---|")
    for path in profiles:
        p = load_profile(path)
        knobs = p.fingerprint.knobs
        args = ServingArgs(max_num_batched_tokens=knobs["max_num_batched_tokens"], max_num_seqs=knobs["max_num_seqs"], dtype=knobs["dtype"])
        measured = plan_for(p.fingerprint.model_name, args, "H200", profile=p)
        offline = plan_for(p.fingerprint.model_name, args, "H200")
        m, o = measured.memory, offline.memory
        cells = [f"{mib(m[k].bytes)} ({mib(o[k].bytes)})" for k in ("weights", "encoder_cache", "activation_peak", "non_torch", "cuda_graphs")]
        non_kv = f"{mib(measured.non_kv_bytes)} ({mib(offline.non_kv_bytes)})"
        kv = f"{mib(m['kv_cache'].bytes)} ({mib(o['kv_cache'].bytes)})"
        print(f"| {p.fingerprint.model_name} | " + " | ".join(cells) + f" | {non_kv} | {kv} |")
    print("\nEstimates in parentheses come from `capacity plan` without a profile (formulas). Terms in", ", ".join(NON_KV_TERMS), "make up vLLM's non-KV memory.\n")
    print("## Phases\n")
    print("| model | phase | detail | peak above start (MiB) | allocated after (MiB) | device used (MiB) | NVML process (MiB) | wall (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for path in profiles:
        p = load_profile(path)
        for ph in p.phases:
            print(f"| {p.fingerprint.model_name} | {ph.name} | {ph.detail} | {mib(ph.peak_above_start_bytes)} | {mib(ph.allocated_after_bytes)} | "
                  f"{mib(ph.device_used_bytes)} | {mib(ph.nvml_process_bytes)} | {ph.wall_s:.3f} |")
    print("\n## Baseline, totals, graphs\n")
    print("| model | CUDA context + cuBLAS (MiB) | total_consumed (MiB) | transient peak headroom (MiB) | graph samples (B) | graph estimate (MiB) | warmup peak (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for path in profiles:
        p = load_profile(path)
        g = p.cuda_graphs
        print(f"| {p.fingerprint.model_name} | {mib(p.baseline_device_used_bytes)} | {mib(p.total_consumed_bytes)} | {mib(p.transient_peak_headroom_bytes)} | "
              f"{'—' if g is None else ', '.join(f'{s}:{b:,}' for s, b in zip(g.sampled_sizes, g.samples_bytes, strict=False))} | {mib(None if g is None else g.estimate_bytes)} | {mib(p.warmup_peak_bytes)} |")
    summary = folder / "summary.json"
    if summary.exists():
        speed = json.loads(summary.read_text()).get("speed") or {}
        if speed:
            print("\n## Speed (whisper-large-v3, fresh processes, CUDA init included)\n")
            print(f"- full `profile_model` run: {speed['full_profile_fresh_process_s']} s (goal: 15 s)")
            print(f"- floor (build on GPU + one max-size encoder batch + one decoder step, plain transformers): {speed['floor_fresh_process_s']} s")
            print(f"- ratio: {speed['ratio']}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
