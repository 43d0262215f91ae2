"""How long the README's test command takes on a fresh clone (issue 23, section 5: the default selection <= 5 min on
the 2-core machine).

    python3 bench/suite_time.py [--out bench/results/suite-<UTC date>] [--reps 1]

Each repetition clones this repository's HEAD into a new temporary folder (`git clone --no-local`: committed files
only), then runs the line after "Install and pass the tests:" in README.md there, as `.ci/run` finds it: the install
(a new venv, pip from its cache) and then `python -m pytest -q`, the default selection. The install and the tests are
timed apart (the command is split at its last ` && `). pytest's own count and seconds are read from its last line.
Chromium is not installed by this script (`.ci/run` installs it): where it is missing, the two browser tests skip
(pytest's count says so) and the result records whether it was on the PATH. `results.json` and `README.md` record the machine, its load before and after, the commit and the
versions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from machine import cpu_model  # noqa: E402

GOAL_S = 300.0
SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ passed.*?) in (?P<seconds>[\d.]+)s")


def readme_test_command(readme: Path) -> str:
    """The indented line after "Install and pass the tests:" (the line `.ci/run` runs)."""
    lines = readme.read_text().splitlines()
    start = lines.index("Install and pass the tests:")
    return next(line[4:] for line in lines[start + 1 :] if line.startswith("    "))


def timed_shell(command: str, cwd: Path, env: dict[str, str]) -> tuple[float, int, str]:
    start = time.perf_counter()
    done = subprocess.run(["bash", "-c", f"set -euo pipefail; {command}"], cwd=cwd, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, done.returncode, done.stdout + done.stderr


def one_run(commit: str, command: str) -> dict[str, object]:
    install, tests = command.rsplit(" && ", 1)
    work = Path(tempfile.mkdtemp(prefix="capacity-suite-"))
    try:
        subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(work / "clone")], check=True)
        clone = work / "clone"
        subprocess.run(["git", "checkout", "-q", commit], cwd=clone, check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "CAPACITY_ESTIMATE", "CI")}
        install_s, install_rc, install_out = timed_shell(install, clone, env)
        if install_rc != 0:
            return {"install_s": round(install_s, 1), "install_rc": install_rc, "tail": install_out.splitlines()[-5:]}
        # the README's command activates the venv in its own shell: the tests' half runs in that venv too
        tests_s, tests_rc, tests_out = timed_shell(f". .venv/bin/activate && {tests}", clone, env)
        last = next((m for m in map(SUMMARY.match, reversed(tests_out.splitlines())) if m), None)
        return {
            "install_s": round(install_s, 1),
            "tests_wall_s": round(tests_s, 1),
            "pytest_s": float(last["seconds"]) if last else None,
            "counts": last["counts"] if last else None,
            "rc": tests_rc,
            "tail": tests_out.splitlines()[-3:],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    out = args.out or ROOT / "bench" / "results" / f"suite-{date}"
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    command = readme_test_command(ROOT / "README.md")
    load_before = os.getloadavg()[0]
    runs = [one_run(commit, command) for _ in range(args.reps)]
    load_after = os.getloadavg()[0]
    result = {
        "date": date,
        "commit": commit,
        "command": command,
        "machine": {"cpus": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version(), "platform": platform.platform()},
        "chromium": next((name for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None),
        "load_before": round(load_before, 2),
        "load_after": round(load_after, 2),
        "goal_s": GOAL_S,
        "runs": runs,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    rows = [
        f"| {i + 1} | {r.get('install_s')} | {r.get('tests_wall_s')} | {r.get('pytest_s')} | {r.get('counts')} | {r.get('rc', r.get('install_rc'))} |"
        for i, r in enumerate(runs)
    ]
    (out / "README.md").write_text(
        f"# The README's test command on a fresh clone ({date})\n\n"
        f"`python3 bench/suite_time.py` on commit {commit[:12]}: `{command}`\n\n"
        f"Machine: {result['machine']['cpus']} CPUs ({result['machine']['cpu']}), Python {result['machine']['python']}; "
        f"load average {result['load_before']} before, {result['load_after']} after; Chromium: {result['chromium'] or 'not on the PATH (the two browser tests skip)'}.\n\n"
        "| run | install (s) | tests, wall (s) | pytest's own (s) | pytest's count | exit |\n|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        f"Goal (issue 23): the default selection <= {GOAL_S:.0f} s.\n"
    )
    print(json.dumps(runs, indent=1))
    return 0 if all(r.get("rc") == 0 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
