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
    then each point is compared with a `capacity plan` of its own (which traces alone, with the warmup batches).
    In-process here (a test runner's threads): copies of a process are tested in the next test."""
    grid = ["--gpu", "L4,H200", "--tensor-parallel-size", "1,2", "--max-num-seqs", "16,256", "--max-model-len", "2048,4096"]
    sweep = json_of(["sweep", "--model", MODEL, *grid], own_cache / "sweep.json")
    assert len(sweep["points"]) == 16
    assert not any("formulas" in note for note in sweep["notes"])  # every point was traced
    by_knobs = {(p["gpu"], p["tensor_parallel_size"], p["max_num_seqs"], p["max_model_len"]): p for p in sweep["points"]}
    # on the H200, max_model_len 2048 and 4096 batch 8192 tokens both: one of the two is traced (phase_inputs)
    for gpu, tp, seqs, mml in [("L4", 2, 256, 2048), ("H200", 1, 256, 2048), ("H200", 2, 256, 4096), ("H200", 1, 16, 4096)]:
        knobs = ["--gpu", gpu, "--tensor-parallel-size", str(tp), "--max-num-seqs", str(seqs), "--max-model-len", str(mml)]
        plan = json_of(["plan", "--model", MODEL, *knobs], own_cache / "plan.json")
        assert "estimated_by_fake_trace" in json.dumps(plan)  # the default path: the plan's own trace
        point = by_knobs[(gpu, tp, seqs, mml)]
        assert {k: point[k] for k in point_of_plan(plan)} == point_of_plan(plan)


def traced_alone(source: Any, spec: Any, serving: Any, gpu: Any) -> tuple[Any, str]:
    """A sweep point's trace as `capacity plan`'s trace runs: its own model, its own probe, nothing shared."""
    from profilers import api

    try:
        return api.cached_trace(source, spec, serving, gpu, warmup=False), ""
    except api.TraceStopped as stopped:
        return None, stopped.reason


def test_the_sweep_command_as_users_run_it_plans_what_each_point_traced_alone_gives(own_cache: Path, tmp_path: Path) -> None:
    """`capacity sweep` in its own process (no other thread: its workers are copies of it made after its first trace,
    and knobs whose phases read the same are traced once) writes the points that every point traced alone gives."""
    import os
    import subprocess
    import sys

    from capacity import disk_cache
    from capacity.planning.sweep import SweepAxes, run_sweep
    from capacity.serving.config import ServingArgs
    from tests.support.paths import REPO_ROOT

    grid = ["--gpu", "L4,H200", "--max-num-seqs", "16", "--max-model-len", "2048,4096"]  # 3 traces: one here, two in copies
    env = {**os.environ, "CAPACITY_CACHE_DIR": str(own_cache / "cli-cache"), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", "capacity", "sweep", "--model", MODEL, *grid, "--json", str(tmp_path / "cli.json")], env=env, capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    with disk_cache.bypassed():
        alone = run_sweep(MODEL, ServingArgs(), SweepAxes(gpus=("L4", "H200"), max_num_seqs=(16,), max_model_lens=(2048, 4096)), profiler=traced_alone)
    assert not alone.notes or not any("formulas" in n for n in alone.notes)
    assert json.loads((tmp_path / "cli.json").read_text())["points"] == alone.to_dict()["points"]


def test_knobs_whose_phases_read_the_same_are_traced_once_and_get_what_their_own_trace_measures(own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On an H200, max_model_len 2048 and 4096 both batch 8192 tokens (vLLM's default there): the same phases. The
    second is not traced; what it gets (and what the disk cache keeps for it) is its own trace's profile, to the
    knobs its fingerprint records."""
    from capacity import disk_cache
    from capacity.gpu.catalog import gpu_by_name
    from capacity.model.registry import load_model
    from capacity.serving.config import ServingArgs, resolve_serving
    from profilers import api, sweep_traces
    from tests.profilers.test_shared_model import comparable

    calls: list[int] = []
    real = api.run_profile

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "run_profile", counted)
    monkeypatch.setattr(sweep_traces, "_TRACES", {})
    source, spec = load_model(MODEL)
    gpu = gpu_by_name("H200")
    short, long = (resolve_serving(ServingArgs(max_num_seqs=16, max_model_len=n), spec, gpu) for n in (2048, 4096))
    assert short.max_num_batched_tokens == long.max_num_batched_tokens == 8192
    assert sweep_traces.trace_in_parallel(source, spec, [(short, gpu), (long, gpu)]) == 2
    assert calls == [1]
    derived = sweep_traces._TRACES[sweep_traces.sweep_key(source, spec, long, gpu)]
    assert derived.fingerprint.knobs["max_model_len"] == 4096
    assert api.stored_trace(source, spec, long, gpu, warmup=False) == derived
    with disk_cache.bypassed():
        own = api.cached_trace(source, spec, long, gpu, warmup=False)
    assert comparable(derived) == comparable(own)
