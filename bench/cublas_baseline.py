"""What vLLM 0.33's Worker.init_device moves into its baseline snapshot: the cuBLAS / cuBLASLt handles.

vLLM 0.33 (vllm/v1/worker/gpu_worker.py init_device) runs `torch.mm(x, x)` and `linear(x, x, x[0])` on a 16 x 16 tensor
of the model's dtype, then `gc.collect()` and `empty_cache()`, before it takes the snapshot its KV budget is measured
from; earlier releases create these handles at the first matmul of the profile run, inside the non-KV memory. This
measures the device memory that sequence holds after the CUDA context, on the GPU it runs on:

    python bench/cublas_baseline.py --out DIR

writes DIR/cublas-baseline.json: mem_get_info's used memory after the context alone (`torch.zeros(1)`), after vLLM
0.33's handle sequence, and torch's reserved bytes at each point, for bfloat16 and float16 (a fresh process each).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import platform
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import gc, json, sys, torch
dtype = getattr(torch, sys.argv[1])
torch.cuda.set_device(0)
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
free0, total = torch.cuda.mem_get_info()
reserved0 = torch.cuda.memory_reserved()
x = torch.ones(16, 16, dtype=dtype, device="cuda")
torch.mm(x, x)
torch.nn.functional.linear(x, x, x[0])
torch.cuda.synchronize()
del x
gc.collect()
torch.cuda.empty_cache()
free1, _ = torch.cuda.mem_get_info()
reserved1 = torch.cuda.memory_reserved()
print(json.dumps({"dtype": sys.argv[1], "total_bytes": total, "used_after_context_bytes": total - free0,
                  "used_after_handles_bytes": total - free1, "handles_bytes": free0 - free1,
                  "torch_reserved_after_context_bytes": reserved0, "torch_reserved_after_handles_bytes": reserved1}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    runs = []
    for dtype in ("bfloat16", "float16", "bfloat16"):
        done = subprocess.run([sys.executable, "-c", CHILD, dtype], capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    gc.collect()
    result = {
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cublas-baseline.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
