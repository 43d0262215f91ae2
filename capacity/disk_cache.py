"""capacity's on-disk cache: results that cost torch or transformers to work out, kept by everything they depend on.

One JSON file per entry, `<root>/<kind>/<key sha256>.json`, holding `{"format", "kind", "key", "value"}`. The key is
the caller's description of the inputs (config and processor sha256s, dtype, knobs) plus `versions()`: capacity's
version, a fingerprint of its own source files, and the torch and transformers versions installed (read from the
packages' metadata, not imported). Any change to those is a new key, so an entry is never stale; an entry that does
not parse, or whose stored key is not the one asked for (a foreign or corrupt file), is ignored and rewritten.

The root is `$CAPACITY_CACHE_DIR`, else the user cache directory (`platformdirs.user_cache_dir("capacity")`).
`CAPACITY_NO_CACHE=1`, the commands' `--no-cache` (`bypassed()`), and an unwritable root all leave the cache out:
the result is worked out again and nothing is written. `capacity cache info|clear` manages it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

FORMAT = "capacity.cache/1"
ENV_DIR = "CAPACITY_CACHE_DIR"
ENV_OFF = "CAPACITY_NO_CACHE"
_TRUE = {"1", "ON", "YES", "TRUE"}
BYTECODE = "bytecode"  # the folder of bytecode_folder(), not a JSON kind
_bypassed = False  # set by `bypassed()` (the commands' --no-cache) for the length of one command

T = TypeVar("T")


def root() -> Path | None:
    """The cache folder, or None when the cache is off (CAPACITY_NO_CACHE=1 or --no-cache)."""
    if _bypassed or (os.environ.get(ENV_OFF) or "").strip().upper() in _TRUE:
        return None
    configured = os.environ.get(ENV_DIR)
    if configured:
        return Path(os.path.expandvars(os.path.expanduser(configured)))
    try:
        import platformdirs
    except ImportError:  # an install without it (a GPU host given wheels by hand): the XDG folder it would give on Linux
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "capacity"
    return Path(platformdirs.user_cache_dir("capacity", appauthor=False))


@contextmanager
def bypassed(active: bool = True) -> Iterator[None]:
    """Within the block the cache is neither read nor written (`--no-cache`)."""
    global _bypassed
    before, _bypassed = _bypassed, active or _bypassed
    try:
        yield
    finally:
        _bypassed = before


def _package_version(name: str) -> str | None:
    from importlib import metadata  # 20-30 ms to import: only when a key is made

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 of capacity's own Python sources (the packages `capacity` and `profilers`), as installed: an
    edit to any of them is a new key."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for package in (here, here.parent / "profilers"):
        for path in sorted(package.rglob("*.py")):
            digest.update(str(path.relative_to(here.parent)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@lru_cache(maxsize=1)
def code_versions() -> dict[str, str | None]:
    from capacity import __version__

    return {"capacity": __version__, "code": code_fingerprint(), "torch": _package_version("torch"), "transformers": _package_version("transformers")}


def versions() -> dict[str, str | None]:
    """What every key carries besides the caller's inputs: capacity's version and sources, torch's and transformers'."""
    return code_versions()


def key_digest(kind: str, key: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of (kind, key, versions())."""
    blob = json.dumps({"kind": kind, "key": key, "versions": versions()}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def sha256_of(data: Any) -> str:
    """sha256 of a JSON value in canonical form (a config dict, a processor config): an input named in a key."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def _entry_path(base: Path, kind: str, digest: str) -> Path:
    return base / kind / f"{digest}.json"


def read(kind: str, key: dict[str, Any]) -> Any | None:
    """The value stored under `key`, or None (off, absent, unreadable, or another key's entry)."""
    base = root()
    if base is None:
        return None
    path = _entry_path(base, kind, key_digest(kind, key))
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    expected = json.loads(json.dumps({"kind": kind, "key": key, "versions": versions()}, sort_keys=True, default=str))
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or {k: entry.get(k) for k in ("kind", "key", "versions")} != expected:
        return None
    return entry.get("value")


def write(kind: str, key: dict[str, Any], value: Any) -> None:
    """Store `value` (plain JSON) under `key`, atomically; a root that cannot be written costs only the next run."""
    base = root()
    if base is None:
        return
    path = _entry_path(base, kind, key_digest(kind, key))
    entry = {"format": FORMAT, "kind": kind, "key": key, "versions": versions(), "value": value}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry, sort_keys=True, default=str))
        os.replace(tmp, path)
    except OSError:
        pass


def shipped_digest(kind: str, key: dict[str, Any]) -> str:
    """sha256 of (kind, key) alone: the key of a value shipped with capacity (package data made by a script from the
    catalog, with the versions it was made with recorded beside it, and a test that regenerates it)."""
    return hashlib.sha256(json.dumps({"kind": kind, "key": key}, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


# Set by a script that makes shipped values: every value `remembered` works out is added here, by shipped_digest.
recording: dict[str, dict[str, Any]] | None = None


def remembered(
    kind: str,
    key: dict[str, Any],
    compute: Callable[[], T],
    encode: Callable[[T], Any],
    decode: Callable[[Any], T],
    shipped: Mapping[str, Any] | None = None,
) -> T:
    """`decode` of the value shipped with capacity (`shipped`, by shipped_digest) or stored in the cache, else
    `compute()`, stored through `encode`. A value that `decode` rejects (raises anything) is worked out again (and
    overwritten in the cache)."""
    if recording is None:
        # the shipped value first: a hit needs no cache key (versions(): capacity's sources read and hashed)
        for look in (lambda: (shipped or {}).get(shipped_digest(kind, key)), lambda: read(kind, key)):
            stored = look()
            if stored is None:
                continue
            try:
                return decode(stored)
            except Exception:  # a corrupt or foreign value: never trusted, worked out again
                continue
    value = compute()
    write(kind, key, encode(value))
    if recording is not None:
        recording[shipped_digest(kind, key)] = {"kind": kind, "key": key, "value": encode(value)}
    return value


@dataclass(frozen=True)
class KindUsage:
    """One kind's entries in the cache folder."""

    kind: str
    entries: int
    bytes: int


def usage() -> tuple[Path | None, tuple[KindUsage, ...]]:
    """The cache folder and, per kind, its entries and bytes."""
    base = root()
    if base is None or not base.is_dir():
        return base, ()
    kinds = []
    for folder in sorted(p for p in base.iterdir() if p.is_dir()):
        files = _entries(folder)
        kinds.append(KindUsage(folder.name, len(files), sum(f.stat().st_size for f in files)))
    return base, tuple(kinds)


def bytecode_folder() -> Path | None:
    """Where a GPU profile keeps the bytecode Python compiles for torch and transformers when the install has none
    and Python may not write it beside the source (profilers/startup.py cache_bytecode); None when the cache is off."""
    base = root()
    return None if base is None else base / BYTECODE


def _entries(folder: Path) -> list[Path]:
    """A kind's entries: its JSON files; the bytecode folder's .pyc files, in the tree that mirrors the sources."""
    if folder.name == BYTECODE:
        return [f for f in folder.rglob("*.pyc") if f.is_file()]
    return [f for f in folder.glob("*.json") if f.is_file()]


def clear() -> tuple[int, int]:
    """Delete every entry (and stray temporary file); returns (files, bytes) removed."""
    base = root()
    if base is None or not base.is_dir():
        return 0, 0
    files = removed = 0
    for folder in (p for p in base.iterdir() if p.is_dir()):
        bytecode = folder.name == BYTECODE  # every file of it: .pyc, and importlib's unfinished <name>.pyc.<id>
        for path in list(folder.rglob("*") if bytecode else folder.iterdir()):
            if path.is_file() and (bytecode or path.suffix == ".json" or path.name.endswith(".tmp")):
                size = path.stat().st_size
                path.unlink(missing_ok=True)
                files, removed = files + 1, removed + size
        for emptied in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with suppress(OSError):
                emptied.rmdir()
        with suppress(OSError):
            folder.rmdir()
    return files, removed
