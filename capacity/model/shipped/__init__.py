"""Values shipped with capacity for the catalog's entries, worked out with transformers by scripts/make_shipped.py
(which records the torch and transformers versions it ran with): `<kind>.json` holds the entries of one kind of
capacity/disk_cache.py's `remembered`, by `shipped_digest(kind, key)`. Planning a catalog entry reads them instead of
building transformers classes; tests/model/test_shipped.py works every entry out again and compares.

- `item-tokens.json`: tokens per item counted by a feature extractor, an image processor or a tower on the meta
  device (capacity/model/families/generic.py `item_tokens`);
- `configs.json`: configs with transformers' class defaults filled in, as vLLM reads them
  (capacity/model/hf_config.py `materialized`);
- `class-defaults.json`: a config class's default of a field a config.json may omit
  (capacity/memory/weights.py `tied_by_default`).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

FORMAT = "capacity.shipped/1"
KINDS = ("item-tokens", "configs", "class-defaults")


def shipped_file(kind: str) -> Any:
    return resources.files(__name__).joinpath(f"{kind}.json")


@lru_cache(maxsize=8)
def shipped(kind: str) -> dict[str, Any]:
    """The shipped values of `kind`, by shipped_digest (empty when none is shipped)."""
    file = shipped_file(kind)
    if not file.is_file():
        return {}
    data = json.loads(file.read_text())
    return {digest: entry["value"] for digest, entry in data["entries"].items()}
