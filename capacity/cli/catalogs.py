"""`capacity models` and `capacity gpus`: the built-in catalogs (and the local GPU)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from capacity.cli.runtime import report_to_stdout, stdout_console
from capacity.errors import EXIT_FITS


def models(
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the catalog as JSON: one object per model (id, aliases, family, tokens per item, ...).")
    ] = False,
) -> None:
    """List the built-in model catalog (works offline), and the ids it holds but cannot plan offline, with the reason."""
    from capacity.model.registry import model_spec
    from capacity.source.resolve import catalog, catalog_source
    from reports.catalogs import models_json, render_models

    every = catalog(include_unplannable=True).values()
    entries = [(entry, model_spec(catalog_source(entry))) for entry in every if entry.plannable]  # the spec a plan of it uses
    unplannable = [entry for entry in every if not entry.plannable]
    with report_to_stdout(EXIT_FITS):
        if json_out:
            print(json.dumps(models_json(entries, unplannable), indent=1))
        else:
            render_models(entries, unplannable, stdout_console())


def gpus(
    wide: Annotated[bool, typer.Option("--wide", help="Every alias, the total in bytes and where it was read (wraps below 140 columns).")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the local GPU and the catalog as JSON (aliases, totals, sources, references).")] = False,
) -> None:
    """List the GPU catalog and the local GPU (through NVML), or say that none was found."""

    from capacity.gpu.catalog import CATALOG
    from capacity.gpu.detect import detect_local_gpu
    from reports.catalogs import gpus_json, render_gpus

    local = detect_local_gpu()
    with report_to_stdout(EXIT_FITS):
        if json_out:
            print(json.dumps(gpus_json(local, CATALOG), indent=1))
        else:
            render_gpus(local, CATALOG, stdout_console(), wide=wide)
