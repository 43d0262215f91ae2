"""Hugging Face model ids: the local HF cache (pure file reads) and the Hub (its HTTP endpoints).

The Hub is asked only for what planning reads (capacity/source/hub_http.py): the model info (commit and file list),
`config.json`, the processor configs, `generation_config.json` and the safetensors index, written into the standard
HF cache, and the safetensors headers (HTTP range reads of each shard's header, never the weights). The headers'
summary is recorded in the HF assets cache under the commit it was read at, so a later run plans the same weights
from the cache, also with `HF_HUB_OFFLINE=1`.

Settings come from the environment at call time (`HubSettings.from_env`) and are passed explicitly (endpoint,
cache folder, timeouts), because `huggingface_hub.constants` reads HF_ENDPOINT, HF_HOME, HF_HUB_CACHE and
HF_HUB_OFFLINE once, when it is first imported. `huggingface_hub` is imported only for its token lookup (when a
token exists), its error classes (when the Hub refuses) and its constants, so planning from the cache, a folder or
the catalog never imports it, and a plan of a public repo imports no HTTP library beyond the standard one. Every
failure is one line (BadInput, exit 2).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from capacity.errors import BadInput
from capacity.source.checkpoint import INDEX_FILE, SINGLE_FILE, CheckpointWeights, folder_weights, summarize_headers

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_TIMEOUT_S = 10.0  # huggingface_hub's own default for metadata calls (HF_HUB_ETAG_TIMEOUT)
# The files planning reads, by their Hub names; config.json is required, the others are fetched when the repo has them.
PLANNING_FILES = (
    "config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
    "generation_config.json",
    INDEX_FILE,
)
COMMIT = re.compile(r"[0-9a-f]{40}")
SHARD_NAME = re.compile(r"[^/]+-\d{5}-of-\d{5}\.safetensors")  # a shard as save_torch_state_dict names it
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_TRUE = {"1", "ON", "YES", "TRUE"}


def _flag(name: str) -> bool:
    return (os.environ.get(name) or "").strip().upper() in _TRUE


@dataclass(frozen=True)
class HubSettings:
    """Where the Hub and the caches are, read from the environment the way huggingface_hub reads it."""

    endpoint: str
    cache_dir: Path  # HF_HUB_CACHE
    assets_dir: Path  # HF_ASSETS_CACHE: capacity's recorded header summaries live here
    offline: bool  # HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE)
    timeout_s: float

    @classmethod
    def from_env(cls) -> HubSettings:
        def path(value: str) -> Path:
            return Path(os.path.expandvars(os.path.expanduser(value)))

        home = path(os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface"))
        cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
        assets = os.environ.get("HF_ASSETS_CACHE") or os.environ.get("HUGGINGFACE_ASSETS_CACHE")
        try:
            timeout = float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or DEFAULT_TIMEOUT_S)
        except ValueError:
            timeout = DEFAULT_TIMEOUT_S
        return cls(
            endpoint=(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            cache_dir=path(cache) if cache else home / "hub",
            assets_dir=path(assets) if assets else home / "assets",
            offline=_flag("HF_HUB_OFFLINE") or _flag("TRANSFORMERS_OFFLINE"),
            timeout_s=timeout,
        )


@dataclass(frozen=True)
class Snapshot:
    """One revision of a Hub repo as a folder of the HF cache, with what its safetensors headers say."""

    repo_id: str
    revision: str | None  # as asked (None: main)
    commit: str  # the snapshot's commit hash
    folder: Path  # <HF_HUB_CACHE>/models--org--name/snapshots/<commit>
    origin: str  # "hf-cache" (found there) | "hub" (fetched now)
    weights: CheckpointWeights | None  # None: no safetensors headers known, the weights come from a meta build


# --- the local cache (no huggingface_hub import) ---------------------------------------------------------


def repo_folder(settings: HubSettings, repo_id: str) -> Path:
    return settings.cache_dir / ("models--" + repo_id.replace("/", "--"))


def summary_path(settings: HubSettings, repo_id: str, commit: str) -> Path:
    """Where the header summary of one commit is recorded: huggingface_hub's `cached_assets_path` layout
    (<HF_ASSETS_CACHE>/<library>/<namespace>/<subfolder>), library "capacity", subfolder "safetensors"."""
    return settings.assets_dir / "capacity" / ("models--" + repo_id.replace("/", "--")) / "safetensors" / f"{commit}.json"


def recorded_weights(settings: HubSettings, repo_id: str, commit: str) -> CheckpointWeights | None:
    path = summary_path(settings, repo_id, commit)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read the recorded safetensors summary {path} ({exc}): delete it and plan online once") from exc
    if not isinstance(data, dict):
        raise BadInput(f"{path} is not a safetensors summary: delete it and plan online once")
    recorded = CheckpointWeights.from_dict(data, str(path))
    return replace(recorded, source=f"{recorded.source}, recorded in the HF assets cache")


def record_weights(settings: HubSettings, repo_id: str, commit: str, weights: CheckpointWeights) -> None:
    """Write the summary atomically; a cache that cannot be written only costs the next run a meta build."""
    path = summary_path(settings, repo_id, commit)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**weights.to_dict(), "repo_id": repo_id, "commit": commit, **weights.tensors_dict()}) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass


def snapshot_weights(settings: HubSettings, repo_id: str, commit: str, folder: Path) -> CheckpointWeights | None:
    """Shards downloaded into the snapshot, else the summary recorded when the Hub was read (None: a meta build)."""
    return folder_weights(folder, strict=False) or recorded_weights(settings, repo_id, commit)


def cached_snapshot(repo_id: str, revision: str | None, settings: HubSettings) -> Snapshot | None:
    """The cached snapshot of `revision` (a branch or tag through refs/, or a commit; None: main) holding config.json,
    as huggingface_hub finds a file offline."""
    repo = repo_folder(settings, repo_id)
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    wanted = revision or "main"
    commits: list[str] = []
    if COMMIT.fullmatch(wanted):
        commits.append(wanted)
    elif (repo / "refs" / wanted).is_file():
        commits.append((repo / "refs" / wanted).read_text().strip())
    for commit in commits:
        folder = snapshots / commit
        if (folder / "config.json").is_file():
            return Snapshot(repo_id, revision, commit, folder, "hf-cache", snapshot_weights(settings, repo_id, commit, folder))
    return None


# --- the Hub ---------------------------------------------------------------------------------------------


def fetch_snapshot(repo_id: str, revision: str | None, settings: HubSettings, closest: Callable[[], list[str]]) -> Snapshot:
    """Download the planning files of `repo_id` at `revision` into the HF cache and read its safetensors headers
    (capacity/source/hub_http.py: one model-info call, one GET per file, range reads of each shard's header).
    `closest` gives the catalog ids an error names; it runs only when there is an error to explain."""
    where = f"{repo_id}" + (f" at revision {revision}" if revision else "")
    if settings.offline:
        raise BadInput(f"{where} is not in the HF cache ({settings.cache_dir}) and HF_HUB_OFFLINE=1 forbids the Hub: {_alternatives(closest, offline=True)}")
    from capacity.source import hub_http

    rev = revision or "main"
    hub, timeout = settings.endpoint, settings.timeout_s
    try:
        with _quiet():
            commit, names = hub_http.model_info(hub, repo_id, rev, timeout)
            if "config.json" not in names:
                raise BadInput(_no_config(where, names))
            headers = _files_and_headers(settings, repo_id, commit, [n for n in PLANNING_FILES if n in names], _listed_shards(names))
            folder = hub_http.snapshot_folder(settings.cache_dir, repo_id, commit)
            weights = None
            shards = _shards(folder, names)
            if shards:
                missed = [s for s in shards if s not in headers]  # the index names a shard the file list did not suggest
                headers.update(zip(missed, hub_http.each(lambda shard: hub_http.safetensors_header(hub, repo_id, commit, shard, timeout), missed), strict=True))
                read = {s: _value(headers[s]) for s in shards}
                weights = summarize_headers(read, f"safetensors headers of {repo_id}@{commit[:12]} read from the Hub (HTTP ranges, no weights)")
                record_weights(settings, repo_id, commit, weights)
            hub_http.pin(settings.cache_dir, repo_id, rev, commit)
    except BadInput:
        raise
    except Exception as exc:
        raise explain(exc, where, repo_id, settings, closest) from exc
    return Snapshot(repo_id, revision, commit, folder, "hub", weights)


def _files_and_headers(settings: HubSettings, repo_id: str, commit: str, files: list[str], guessed: list[str]) -> dict[str, Any]:
    """Download the planning files and read the guessed shards' headers in one concurrent round (the index, which
    names the shards for certain, is among the files). A guessed shard's error is kept as its value: it is raised
    only if the index names that shard."""
    from capacity.source import hub_http

    hub, timeout = settings.endpoint, settings.timeout_s

    def header(shard: str) -> Any:
        try:
            return hub_http.safetensors_header(hub, repo_id, commit, shard, timeout)
        except Exception as exc:  # noqa: BLE001 (kept, raised by _value if the shard is one the index names)
            return _Failed(exc)

    jobs: list[Callable[[], Any]] = [functools.partial(hub_http.download_file, hub, settings.cache_dir, repo_id, commit, f, timeout) for f in files]
    jobs += [functools.partial(header, shard) for shard in guessed]
    done = hub_http.each(lambda job: job(), jobs)
    return dict(zip(guessed, done[len(files) :], strict=True))


@dataclass(frozen=True)
class _Failed:
    error: Exception


def _value(got: Any) -> Any:
    if isinstance(got, _Failed):
        raise got.error
    return got


def _listed_shards(names: set[str]) -> list[str]:
    """The shards the file list suggests before the index is read: model.safetensors, or the top-level
    `<name>-NNNNN-of-NNNNN.safetensors` files of a repo with an index (what the index names in every checkpoint
    huggingface_hub's save_torch_state_dict writes)."""
    if SINGLE_FILE in names:
        return [SINGLE_FILE]
    if INDEX_FILE not in names:
        return []
    return sorted(n for n in names if SHARD_NAME.fullmatch(n))


def _shards(folder: Path, names: set[str]) -> list[str]:
    """The safetensors files that hold the checkpoint, as huggingface_hub's get_safetensors_metadata picks them:
    model.safetensors when the repo has it, else the shards its index's weight_map names (sorted), else none."""
    if SINGLE_FILE in names:
        return [SINGLE_FILE]
    if INDEX_FILE not in names:
        return []
    try:
        index = json.loads((folder / INDEX_FILE).read_text())
    except ValueError as exc:
        raise BadInput(f"{INDEX_FILE} of {folder.parent.parent.name} is not valid JSON ({exc}): the checkpoint cannot be planned from it") from exc
    weight_map = index.get("weight_map", {}) if isinstance(index, dict) else {}
    return sorted({str(v) for v in weight_map.values()})


def explain(exc: BaseException, where: str, repo_id: str, settings: HubSettings, closest: Callable[[], list[str]]) -> BadInput:
    """One line for what went wrong talking to the Hub, and what to do."""
    from huggingface_hub import errors

    hub = settings.endpoint
    if isinstance(exc, errors.GatedRepoError):
        return BadInput(
            f"{repo_id} is a gated repo ({_status(exc)}): accept its terms at {hub}/{repo_id}, then set HF_TOKEN to a read token "
            "(export HF_TOKEN=hf_...) or run `hf auth login`"
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return BadInput(f"{where}: no such revision on {hub}/{repo_id}: pass a branch, tag or commit of the repo to --revision")
    if isinstance(exc, errors.RepositoryNotFoundError) or (isinstance(exc, errors.HfHubHTTPError) and _status(exc) == "HTTP 404"):
        # a 404 without the Hub's error code (a proxy or mirror) is the same answer: huggingface_hub then raises its
        # generic error, whose text is the HTTP library's (a status line and a web link): none of it is shown
        token = "" if (os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")) else "; a private repo needs HF_TOKEN"
        names = closest()
        hint = f"closest catalog ids: {', '.join(names)}" if names else "see `capacity models` for the catalog"
        return BadInput(f"no model `{repo_id}` on the Hub ({hub}, {_status(exc)}{token}), and it is not a folder, a catalog id or in the HF cache; {hint}")
    if isinstance(exc, errors.SafetensorsParsingError):
        file = re.search(r"for '([^']+)'", str(exc))
        name = file.group(1) if file else "a safetensors file"
        reason = re.search(r"\): ([^.]+)", str(exc))
        why = reason.group(1) if reason else _first_line(exc)
        return BadInput(f"corrupt or truncated safetensors header: {name} of {where} on {hub} ({why}): the checkpoint cannot be planned from it")
    if isinstance(exc, errors.OfflineModeIsEnabled):
        return BadInput(f"{where} is not in the HF cache and offline mode forbids the Hub: {_alternatives(closest, offline=True)}")
    if isinstance(exc, errors.LocalEntryNotFoundError):  # the HEAD call failed and the file is not cached: the network
        return BadInput(f"cannot reach the Hub at {hub} for {where} ({_describe(exc)}): {_alternatives(closest)}")
    if isinstance(exc, errors.EntryNotFoundError):
        return BadInput(f"{where} on {hub} has no config.json: capacity plans from a transformers config.json")
    if isinstance(exc, errors.HFValidationError):
        return BadInput(f"'{repo_id}' is not a valid Hub id ({_first_line(exc)}): use org/name, a catalog id or a folder")
    if isinstance(exc, errors.HfHubHTTPError):
        said = _server_message(exc)
        return BadInput(f"the Hub at {hub} refused {where} ({_status(exc)}{': ' + said if said else ''}): {_alternatives(closest)}")
    if _network_error(exc):
        return BadInput(f"cannot reach the Hub at {hub} for {where} ({_describe(exc)}): {_alternatives(closest)}")
    if isinstance(exc, OSError):  # the cache itself: a read-only or full disk
        return BadInput(f"cannot write the HF cache {settings.cache_dir} for {where} ({_describe(exc)}): set HF_HOME or HF_HUB_CACHE to a writable folder")
    raise exc


def _alternatives(closest: Callable[[], list[str]], offline: bool = False) -> str:
    names = closest()
    catalog = f"a catalog id (closest: {', '.join(names)})" if names else "a catalog id (see `capacity models`)"
    if offline:
        return f"plan {catalog} or a folder with config.json, or fetch it once online"
    return f"plan {catalog}, a folder with config.json, or set HF_HUB_OFFLINE=1 to plan from the HF cache"


def _no_config(where: str, names: set[str]) -> str:
    gguf = sorted(n for n in names if n.endswith(".gguf"))
    if gguf:
        shown = ", ".join(gguf[:3]) + (f" and {len(gguf) - 3} more" if len(gguf) > 3 else "")
        return f"{where} has no config.json, only GGUF files ({shown}): capacity plans from a transformers config.json; plan the repo the GGUF was converted from"
    shown = ", ".join(sorted(names)[:5]) or "no files"
    return f"{where} has no config.json ({shown}): capacity plans from a transformers config.json"


def _network_error(exc: BaseException) -> bool:
    """A transport failure of whichever HTTP client huggingface_hub uses (httpx, httpx2, requests), or the socket's."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (ConnectionError, TimeoutError)):
            return True
        if type(seen).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "httpcore2", "requests", "urllib3", "socket"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _describe(exc: BaseException) -> str:
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    return f"{type(root).__name__}: {_first_line(root)}" if _first_line(root) else type(root).__name__


def _status(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return f"HTTP {code}" if code else type(exc).__name__


def _server_message(exc: BaseException) -> str:
    """What the Hub itself said about a refused request (its X-Error-Message header), never the HTTP library's text."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    return " ".join(str(headers.get("X-Error-Message", "")).split())[:200]


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2])[:200]


@contextmanager
def _quiet() -> Iterator[None]:
    """No library warnings on stderr while the Hub is read (the CLI's stderr holds one line)."""
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
