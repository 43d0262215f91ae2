"""Model sources (folder, local HF cache, catalog), and the layering rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from capacity.source.resolve import resolve_model
from tests.support.safetensors_files import safetensors_bytes

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    path.write_bytes(safetensors_bytes(tensors))


@pytest.fixture
def whisper_tiny_folder(tmp_path: Path, catalog_config) -> Path:
    folder = tmp_path / "whisper-tiny-local"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(catalog_config("openai/whisper-tiny")))
    return folder


def test_folder_with_safetensors_uses_headers_for_weights(whisper_tiny_folder: Path):
    # 1000 x 384 + 384 elements: the weights term counts what the checkpoint holds, x 2 B in bf16
    write_safetensors(whisper_tiny_folder / "model.safetensors", {"a": ("F32", [1000, 384]), "b": ("F32", [384])})
    plan = plan_for(str(whisper_tiny_folder), ServingArgs(), "L4")
    assert plan.source.origin == "folder"
    assert plan.parameter_count == 1000 * 384 + 384
    assert plan.memory["weights"].bytes == (1000 * 384 + 384) * 2  # float32 checkpoint -> bfloat16 under dtype auto
    assert plan.serving.dtype == "bfloat16"
    assert "safetensors" in plan.memory["weights"].method


def test_folder_without_safetensors_builds_on_meta(whisper_tiny_folder: Path):
    plan = plan_for(str(whisper_tiny_folder), ServingArgs(), "L4")
    assert plan.parameter_count == 37_760_640  # published whisper-tiny count


def test_hf_cache_is_found_offline(tmp_path: Path, monkeypatch, catalog_config):
    repo = tmp_path / "hub" / "models--acme--tiny-asr"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (snap / "config.json").write_text(json.dumps(catalog_config("openai/whisper-tiny")))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    source = resolve_model("acme/tiny-asr")
    assert (source.origin, source.name, source.path) == ("hf-cache", "acme/tiny-asr", str(snap))


def test_catalog_alias_and_short_name():
    assert resolve_model("nvidia/Nemotron-Parse").name == "nvidia/NVIDIA-Nemotron-Parse-v1.1"
    assert resolve_model("WHISPER-LARGE-V3").name == "openai/whisper-large-v3"


def test_capacity_core_does_not_import_torch():
    code = (
        "import sys, capacity.cli.app, capacity.planning.planner, capacity.model.families, capacity.memory.weights, capacity.model.arch, reports.terminal\n"
        "from capacity.model.registry import supported_model_types; supported_model_types()\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
