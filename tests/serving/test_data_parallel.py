"""Data parallelism and nodes: vLLM 0.33's rank numbering (initialize_model_parallel), the MoE layers' tp x dp ranks
(FusedMoEParallelConfig.make), and TP groups kept inside a node."""

from __future__ import annotations

import pytest

from capacity.errors import BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.gpu.nodes import NODES, node_by_name
from capacity.serving.data_parallel import moe_parallel_size, node_gpu_name, placement, use_sequence_parallel_moe

H200 = gpu_by_name("H200")


def test_group_ranks_follow_vllms_dp_pp_tp_order():
    # all_ranks = arange(8).reshape(dp 2, pp 1, tp 4): TP groups [0-3], [4-7]; DP groups pair rank t with 4 + t
    p = placement(H200, 4, 1, 2, None, 8)
    assert p.group_ranks("tp") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert p.group_ranks("dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert p.group_ranks("ep") == [list(range(8))]  # dp x tp ranks, one group per PP stage


def test_dp_across_two_nodes_keeps_tp_inside_each():
    p = placement(H200, 8, 1, 2, "8x H200", None)
    assert (p.world_size, p.nodes) == (16, 2)
    assert p.group("tp").spans_nodes is False and p.group("tp").transport == "NVLink"
    assert p.group("dp").spans_nodes is True and p.group("dp").transport == "InfiniBand"


def test_a_tp_group_spanning_nodes_is_refused_unless_asked():
    with pytest.raises(BadInput, match="--allow-tp-across-nodes"):
        placement(H200, 8, 1, 1, None, 4)
    with pytest.raises(BadInput, match="spans nodes"):
        placement(H200, 3, 1, 2, None, 4)  # ranks 3..5 straddle nodes 0 and 1
    assert placement(H200, 8, 1, 1, None, 4, allow_tp_across_nodes=True).group("tp").spans_nodes


def test_node_types_name_their_gpu_and_refuse_a_different_one():
    assert node_by_name("8xH200").gpu == "H200" and node_by_name("dgx-b200").gpus_per_node == 8
    assert node_gpu_name("8x H100 SXM", None) == "H100-SXM"
    with pytest.raises(BadInput, match="holds H200 GPUs"):
        node_gpu_name("8x H200", "L40S")
    with pytest.raises(BadInput, match="unknown node type"):
        node_by_name("9x H900")
    with pytest.raises(BadInput, match="8 GPUs per node"):
        placement(H200, 1, 1, 8, "8x H200", 4)
    assert all(n.reference and n.gpus_per_node > 0 for n in NODES)


def test_the_moe_layers_ranks_are_tp_times_dp():
    assert moe_parallel_size(1, 8) == 8 and moe_parallel_size(2, 4) == 8
    # use_sequence_parallel_moe: EP, TP > 1 and DP > 1 (allgather_reducescatter, the default backend)
    assert use_sequence_parallel_moe(2, 2, True) and not use_sequence_parallel_moe(1, 8, True) and not use_sequence_parallel_moe(2, 2, False)


def test_serve_yaml_takes_data_parallel_size_and_dp(tmp_path):
    from capacity.serving.config import load_serve_yaml

    for key in ("data-parallel-size", "data_parallel_size", "dp"):
        path = tmp_path / f"{key}.yaml"
        path.write_text(f"model: deepseek-ai/DeepSeek-V3\n{key}: 8\nenable-expert-parallel: true\n")
        values, _, ignored = load_serve_yaml(path)
        assert values == {"data_parallel_size": 8, "enable_expert_parallel": True} and ignored == []
    both = tmp_path / "both.yaml"
    both.write_text("dp: 8\ndata-parallel-size: 4\n")
    with pytest.raises(BadInput, match="set the same option data_parallel_size"):
        load_serve_yaml(both)


def test_dp_1_on_a_node_adds_no_communicator():
    from capacity.memory.data_parallel import communicator_groups

    assert communicator_groups(placement(H200, 4, 1, 1, "8x H200", None), moe=True) == []
    assert [g[:3] for g in communicator_groups(placement(H200, 8, 1, 2, "8x H200", None), moe=True)] == [("dp", 2, "InfiniBand"), ("ep", 16, "InfiniBand")]
