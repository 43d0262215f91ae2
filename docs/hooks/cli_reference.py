"""The command reference, written from the `capacity` CLI itself (typer -> click), so it cannot drift from the program.

Typer may carry its own copy of click (typer 0.28: `typer._click`), so commands and parameters are told apart by what
they have (`commands`, `param_type_name`), not by click's classes."""

from __future__ import annotations

from typing import Any

import typer.main


def _escape(text: str) -> str:
    """Help text in a Markdown table cell: pipes escaped, newlines joined."""
    return " ".join(text.split()).replace("|", "\\|")


def _default(param: Any) -> str:
    if getattr(param, "is_flag", False) and not param.default:
        return ""
    if param.default is None or param.default == () or callable(param.default):
        return ""
    return f"`{param.default}`"


def _option_row(param: Any, ctx: Any) -> str:
    record = param.get_help_record(ctx)
    names = record[0] if record else ", ".join(param.opts)
    help_text = record[1] if record else ""
    return f"| `{names}` | {_escape(help_text)} | {_default(param)} |"


def is_group(command: Any) -> bool:
    return hasattr(command, "commands")


def options(command: Any) -> list[Any]:
    """The command's visible options, in --help's order."""
    return [p for p in command.params if p.param_type_name == "option" and not getattr(p, "hidden", False)]


def context(command: Any, name: str) -> Any:
    return command.context_class(command, info_name=name)


def _command_section(name: str, command: Any, level: int) -> list[str]:
    ctx = context(command, name)
    lines = [f"{'#' * level} `capacity {name}`", ""]
    paragraphs = (command.help or "").strip().split("\n\n")
    lines += [" ".join(p.split()) + "\n" for p in paragraphs if p.strip()]
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines += ["```", f"capacity {name} {usage}".rstrip(), "```", ""]
    if is_group(command):
        for sub_name, sub in command.commands.items():
            lines += _command_section(f"{name} {sub_name}", sub, level + 1)
        return lines
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    shown = options(command)
    if arguments:
        lines += ["| argument | required |", "|---|---|"]
        lines += [f"| `{p.human_readable_name}` | {'yes' if p.required else 'no'} |" for p in arguments]
        lines.append("")
    if shown:
        lines += ["| option | what it does | default |", "|---|---|---|"]
        lines += [_option_row(p, ctx) for p in shown]
        lines.append("")
    return lines


def cli_group() -> Any:
    from capacity.cli.app import app

    return typer.main.get_command(app)  # type: ignore[return-value]


def command_names() -> list[str]:
    """Every command of the CLI, groups' subcommands as 'group sub'."""
    group = cli_group()
    names = []
    for name, command in group.commands.items():
        if is_group(command):
            names += [f"{name} {sub}" for sub in command.commands]
        else:
            names.append(name)
    return names


def cli_reference_page() -> str:
    group = cli_group()
    lines = [
        "# Commands and options",
        "",
        "Written from the `capacity` program itself when this site is built (`docs/hooks/cli_reference.py` reads the",
        "typer application), so it is what `capacity COMMAND --help` prints. The serving knobs take `vllm serve`'s names",
        "and vLLM 0.33's defaults: [Models, knobs and config files](inputs.md) says how each is read.",
        "",
        " ".join((group.help or "").split()),
        "",
    ]
    for name, command in group.commands.items():
        lines += _command_section(name, command, 2)
    return "\n".join(lines) + "\n"
