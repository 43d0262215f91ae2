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
