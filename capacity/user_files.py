"""Reading the user's text files (config.json, serve YAML, profile JSON): every failure is one BadInput line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def json_object(value: Any, where: str, name: str, example: str) -> dict[str, Any]:
    """A knob given as a JSON object (the command line) or a mapping (a serve YAML), with string keys; BadInput in one
    line naming `where`, the knob `name` and an `example` of the form it takes."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{where}: {name} {value!r} is not valid JSON; give an object like '{example}'") from exc
    if not isinstance(value, dict):
        raise BadInput(f"{where}: {name} must be an object like {example}, got {value!r}")
    return {str(k): v for k, v in value.items()}
