"""Multimodal models' pipeline stages as vLLM 0.33 builds them (capacity/planning/stage_towers.py), default path.

vLLM 0.33 (Model Runner V2) builds every module under `_mark_tower_model` on the first stage only (interfaces.py:
`use_v2_model_runner and not get_pp_group().is_first_rank` -> StageMissingLayer), profiles the encoder cache on the
first stage only (v1/worker/gpu/model_runner.py profile_run: `supports_mm_inputs and is_first_pp_rank`), and splits
the language model's layers by get_pp_indices over the text config's layers.

Qwen2.5-VL-7B-Instruct (catalog config; bf16, TP 1, L4): text hidden 3584, 28 layers, FFN 18944, 28 query / 4 KV heads
of 128, vocab 152,064 (a multiple of 64), untied:
- a decoder layer: q 3584^2 + 3584 bias, k and v 2 x (512 x 3584 + 512), o 3584^2, gate/up/down 3 x 18944 x 3584,
  2 norms x 3584 = 233,057,792 params = 466,115,584 B; 14 layers (28 / 2) = 6,525,618,176 B;
- the embedding = the LM head = 152,064 x 3584 x 2 B = 1,089,994,752 B; the final norm 7,168 B;
- the vision tower (`visual`, depth 32, hidden 1280, FFN 3420, out 3584, patch 14, temporal patch 2, merge 2):
  patch_embed 3 x 2 x 14 x 14 x 1280 = 1,505,280; a block: 2 RMSNorms 2 x 1280, qkv 1280 x 3840 + 3840,
  proj 1280^2 + 1280, gate/up 2 x (1280 x 3420 + 3420), down 3420 x 1280 + 1280 = 19,702,200, x 32 = 630,470,400;
  merger: ln_q 1280, 5120^2 + 5120, 5120 x 3584 + 3584 = 44,574,464; total 676,550,144 params = 1,353,100,288 B;
- stage 0: embedding + 14 layers + tower = 8,968,713,216 B; stage 1: 14 layers + norm + LM head = 7,615,620,096 B;
- stage 1 receives hidden_states and residual (qwen2.py's factory, the Qwen2ForCausalLM language model):
  2 x 2048 tokens x 3584 x 2 B = 29,360,128 B.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT


def _plan(tmp_path: Path, *argv: str, code: int = 0) -> dict:
    out = tmp_path / "plan.json"
    assert main(["plan", *argv, "--json", str(out)]) == code
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def qwen25_vl_7b_l4_pp2(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _plan(tmp_path_factory.mktemp("qwen25vl"), "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "L4", "-pp", "2", code=1)  # does not fit


def test_the_vision_tower_is_built_on_the_first_stage_only(qwen25_vl_7b_l4_pp2: dict) -> None:
    first, last = qwen25_vl_7b_l4_pp2["stages"]
    assert [first["layers"], last["layers"]] == [[0, 14], [14, 28]]
    assert first["memory"]["weights"]["bytes"] == 1_089_994_752 + 14 * 466_115_584 + 1_353_100_288 == 8_968_713_216
    assert last["memory"]["weights"]["bytes"] == 14 * 466_115_584 + 7_168 + 1_089_994_752 == 7_615_620_096
    assert last["memory"]["pp_intermediate"]["bytes"] == 2 * 2048 * 3584 * 2 and "Qwen2ForCausalLM" in last["memory"]["pp_intermediate"]["method"]


def test_the_encoder_and_its_cache_are_charged_to_the_first_stage_and_it_limits(qwen25_vl_7b_l4_pp2: dict) -> None:
    first, last = qwen25_vl_7b_l4_pp2["stages"]
    assert first["profile_phases"][0] == "encoder" and "encoder" not in last["profile_phases"]
    # the whole model's peak is the tower's (a 128,000-token video budget): the first stage carries it, and its cache
    assert first["memory"]["activation_peak"]["bytes"] == qwen25_vl_7b_l4_pp2["memory"]["activation_peak"]["bytes"]
    assert first["memory"]["encoder_cache"]["bytes"] > 0 and last["memory"]["encoder_cache"]["bytes"] == 0
    assert last["memory"]["activation_peak"]["bytes"] < first["memory"]["activation_peak"]["bytes"]
    # the first stage holds the tower and its activation: it has no KV memory left on an L4, the second has
    assert first["limiting"] and first["kv"]["num_blocks"] == 0 < last["kv"]["num_blocks"]
    # the vision tower's rotary cache (get_rope 8,192 x 40 x 2 B) is StageMissingLayer on the second stage
    assert first["memory"]["load_buffers"]["bytes"] - last["memory"]["load_buffers"]["bytes"] == 8192 * 40 * 2


def test_llava_1_5_at_pp2_puts_clip_and_the_projector_on_the_first_stage(tmp_path: Path) -> None:
    # Llama-2-7B text: hidden 4096, 32 layers, FFN 11008, 32 heads, vocab 32,064 (a multiple of 64), untied. A layer:
    # 4 x 4096^2 + 3 x 11008 x 4096 + 2 x 4096 = 202,383,360 params = 404,766,720 B; embedding = LM head =
    # 32,064 x 4096 x 2 B = 262,668,288 B; final norm 8,192 B. Stage 1: 16 layers + norm + head = 6,738,944,000 B.
    plan = _plan(tmp_path, "--model", "llava-hf/llava-1.5-7b-hf", "--gpu", "L4", "-pp", "2")
    first, last = plan["stages"]
    assert last["memory"]["weights"]["bytes"] == 16 * 404_766_720 + 8_192 + 262_668_288 == 6_738_944_000
    # the first stage: its 16 layers, the embedding and every tower tensor
    tower = first["memory"]["weights"]["bytes"] - 16 * 404_766_720 - 262_668_288
    # CLIP ViT-L/14-336 as vLLM builds it (init_vision_tower_for_llava: the 23 layers up to vision_feature_layer -2 of
    # 12,596,224 each, embeddings 1,193,984, pre_layrnorm 2,048, no post_layernorm) and the projector
    # 4,198,400 + 16,781,312: 311,888,896 params
    assert tower == 2 * (23 * 12_596_224 + 1_193_984 + 2_048 + 4_198_400 + 16_781_312) == 623_777_792
    # 3 images of 576 tokens fill the 2,048-token encoder budget; the cache is the first stage's
    assert [first["memory"]["encoder_cache"]["bytes"], last["memory"]["encoder_cache"]["bytes"]] == [3 * 576 * 4096 * 2, 0]
    assert last["memory"]["pp_intermediate"]["bytes"] == 2 * 2048 * 4096 * 2


def _refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(["plan", *argv])
    err = capsys.readouterr().err.strip()
    assert code == EXIT_BAD_INPUT and "\n" not in err and "Traceback" not in err
    return err


def test_families_not_read_and_qwen3_vls_deepstack_split_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refusal(capsys, ["--model", "Qwen/Qwen2-Audio-7B-Instruct", "--gpu", "H200", "--estimate", "formula", "-pp", "2"])
    assert "(qwen2_audio) on the stages is not read" in err and "plan at --pipeline-parallel-size 1" in err
    # qwen3_vl.py asserts a non-first stage starts at or past len(deepstack_visual_indexes) = 3 (layers 8, 16, 24)
    err = _refusal(capsys, ["--model", "Qwen/Qwen3-VL-8B-Instruct", "--gpu", "H200", "--estimate", "formula", "-pp", "2", "--pp-layer-partition", "2,34"])
    assert "starts at layer 2, before the 3 deepstack layers" in err
