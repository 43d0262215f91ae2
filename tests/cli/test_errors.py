"""The CLI's contract for bad input: one `capacity: error:` line on stderr, exit 2, no traceback, empty stdout.

Exit codes: 0 fits, 1 does not fit, 2 bad input, 3 runtime failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_FITS

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

WHISPER = ["plan", "--model", "openai/whisper-tiny", "--gpu", "L4"]


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty HF cache, a scratch working directory (relative --model paths), a wide terminal for rich tables."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)


def run_main(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_bad_input(code: int, out: str, err: str, *needles: str) -> str:
    """Exit 2, nothing on stdout, exactly one `capacity: error:` line on stderr that contains every needle."""
    assert code == EXIT_BAD_INPUT, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("capacity: error: "), line
    assert "Traceback" not in err
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def write_model_folder(root: Path, config: str | dict) -> Path:
    folder = root / "model"
    folder.mkdir()
    text = config if isinstance(config, str) else json.dumps(config)
    (folder / "config.json").write_text(text)
    return folder


WHISPER_WITHOUT_D_MODEL = {
    "model_type": "whisper",
    "architectures": ["WhisperForConditionalGeneration"],
    "decoder_attention_heads": 6,
    "decoder_layers": 4,
    "encoder_layers": 4,
    "decoder_ffn_dim": 1536,
    "encoder_ffn_dim": 1536,
    "max_source_positions": 1500,
    "max_target_positions": 448,
    "vocab_size": 51865,
}


# --- --model ------------------------------------------------------------------------------------------


def test_unknown_model_lists_closest_catalog_names(capsys):
    line = assert_bad_input(*run_main(capsys, ["plan", "--model", "nvidia/Nemotron-Prse", "--gpu", "L4"]), "nvidia/Nemotron-Prse")
    assert "nvidia/NVIDIA-Nemotron-Parse-v1.1" in line
    assert "folder" in line and "config.json" in line  # says how to point at a folder


def test_model_path_that_does_not_exist(capsys):
    assert_bad_input(*run_main(capsys, ["plan", "--model", "./nope/model", "--gpu", "L4"]), "./nope/model", "no such folder")


def test_model_path_is_a_file(capsys, tmp_path):
    file = tmp_path / "config.json"
    file.write_text("{}")
    assert_bad_input(*run_main(capsys, ["plan", "--model", str(file), "--gpu", "L4"]), str(file), "is a file, not a folder")


def test_model_folder_without_config_json(capsys, tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    assert_bad_input(*run_main(capsys, ["plan", "--model", str(folder), "--gpu", "L4"]), str(folder), "no config.json")


def test_model_folder_with_invalid_json(capsys, tmp_path):
    folder = write_model_folder(tmp_path, '{"model_type": "whisper",\n  oops')
    assert_bad_input(*run_main(capsys, ["plan", "--model", str(folder), "--gpu", "L4"]), "config.json", "not valid JSON")


def test_model_folder_with_unknown_architecture(capsys, tmp_path):
    folder = write_model_folder(tmp_path, {"model_type": "foo_bar", "architectures": ["FooBarModel"]})
    assert_bad_input(*run_main(capsys, ["plan", "--model", str(folder), "--gpu", "L4"]), "unsupported architecture", "foo_bar")


def test_whisper_config_without_d_model(capsys, tmp_path):
    folder = write_model_folder(tmp_path, WHISPER_WITHOUT_D_MODEL)
    assert_bad_input(*run_main(capsys, ["plan", "--model", str(folder), "--gpu", "L4"]), "'d_model'")


def test_missing_model(capsys):
    assert_bad_input(*run_main(capsys, ["plan", "--gpu", "L4"]), "no model", "--model")


# --- --gpu --------------------------------------------------------------------------------------------


def test_unknown_gpu_lists_close_names(capsys):
    line = assert_bad_input(*run_main(capsys, ["plan", "--model", "openai/whisper-tiny", "--gpu", "H300"]), "unknown GPU 'H300'")
    assert "H200" in line


# --- serving knobs ------------------------------------------------------------------------------------


BAD_KNOBS = [
    (["--gpu-memory-utilization", "1.5"], ["--gpu-memory-utilization", "1.5"]),
    (["--gpu-memory-utilization", "0"], ["--gpu-memory-utilization"]),
    (["--max-num-seqs", "0"], ["--max-num-seqs", "positive"]),
    (["--max-num-seqs", "abc"], ["--max-num-seqs"]),
    (["--max-num-batched-tokens", "-5"], ["--max-num-batched-tokens", "'-5'"]),
    (["--max-num-batched-tokens", "abc"], ["--max-num-batched-tokens", "'abc'"]),
    (["--max-num-batched-tokens", "1.5G"], ["--max-num-batched-tokens", "'1.5G'", "binary suffix"]),
    (["--max-model-len", "0"], ["--max-model-len", "positive"]),
    (["--max-model-len", "x"], ["--max-model-len", "'x'"]),
    # a token count, not a memory size: the error names the knob and the forms vLLM's --max-model-len takes
    (["--max-model-len", "abc"], ["--max-model-len (max_model_len): cannot read 'abc'", "32k (32,000) or 32K (32,768), or auto / -1"]),
    (["--max-num-batched-tokens", "lots"], ["--max-num-batched-tokens (max_num_batched_tokens): cannot read 'lots'", "8k (8,000)"]),
    (["--kv-cache-dtype", "int8"], ["--kv-cache-dtype", "int8"]),
    (["--dtype", "fp64"], ["--dtype", "fp64"]),
    (["--tensor-parallel-size", "0"], ["--tensor-parallel-size"]),
    (["--limit-mm-per-prompt", "image"], ["--limit-mm-per-prompt", "'image'", "MODALITY=N"]),
    (["--limit-mm-per-prompt", "video=1"], ["--limit-mm-per-prompt", "'video'", "audio"]),
    (["--num-speculative-tokens", "-1"], ["--num-speculative-tokens"]),
    (["--kv-cache-memory-bytes", "10Q"], ["--kv-cache-memory-bytes", "'10Q'"]),
]


@pytest.mark.parametrize(("flags", "needles"), BAD_KNOBS, ids=[" ".join(flags) for flags, _ in BAD_KNOBS])
def test_bad_serving_knob(capsys, flags, needles):
    assert_bad_input(*run_main(capsys, [*WHISPER, *flags]), *needles)


def test_unknown_option_is_a_one_line_usage_error(capsys):
    line = assert_bad_input(*run_main(capsys, [*WHISPER, "--max-num-seq", "3"]), "--max-num-seq")
    assert "--max-num-seqs" in line  # click suggests the real option


# --- --config -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        (None, ["cannot read --config"]),
        ("max-model-len: [1, 2\nmax-num-seqs: 4\n", ["not valid YAML"]),
        ("- max-model-len: 4096\n- max-num-seqs: 4\n", ["must be a mapping"]),
        ("max-model-len: abc\n", ["max_model_len", "'abc'"]),
    ],
    ids=["missing-file", "invalid-yaml", "yaml-list", "max-model-len-abc"],
)
def test_bad_config_file(capsys, tmp_path, content, needles):
    path = tmp_path / "serve.yaml"
    if content is not None:
        path.write_text(content)
    assert_bad_input(*run_main(capsys, [*WHISPER, "--config", str(path)]), str(path), *needles)


# --- through a real process: no traceback reaches the terminal -------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["plan", "--model", "nvidia/Nemotron-Prse", "--gpu", "L4"], "nvidia/NVIDIA-Nemotron-Parse-v1.1"),
        ([*WHISPER, "--max-num-seq", "3"], "--max-num-seq"),
        ([*WHISPER, "--max-num-batched-tokens", "1.5G"], "'1.5G'"),
    ],
    ids=["unknown-model", "unknown-option", "binary-fraction"],
)
def test_subprocess_bad_input_has_no_traceback(tmp_path, argv, needle):
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hf-hub")}
    proc = subprocess.run([sys.executable, "-m", "capacity.cli", *argv], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert "Traceback" not in proc.stderr
    assert_bad_input(proc.returncode, proc.stdout, proc.stderr, needle)


def test_subprocess_folder_with_invalid_json(tmp_path):
    folder = write_model_folder(tmp_path, "{not json")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hf-hub")}
    proc = subprocess.run(
        [sys.executable, "-m", "capacity.cli", "plan", "--model", str(folder), "--gpu", "L4"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr
    assert_bad_input(proc.returncode, proc.stdout, proc.stderr, "not valid JSON")


# --- the good paths and their exit codes ---------------------------------------------------------------


def test_whisper_tiny_on_l4_fits(capsys):
    code, out, err = run_main(capsys, [*WHISPER, "--json"])
    assert code == EXIT_FITS, err
    plan = json.loads(out)
    assert plan["verdict"] == "fits"
    assert plan["model"]["name"] == "openai/whisper-tiny"
    assert "Traceback" not in err


def test_max_model_len_above_model_limit_does_not_fit(capsys):
    # Whisper's decoder limit is max_target_positions = 448; vLLM refuses --max-model-len 1000.
    code, out, err = run_main(capsys, ["plan", "--model", "openai/whisper-large-v3", "--gpu", "L4", "--max-model-len", "1000", "--json"])
    assert code == EXIT_DOES_NOT_FIT, err
    plan = json.loads(out)
    assert plan["verdict"] != "fits"
    assert "max_model_len_above_model_limit" in {h["id"] for h in plan["hazards"]}


def test_max_model_len_above_model_limit_report_exits_1(capsys):
    code, out, err = run_main(capsys, ["plan", "--model", "openai/whisper-large-v3", "--gpu", "L4", "--max-model-len", "1000"])
    assert code == EXIT_DOES_NOT_FIT, err
    assert "max_model_len_above_model_limit" in out or "max-model-len" in out


def test_models_lists_the_catalog(capsys):
    code, out, err = run_main(capsys, ["models"])
    assert code == EXIT_FITS, err
    assert "nvidia/NVIDIA-Nemotron-Parse-v1.1" in out
    assert "openai/whisper-tiny" in out


def test_gpus_lists_the_catalog(capsys):
    code, out, err = run_main(capsys, ["gpus"])
    assert code == EXIT_FITS, err
    assert "H200" in out and "L4" in out
