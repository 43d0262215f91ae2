"""capacity/cli/runtime.py: how `python -m capacity` ends."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_launched_rank_leaves_with_its_code_and_no_teardown_and_a_plain_run_exits_normally() -> None:
    """`python -m capacity` under torchrun (RANK set, torch.distributed used) ends with os._exit after flushing: the
    code stands and nothing of the interpreter's teardown runs (it could abort a finished rank). Elsewhere sys.exit."""
    script = (
        "import atexit, sys\n"
        "import torch.distributed\n"
        "from capacity.cli.runtime import exit_program\n"
        "atexit.register(lambda: print('teardown ran', file=sys.stderr, flush=True))\n"
        "print('report', flush=False)\n"
        "exit_program(3)\n"
    )
    for rank, teardown in (("0", False), ("", True)):
        env = {**os.environ, "RANK": rank}
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
        assert run.returncode == 3
        assert run.stdout == "report\n"  # flushed before leaving
        assert ("teardown ran" in run.stderr) is teardown
