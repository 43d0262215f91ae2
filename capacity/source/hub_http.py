"""The Hub's HTTP endpoints capacity asks, and the HF cache they fill.

One plan of a Hub id asks (each a GET):

- the model info at the revision (`/api/models/{id}/revision/{rev}`, what `HfApi.model_info` asks): the commit and
  the file list, once;
- each planning file the repo has, at that commit (`/{id}/resolve/{commit}/{file}`), written into the HF cache in
  huggingface_hub's layout (`blobs/<etag>`, `snapshots/<commit>/<file>` linking to it, `refs/<rev>`), so that
  huggingface_hub and a later `capacity` run find it there;
- the first 100,000 bytes of each safetensors shard, and the rest of a longer header, by HTTP range (what
  `HfApi.parse_safetensors_file_metadata` reads): never the weights.

That is 1 + files + 2 per shard (the Hub redirects a shard to its storage) requests, in two rounds: the model info,
then the files and the shards' headers together (on the real Hub each request is a TLS round trip).

The requests go through the standard library's HTTP client, with huggingface_hub's headers (its token lookup and
user agent, `build_hf_headers`) when a token can be found, the environment's proxies (HTTP(S)_PROXY, NO_PROXY) and
the system's CA certificates (SSL_CERT_FILE / SSL_CERT_DIR), as huggingface_hub's client takes them on Linux. A token
is sent to the Hub's own host only, never to the storage a shard redirects to. A refused request is raised by
huggingface_hub's own `hf_raise_for_status`, so errors are its classes (GatedRepoError, RepositoryNotFoundError, ...).
huggingface_hub's HTTP client (httpx2 and its session: about 0.1 s to import and build) is imported only then.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import platform
import ssl
import struct
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from capacity import __version__

TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE")  # huggingface_hub's get_token reads these
HEADER_PROBE = 100_000  # bytes of a shard read first (huggingface_hub's parse_safetensors_file_metadata reads as many)
SAFETENSORS_MAX_HEADER_LENGTH = 25_000_000  # huggingface_hub.constants.SAFETENSORS_MAX_HEADER_LENGTH
_USER_AGENT = f"capacity/{__version__}; python/{platform.python_version()}"
_T = TypeVar("_T")
_R = TypeVar("_R")


class Unreachable(ConnectionError):
    """The Hub gave no complete answer (the network, TLS, a proxy, a dropped connection)."""


@dataclass(frozen=True)
class Response:
    headers: dict[str, str]  # names in lower case
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)


class _SameHostAuth(urllib.request.HTTPRedirectHandler):
    """Follow redirects; carry the token to the same host only (the storage a shard redirects to gets none)."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urlsplit(newurl).netloc == urlsplit(req.full_url).netloc:
            for key, value in req.unredirected_hdrs.items():
                if key.lower() == "authorization":
                    new.add_unredirected_header(key, value)
        return new


class _OneTlsContext(urllib.request.HTTPSHandler):
    """HTTPS with one TLS context per certificate setting (the system's CA certificates, or SSL_CERT_FILE /
    SSL_CERT_DIR, read at the request), made on the first https request: the standard library would load the
    certificates again for every connection."""

    def __init__(self) -> None:
        urllib.request.AbstractHTTPHandler.__init__(self)  # not HTTPSHandler's: from Python 3.12 it makes a context
        self._contexts: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
        self._lock = threading.Lock()

    def https_open(self, req: urllib.request.Request) -> Any:
        setting = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        with self._lock:
            if setting not in self._contexts:
                self._contexts[setting] = ssl.create_default_context()
            context = self._contexts[setting]
        return self.do_open(http.client.HTTPSConnection, req, context=context)


_OPENER = urllib.request.build_opener(_SameHostAuth, _OneTlsContext)


def _get(url: str, timeout_s: float, headers: dict[str, str] | None = None) -> Response:
    request = urllib.request.Request(url, headers=headers or {})
    for key, value in _hf_headers().items():  # urllib capitalizes the names (Authorization, User-agent)
        if key.lower() == "authorization":
            request.add_unredirected_header(key, value)
        else:
            request.add_header(key, value)
    try:
        with _OPENER.open(request, timeout=timeout_s) as answer:
            return Response({k.lower(): v for k, v in answer.headers.items()}, answer.read())
    except urllib.error.HTTPError as refused:
        with refused:
            _raise_as_huggingface_hub(url, refused.code, list(refused.headers.items()), refused.read())
        # what huggingface_hub does not call an error: a redirect that cannot be followed (a loop, no Location)
        raise Unreachable(f"{urlsplit(url).netloc}: HTTP {refused.code} {refused.reason}") from None
    except urllib.error.URLError as failed:  # no answer: DNS, refused, TLS, proxy; the cause is the socket's error
        cause = failed.reason if isinstance(failed.reason, BaseException) else None
        raise Unreachable(f"{urlsplit(url).netloc}: {failed.reason}") from cause
    except http.client.HTTPException as broken:  # the answer was cut short (IncompleteRead, BadStatusLine)
        raise Unreachable(f"{urlsplit(url).netloc}: {type(broken).__name__}") from broken


def _raise_as_huggingface_hub(url: str, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
    """huggingface_hub's own error for a refused request: its `hf_raise_for_status` on the same answer, as a
    response of the HTTP library huggingface_hub is built on."""
    import sys

    from huggingface_hub import errors
    from huggingface_hub.utils import hf_raise_for_status

    library = sys.modules[errors.Response.__module__.split(".")[0]]  # httpx2 (huggingface_hub 2) or httpx (1.x)
    hf_raise_for_status(library.Response(status, headers=headers, content=body, request=library.Request("GET", url)))


def _hf_headers() -> dict[str, str]:
    """huggingface_hub's request headers (`build_hf_headers`: its token lookup and user agent) whenever a token can
    be found; capacity's user agent alone where no token source exists (no HF_TOKEN / HUGGING_FACE_HUB_TOKEN /
    HF_OIDC_RESOURCE, no token file, not in Colab), where huggingface_hub would send no authorization either. Its
    token lookup imports yaml and filelock (about 30 ms), which a plan of a public repo does not need."""
    import sys

    from huggingface_hub import constants

    if any(os.environ.get(k) for k in TOKEN_VARIABLES) or os.path.exists(constants.HF_TOKEN_PATH) or "google.colab" in sys.modules:
        from huggingface_hub.utils import build_hf_headers

        return build_hf_headers()
    return {"user-agent": _USER_AGENT}


def model_info(endpoint: str, repo_id: str, revision: str, timeout_s: float) -> tuple[str, set[str]]:
    """(commit, file names) of `repo_id` at `revision`: one model-info call."""
    info = _get(f"{endpoint}/api/models/{repo_id}/revision/{quote(revision, safe='')}", timeout_s).json()
    siblings = info.get("siblings")
    names = {str(s["rfilename"]) for s in siblings} if isinstance(siblings, list) else {"config.json"}
    return str(info["sha"]), names


def file_url(endpoint: str, repo_id: str, commit: str, name: str) -> str:
    return f"{endpoint}/{repo_id}/resolve/{commit}/{quote(name)}"


def download_file(endpoint: str, cache_dir: Path, repo_id: str, commit: str, name: str, timeout_s: float) -> None:
    """GET one file at `commit` into the HF cache."""
    response = _get(file_url(endpoint, repo_id, commit, name), timeout_s)
    etag = response.headers.get("x-linked-etag") or response.headers.get("etag")
    store(_repo_folder(cache_dir, repo_id), commit, name, response.content, _normalize_etag(etag) or hashlib.sha256(response.content).hexdigest())


def snapshot_folder(cache_dir: Path, repo_id: str, commit: str) -> Path:
    return _repo_folder(cache_dir, repo_id) / "snapshots" / commit


def pin(cache_dir: Path, repo_id: str, revision: str, commit: str) -> None:
    """refs/<revision> names `commit` (huggingface_hub's layout), written once the snapshot is complete, so that a
    fetch that failed half way is asked again rather than found in the cache."""
    if revision != commit:
        _write_atomic(_repo_folder(cache_dir, repo_id) / "refs" / revision, commit.encode())


def _repo_folder(cache_dir: Path, repo_id: str) -> Path:
    return cache_dir / ("models--" + repo_id.replace("/", "--"))


def store(repo: Path, commit: str, name: str, data: bytes, etag: str) -> None:
    """One file in huggingface_hub's cache layout: the blob, and the snapshot's relative symlink to it (a copy where
    the file system has no symlinks)."""
    blob = repo / "blobs" / etag
    _write_atomic(blob, data)
    link = repo / "snapshots" / commit / name
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    try:
        link.symlink_to(os.path.relpath(blob, link.parent))
    except OSError:
        _write_atomic(link, data)


def safetensors_header(endpoint: str, repo_id: str, commit: str, name: str, timeout_s: float) -> dict[str, Any]:
    """The JSON header of one shard by range reads; a header that cannot be read raises huggingface_hub's
    SafetensorsParsingError with its wording (capacity/source/hub.py's `explain` turns it into one line)."""
    url = file_url(endpoint, repo_id, commit, name)
    where = f"Failed to parse safetensors header for '{name}' (repo '{repo_id}', revision '{commit}')"
    first = _get(url, timeout_s, {"range": f"bytes=0-{HEADER_PROBE}"}).content
    if len(first) < 8:
        raise _parsing_error(f"{where}: file is too small to be a valid safetensors file.")
    (size,) = struct.unpack("<Q", first[:8])
    if size > SAFETENSORS_MAX_HEADER_LENGTH:
        raise _parsing_error(f"{where}: safetensors header is too big. Maximum supported size is {SAFETENSORS_MAX_HEADER_LENGTH} bytes (got {size}).")
    raw = first[8 : 8 + size] if size <= len(first) - 8 else _get(url, timeout_s, {"range": f"bytes=8-{size + 7}"}).content
    try:
        header = json.loads(raw.decode(errors="ignore"))
    except json.JSONDecodeError as exc:
        raise _parsing_error(f"{where}: header is not json-encoded string. Please make sure this is a correctly formatted safetensors file.") from exc
    if not isinstance(header, dict):
        raise _parsing_error(f"{where}: header is not a JSON object.")
    return header


def _parsing_error(message: str) -> Exception:
    from huggingface_hub.errors import SafetensorsParsingError

    return SafetensorsParsingError(message)


def each(fn: Callable[[_T], _R], items: list[_T]) -> list[_R]:
    """`fn` over `items`, concurrently when there are several (the first error is raised, as a loop would)."""
    if len(items) < 2:
        return [fn(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, len(items))) as pool:
        return list(pool.map(fn, items))


def _normalize_etag(etag: str | None) -> str | None:
    """An ETag header as a file name (huggingface_hub's `_normalize_etag`: W/"x" and "x" are x)."""
    return None if etag is None else etag.removeprefix("W/").strip('"') or None


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{id(data):x}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
