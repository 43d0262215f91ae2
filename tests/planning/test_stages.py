"""Pipeline stages planned as vLLM 0.33's workers (capacity/planning/stages.py), on the default path (the trace).

Llama-3.1-70B-Instruct at TP 4 x PP 2 on an H200, figures worked by hand from its config (hidden 8192, 80 layers, FFN
28672, 64 query / 8 KV heads of 128, vocab 128,256, untied, bf16) and vLLM 0.33's rules:
- get_pp_indices: 80 / 2 -> layers 0..39 and 40..79;
- a layer per TP-4 rank: q 8192 x 2048 + k, v 2 x 8192 x 256 + o 2048 x 8192 + gate/up/down 3 x 8192 x 7168
  + 2 norms x 8192 = 213,925,888 params = 427,851,776 B; 40 layers 17,114,071,040 B; the embedding (first stage)
  = the LM head (last) = 128,256 / 4 x 8192 x 2 B = 525,336,576 B; the final norm (last) 16,384 B:
  stage 0 17,639,407,616 B, stage 1 17,639,424,000 B;
- the last stage receives hidden_states and residual (llama.py's make_empty_intermediate_tensors_factory):
  2 x 8192 tokens x 8192 x 2 B = 268,435,456 B, not split by TP; the first receives none;
- KV: 2 KV heads per rank x 16 tokens x 256 x 2 B = 16,384 B a layer, 40 layers a stage: 655,360 B a block;
  a request at max_model_len 131,072 takes 8,192 blocks.
"""

from __future__ import annotations

import json

import pytest

from capacity.cli.app import main
from capacity.memory.collectives import NCCL_COMMUNICATOR_BYTES
from capacity.planning.stages import pipeline_window_batches

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"  # the catalog entry: the published config.json


@pytest.fixture(scope="module")
def llama_70b_tp4_pp2(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("llama-3.1-70b") / "plan.json"
    assert main(["plan", "--model", LLAMA_70B, "--gpu", "H200", "-tp", "4", "-pp", "2", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_each_stage_loads_its_own_layers_and_ends(llama_70b_tp4_pp2: dict) -> None:
    stages = llama_70b_tp4_pp2["stages"]
    assert [s["layers"] for s in stages] == [[0, 40], [40, 80]]
    assert [s["memory"]["weights"]["bytes"] for s in stages] == [17_639_407_616, 17_639_424_000]
    assert [s["memory"]["pp_intermediate"]["bytes"] for s in stages] == [0, 268_435_456]


def test_the_sampler_runs_on_the_last_stage_only(llama_70b_tp4_pp2: dict) -> None:
    first, last = llama_70b_tp4_pp2["stages"]
    # MRV2 profile_run: encoder profiling on the first PP rank only, the sampler on the last only
    assert first["profile_phases"] == ["encoder", "decoder"] and last["profile_phases"] == ["decoder", "sampler", "sampler_warmup"]
    # the whole model's peak is the sampler's (128,256-wide logits): the last stage carries it, the first only its layers'
    assert last["memory"]["activation_peak"]["bytes"] == llama_70b_tp4_pp2["memory"]["activation_peak"]["bytes"]
    assert first["memory"]["activation_peak"]["bytes"] < last["memory"]["activation_peak"]["bytes"]


def test_each_stage_sizes_its_blocks_on_its_own_memory_and_the_smallest_sets_the_pool(llama_70b_tp4_pp2: dict) -> None:
    plan = llama_70b_tp4_pp2
    stages = plan["stages"]
    requested = -(-150_109_880_320 * 92 // 100)  # ceil(H200 cudaMemGetInfo total x 0.92) = 138,101,089,895
    for s in stages:
        assert s["kv"]["bytes_per_block"] == 655_360 and s["kv"]["groups"][0]["num_layers"] == 40
        assert s["kv"]["available_bytes"] == requested - s["non_kv_bytes"]
        assert s["kv"]["num_blocks"] == s["kv"]["available_bytes"] // 655_360
    assert [s["limiting"] for s in stages] == [False, True]  # the last holds the sampler's peak and the received tensors
    assert plan["kv_cache"]["num_blocks"] == stages[1]["kv"]["num_blocks"] < stages[0]["kv"]["num_blocks"]
    assert plan["concurrency"]["vllm_reported"] == round(stages[1]["kv"]["num_blocks"] / 8192, 2)


def test_every_stage_holds_the_pp_communicator_and_the_serve_line_names_the_split(llama_70b_tp4_pp2: dict) -> None:
    plan = llama_70b_tp4_pp2
    first, last = plan["stages"]
    assert first["memory"]["collectives"]["bytes"] == last["memory"]["collectives"]["bytes"]
    assert first["memory"]["collectives"]["bytes"] > NCCL_COMMUNICATOR_BYTES
    assert plan["serving"]["pipeline_parallel_size"] == 2
    assert "--tensor-parallel-size 4 --pipeline-parallel-size 2" in plan["suggested_command"]


def test_sliding_window_layers_reserve_for_the_batches_in_flight() -> None:
    # VllmConfig.max_concurrent_batches: async scheduling on the V2 runner -> PP + 1; the V1 runner with PP -> PP
    assert [pipeline_window_batches(pp, True) for pp in (2, 3, 4)] == [3, 4, 5]
    assert [pipeline_window_batches(pp, False) for pp in (2, 3, 4)] == [2, 3, 4]


def test_a_cold_compile_benchmarks_the_embedding_on_the_first_stage_only(tmp_path) -> None:
    """Llama-3.1-8B at PP 2 on an L4 (L2 48 MiB), 2,048 batched tokens: each stage compiles its own layers; only the
    first stage's graph gathers the token embeddings, so only it has S = 128,256 x 4096 x 2 B (the table) + 2,048 x
    4096 x 2 B (the output) + 50,331,648 B (the L2 flush) = 1,117,782,016 B; every stage has A = output + flush =
    67,108,864 B. A stage's cold peak is max(warm peak + A, S) (capacity/memory/compile_cache.py)."""
    plans = {}
    for cache in ("warm", "cold"):
        out = tmp_path / f"{cache}.json"
        argv = ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4", "-pp", "2", "--max-num-batched-tokens", "2048"]
        assert main([*argv, "--max-model-len", "8192", "--compile-cache", cache, "--json", str(out)]) in (0, 1)
        plans[cache] = json.loads(out.read_text())["stages"]
    s, a = 128_256 * 4096 * 2 + 2048 * 4096 * 2 + 50_331_648, 2048 * 4096 * 2 + 50_331_648
    assert s == 1_117_782_016 and a == 67_108_864
    for rank, (warm, cold) in enumerate(zip(plans["warm"], plans["cold"], strict=True)):
        peak = warm["memory"]["activation_peak"]["bytes"] + warm["memory"]["encoder_cache"]["bytes"]
        expected = max(peak + a, s) if rank == 0 else peak + a
        assert cold["memory"]["activation_peak"]["bytes"] + cold["memory"]["encoder_cache"]["bytes"] == expected
