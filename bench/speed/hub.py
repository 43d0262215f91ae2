"""The speed benchmark's Hugging Face Hub on 127.0.0.1: the folder layout and endpoints of
tests/support/hub_server.py (`{org}/{name}/repo.json` + `{org}/{name}/{COMMIT}/{file}`, written by its `add_repo`),
plus what the peers call that the test server leaves out:

`latency_s` (run.py's --latency-ms) holds each answer back that long, as a round trip to the real Hub would; the server's
threads wait side by side, so concurrent requests overlap as they would over the network.

- `GET /api/models/{org}/{name}[/revision/{rev}]`: also `library_name`, `config` (architectures, model_type, auto_map),
  `tags`, the `safetensors` summary (parameters per dtype, total) and, with `?blobs=true` (huggingface_hub's
  `files_metadata=True`, kvfit), each sibling's `size`, `blobId` and `lfs`; accelerate, vramscout and kvfit read these;
- `GET /api/models/{org}/{name}/tree/{rev}[?recursive=true]`: the file listing hf-mem reads first;
- safetensors files are stored header-only and served as if their data were there: sizes (`X-Linked-Size`,
  `Content-Range`, `size`) are the full checkpoint's (8 + header + the last `data_offsets` end), a range past the
  header reads zeros. A GET of a safetensors file without a Range (a weight download) is refused with 403 and
  counted in `full_downloads`: a planner must not download weights, and the harness fails if one did.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import struct
import threading
import time
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@lru_cache(maxsize=4096)
def _stored(path: str) -> tuple[bytes, int, dict[str, int]]:
    """(stored bytes, size served, safetensors parameter counts per dtype) of one file."""
    data = Path(path).read_bytes()
    if not path.endswith(".safetensors"):
        return data, len(data), {}
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    end = 0
    counts: dict[str, int] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        end = max(end, info["data_offsets"][1])
        n = 1
        for d in info["shape"]:
            n *= d
        counts[info["dtype"]] = counts.get(info["dtype"], 0) + n
    return data, 8 + length + end, counts


def _etag(path: Path) -> str:
    data, size, _ = _stored(str(path))
    return hashlib.sha256(data + str(size).encode()).hexdigest()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class BenchHub:
    """A threaded HTTP server serving `root` as a Hub; `url` is what HF_ENDPOINT points at."""

    def __init__(self, root: Path, latency_s: float = 0.0) -> None:
        self.root = root
        self.latency_s = latency_s  # waited before each answer: a network round trip (the threads wait in parallel)
        self.requests = 0
        self.full_downloads: list[str] = []
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> BenchHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def repo(self, repo_id: str) -> dict[str, Any] | None:
        meta = self.root / repo_id / "repo.json"
        return json.loads(meta.read_text()) if meta.is_file() else None


def _handler(hub: BenchHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Each write goes out at once, as a real server sends it (nginx's tcp_nodelay). Without it, http.server's
            # two writes per response (headers, then body) meet Nagle's algorithm on a kept-alive connection: the body
            # waits for the client's delayed ACK, about 40 ms a request for every client that reuses its connection.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            self._route(body=False)

        def do_GET(self) -> None:
            self._route(body=True)

        def _route(self, body: bool) -> None:
            with hub._lock:
                hub.requests += 1
            if hub.latency_s:
                time.sleep(hub.latency_s)
            path, _, query = self.path.partition("?")
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path):
                return self._tree(m.group(1), m.group(2), m.group(3) or "", "recursive=true" in query.lower())
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path):
                return self._model_info(m.group(1), m.group(2) or "main", "blobs=true" in query.lower())
            if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
                return self._resolve(m.group(1), m.group(2), m.group(3), body)
            if m := re.fullmatch(r"/cdn/([^/]+/[^/]+)/([0-9a-f]{40})/(.+)", path):
                return self._cdn(m.group(1), m.group(2), m.group(3), body)
            self._error(404, "RepoNotFound", "no such endpoint")

        def _commit(self, repo_id: str, revision: str) -> tuple[Path, str] | None:
            repo = hub.repo(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", f"Repository Not Found for url: {self.path}.")
                return None
            commit = repo["refs"].get(revision, revision if revision in repo["refs"].values() else None)
            if commit is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return None
            return hub.root / repo_id / commit, commit

        def _files(self, folder: Path) -> list[Path]:
            return sorted(p for p in folder.rglob("*") if p.is_file())

        def _model_info(self, repo_id: str, revision: str, blobs: bool) -> None:
            found = self._commit(repo_id, revision)
            if found is None:
                return
            folder, commit = found
            siblings: list[dict[str, Any]] = []
            parameters: dict[str, int] = {}
            for p in self._files(folder):
                name = p.relative_to(folder).as_posix()
                data, size, counts = _stored(str(p))
                for dtype, n in counts.items():
                    parameters[dtype] = parameters.get(dtype, 0) + n
                sibling: dict[str, Any] = {"rfilename": name}
                if blobs:
                    sibling["blobId"] = hashlib.sha1(data).hexdigest()
                    sibling["size"] = size
                    if name.endswith(".safetensors"):
                        sibling["lfs"] = {"sha256": _etag(p), "size": size, "pointerSize": 135}
                siblings.append(sibling)
            config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
            info: dict[str, Any] = {
                "_id": commit[:24],
                "id": repo_id,
                "modelId": repo_id,
                "sha": commit,
                "private": False,
                "disabled": False,
                "gated": False,
                "library_name": "transformers",
                "tags": ["transformers", "safetensors"] + ([config["model_type"]] if "model_type" in config else []),
                "config": {k: config[k] for k in ("architectures", "model_type", "auto_map") if k in config},
                "siblings": siblings,
                "lastModified": "2026-01-01T00:00:00.000Z",
                "createdAt": "2026-01-01T00:00:00.000Z",
                "downloads": 0,
                "likes": 0,
            }
            if parameters:
                info["safetensors"] = {"parameters": parameters, "total": sum(parameters.values())}
            self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, True)

        def _tree(self, repo_id: str, revision: str, under: str, recursive: bool) -> None:
            found = self._commit(repo_id, revision)
            if found is None:
                return
            folder, _ = found
            base = folder / under
            entries: list[dict[str, Any]] = []
            paths = sorted(base.rglob("*")) if recursive else sorted(base.iterdir())
            for p in paths:
                name = p.relative_to(folder).as_posix()
                if p.is_dir():
                    entries.append({"type": "directory", "oid": hashlib.sha1(name.encode()).hexdigest(), "size": 0, "path": name})
                    continue
                data, size, _ = _stored(str(p))
                entry: dict[str, Any] = {"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": size, "path": name}
                if name.endswith(".safetensors"):
                    entry["lfs"] = {"oid": _etag(p), "size": size, "pointerSize": 135}
                entries.append(entry)
            self._send(200, json.dumps(entries).encode(), {"Content-Type": "application/json"}, True)

        def _resolve(self, repo_id: str, revision: str, name: str, body: bool) -> None:
            found = self._commit(repo_id, revision)
            if found is None:
                return
            folder, commit = found
            file = folder / name
            if not file.is_file():
                return self._error(404, "EntryNotFound", f"{name} does not exist on {revision}", {"X-Repo-Commit": commit})
            data, size, _ = _stored(str(file))
            if name.endswith(".safetensors"):  # an LFS file: the Hub redirects to its storage
                headers = {"Location": f"/cdn/{repo_id}/{commit}/{name}", "X-Repo-Commit": commit, "X-Linked-Etag": f'"{_etag(file)}"', "X-Linked-Size": str(size)}
                return self._send(302, b"", headers, body)
            self._send(200, data, {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha1(data).hexdigest()}"'}, body)

        def _cdn(self, repo_id: str, commit: str, name: str, body: bool) -> None:
            file = hub.root / repo_id / commit / name
            if hub.repo(repo_id) is None or not file.is_file():
                return self._error(404, "EntryNotFound", "no such object")
            data, size, _ = _stored(str(file))
            headers = {"X-Repo-Commit": commit, "ETag": f'"{_etag(file)}"', "Accept-Ranges": "bytes"}
            wanted = self.headers.get("Range")
            if wanted is None:
                if not body:
                    return self._send(200, b"", {**headers, "Content-Length": str(size)}, False)
                with hub._lock:
                    hub.full_downloads.append(f"{repo_id}/{name}")
                return self._error(403, "WeightDownload", f"the speed benchmark's Hub refuses to send a whole checkpoint file ({name}, {size} B)")
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
            if m is None or int(m.group(1)) >= size:
                return self._send(416, b"", {"Content-Range": f"bytes */{size}"}, body)
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
            chunk = data[start : end + 1]
            chunk += bytes(end + 1 - start - len(chunk))  # past the stored header: the (zero) tensor data
            self._send(206, chunk, {**headers, "Content-Range": f"bytes {start}-{end}/{size}"}, body)

        def _send(self, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body and data:
                self.wfile.write(data)

        def _error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
            payload = json.dumps({"error": message}).encode()
            self._send(status, payload, {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message, **(headers or {})}, self.command != "HEAD")

    return Handler
