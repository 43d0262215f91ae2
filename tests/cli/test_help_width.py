"""`--help` of every command prints every flag name whole, at 80 columns (a pipe's width) and around it: typer's rich
panels where the help column keeps room, else plain help with each long name on its own line. No word is cut."""

from __future__ import annotations

import re

import pytest
import typer

from capacity.cli.app import app, main

WIDTHS = (60, 80, 100, 120, 160, 240)


def commands() -> list[tuple[list[str], object]]:
    """Every command as its argv path, `cache info` included."""
    found: list[tuple[list[str], object]] = []

    def walk(path: list[str], command: object) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk([*path, name], sub)
        else:
            found.append((path, command))

    walk([], typer.main.get_command(app))
    return found


def help_of(capsys, monkeypatch, width: int, path: list[str]) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    assert main([*path, "--help"]) == 0
    return capsys.readouterr().out


def shown_whole(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def test_every_command_is_found():
    paths = {" ".join(path) for path, _ in commands()}
    assert {"plan", "profile", "verify", "reconcile", "check", "sweep", "models", "gpus", "cache info", "cache clear"} <= paths


@pytest.mark.parametrize("width", WIDTHS)
def test_every_flag_name_is_whole_in_every_help(capsys, monkeypatch, width):
    for path, command in commands():
        text = help_of(capsys, monkeypatch, width, path)
        assert "…" not in text, (path, width)
        for param in command.params:
            for name in (*param.opts, *param.secondary_opts):
                if name.startswith("-"):
                    assert shown_whole(name, text), (path, width, name)
        assert max(len(line.rstrip()) for line in text.splitlines()) <= width, (path, width)


def test_plan_help_at_80_columns_names_the_long_knobs(capsys, monkeypatch):
    # the test: these two were printed as `--gpu-memory-utili…` and `--tensor-parallel-…`
    text = help_of(capsys, monkeypatch, 80, ["plan"])
    assert shown_whole("--gpu-memory-utilization", text)
    assert shown_whole("--tensor-parallel-size", text)
    # grouped: the knobs under their own heading, --model under "Model and GPU", the files under "Output"
    knobs, model, output = text.index("vLLM serving knobs"), text.index("Model and GPU"), text.index("Output")
    assert model < text.index("-m, --model") < knobs < text.index("--gpu-memory-utilization") < output < text.index("--html PATH")


def test_wide_help_keeps_the_rich_panels(capsys, monkeypatch):
    text = help_of(capsys, monkeypatch, 240, ["plan"])
    assert "╭─ vLLM serving knobs" in text and "╭─ Model and GPU" in text
