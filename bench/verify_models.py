"""`capacity verify` on the GPU at each plan's max concurrency: profile (vLLM 0.33 defaults for the GPU),
plan from the measurements, then allocate the planned KV pool and run the worst steady state.

    PYTHONPATH=. python3 bench/verify_models.py OUT_DIR [MODEL ...]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# one per family verify runs: BART-style decoders (Whisper, Nemotron-Parse), a decoder-only VLM (Qwen2.5-VL), sliding
# windows (Gemma-3), cross-attention over the pool (Llama-3.2-Vision) and an MoE decoder (Qwen3-30B-A3B, bf16)
DEFAULT_MODELS = [
    "openai/whisper-large-v3",
    "nvidia/NVIDIA-Nemotron-Parse-v1.1",
    "Qwen/Qwen2.5-VL-3B-Instruct",
    "google/gemma-3-4b-it",
    "meta-llama/Llama-3.2-11B-Vision-Instruct",
    "Qwen/Qwen3-30B-A3B",
]


def main() -> None:
    from capacity.serving.config import ServingArgs
    from profilers.api import profile_model
    from profilers.probes import CudaProbe
    from profilers.verify import run_verify

    out_dir = Path(sys.argv[1])
    rows = []
    for model in sys.argv[2:] or DEFAULT_MODELS:
        start = time.perf_counter()
        try:
            plan, profile = profile_model(model, ServingArgs())
            result = run_verify(plan, CudaProbe(), steps=3, reproducer=f"capacity verify --model {model}")
        except Exception as exc:  # one model's refusal or failure is its row; the others still run
            row = {"model": model, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}", "total_wall_s": round(time.perf_counter() - start, 2)}
            print(json.dumps(row), flush=True)
            (out_dir / f"verify-{model.replace('/', '--')}.json").write_text(json.dumps(row, indent=2))
            continue
        row = {
            "model": model,
            "plan": {
                "requested_bytes": plan.requested_memory_bytes,
                "non_kv_bytes": plan.non_kv_bytes,
                "num_blocks": plan.kv.num_blocks,
                "bytes_per_block": plan.kv.bytes_per_block,
                "actual_requests": plan.concurrency.actual_requests,
                "vllm_reported_concurrency": round(plan.concurrency.vllm_reported, 2),
            },
            "verify": result.to_dict(),
            "total_wall_s": round(time.perf_counter() - start, 2),
        }
        rows.append(row)
        v = row["verify"]
        print(json.dumps({"model": model, "passed": v["passed"], "requests": v["requests"], "peak_used": v["peak_used_bytes"],
                          "requested": v["requested_bytes"], "unused_fraction": v["unused_fraction"], "oom": v["oom"], "wall_s": v["wall_s"]}), flush=True)
        (out_dir / f"verify-{model.replace('/', '--')}.json").write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
