"""A model's parameter table: the name and shape of every parameter its architecture allocates, as the meta-device
build gives them (`Family.parameter_shapes`), recorded so that planning needs neither torch nor transformers.

Catalog entries ship theirs beside the config (`capacity.parameters.json`, made by scripts/make_parameter_tables.py;
format below). A table is used only for the config it was made from: its `config_sha256` must be the sha256 of the
config being planned (canonical JSON, `ModelSource.config_sha256`), else the meta build runs as before.

    {"format": "capacity.parameters/1", "config_sha256": "...", "family": "whisper", "source": "built on the meta device",
     "made_with": {"torch": "2.13.0", "transformers": "5.24.0"}, "parameters": [["model.encoder.conv1.weight", [1280, 128, 3]], ...]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from capacity.errors import BadInput

FORMAT = "capacity.parameters/1"
FILE = "capacity.parameters.json"


@dataclass(frozen=True)
class ParameterTable:
    """(name, shape) of every unique parameter, and how it was obtained."""

    config_sha256: str
    family: str
    source: str  # the family's parameters_source ("built on the meta device", "listed from its config")
    made_with: dict[str, str]
    parameters: tuple[tuple[str, tuple[int, ...]], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "config_sha256": self.config_sha256,
            "family": self.family,
            "source": self.source,
            "made_with": dict(sorted(self.made_with.items())),
            "parameters": [[name, list(shape)] for name, shape in self.parameters],
        }

    def to_json(self) -> str:
        """One parameter per line: a table diffs line by line when the architecture changes."""
        head = {k: v for k, v in self.to_dict().items() if k != "parameters"}
        rows = ",\n".join(json.dumps([name, list(shape)]) for name, shape in self.parameters)
        return json.dumps(head, indent=1)[:-2] + ',\n "parameters": [\n' + rows + "\n ]\n}\n"

    @classmethod
    def from_dict(cls, data: Any, where: str) -> ParameterTable:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise BadInput(f"{where}: not a {FORMAT} parameter table: regenerate it with scripts/make_parameter_tables.py")
        try:
            return cls(
                config_sha256=str(data["config_sha256"]),
                family=str(data["family"]),
                source=str(data["source"]),
                made_with={str(k): str(v) for k, v in data["made_with"].items()},
                parameters=tuple((str(name), tuple(int(d) for d in shape)) for name, shape in data["parameters"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadInput(f"{where}: malformed parameter table ({type(exc).__name__}: {exc}): regenerate it with scripts/make_parameter_tables.py") from exc


def read_parameter_table(file: Any, where: str) -> ParameterTable | None:
    """The table in `file` (a Path or a package Traversable), or None when there is none."""
    if file is None or not file.is_file():
        return None
    try:
        data = json.loads(file.read_text())
    except ValueError as exc:
        raise BadInput(f"{where}: the parameter table is not JSON ({exc}): regenerate it with scripts/make_parameter_tables.py") from exc
    return ParameterTable.from_dict(data, where)
