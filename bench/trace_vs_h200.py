"""The offline estimate (fake-tensor trace on this CPU) against the H200-measured profile, same knobs.

    python3 bench/trace_vs_h200.py bench/results/h200-profiles-2026-11-30 OUT.md
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from pathlib import Path

from capacity.memory.measured_profile import load_profile
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs

PHASES = ("weights", "encoder", "decoder", "sampler", "sampler_warmup", "warmup_prefill", "warmup_decode")
MiB = 2**20


def err(est: int, real: int) -> str:
    return "—" if not real else f"{100 * (est - real) / real:+.1f} %"


def main(folder: Path, out: Path) -> None:
    from profilers.api import trace_model

    lines = [f"# Fake-tensor trace (offline, CPU) against the H200 profiles ({time.strftime('%Y-%m-%d')})", ""]
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
    import torch
    import transformers

    lines.append(f"Trace machine: {cpu}, 2 cores, Python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}. "
                 f"Profiles: `{folder}`. Peaks are bytes above each phase's start (MiB = 2^20 B); error = (trace - H200) / H200.")
    lines += ["", "| model | phase | H200 (MiB) | trace (MiB) | error |", "|---|---|---|---|---|"]
    summary = []
    rows: list[dict] = []
    for path in sorted(folder.glob("profile-*.json")):
        measured = load_profile(path)
        k = measured.fingerprint.knobs
        args = ServingArgs(
            max_num_batched_tokens=k["max_num_batched_tokens"], max_num_seqs=k["max_num_seqs"], dtype=k["dtype"], mm_processor_kwargs=k.get("mm_processor_kwargs") or None
        )
        name = measured.fingerprint.model_name
        start = time.perf_counter()
        try:
            _, traced = trace_model(name, args, gpu_name="H200")
        except Exception as exc:  # data-dependent ops stop some traces: the table says so
            lines.append(f"| {name} | — | — | — | trace stopped: {type(exc).__name__} ({' '.join(str(exc).split())[:80]}); plans fall back to formulas |")
            rows.append({"model": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        wall = time.perf_counter() - start
        for phase in PHASES:
            real, est = measured.phase(phase), traced.phase(phase)
            if real is None or est is None:
                continue
            lines.append(f"| {name} | {phase} | {real.peak_above_start_bytes / MiB:,.1f} | {est.peak_above_start_bytes / MiB:,.1f} | "
                         f"{err(est.peak_above_start_bytes, real.peak_above_start_bytes)} |")
        plan_real = plan_for(name, args, "H200", profile=measured)
        plan_est = plan_for(name, args, "H200", profile=traced)
        act_real, act_est = plan_real.memory["activation_peak"].bytes, plan_est.memory["activation_peak"].bytes
        summary.append(f"| {name} | {act_real / MiB:,.1f} | {act_est / MiB:,.1f} | {err(act_est, act_real)} | {plan_real.non_kv_bytes / MiB:,.1f} | "
                       f"{plan_est.non_kv_bytes / MiB:,.1f} | {err(plan_est.non_kv_bytes, plan_real.non_kv_bytes)} | {wall:.1f} |")
        rows.append({"model": name, "activation_peak": [act_real, act_est], "non_kv": [plan_real.non_kv_bytes, plan_est.non_kv_bytes], "trace_wall_s": round(wall, 2),
                     "phases": {p: [measured.phase(p).peak_above_start_bytes, traced.phase(p).peak_above_start_bytes] for p in PHASES if measured.phase(p) and traced.phase(p)}})
    lines += ["", "## Terms the plan uses", "",
              "| model | activation peak H200 (MiB) | trace | error | non-KV H200 (MiB) | trace | error | trace wall (s) |",
              "|---|---|---|---|---|---|---|---|", *summary, ""]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "capacity.cli", "plan", "--model", "openai/whisper-large-v3", "--estimate", "trace", "--json"], check=True, capture_output=True)
    cold = time.perf_counter() - start
    lines.append(f"`capacity plan --model openai/whisper-large-v3 --estimate trace` in a fresh process: {cold:.1f} s (goal: 10 s on 2 cores).")
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"rows": rows, "cold_plan_s": round(cold, 2)}, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
