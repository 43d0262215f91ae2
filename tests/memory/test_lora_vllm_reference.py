"""LoRA's buffers per wrapped module equal what vLLM 0.33.0's own LoRAModelManager allocates.

The reference (bench/results/vllm-lora-reference-2026-12-01/reference.json) was written by bench/vllm_lora_reference.py:
vLLM's loader built each model on the meta device and create_lora_manager wrapped it, at TP 1 and TP 2 (gloo); it
holds rank 0's bytes per module kind, numel x element size. Each of those tensors is a multiple of 512 B here, so
capacity's allocator rounding changes none of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.memory.lora import embedding_bytes, layer_bytes, lm_head_bytes, lora_shapes
from capacity.model.registry import load_model
from capacity.serving.lora import LoraConfig
from capacity.vllm.lora_rules import LORA_RULES

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = json.loads((ROOT / "bench" / "results" / "vllm-lora-reference-2026-12-01" / "reference.json").read_text())
LAYER_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
MODEL = {
    "capacity/source/catalog/models/Qwen--Qwen3-8B": "Qwen/Qwen3-8B",
    "capacity/source/catalog/models/meta-llama--Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B-Instruct",
}


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=lambda c: c["name"])
def test_lora_buffers_per_module_equal_vllms_own_allocation(case):
    model = MODEL.get(case["config"], str(ROOT / case["config"]))
    source, spec = load_model(model)
    shapes = lora_shapes(spec, source, LORA_RULES["0.33"], "0.33")
    lora = LoraConfig(
        max_loras=case["max_loras"],
        max_lora_rank=case["max_lora_rank"],
        max_cpu_loras=case["max_loras"],
        lora_dtype=case["lora_dtype"].removeprefix("torch."),
        fully_sharded_loras=case.get("fully_sharded", False),
    )
    got = case["bytes_by_module"]
    layers = case["modules_by_kind"]["qkv_proj"]
    assert layers == shapes.num_layers
    assert layer_bytes(shapes, lora, case["tp"]) * layers == sum(got[m] for m in LAYER_MODULES)
    assert shapes.embeddings == ("embed_tokens" in got)
    if shapes.embeddings:
        assert embedding_bytes(shapes, lora) == got["embed_tokens"]
        assert lm_head_bytes(shapes, lora, case["tp"]) == got["lm_head"]
