"""`capacity reconcile` reads and checks the log before it plans: a file that is not a vLLM startup log is refused
in one line without building a plan or importing torch / transformers (it took 4 s, the time of a plan)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

NOT_A_LOG = "Traceback (most recent call last):\n  File \"app.py\", line 1\nValueError: nothing here about vLLM\n"
# main() runs in a fresh interpreter; afterwards the heavy modules it imported are listed on stdout
PROBE = (
    "import json, sys; from capacity.cli.app import main; code = main(sys.argv[1:]); "
    "print(json.dumps([code, sorted(m for m in ('torch', 'transformers', 'pandas') if m in sys.modules)]))"
)


def test_not_a_log_is_refused_before_planning(tmp_path, monkeypatch, capsys):
    def planned(*args, **kwargs):
        raise AssertionError("planned before the log was read")

    monkeypatch.setattr("capacity.planning.planner.plan_for", planned)  # where reconcile looks it up
    log = tmp_path / "app.log"
    log.write_text(NOT_A_LOG)
    code = main(["reconcile", str(log), "--model", "openai/whisper-large-v3", "--gpu", "H200"])
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT and out == ""
    assert err.count("\n") == 1 and err.startswith("capacity: error: ") and str(log) in err


def test_not_a_log_imports_no_torch(tmp_path):
    log = tmp_path / "app.log"
    log.write_text(NOT_A_LOG)
    proc = subprocess.run([sys.executable, "-c", PROBE, "reconcile", str(log), "--model", "openai/whisper-large-v3"], capture_output=True, text=True, timeout=60)
    code, heavy = json.loads(proc.stdout)
    assert code == EXIT_BAD_INPUT and heavy == []
    assert proc.stderr.count("\n") == 1
