"""The rotary cos_sin_cache buffers vLLM 0.33.0's own `get_rope` builds for the cases in CASES (one per model).

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_rope_reference.py \
        bench/results/vllm-rope-reference-2026-12-01/reference.json

For each case the script reads the config with vLLM's own `get_config` (which normalises rope_scaling into
rope_parameters as vLLM's model classes see it), sets the default dtype to the case's (the model dtype
`initialize_model` sets while the model is built), and calls `get_rope` with the arguments the model class passes:
the decoder's head size (DeepSeek MLA: qk_rope_head_dim, is_neox_style False), max_position_embeddings and the
rope parameters (one call per distinct parameter set where transformers keys them by layer type); the
Qwen2.5-VL vision tower's `get_rope(head_dim, max_position=8192, partial_rotary_factor 0.5)`. It records the class
vLLM picked and the shape, dtype and bytes of each distinct module's cos_sin_cache (get_rope's _ROPE_DICT returns
the same module for a repeated key: layers share one buffer). tests/memory/test_load_buffers.py compares
capacity.memory.load_buffers with these numbers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "capacity" / "source" / "catalog" / "models"
LOG_CONFIGS = ROOT / "bench" / "vllm_logs" / "configs"

# (case name, config folder, dtype)
CASES = (
    ("llama-3.1-8b", CATALOG / "meta-llama--Llama-3.1-8B-Instruct", "bfloat16"),
    ("llama-3.2-3b", LOG_CONFIGS / "meta-llama--Llama-3.2-3B-Instruct", "bfloat16"),
    ("qwen2.5-0.5b", LOG_CONFIGS / "Qwen--Qwen2.5-0.5B-Instruct", "bfloat16"),
    ("qwen2.5-1.5b-fp16", LOG_CONFIGS / "Qwen--Qwen2.5-1.5B-Instruct", "float16"),
    ("qwen2.5-7b", CATALOG / "Qwen--Qwen2.5-7B-Instruct", "bfloat16"),
    ("qwen3-8b", CATALOG / "Qwen--Qwen3-8B", "bfloat16"),
    ("qwen3-14b", LOG_CONFIGS / "Qwen--Qwen3-14B", "bfloat16"),
    ("qwen2.5-vl-7b", CATALOG / "Qwen--Qwen2.5-VL-7B-Instruct", "bfloat16"),
    ("olmocr-2-7b", CATALOG / "allenai--olmOCR-2-7B-1025", "bfloat16"),
    ("phi-4", CATALOG / "microsoft--phi-4", "bfloat16"),
    ("deepseek-v3", CATALOG / "deepseek-ai--DeepSeek-V3", "bfloat16"),
    # Gemma-4: Gemma4DecoderLayer passes per_layer_config[i].head_dim (global_head_dim on full layers) to get_rope
    ("gemma-4-26b-a4b", CATALOG / "google--gemma-4-26B-A4B", "bfloat16"),
    ("gemma-4-e2b-it", CATALOG / "google--gemma-4-E2B-it", "bfloat16"),
    # Gemma-3: legacy configs (rope_scaling + defaults) normalised by transformers into rope_parameters per layer type:
    # full layers linear x 8 over theta 1e6, sliding layers default over 1e4 (Gemma3Attention: rope_parameters[layer_type])
    ("gemma-3-4b-it", CATALOG / "google--gemma-3-4b-it", "bfloat16"),
    ("gemma-3-27b-it", CATALOG / "google--gemma-3-27b-it", "bfloat16"),
)


def _rope_sets(text) -> list[dict | None]:
    params = getattr(text, "rope_parameters", None)
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        out: list[dict | None] = []
        for entry in params.values():
            if entry not in out:
                out.append(entry)
        return out
    return [params]


def case_caches(folder: Path, dtype_name: str) -> list[dict]:
    import torch
    from vllm.model_executor.layers.rotary_embedding import _ROPE_DICT, get_rope
    from vllm.transformers_utils.config import get_config

    config = get_config(str(folder), trust_remote_code=False)
    text = config.get_text_config()
    torch.set_default_dtype(getattr(torch, dtype_name))
    _ROPE_DICT.clear()
    modules = []
    mla = getattr(text, "qk_rope_head_dim", None)
    if getattr(text, "model_type", "") == "gemma4_text":  # Gemma-4: each layer's head_dim and its layer type's rope parameters, as Gemma4Attention calls get_rope
        calls = [(text.per_layer_config[i].head_dim, text.rope_parameters[kind]) for i, kind in enumerate(text.layer_types)]
    else:
        head = mla or getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        calls = [(head, rope) for rope in _rope_sets(text)]
    for layer_head, rope in calls:
        for _ in range(2):  # a second layer's call returns the cached module
            module = get_rope(layer_head, max_position=text.max_position_embeddings, rope_parameters=rope, is_neox_style=not mla)
            if all(module is not m for _, m in modules):
                modules.append(("decoder", module))
    if getattr(config, "model_type", "") in ("qwen2_vl", "qwen2_5_vl"):
        vision = config.vision_config
        width = getattr(vision, "hidden_size", None) or vision.embed_dim
        module = get_rope(head_size=width // vision.num_heads, max_position=8192, is_neox_style=True, rope_parameters={"partial_rotary_factor": 0.5})
        modules.append(("vision tower", module))
    out = []
    for owner, module in modules:
        cache = module.cos_sin_cache
        out.append(
            {
                "owner": owner,
                "class": type(module).__name__,
                "shape": list(cache.shape),
                "dtype": str(cache.dtype).replace("torch.", ""),
                "bytes": cache.numel() * cache.element_size(),
            }
        )
    return out


def main() -> None:
    from vllm import __version__
    from vllm.config import VllmConfig, set_current_vllm_config

    out_path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "bench" / "results" / "vllm-rope-reference-2026-12-01" / "reference.json"
    result = {"vllm_version": __version__, "cases": {}}
    with set_current_vllm_config(VllmConfig()):
        for name, folder, dtype in CASES:
            caches = case_caches(folder, dtype)
            result["cases"][name] = {
                "config": str(folder.relative_to(ROOT)),
                "dtype": dtype,
                "caches": caches,
                "total_bytes": sum(c["bytes"] for c in caches),
            }
            print(name, [(c["class"], c["shape"], c["dtype"]) for c in caches], result["cases"][name]["total_bytes"])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
