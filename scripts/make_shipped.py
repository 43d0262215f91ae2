"""Write (or check) capacity/model/shipped/<kind>.json: what planning the catalog's entries works out with
transformers (tokens per item counted by its processor classes, configs with its class defaults filled in, class
defaults of omitted fields), so that planning a catalog entry needs neither torch nor transformers.

Every entry is recorded as capacity.disk_cache.remembered works it out (keyed by shipped_digest(kind, key): the
sha256 of the config and processor files it came from), with the torch and transformers versions of this install.

    python scripts/make_shipped.py          # write the files
    python scripts/make_shipped.py --check  # exit 1 when an entry is not what this install works out
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path

from capacity import disk_cache
from capacity.gpu.catalog import gpu_by_name
from capacity.memory import weights
from capacity.model import hf_config
from capacity.model.registry import model_spec
from capacity.model.shipped import FORMAT, KINDS, shipped_file
from capacity.planning.planner import build_plan
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.source.resolve import catalog, resolve_model


def forget_in_process_memos() -> None:
    """The memos in front of disk_cache.remembered, so that every value is asked for again and recorded."""
    hf_config._materialized_json.cache_clear()
    weights.tied_by_default.cache_clear()
    weights._WEIGHTS.clear()


def worked_out(names: list[str] | None = None) -> dict[str, dict[str, dict[str, object]]]:
    """Every value the catalog's formula plans work out with transformers, afresh (shipped files and cache unread),
    by kind."""
    forget_in_process_memos()
    disk_cache.recording = {}
    try:
        with disk_cache.bypassed():
            for entry in catalog(include_unplannable=True).values():
                if entry.resolves and (names is None or entry.name in names):
                    source = resolve_model(entry.name)
                    spec = model_spec(source)
                    gpu = gpu_by_name("H200")
                    limits = {"image": 0} if entry.plannable_with_limits else None
                    try:
                        serving = resolve_serving(ServingArgs(limit_mm_per_prompt=limits), spec, gpu)
                        build_plan(source, spec, gpu, serving)
                    except Exception as exc:  # the spec's values are recorded; a plan the entry refuses is not needed
                        print(f"{entry.name}: plan not built ({type(exc).__name__}: {exc})", file=sys.stderr)
        recorded = disk_cache.recording
    finally:
        disk_cache.recording = None
    return {kind: dict(sorted((d, e) for d, e in recorded.items() if e["kind"] == kind)) for kind in KINDS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    made_with = {name: metadata.version(name) for name in ("torch", "transformers")}
    stale = 0
    for kind, entries in worked_out().items():
        path = Path(str(shipped_file(kind)))
        if args.check:
            shipped = json.loads(path.read_text())["entries"] if path.is_file() else {}
            for digest in sorted(set(entries) ^ set(shipped) | {d for d in set(entries) & set(shipped) if entries[d] != shipped[d]}):
                stale += 1
                print(f"stale: {kind} {(entries.get(digest) or shipped.get(digest) or {}).get('key')}", file=sys.stderr)
            continue
        path.write_text(json.dumps({"format": FORMAT, "made_by": "scripts/make_shipped.py", "made_with": made_with, "entries": entries}, indent=1) + "\n")
        print(f"{kind}: {len(entries)} entries -> {path}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
