"""Ctrl-C: a real SIGINT to a running `capacity` exits 130 (the shell's convention) with one line on stderr
saying what was interrupted and that no file was written; the README's exit-code table and --help say the same.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from capacity.cli import app, runtime
from capacity.errors import EXIT_INTERRUPTED
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

ROOT = REPO_ROOT
# `main` runs right after "ready" is printed: the SIGINT lands inside it, not in Python's start-up.
RUNNER = "import sys; from capacity.cli.app import main; print('ready', file=sys.stderr, flush=True); sys.exit(main(sys.argv[1:]))"


def test_sigint_exits_130_with_one_line_and_no_file(tmp_path):
    report = tmp_path / "report.html"
    # the fake-tensor trace of whisper-large-v3 takes several seconds: long enough to be interrupted
    cmd = [sys.executable, "-c", RUNNER, "plan", "--model", "openai/whisper-large-v3", "--estimate", "trace", "--html", str(report)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env={**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub")})
    assert proc.stderr.readline() == "ready\n"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED == 130, err
    assert out == ""
    assert err == "capacity: interrupted: `capacity plan` stopped by Ctrl-C (SIGINT) before it finished; no file was written\n"
    assert list(tmp_path.glob("*.html")) == [] and list(tmp_path.glob(".report.html.*")) == []


def test_a_sigint_while_files_are_written_waits_for_them(tmp_path):
    """The write finishes and is recorded, then the interrupt is acted on, and the message names the file."""
    previous = signal.signal(signal.SIGINT, runtime.raise_interrupted)
    runtime.WRITTEN.clear()
    try:
        with pytest.raises(runtime.Interrupted), runtime.writing_output():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # the handler has run: it must not have raised here
            (tmp_path / "plan.json").write_text("{}")
            runtime.WRITTEN.append(str(tmp_path / "plan.json"))
        line = runtime.interrupted_line(["check", "--json", str(tmp_path / "plan.json")])
    finally:
        signal.signal(signal.SIGINT, previous)
        runtime.WRITTEN.clear()
    assert line == f"capacity: interrupted: `capacity check` stopped by Ctrl-C (SIGINT) before it finished; files written before it, complete: {tmp_path / 'plan.json'}"


def test_readme_docs_and_help_document_130():
    assert "| 130 | interrupted (Ctrl-C); no partial file |" in (ROOT / "README.md").read_text()
    page = (ROOT / "docs" / "reference" / "exit-codes.md").read_text()
    assert "| 130 | interrupted (Ctrl-C, SIGINT" in page
    assert "``capacity: interrupted: `capacity plan` stopped by Ctrl-C (SIGINT) before it finished; no file was written``" in page
    assert "130 interrupted (Ctrl-C" in app.EXIT_CODES_HELP and app.EXIT_CODES_HELP in app.app.info.help


def test_a_sigint_during_an_import_waits_for_the_import(tmp_path, monkeypatch):
    """Raising inside an extension module's initialisation aborts the process (torch's pybind11 callbacks during
    `import torch`: SIGABRT, seen under load in CI): a Ctrl-C landing in an import is taken again just after it."""
    (tmp_path / "capacity_test_slow_import.py").write_text(
        "import signal, sys\nfrom capacity.cli import runtime\nruntime.raise_interrupted(signal.SIGINT, sys._getframe())\nDONE = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    resent: list[bool] = []
    monkeypatch.setattr(runtime, "_resend_sigint", lambda: resent.append(True))
    monkeypatch.setattr(runtime, "RESEND_SECONDS", 0.0)
    runtime.DEFERRED.update(depth=0, pending=False, seen=False, armed=True)
    try:
        import capacity_test_slow_import  # the handler ran inside this import: it must not raise there

        assert capacity_test_slow_import.DONE
        for _ in range(100):  # the re-send runs on a timer thread
            if resent:
                break
            time.sleep(0.01)
        assert resent == [True] and runtime.DEFERRED["seen"]
        with pytest.raises(runtime.Interrupted):  # outside an import the same Ctrl-C stops the run
            runtime.raise_interrupted(signal.SIGINT, sys._getframe())
    finally:
        runtime.DEFERRED.update(depth=0, pending=False, seen=False, armed=False)
        sys.modules.pop("capacity_test_slow_import", None)
