"""A small Hugging Face Hub on 127.0.0.1, serving repos from a folder, for tests of the real huggingface_hub client.

It answers the endpoints huggingface_hub 1.x/2.x calls to resolve a model (read from its file_download.py and
hf_api.py), with the headers the client reads:

- `GET /api/models/{org}/{name}[/revision/{rev}]` (`HfApi.model_info`): `id`, `sha`, `siblings`, `gated`;
- `HEAD|GET /{org}/{name}/resolve/{rev}/{file}` (`hf_hub_download`, `file_exists`): `X-Repo-Commit`, `ETag`,
  `Content-Length`; for `*.safetensors` (LFS files on the Hub) a 302 with `Location` to `/cdn/...`,
  `X-Linked-Etag` and `X-Linked-Size`;
- `GET /cdn/{org}/{name}/{commit}/{file}` with `Range: bytes=a-b` (`get_safetensors_metadata` reads the first
  100,000 bytes, then the rest of a longer header): 206 and `Content-Range`;
- errors as the Hub sends them, with `X-Error-Code`: `RepoNotFound` (404), `RevisionNotFound` (404),
  `EntryNotFound` (404), `GatedRepo` (401 without the repo's token); with `bare_errors` set, a plain-text 404 as a
  proxy or mirror sends it.

Layout of the folder: `{org}/{name}/repo.json` (`{"refs": {"main": COMMIT, ...}, "gated": TOKEN or null,
"drop": [FILE, ...]}`; a GET of a dropped file closes the connection without an answer) and
`{org}/{name}/{COMMIT}/{file}`. `add_repo` writes one. Every request is logged in `HubServer.requests`.
`serve(root, tls=True)` answers over HTTPS with tests/support/tls's self-signed certificate for 127.0.0.1
(`TLS_CERT`), which a client trusts only when told to (SSL_CERT_FILE).

huggingface_hub reads HF_ENDPOINT (and HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE) into `huggingface_hub.constants`
once, at import (`ENDPOINT` also into `HUGGINGFACE_CO_URL_TEMPLATE`, which `hf_hub_url` rewrites only when it starts
with `ENDPOINT`): a test either runs the CLI in a subprocess with the environment set, or sets the environment and
patches those constants together (tests/source/test_hub.py's `hub` fixture does both).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TLS_CERT = Path(__file__).parent / "tls" / "hub-cert.pem"  # the certificate a client must trust for serve(tls=True)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None
    host: str | None = None  # the Host header's name, without the port


def add_repo(root: Path, repo_id: str, revisions: dict[str, dict[str, bytes]], *, gated_token: str | None = None, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """Write a repo with one commit per revision name ({"main": {file: bytes}}); returns {revision: commit}."""
    repo = root / repo_id
    refs: dict[str, str] = {}
    for revision, files in revisions.items():
        commit = hashlib.sha1(json.dumps({k: hashlib.sha256(v).hexdigest() for k, v in sorted(files.items())}).encode() + revision.encode()).hexdigest()
        for name, data in files.items():
            path = repo / commit / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        refs[revision] = commit
    (repo / "repo.json").write_text(json.dumps({"refs": refs, "gated": gated_token, "drop": list(drop)}))
    return refs


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:  # a dropped connection is on purpose
        pass


class HubServer:
    """A threaded HTTP server serving `root` as a Hub; `url` is what HF_ENDPOINT points at."""

    def __init__(self, root: Path, tls: bool = False) -> None:
        self.root = root
        self.requests: list[Request] = []
        # errors without the Hub's X-Error-Code / X-Error-Message headers and JSON body, as a proxy or mirror answers:
        # huggingface_hub then raises its generic HfHubHTTPError carrying the HTTP library's own text
        self.bare_errors = False
        # where an LFS file redirects: this host (a relative Location) or, set to "localhost", another host name for
        # the same server, as the Hub sends a shard to its storage on another host
        self.storage_host: str | None = None
        self._httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        if tls:  # HTTPS with tests/support/tls's self-signed certificate for 127.0.0.1
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(TLS_CERT, TLS_CERT.with_name("hub-key.pem"))
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def start(self) -> HubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def repo(self, repo_id: str) -> dict[str, Any] | None:
        meta = self.root / repo_id / "repo.json"
        return json.loads(meta.read_text()) if meta.is_file() else None


@contextmanager
def serve(root: Path, tls: bool = False) -> Iterator[HubServer]:
    server = HubServer(root, tls).start()
    try:
        yield server
    finally:
        server.stop()


def _handler(server: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._route(body=False)

        def do_GET(self) -> None:
            self._route(body=True)

        # --- routing ---------------------------------------------------------------------------

        def _route(self, body: bool) -> None:
            path = self.path.split("?", 1)[0]
            host = (self.headers.get("Host") or "").rsplit(":", 1)[0] or None
            server.requests.append(Request(self.command, path, self.headers.get("Range"), self.headers.get("Authorization"), host))
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path):
                return self._model_info(m.group(1), m.group(2) or "main")
            if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
                return self._resolve(m.group(1), m.group(2), m.group(3), body)
            if m := re.fullmatch(r"/cdn/([^/]+/[^/]+)/([0-9a-f]{40})/(.+)", path):
                return self._cdn(m.group(1), m.group(2), m.group(3), body)
            self._error(404, "RepoNotFound", "no such endpoint")

        def _commit(self, repo_id: str, revision: str) -> tuple[dict[str, Any], str] | None:
            repo = server.repo(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", f"Repository Not Found for url: {self.path}.")
                return None
            commit = repo["refs"].get(revision, revision if revision in repo["refs"].values() else None)
            if commit is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return None
            return repo, commit

        def _model_info(self, repo_id: str, revision: str) -> None:
            found = self._commit(repo_id, revision)
            if found is None:
                return
            repo, commit = found
            folder = server.root / repo_id / commit
            siblings = [{"rfilename": p.relative_to(folder).as_posix()} for p in sorted(folder.rglob("*")) if p.is_file()]
            info = {"_id": commit[:24], "id": repo_id, "modelId": repo_id, "sha": commit, "private": False, "gated": "manual" if repo["gated"] else False, "siblings": siblings, "tags": []}
            self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, True)

        def _resolve(self, repo_id: str, revision: str, name: str, body: bool) -> None:
            found = self._commit(repo_id, revision)
            if found is None:
                return
            repo, commit = found
            if repo["gated"] and self.headers.get("Authorization") != f"Bearer {repo['gated']}":
                message = f"Access to model {repo_id} is restricted. You must have access to it and be authenticated to access it. Please log in."
                return self._error(401, "GatedRepo", message, {"X-Repo-Commit": commit})
            file = server.root / repo_id / commit / name
            if not file.is_file():
                return self._error(404, "EntryNotFound", f"{name} does not exist on {revision}", {"X-Repo-Commit": commit})
            if body and name in repo["drop"]:
                return self._drop()
            data = file.read_bytes()
            if name.endswith(".safetensors"):  # an LFS file: the Hub redirects to its storage
                storage = f"{server.url.split(':')[0]}://{server.storage_host}:{self.server.server_address[1]}" if server.storage_host else ""
                headers = {
                    "Location": f"{storage}/cdn/{repo_id}/{commit}/{name}",
                    "X-Repo-Commit": commit,
                    "X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"',
                    "X-Linked-Size": str(len(data)),
                }
                return self._send(302, b"", headers, body)
            self._send(200, data, {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha1(data).hexdigest()}"'}, body)

        def _cdn(self, repo_id: str, commit: str, name: str, body: bool) -> None:
            repo = server.repo(repo_id)
            file = server.root / repo_id / commit / name
            if repo is None or not file.is_file():
                return self._error(404, "EntryNotFound", "no such object")
            if body and name in repo["drop"]:
                return self._drop()
            data = file.read_bytes()
            headers = {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"', "Accept-Ranges": "bytes"}
            wanted = self.headers.get("Range")
            if wanted is None:
                return self._send(200, data, headers, body)
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
            if m is None or int(m.group(1)) >= len(data):
                return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"}, body)
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else len(data) - 1, len(data) - 1)
            self._send(206, data[start : end + 1], {**headers, "Content-Range": f"bytes {start}-{end}/{len(data)}"}, body)

        # --- answers ---------------------------------------------------------------------------

        def _send(self, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body and data:
                self.wfile.write(data)

        def _error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
            if server.bare_errors:
                return self._send(status, b"Not Found", {"Content-Type": "text/plain"}, self.command != "HEAD")
            payload = json.dumps({"error": message}).encode()
            self._send(status, payload, {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message, **(headers or {})}, self.command != "HEAD")

        def _drop(self) -> None:
            """Close the connection without an answer (a proxy or the network dropping it)."""
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

    return Handler
