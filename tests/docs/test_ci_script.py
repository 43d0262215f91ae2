""".ci/run must find the README's test command: CI runs exactly that line, so a reworded heading would break CI."""

from __future__ import annotations

import re
import subprocess

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT


def test_ci_run_extracts_the_readmes_test_command():
    script = (ROOT / ".ci" / "run").read_text()
    extraction = re.search(r"^cmd=\$\((.*)\)$", script, re.MULTILINE)
    assert extraction, ".ci/run no longer reads its command from the README"
    cmd = subprocess.run(["bash", "-c", extraction.group(1)], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert cmd.startswith("python3 -m venv .venv") and cmd.endswith("python -m pytest -q")
    # and it is the README's second command, the one under its heading
    readme = (ROOT / "README.md").read_text()
    assert f"Install and pass the tests:\n\n    {cmd}\n" in readme


def test_ci_run_builds_the_documentation_site_strictly():
    script = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -e '.[docs]'" in script
    assert re.search(r"^NO_MKDOCS_2_WARNING=1 mkdocs build --strict ", script, re.MULTILINE)
