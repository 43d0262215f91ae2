"""Reading the user's text files (config.json, serve YAML, profile JSON): every failure is one BadInput line."""

from __future__ import annotations

from pathlib import Path

from capacity.errors import BadInput


def read_text(path: Path, what: str) -> str:
    """The file's text as UTF-8; BadInput names `what` and `path` when it cannot be read or is not text."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{what} {path} is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}): is it a binary file?") from exc
