"""examples/ci: every command its README shows runs as written, on the default estimate (the fake-tensor trace a
CPU runner uses), with the exit code and the lines the README quotes; the workflow runs the README's command.

Nemotron-Parse's trace misses 15 % of the H200-measured activation peak (bench/results/trace-2026-11-30: 987.2 MiB
measured against 857.0 traced). The README's margin is worked from the plan's own terms: 15 % of the activation peak
comes off the available KV bytes; the blocks and requests left follow vLLM's arithmetic (available // bytes per
block; usable blocks, the null block excluded, // blocks per request).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from capacity.cli.app import main
from capacity.errors import EXIT_DOES_NOT_FIT, EXIT_FITS
from tests.support.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "ci"
README = (EXAMPLE / "README.md").read_text()


def readme_commands() -> list[tuple[str, list[str]]]:
    """(command, the stderr lines quoted after it) for every `capacity ...` command in the README's code blocks."""
    found: list[tuple[str, list[str]]] = []
    lines = iter(line.strip() for line in README.splitlines() if line.startswith("      "))
    for line in lines:
        if line.startswith("capacity: "):
            found[-1][1].append(line)
        elif line.startswith("capacity "):
            command = line
            while command.endswith("\\"):
                command = command[:-1] + next(lines)
            found.append((" ".join(command.split()), []))
    return found


def workflow_command() -> str:
    workflow = yaml.safe_load((EXAMPLE / "capacity-gate.yml").read_text())
    step = next(s for s in workflow["jobs"]["capacity-gate"]["steps"] if s.get("name") == "Gate the deploy")
    return " ".join(step["run"].replace("\\\n", " ").split())


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A runner's checkout: the command runs from the repository root with examples/ci/serve.yaml in place."""
    (tmp_path / "examples" / "ci").mkdir(parents=True)
    shutil.copy(EXAMPLE / "serve.yaml", tmp_path / "examples" / "ci" / "serve.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_workflow_runs_the_readmes_first_command():
    commands = readme_commands()
    assert len(commands) == 2
    assert commands[0][0] == workflow_command()


@pytest.mark.parametrize("index", [0, 1], ids=["the gate", "79 requests allowed"])
def test_each_readme_command_prints_what_the_readme_quotes(capsys, checkout, index):
    pytest.importorskip("torch")  # the default estimate traces the model
    command, quoted = readme_commands()[index]
    argv = shlex.split(command)
    assert argv[0] == "capacity" and quoted, command
    code = main(argv[1:])
    out, err = capsys.readouterr()
    assert err.splitlines() == quoted
    assert code == (EXIT_FITS if quoted[-1].startswith("capacity: check: PASS") else EXIT_DOES_NOT_FIT)
    if index == 0:
        doc = json.loads((checkout / "capacity-plan.json").read_text())
    else:  # run as written it prints the verdict lines on stdout; its figures come from the same line with --json
        assert out.splitlines()[0].startswith("FAIL"), out
        assert main([*argv[1:], "--json"]) == EXIT_DOES_NOT_FIT
        doc = json.loads(capsys.readouterr().out)
    assert doc["profile"]["fingerprint"]["device"] == "fake"  # the default path, not the formulas
    hazard = next(h for h in doc["hazards"] if h["id"] == "trace_misses_workspaces")
    kv = doc["kv_cache"]
    missed = doc["memory"]["activation_peak"]["bytes"] * 15 // 100
    blocks = (kv["available_bytes"] - missed) // kv["bytes_per_block"]
    requests = (blocks - 1) // kv["blocks_per_request_actual"]
    if index == 0:
        assert (doc["gate"]["passed"], hazard["severity"]) == (True, "info")
        assert (kv["num_blocks"], kv["num_blocks"] - blocks, requests) == (60_574, 205, 79)
        assert doc["concurrency"]["actual_requests"] == 79 and doc["serving"]["max_num_seqs"] == 64
        # the README's prose quotes these figures
        for quoted_figure in ("15 %", "0.13 GiB (205 of 60,574", "still hold 79", "holds 79 as planned but 78"):
            assert quoted_figure in " ".join(README.split())
        assert "0.13 GiB (205 blocks)" in hazard["message"] and "still hold 79 requests" in hazard["message"]
        assert (checkout / "capacity-report.html").is_file() and (checkout / "capacity-tables" / "summary.csv").is_file()
    else:
        assert (doc["gate"]["passed"], hazard["severity"]) == (False, "warning")
        assert doc["concurrency"]["actual_requests"] == 79 and requests == 78
        assert "the server run 78 at once, not 79" in hazard["message"]


def test_the_readme_describes_serve_yaml():
    serve = yaml.safe_load((EXAMPLE / "serve.yaml").read_text())
    described = re.search(r"\(Nemotron-Parse v1\.1,\s+`max-model-len` (\d+), `max-num-seqs` (\d+), `gpu-memory-utilization` ([\d.]+)", README)
    assert described is not None
    assert (serve["max-model-len"], serve["max-num-seqs"], serve["gpu-memory-utilization"]) == (int(described[1]), int(described[2]), float(described[3]))
    assert serve["model"] == "nvidia/NVIDIA-Nemotron-Parse-v1.1" and serve["limit-mm-per-prompt"] == "image=1"
