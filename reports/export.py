"""CSV, HTML and JSON exports of a plan or a sweep (a GPU profile can register its own), written atomically.

`write_exports(subject, csv=..., html=..., json=...)` renders every requested file in memory first,
then stages each one as a temporary file in its destination folder and, once all are staged, moves
them into place with `os.replace`. Any error (a missing folder, no permission, a full disk) removes
the temporary files and raises `BadInput`: no half-written file and no partial set of exports is left.

CSV layout: a subject with one table (a sweep) is one CSV file at PATH; a subject with several
sections (a plan) is a folder PATH holding one `<section>.csv` per section (the folder is created if
missing; files of other names in it are left alone).
"""

from __future__ import annotations

import contextlib
import json as jsonlib
import os
import tempfile
from functools import singledispatch
from pathlib import Path
from typing import Any

from capacity.errors import BadInput
from capacity.planning.plan import Plan
from reports.fingerprint import fingerprint


@singledispatch
def json_document(subject: Any) -> dict[str, Any]:
    """The JSON document of a subject (what `--json` prints or writes)."""
    from capacity.planning.sweep import SweepResult  # here, not at the top: a plan's --json need not import the sweep

    if isinstance(subject, SweepResult):
        return subject.to_dict()
    raise TypeError(f"no JSON document for {type(subject).__name__}")


@json_document.register
def _plan_json(plan: Plan) -> dict[str, Any]:
    return {**plan.to_dict(), "fingerprint": fingerprint(plan)}


def json_text(subject: Any, extra: dict[str, Any] | None = None) -> str:
    """The JSON document, indented, with `extra` keys added at the top level (the gate's result)."""
    return jsonlib.dumps({**json_document(subject), **(extra or {})}, indent=2) + "\n"


def csv_payloads(subject: Any, dest: Path) -> dict[Path, bytes]:
    """{path: CSV bytes}: one file at dest for a single-table subject, else dest/<section>.csv."""
    from reports.frames import frames  # pandas: only for --csv

    sections = frames(subject)
    encode = {name: df.to_csv(index=False, lineterminator="\n").encode() for name, df in sections.items()}
    if len(encode) == 1:
        return {dest: next(iter(encode.values()))}
    return {dest / f"{name}.csv": data for name, data in encode.items()}


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_files(files: dict[Path, tuple[str, bytes]], folders: dict[Path, str] | None = None) -> list[Path]:
    """Write {path: (flag, bytes)} all-or-nothing; `folders` ({folder: flag}) are created first when missing.

    Errors name the flag and the path, as one line (BadInput).
    """
    created: list[Path] = []
    staged: list[tuple[str, Path]] = []  # (temporary file, destination)

    def fail(flag: str, path: Path, why: str) -> BadInput:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        return BadInput(f"cannot write {flag} {path}: {why}")

    def kind(flag: str, path: Path) -> str:
        """'folder', 'file' or 'missing'; a name the system refuses (too long, invalid) is one error line."""
        try:
            return "folder" if path.is_dir() else "file" if path.exists() else "missing"
        except OSError as exc:
            raise fail(flag, path, exc.strerror or str(exc)) from exc

    for folder, flag in (folders or {}).items():
        found = kind(flag, folder)
        if found == "file":
            raise fail(flag, folder, "it is a file; this export is a folder of CSV files")
        if found == "missing":
            if kind(flag, folder.parent) != "folder":
                raise fail(flag, folder, f"folder {folder.parent} does not exist")
            try:
                folder.mkdir()
            except OSError as exc:
                raise fail(flag, folder, exc.strerror or str(exc)) from exc
            created.append(folder)

    mode = 0o666 & ~_umask()
    for path, (flag, data) in files.items():
        if kind(flag, path) == "folder":
            raise fail(flag, path, "it is a folder")
        if kind(flag, path.parent) != "folder":
            raise fail(flag, path, f"folder {path.parent} does not exist")
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        except OSError as exc:
            raise fail(flag, path, exc.strerror or str(exc)) from exc
        staged.append((tmp, path))
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
        except OSError as exc:
            raise fail(flag, path, exc.strerror or str(exc)) from exc

    done: list[Path] = []
    for i, (tmp, path) in enumerate(staged):
        try:
            os.replace(tmp, path)
        except OSError as exc:
            del staged[:i]  # those are in place already
            raise fail(files[path][0], path, exc.strerror or str(exc)) from exc
        done.append(path)
    return done


def write_exports(
    subject: Any, *, csv: Path | None = None, html: Path | None = None, json: Path | None = None, json_extra: dict[str, Any] | None = None
) -> list[Path]:
    """Render and write the requested exports of `subject` (a Plan, a SweepResult, or any type registered
    with `frames`, `render_html` and `json_document`). Returns the files written."""
    files: dict[Path, tuple[str, bytes]] = {}
    folders: dict[Path, str] = {}

    def add(path: Path, flag: str, data: bytes) -> None:
        key = Path(os.path.abspath(path))
        if key in files:
            raise BadInput(f"{flag} {path} is also the path of {files[key][0]}: give each export its own file")
        files[key] = (flag, data)

    if csv is not None:
        payloads = csv_payloads(subject, csv)
        if len(payloads) > 1 or csv not in payloads:
            folders[Path(os.path.abspath(csv))] = "--csv"
        for path, data in payloads.items():
            add(path, "--csv", data)
    if html is not None:
        from reports.html import render_html

        add(html, "--html", render_html(subject).encode())
    if json is not None:
        add(json, "--json", json_text(subject, json_extra).encode())
    return write_files(files, folders)
