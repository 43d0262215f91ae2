"""Per-stage KV groups and the engine's pool across pipeline stages (capacity/kv/pipeline_stages.py), worked out by
hand from vLLM 0.33's get_kv_cache_configs: the whole model's groups projected onto each stage's layers, a stage's
bytes per block = its largest group's own layers x page, blocks = available // that, the engine takes the smallest."""

from __future__ import annotations

import pytest

from capacity.errors import BadInput
from capacity.kv.pipeline_stages import engine_num_blocks, limiting_stage, project_groups, stage_kv
from capacity.kv.specs import FullAttentionSpec, SlidingWindowSpec
from capacity.serving.pipeline import pipeline_stages

GiB = 2**30
# Llama-3.1-70B at TP 4: 8 KV heads / 4 = 2 per rank, head 128, bf16, block 16:
# page = 2 heads x 16 tokens x (128 + 128) x 2 B = 16,384 B per layer.
FULL = FullAttentionSpec(16, 2, 128, 2)
PAGE = 16_384


def _uniform(num_layers: int) -> list[tuple[int, FullAttentionSpec]]:
    return [(i, FULL) for i in range(num_layers)]


def test_llama_70b_tp4_pp2_each_stage_holds_half_the_layers() -> None:
    layers = _uniform(80)
    stages = [stage_kv(s.rank, layers, s.start, s.end, avail) for s, avail in zip(pipeline_stages(80, 2), (60 * GiB, 58 * GiB), strict=True)]
    assert [s.bytes_per_block for s in stages] == [40 * PAGE, 40 * PAGE]  # 655,360 B
    # 60 GiB / 655,360 B = 60 x 2^30 / (40 x 2^14) = 98,304; 58 GiB: 58 x 2^16 / 40 = 95,027.2 -> 95,027
    assert [s.num_blocks for s in stages] == [98_304, 95_027]
    assert engine_num_blocks(stages) == 95_027 and limiting_stage(stages).rank == 1


def test_the_stage_with_the_extra_layer_sets_the_pool_on_equal_memory() -> None:
    # 61 layers at PP 4: [15, 15, 16, 15]; on 10 GiB each: 10 x 2^30 / (15 x 2^14) = 43,690.67 -> 43,690;
    # the 16-layer stage: 10 x 2^16 / 16 = 40,960
    layers = _uniform(61)
    stages = [stage_kv(s.rank, layers, s.start, s.end, 10 * GiB) for s in pipeline_stages(61, 4)]
    assert [s.num_blocks for s in stages] == [43_690, 43_690, 40_960, 43_690]
    assert engine_num_blocks(stages) == 40_960 and limiting_stage(stages).rank == 2


def test_hybrid_groups_are_the_whole_models_projected_onto_each_stage() -> None:
    # Gemma-3-like: 12 layers, every 6th full (layers 5 and 11), the rest sliding (window 512), same page.
    # Whole model: 10 sliding + 2 full -> group_size 2 (10 >= 1.5 x 2): one full group {5, 11} and five sliding
    # groups taking the sliding layers with stride 5: {0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}. 2 pages per block.
    sw = SlidingWindowSpec(16, 2, 128, 2, sliding_window=512)
    layers = [(i, FULL if (i + 1) % 6 == 0 else sw) for i in range(12)]
    whole = project_groups(layers, 0, 12)
    assert [(g.kind, g.num_layers) for g in whole] == [("sliding_window", 2)] * 5 + [("full", 2)]
    # PP 2 = [6, 6]: every group keeps one layer on each stage -> 1 page per block, half the whole model's 2
    for s in pipeline_stages(12, 2):
        assert [g.num_layers for g in project_groups(layers, s.start, s.end)] == [1, 1, 1, 1, 1, 1]
        assert stage_kv(s.rank, layers, s.start, s.end, 100 * PAGE).num_blocks == 100
    # PP 3 = [4, 4, 4]: stage 0 (layers 0-3) holds no full layer: its full group stays listed with none
    first = project_groups(layers, 0, 4)
    assert [g.num_layers for g in first] == [1, 1, 1, 1, 0, 0]
    # a partition giving stage 0 layers 0..9 puts two of group {0, 6} there: 2 pages per block
    assert stage_kv(0, layers, 0, 10, 100 * PAGE).bytes_per_block == 2 * PAGE


def test_a_stage_without_kv_layers_is_refused_in_one_line() -> None:
    with pytest.raises(BadInput) as err:
        stage_kv(1, _uniform(4), 4, 4, GiB)  # VLLM_PP_LAYER_PARTITION=4,0
    assert "holds no KV-cache layer" in str(err.value) and "\n" not in str(err.value)
