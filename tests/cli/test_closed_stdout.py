"""A reader that closes stdout early (`capacity plan --json | true`) is not a verdict.

typer's and rich's broken-pipe handling exit 1, which a CI gate reads as "does not fit". With the plan complete,
the exit code is the verdict's own (0 fits, 1 does not fit) and one note on stderr says stdout was closed; a pipe
closed before any verdict exists (`--help`) is the runtime-failure code 3. Real processes, real pipes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from capacity.errors import EXIT_DOES_NOT_FIT, EXIT_FITS, EXIT_RUNTIME_FAILURE

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

TINY = ["--model", "openai/whisper-tiny", "--gpu", "L4"]


def run_with_closed_stdout(tmp_path: Path, argv: list[str]) -> tuple[int, str]:
    """Start capacity with stdout a pipe whose read end is closed before it writes (as `| true` does)."""
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hf-hub"), "CAPACITY_ESTIMATE": "formula", "COLUMNS": "120"}
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the process starts: every write to the pipe is EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "capacity.cli", *argv], stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env, timeout=180)
    finally:
        os.close(write_end)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["plan", *TINY, "--json"], EXIT_FITS),
        (["plan", *TINY, "--max-model-len", "100000"], EXIT_DOES_NOT_FIT),  # the verdict's own 1: max_model_len above 448
        (["sweep", *TINY, "--max-num-seqs", "8,16"], EXIT_FITS),  # the terminal report: rich's own broken-pipe exit is 1
    ],
    ids=["plan-json", "plan-does-not-fit", "sweep-report"],
)
def test_closed_stdout_keeps_the_verdicts_code(tmp_path, argv, code):
    returncode, err = run_with_closed_stdout(tmp_path, argv)
    assert returncode == code, err
    assert err.strip().splitlines() == [f"capacity: note: stdout was closed before the report was written; exit {code} is the verdict's code"]


def test_check_with_closed_stdout_still_prints_its_verdict(tmp_path):
    returncode, err = run_with_closed_stdout(tmp_path, ["check", *TINY, "--min-concurrency", "8"])
    assert returncode == EXIT_FITS, err
    lines = err.strip().splitlines()
    assert lines[0].startswith("capacity: check: PASS (openai/whisper-tiny on L4)")
    assert lines[1] == "capacity: note: stdout was closed before the report was written; exit 0 is the verdict's code"


def test_closed_stdout_before_any_verdict_is_a_runtime_failure(tmp_path):
    returncode, err = run_with_closed_stdout(tmp_path, ["--help"])
    assert returncode == EXIT_RUNTIME_FAILURE
    assert err.strip() == "capacity: error: stdout was closed before the output was written"
