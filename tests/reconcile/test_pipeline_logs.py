"""`capacity reconcile` of the benchmark's pipeline- and data-parallel starts, read as vLLM wrote them: each stage's
'Model loading took' and 'Available KV cache memory' beside that stage's plan, the engine's KV size beside the pool,
the worker prefixes (`Worker_PP1`, Ray's `RayWorkerWrapper` with its rank lines, `DPEngineCoreActor`) and srun's
`0: ` prefix. Expected figures are the log's own lines or worked by hand in the comments."""

from __future__ import annotations

import json

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_FITS
from capacity.vllm.log_startups import load_vllm_startups
from tests.support.paths import REPO_ROOT

LOGS = REPO_ROOT / "bench" / "vllm_logs"
PP2 = LOGS / "qwen3-32b-2xrtxpro6000-pp2-util0.426-len32768-v0.27.1-excerpt.log"
QWEN3_32B = str(LOGS / "configs" / "Qwen--Qwen3-32B")


def test_the_pp2_excerpt_gives_its_model_and_knobs_from_the_pasted_docker_command() -> None:
    # `vllm/vllm-openai:latest Qwen/Qwen3-32B \` then `--pipeline-parallel-size 2 \`, `--gpu-memory-utilization 0.426 \`,
    # `--max-model-len 32768 \`, `--port 8000`: one command over five lines
    facts = load_vllm_startups(PP2)[0]
    assert facts.model == "Qwen/Qwen3-32B"
    assert facts.log_knobs == {"pipeline_parallel_size": 2, "gpu_memory_utilization": 0.426, "max_model_len": 32768}
    assert facts.pipeline_ranks == (0, 1)
    by_line = {(w.key, w.pp_rank): w.value for w in facts.workers}
    assert by_line == {("Model loading took", 0): 30.52, ("Model loading took", 1): 30.52, ("Available KV cache memory", 0): 6.92}


def test_the_gh200_tp4_pp2_ray_log_gives_each_worker_its_stage_and_the_engine_the_smallest_pool() -> None:
    facts = load_vllm_startups(LOGS / "qwen3-30b-a3b-2507-8xgh200-tp4-pp2-ray-len262144-v0.10.1.log")[0]
    assert facts.model == "Qwen/Qwen3-30B-A3B-Instruct-2507"  # the `0: ` srun prefix is read through
    assert facts.log_knobs == {"tensor_parallel_size": 4, "pipeline_parallel_size": 2}
    kv = {w.line: w for w in facts.workers if w.key == "Available KV cache memory"}
    # line 56: pid 206149 printed 'rank 7 ... PP rank 1, TP rank 3'; line 35: pid 132250 printed no rank line, and the
    # driver's node's only rank line (pid 132266) says PP rank 0
    assert (kv[56].value, kv[56].pp_rank, kv[56].tp_rank, kv[56].repeated) == (70.58, 1, 3, 7)
    assert (kv[35].value, kv[35].pp_rank) == (76.15, 0) and kv[35].rank_basis.startswith("inferred")
    # vLLM 0.10 prints one 'GPU KV cache size' per worker; the engine takes the smallest of the eight lines
    assert len(facts.kv_cache_tokens_printed) == 8
    assert facts.kv_cache_tokens == 6_167_536 and facts.max_concurrency == 23.53


def test_the_dp2_ray_log_gives_each_engine_its_dp_rank() -> None:
    facts = load_vllm_startups(LOGS / "qwen2.5-0.5b-2xt4-dp2-ray-v0.11.0.log")[0]
    assert facts.log_knobs["data_parallel_size"] == 2
    loads = {w.dp_rank: w.value for w in facts.workers if w.key == "Model loading took"}
    kv = {w.dp_rank: w.value for w in facts.workers if w.key == "Available KV cache memory"}
    assert loads == {1: 0.9271, 0: 0.9271} and kv == {1: 10.74, 0: 10.74}


def test_the_pp3_log_prints_the_first_stage_only() -> None:
    facts = load_vllm_startups(LOGS / "qwen3-32b-awq-3x2080ti22gb-pp3-len16384-v0.21.0.log")[0]
    assert facts.log_knobs["pipeline_parallel_size"] == 3 and facts.pipeline_ranks == (0, 1, 2)
    assert {(w.key, w.pp_rank, w.value) for w in facts.workers} == {("Model loading took", 0, 6.49), ("Available KV cache memory", 0, 10.85)}


@pytest.mark.formula("the stage rows' presence and the weights, which the trace does not change; the benchmark runs the trace")
def test_reconcile_compares_each_stage_of_the_pp2_start(capsys: pytest.CaptureFixture[str]) -> None:
    # Qwen3-32B: 64 layers, hidden 5120, 64 x 128 query and 8 x 128 KV heads, intermediate 25,600, untied vocab 151,936.
    # A layer: q, o 5120 x 8192 x 2 + k, v 5120 x 1024 x 2 + gate, up, down 3 x 5120 x 25,600 + norms 2 x 5120 + 2 x 128
    # = 487,598,336 parameters. Stage 0 (layers 0-31) + the embedding 151,936 x 5120: 16,381,059,072 x 2 B = 30.51 GiB;
    # stage 1 (layers 32-63) + final norm + LM head: the same + 5120 -> both 30.51 GiB of parameters, 30.52 with the
    # 10 MiB rotary cache: the log's two 'Model loading took 30.52 GiB' lines.
    code = main(["reconcile", str(PP2), "--model", QWEN3_32B, "--gpu", "RTX-PRO-6000", "--vllm-version", "0.27.1", "--estimate", "formula", "--json"])
    assert code == EXIT_FITS
    doc = json.loads(capsys.readouterr().out)
    rows = {r["key"]: r for r in doc["rows"]}
    assert rows["model_loading_pp0"]["vllm_value"] == 30.52 and rows["model_loading_pp0"]["agrees"] is True
    assert rows["model_loading_pp1"]["vllm_value"] == 30.52 and rows["model_loading_pp1"]["agrees"] is True
    assert rows["available_kv_cache_pp0"]["vllm_value"] == 6.92 and "Worker_PP0" in rows["available_kv_cache_pp0"]["explanation"]
    assert "available_kv_cache_pp1" not in rows and "available_kv_cache" not in rows and "model_loading" not in rows
    assert any("no 'Available KV cache memory' line of PP rank 1" in n for n in doc["notes"])
    # the engine's pool: 56,640 tokens = 3,540 blocks of 16 (one full-attention group); 1.73x = 3,540 / cdiv(32,768, 16)
    assert rows["kv_cache_tokens"]["vllm_value"] == 56_640 and rows["num_blocks"]["vllm_value"] == 3_540
    assert rows["blocks_per_request"]["capacity_value"] == 2048


def test_bare_reconcile_of_the_pp2_log_compares_each_stage_it_can(capsys: pytest.CaptureFixture[str]) -> None:
    # `capacity reconcile LOG` as a user runs it: the model and knobs from the pasted docker command, no GPU total in the
    # excerpt, so each stage's load is compared (30.52 GiB each, by hand in the test above) and the KV memory needs --gpu
    assert main(["reconcile", str(PP2), "--json"]) == EXIT_FITS
    doc = json.loads(capsys.readouterr().out)
    rows = {r["key"]: r for r in doc["rows"]}
    assert doc["model"] == "Qwen/Qwen3-32B" and doc["plan_estimate"] == "trace" and doc["gpu_total_known"] is False
    assert rows["model_loading_pp0"]["agrees"] is True and rows["model_loading_pp1"]["agrees"] is True
    assert rows["available_kv_cache_pp0"]["needs_gpu"] is True and rows["available_kv_cache_pp0"]["vllm"] == "6.92 GiB"
    assert rows["blocks_per_request"]["capacity_value"] == 2048  # cdiv(32,768, 16)
