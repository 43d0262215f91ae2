"""Multimodal catalog entries added from published files (capacity/source/catalog/README.md): tokens per item, KV groups and
weights worked out by hand from their configs with vLLM 0.33's rules (the vLLM function in each comment)."""

from __future__ import annotations

import pytest

from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs

KIB = 1024


def planned(model: str) -> dict:
    return plan_for(model, ServingArgs(), "H200").to_dict()


def groups(plan: dict) -> list[tuple[str, int, int]]:
    return [(g["kind"], g["num_layers"], g["page_size_bytes"]) for g in plan["kv_cache"]["groups"]]


@pytest.mark.parametrize("model", ["Qwen/Qwen3-VL-4B-Instruct", "Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3.5-0.8B", "Qwen/Qwen3.5-27B"])
def test_qwen3_vl_processor_image_tokens(model: str) -> None:
    # qwen2_vl.py get_image_size_with_most_features (Qwen3-VL and Qwen3.5 inherit it): max_pixels = the published
    # preprocessor's size.longest_edge 16,777,216; unit patch 16 x merge 2 = 32; 16,777,216 // 32^2 = 16,384 merged
    # patches = 128 x 128 (a 4096 x 4096 image). The video (qwen3_vl.py get_max_video_tokens), from the published
    # video_preprocessor_config.json (size.longest_edge 25,165,824, shortest_edge 4,096, temporal_patch_size 2):
    # max_pixels 25,165,824 // 2 = 12,582,912 -> 12,582,912 // 32^2 = 12,288 cells; isqrt(12,288) = 110, and the
    # largest divisor of 12,288 = 2^12 x 3 at most 110 is 96: 96 x 128 cells = a 3072 x 4096 frame (ratio 1.33 <= 200).
    # Video smart_resize of 2 frames at 3072 x 4096, factor 32: 2 x 3072 x 4096 = 25,165,824, not above longest_edge,
    # so the size stays; grid 2 frames // temporal 2 = 1 x (3072 // 16 = 192) x (4096 // 16 = 256) = 49,152 patches
    # // 2^2 = 12,288 tokens, fewer than the image's: the image sets the encoder budget and is the profiled item.
    plan = planned(model)
    assert plan["budget"]["max_tokens_per_item"] == {"image": 16_384, "video": 12_288}
    assert plan["budget"]["modality_with_max_tokens"] == "image"
    assert plan["budget"]["encoder_cache_size"] == 16_384


def test_qwen3_vl_4b_kv_page() -> None:
    # text_config: 36 layers, 8 KV heads x head_dim 128: 2 x 16 x 8 x 128 x 2 B = 64 KiB, one full group
    assert groups(planned("Qwen/Qwen3-VL-4B-Instruct")) == [("full", 36, 64 * KIB)]


def test_qwen3_vl_8b_kv_page_and_weights_against_the_published_index() -> None:
    plan = planned("Qwen/Qwen3-VL-8B-Instruct")
    # text_config: 36 layers, 8 KV heads x head_dim 128: 2 x 16 x 8 x 128 x 2 B = 64 KiB, one full group
    assert groups(plan) == [("full", 36, 64 * KIB)]
    # the published index's metadata.total_size, 17,534,247,392 B (bf16, tie_word_embeddings false: lm_head stored;
    # vocabulary 151,936 = 2,374 x 64, no padding), is what vLLM loads
    assert plan["memory"]["weights"]["bytes"] == 17_534_247_392


def test_qwen2_5_vl_3b_reads_its_published_preprocessor() -> None:
    plan = planned("Qwen/Qwen2.5-VL-3B-Instruct")
    # qwen2_vl.py get_image_size_with_most_features: the published max_pixels 12,845,056 // (patch 14 x merge 2)^2 =
    # 16,384 merged patches per image
    assert plan["budget"]["max_tokens_per_item"]["image"] == 16_384
    # text: 36 layers, 2 KV heads x 128: 2 x 16 x 2 x 128 x 2 B = 16 KiB
    assert groups(plan) == [("full", 36, 16 * KIB)]
    # zhanggaojian/Qwen2.5-VL-3B-LLMQ_Samples' copy of the published index: metadata.total_size 7,509,245,952 B (bf16,
    # tie_word_embeddings true: the embedding is stored once, as vLLM holds it)
    assert plan["memory"]["weights"]["bytes"] == 7_509_245_952


def test_qwen3_5_0_8b_hybrid_kv_groups() -> None:
    # 24 layers, full_attention_interval 4: 18 Gated DeltaNet + 6 full attention -> group size 6: three state groups
    # and one attention group. GDN state per layer: conv (2 x 16 key heads x 128 + 16 value heads x 128) x (4 - 1) x 2 B
    # = 36,864, recurrent 16 x 128 x 128 x 4 B (float32: the config's mamba_ssm_dtype, vllm/model_executor/models/
    # config.py sets mamba_ssm_cache_dtype from it) = 1,048,576 -> 1,085,440 B. Attention per token: 2 KV heads x
    # (256 + 256) x 2 B = 2,048; on the H200 the block is 64 x cdiv(1,085,440, 64 x 2,048) = 576 tokens -> 1,179,648 B.
    assert groups(planned("Qwen/Qwen3.5-0.8B")) == [("mamba", 6, 576 * 2048)] * 3 + [("full", 6, 576 * 2048)]


def test_qwen3_5_27b_hybrid_kv_groups() -> None:
    # text_config: 64 layers, full_attention_interval 4: 48 Gated DeltaNet + 16 full attention -> group size 16: three
    # state groups and one attention group. GDN state per layer: conv (2 x 16 key heads x 128 + 48 value heads x 128 =
    # 10,240 channels) x (kernel 4 - 1) x 2 B = 61,440, recurrent 48 x 128 x 128 x 4 B (mamba_ssm_dtype float32) =
    # 3,145,728 -> 3,207,168 B. Attention per token: 4 KV heads x (256 + 256) x 2 B = 4,096; on the H200 the block is
    # 64 x cdiv(3,207,168, 64 x 4,096) = 64 x 13 = 832 tokens -> 832 x 4,096 = 3,407,872 B, above the state's page.
    assert groups(planned("Qwen/Qwen3.5-27B")) == [("mamba", 16, 832 * 4096)] * 3 + [("full", 16, 832 * 4096)]


def test_qwen2_audio_tokens_page_and_weights_against_the_published_index() -> None:
    plan = planned("Qwen/Qwen2-Audio-7B-Instruct")
    # qwen2_audio.py get_mm_max_tokens_per_item: 30 s x 16 kHz // hop 160 = 3000 mel frames -> (3000 - 1) // 2 + 1 = 1500
    # encoder positions -> pooled (1500 - 2) // 2 + 1 = 750
    assert plan["budget"]["max_tokens_per_item"] == {"audio": 750}
    # text_config leaves the shape to Qwen2Config's defaults: 32 layers, 32 KV heads x 4096 / 32 = 128: 256 KiB pages
    assert groups(plan) == [("full", 32, 256 * KIB)]
    # Qwen2Config's default tie_word_embeddings is False: vLLM (llama.py / qwen2.py) builds lm_head apart from
    # embed_tokens. The published index's metadata.total_size is 16,794,189,824 B; 156,032 = 2,438 x 64 rows: no padding.
    assert plan["memory"]["weights"]["bytes"] == 16_794_189_824


def test_voxtral_keeps_its_untied_lm_head() -> None:
    # Voxtral's text_config (llama) omits tie_word_embeddings; LlamaConfig's default is False, so vLLM holds a 131,072 x
    # 3,072 lm_head beside embed_tokens (voxtral.py builds its language model from text_config). 131,072 = 2,048 x 64:
    # no vocabulary padding, so the bf16 weights are exactly 2 B per parameter of the meta build.
    plan = plan_for("mistralai/Voxtral-Mini-3B-2507", ServingArgs(), "H200")
    assert plan.to_dict()["memory"]["weights"]["bytes"] == 2 * plan.parameter_count


def test_tie_default_is_the_config_class_default() -> None:
    from capacity.memory.weights import tied_by_default

    assert tied_by_default("qwen2") is False  # Qwen2Config(tie_word_embeddings=False)
    assert tied_by_default("gemma3_text") is True  # Gemma3TextConfig ties
    assert tied_by_default("no-such-model-type") is True  # remote code: transformers 4's PretrainedConfig default
