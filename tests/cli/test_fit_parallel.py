"""`capacity fit` over TP x PP x DP layouts and nodes, as a user types it, on the default path (the trace checks the
first configuration).

- DeepSeek-V3 on H200 at max_model_len 163,840: an MLA cache block holds 16 tokens, so a request takes
  163,840 / 16 = 10,240 blocks. One TP-8 engine holds fewer than 10 such requests (its own plan says how many); two
  engines (DP 2 x TP 8 on two '8x H200' nodes, the experts over their 16 ranks) each need ceil(10 / 2) = 5, and their
  total is 2 x one engine's, one engine's being the plan of the configuration's own `capacity plan` line.
- Llama-3.1-70B (the catalog's published config; 80 layers of 855,654,400 params at TP 1, embedding and LM head 128,256 x
  8,192 each: 70,553,706,496 params, bfloat16: 141,107,412,992 B) on RTX A4000s (16,761,109,872 B each) in nodes of
  8: TP 8 puts at least 141,107,412,992 / 8 = 17,638,426,624 B of weights on a GPU, more than the GPU holds, and so does
  every layout of 8 GPUs or fewer (DP engines each hold a whole copy); the answer spans two nodes, TP inside one
  node (TP divides 8), PP splitting the layers.
"""

from __future__ import annotations

import json
import math
import shlex

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT, EXIT_FITS

RTX_A4000_BYTES = 16_761_109_872  # capacity/gpu/gpus.json


def run_json(argv: list[str], capsys) -> tuple[int, dict]:  # type: ignore[no-untyped-def]
    code = main([*argv, "--json"])
    out = capsys.readouterr()
    return code, json.loads(out.out) if out.out else {"err": out.err}


def test_two_dp_engines_across_two_nodes_meet_what_one_tp8_engine_cannot(capsys):
    code, one = run_json(["plan", "--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "-tp", "8", "--max-model-len", "163840"], capsys)
    assert code == EXIT_FITS and one["concurrency"]["max_concurrent_requests"] < 10
    argv = ["fit", "--model", "deepseek-ai/DeepSeek-V3", "--node", "8x H200", "-tp", "8", "--max-gpus", "16", "--min-concurrency", "10"]
    code, doc = run_json([*argv, "--max-model-len", "163840"], capsys)
    assert code == EXIT_FITS, doc
    top = doc["configs"][0]
    assert (top["gpu_count"], top["tensor_parallel_size"], top["pipeline_parallel_size"], top["data_parallel_size"]) == (16, 8, 1, 2)
    assert (top["nodes"], top["node"], top["estimate"]) == (2, "8x H200", "trace")
    assert "--tensor-parallel-size 8 --data-parallel-size 2" in top["plan_command"] and "--node '8x H200'" in top["plan_command"]
    code, engine = run_json(shlex.split(top["plan_command"])[1:], capsys)  # one engine at the configuration's knobs
    assert code == EXIT_FITS
    per_engine = engine["concurrency"]["max_concurrent_requests"]
    assert per_engine >= math.ceil(10 / 2) and top["requests_per_engine"] == per_engine
    assert top["requests_at_once"] == 2 * per_engine == engine["data_parallel"]["total_max_concurrent_requests"]
    assert top["margin_requests"] == 2 * per_engine - 10
    assert engine["kv_cache"]["blocks_per_request_actual"] == 163_840 // 16


def test_weights_one_node_cannot_hold_get_tp_inside_a_node_and_pp_across(capsys):
    assert RTX_A4000_BYTES < 141_107_412_992 // 8  # TP 8's share of the weights alone exceeds one GPU
    argv = ["fit", "--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "RTX A4000", "--gpus-per-node", "8", "--max-gpus", "16"]
    code, doc = run_json(argv, capsys)
    assert code == EXIT_FITS, doc
    top = doc["configs"][0]
    assert top["gpu_count"] > 8 and top["pipeline_parallel_size"] > 1 and top["data_parallel_size"] == 1
    assert 8 % top["tensor_parallel_size"] == 0 and top["nodes"] == math.ceil(top["gpu_count"] / 8) == 2
    assert top["gpu_count"] == top["tensor_parallel_size"] * top["pipeline_parallel_size"]
    code, plan = run_json(shlex.split(top["plan_command"])[1:], capsys)
    assert code == EXIT_FITS and "--gpus-per-node 8" in top["plan_command"]
    assert plan["concurrency"]["max_concurrent_requests"] == top["requests_at_once"] == top["requests_per_engine"] >= 1
    assert plan["kv_cache"]["available_bytes"] == top["available_kv_bytes"]
    assert len(plan["stages"]) == top["pipeline_parallel_size"]


def test_a_node_of_another_gpu_is_refused(capsys):
    code = main(["fit", "--model", "deepseek-ai/DeepSeek-V3", "--node", "8x H200", "--gpu", "L40S"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and err.count("\n") == 1 and "--node" in err
