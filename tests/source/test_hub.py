"""`--model org/name [--revision R]` through the real huggingface_hub client, over real HTTP, against a local Hub
(tests/support/hub_server.py). Expected figures are worked out by hand from the tensors each test writes."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from capacity.errors import BadInput
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from capacity.source.resolve import resolve_model
from tests.support.hub_server import TLS_CERT, add_repo, serve
from tests.support.paths import REPO_ROOT
from tests.support.safetensors_files import safetensors_bytes as write_by_hand

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

hf_constants = pytest.importorskip("huggingface_hub.constants")

TOKEN = "hf_testtoken"


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    return write_by_hand(tensors, metadata={"format": "pt"})


@pytest.fixture
def whisper_config(catalog_config) -> bytes:
    return json.dumps(catalog_config("openai/whisper-tiny")).encode()


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A local Hub, HF_ENDPOINT at it, a scratch HF_HOME; huggingface_hub's import-time constants patched to match."""
    yield from _local_hub(tmp_path, monkeypatch, tls=False)


@pytest.fixture
def tls_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The same over HTTPS, with a self-signed certificate for 127.0.0.1 (tests/support/tls) that nothing trusts."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    yield from _local_hub(tmp_path, monkeypatch, tls=True)


def _local_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tls: bool):
    root = tmp_path / "hub-root"
    root.mkdir()
    home = tmp_path / "hf-home"
    with serve(root, tls) as server:
        env = {"HF_ENDPOINT": server.url, "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), "HF_ASSETS_CACHE": str(home / "assets")}
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
            monkeypatch.delenv(key, raising=False)
        monkeypatch.setattr(hf_constants, "ENDPOINT", server.url)
        monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(home / "hub"))
        monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(home / "token"))
        monkeypatch.setattr(hf_constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
        server.home = home  # type: ignore[attr-defined]
        yield server


def bad_input(model: str, revision: str | None = None) -> str:
    with pytest.raises(BadInput) as info:
        resolve_model(model, revision)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_single_file_repo_fetches_planning_files_and_reads_headers_by_range(hub, whisper_config):
    weights = safetensors_bytes({"embed": ("F16", [1000, 384]), "norm": ("F32", [384]), "proj": ("BF16", [384, 384])})
    refs = add_repo(
        hub.root,
        "acme/tiny-asr",
        {"main": {"config.json": whisper_config, "preprocessor_config.json": b'{"feature_size": 80}', "generation_config.json": b"{}", "model.safetensors": weights, "README.md": b"# hi"}},
    )
    source = resolve_model("acme/tiny-asr")
    assert (source.origin, source.name, source.commit) == ("hub", "acme/tiny-asr", refs["main"])
    snapshot = hub.home / "hub" / "models--acme--tiny-asr" / "snapshots" / refs["main"]
    assert source.path == str(snapshot)
    assert sorted(p.name for p in snapshot.iterdir()) == ["config.json", "generation_config.json", "preprocessor_config.json"]
    assert source.preprocessor == {"feature_size": 80}
    assert set(source.files) == {"preprocessor_config.json", "generation_config.json"}
    # 1000*384 F16 + 384 F32 + 384*384 BF16, bytes from data_offsets
    assert source.weights is not None
    assert source.weights.elements_by_dtype == {"F16": 384_000, "F32": 384, "BF16": 147_456}
    assert source.weights.bytes_by_dtype == {"F16": 768_000, "F32": 1_536, "BF16": 294_912}
    assert source.weights.element_count == 531_840
    # the weights were never downloaded: every GET of the shard is a range inside its header
    shard_gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith("model.safetensors")]
    assert shard_gets and all(r.range is not None and r.range.startswith("bytes=0-") for r in shard_gets)
    assert not any(r.path.endswith("README.md") for r in hub.requests)
    plan = plan_for("acme/tiny-asr", ServingArgs(), "L4")
    assert plan.parameter_count == 531_840
    assert plan.memory["weights"].bytes == 531_840 * 2  # bfloat16 (whisper-tiny's config is float32: vLLM serves bf16)
    assert plan.memory["weights"].kind == "exact" and "read from the Hub" in plan.memory["weights"].method


def test_sharded_checkpoint_reads_every_shard_named_by_the_index(hub, whisper_config):
    shard1 = safetensors_bytes({"a": ("BF16", [4096, 1024])})
    shard2 = safetensors_bytes({"b": ("BF16", [1024]), "c": ("F32", [10, 10])})
    index = {
        "metadata": {"total_size": 4096 * 1024 * 2 + 1024 * 2 + 400},
        "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"},
    }
    files = {"config.json": whisper_config, "model.safetensors.index.json": json.dumps(index).encode(), "model-00001-of-00002.safetensors": shard1, "model-00002-of-00002.safetensors": shard2}
    refs = add_repo(hub.root, "acme/sharded", {"main": files})
    source = resolve_model("acme/sharded")
    assert source.weights is not None
    assert source.weights.files == ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    assert source.weights.element_count == 4096 * 1024 + 1024 + 100
    assert source.weights.data_bytes == index["metadata"]["total_size"]
    assert (hub.home / "hub" / "models--acme--sharded" / "snapshots" / refs["main"] / "model.safetensors.index.json").is_file()
    assert "model.safetensors.index.json" in source.files


def test_a_sharded_repo_is_read_with_one_info_call_one_get_per_file_and_header_ranges(hub, whisper_config):
    """What a plan asks the Hub, by hand: the model info once; config.json, generation_config.json and the index once
    each, at the commit the info named (no HEAD, no second copy of the index); per shard the Hub's redirect and one
    range inside the header (each header is under 100,000 bytes); nothing for README.md; nothing at all from the cache."""
    shard1 = safetensors_bytes({"a": ("BF16", [64, 32])})
    shard2 = safetensors_bytes({"b": ("BF16", [32])})
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    files = {
        "config.json": whisper_config,
        "generation_config.json": b"{}",
        "README.md": b"#",
        "model.safetensors.index.json": json.dumps(index).encode(),
        "model-00001-of-00002.safetensors": shard1,
        "model-00002-of-00002.safetensors": shard2,
    }
    commit = add_repo(hub.root, "acme/counted", {"main": files})["main"]
    source = resolve_model("acme/counted")
    assert source.weights is not None and source.weights.element_count == 64 * 32 + 32
    asked = sorted((r.method, r.path, r.range) for r in hub.requests)
    shards = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    assert asked == sorted(
        [("GET", "/api/models/acme/counted/revision/main", None)]
        + [("GET", f"/acme/counted/resolve/{commit}/{name}", None) for name in ("config.json", "generation_config.json", "model.safetensors.index.json")]
        + [("GET", f"/acme/counted/resolve/{commit}/{shard}", "bytes=0-100000") for shard in shards]
        + [("GET", f"/cdn/acme/counted/{commit}/{shard}", "bytes=0-100000") for shard in shards]
    )
    # huggingface_hub's cache layout: the snapshot links to blobs named by ETag, refs/main names the commit
    repo = hub.home / "hub" / "models--acme--counted"
    assert (repo / "refs" / "main").read_text() == commit
    config = repo / "snapshots" / commit / "config.json"
    assert config.is_symlink() and config.resolve().parent == (repo / "blobs").resolve() and config.read_bytes() == whisper_config
    from huggingface_hub import try_to_load_from_cache  # huggingface_hub finds it there itself

    assert try_to_load_from_cache("acme/counted", "config.json", cache_dir=str(hub.home / "hub")) == str(config)
    before = len(hub.requests)
    assert resolve_model("acme/counted").origin == "hf-cache" and len(hub.requests) == before


def test_shards_the_index_does_not_name_are_read_but_never_counted_nor_fatal(hub, whisper_config):
    """The shards' headers are read while the files download, guessed from the file list; the index decides. A file
    that looks like a shard but that the index leaves out (a broken leftover here) costs its reads and nothing else;
    a shard the index names under another name is read after the index."""
    kept = safetensors_bytes({"a": ("BF16", [64, 32])})
    odd = safetensors_bytes({"b": ("BF16", [32])})
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "extra.safetensors"}}
    files = {
        "config.json": whisper_config,
        "model.safetensors.index.json": json.dumps(index).encode(),
        "model-00001-of-00002.safetensors": kept,
        "model-00002-of-00002.safetensors": b"\x00" * 4,  # too small to be a safetensors file
        "extra.safetensors": odd,
    }
    commit = add_repo(hub.root, "acme/leftover", {"main": files})["main"]
    source = resolve_model("acme/leftover")
    assert source.weights is not None and source.weights.files == ("extra.safetensors", "model-00001-of-00002.safetensors")
    assert source.weights.element_count == 64 * 32 + 32
    ranges = sorted(r.path for r in hub.requests if r.range is not None and not r.path.startswith("/cdn/"))
    assert ranges == [f"/acme/leftover/resolve/{commit}/{n}" for n in ("extra.safetensors", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")]


def test_a_broken_shard_the_index_names_is_refused_in_one_line(hub, whisper_config):
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00001.safetensors"}}
    files = {"config.json": whisper_config, "model.safetensors.index.json": json.dumps(index).encode(), "model-00001-of-00001.safetensors": b"\x00" * 4}
    add_repo(hub.root, "acme/broken-shard", {"main": files})
    message = bad_input("acme/broken-shard")
    assert "model-00001-of-00001.safetensors" in message and "too small" in message


def test_missing_repo_is_one_line_naming_the_closest_catalog_ids(hub):
    message = bad_input("openai/whisper-tiniest")
    assert message.startswith("no model `openai/whisper-tiniest` on the Hub (") and "HTTP 404" in message
    assert message.endswith("closest catalog ids: openai/whisper-tiny, openai/whisper-base, openai/whisper-small")


def test_a_bare_404_says_the_same_without_the_http_librarys_text(hub):
    # a proxy or mirror answers 404 without the Hub's X-Error-Code: huggingface_hub raises its generic HfHubHTTPError,
    # whose text is httpx's ("Client error '404 Not Found' for url ... For more information check: https://...")
    hub.bare_errors = True
    message = bad_input("openai/whisper-tiniest")
    assert message.startswith("no model `openai/whisper-tiniest` on the Hub (") and "closest catalog ids: openai/whisper-tiny" in message
    assert "Client error" not in message and "developer.mozilla.org" not in message and "For more information" not in message


def test_gated_repo_says_how_to_set_hf_token_and_opens_with_it(hub, whisper_config, monkeypatch):
    add_repo(hub.root, "acme/gated", {"main": {"config.json": whisper_config}}, gated_token=TOKEN)
    message = bad_input("acme/gated")
    assert "gated" in message and "HTTP 401" in message and "HF_TOKEN" in message
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    source = resolve_model("acme/gated")
    assert source.origin == "hub" and source.weights is None
    assert any(r.authorization == f"Bearer {TOKEN}" for r in hub.requests)


def test_the_token_goes_to_the_hub_and_never_to_the_storage_a_shard_redirects_to(hub, whisper_config, monkeypatch):
    shard = safetensors_bytes({"a": ("F16", [8, 4])})
    add_repo(hub.root, "acme/private", {"main": {"config.json": whisper_config, "model.safetensors": shard}}, gated_token=TOKEN)
    hub.storage_host = "localhost"
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    source = resolve_model("acme/private")
    assert source.weights is not None and source.weights.element_count == 8 * 4
    to_hub = [r for r in hub.requests if not r.path.startswith("/cdn/")]
    to_storage = [r for r in hub.requests if r.path.startswith("/cdn/")]
    assert {r.host for r in to_hub} == {"127.0.0.1"} and all(r.authorization == f"Bearer {TOKEN}" for r in to_hub)
    assert [(r.host, r.range, r.authorization) for r in to_storage] == [("localhost", "bytes=0-100000", None)]


def test_an_https_hub_is_read_when_its_certificate_is_trusted_and_refused_in_one_line_when_not(tls_hub, whisper_config, monkeypatch):
    shard = safetensors_bytes({"a": ("F16", [8, 4])})
    add_repo(tls_hub.root, "acme/tls", {"main": {"config.json": whisper_config, "model.safetensors": shard}})
    tls_hub.storage_host = "localhost"  # not in the certificate: the redirect to the storage must not be trusted either
    message = bad_input("acme/tls")
    assert message.startswith(f"cannot reach the Hub at {tls_hub.url} for acme/tls (SSLCertVerificationError: ") and "HF_HUB_OFFLINE=1" in message
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS_CERT))  # as huggingface_hub's client takes it
    assert bad_input("acme/tls").startswith(f"cannot reach the Hub at {tls_hub.url} for acme/tls (SSLCertVerificationError: ")
    tls_hub.storage_host = None
    source = resolve_model("acme/tls")
    assert source.origin == "hub" and source.weights is not None and source.weights.element_count == 8 * 4


def test_the_header_size_limit_is_huggingface_hubs():
    from capacity.source.hub_http import SAFETENSORS_MAX_HEADER_LENGTH

    assert SAFETENSORS_MAX_HEADER_LENGTH == hf_constants.SAFETENSORS_MAX_HEADER_LENGTH


def test_dropped_connection_is_one_line(hub, whisper_config):
    add_repo(hub.root, "acme/flaky", {"main": {"config.json": whisper_config, "model.safetensors": safetensors_bytes({"a": ("F16", [8])})}}, drop=("model.safetensors",))
    message = bad_input("acme/flaky")
    assert message.startswith("cannot reach the Hub at http://127.0.0.1:") and "acme/flaky" in message
    assert "HF_HUB_OFFLINE=1" in message


def test_no_network_suggests_the_catalog_a_folder_or_offline(hub, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", closed)
    message = bad_input("openai/whisper-tiniest")
    assert message.startswith(f"cannot reach the Hub at {closed}")
    assert "openai/whisper-tiny" in message and "folder" in message and "HF_HUB_OFFLINE=1" in message


def test_truncated_header_names_the_file(hub, whisper_config):
    whole = safetensors_bytes({"a": ("F16", [64, 64])})
    header_len = struct.unpack("<Q", whole[:8])[0]
    add_repo(hub.root, "acme/truncated", {"main": {"config.json": whisper_config, "model.safetensors": whole[: 8 + header_len // 2]}})
    message = bad_input("acme/truncated")
    assert "corrupt or truncated safetensors header: model.safetensors of acme/truncated" in message


def test_header_that_does_not_add_up_names_the_file(hub, whisper_config):
    blob = json.dumps({"a": {"dtype": "F16", "shape": [10], "data_offsets": [0, 10]}}).encode()  # 10 x F16 is 20 bytes
    add_repo(hub.root, "acme/corrupt", {"main": {"config.json": whisper_config, "model.safetensors": struct.pack("<Q", len(blob)) + blob + bytes(10)}})
    message = bad_input("acme/corrupt")
    assert "corrupt safetensors header in model.safetensors" in message and "10 bytes for 10 x F16" in message


def test_gguf_only_repo_has_no_config(hub):
    add_repo(hub.root, "acme/model-GGUF", {"main": {"model-Q4_K_M.gguf": b"GGUF", "README.md": b"#"}})
    message = bad_input("acme/model-GGUF")
    assert "no config.json, only GGUF files (model-Q4_K_M.gguf)" in message


def test_revision_resolves_its_own_commit_and_a_bad_one_is_refused(hub, catalog_config):
    small = catalog_config("openai/whisper-tiny")
    other = dict(small, decoder_layers=2)
    refs = add_repo(hub.root, "acme/asr", {"main": {"config.json": json.dumps(small).encode()}, "v2": {"config.json": json.dumps(other).encode()}})
    source = resolve_model("acme/asr", "v2")
    assert (source.commit, source.revision, source.config["decoder_layers"]) == (refs["v2"], "v2", 2)
    assert resolve_model("acme/asr").config["decoder_layers"] == small["decoder_layers"]
    assert "no such revision" in bad_input("acme/asr", "v9")
    assert "catalog alias" in bad_input("whisper-tiny", "v2")


def test_offline_plans_from_the_cache_with_the_recorded_headers(hub, whisper_config, monkeypatch):
    weights = safetensors_bytes({"a": ("BF16", [300, 200])})
    refs = add_repo(hub.root, "acme/cached", {"main": {"config.json": whisper_config, "model.safetensors": weights}, "v1": {"config.json": whisper_config}})
    online = resolve_model("acme/cached")
    resolve_model("acme/cached", "v1")
    hub.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = resolve_model("acme/cached")
    assert (offline.origin, offline.commit) == ("hf-cache", refs["main"])
    assert offline.weights is not None and online.weights is not None
    assert offline.weights.element_count == online.weights.element_count == 60_000
    assert "recorded in the HF assets cache" in offline.weights.source
    assert resolve_model("acme/cached", "v1").commit == refs["v1"]
    assert "HF_HUB_OFFLINE=1 forbids the Hub" in bad_input("acme/never-fetched")


def test_quantized_checkpoint_keeps_its_stored_bytes(hub, catalog_config):
    config = dict(catalog_config("openai/whisper-tiny"), quantization_config={"quant_method": "awq", "bits": 4})
    # an AWQ-style layer: int4 packed 8 per int32, fp16 scales; plus a bf16 embedding cast to the serving dtype
    tensors = {"qweight": ("I32", [384, 48]), "scales": ("F16", [3, 384]), "embed": ("BF16", [1000, 384])}
    add_repo(hub.root, "acme/awq", {"main": {"config.json": json.dumps(config).encode(), "model.safetensors": safetensors_bytes(tensors)}})
    plan = plan_for("acme/awq", ServingArgs(dtype="float16"), "L4")
    # float elements (3*384 + 1000*384) x 2 B + int32 words as stored (384*48*4)
    assert plan.memory["weights"].bytes == (1_152 + 384_000) * 2 + 73_728
    # the Hub's headers name the tensors, so the plan reads them as a folder's: stored bytes per named tensor
    method = plan.memory["weights"].method
    assert plan.memory["weights"].kind == "estimated" and "stored bytes from the safetensors headers" in method and "read from the Hub" in method


def test_a_hub_model_is_planned_from_its_named_headers_at_tp_2_without_a_meta_build(hub, catalog_config, monkeypatch):
    """The Hub's headers name every tensor (recorded in the HF assets cache with the summary), so a plan at TP 2,
    which splits each tensor by its name, builds nothing on the meta device, online or from the cache."""
    from capacity.memory import weights
    from capacity.source.resolve import resolve_model

    config = catalog_config("openai/whisper-tiny")
    tensors = {"model.decoder.embed_tokens.weight": ("F32", [51865, 384]), "model.decoder.layers.0.fc1.weight": ("F32", [1536, 384])}
    add_repo(hub.root, "acme/named", {"main": {"config.json": json.dumps(config).encode(), "model.safetensors": safetensors_bytes(tensors)}})

    def no_meta_build(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("built on the meta device")

    monkeypatch.setattr(weights, "_meta_parameters", no_meta_build)
    online = plan_for("acme/named", ServingArgs(tensor_parallel_size=2), "L4")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cached = resolve_model("acme/named")
    assert cached.weights is not None and [t[0] for t in cached.weights.tensors] == list(tensors)
    offline = plan_for("acme/named", ServingArgs(tensor_parallel_size=2), "L4")
    # Whisper's decoder embedding is a plain nn.Embedding in vLLM, whole on every rank (51,865 x 384); fc1 is
    # column-parallel, 1,536 / 2 = 768 rows each; fp32 cast to the serving dtype (bf16, 2 B)
    assert online.memory["weights"].bytes == offline.memory["weights"].bytes == (51_865 * 384 + 768 * 384) * 2


def _cli(args: list[str], env: dict[str, str], code: str = "") -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh process: huggingface_hub reads HF_ENDPOINT from this environment at import, as for a user."""
    script = "import sys, json\nfrom capacity.cli.app import main\nrc = main(sys.argv[1:])\n" + code + "sys.exit(rc)\n"
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=120)


def test_cli_plans_a_hub_model_then_offline_without_torch(hub, whisper_config):
    """A config-only plan (--estimate formula) of a model whose safetensors headers give its count
    imports neither torch nor transformers (nor pandas for --json, nor an HTTP library beyond the standard one for a
    public repo, nor huggingface_hub from the cache)."""
    weights = safetensors_bytes({"a": ("F32", [1000, 384]), "b": ("F32", [384])})
    add_repo(hub.root, "acme/tiny-asr", {"main": {"config.json": whisper_config, "model.safetensors": weights}})
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    heavy = "print(json.dumps({m: m in sys.modules for m in ('torch', 'transformers', 'pandas', 'httpx2', 'httpx')}), file=sys.stderr)\n"
    online = _cli(["plan", "--model", "acme/tiny-asr", "--gpu", "L4", "--offline", "--estimate", "formula", "--json"], env, heavy)
    assert online.returncode == 0, online.stderr
    assert json.loads(online.stdout)["model"]["origin"] == "hub"
    assert json.loads(online.stderr.strip().splitlines()[-1]) == {"torch": False, "transformers": False, "pandas": False, "httpx2": False, "httpx": False}
    hub.stop()
    modules = "print(json.dumps({m: m in sys.modules for m in ('torch', 'transformers', 'huggingface_hub', 'pandas')}), file=sys.stderr)\n"
    offline = _cli(["plan", "--model", "acme/tiny-asr", "--gpu", "L4", "--offline", "--estimate", "formula", "--json"], {**env, "HF_HUB_OFFLINE": "1"}, modules)
    assert offline.returncode == 0, offline.stderr
    plan = json.loads(offline.stdout)
    assert plan["model"]["origin"] == "hf-cache"
    assert plan["memory"]["weights"]["bytes"] == (384_000 + 384) * 2
    assert json.loads(offline.stderr.strip().splitlines()[-1]) == {"torch": False, "transformers": False, "huggingface_hub": False, "pandas": False}


# --- checkpoint summaries of folders and catalog entries (no Hub) ------------------------------------------


def test_folder_with_only_an_index_builds_on_meta_whatever_its_total_parameters_say(tmp_path, catalog_config):
    (tmp_path / "config.json").write_text(json.dumps(catalog_config("openai/whisper-tiny")))
    index = {"metadata": {"total_parameters": 99, "total_size": 198}, "weight_map": {"a": "model-00001-of-00001.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    source = resolve_model(str(tmp_path))
    assert source.weights is None and source.files["model.safetensors.index.json"] == index
    assert plan_for(str(tmp_path), ServingArgs(), "L4").parameter_count == 37_760_640  # published whisper-tiny count


def test_folder_with_a_missing_shard_or_a_truncated_header_is_bad_input(tmp_path, catalog_config):
    (tmp_path / "config.json").write_text(json.dumps(catalog_config("openai/whisper-tiny")))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(safetensors_bytes({"a": ("F16", [4])}))
    assert "1 are missing (first: model-00002-of-00002.safetensors)" in bad_input(str(tmp_path))
    (tmp_path / "model.safetensors.index.json").unlink()
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(safetensors_bytes({"a": ("F16", [4])})[:12])
    assert "model-00001-of-00002.safetensors" in bad_input(str(tmp_path)) and "truncated" in bad_input(str(tmp_path))


def test_catalog_entry_reads_a_recorded_summary_not_its_index(tmp_path):
    from capacity.source.checkpoint import summarize_headers
    from capacity.source.resolve import recorded_checkpoint

    assert recorded_checkpoint(tmp_path, "catalog x") is None
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_parameters": 36, "total_size": 48}, "weight_map": {}}))
    assert recorded_checkpoint(tmp_path, "catalog x") is None  # an index's metadata is not a header summary
    summary = summarize_headers({"model.safetensors": {"w": {"dtype": "F8_E4M3", "shape": [4, 8], "data_offsets": [0, 32]}, "s": {"dtype": "F32", "shape": [4], "data_offsets": [32, 48]}}}, "hand")
    (tmp_path / "capacity.safetensors-summary.json").write_text(json.dumps(summary.to_dict()))
    recorded = recorded_checkpoint(tmp_path, "catalog x")
    assert recorded is not None and recorded.elements_by_dtype == {"F8_E4M3": 32, "F32": 4} and recorded.bytes_by_dtype == {"F8_E4M3": 32, "F32": 16}
    assert recorded.quantized_dtypes == ("F8_E4M3",) and recorded.serving_bytes(2) == 32 + 16  # fp8 weights and fp32 scales as stored
    broken = dict(summary.to_dict(), element_count=35)
    (tmp_path / "capacity.safetensors-summary.json").write_text(json.dumps(broken))
    with pytest.raises(BadInput, match="do not match"):
        recorded_checkpoint(tmp_path, "catalog x")


def test_revision_from_serve_yaml_pins_the_commit_and_the_suggested_command(hub, catalog_config, tmp_path, capsys):
    from capacity.cli.app import main

    config = json.dumps(catalog_config("openai/whisper-tiny")).encode()
    refs = add_repo(hub.root, "acme/asr", {"main": {"config.json": config}, "v2": {"config.json": config, "model.safetensors": safetensors_bytes({"a": ("BF16", [10])})}})
    serve_yaml = tmp_path / "serve.yaml"
    serve_yaml.write_text("model: acme/asr\nrevision: v2\nmax-num-seqs: 8\n")
    code = main(["plan", "--config", str(serve_yaml), "--gpu", "L4", "--offline", "--estimate", "formula", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    plan = json.loads(out)
    assert (plan["model"]["revision"], plan["model"]["commit"], plan["fingerprint"]["model_commit"]) == ("v2", refs["v2"], refs["v2"])
    assert plan["model"]["safetensors"]["element_count"] == 10
    assert plan["suggested_command"].startswith("vllm serve acme/asr --revision v2 ")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "config.json").write_bytes(config)
    assert "has no revisions" in bad_input(str(folder), "v2")


@pytest.mark.parametrize(("repo", "needle"), [("acme/gated", "HF_TOKEN"), ("acme/flaky", "cannot reach the Hub"), ("acme/missing", "no model `acme/missing` on the Hub")])
def test_cli_failure_is_one_line_exit_2_with_nothing_else_on_stderr(hub, whisper_config, repo, needle):
    add_repo(hub.root, "acme/gated", {"main": {"config.json": whisper_config}}, gated_token=TOKEN)
    add_repo(hub.root, "acme/flaky", {"main": {"config.json": whisper_config, "model.safetensors": safetensors_bytes({"a": ("F16", [8])})}}, drop=("model.safetensors",))
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    proc = _cli(["plan", "--model", repo, "--gpu", "L4", "--offline", "--estimate", "formula"], env)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("capacity: error: ") and needle in lines[0], proc.stderr


def test_a_catalog_entry_missing_a_planning_file_is_planned_from_the_hub(hub):
    # The catalog holds Qwen3-VL-32B's published config.json but no preprocessor_config.json; the Hub repo (here the
    # local server, with a preprocessor config written for this test: size.longest_edge 1,048,576) has the rest.
    catalog = REPO_ROOT / "capacity/source/catalog/models/Qwen--Qwen3-VL-32B-Instruct"
    preprocessor = {"size": {"longest_edge": 1_048_576, "shortest_edge": 65_536}, "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
                    "image_processor_type": "Qwen2VLImageProcessorFast", "processor_class": "Qwen3VLProcessor"}
    video = {"size": {"longest_edge": 2_097_152, "shortest_edge": 4_096}, "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
             "video_processor_type": "Qwen3VLVideoProcessor", "processor_class": "Qwen3VLProcessor"}
    add_repo(hub.root, "Qwen/Qwen3-VL-32B-Instruct", {"main": {
        "config.json": (catalog / "config.json").read_bytes(),
        "preprocessor_config.json": json.dumps(preprocessor).encode(),
        "video_preprocessor_config.json": json.dumps(video).encode(),
    }})
    source = resolve_model("Qwen/Qwen3-VL-32B-Instruct")
    assert source.origin == "hub"
    plan = plan_for("Qwen/Qwen3-VL-32B-Instruct", ServingArgs(), "H200")
    # 1,048,576 px // (16 x 2)^2 = 1,024 cells = 32 x 32; the video: 2,097,152 // 2 // 32^2 = 1,024 cells = 32 x 32 frames,
    # 2 frames x 1024 x 1024 = 2,097,152 <= longest_edge, grid 1 x 64 x 64 = 4,096 patches // 4 = 1,024
    assert dict(plan.budget.max_tokens_per_item) == {"image": 1_024, "video": 1_024}


def test_a_catalog_entry_missing_a_planning_file_without_the_hub_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    message = bad_input("Qwen/Qwen3-VL-32B-Instruct")
    assert "cannot be planned yet" in message and "no preprocessor_config.json" in message and "HF_HUB_OFFLINE=1" in message
