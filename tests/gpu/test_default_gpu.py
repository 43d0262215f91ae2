"""No --gpu and no local GPU: the plan targets the H200 and says so, in the report ("H200 (default; pass --gpu)"),
the JSON (`gpu.defaulted`), the CSV fingerprint and the notes, on every path (formula, fake-tensor trace, CPU probe)."""

from __future__ import annotations

import json

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_FITS
from capacity.gpu.detect import resolve_gpu
from profilers.api import profiling_gpu
from profilers.probes import CpuProbe, FakeProbe
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

NOTE = "no local NVIDIA GPU found: planning for an H200 (pass --gpu to choose)"


@pytest.fixture(autouse=True)
def no_local_gpu(monkeypatch):
    monkeypatch.setattr("capacity.gpu.detect.detect_local_gpu", lambda index=0: None)


def plan_json(capsys, *argv: str) -> dict:
    code = main(["plan", "--model", "openai/whisper-tiny", *argv, "--json"])
    out, err = capsys.readouterr()
    assert code == EXIT_FITS, err
    return json.loads(out)


@pytest.mark.parametrize("estimate", ["formula", "trace"])
def test_json_says_the_gpu_was_defaulted(capsys, estimate):
    d = plan_json(capsys, "--estimate", estimate)
    assert d["gpu"]["name"] == "H200" and d["gpu"]["defaulted"] is True
    assert d["fingerprint"]["gpu_defaulted"] is True
    assert NOTE in d["notes"]


def test_a_chosen_gpu_is_not_defaulted(capsys):
    d = plan_json(capsys, "--gpu", "H200")
    assert d["gpu"]["defaulted"] is False and d["fingerprint"]["gpu_defaulted"] is False
    assert NOTE not in d["notes"]


def test_report_shows_the_default(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["plan", "--model", "openai/whisper-tiny"]) == EXIT_FITS
    out = capsys.readouterr().out
    assert "GPU         H200 (default; pass --gpu): 150,109,880,320 B" in out
    assert main(["plan", "--model", "openai/whisper-tiny", "--gpu", "H200"]) == EXIT_FITS
    out = capsys.readouterr().out
    assert "GPU         H200: 150,109,880,320 B" in out and "(default; pass --gpu)" not in out


def test_html_shows_the_default(tmp_path, capsys):
    page = tmp_path / "r.html"
    assert main(["plan", "--model", "openai/whisper-tiny", "--html", str(page)]) == EXIT_FITS
    capsys.readouterr()
    assert "H200 (default; pass --gpu): 150,109,880,320 B" in page.read_text()


@pytest.mark.parametrize("probe", [FakeProbe, CpuProbe])
def test_probes_without_a_gpu_resolve_like_the_planner(probe):
    assert profiling_gpu(probe(), None) == resolve_gpu(None)
    gpu, note = profiling_gpu(probe(), None)
    assert gpu.defaulted and gpu.label == "H200 (default; pass --gpu)" and note == NOTE
    chosen, note = profiling_gpu(probe(), "L4")
    assert chosen.name == "L4" and not chosen.defaulted and note is None


def test_a_profile_taken_here_plans_the_cuda_total_it_recorded_not_nvmls(monkeypatch):
    """vLLM requests utilization x cudaMemGetInfo's total. On the H200 x2 host NVML reports 150,754,820,096 B and
    CUDA 150,109,880,320 B (the profile's fingerprint); planning NVML's total made `verify --profile` 713,031 B over."""

    from capacity.gpu.catalog import Gpu
    from capacity.memory.measured_profile import load_profile
    from capacity.planning import planner
    from capacity.serving.config import ServingArgs

    nvml = Gpu(name="NVIDIA H200", total_memory_bytes=150_754_820_096, source="nvml", provenance="NVML on this machine (GPU 0)")
    monkeypatch.setattr(planner, "resolve_gpu", lambda name: (nvml, None))
    profile = load_profile(REPO_ROOT / "bench" / "results" / "h200x2-tp-2026-11-30" / "whisper-large-v3-tp2.json")
    plan = planner.plan_for("openai/whisper-large-v3", ServingArgs(tensor_parallel_size=2), None, profile)
    assert plan.gpu.total_memory_bytes == 150_109_880_320
    assert plan.gpu.source == "cuda"
    # requested memory = ceil(150,109,880,320 x 0.92) = 138,101,089,894.4 -> 138,101,089,895 B (as in the H200 verify runs)
    assert plan.requested_memory_bytes == 138_101_089_895
