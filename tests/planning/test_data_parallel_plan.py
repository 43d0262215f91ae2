"""DeepSeek-V3 at --data-parallel-size 8 with expert parallelism: per-rank figures worked from its config.

config.json: 61 layers, first_k_dense_replace 3 (58 MoE layers), n_routed_experts 256, moe_intermediate_size 2048,
hidden_size 7168, num_experts_per_tok 8, n_shared_experts 1; FP8 with 128 x 128 block scales (float32 weight_scale_inv).
One routed expert: gate, up (2048 x 7168) and down (7168 x 2048) at 1 B, plus 3 x (16 x 56) float32 scales.
"""

from __future__ import annotations

import json

import pytest

from capacity.cli.app import main
from capacity.memory.collectives import NCCL_COMMUNICATOR_BYTES
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs

MODEL = "deepseek-ai/DeepSeek-V3"
MOE_LAYERS = 61 - 3
EXPERT_BYTES = 3 * 2048 * 7168 * 1 + 3 * (2048 // 128) * (7168 // 128) * 4  # 44,050,944


def test_expert_parallel_at_dp_8_holds_an_eighth_of_the_routed_experts():
    plan = plan_for(MODEL, ServingArgs(data_parallel_size=8, enable_expert_parallel=True), "H200")
    wb = plan.weights_per_rank
    assert wb is not None
    assert wb.bytes_of("moe-experts") == MOE_LAYERS * (256 // 8) * EXPERT_BYTES  # 81,758,552,064
    # without EP the same tp x dp = 8 ranks split each expert's intermediate size instead: the same bytes here
    split = plan_for(MODEL, ServingArgs(data_parallel_size=8), "H200").weights_per_rank
    assert split is not None and split.bytes_of("moe-experts") == MOE_LAYERS * 256 * EXPERT_BYTES // 8


def test_sequence_parallel_moe_builds_deepseeks_shared_experts_whole():
    # EP at TP 4 x DP 2: DeepseekV2MLP(shared_experts, disable_tp=True); at DP 1 they are split by TP 4
    seq = plan_for(MODEL, ServingArgs(tensor_parallel_size=4, data_parallel_size=2, enable_expert_parallel=True), "H200").weights_per_rank
    tp = plan_for(MODEL, ServingArgs(tensor_parallel_size=4, enable_expert_parallel=True), "H200").weights_per_rank
    assert seq is not None and tp is not None
    shared = MOE_LAYERS * EXPERT_BYTES  # n_shared_experts 1, same shape as a routed expert
    # built whole but quantized like the layers they replace (ReplicatedLinear's kind)
    assert seq.bytes_of("replicated-linear") - tp.bytes_of("replicated-linear") == shared


def test_deepseek_v3_plans_at_dp_8_with_expert_parallelism_on_the_default_path(capsys):
    pytest.importorskip("torch")
    code = main(["plan", "--model", MODEL, "--gpu", "H200", "--data-parallel-size", "8", "--enable-expert-parallel", "--json"])
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    plan = json.loads(out.out)
    assert plan["memory"]["activation_peak"]["method"].startswith("fake-tensor trace")
    assert plan["weights_per_rank"]["tensor_parallel_size"] == 1
    experts = next(k for k in plan["weights_per_rank"]["kinds"] if k["kind"] == "moe-experts")
    assert experts["rank_bytes"] == MOE_LAYERS * 32 * EXPERT_BYTES and experts["full_bytes"] == MOE_LAYERS * 256 * EXPERT_BYTES
    # TP 1: no TP communicators; DP (8 ranks) and EP (8 ranks) groups one NCCL communicator each
    assert plan["memory"]["collectives"]["bytes"] == 2 * NCCL_COMMUNICATOR_BYTES
    assert "DP group (8 ranks)" in plan["memory"]["collectives"]["method"]
    # the all-gather dispatch: (8 - 1) x 8192 tokens x (2 x 7168 x 2 B + 8 x 8 B)
    assert "1,647,837,184 B MoE all-gather dispatch" in plan["memory"]["activation_peak"]["method"]
    dp = plan["data_parallel"]
    assert (dp["world_size"], dp["engines"], dp["expert_parallel_size"], dp["nodes"]) == (8, 8, 8, 1)
    assert dp["total_max_concurrent_requests"] == 8 * plan["concurrency"]["max_concurrent_requests"]
    assert "--data-parallel-size 8" in plan["suggested_command"]


def test_dp_1_plans_carry_no_data_parallel_section(capsys):
    code = main(["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--estimate", "formula", "--json"])
    out = capsys.readouterr()
    assert code == 0 and "data_parallel" not in json.loads(out.out) and "data_parallel_size" not in json.loads(out.out)["serving"]


def test_tp_across_nodes_is_one_line_exit_2(capsys):
    code = main(["plan", "--model", MODEL, "--node", "4x L40S PCIe", "-tp", "8", "--estimate", "formula"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--allow-tp-across-nodes" in err
