"""The suggested `vllm serve` line breaks only between flags: in the terminal's verdict and (test_html_browser) in
the HTML report."""

from __future__ import annotations

import shlex

import pytest

from capacity.cli.app import main
from reports.serve_line import flag_groups, wrapped

COMMAND = "vllm serve Qwen/Qwen2.5-VL-7B-Instruct --max-model-len 9000 --limit-mm-per-prompt 'image=2,video=0' --mm-processor-kwargs '{\"max_pixels\":1003520}' --enforce-eager"


def test_flag_groups_keep_each_flag_with_its_value():
    assert flag_groups(COMMAND) == [
        "vllm serve Qwen/Qwen2.5-VL-7B-Instruct",
        "--max-model-len 9000",
        "--limit-mm-per-prompt image=2,video=0",  # shlex.quote leaves a value without shell metacharacters bare
        "--mm-processor-kwargs '{\"max_pixels\":1003520}'",
        "--enforce-eager",
    ]
    assert shlex.split(" ".join(flag_groups(COMMAND))) == shlex.split(COMMAND)


@pytest.mark.parametrize("width", [40, 60, 80])
def test_wrapped_lines_paste_as_the_same_command(width):
    lines = wrapped(COMMAND, width)
    assert all(line.endswith(" \\") for line in lines[:-1])
    assert shlex.split(" ".join(line.removesuffix(" \\") for line in lines)) == shlex.split(COMMAND)
    for line in lines:  # a line longer than the width holds one group alone (a group is never cut)
        assert len(line) <= width or len(flag_groups(line.strip().removesuffix(" \\"))) == 1


def test_the_verdict_at_80_columns_breaks_the_serve_line_between_flags(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    main(["plan", "--model", "Qwen/Qwen3-Next-80B-A3B-Thinking", "--gpu", "H200", "--tensor-parallel-size", "4", "--json"])
    import json

    command = json.loads(capsys.readouterr().out)["suggested_command"]
    main(["plan", "--model", "Qwen/Qwen3-Next-80B-A3B-Thinking", "--gpu", "H200", "--tensor-parallel-size", "4"])
    out = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(out) if "suggested: vllm serve" in line)
    shown = [line.strip("│ ").removesuffix("\\").strip() for line in out[start:] if line.startswith("│")]
    assert len(shown) > 1  # it did wrap at 80 columns
    assert " ".join(shown).removeprefix("suggested: ") == command  # and every flag with its value stayed on one line
    for group in flag_groups(command):
        assert any(group in line for line in shown), group
