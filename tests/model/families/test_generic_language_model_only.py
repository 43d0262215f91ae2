"""--language-model-only (and every modality limit at 0) plans a multimodal config that ships no processor files.

vLLM 0.33: MultiModalConfig.get_limit_per_prompt returns 0 for every modality under language_model_only, so the
model is not a multimodal-input model for the engine (no dummy items, no encoder budget, no processor built) and the
model class leaves its vision tower out (_mark_tower_model; Qwen3.5 maps `visual.` weights to None). The image
processor's settings are therefore never read. Fixture: tests/fixtures/configs/Qwen--Qwen3.5-9B-config-only holds
Qwen/Qwen3.5-9B's config.json alone (bench/vllm_logs/configs/Qwen--Qwen3.5-9B, byte-exact by its sha256, without the
two processor files beside it there).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from capacity.cli.app import main
from tests.support.paths import REPO_ROOT

CONFIG_ONLY = REPO_ROOT / "tests" / "fixtures" / "configs" / "Qwen--Qwen3.5-9B-config-only"
WITH_PROCESSORS = REPO_ROOT / "bench" / "vllm_logs" / "configs" / "Qwen--Qwen3.5-9B"


def plan_json(capsys: pytest.CaptureFixture[str], model: object, *argv: str) -> dict[str, Any]:
    code = main(["plan", "--model", str(model), "--gpu", "L40S", "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def figures(plan: dict[str, Any]) -> dict[str, Any]:
    """Every byte count and count the plan gives (not its model name, which is the folder's)."""
    return {
        "memory": {k: v["bytes"] for k, v in plan["memory"].items() if isinstance(v, dict) and "bytes" in v},
        "kv": plan["kv_cache"],
        "concurrency": plan["concurrency"],
        "serving": plan["serving"],
    }


def test_fixture_ships_no_processor_files():
    assert sorted(p.name for p in CONFIG_ONLY.iterdir()) == ["config.json"]
    assert (CONFIG_ONLY / "config.json").read_bytes() == (WITH_PROCESSORS / "config.json").read_bytes()


def test_language_model_only_plans_a_config_without_processor_files(capsys: pytest.CaptureFixture[str]):
    bare = plan_json(capsys, CONFIG_ONLY, "--language-model-only")
    assert bare["serving"]["limit_mm_per_prompt"] == {"image": 0, "video": 0}
    assert bare["budget"]["profile_items"] == 0 and bare["memory"]["encoder_cache"]["bytes"] == 0
    assert "less the visual vLLM leaves out" in bare["memory"]["weights"]["method"]
    # the processor files play no part: the same config with them gives the same plan, figure for figure
    assert figures(bare) == figures(plan_json(capsys, WITH_PROCESSORS, "--language-model-only"))


def test_every_modality_limit_zero_plans_a_config_without_processor_files(capsys: pytest.CaptureFixture[str]):
    zero = plan_json(capsys, CONFIG_ONLY, "--limit-mm-per-prompt", "image=0,video=0")
    assert zero["budget"]["profile_items"] == 0 and zero["memory"]["encoder_cache"]["bytes"] == 0
    assert figures(zero)["memory"] == figures(plan_json(capsys, CONFIG_ONLY, "--language-model-only"))["memory"]


def test_images_without_processor_files_are_refused_naming_the_ways_out(capsys: pytest.CaptureFixture[str]):
    code = main(["plan", "--model", str(CONFIG_ONLY), "--gpu", "L40S"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "preprocessor_config.json" in err and "--limit-mm-per-prompt image=0" in err and "--language-model-only" in err


def test_language_model_only_trace_needs_no_processor_files(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """The default path (the fake-tensor trace) runs the decoder alone: no encoder input is built from the processor."""
    pytest.importorskip("torch")
    monkeypatch.delenv("CAPACITY_ESTIMATE", raising=False)
    plan = plan_json(capsys, CONFIG_ONLY, "--language-model-only")
    assert not any("trace stopped" in note for note in plan["notes"]), plan["notes"]
    assert "fake-tensor trace of the real model" in plan["memory"]["activation_peak"]["method"]
    assert plan["memory"]["encoder_cache"]["bytes"] == 0
