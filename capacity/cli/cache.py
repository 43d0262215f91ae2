"""`capacity cache info|clear`: capacity's disk cache (capacity/disk_cache.py), where it is and what it holds."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from capacity import disk_cache
from capacity.cli.help_layout import ReadableCommand
from capacity.cli.runtime import report_to_stdout
from capacity.errors import EXIT_FITS
from capacity.units import plural

app = typer.Typer(
    no_args_is_help=True,
    help="capacity's disk cache: fake-tensor traces, parameter tables of Hub models and processor counts, kept by everything they "
    "depend on (CAPACITY_CACHE_DIR, else the user cache directory; CAPACITY_NO_CACHE=1 or a command's --no-cache leaves it out).",
)


@app.command(cls=ReadableCommand)
def info(json_out: Annotated[bool, typer.Option("--json", help="Print the cache's folder and its entries per kind as JSON.")] = False) -> None:
    """Where the cache is, and its entries and bytes per kind."""
    root, kinds = disk_cache.usage()
    with report_to_stdout(EXIT_FITS):
        if json_out:
            data = {"folder": None if root is None else str(root), "kinds": [{"kind": k.kind, "entries": k.entries, "bytes": k.bytes} for k in kinds]}
            print(json.dumps(data, indent=1))
            return
        if root is None:
            print("capacity cache: off (CAPACITY_NO_CACHE is set)")
            return
        print(f"capacity cache: {root}")
        for k in kinds:
            print(f"  {k.kind:<14} {k.entries:>6,} {'entry' if k.entries == 1 else 'entries'}  {k.bytes / 2**20:>9.1f} MiB")
        if not kinds:
            print("  empty")


@app.command(cls=ReadableCommand)
def clear() -> None:
    """Delete every entry; the next plan of each model works its entries out again."""
    files, size = disk_cache.clear()
    root = disk_cache.root()
    with report_to_stdout(EXIT_FITS):
        print(f"capacity cache: removed {plural(files, 'entry', 'entries')} ({size / 2**20:.1f} MiB) from {root}" if root is not None else "capacity cache: off (CAPACITY_NO_CACHE is set)")
