"""`capacity reconcile LOG` with no flags, as a user runs it on the benchmark's public logs: exit 0 on every log that
names its model, the rows planned from the GPU's total shown as "needs --gpu" where the log prints no total, and the
KV arithmetic from the log's own KV memory checked against figures worked by hand from the log's lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_FITS
from capacity.reconcile.log_inputs import is_local_path
from capacity.source.resolve import catalog
from capacity.vllm.log_startups import load_vllm_startups
from tests.support.paths import REPO_ROOT

LOGS = sorted((REPO_ROOT / "bench" / "vllm_logs").glob("*.log"))


def _named_model(log: Path) -> str | None:
    """The Hub id the log names (its first startup), or None (no model line, or a local folder)."""
    model = load_vllm_startups(log)[0].model
    return None if model is None or is_local_path(model) else model


def _config_folder(log: Path) -> Path | None:
    """Where a user's HF cache would have the config of the model the log names, for the models capacity's catalog
    does not ship: the bench's copy its sidecar plans with (bench/vllm_logs/configs/README.md says where each was read)."""
    model = json.loads(log.with_suffix(".json").read_text()).get("capacity_model")
    folder = REPO_ROOT / model if model else None
    return folder if folder is not None and (folder / "config.json").is_file() else None


NAMED = [p for p in LOGS if _named_model(p) is not None and (_named_model(p) in catalog(include_unplannable=True) or _config_folder(p) is not None)]


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An HF cache holding, for each named model the catalog does not ship, the config the bench plans it with (the
    cache a user who had pulled the model would have; no Hub here)."""
    hub = tmp_path / "hub"
    for log in NAMED:
        model, folder = _named_model(log), _config_folder(log)
        if folder is None or model in catalog(include_unplannable=True):
            continue
        repo = hub / ("models--" + model.replace("/", "--"))
        commit = "0" * 40
        (repo / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
        for f in folder.iterdir():
            (repo / "snapshots" / commit / f.name).write_bytes(f.read_bytes())
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return hub


def test_the_bench_has_logs_that_name_their_model_without_a_gpu_total() -> None:
    bare = [p for p in NAMED if all(f.gpu.cuda_total_gib is None and f.gpu.smi_name is None for f in load_vllm_startups(p))]
    assert len(NAMED) >= 15 and len(bare) >= 10


@pytest.mark.formula("the exit code and the split of the rows, which no estimate changes; the default path's figures: the test below")
@pytest.mark.parametrize("log", NAMED, ids=[p.stem for p in NAMED])
def test_bare_reconcile_exits_0_on_every_bench_log_that_names_its_model(log: Path, hf_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["reconcile", str(log), "--json"])
    out, err = capsys.readouterr()
    assert code == EXIT_FITS, err
    doc = json.loads(out)
    for r in doc.get("engines", [doc]):
        shown = r["by_version"] or [r]
        for one in shown:
            assert one["rows"]
            known = any(f.gpu.cuda_total_gib is not None or f.gpu.smi_name is not None for f in load_vllm_startups(log))
            assert one["gpu_total_known"] is known
            needs = {row["key"] for row in one["rows"] if row["needs_gpu"]}
            assert set(one["needs_gpu"]) == needs
            if not known:
                # what needs the total is never compared; the log-only rows are
                assert all(row["agrees"] is None and row["capacity"] == "needs --gpu" for row in one["rows"] if row["needs_gpu"])
                staged = {k for k in needs if k.startswith("available_kv_cache_pp")}  # a pipeline stage's KV memory (stage_rows.py)
                assert needs - staged <= {
                    "non_kv",
                    "available_kv_cache",
                    "requested_memory",
                    "free_at_startup",
                    "cuda_graphs_estimate",
                    "num_blocks",
                    "max_concurrency",
                    "kv_cache_tokens",
                }
                assert set(one["capacity_figures"]) == {"weights"}


def test_bare_reconcile_of_an_l4_log_works_its_kv_lines_from_the_logged_kv_memory(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.11.0, Llama-3.1-8B at max_model_len 32,000 on an L4; the log prints 'Available KV cache memory: 4.75 GiB',
    'GPU KV cache size: 38,944 tokens', 'Maximum concurrency for 32,000 tokens per request: 1.22x', and no GPU total.
    By hand: a block is 32 layers x 2 x 8 KV heads x 128 x 2 B x 16 tokens = 2,097,152 B; 4.75 GiB prints for
    [4.745, 4.755) GiB = 2,429.4-2,434.6 blocks, so 2,429-2,434; 38,944 tokens = num_blocks // 1 group x 16 gives 2,434;
    a request is cdiv(32,000, 16) = 2,000 blocks, and 2,434 / 2,000 = 1.217 -> 1.22x. The default (trace) path."""
    log = REPO_ROOT / "bench" / "vllm_logs" / "llama-3.1-8b-l4-len32000-util0.92-v0.11.0.log"
    assert main(["reconcile", str(log), "--json"]) == EXIT_FITS
    doc = json.loads(capsys.readouterr().out)
    rows = {r["key"]: r for r in doc["rows"]}
    assert doc["plan_estimate"] == "trace" and doc["gpu_total_known"] is False
    assert rows["num_blocks"]["vllm"] == "2,434" and rows["num_blocks"]["capacity"] == "2,429-2,434" and rows["num_blocks"]["agrees"] is True
    assert rows["blocks_per_request"]["capacity_value"] == 2000 and rows["blocks_per_request"]["agrees"] is True
    assert rows["max_concurrency"]["capacity"] == "1.21-1.22x" and rows["max_concurrency"]["agrees"] is True
    assert rows["kv_cache_tokens"]["capacity"] == "38,864-38,944 tokens" and rows["kv_cache_tokens"]["agrees"] is True
    assert doc["needs_gpu"] == ["non_kv", "available_kv_cache"]
    assert rows["non_kv"]["vllm"] == "requested - 4.75 GiB" and rows["available_kv_cache"]["vllm"] == "4.75 GiB"
    # 'Model loading took 14.9889 GiB': 8,030,261,248 parameters x 2 B + the rotary cache, with no GPU total needed
    assert rows["model_loading"]["capacity_value"] is not None and not rows["model_loading"]["needs_gpu"]


def test_a_log_without_a_total_still_compares_with_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """--gpu L4 brings the budget rows back: nothing needs --gpu then."""
    log = REPO_ROOT / "bench" / "vllm_logs" / "llama-3.1-8b-l4-len32000-util0.92-v0.11.0.log"
    assert main(["reconcile", str(log), "--gpu", "L4", "--estimate", "formula", "--json"]) == EXIT_FITS
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpu_total_known"] is True and doc["needs_gpu"] == [] and doc["gpu"] == "L4"
    assert {"non_kv", "available_kv_cache"} <= {r["key"] for r in doc["rows"]}
