"""`capacity models` and `capacity gpus`: the built-in catalogs (and the local GPU)."""

from __future__ import annotations

from capacity.cli.runtime import report_to_stdout, stdout_console
from capacity.errors import EXIT_FITS


def models() -> None:
    """List the built-in model catalog (works offline)."""
    from capacity.model.registry import spec_from_files
    from capacity.source.resolve import catalog, catalog_config, catalog_planning_files, catalog_preprocessor
    from reports.terminal import render_models

    entries = catalog().values()
    with report_to_stdout(EXIT_FITS):
        render_models(
            [
                (entry, spec_from_files(catalog_config(entry), entry.name, catalog_preprocessor(entry), catalog_planning_files(entry).get("processor_config.json")))
                for entry in entries
            ],
            stdout_console(),
        )


def gpus() -> None:
    """List the GPU catalog and the local GPU (through NVML), or say that none was found."""

    from capacity.gpu.catalog import catalog_gpus
    from capacity.gpu.detect import detect_local_gpu
    from reports.terminal import render_gpus

    with report_to_stdout(EXIT_FITS):
        render_gpus(detect_local_gpu(), catalog_gpus(), stdout_console())
