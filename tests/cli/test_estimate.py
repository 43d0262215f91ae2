"""capacity/cli/estimate.py: which estimate a plan comes from, and what the fake-tensor trace leaves to the exit."""

from __future__ import annotations

import gc

import pytest

import profilers.startup as startup
from capacity.cli.app import main


def test_a_traced_plan_freezes_the_heap_at_exit_and_a_formula_plan_does_not(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The trace imports torch and transformers (about 350,000 objects); the process's last collections then skip
    them, as `capacity profile` does. A formula plan imports neither and registers nothing."""
    asked: list[bool] = []
    monkeypatch.setattr(startup, "freeze_heap_at_exit", lambda: asked.append(True))  # startup's own test registers it
    assert main(["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--estimate", "formula", "--json"]) == 0
    assert asked == []
    assert main(["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--estimate", "trace", "--json"]) == 0
    assert asked == [True]
    assert gc.isenabled() and gc.get_freeze_count() == 0  # in this process, the heap comes back from the trace as it was
    capsys.readouterr()


def test_a_chosen_estimate_is_used_on_a_machine_with_a_gpu_and_no_estimate_profiles_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--estimate (or CAPACITY_ESTIMATE) is the estimate the user asked for: a local GPU is not looked for, so a
    config-only plan stays config-only on a GPU host. With no estimate chosen, the local GPU is profiled first."""
    import capacity.cli.estimate as estimate

    looked: list[bool] = []

    def no_gpu_here() -> bool:
        looked.append(True)
        return False

    monkeypatch.setattr(estimate, "local_cuda_gpu", no_gpu_here)
    monkeypatch.delenv("CAPACITY_ESTIMATE", raising=False)
    assert main(["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--estimate", "formula", "--json"]) == 0
    assert main(["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--estimate", "formula", "--vllm-version", "0.19.0", "--json"]) == 0
    monkeypatch.setenv("CAPACITY_ESTIMATE", "formula")
    assert main(["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--json"]) == 0
    assert looked == []
    monkeypatch.delenv("CAPACITY_ESTIMATE")
    assert main(["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--json"]) == 0
    assert looked == [True]
    capsys.readouterr()
