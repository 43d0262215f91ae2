"""Every public vLLM log of bench/vllm_logs/ is read by reconcile's parser, and `capacity reconcile` compares each
one the benchmark plans (exit 0); a log that does not say its GPU gets the one-line request for --gpu (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.cli import main
from capacity.errors import EXIT_BAD_INPUT, EXIT_FITS
from capacity.vllm_log import load_vllm_startups

ROOT = Path(__file__).resolve().parents[1]
LOGS = sorted((ROOT / "bench" / "vllm_logs").glob("*.log"))


def _meta(log: Path) -> dict:
    return json.loads(log.with_suffix(".json").read_text())


def test_the_corpus_has_its_provenance() -> None:
    assert len(LOGS) >= 25
    for log in LOGS:
        meta = _meta(log)
        assert meta["source"] and "model" in meta and "gpu" in meta and "knobs" in meta, log.name


@pytest.mark.parametrize("log", LOGS, ids=[p.stem for p in LOGS])
def test_the_parser_reads_every_bench_log(log: Path) -> None:
    startups = load_vllm_startups(log)
    assert startups
    for facts in startups:
        # every startup printed at least one KV figure capacity compares
        assert any(x is not None for x in (facts.kv_cache_gib, facts.kv_cache_tokens, facts.max_concurrency, facts.free_memory)), log.name


def _flags(log: Path) -> list[str] | None:
    """`capacity reconcile` flags for a bench log: its model, and its GPU unless the log prints CUDA's total."""
    meta = _meta(log)
    model = meta.get("capacity_model")
    if not model:
        return None
    flags = [str(log), "--model", str(ROOT / model) if (ROOT / model).exists() else model, "--json"]
    if meta.get("gpu") and _in_catalog(meta["gpu"]):
        flags += ["--gpu", meta["gpu"]]
    return flags


def _in_catalog(name: str) -> bool:
    from capacity.errors import BadInput
    from capacity.gpus import gpu_by_name

    try:
        gpu_by_name(name)
    except BadInput:
        return False
    return True


RECONCILABLE = [p for p in LOGS if _flags(p) is not None]


@pytest.mark.parametrize("log", RECONCILABLE, ids=[p.stem for p in RECONCILABLE])
def test_reconcile_exits_0_on_every_bench_log_it_can_plan(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = _flags(log)
    assert flags is not None
    facts = load_vllm_startups(log)[0]
    if "--gpu" not in flags and facts.gpu.cuda_total_gib is None and facts.gpu.smi_name is None:
        code = main(["reconcile", *flags])
        out, err = capsys.readouterr()
        assert code == EXIT_BAD_INPUT and out == "" and "pass --gpu" in err and len(err.strip().splitlines()) == 1
        return
    code = main(["reconcile", *flags])
    out, err = capsys.readouterr()
    assert code == EXIT_FITS, err
    doc = json.loads(out)
    results = doc.get("engines", [doc])
    assert all(r["rows"] for r in results)
