"""The V1 model runner's dummy sampler run on the PyTorch sort path, measured on the GPU (bytes per logit).

The 26 B per logit above the model-dtype logits that the sort path's later stages hold was measured by running the
wheels' own Sampler on the CPU (bench/vllm_sampler_reference.py). On CUDA, `torch.sort` of a (rows, vocab) tensor keeps device
temporaries the CPU sort does not (the index sequence it sorts along, the radix sort's scratch), and the CUDA
allocator's peak is what vLLM's profile reads. This runs the same torch operations as vLLM 0.9.2-0.15.1's
`_dummy_sampler_run` on the sort path (Sampler.forward: fp32 copy, temperature in place; `apply_top_k_top_p`: sort,
top-k mask by gather, softmax, cumsum into the softmax, top-p mask, scatter back; softmax; exponential race, argmax;
read in the 0.10.2 wheel, vllm/v1/sample/sampler.py and ops/topk_topp_sampler.py) on the GPU at hand, and records
`torch.cuda.max_memory_allocated()` above the logits, per logit; and the same around the sort alone.

    python bench/sampler_sort_gpu.py OUT_DIR
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path


def _sampler(logits, rows: int, vocab: int, after_sort) -> None:  # noqa: ANN001
    """Sampler.forward on _dummy_sampler_run's metadata (temperature 0.5, top_k vocab - 1, top_p 0.9), sort path."""
    import torch

    dev = logits.device
    temperature = torch.full((rows,), 0.5, device=dev)
    top_k = torch.full((rows,), vocab - 1, device=dev, dtype=torch.int32)
    top_p = torch.full((rows,), 0.9, device=dev)
    x = logits.to(torch.float32)
    x.div_(temperature.unsqueeze(1))
    s, idx = x.sort(dim=-1, descending=False)
    after_sort()
    cut = s.gather(1, (s.size(1) - top_k.to(torch.long)).unsqueeze(1))
    s.masked_fill_(s < cut, -float("inf"))
    probs = s.softmax(dim=-1)
    torch.cumsum(probs, dim=-1, out=probs)
    mask = probs <= 1 - top_p.unsqueeze(1)
    mask[:, -1] = False
    s.masked_fill_(mask, -float("inf"))
    x = s.scatter(dim=-1, index=idx, src=s)
    del s, idx, probs, mask, cut
    probs = x.softmax(dim=-1, dtype=torch.float32)
    q = torch.empty_like(probs).exponential_()
    probs.div_(q).argmax(dim=-1).view(-1)


def sampler_peak(rows: int, vocab: int) -> dict[str, object]:
    import torch

    logits = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    at_sort: list[int] = []
    with torch.inference_mode():
        _sampler(logits, rows, vocab, lambda: at_sort.append(torch.cuda.max_memory_allocated() - base))
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    n = rows * vocab
    return {
        "rows": rows,
        "vocab": vocab,
        "peak_above_logits_bytes": peak,
        "bytes_per_logit": round(peak / n, 3),
        "sort_stage_peak_bytes": at_sort[0],
        "sort_stage_bytes_per_logit": round(at_sort[0] / n, 3),
    }


def cpu_peak(rows: int, vocab: int) -> float:
    """The same operations on the CPU under capacity's CpuProbe (live tensor bytes), per logit: the check that they are
    the wheels' (bench/results/vllm-sampler-reference-2026-12-01: 26 B)."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from profilers.probes import CpuProbe

    logits = torch.randn(rows, vocab, dtype=torch.bfloat16)
    probe = CpuProbe()
    with torch.inference_mode(), probe.tracking():
        _sampler(logits, rows, vocab, lambda: None)
    return probe.peak() / (rows * vocab)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--cpu":
        print(f"CPU: {cpu_peak(256, 32000):.3f} B per logit")
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        rows, vocab = map(int, sys.argv[2].split("x"))
        print("RESULT " + json.dumps(sampler_peak(rows, vocab)))
        return
    import torch

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for shape in ("1024x151936", "256x151936", "256x128256", "1024x128256", "256x51866", "1024x262208"):
        proc = subprocess.run([sys.executable, __file__, "--child", shape], capture_output=True, text=True, timeout=300)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        results.append(json.loads(line[7:]) if line else {"shape": shape, "error": proc.stderr[-1500:]})
        print(json.dumps(results[-1]), flush=True)
    doc = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "results": results,
    }
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
