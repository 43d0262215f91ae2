"""`vllm serve --config` YAML files and vLLM's human-readable integers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_FITS, BadInput
from capacity.serving.config import ServingArgs, load_serve_yaml
from capacity.units import parse_human_int

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

GiB = 2**30


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.chdir(tmp_path)


def write_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "serve.yaml"
    path.write_text(text)
    return path


# --- load_serve_yaml --------------------------------------------------------------------------------------


SERVE_YAML = """\
model: openai/whisper-tiny
max-model-len: 2048
max_num_seqs: 64
tensor-parallel-size: 2
kv-cache-memory-bytes: 10G
limit-mm-per-prompt:
  image: 1
speculative-config:
  num_speculative_tokens: 2
enable-prefix-caching: true
swap-space: 4
"""


def test_reads_dashed_and_underscored_keys(tmp_path):
    values, model, ignored = load_serve_yaml(write_yaml(tmp_path, SERVE_YAML))
    assert model == "openai/whisper-tiny"
    assert values == {
        "max_model_len": 2048,
        "max_num_seqs": 64,
        "tensor_parallel_size": 2,
        "kv_cache_memory_bytes": 10 * GiB,
        "limit_mm_per_prompt": {"image": 1},
        "num_speculative_tokens": 2,
        "enable_prefix_caching": True,  # hybrid Mamba models: mamba_cache_mode align
    }
    assert ignored == ["swap-space"]
    ServingArgs(**values)  # every key is a ServingArgs field


def test_values_types(tmp_path):
    values, _, _ = load_serve_yaml(write_yaml(tmp_path, SERVE_YAML))
    assert values["kv_cache_memory_bytes"] == 10_737_418_240
    assert all(isinstance(values[k], int) for k in ("max_model_len", "max_num_seqs", "tensor_parallel_size", "kv_cache_memory_bytes"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max-model-len: auto\n", {"max_model_len": -1}),
        ("max_num_batched_tokens: 8k\n", {"max_num_batched_tokens": 8000}),
        ("gpu-memory-utilization: 0.8\n", {"gpu_memory_utilization": 0.8}),
        ("tp: 4\n", {"tensor_parallel_size": 4}),
        ("--max-num-seqs: 8\n", {"max_num_seqs": 8}),
        ("limit-mm-per-prompt: 'image=2,audio=1'\n", {"limit_mm_per_prompt": {"image": 2, "audio": 1}}),
        ("limit-mm-per-prompt: '{\"video\": {\"count\": 1}}'\n", {"limit_mm_per_prompt": {"video": 1}}),
        ("enforce-eager: true\n", {"enforce_eager": True}),
        ("language-model-only: true\n", {"language_model_only": True}),
        ("kv-cache-dtype: fp8\n", {"kv_cache_dtype": "fp8"}),
    ],
)
def test_single_keys(tmp_path, text, expected):
    values, model, ignored = load_serve_yaml(write_yaml(tmp_path, text))
    assert values == expected
    assert model is None
    assert ignored == []


def test_empty_file_is_no_options(tmp_path):
    assert load_serve_yaml(write_yaml(tmp_path, "")) == ({}, None, [])


def test_unmodelled_keys_are_reported_not_applied(tmp_path):
    values, _, ignored = load_serve_yaml(write_yaml(tmp_path, "swap-space: 4\nserved-model-name: asr\nmax-num-seqs: 4\n"))
    assert values == {"max_num_seqs": 4}
    assert ignored == ["swap-space", "served-model-name"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("max-model-len: abc\n", "max_model_len"),
        ("max-num-seqs: true\n", "max_num_seqs"),
        ("gpu-memory-utilization: lots\n", "gpu-memory-utilization"),
        ("enforce-eager: maybe\n", "enforce-eager"),
        ("limit-mm-per-prompt: image\n", "MODALITY=N"),
        # vLLM's per-modality dummy-size options change the profiled item; capacity refuses rather than drop them
        ("limit-mm-per-prompt: '{\"video\": {\"count\": 1, \"num_frames\": 8}}'\n", "num_frames"),
        ("limit-mm-per-prompt:\n  image: {count: 2, width: 512, height: 512}\n", "height, width"),
        ("kv-cache-memory-bytes: 1.5G\n", "binary suffix"),
        ("- max-model-len: 1\n", "must be a mapping"),
        ("max-model-len: [1\n", "not valid YAML"),
    ],
)
def test_bad_values_are_bad_input(tmp_path, text, needle):
    path = write_yaml(tmp_path, text)
    with pytest.raises(BadInput) as info:
        load_serve_yaml(path)
    message = str(info.value)
    assert needle in message
    assert str(path) in message
    assert "\n" not in message


def test_missing_file_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="cannot read --config"):
        load_serve_yaml(tmp_path / "absent.yaml")


# --- the CLI with --config ----------------------------------------------------------------------------------


def plan_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict, str]:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_cli_flags_override_yaml(capsys, tmp_path):
    path = write_yaml(tmp_path, "max-num-seqs: 64\nmax-model-len: 256\n")
    code, plan, err = plan_json(capsys, ["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--config", str(path), "--max-num-seqs", "32"])
    assert code == EXIT_FITS, err
    assert plan["serving"]["max_num_seqs"] == 32  # the flag wins
    assert plan["serving"]["max_model_len"] == 256  # the YAML still applies where no flag is given


def test_yaml_values_apply_without_flags(capsys, tmp_path):
    path = write_yaml(tmp_path, "max-num-seqs: 64\n")
    code, plan, err = plan_json(capsys, ["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--config", str(path)])
    assert code == EXIT_FITS, err
    assert plan["serving"]["max_num_seqs"] == 64


def test_yaml_model_is_used_without_model_flag(capsys, tmp_path):
    path = write_yaml(tmp_path, "model: openai/whisper-tiny\nswap-space: 4\n")
    code, plan, err = plan_json(capsys, ["plan", "--gpu", "L4", "--config", str(path)])
    assert code == EXIT_FITS, err
    assert plan["model"]["name"] == "openai/whisper-tiny"
    # the unmodelled key is named in a note on stderr, not an error
    assert "swap-space" in err
    assert "capacity: error" not in err


def test_model_flag_overrides_yaml_model(capsys, tmp_path):
    path = write_yaml(tmp_path, "model: openai/whisper-large-v3\n")
    code, plan, err = plan_json(capsys, ["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--config", str(path)])
    assert code == EXIT_FITS, err
    assert plan["model"]["name"] == "openai/whisper-tiny"


# --- parse_human_int ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1k", 1000),
        ("1K", 1024),
        ("25.6k", 25600),
        ("10G", 10_737_418_240),
        ("10g", 10_000_000_000),
        ("2048", 2048),
        (" 4M ", 4 * 2**20),
        ("1.5m", 1_500_000),
        (4096, 4096),
    ],
)
def test_parse_human_int(text, expected):
    assert parse_human_int(text, "--x") == expected


@pytest.mark.parametrize("text", ["1.5G", "abc", "-5", "1.5", "10 GiB", "", True])
def test_parse_human_int_rejects(text):
    with pytest.raises(BadInput, match="--x"):
        parse_human_int(text, "--x")
