"""`capacity profile` and `capacity plan --profile` end to end, on the CPU probe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from capacity.cli.app import main
from tests.profilers.test_run import TINY_WHISPER

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

KNOBS = ["--gpu", "L4", "--max-num-batched-tokens", "2048", "--max-num-seqs", "16"]


@pytest.fixture
def tiny_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-whisper"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_WHISPER))
    return folder


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_profile_writes_the_profile_and_plans_from_it(tiny_folder: Path, tmp_path: Path, capsys):
    path = tmp_path / "profile.json"
    code, out, err = run(["profile", "--model", str(tiny_folder), "-o", str(path), "--cpu-probe", "--json", *KNOBS], capsys)
    assert code == 0, err
    saved = json.loads(path.read_text())
    assert [p["name"] for p in saved["phases"]] == ["weights", "encoder", "decoder", "sampler", "sampler_warmup", "warmup_prefill", "warmup_decode"]
    plan = json.loads(out)
    assert plan["memory"]["weights"]["kind"] == "measured"
    assert plan["memory"]["encoder_cache"]["bytes"] == 1500 * 64 * 2  # one audio item, 64 wide, bfloat16 (dtype auto)
    assert plan["profile"]["fingerprint"]["device"] == "cpu"
    assert plan["profile"]["timings_s"] == saved["timings_s"] and "plan" in saved["timings_s"]  # each step's wall time
    assert f"wrote profile {path}" in err

    # re-plan from the saved profile on a machine without a GPU, --model taken from the profile
    code, out, err = run(["plan", "--profile", str(path), "--json", *KNOBS], capsys)
    assert code == 0, err
    replanned = json.loads(out)
    assert replanned["memory"]["weights"] == plan["memory"]["weights"]
    assert replanned["kv_cache"]["num_blocks"] == plan["kv_cache"]["num_blocks"]


def test_profile_without_gpu_is_bad_input(tiny_folder: Path, tmp_path: Path, capsys):
    path = tmp_path / "p.json"
    code, out, err = run(["profile", "--model", str(tiny_folder), "-o", str(path)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("capacity: error: no usable NVIDIA GPU")
    assert not path.exists()


def test_profile_output_folder_must_exist(tiny_folder: Path, tmp_path: Path, capsys):
    code, _, err = run(["profile", "--model", str(tiny_folder), "-o", str(tmp_path / "nope" / "p.json"), "--cpu-probe"], capsys)
    assert code == 2 and "does not exist" in err


def test_plan_refuses_a_profile_of_another_model(tiny_folder: Path, tmp_path: Path, capsys):
    path = tmp_path / "profile.json"
    assert run(["profile", "--model", str(tiny_folder), "-o", str(path), "--cpu-probe", "--no-warmup", "--json", *KNOBS], capsys)[0] == 0
    code, out, err = run(["plan", "--model", "openai/whisper-tiny", "--profile", str(path)], capsys)
    assert code == 2 and out == "" and "the profile was taken of" in err and err.count("\n") == 1


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"capacity_profile_format": 99}', '{"capacity_profile_format": 1, "fingerprint": {}}'])
def test_plan_with_a_bad_profile_file(tmp_path: Path, capsys, content: str):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, out, err = run(["plan", "--model", "openai/whisper-tiny", "--profile", str(path)], capsys)
    assert code == 2 and out == "" and err.startswith("capacity: error:") and err.count("\n") == 1
