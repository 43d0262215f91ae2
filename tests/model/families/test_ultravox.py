"""Ultravox (model_type ultravox, remote code): planned from vLLM 0.33's ultravox.py and the published processor.

Expected values are worked out by hand from fixie-ai/ultravox-v0_6-llama-3_1-8b's published config.json (the
catalog's): a whisper-large-v3-turbo encoder (d_model 1280, 32 layers, FFN 5120, 128 mel bins, 1500 positions),
stack_factor 8, hidden_size 4096, projector_act swiglu, projector_ln_mid, text_model_id meta-llama/Llama-3.1-8B-Instruct
(the catalog's published config: 32 layers, 8 KV heads x 128, vocabulary 128,256, 131,072 positions, llama3 RoPE).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from capacity.errors import BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.memory.activations import activation_estimate
from capacity.memory.weights import weights_term
from capacity.model.registry import spec_from_files
from capacity.planning.kv_groups import kv_groups_for
from capacity.planning.planner import build_plan
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.serving.encoder_budget import build_budget
from capacity.source.resolve import resolve_model

NAME = "fixie-ai/ultravox-v0_6-llama-3_1-8b"

D, FFN, LAYERS, MELS, POSITIONS = 1280, 5120, 32, 128, 1500
TOWER = (
    (D * MELS * 3 + D) + (D * D * 3 + D) + POSITIONS * D  # conv1, conv2 (stride 2), positions (nn.Embedding)
    + LAYERS * (3 * (D * D + D) + (D * D + D) + 2 * 2 * D + (FFN * D + FFN) + (D * FFN + D))  # q/k/v (+ vLLM's K bias), out, 2 LNs, fc1, fc2
    + 2 * D  # final layer norm
)
PROJECTOR = D * 8 + 4096 * D * 8 + 2048 + 4096 * 2048  # ln_pre RMSNorm(10240), linear_1 10240 -> 4096, SwiGLU -> 2048, ln_mid, linear_2 -> 4096
LLAMA = 16_060_522_496 // 2  # Llama-3.1-8B-Instruct's published index: total_size 16,060,522,496 B of bf16


# `source` and `spec` of NAME: tests/conftest.py (module-scoped)


def test_hand_arithmetic_of_the_parts():
    assert TOWER == 637_009_920
    assert PROJECTOR == 50_343_936
    assert LLAMA == 8_030_261_248


def test_tower_equals_transformers_whisper_encoder_plus_vllms_k_biases(source):
    """An independent count: transformers' WhisperEncoder built on the meta device from audio_config, plus the K bias
    vLLM's fused qkv_proj allocates in every layer (the checkpoint has none)."""
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    audio = dict(source.config["audio_config"])
    audio.pop("model_type", None)
    with torch.device("meta"):
        encoder = WhisperEncoder(WhisperConfig(**audio))
    assert sum(p.numel() for p in encoder.parameters()) + LAYERS * D == TOWER


def test_audio_tokens_follow_vllms_dummy_and_the_processor(spec):
    # dummy: 16 x 30 s x 16 kHz = 7,680,000 samples -> 48,000 mel frames (hop 160) -> 16 chunks of 3000 frames,
    # each ceil(3000 / (encoder_ds_factor 2 x stack_factor 8)) = ceil(187.5) = 188 tokens
    assert [(m.name, m.max_tokens_per_item) for m in spec.modalities] == [("audio", 16 * 188)]
    assert spec.family.name == "ultravox" and spec.vllm_support.status == "native"


def test_text_side_comes_from_text_model_id(spec):
    assert spec.derived_max_model_len == 131_072  # llama3 RoPE: max_position_embeddings already scaled
    serving = resolve_serving(ServingArgs(), spec, gpu_by_name("H200"))
    groups = kv_groups_for(spec, serving, gpu_by_name("H200"))
    assert [(g.kind, g.num_layers, g.page_size_bytes) for g in groups] == [("full", 32, 2 * 16 * 8 * 128 * 2)]


def test_weights_count_every_tensor(source, spec):
    serving = resolve_serving(ServingArgs(), spec, gpu_by_name("H200"))
    term, count, _ = weights_term(spec, source, serving)
    assert count == TOWER + PROJECTOR + LLAMA == 8_717_615_104
    assert term.bytes == count * 2 and term.kind == "exact"  # 128,256 rows: already a multiple of 64
    serving2 = resolve_serving(ServingArgs(tensor_parallel_size=2), spec, gpu_by_name("H200"))
    term2, _, breakdown = weights_term(spec, source, serving2)
    tower_layer = 3 * (D * D + D) // 2 + (D * D // 2 + D) + 4 * D + (FFN * D + FFN) // 2 + (D * FFN // 2 + D)
    tower = (D * MELS * 3 + D) + (D * D * 3 + D) + POSITIONS * D + LAYERS * tower_layer + 2 * D
    h, kv, ffn = 4096, 1024, 14336
    llama_layer = h * h // 2 + 2 * kv * h // 2 + h * h // 2 + 3 * h * ffn // 2 + 2 * h
    llama = 32 * llama_layer + h + 2 * (128_256 // 2) * h
    assert term2.bytes == (tower + PROJECTOR + llama) * 2  # the projector is ReplicatedLinear: whole on both ranks
    assert not breakdown.unclassified


def test_encoder_runs_sixteen_chunks_per_pass(source, spec):
    serving = resolve_serving(ServingArgs(max_num_batched_tokens=8192), spec, gpu_by_name("H200"))
    budget = build_budget(spec, serving)
    assert budget.profile_items == 8192 // 3008 == 2
    plan = build_plan(source, spec, gpu_by_name("H200"), serving)
    assert plan.memory["encoder_cache"].bytes == 2 * 3008 * 4096 * 2
    # two audios of 16 chunks, but _MAX_ENCODER_BATCH_SIZE = 16 chunks of 1500 positions per tower pass:
    # 24,000 positions x (2 x 1280 + max(4 x 1280, 2 x 5120)) x 2 B
    assert activation_estimate(spec, plan.budget, plan.serving).encoder_bytes == 16 * 1500 * (2 * D + 2 * FFN) * 2


def edited(config: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(config)
    out.update(changes)
    return out


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"text_model_id": "nobody/no-such-llm"}, "text_model_id 'nobody/no-such-llm' cannot be resolved"),
        ({"audio_model_id": "openai/whisper-large-v3"}, "audio_model_id"),
        ({"num_projector_layers": 2}, "num_projector_layers"),
        ({"quantization_config": {"quant_method": "awq"}}, "quantization_config"),
    ],
)
def test_what_cannot_be_modelled_is_refused_naming_the_field(source, changes, named):
    with pytest.raises(BadInput, match=named) as info:
        spec_from_files(edited(source.config, **changes), "edited")
    assert "\n" not in str(info.value)


def test_text_config_when_there_is_no_text_model_id(source):
    llama = json.loads(json.dumps(resolve_model("meta-llama/Llama-3.1-8B-Instruct").config))
    spec = spec_from_files(edited(source.config, text_model_id=None, text_config=llama), "inline")
    assert spec.decoder.num_layers == 32 and spec.derived_max_model_len == 131_072
