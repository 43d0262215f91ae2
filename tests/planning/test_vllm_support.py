"""Whether the vLLM release planned serves the model: vLLM 0.33.0's registry lists MllamaForConditionalGeneration,
BART and Florence-2 in _PREVIOUSLY_SUPPORTED_MODELS as served through 0.10.2 (0.33 refuses Mllama and sends BART and
Florence-2 to the out-of-tree bart-plugin); 0.10.2's own registry still lists all three."""

from __future__ import annotations

import json

import pytest

from capacity.cli.app import main

pytestmark = pytest.mark.formula("the hazard reads the architecture's registry status and the release, which no estimate changes")


def hazard_ids(capsys, model: str, version: str) -> set[str]:
    code = main(["plan", "--model", model, "--gpu", "H200", "--estimate", "formula", "--vllm-version", version, "--json", "-"])
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    return {h["id"] for h in json.loads(out.out)["hazards"]}


@pytest.mark.parametrize(("version", "refused"), [("0.10.2", False), ("0.11.0", True), ("0.33.0", True)])
def test_mllama_is_not_served_after_0_10_2(capsys, version: str, refused: bool) -> None:
    assert ("model_not_served_by_vllm" in hazard_ids(capsys, "meta-llama/Llama-3.2-11B-Vision-Instruct", version)) is refused


@pytest.mark.parametrize(("version", "plugin"), [("0.10.2", False), ("0.33.0", True)])
def test_florence2_needs_the_plugin_only_after_0_10_2(capsys, version: str, plugin: bool) -> None:
    assert ("model_needs_plugin" in hazard_ids(capsys, "microsoft/Florence-2-large", version)) is plugin
