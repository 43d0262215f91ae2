"""Package data: the built-in model catalog (published Hugging Face files, no weights).

Layout of `models/` (see README.md here for the source and sha256 of every file):

- `<org>--<name>.json`: the config.json of the first entries, a single file;
- `<org>--<name>/`: a model folder holding the published files planning reads, each under its Hub file name
  (`MODEL_FILES`); `config.json` is always there, the others only where they were found.

`index.json` lists every entry with its provenance, aliases and `plannable` (false while no family can plan it;
such entries resolve, but are left out of `catalog()` loops that plan every entry).
"""

from __future__ import annotations

import json
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from capacity.source.parameter_table import FILE as PARAMETER_TABLE_FILE

MODEL_FILES = (
    "config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
    "generation_config.json",
    "model.safetensors.index.json",
)


def _models_dir() -> Traversable:
    return resources.files(__name__).joinpath("models")


def read_index() -> dict[str, Any]:
    """index.json as a dict: {"models": {canonical id: {"provenance", "aliases", "plannable"?}}}."""
    data: dict[str, Any] = json.loads(resources.files(__name__).joinpath("index.json").read_text())
    return data


def stem(name: str) -> str:
    """The file stem of a canonical id: `org/name` -> `org--name`."""
    return name.replace("/", "--")


def model_files(name: str) -> dict[str, Traversable]:
    """The published files stored for a catalog id, keyed by their Hub file name (config.json always present)."""
    folder = _models_dir().joinpath(stem(name))
    if folder.is_dir():
        return {f: folder.joinpath(f) for f in MODEL_FILES if folder.joinpath(f).is_file()}
    return {"config.json": _models_dir().joinpath(stem(name) + ".json")}


def parameter_table_file(name: str) -> Traversable:
    """Where a catalog id's parameter table is kept: in its model folder, or beside a single-file entry."""
    folder = _models_dir().joinpath(stem(name))
    if folder.is_dir():
        return folder.joinpath(PARAMETER_TABLE_FILE)
    return _models_dir().joinpath(f"{stem(name)}.parameters.json")


def read_model_file(name: str, filename: str) -> dict[str, Any] | None:
    """One stored file of a catalog id as a dict, or None when it was not published / not found."""
    found = model_files(name).get(filename)
    if found is None:
        return None
    data: dict[str, Any] = json.loads(found.read_text())
    return data
