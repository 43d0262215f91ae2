"""What a cold torch.compile (Inductor) costs in device memory on the first forward, against a warm one.

vLLM compiles its decoder inside the profile run that sizes the KV cache (capacity/memory/compile_cache.py); the public
cold/warm pairs are consumer GPUs (bench/compile_cache/EVIDENCE.md). This runs the same mechanism on the GPU at hand
with torch's Inductor and transformers' decoder (not vLLM: its piecewise split, custom ops and AOT export are not
here), with vLLM 0.33's Inductor options (combo_kernels and benchmark_combo_kernel on, max-autotune off for a
dynamic range: vllm/config/compilation.py, compilation/compiler_interface.py set_inductor_config).

Each case runs in a fresh process: `cold` with an empty TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR, then `warm` with
the cache `cold` filled, then `eager` (no compile). Each measures, around one forward of T tokens under
inference_mode (use_cache=False), what vLLM's memory_profiling reads: the torch peak above what stays allocated
(transient_peak_headroom), and the drop in free memory (mem_get_info) after empty_cache, split into torch's reserve
and the rest (non-torch growth: kernel modules, their local-memory reservation).

    python bench/compile_cold_warm.py OUT_DIR [--config FOLDER] [--layers N] [--tokens 2048 8192]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = {"vllm": {"combo_kernels": True, "benchmark_combo_kernel": True}, "none": {}}  # vLLM 0.33's defaults on torch >= 2.9; Inductor's


def child(config_dir: str, layers: int, tokens: int, mode: str, options: str, embeds: bool) -> dict[str, object]:
    import gc

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(config_dir)
    config.num_hidden_layers = layers
    if hasattr(config, "layer_types") and config.layer_types is not None:
        config.layer_types = config.layer_types[:layers]
    device = torch.device("cuda")
    with device:
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    decoder = model.model
    ids = torch.randint(0, config.vocab_size, (1, tokens), device=device)
    # --inputs-embeds: the embeddings are looked up outside the compiled graph, as vLLM does for a multimodal model
    with torch.inference_mode():
        inputs = {"inputs_embeds": decoder.embed_tokens(ids)} if embeds else {"input_ids": ids}
    run = decoder
    if mode != "eager":
        torch._dynamo.mark_dynamic(next(iter(inputs.values())), 1)
        run = torch.compile(decoder, dynamic=True, options=OPTIONS[options])
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    free_before = torch.cuda.mem_get_info()[0]
    allocated_before = torch.cuda.memory_allocated()
    reserved_before = torch.cuda.memory_reserved()
    started = time.perf_counter()
    with torch.inference_mode():
        hidden = run(**inputs, use_cache=False).last_hidden_state
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated()
    del hidden
    gc.collect()
    torch.cuda.synchronize()
    allocated_after = torch.cuda.memory_allocated()
    torch.cuda.empty_cache()
    free_after = torch.cuda.mem_get_info()[0]
    reserved_after = torch.cuda.memory_reserved()
    consumed = free_before - free_after
    return {
        "mode": mode,
        "options": options,
        "inputs_embeds": embeds,
        "tokens": tokens,
        "layers": layers,
        "seconds": round(seconds, 2),
        "torch_peak_above_before": peak - allocated_before,
        "transient_peak_headroom": peak - allocated_after,
        "allocated_growth": allocated_after - allocated_before,
        "consumed": consumed,  # mem_get_info drop after empty_cache
        "reserve_growth": reserved_after - reserved_before,
        "non_torch_growth": consumed - (reserved_after - reserved_before),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--config", default=str(ROOT / "bench" / "vllm_logs" / "configs" / "Qwen--Qwen3-8B"))
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--tokens", type=int, nargs="+", default=[2048, 8192])
    ap.add_argument("--options", choices=sorted(OPTIONS), default="vllm", help="Inductor options: vLLM 0.33's, or Inductor's defaults")
    ap.add_argument("--inputs-embeds", action="store_true", help="feed embeddings looked up outside the compiled graph")
    ap.add_argument("--child", nargs=2, metavar=("TOKENS", "MODE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.config, a.layers, int(a.child[0]), a.child[1], a.options, a.inputs_embeds)))
        return
    a.out.mkdir(parents=True, exist_ok=True)
    import torch

    results = []
    for tokens in a.tokens:
        cache = tempfile.mkdtemp(prefix=f"inductor-{tokens}-")
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": os.path.join(cache, "triton"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}
        for mode in ("cold", "warm", "eager"):
            cmd = [sys.executable, __file__, str(a.out), "--config", a.config, "--layers", str(a.layers), "--options", a.options, *(["--inputs-embeds"] if a.inputs_embeds else []), "--child", str(tokens), mode]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                results.append({"mode": mode, "tokens": tokens, "error": done.stderr[-2000:]})
            else:
                results.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    doc = {
        "what": __doc__.splitlines()[0],
        "config": a.config,
        "layers": a.layers,
        "inductor_options": OPTIONS[a.options],
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "results": results,
    }
    (a.out / "compile-cold-warm.json").write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
