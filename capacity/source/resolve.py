"""Resolve `--model` (and `--revision`) to a model source.

Order (docs/getting-started.md, `capacity plan --help`): an existing folder holding config.json; an id or alias of the
built-in catalog (package data); a Hugging Face id in the local HF cache (no network); the Hugging Face Hub
(`capacity/source/hub.py`: only the planning files and the safetensors headers, into the HF cache). With `--revision`
the catalog is skipped (it has no revisions) and a folder is refused.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

from capacity.disk_cache import sha256_of
from capacity.errors import BadInput
from capacity.source import catalog as catalog_files
from capacity.source.checkpoint import CheckpointWeights, folder_weights
from capacity.user_files import read_text


@dataclass(frozen=True)
class ModelSource:
    """Where a model's config came from, and the raw files found there."""

    name: str  # canonical id (catalog / HF id) or the folder path
    requested: str  # what the user typed
    origin: str  # "catalog" | "folder" | "hf-cache" | "hub"
    config: dict[str, Any] = field(repr=False)
    path: str | None = None
    preprocessor: dict[str, Any] | None = field(default=None, repr=False)
    safetensors: tuple[str, ...] = ()  # local shard files (the profiler loads real weights from them)
    provenance: str | None = None
    alias_note: str | None = None
    revision: str | None = None  # --revision as given (Hub ids only)
    commit: str | None = None  # the HF cache snapshot's commit hash
    weights: CheckpointWeights | None = field(default=None, repr=False)  # what the safetensors headers say it stores
    # the planning files found beside config.json, by Hub file name (PLANNING_FILES: processor configs,
    # generation_config.json, model.safetensors.index.json)
    files: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    # where a recorded parameter table may be (capacity/source/parameter_table.py): a catalog entry's, beside its config
    parameter_table: Any = field(default=None, repr=False, compare=False)
    # the config before --hf-overrides that change no parameter's shape (RoPE keys): its parameters are the model's
    config_before_overrides: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def processor(self) -> dict[str, Any] | None:
        """The published processor_config.json, when the source holds one."""
        return self.files.get("processor_config.json")

    @property
    def video_preprocessor(self) -> dict[str, Any] | None:
        """The published video_preprocessor_config.json, when the source holds one."""
        return self.files.get("video_preprocessor_config.json")

    @property
    def config_sha256(self) -> str:
        return sha256_of(self.config)

    @property
    def shapes_config(self) -> dict[str, Any]:
        """The config the parameters' names and shapes come from: the one before --hf-overrides that change none."""
        return self.config if self.config_before_overrides is None else self.config_before_overrides

    @property
    def shapes_config_sha256(self) -> str:
        return sha256_of(self.shapes_config)

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
            "revision": self.revision,
            "commit": self.commit,
            "safetensors": None if self.weights is None else self.weights.to_dict(),
        }


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    provenance: str
    aliases: tuple[str, ...]
    plannable: bool = True  # false while no family plans it right: catalog() leaves it out, resolve_model refuses it
    not_plannable: str = ""  # why, when plannable is false
    # Resolves although not plannable as a whole: its family plans it once the user turns off what cannot be counted
    # (--limit-mm-per-prompt <modality>=0) and refuses it otherwise, in one line naming the flag.
    plannable_with_limits: bool = False

    @property
    def resolves(self) -> bool:
        """A plan of this id is made from the catalog's files (plannable, or once a modality is turned off)."""
        return self.plannable or self.plannable_with_limits


def catalog(include_unplannable: bool = False) -> dict[str, CatalogEntry]:
    """The built-in catalog, keyed by canonical id: the entries capacity plans, or every entry."""
    entries: dict[str, CatalogEntry] = {}
    for name, meta in catalog_files.read_index()["models"].items():
        entry = CatalogEntry(
            name=name,
            provenance=meta["provenance"],
            aliases=tuple(meta.get("aliases", ())),
            plannable=bool(meta.get("plannable", True)),
            not_plannable=meta.get("not_plannable", ""),
            plannable_with_limits=bool(meta.get("plannable_with_limits", False)),
        )
        if entry.plannable or include_unplannable:
            entries[name] = entry
    return entries


def catalog_config(entry: CatalogEntry) -> dict[str, Any]:
    config = catalog_files.read_model_file(entry.name, "config.json")
    assert config is not None, f"catalog entry {entry.name} has no config.json"
    return config


def catalog_preprocessor(entry: CatalogEntry) -> dict[str, Any] | None:
    """The published preprocessor_config.json of a catalog entry, when the catalog holds one."""
    return catalog_files.read_model_file(entry.name, "preprocessor_config.json")


CATALOG_SUMMARY_FILE = "capacity.safetensors-summary.json"  # a recorded header summary (capacity/source/catalog/README.md)


def catalog_weights(entry: CatalogEntry) -> CheckpointWeights | None:
    """What a catalog entry records of its checkpoint (capacity/source/catalog/README.md, "Checkpoint summaries")."""
    return recorded_checkpoint(resources.files(catalog_files.__name__).joinpath("models").joinpath(catalog_files.stem(entry.name)), f"catalog {entry.name}")


def catalog_parameter_table(entry: CatalogEntry) -> Any:
    """Where a catalog entry's parameter table is (capacity/source/parameter_table.py), whether or not it exists."""
    return catalog_files.parameter_table_file(entry.name)


def catalog_planning_files(entry: CatalogEntry) -> dict[str, dict[str, Any]]:
    """The published planning files a catalog entry holds beside config.json, by Hub file name."""
    found = {name: catalog_files.read_model_file(entry.name, name) for name in catalog_files.MODEL_FILES if name != "config.json"}
    return {name: data for name, data in found.items() if data is not None}


def catalog_source(entry: CatalogEntry, requested: str | None = None, alias_note: str | None = None) -> ModelSource:
    """A catalog entry as --model resolves it: its config, published planning files and recorded checkpoint."""
    return ModelSource(
        name=entry.name,
        requested=requested or entry.name,
        origin="catalog",
        config=catalog_config(entry),
        preprocessor=catalog_preprocessor(entry),
        provenance=entry.provenance,
        alias_note=alias_note,
        weights=catalog_weights(entry),
        files=catalog_planning_files(entry),
        parameter_table=catalog_parameter_table(entry),
    )


def recorded_checkpoint(folder: Any, where: str) -> CheckpointWeights | None:
    """The header summary recorded in `folder` (a Path or a package Traversable), else None (the weights then come
    from a meta-device build; a published index's metadata is not used, see capacity/source/checkpoint.py)."""
    summary = folder.joinpath(CATALOG_SUMMARY_FILE)
    if not summary.is_file():
        return None
    recorded = CheckpointWeights.from_dict(json.loads(summary.read_text()), f"{where}/{CATALOG_SUMMARY_FILE}")
    return replace(recorded, source=f"{recorded.source}, recorded in the catalog")


def _read_json(path: Path, what: str) -> dict[str, Any]:
    text = read_text(path, what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} {path} is not valid JSON (line {exc.lineno}): fix or replace the file") from exc
    if not isinstance(data, dict):
        raise BadInput(f"{what} {path} must hold a JSON object, not {type(data).__name__}")
    return data


def _planning_files(folder: Path) -> dict[str, dict[str, Any]]:
    from capacity.source.hub import PLANNING_FILES

    return {name: _read_json(folder / name, name) for name in PLANNING_FILES[1:] if (folder / name).is_file()}


def _from_folder(folder: Path, requested: str) -> ModelSource:
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise BadInput(f"folder {folder} has no config.json: point --model at a model folder or a catalog id (see `capacity models`)")
    files = _planning_files(folder)
    return ModelSource(
        name=str(folder),
        requested=requested,
        origin="folder",
        config=_read_json(config_path, "config"),
        path=str(folder),
        preprocessor=files.get("preprocessor_config.json"),
        safetensors=tuple(sorted(str(p) for p in folder.glob("*.safetensors"))),
        weights=folder_weights(folder),
        files=files,
    )


def _from_snapshot(snapshot: Any, requested: str) -> ModelSource:
    """A Hub repo's snapshot folder in the HF cache (found there, or just fetched into it)."""
    folder: Path = snapshot.folder
    files = _planning_files(folder)
    return ModelSource(
        name=snapshot.repo_id,
        requested=requested,
        origin=snapshot.origin,
        config=_read_json(folder / "config.json", "config"),
        path=str(folder),
        preprocessor=files.get("preprocessor_config.json"),
        safetensors=tuple(sorted(str(p) for p in folder.glob("*.safetensors"))),
        revision=snapshot.revision,
        commit=snapshot.commit,
        weights=snapshot.weights,
        files=files,
    )


def _catalog_lookup(requested: str) -> tuple[CatalogEntry, str | None] | None:
    entries = catalog(include_unplannable=True)
    key = requested.strip().lower()
    for entry in entries.values():
        if entry.name.lower() == key:
            return entry, None
    for entry in entries.values():
        if any(alias.lower() == key for alias in entry.aliases):
            return entry, f"'{requested}' is an alias: planning for the catalog entry {entry.name}"
    return None


def closest_catalog_names(requested: str, n: int = 3) -> list[str]:
    entries = catalog(include_unplannable=True)
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


def resolve_model(requested: str, revision: str | None = None) -> ModelSource:
    """Resolve `--model`: folder, catalog id or alias, HF cache, Hub; BadInput (one line) when nothing matches."""
    if not requested or not requested.strip():
        raise BadInput("--model is empty: give a catalog id (see `capacity models`), a Hugging Face id (org/name) or a folder")
    if revision is not None and not revision.strip():
        raise BadInput("--revision is empty: give a branch, tag or commit of the Hub repo")
    path = Path(requested).expanduser()
    if path.is_dir():
        if revision is not None:
            raise BadInput(f"--revision {revision}: --model {requested} is a folder, which has no revisions; drop --revision or pass a Hub id")
        return _from_folder(path, requested)
    if path.exists():
        raise BadInput(f"--model {requested} is a file, not a folder: point it at the folder that holds config.json")
    looks_like_path = requested.startswith((".", "/", "~")) or os.sep + os.sep in requested
    found = _catalog_lookup(requested)
    if found is not None and revision is None:
        entry, note = found
        if not entry.resolves:
            # The catalog lacks what planning needs (a processor file not found in public copies): the HF cache or
            # the Hub hold the whole repo, so they are tried before the entry is refused.
            try:
                return _from_hub(entry.name, None, requested, list)
            except BadInput as exc:
                raise BadInput(
                    f"catalog entry {entry.name} cannot be planned yet ({entry.not_plannable}); its published files are in the catalog, "
                    f"and the HF cache and the Hub did not give the rest ({' '.join(str(exc).split())})"
                ) from exc
        return catalog_source(entry, requested, note)
    if looks_like_path:
        raise BadInput(f"--model {requested}: no such folder; point it at a folder holding config.json")
    from capacity.source.hub import REPO_ID  # past the catalog: a catalog plan does not import the Hub's module

    if not REPO_ID.fullmatch(requested.strip()):
        if found is not None:  # a catalog alias with --revision
            raise BadInput(f"--revision applies to Hub ids: '{requested}' is a catalog alias; pass --model {found[0].name} --revision {revision}")
        close = closest_catalog_names(requested)
        hint = f"closest catalog names: {', '.join(close)}" if close else "see `capacity models` for the catalog"
        raise BadInput(f"unknown model '{requested}' (not a folder, not in the catalog, not a Hugging Face id org/name); {hint}; or pass --model /path/to/folder with config.json")
    return _from_hub(requested.strip(), revision, requested, partial(closest_catalog_names, requested))


def _from_hub(repo_id: str, revision: str | None, requested: str, close: Callable[[], list[str]]) -> ModelSource:
    """The repo's snapshot in the HF cache, else fetched from the Hub (BadInput, one line, when neither answers)."""
    from capacity.source.hub import HubSettings, cached_snapshot, fetch_snapshot

    settings = HubSettings.from_env()
    snapshot = cached_snapshot(repo_id, revision, settings) or fetch_snapshot(repo_id, revision, settings, close)
    return _from_snapshot(snapshot, requested)
