"""Each step's wall time of a profile run: in the profile JSON, in the terminal report, never in a fake-tensor trace."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torch")

from rich.console import Console

from capacity.cli.app import main
from capacity.memory.measured_profile import MemoryProfile, load_profile, save_profile
from profilers.probes import CpuProbe, FakeProbe
from profilers.startup import Timings
from reports.terminal import render_timings
from tests.profilers.test_run import TINY_WHISPER, folder_model, profile_of, weights_only_limit

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")


@pytest.fixture
def tiny_whisper(tmp_path: Path):
    return folder_model(tmp_path / "tiny-whisper", TINY_WHISPER, max_num_batched_tokens=2048, max_num_seqs=16, dtype="float32")


PHASE_STEPS = ["weights", "collect", "encoder", "decoder", "sampler", "sampler_warmup", "warmup_plan", "warmup_prefill", "warmup_decode"]


def test_a_device_profile_records_every_step_in_order(tiny_whisper):
    timings = Timings()
    timings.lap("load_model")
    p = profile_of(tiny_whisper, timings=timings)
    steps = list(p.timings_s)
    assert steps == ["load_model", "import_transformers", "cuda_init", *PHASE_STEPS, "release"]
    assert all(s >= 0 for s in p.timings_s.values())
    # a measured phase's own wall time is part of its step
    for ph in p.phases:
        assert p.timings_s[ph.name] >= ph.wall_s - 1e-3


def test_a_fake_tensor_trace_records_no_time(tiny_whisper):
    p = profile_of(tiny_whisper, probe=FakeProbe(), warmup=False)
    assert p.timings_s == {}
    assert "timings_s" not in p.to_dict()  # a traced plan's JSON is the same bytes as before timings existed


def test_timings_round_trip_through_the_profile_file(tiny_whisper, tmp_path: Path):
    p = profile_of(tiny_whisper, warmup=False)
    path = tmp_path / "profile.json"
    save_profile(p, path)
    saved = json.loads(path.read_text())
    assert saved["timings_s"] == p.timings_s and list(saved["timings_s"])[-1] == "release"
    assert load_profile(path).timings_s == p.timings_s
    del saved["timings_s"]  # a profile written before timings existed loads with none
    assert MemoryProfile.from_dict(saved).timings_s == {}


def test_memory_is_released_when_the_cached_blocks_are_left_to_the_exit(tiny_whisper):
    """release_memory=False (the CLI, which exits next) still frees every tensor, after an out-of-memory error too."""
    probe = CpuProbe(limit_bytes=weights_only_limit(tiny_whisper))
    p = profile_of(tiny_whisper, probe=probe, release_memory=False)
    assert p.oom is not None and probe.allocated() == 0
    probe = CpuProbe()
    assert profile_of(tiny_whisper, probe=probe, release_memory=False).oom is None and probe.allocated() == 0


def test_the_terminal_report_lists_each_step(tiny_whisper):
    p = profile_of(tiny_whisper, warmup=False)
    p = replace(p, timings_s={"cli": 3.0, **p.timings_s})
    console = Console(record=True, width=160)
    render_timings(p, console, note="Python compiled torch from source")
    text = console.export_text()
    assert "profile run: wall time per step" in text
    for step in ("cli", "weights", "encoder", "release"):
        assert f"│ {step} " in text
    assert "the command's checks; torch imported" in text
    assert f"{sum(p.timings_s.values()):.3f}" in text  # the total
    assert "Python compiled torch from source" in text


def test_profile_command_saves_and_prints_the_timings(tmp_path: Path, capsys):
    folder = tmp_path / "tiny-whisper"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_WHISPER))
    path = tmp_path / "profile.json"
    knobs = ["--gpu", "L4", "--max-num-batched-tokens", "2048", "--max-num-seqs", "16"]
    code = main(["profile", "--model", str(folder), "-o", str(path), "--cpu-probe", "--no-warmup", *knobs])
    out = capsys.readouterr().out
    assert code == 0
    steps = json.loads(path.read_text())["timings_s"]
    assert list(steps)[:3] == ["python_start", "cli", "cpu_probe_estimate"]
    assert list(steps)[-2:] == ["release", "plan"]
    assert "profile run: wall time per step" in out and "cpu_probe_estimate" in out
