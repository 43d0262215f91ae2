"""Write (or check) capacity/model/items/shipped_item_tokens.json: the tokens per item that the generic family counts
with transformers classes (feature extractors, image processors, the audio tower on the meta device), worked out for
every catalog entry so that planning one needs neither torch nor transformers.

Each entry is keyed by capacity.disk_cache.shipped_digest(kind, key), the key being the item's modality and the
sha256 of the config and processor files it was counted from; the versions it was made with are recorded in the file.

    python scripts/make_shipped_item_tokens.py          # write the file
    python scripts/make_shipped_item_tokens.py --check  # exit 1 when an entry is not what this install counts
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata, resources
from pathlib import Path

from capacity import disk_cache
from capacity.model.registry import model_spec
from capacity.source.resolve import catalog, resolve_model

FILE = Path(str(resources.files("capacity.model.items").joinpath("shipped_item_tokens.json")))


def counted(names: list[str] | None = None) -> dict[str, dict[str, object]]:
    """Every transformers-built count the catalog's specs make, worked out afresh (the shipped file and cache unread)."""
    disk_cache.recording = {}
    try:
        with disk_cache.bypassed():
            for entry in catalog(include_unplannable=True).values():
                if (entry.plannable or entry.plannable_with_limits) and (names is None or entry.name in names):
                    model_spec(resolve_model(entry.name))
        return dict(sorted(disk_cache.recording.items()))
    finally:
        disk_cache.recording = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    entries = counted()
    if args.check:
        shipped = json.loads(FILE.read_text())["entries"]
        stale = sorted(set(entries) ^ set(shipped) | {d for d in set(entries) & set(shipped) if entries[d] != shipped[d]})
        for digest in stale:
            print(f"stale: {digest} {(entries.get(digest) or shipped.get(digest) or {}).get('key')}", file=sys.stderr)
        return 1 if stale else 0
    made_with = {name: metadata.version(name) for name in ("torch", "transformers")}
    FILE.write_text(json.dumps({"format": "capacity.shipped/1", "made_by": "scripts/make_shipped_item_tokens.py", "made_with": made_with, "entries": entries}, indent=1) + "\n")
    print(f"{len(entries)} item counts -> {FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
