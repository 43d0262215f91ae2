"""`--help` that prints every flag name whole at any width: typer's rich panels where they leave the help column room,
else click's plain layout (a long name on its own line, its help below), both grouped by the options' help panels."""

from __future__ import annotations

import os
from typing import Any

from typer.core import TyperCommand

OPTIONS_PANEL = "Options"  # typer's panel for an option without rich_help_panel
HELP_COLUMN_MIN = 36  # the narrowest help column that reads as prose beside the names
PANEL_FRAME = 4  # a panel's two borders and its padding


def help_width() -> int:
    """The width typer's rich help prints at: TERMINAL_WIDTH (typer's own override), else the terminal's (COLUMNS)."""
    from rich.console import Console

    fixed = os.environ.get("TERMINAL_WIDTH", "")
    return int(fixed) if fixed.isdigit() else Console().width


def _metavar(param: Any, ctx: Any) -> str:
    try:
        return param.make_metavar(ctx)  # click >= 8.2 (typer's vendored click)
    except TypeError:  # pragma: no cover - older click
        return param.make_metavar()


def _panels(command: Any, ctx: Any) -> dict[str, list[Any]]:
    """The visible options per help panel, "Options" first, the others in the order their first option comes."""
    panels: dict[str, list[Any]] = {OPTIONS_PANEL: []}
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False) or param.param_type_name != "option":
            continue
        panels.setdefault(getattr(param, "rich_help_panel", None) or OPTIONS_PANEL, []).append(param)
    return {name: params for name, params in panels.items() if params}


def rich_layout_fits(command: Any, ctx: Any, width: int) -> bool:
    """typer's panels are tables (long names, short names, negative long, negative short, type, help; one space each side
    of a cell). rich shrinks the widest wrapping column first, the help, so every name stays whole and no word of the
    help is cut while the help column keeps HELP_COLUMN_MIN and its longest word."""
    for params in _panels(command, ctx).values():
        columns = [0] * 5
        longest_word = 0
        for param in params:
            longs = [o for o in param.opts if o.startswith("--")]
            shorts = [o for o in param.opts if not o.startswith("--")]
            negative_longs = [o for o in param.secondary_opts if o.startswith("--")]
            negative_shorts = [o for o in param.secondary_opts if not o.startswith("--")]
            metavar = "" if getattr(param, "is_flag", False) else _metavar(param, ctx)
            cells = [",".join(longs), ",".join(shorts), ",".join(negative_longs), ",".join(negative_shorts), metavar]
            columns = [max(c, len(cell)) for c, cell in zip(columns, cells, strict=True)]
            longest_word = max([longest_word, *(len(word) for word in (param.help or "").split())])
        required = 3 if any(param.required for param in params) else 0
        help_room = width - PANEL_FRAME - required - sum(c + 2 for c in columns) - 2
        if help_room < max(HELP_COLUMN_MIN, longest_word):
            return False
    return True


class ReadableCommand(TyperCommand):
    """A command whose --help shows every flag whole: rich panels when they fit the width, else plain help by panel."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        if rich_layout_fits(self, ctx, help_width()):
            return super().format_help(ctx, formatter)
        return super(TyperCommand, self).format_help(ctx, formatter)  # click's plain help, options by format_options below

    def format_options(self, ctx: Any, formatter: Any) -> None:
        for name, params in _panels(self, ctx).items():
            records = [record for param in params if (record := param.get_help_record(ctx)) is not None]
            with formatter.section(name):
                formatter.write_dl(records)

