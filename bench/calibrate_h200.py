"""Calibration on a real GPU: driver-reported memory, CUDA-context cost, and whisper-large-v3's
profile phases (encoder on the budget's items, decoder on max_num_batched_tokens, sampler) measured
with torch.cuda and NVML, next to capacity's estimates for the same knobs.

Run on the GPU machine: PYTHONPATH=. python3 bench/calibrate_h200.py OUT_DIR
"""

from __future__ import annotations

import datetime
import json
import platform
import sys
import time


def main(out_dir: str) -> None:
    import pynvml
    import torch
    import transformers

    from capacity.model.family import family_named
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    nvml_total = pynvml.nvmlDeviceGetMemoryInfo(h).total
    nvml_used_before = pynvml.nvmlDeviceGetMemoryInfo(h).used
    t0 = time.perf_counter()
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    free_ctx, total = torch.cuda.mem_get_info()
    a = torch.randn(16, 16, device="cuda")
    torch.nn.functional.linear(a, a, a[0])  # cuBLAS / cuBLASLt handles, as vLLM's init_device does
    torch.cuda.synchronize()
    free_blas, _ = torch.cuda.mem_get_info()
    result: dict = {
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(0),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "nvml_total_bytes": int(nvml_total),
        "cuda_mem_get_info_total_bytes": int(total),
        "nvml_used_before_init_bytes": int(nvml_used_before),
        "context_bytes_after_init": int(total - free_ctx),
        "context_bytes_after_cublas": int(total - free_blas),
        "cuda_init_seconds": round(time.perf_counter() - t0, 3),
    }

    plan = plan_for("openai/whisper-large-v3", ServingArgs(), "H200")
    items = plan.budget.profile_items
    mnbt = plan.serving.max_num_batched_tokens
    reqs = min(mnbt, plan.serving.max_num_seqs)
    cfg = dict(plan.source.config)
    torch.cuda.reset_peak_memory_stats()
    base_alloc = torch.cuda.memory_allocated()
    model = family_named("whisper").build_module(cfg, device="cuda", dtype="float16", init_weights=False, attn_implementation="sdpa").eval()
    torch.cuda.synchronize()
    weights = torch.cuda.memory_allocated() - base_alloc
    phases = {}
    with torch.inference_mode():
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        feats = torch.randn(items, cfg["num_mel_bins"], 3000, device="cuda", dtype=torch.float16)
        enc = model.model.encoder(feats).last_hidden_state
        torch.cuda.synchronize()
        phases["encoder"] = {"peak_above_start": torch.cuda.max_memory_allocated() - start, "outputs_bytes": enc.numel() * enc.element_size()}
        del feats
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        per_req = mnbt // reqs
        ids = torch.zeros(reqs, per_req, dtype=torch.long, device="cuda")
        # vLLM's profile pass gives cross-attention no encoder K/V; one zero key per request here.
        enc_stub = torch.zeros(reqs, 1, cfg["d_model"], device="cuda", dtype=torch.float16)
        hidden = model.model.decoder(input_ids=ids, encoder_hidden_states=enc_stub, use_cache=False).last_hidden_state
        torch.cuda.synchronize()
        phases["decoder"] = {"peak_above_start": torch.cuda.max_memory_allocated() - start, "tokens": mnbt, "requests": reqs}
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        logits = model.proj_out(hidden[:, -1, :])
        probs = torch.softmax(logits.float(), dim=-1)
        probs2 = torch.softmax(logits.float() / 0.5, dim=-1)
        torch.cuda.synchronize()
        phases["sampler"] = {"peak_above_start": torch.cuda.max_memory_allocated() - start, "rows": reqs}
        del hidden, logits, probs, probs2, enc_stub, ids, enc
    result["whisper_large_v3"] = {
        "knobs": {"max_num_batched_tokens": mnbt, "max_num_seqs": plan.serving.max_num_seqs, "encoder_items": items},
        "weights_bytes_measured": int(weights),
        "weights_bytes_planned": plan.memory["weights"].bytes,
        "encoder_cache_bytes_planned": plan.memory["encoder_cache"].bytes,
        "phases_measured": {k: {kk: int(vv) for kk, vv in v.items()} for k, v in phases.items()},
        "activation_estimate": plan.memory["activation_peak"].method,
        "torch_reserved_bytes": int(torch.cuda.memory_reserved()),
        "nvml_used_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).used),
    }
    with open(f"{out_dir}/calibration.json", "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
