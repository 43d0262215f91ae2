"""Hostile and corrupt inputs: each is one `capacity: error:` line and exit 2.

Absurd sizes in config.json, widths the heads do not divide, binary files, output names the file system
refuses, and one serve-YAML option spelled two ways with different values.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from capacity.errors import BadInput
from capacity.model.config_limits import LIMITS, check_config_sizes
from capacity.serving.config import load_serve_yaml
from capacity.source.resolve import catalog, catalog_config
from tests.cli.test_errors import assert_bad_input, run_main, write_model_folder

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

WHISPER_TINY = {
    "model_type": "whisper",
    "architectures": ["WhisperForConditionalGeneration"],
    "d_model": 384,
    "decoder_attention_heads": 6,
    "encoder_attention_heads": 6,
    "decoder_layers": 4,
    "encoder_layers": 4,
    "decoder_ffn_dim": 1536,
    "encoder_ffn_dim": 1536,
    "max_source_positions": 1500,
    "max_target_positions": 448,
    "num_mel_bins": 80,
    "vocab_size": 51865,
    "torch_dtype": "float32",
}

LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 4,
    "intermediate_size": 5632,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)


def plan_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path, config: dict | str | bytes, *extra: str) -> tuple[int, str, str]:
    if isinstance(config, bytes):
        folder = tmp_path / "model"
        folder.mkdir()
        (folder / "config.json").write_bytes(config)
    else:
        folder = write_model_folder(tmp_path, config)
    return run_main(capsys, ["plan", "--model", str(folder), "--gpu", "L4", *extra])


# --- item 6: absurd sizes are refused before anything is built ----------------------------------------------


@pytest.mark.parametrize(
    ("config", "needles"),
    [
        ({**WHISPER_TINY, "decoder_layers": 10**12}, ["decoder_layers = 1,000,000,000,000", "layer count", "1,024"]),
        ({**LLAMA, "num_hidden_layers": 10**12}, ["num_hidden_layers = 1,000,000,000,000", "layer count"]),
        ({**LLAMA, "num_attention_heads": 2**40, "hidden_size": 2**41}, ["hidden_size = 2,199,023,255,552", "width", "1,048,576"]),
        ({**LLAMA, "vocab_size": 10**9}, ["vocab_size = 1,000,000,000", "vocabulary size", "16,777,216"]),
        ({**LLAMA, "max_position_embeddings": 2**31}, ["max_position_embeddings = 2,147,483,648", "position count"]),
        ({**LLAMA, "text_config": {"num_hidden_layers": 5000}}, ["text_config.num_hidden_layers = 5,000"]),
        ({**WHISPER_TINY, "decoder_layers": 4.5}, ["decoder_layers = 4.5", "whole number"]),
    ],
    ids=["whisper-layers", "llama-layers", "width", "vocab", "positions", "nested", "fraction"],
)
def test_absurd_sizes_are_one_line_bad_input(capsys, tmp_path, config, needles):
    assert_bad_input(*plan_folder(capsys, tmp_path, config), "config.json", *needles)


def test_limits_hold_every_catalog_model():
    """The limits sit above every real config the catalog ships (no false refusals)."""
    for entry in catalog().values():
        check_config_sizes(catalog_config(entry))
    assert {limit.what: limit.maximum for limit in LIMITS}["layer count"] == 1024


def test_layer_count_at_the_limit_is_accepted():
    check_config_sizes({**WHISPER_TINY, "decoder_layers": 1024})
    with pytest.raises(BadInput, match="1,025"):
        check_config_sizes({**WHISPER_TINY, "decoder_layers": 1025})


def test_huge_layer_count_fails_fast_in_a_real_process(tmp_path):
    """It used to run out of memory (exit 3, 'MemoryError:'); now it is refused before the plan starts."""
    folder = write_model_folder(tmp_path, {**LLAMA, "num_hidden_layers": 10**12})
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hf-hub"), "CAPACITY_ESTIMATE": "formula"}
    proc = subprocess.run(
        [sys.executable, "-m", "capacity.cli", "plan", "--model", str(folder), "--gpu", "L4"], capture_output=True, text=True, env=env, timeout=120
    )
    assert_bad_input(proc.returncode, proc.stdout, proc.stderr, "num_hidden_layers = 1,000,000,000,000")


# --- item 7: a width the heads do not divide ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "needles"),
    [
        ({**LLAMA, "hidden_size": 2050}, ["hidden_size = 2050 is not a multiple of num_attention_heads = 32"]),
        ({**WHISPER_TINY, "d_model": 386}, ["d_model = 386 is not a multiple of encoder_attention_heads = 6"]),
        ({**WHISPER_TINY, "encoder_attention_heads": 5}, ["d_model = 384 is not a multiple of encoder_attention_heads = 5"]),
    ],
    ids=["llama-2050-over-32", "whisper-386-over-6", "whisper-encoder-heads"],
)
def test_width_not_divisible_by_heads_is_bad_input(capsys, tmp_path, config, needles):
    assert_bad_input(*plan_folder(capsys, tmp_path, config), *needles)


def test_explicit_head_size_allows_any_width():
    """T5 (d_kv) and Gemma (head_dim) give the head size: width / heads need not be whole."""
    check_config_sizes({"d_model": 512, "num_heads": 6, "d_kv": 64})
    check_config_sizes({"hidden_size": 2560, "num_attention_heads": 7, "head_dim": 256})


# --- item 8: binary files -----------------------------------------------------------------------------------


def test_binary_config_json_is_bad_input(capsys, tmp_path):
    line = assert_bad_input(*plan_folder(capsys, tmp_path, b"\x89PNG\r\n\x1a\n\x00\xff\xfe"), "config.json", "not UTF-8 text")
    assert "byte 0 is 0x89" in line


def test_binary_serve_yaml_is_bad_input(capsys, tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_bytes(b"max-num-seqs: 4\n\xff\xfe\x00\x01")
    line = assert_bad_input(*run_main(capsys, ["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--config", str(path)]), "--config", "not UTF-8 text")
    assert "byte 16 is 0xff" in line


def test_serve_yaml_with_control_characters_is_bad_input(capsys, tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_bytes(b"max-num-seqs: \x00\x01\x02\n")
    assert_bad_input(*run_main(capsys, ["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--config", str(path)]), "not valid YAML")


def test_binary_profile_is_bad_input(capsys, tmp_path):
    path = tmp_path / "profile.json"
    path.write_bytes(bytes(range(128, 256)))
    assert_bad_input(*run_main(capsys, ["plan", "--profile", str(path)]), "--profile", "not UTF-8 text")


# --- item 9: an output name longer than the file system allows ----------------------------------------------


@pytest.mark.parametrize("flag", ["--html", "--csv", "--json"])
def test_output_name_too_long_is_bad_input(capsys, tmp_path, flag):
    name = "r" * (os.pathconf(tmp_path, "PC_NAME_MAX") + 1)
    line = assert_bad_input(*run_main(capsys, ["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", flag, name]), f"cannot write {flag}", "File name too long")
    assert name in line
    assert os.listdir(tmp_path) == []  # nothing written, not even a temporary file


def test_profile_output_name_too_long_is_bad_input(capsys, tmp_path):
    from capacity.memory.measured_profile import write_text_atomic

    with pytest.raises(BadInput, match="File name too long"):
        write_text_atomic(tmp_path / ("p" * (os.pathconf(tmp_path, "PC_NAME_MAX") + 1)), "{}")


# --- item 10: one serve-YAML option spelled two ways --------------------------------------------------------


def write_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "serve.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("max-num-seqs: 8\nmax_num_seqs: 64\n", ["'max-num-seqs' (8)", "'max_num_seqs' (64)", "max_num_seqs"]),
        ("tp: 2\ntensor-parallel-size: 4\n", ["'tp' (2)", "'tensor-parallel-size' (4)"]),
        ("kv-cache-memory: 10G\nkv-cache-memory-bytes: 5G\n", ["'kv-cache-memory' (10737418240)", "'kv-cache-memory-bytes' (5368709120)"]),
        ("num-speculative-tokens: 2\nspeculative-config:\n  num_speculative_tokens: 3\n", ["'num-speculative-tokens' (2)", "'speculative-config.num_speculative_tokens' (3)"]),
        ("max-num-seqs: 8\nmax-num-seqs: 64\n", ["'max-num-seqs' is set twice", "8 (line 1)", "64 (line 2)"]),
        ("model: openai/whisper-tiny\n--model: openai/whisper-small\n", ["model is given twice"]),
    ],
    ids=["dash-and-underscore", "short-and-long", "alias", "speculative-config", "same-key-twice", "model-twice"],
)
def test_one_option_with_two_values_is_refused(tmp_path, text, needles):
    path = write_yaml(tmp_path, text)
    with pytest.raises(BadInput) as info:
        load_serve_yaml(path)
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    for needle in needles:
        assert needle in message


def test_one_option_spelled_two_ways_with_one_value_is_accepted(tmp_path):
    values, _, _ = load_serve_yaml(write_yaml(tmp_path, "max-num-seqs: 64\nmax_num_seqs: 64\nkv-cache-memory: 1G\nkv_cache_memory_bytes: 1073741824\n"))
    assert values == {"max_num_seqs": 64, "kv_cache_memory_bytes": 2**30}


def test_conflicting_yaml_is_one_line_exit_2(capsys, tmp_path):
    path = write_yaml(tmp_path, "max-num-seqs: 8\nmax_num_seqs: 64\n")
    assert_bad_input(*run_main(capsys, ["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--config", str(path)]), "'max-num-seqs' (8)", "'max_num_seqs' (64)")


# --- absurd knobs under the fake-tensor trace: the fallback is one note, not torch's logged traceback -----------


def test_absurd_batch_under_the_trace_logs_nothing_on_stderr(tmp_path):
    """10^15 batched tokens overflow a fake tensor's numel: torch logs that op's traceback as an ERROR before
    raising; capacity falls back to the formulas with a note, and stderr stays empty."""
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hf-hub"), "CAPACITY_ESTIMATE": "trace", "COLUMNS": "250"}
    argv = ["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--max-num-batched-tokens", "1000000000000000"]
    proc = subprocess.run([sys.executable, "-m", "capacity.cli", *argv], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1  # does not fit: 10^15 tokens of activations
    assert proc.stderr == ""
    assert "the fake-tensor trace stopped at RuntimeError: numel: integer multiplication overflow" in proc.stdout
