"""Tensor-parallel faults on real GPUs: each is one result, no hang, and every rank's memory is given back.

    python bench/tp_faults.py --model openai/whisper-large-v3 --out faults.json

Cases (TP 2, NCCL):
- oom:    rank 1 may use only its weights + 64 MiB (torch's per-process memory fraction): it runs out of memory in
          the encoder phase while rank 0 waits in a collective; the run is one out-of-memory result;
- died:   rank 1 exits (os._exit) after loading its weights: one error naming rank 1;
- hang:   rank 1 stops answering after its weights: rank 0's collective times out (30 s), the run is one error;
- ctrl_c: `capacity profile -tp 2` gets SIGINT 12 s after its start (while its ranks load and run): every rank stops.
After each case NVML reads both GPUs' used memory and the processes still on them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any


def gpu_state() -> list[dict[str, Any]]:
    import pynvml

    pynvml.nvmlInit()
    out = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        out.append({"gpu": i, "used_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).used), "processes": len(pynvml.nvmlDeviceGetComputeRunningProcesses(h))})
    return out


def case(name: str, job: Any, timeout_s: float) -> dict[str, Any]:
    from capacity.errors import CapacityError
    from profilers.tensor_parallel import run_tensor_parallel

    start = time.monotonic()
    try:
        profile = run_tensor_parallel(job, timeout_s=timeout_s)
        result = {"outcome": "profile", "oom": None if profile.oom is None else vars(profile.oom), "ranks_reported": [r.rank for r in profile.ranks], "notes": list(profile.notes)}
    except CapacityError as exc:
        result = {"outcome": type(exc).__name__, "exit_code": exc.exit_code, "message": str(exc)}
    time.sleep(2)
    return {"case": name, "wall_s": round(time.monotonic() - start, 1), **result, "gpus_after": gpu_state()}


def ctrl_c(model: str, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-c", "import sys; from capacity.cli.app import main; sys.argv[0] = 'capacity'; sys.exit(main())", "profile", "--model", model, "-tp", "2", "-o", str(out / "ctrl-c.json")]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(12)
    during = gpu_state()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        err, code = "did not stop within 60 s", None
    time.sleep(2)
    return {
        "case": "ctrl_c",
        "wall_s": round(time.monotonic() - start, 1),
        "exit_code": code,
        "stderr_tail": err.strip().splitlines()[-2:] if err else [],
        "gpus_during": during,
        "gpus_after": gpu_state(),
        "profile_written": (out / "ctrl-c.json").exists(),
    }


def main() -> None:
    from capacity.gpu.catalog import gpu_by_name
    from capacity.gpu.detect import detect_local_gpu
    from capacity.model.registry import model_spec
    from capacity.serving.config import ServingArgs, resolve_serving
    from capacity.serving.encoder_budget import build_budget
    from capacity.source.resolve import resolve_model
    from profilers.tensor_parallel import free_port, tensor_parallel_job

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="openai/whisper-large-v3")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cases", default="oom,died,hang,ctrl_c")
    a = ap.parse_args()
    source = resolve_model(a.model)
    spec = model_spec(source)
    gpu = detect_local_gpu(0) or gpu_by_name("H200")
    serving = resolve_serving(ServingArgs(tensor_parallel_size=2), spec, gpu)
    budget = build_budget(spec, serving, enable_cache=False)
    base = tensor_parallel_job(source, spec, serving, budget, gpu, backend="nccl", collective_timeout_s=30, capture_graphs=False, warmup=False)
    from capacity.memory.weights import weights_term

    weights = weights_term(spec, source, serving)[0].bytes
    results: list[dict[str, Any]] = [{"case": "before", "gpus": gpu_state(), "pid": os.getpid()}]
    wanted = a.cases.split(",")
    if "oom" in wanted:
        limit = weights + 64 * 2**20
        results.append({**case("oom", replace(base, rank_memory_limit_bytes=((1, limit),)), 300), "rank1_limit_bytes": limit})
    if "died" in wanted:
        results.append(case("died", replace(base, port=free_port(), fail_rank=1), 300))
    if "hang" in wanted:
        results.append(case("hang", replace(base, port=free_port(), hang_rank=1), 120))
    if "ctrl_c" in wanted:
        results.append(ctrl_c(a.model, a.out))
    (a.out / "faults.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
