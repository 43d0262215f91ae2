"""CUDA graphs that vLLM captures after sizing the KV cache (versions that set no graph memory aside: before 0.20, and
Model Runner V2 where profile_cudagraph_memory returns 0), and the capture OOM when too little is left for them.

Hand figures (tests/memory/test_cuda_graphs.py's forms; 140 KiB a piece, 40 KiB a FULL layer, 1 MiB floor):
- Qwen2.5-72B at TP 4 (80 layers, hidden 8192, intermediate 29,568 / 4 = 7,392 a rank), the V1 runner, 51 PIECEWISE
  sizes of 81 pieces and 35 FULL graphs: first = 43 MiB + round(1.38 x 512 x 2 x (2 x 8192 + 3 x 7392)) + 70 MiB +
  81 x 140 KiB, then 50 x 81 x 140 KiB + 34 x max(80 x 40 KiB, 1 MiB) = 876,610,355 B.
- Qwen3-8B (36 layers), the V1 runner at max_num_seqs 256: 502,813,983 B; with LoRA the second set is 51 x 37 x 140 KiB
  + 35 x max(36 x 40 KiB, 1 MiB) = 322,129,920 B.
"""

from __future__ import annotations

import json

from capacity.cli.app import main

MiB, KiB = 2**20, 2**10
QWEN72_ACT = 512 * 2 * (2 * 8192 + 3 * 7392)
QWEN72_GRAPHS = 43 * MiB + round(1.38 * QWEN72_ACT) + 70 * MiB + 81 * 140 * KiB + 50 * 81 * 140 * KiB + 34 * max(80 * 40 * KiB, MiB)
L40S_TP4 = ("--model", "Qwen2.5-72B-Instruct", "--gpu", "L40S", "-tp", "4", "--max-model-len", "8192", "--estimate", "formula")


def plan(capsys, *args: str) -> dict:
    main(["plan", *args, "--json", "-"])
    return json.loads(capsys.readouterr().out)


def errors(result: dict) -> dict[str, dict]:
    return {h["id"]: h for h in result["hazards"] if h["severity"] == "error"}


def test_graphs_captured_after_the_kv_cache_are_the_runners_estimate_and_not_in_the_budget(capsys):
    before = plan(capsys, *L40S_TP4, "--vllm-version", "0.19.0")
    assert QWEN72_GRAPHS == 876_610_355
    assert before["memory"]["graphs_after_budget_bytes"] == QWEN72_GRAPHS and before["memory"]["cuda_graphs"]["bytes"] == 0
    after = plan(capsys, *L40S_TP4, "--vllm-version", "0.20.0")  # 0.20 sets its estimate aside: nothing after the budget
    assert after["memory"]["graphs_after_budget_bytes"] == 0 and after["memory"]["cuda_graphs"]["bytes"] > 0


def test_too_little_left_after_the_kv_cache_is_a_capture_oom_and_its_fix_clears_it(capsys):
    tight = plan(capsys, *L40S_TP4, "--vllm-version", "0.19.0", "--gpu-memory-utilization", "0.96")
    hazard = errors(tight)["graph_capture_oom"]
    assert "about 0.82 GiB (estimated)" in hazard["message"] and tight["verdict"] == "does_not_fit"
    assert hazard["fix_knobs"] == {"gpu_memory_utilization": 0.95}
    # 0.18-0.19 take VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (envs.py, default 0 there); 0.16.0 has no such variable
    assert "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1" in hazard["fix"]
    older = errors(plan(capsys, *L40S_TP4, "--vllm-version", "0.16.0", "--gpu-memory-utilization", "0.96"))["graph_capture_oom"]
    assert "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" not in older["fix"]
    assert "graph_capture_oom" not in errors(plan(capsys, *L40S_TP4, "--vllm-version", "0.19.0", "--gpu-memory-utilization", "0.95"))


def test_no_capture_oom_without_graphs_or_where_the_version_sets_them_aside(capsys):
    assert "graph_capture_oom" not in errors(plan(capsys, *L40S_TP4, "--vllm-version", "0.19.0", "--gpu-memory-utilization", "0.96", "--enforce-eager"))
    assert "graph_capture_oom" not in errors(plan(capsys, *L40S_TP4, "--vllm-version", "0.20.0", "--gpu-memory-utilization", "0.96"))


def test_a_request_above_the_free_memory_is_the_startup_hazard_not_a_capture_oom(capsys):
    """Above the free memory vLLM refuses before it sizes anything; on PCIe L40Ss that is a warning (NCCL's share is
    the NVLink measurement: tests/planning/test_startup_free_memory.py), and no capture OOM is claimed either way."""
    result = plan(capsys, *L40S_TP4, "--vllm-version", "0.19.0", "--gpu-memory-utilization", "0.97")
    ids = {h["id"] for h in result["hazards"]}
    assert "requested_exceeds_free" in ids and "graph_capture_oom" not in ids


def test_lora_graphs_come_out_of_the_headroom_where_the_version_sets_none_aside(capsys):
    lora = plan(capsys, "--model", "Qwen3-8B", "--gpu", "H200", "--estimate", "formula", "--enable-lora", "--max-num-seqs", "256", "--vllm-version", "0.15.1")
    assert lora["memory"]["lora_cuda_graphs"]["bytes"] == 0
    assert lora["memory"]["graphs_after_budget_bytes"] == 502_813_983 + 322_129_920
