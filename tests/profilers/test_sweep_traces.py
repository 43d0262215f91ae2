"""A first sweep on the default estimate: its traces run in worker processes on shared fake models, and every point
is what `capacity plan` gives for that point's knobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capacity.cli.app import main

MODEL = "nvidia/Nemotron-Parse"


@pytest.fixture
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CAPACITY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def json_of(argv: list[str], path: Path) -> dict[str, Any]:
    code = main([*argv, "--json", str(path)])
    assert code in (0, 1)
    return json.loads(path.read_text())


def point_of_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """The sweep point's figures, read from `capacity plan --json` (capacity/planning/sweep.py point_from_plan)."""
    s, c, kv, memory = plan["serving"], plan["concurrency"], plan["kv_cache"], plan["memory"]
    return {
        "gpu": plan["gpu"]["name"],
        "gpu_total_memory_bytes": plan["gpu"]["total_memory_bytes"],
        "tensor_parallel_size": s["tensor_parallel_size"],
        "max_num_seqs": s["max_num_seqs"],
        "max_model_len": s["max_model_len"],
        "max_num_batched_tokens": s["max_num_batched_tokens"],
        "gpu_memory_utilization": s["gpu_memory_utilization"],
        "verdict": plan["verdict"],
        "actual_requests": c["actual_requests"],
        "max_concurrent_requests": c["max_concurrent_requests"],
        "concurrency_actual": c["actual"],
        "concurrency_vllm_reported": c["vllm_reported"],
        "tokens_vllm_reported": kv["tokens_vllm_reported"],
        "num_blocks": kv["num_blocks"],
        "bytes_per_block": kv["bytes_per_block"],
        "available_kv_bytes": kv["available_bytes"],
        "non_kv_bytes": memory["non_kv_bytes"],
        "weights_bytes": memory["weights"]["bytes"],
        "max_model_len_that_fits": plan["max_model_len_that_fits"],
        "errors": " ".join(h["id"] for h in plan["hazards"] if h["severity"] == "error"),
        "warnings": " ".join(h["id"] for h in plan["hazards"] if h["severity"] == "warning"),
    }


def test_every_point_of_a_first_traced_sweep_equals_capacity_plan_of_its_knobs(own_cache: Path) -> None:
    """An empty cache: the sweep traces its distinct knobs in worker processes, each on its worker's shared model,
    then each point is compared with a `capacity plan` of its own (which traces alone, with the warmup batches)."""
    sweep = json_of(["sweep", "--model", MODEL, "--gpu", "L4,H200", "--tensor-parallel-size", "1,2", "--max-num-seqs", "16,256", "--max-model-len", "2048,9000"], own_cache / "sweep.json")
    assert len(sweep["points"]) == 16
    assert not any("formulas" in note for note in sweep["notes"])  # every point was traced
    by_knobs = {(p["gpu"], p["tensor_parallel_size"], p["max_num_seqs"], p["max_model_len"]): p for p in sweep["points"]}
    for gpu, tp, seqs, mml in [("L4", 1, 16, 2048), ("L4", 2, 256, 9000), ("H200", 1, 256, 2048), ("H200", 2, 16, 9000)]:
        knobs = ["--gpu", gpu, "--tensor-parallel-size", str(tp), "--max-num-seqs", str(seqs), "--max-model-len", str(mml)]
        plan = json_of(["plan", "--model", MODEL, *knobs], own_cache / "plan.json")
        assert "estimated_by_fake_trace" in json.dumps(plan)  # the default path: the plan's own trace
        point = by_knobs[(gpu, tp, seqs, mml)]
        assert {k: point[k] for k in point_of_plan(plan)} == point_of_plan(plan)
