"""Where a command's result goes: output paths checked before any work, the file exports, and stdout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from capacity.cli.options import JSON_STDOUT
from capacity.cli.runtime import WRITTEN, stdout_console, writing_output
from capacity.errors import BadInput


def json_target(value: str | None) -> Path | None:
    if value is None or value == JSON_STDOUT:
        return None
    if not value.strip():
        raise BadInput("--json: empty path; use --json alone for stdout or --json PATH for a file")
    return Path(value)


def check_outputs(*, csv: Path | None = None, html: Path | None = None, json_out: str | None = None, output: Path | None = None, csv_is_folder: bool = True) -> None:
    """Every output path can be written, checked before the plan (which takes seconds); else one line, exit 2."""
    from reports.targets import Target, check_targets

    json_file = json_target(json_out)
    given = [("--output", output, False), ("--csv", csv, csv_is_folder), ("--html", html, False), ("--json", json_file, False)]
    check_targets(*(Target(flag, path, is_folder) for flag, path, is_folder in given if path is not None))


def export_outputs(subject: Any, csv: Path | None, html: Path | None, json_out: str | None, extra: dict[str, Any] | None = None) -> None:
    """Write the file exports (all or nothing) before anything is printed on stdout."""
    json_file = json_target(json_out)
    if csv is None and html is None and json_file is None:
        return
    from reports.export import write_exports

    with writing_output():
        written = write_exports(subject, csv=csv, html=html, json=json_file, json_extra=extra)
        WRITTEN.extend(str(p) for p in written)
    shown = []
    if csv is not None:
        shown.append(f"{csv}/ ({sum(p.parent == csv.resolve() for p in written)} CSV files)" if csv.is_dir() else str(csv))
    shown += [str(p) for p in (html, json_file) if p is not None]
    print(f"capacity: wrote {', '.join(shown)}", file=sys.stderr)


def print_json(subject: Any, extra: dict[str, Any] | None = None) -> None:
    from reports.export import json_text

    sys.stdout.write(json_text(subject, extra))


def show_plan(result: Any, json_out: str | None) -> None:
    """The plan on stdout: its JSON for a bare --json, else the terminal report."""
    if json_out == JSON_STDOUT:
        print_json(result)
    else:
        from reports.terminal import render

        render(result, stdout_console())
