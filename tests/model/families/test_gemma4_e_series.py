"""The gemma4 family on Gemma-4's E-series: google/gemma-4-E2B-it (catalog: its published config.json and
processor_config.json) planned as vLLM 0.33 plans it.

Expected values are worked out by hand from the config (hidden 1536, 35 layers, every 5th full, the last 20
KV-shared; 1 KV head of 256 (sliding, window 512) or 512 (full); per-layer inputs 256 wide over a 262,144-token
table; vocab 262,144 tied; audio tower 12 conformer layers, output_proj_dims 1536; processor audio_seq_length 750,
16 kHz) and from vLLM 0.33's gemma4.py / gemma4_mm.py, or come from vLLM's own functions
(bench/results/vllm-kv-reference-2026-11-30 and vllm-weights-reference-2026-11-30, compared case by case in
test_kv_vllm_reference.py and test_weights.py; the weights cases are also named here).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from capacity.cli.app import main
from capacity.errors import BadInput
from capacity.kv.layers import FullAttentionLayer, SharedKVLayer, SlidingWindowLayer
from capacity.model.families.gemma4 import audio_soft_tokens, dummy_audio_samples
from capacity.model.registry import model_spec, spec_from_files
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

ROOT = REPO_ROOT
ENTRY = ROOT / "capacity" / "source" / "catalog" / "models" / "google--gemma-4-E2B-it"
CONFIG: dict[str, Any] = json.loads((ENTRY / "config.json").read_text())
PROCESSOR: dict[str, Any] = json.loads((ENTRY / "processor_config.json").read_text())
WEIGHTS_REFERENCE = json.loads((ROOT / "bench" / "results" / "vllm-weights-reference-2026-11-30" / "reference.json").read_text())


def vllm_weights(tp: int, limit_mm: dict[str, int] | None = None) -> int:
    """rank 0's parameter bytes of vLLM 0.33's own Gemma4ForConditionalGeneration (committed numbers)."""
    return next(c["rank0_parameter_bytes"] for c in WEIGHTS_REFERENCE["cases"] if c["model"] == "google/gemma-4-E2B-it" and c["tp"] == tp and c.get("limit_mm") == limit_mm)


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = main(["plan", "--model", "google/gemma-4-E2B-it", "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_kv_layers_shared_layers_allocate_nothing():
    spec = spec_from_files(CONFIG, "gemma-4-e2b-it", None, PROCESSOR)
    assert len(spec.layers) == 35
    shared = {i: layer for i, layer in enumerate(spec.layers) if isinstance(layer, SharedKVLayer)}
    # num_kv_shared_layers 20: layers 15..34 read the last layer of their kind among 0..14 (full at 4, 9, 14):
    # sliding ones read 13, full ones (19, 24, 29, 34) read 14
    assert list(shared) == list(range(15, 35))
    assert [layer.target_layer for layer in shared.values()] == [14 if i % 5 == 4 else 13 for i in range(15, 35)]
    owners = Counter((type(layer), layer.kv_heads(), layer.head_size) for layer in spec.layers[:15])
    assert owners == {(SlidingWindowLayer, 1, 256): 12, (FullAttentionLayer, 1, 512): 3}
    assert spec.derived_max_model_len == 131_072


def test_kv_groups_on_h200(capsys: pytest.CaptureFixture[str]):
    plan = plan_json(capsys, "--estimate", "formula", "--gpu", "H200")
    groups = plan["kv_cache"]["groups"]
    # sliding page 2 x 16 x 1 x 256 x 2 = 16,384 B, full 2 x 16 x 1 x 512 x 2 = 32,768 B: the sliding block doubles to
    # 32 (unify_kv_cache_spec_page_size); 12 sliding and 3 full layers with KV: group size 3 (12 >= 1.5 x 3), 4 + 1 groups.
    # H200 (139.8 GiB, under 160), `vllm serve`: 8192 batched tokens; sliding cdiv(511 + 2 x 8192, 32) + 1 = 529,
    # full cdiv(131072, 16) = 8192
    assert [(g["kind"], g["num_layers"], g["block_size"], g["page_size_bytes"], g["blocks_per_request_vllm"]) for g in groups] == [
        ("sliding_window", 3, 32, 32_768, 529)
    ] * 4 + [("full", 3, 16, 32_768, 8192)]
    assert plan["kv_cache"]["bytes_per_block"] == 3 * 32_768
    assert plan["kv_cache"]["num_blocks"] == plan["memory"]["kv_cache"]["bytes"] // (3 * 32_768)


def test_tokens_per_item_as_vllm_counts_them():
    spec = spec_from_files(CONFIG, "gemma-4-e2b-it", None, PROCESSOR)
    tokens = {m.name: m.max_tokens_per_item for m in spec.modalities}
    # image: vision_config.default_output_length; video: 32 frames x (70 + 2 + 6); audio: processor audio_seq_length
    assert tokens == {"image": 280, "video": 2496, "audio": 750}
    # vLLM's dummy audio is the feature extractor's fft_length: 2^ceil(log2(20 ms x 16 kHz = 320)) = 512 samples;
    # (512 + 160 - 321) // 160 + 1 = 3 mel frames -> (3 + 2 - 3) // 2 + 1 = 2 -> (2 - 1) // 2 + 1 = 1 embedding
    assert dummy_audio_samples(16_000, False) == 512 and audio_soft_tokens(512, 16_000, 750) == 1
    audio = next(m for m in spec.modalities if m.name == "audio")
    assert (audio.dummy_output_tokens, audio.encoder_positions) == (1, 1)
    # 30 s: (480,000 + 160 - 321) // 160 + 1 = 2999 frames -> 1500 -> 750, the cap exactly
    assert audio_soft_tokens(480_000, 16_000, 750) == 750 and audio_soft_tokens(960_000, 16_000, 750) == 750


def test_profiled_items_and_encoder_cache(capsys: pytest.CaptureFixture[str]):
    plan = plan_json(capsys, "--estimate", "formula", "--gpu", "H200")
    # video (2496) has the most tokens: 8192 // 2496 = 3 dummy videos of 32 frames x 64 soft tokens, 1536 wide
    assert plan["budget"]["modality_with_max_tokens"] == "video" and plan["budget"]["max_items_per_batch"] == {"image": 29, "video": 3, "audio": 10}
    assert plan["memory"]["encoder_cache"]["bytes"] == 3 * 32 * 64 * 1536 * 2 == 18_874_368
    # without videos the audio (750 > 280) is profiled: 8192 // 750 = 10 dummy audios of 1 embedding each
    plan = plan_json(capsys, "--estimate", "formula", "--gpu", "H200", "--limit-mm-per-prompt", "video=0")
    assert plan["budget"]["modality_with_max_tokens"] == "audio" and plan["budget"]["profile_items"] == 10
    assert plan["memory"]["encoder_cache"]["bytes"] == 10 * 1 * 1536 * 2 == 30_720


def test_per_layer_embeddings_buffer_is_a_load_buffer(capsys: pytest.CaptureFixture[str]):
    """vLLM's Gemma4ForConditionalGeneration allocates per_layer_embeddings = zeros(max_num_batched_tokens, 35, 256)
    in bf16 in its constructor (in the load window, whole on every rank): 8192 x 35 x 256 x 2 = 146,800,640 B."""
    at_8192 = plan_json(capsys, "--estimate", "formula", "--gpu", "H200")["memory"]["load_buffers"]
    at_4096 = plan_json(capsys, "--estimate", "formula", "--gpu", "H200", "--max-num-batched-tokens", "4096")["memory"]["load_buffers"]
    assert "per_layer_embeddings 8,192 x 35 x 256 x 2 B" in at_8192["method"]
    # beside it the rotary caches: sliding get_rope(256, default), full get_rope(global_head_dim 512, proportional),
    # whose Gemma4RotaryEmbedding cache is 512 wide (bench/results/vllm-rope-reference-2026-12-01)
    assert "decoder cos_sin_cache 131,072 x 256 x 2 B (default)" in at_8192["method"]
    assert "decoder cos_sin_cache 131,072 x 512 x 2 B (proportional)" in at_8192["method"]
    assert at_8192["bytes"] - at_4096["bytes"] == 4096 * 35 * 256 * 2 == 73_400_320
    tp2 = plan_json(capsys, "--estimate", "formula", "--gpu", "H200", "-tp", "2")["memory"]["load_buffers"]
    assert "per_layer_embeddings 8,192 x 35 x 256 x 2 B" in tp2["method"]


def test_weights_as_vllm_allocates_them():
    pytest.importorskip("torch")
    from capacity.gpu.catalog import gpu_by_name
    from capacity.memory.weights import weights_breakdown
    from capacity.serving.config import ServingArgs, resolve_serving
    from capacity.source.resolve import resolve_model

    source = resolve_model("google/gemma-4-E2B-it")
    spec = model_spec(source)

    def weights(tp: int, **limits: int) -> Any:
        serving = resolve_serving(ServingArgs(dtype="bfloat16", tensor_parallel_size=tp, limit_mm_per_prompt=limits or None), spec, gpu_by_name("H200"))
        return weights_breakdown(spec, source, serving)

    one, two = weights(1), weights(2)
    assert (one.total_bytes, two.total_bytes) == (vllm_weights(1), vllm_weights(2))
    # vocab-parallel: embed_tokens 262,144 x 1536 and embed_tokens_per_layer 262,144 x (35 x 256), bf16, split by TP
    assert one.bytes_of("vocab-parallel") == 262_144 * (1536 + 35 * 256) * 2 == 5_502_926_848
    assert two.bytes_of("vocab-parallel") == 5_502_926_848 // 2
    # the audio tower and embed_audio (vLLM: _mark_tower_model("audio")) are left out at audio=0, and are whole on
    # every rank (replicated): what they weigh equals vLLM's own difference
    assert one.total_bytes - weights(1, audio=0).total_bytes == vllm_weights(1) - vllm_weights(1, {"audio": 0})
    assert weights(2, image=0, video=0, audio=0).total_bytes == vllm_weights(2, {"image": 0, "video": 0, "audio": 0})


def test_default_plan_traces_the_audio_tower(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """The default path (--estimate trace) runs transformers' audio tower (eager attention: it has no SDPA) on the
    dummy audio's 3 mel frames when audio is the profiled modality: 10 outputs of 1 embedding."""
    pytest.importorskip("torch")
    monkeypatch.delenv("CAPACITY_ESTIMATE", raising=False)
    plan = plan_json(capsys, "--gpu", "H200", "--limit-mm-per-prompt", "video=0")
    assert not any("trace stopped" in note for note in plan["notes"]), plan["notes"]
    assert plan["memory"]["activation_peak"]["method"].startswith("fake-tensor trace")
    assert plan["memory"]["encoder_cache"]["bytes"] == 10 * 1 * 1536 * 2


def test_an_audio_processor_it_cannot_read_is_refused():
    with pytest.raises(BadInput, match="audio_seq_length"):
        spec_from_files(CONFIG, "e2b", None, {**PROCESSOR, "audio_seq_length": "long"})
    other = {**PROCESSOR, "feature_extractor": {**PROCESSOR["feature_extractor"], "feature_extractor_type": "Gemma4UnifiedAudioFeatureExtractor"}}
    with pytest.raises(BadInput, match="feature_extractor_type"):
        spec_from_files(CONFIG, "e2b", None, other)


# --- --language-model-only ------------------------------------------------------------------------------------


def test_language_model_only_sets_every_limit_to_zero(capsys: pytest.CaptureFixture[str]):
    """vLLM 0.33's MultiModalConfig.get_limit_per_prompt returns 0 for every modality under --language-model-only
    (whatever --limit-mm-per-prompt says): no encoder budget, and _mark_tower_model leaves both towers out, the
    weights vLLM's own class holds at image=0, video=0, audio=0 (its TP 2 reference case)."""
    plan = plan_json(capsys, "--estimate", "formula", "--gpu", "H200", "-tp", "2", "--language-model-only", "--limit-mm-per-prompt", "image=1")
    assert plan["serving"]["language_model_only"] is True and plan["serving"]["limit_mm_per_prompt"] == {"image": 0, "video": 0, "audio": 0}
    assert plan["budget"]["profile_items"] == 0 and plan["memory"]["encoder_cache"]["bytes"] == 0
    assert plan["memory"]["weights"]["bytes"] == vllm_weights(2, {"image": 0, "video": 0, "audio": 0})
    assert "--language-model-only" in plan["suggested_command"] and "--limit-mm-per-prompt" not in plan["suggested_command"]


def test_language_model_only_read_from_a_vllm_log():
    from capacity.vllm.log_startups import parse_vllm_startups

    serve, = parse_vllm_startups("$ vllm serve google/gemma-4-E2B-it --language-model-only --max-model-len 8192 --enforce-eager\nGPU KV cache size: 1,000 tokens\n")
    assert serve.log_knobs == {"language_model_only": True, "max_model_len": 8192, "enforce_eager": True}
    logged, = parse_vllm_startups(
        "INFO 05-29 01:02:03 [utils.py:253] non-default args: {'model': 'google/gemma-4-E2B-it', 'max_model_len': 8192, 'language_model_only': True}\n"
        "GPU KV cache size: 1,000 tokens\n"
    )
    assert logged.log_knobs == {"max_model_len": 8192, "language_model_only": True}
