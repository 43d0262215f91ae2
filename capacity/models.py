"""Resolve `--model` to a model source: a local folder, the local Hugging Face cache, or the catalog.

Order: an existing folder holding config.json; a Hugging Face id present in the local HF cache
(offline, never downloads); an entry or alias of the built-in catalog (package data).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from capacity.errors import BadInput

CATALOG_PACKAGE = "capacity.catalog"


@dataclass(frozen=True)
class ModelSource:
    """Where a model's config came from, and the raw files found there."""

    name: str  # canonical id (catalog / HF id) or the folder path
    requested: str  # what the user typed
    origin: str  # "catalog" | "folder" | "hf-cache"
    config: dict[str, Any] = field(repr=False)
    path: str | None = None
    preprocessor: dict[str, Any] | None = field(default=None, repr=False)
    processor: dict[str, Any] | None = field(default=None, repr=False)  # processor_config.json
    safetensors: tuple[str, ...] = ()
    provenance: str | None = None
    alias_note: str | None = None

    @property
    def config_sha256(self) -> str:
        blob = json.dumps(self.config, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "requested": self.requested,
            "origin": self.origin,
            "path": self.path,
            "provenance": self.provenance,
            "alias_note": self.alias_note,
            "config_sha256": self.config_sha256,
            "safetensors_files": len(self.safetensors),
        }


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    file: str
    provenance: str
    aliases: tuple[str, ...]


def catalog() -> dict[str, CatalogEntry]:
    """The built-in catalog, keyed by canonical id."""
    index = json.loads(resources.files(CATALOG_PACKAGE).joinpath("index.json").read_text())
    entries: dict[str, CatalogEntry] = {}
    for name, meta in index["models"].items():
        entries[name] = CatalogEntry(
            name=name,
            file=name.replace("/", "--") + ".json",
            provenance=meta["provenance"],
            aliases=tuple(meta.get("aliases", ())),
        )
    return entries


def catalog_config(entry: CatalogEntry) -> dict[str, Any]:
    return json.loads(resources.files(CATALOG_PACKAGE).joinpath("models").joinpath(entry.file).read_text())


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} {path} is not valid JSON (line {exc.lineno}): fix or replace the file") from exc
    if not isinstance(data, dict):
        raise BadInput(f"{what} {path} must hold a JSON object, not {type(data).__name__}")
    return data


def _from_folder(folder: Path, requested: str, origin: str, name: str | None = None) -> ModelSource:
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise BadInput(f"folder {folder} has no config.json: point --model at a model folder or a catalog id (see `capacity models`)")
    config = _read_json(config_path, "config")
    pre_path = folder / "preprocessor_config.json"
    preprocessor = _read_json(pre_path, "preprocessor config") if pre_path.is_file() else None
    proc_path = folder / "processor_config.json"
    processor = _read_json(proc_path, "processor config") if proc_path.is_file() else None
    shards = tuple(sorted(str(p) for p in folder.glob("*.safetensors")))
    return ModelSource(
        name=name or str(folder),
        requested=requested,
        origin=origin,
        config=config,
        path=str(folder),
        preprocessor=preprocessor,
        processor=processor,
        safetensors=shards,
    )


def hf_cache_dir() -> Path:
    """The hub cache folder, as huggingface_hub resolves it (HF_HUB_CACHE, HF_HOME, ~/.cache)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.environ["HUGGINGFACE_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def _from_hf_cache(model_id: str) -> ModelSource | None:
    repo = hf_cache_dir() / ("models--" + model_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    candidates: list[Path] = []
    if ref.is_file():
        candidates.append(snapshots / ref.read_text().strip())
    candidates += sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    for snap in candidates:
        if (snap / "config.json").is_file():
            return _from_folder(snap, model_id, "hf-cache", name=model_id)
    return None


def _catalog_lookup(requested: str) -> tuple[CatalogEntry, str | None] | None:
    entries = catalog()
    key = requested.strip().lower()
    for entry in entries.values():
        if entry.name.lower() == key:
            return entry, None
    for entry in entries.values():
        if any(alias.lower() == key for alias in entry.aliases):
            return entry, f"'{requested}' is an alias: planning for the catalog entry {entry.name}"
    return None


def closest_catalog_names(requested: str, n: int = 3) -> list[str]:
    entries = catalog()
    names = {e.name.lower(): e.name for e in entries.values()}
    for e in entries.values():
        for alias in e.aliases:
            names.setdefault(alias.lower(), e.name)
    hits = difflib.get_close_matches(requested.lower(), list(names), n=n * 2, cutoff=0.3)
    # Also match on the part after the org, which users often get wrong.
    tail = requested.lower().rsplit("/", 1)[-1]
    hits += difflib.get_close_matches(tail, [k.rsplit("/", 1)[-1] for k in names], n=n, cutoff=0.5)
    out: list[str] = []
    for hit in hits:
        for key, canonical in names.items():
            if (key == hit or key.rsplit("/", 1)[-1] == hit) and canonical not in out:
                out.append(canonical)
    return out[:n]


def resolve_model(requested: str) -> ModelSource:
    """Resolve `--model`; raise BadInput with the closest catalog names when nothing matches."""
    if not requested or not requested.strip():
        raise BadInput("--model is empty: give a catalog id (see `capacity models`), a HF id in the local cache, or a folder")
    path = Path(requested).expanduser()
    if path.is_dir():
        return _from_folder(path, requested, "folder")
    if path.exists():
        raise BadInput(f"--model {requested} is a file, not a folder: point it at the folder that holds config.json")
    looks_like_path = requested.startswith((".", "/", "~")) or os.sep + os.sep in requested
    if not looks_like_path and requested.count("/") == 1:
        cached = _from_hf_cache(requested)
        if cached is not None:
            return cached
    found = _catalog_lookup(requested)
    if found is not None:
        entry, note = found
        return ModelSource(
            name=entry.name,
            requested=requested,
            origin="catalog",
            config=catalog_config(entry),
            provenance=entry.provenance,
            alias_note=note,
        )
    if looks_like_path:
        raise BadInput(f"--model {requested}: no such folder; point it at a folder holding config.json")
    close = closest_catalog_names(requested)
    hint = f"closest catalog names: {', '.join(close)}" if close else "see `capacity models` for the catalog"
    raise BadInput(
        f"unknown model '{requested}' (not a folder, not in the local HF cache, not in the catalog); {hint}; "
        "or pass --model /path/to/folder with config.json"
    )
