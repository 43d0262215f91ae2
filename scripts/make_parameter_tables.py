"""Write (or check) the parameter table of every catalog entry: capacity/source/catalog/models/<id>/capacity.parameters.json.

Each table is `Family.parameter_shapes(config)` (the architecture built on the meta device with the installed torch
and transformers, or listed from the config by a remote-code family), recorded with the config's sha256 so that a
plan of the entry reads the table instead of importing torch and transformers (capacity/source/parameter_table.py).

    python scripts/make_parameter_tables.py            # write every table
    python scripts/make_parameter_tables.py --check    # exit 1 when a table is not what this install builds
    python scripts/make_parameter_tables.py --only openai/whisper-large-v3 ...
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

from capacity.model.registry import model_spec
from capacity.source.parameter_table import ParameterTable, read_parameter_table
from capacity.source.resolve import CatalogEntry, catalog, resolve_model


def planned_entries() -> list[CatalogEntry]:
    """The entries a plan resolves from the catalog: plannable, or plannable once a modality is turned off."""
    return [e for e in catalog(include_unplannable=True).values() if e.resolves]


def built_table(entry: CatalogEntry) -> tuple[ParameterTable, Path]:
    source = resolve_model(entry.name)
    family = model_spec(source).family
    made_with = {name: metadata.version(name) for name in ("torch", "transformers")}
    table = ParameterTable(source.config_sha256, family.name, family.parameters_source, made_with, family.parameter_shapes(source.config))
    return table, Path(str(source.parameter_table))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--only", nargs="*", default=None, help="catalog ids (default: every planned entry)")
    args = parser.parse_args(argv)
    entries = [e for e in planned_entries() if args.only is None or e.name in args.only]
    stale = []
    for entry in entries:
        table, path = built_table(entry)
        if args.check:
            recorded = read_parameter_table(path, str(path))
            if recorded is None or (recorded.config_sha256, recorded.family, recorded.parameters) != (table.config_sha256, table.family, table.parameters):
                stale.append(entry.name)
                print(f"stale: {entry.name} ({path})", file=sys.stderr)
            continue
        path.write_text(table.to_json())
        print(f"{entry.name}: {len(table.parameters)} parameters -> {path}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
