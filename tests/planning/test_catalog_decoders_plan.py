"""Text-only decoders of the catalog (published config.json files, capacity/source/catalog/README.md): each plans, and its KV
groups and parameter count are the figures worked out by hand below from the config, with vLLM 0.33's rules:

- page of one attention layer = 2 (K and V) x block_size 16 x num_kv_heads x head_dim x 2 B (bf16)
  (vllm/v1/kv_cache_interface.py AttentionSpec.page_size_bytes);
- hybrid layouts: layers of one spec form a bucket; the group size is the smallest bucket (16 here), each bucket is
  split into cdiv(len, group size) groups (vllm/v1/core/kv_cache_planning.py, _get_kv_cache_groups_uniform_page_size).
"""

from __future__ import annotations

import pytest

from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs

KIB = 1024

# id -> [(kind, layers, page bytes, sliding window)], one tuple per KV cache group
GROUPS = {
    # 28 layers, 4 KV heads x 3584 / 28 = 128; use_sliding_window false: all full. 2 x 16 x 4 x 128 x 2 = 32 KiB
    "Qwen/Qwen2.5-7B-Instruct": [("full", 28, 32 * KIB, None)],
    # 36 layers, 8 KV heads x head_dim 128 (Qwen3Config's default; 4096 / 32 too): 2 x 16 x 8 x 128 x 2 = 64 KiB
    "Qwen/Qwen3-8B": [("full", 36, 64 * KIB, None)],
    # 40 layers, 10 KV heads x 5120 / 40 = 128: 2 x 16 x 10 x 128 x 2 = 80 KiB
    "microsoft/phi-4": [("full", 40, 80 * KIB, None)],
    # 24 layers, 32 KV heads (MHA) x 2048 / 32 = 64: 2 x 16 x 32 x 64 x 2 = 128 KiB (partial rotary changes no shape)
    "microsoft/phi-1": [("full", 24, 128 * KIB, None)],
    # 64 layers, layer_types 3 x sliding_attention (window 4096) then full_attention: 48 sliding + 16 full; 8 KV heads x
    # 5120 / 40 = 128: 64 KiB each. Buckets 48 and 16 -> group size 16 -> three sliding groups and one full group.
    "allenai/Olmo-3.1-32B-Instruct": [("sliding_window", 16, 64 * KIB, 4096)] * 3 + [("full", 16, 64 * KIB, None)],
    # the same pattern (LLLG): 48 sliding (4096) + 16 full, 8 KV heads x head_dim 128
    "LGAI-EXAONE/EXAONE-4.0-32B": [("sliding_window", 16, 64 * KIB, 4096)] * 3 + [("full", 16, 64 * KIB, None)],
}


@pytest.mark.parametrize("model", sorted(GROUPS))
def test_text_decoder_kv_groups_are_the_hand_worked_ones(model: str) -> None:
    plan = plan_for(model, ServingArgs(), "H200")
    groups = plan.to_dict()["kv_cache"]["groups"]
    assert [(g["kind"], g["num_layers"], g["page_size_bytes"], g["sliding_window"]) for g in groups] == GROUPS[model]
    assert plan.spec.encoder is None  # text-only: no encoder budget


def test_qwen3_8b_parameters_counted_by_hand() -> None:
    # embed_tokens and lm_head (untied): 2 x 151,936 x 4,096 = 1,244,659,712
    # per layer: q and o 2 x 4,096^2 + k and v 2 x 4,096 x (8 x 128) = 41,943,040; MLP 3 x 4,096 x 12,288 = 150,994,944;
    # q_norm + k_norm 2 x 128 and two RMSNorms 2 x 4,096 = 8,448 -> 192,946,432; x 36 = 6,946,071,552; final norm 4,096
    plan = plan_for("Qwen/Qwen3-8B", ServingArgs(), "H200")
    assert plan.parameter_count == 1_244_659_712 + 6_946_071_552 + 4_096 == 8_190_735_360
    # 151,936 = 2,374 x 64: no vocabulary padding, no biases: bf16 bytes are 2 x the parameters
    assert plan.to_dict()["memory"]["weights"]["bytes"] == 2 * 8_190_735_360


def test_phi_1_parameters_and_vocabulary_padding_by_hand() -> None:
    # embed 50,295 x 2,048 = 103,004,160; lm_head the same plus its bias 50,295
    # per layer: q, k, v, dense 4 x (2,048^2 + 2,048) = 16,785,408; fc1 2,048 x 8,192 + 8,192 = 16,785,408;
    # fc2 8,192 x 2,048 + 2,048 = 16,779,264; one LayerNorm 2 x 2,048 -> 50,354,176; x 24 = 1,208,500,224; final LN 4,096
    plan = plan_for("microsoft/phi-1", ServingArgs(), "H200")
    assert plan.parameter_count == 2 * 103_004_160 + 50_295 + 1_208_500_224 + 4_096 == 1_414_562_935
    # float32 checkpoint served in bf16 (vllm/config/model.py _resolve_auto_dtype downcasts float32); vLLM pads the
    # vocabulary to a multiple of 64: 50,295 -> 50,304, 9 more rows in embed and lm_head (2 x 9 x 2,048) and 9 bias
    assert plan.to_dict()["memory"]["weights"]["bytes"] == 2 * (1_414_562_935 + 2 * 9 * 2_048 + 9)
