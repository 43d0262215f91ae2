"""capacity/memory/cuda_graphs.py: vLLM's CUDA-graph estimate, against hand arithmetic and the H200 measurements."""

from __future__ import annotations

import json

import pytest

from capacity.memory.cuda_graphs import H200_CAPTURE, mrv2_estimate, pieces_per_size, v1_estimate
from capacity.model.spec import DecoderShape
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
MEASURED = ROOT / "bench" / "results" / "h200-cuda-graph-memory-2026-12-01" / "run2.json"
MiB, KiB = 2**20, 2**10


def _decoder(layers: int, hidden: int, ffn: int) -> DecoderShape:
    return DecoderShape(hidden_size=hidden, ffn_size=ffn, gated_ffn=True, vocab_size=151_936, num_layers=layers)


QWEN3_8B = _decoder(36, 4096, 12288)
# decoder_activation_bytes at 512 tokens: 512 x 2 B x (2 x 4096 + 3 x 12288) = 46,137,344
ACT_512 = 512 * 2 * (2 * 4096 + 3 * 12288)


def test_mrv2_estimate_by_hand() -> None:
    """51 PIECEWISE sizes of 37 pieces, then 35 FULL decode graphs (max_num_seqs 256)."""
    first = 43 * MiB + round(1.38 * ACT_512) + 70 * MiB + 37 * 140 * KiB
    assert first == 45_088_768 + 63_669_535 + 73_400_320 + 5_304_320
    piecewise = first + 50 * 37 * 140 * KiB
    full = 35 * 36 * 40 * KiB  # s1 + 34 x max(s2, 1 MiB), s = 1,474,560 B > 1 MiB
    e = mrv2_estimate(QWEN3_8B, ACT_512, 51, 35)
    assert (e.piecewise_bytes, e.full_bytes, e.total_bytes) == (piecewise, full, piecewise + full) == (452_678_943, 51_609_600, 504_288_543)


def test_v1_estimate_by_hand() -> None:
    """The V1 runner: max(first PIECEWISE, first FULL) + 50 x max(37 pieces x 140 KiB, 1 MiB) + 34 x max(36 x 40 KiB, 1 MiB)."""
    first = 43 * MiB + round(1.38 * ACT_512) + 70 * MiB + 37 * 140 * KiB
    assert v1_estimate(QWEN3_8B, ACT_512, 51, 35).total_bytes == first + 50 * 37 * 140 * KiB + 34 * 36 * 40 * KiB == 502_813_983


def test_full_decode_only_pays_the_pool_with_its_first_graph() -> None:
    """An encoder-decoder model (FULL_DECODE_ONLY): no PIECEWISE graphs, the first FULL capture fills the pool; a
    small decoder's graphs cost the 1 MiB floor each."""
    whisper = _decoder(4, 1280, 5120)
    act = 1000
    e = mrv2_estimate(whisper, act, 0, 35)
    s1 = 43 * MiB + round(1.38 * act) + 70 * MiB + 4 * 40 * KiB
    assert e.piecewise_bytes == 0 and e.total_bytes == s1 + 34 * MiB


def test_the_pieces_are_one_more_than_the_layers() -> None:
    assert pieces_per_size(QWEN3_8B) == 37


@pytest.mark.parametrize("index", [0, 2, 4])  # the compiled cases of Qwen3-0.6B, -8B and -32B's widths
def test_the_constants_reproduce_the_h200_captures(index: int) -> None:
    """run2.json: each decoder's PIECEWISE captures (51 sizes) and FULL decode graphs (35) on the H200; the estimate
    from the constants stays within 5 % of the PIECEWISE drop and 20 % of the FULL one."""
    case = json.loads(MEASURED.read_text())["results"][index]
    assert case["case"] == "piecewise-compiled"
    w = case["widths"]
    decoder = _decoder(case["layers"], w["hidden"], w["intermediate"])
    act = 512 * 2 * (2 * w["hidden"] + max(4 * w["hidden"], 3 * w["intermediate"]))
    e = mrv2_estimate(decoder, act, case["sizes"], case["full"]["graphs"], H200_CAPTURE)
    assert abs(e.piecewise_bytes - case["free_drop_bytes"]) <= 0.05 * case["free_drop_bytes"]
    assert abs(e.full_bytes - case["full"]["free_drop_bytes"]) <= 0.20 * case["full"]["free_drop_bytes"]


def test_unified_memory_charges_each_graphs_host_side_by_hand() -> None:
    """On a GB10 each graph costs 2.402 x the H200's (140 KiB per piece, 40 KiB per FULL graph layer); the once-per-run
    parts stay. Qwen3-8B, 512 tokens first: 51 sizes of 37 pieces, 35 FULL graphs of 36 layers."""
    from capacity.memory.unified_memory import UNIFIED_CAPTURE

    piece, layer = round(140 * KiB * 2.402), round(40 * KiB * 2.402)
    assert (UNIFIED_CAPTURE.piece_graph_bytes, UNIFIED_CAPTURE.full_graph_bytes_per_layer) == (piece, layer) == (344_351, 98_386)
    first = 43 * MiB + round(1.38 * ACT_512) + 70 * MiB + 37 * piece
    e = mrv2_estimate(QWEN3_8B, ACT_512, 51, 35, UNIFIED_CAPTURE)
    assert e.total_bytes == first + 50 * 37 * piece + 35 * 36 * layer
    assert "unified memory" in e.how and "unified memory" not in mrv2_estimate(QWEN3_8B, ACT_512, 51, 35).how


def test_gb10_plan_sets_aside_what_vllm_0_30_printed_for_the_calibration_log() -> None:
    """bench/vllm_logs/qwen3-30b-a3b-thinking-2507-fp8-gb10-util0.55-len32768-v0.30.0-excerpt.log: 'The current
    --gpu-memory-utilization=0.5500 is equivalent to --gpu-memory-utilization=0.5410 without CUDA graph memory
    profiling': vLLM's estimate is 0.0090 (+-0.0001, both printed to 4 decimals) x GB10's 121.69 GiB. At the H200's
    costs capacity set aside 0.538 GiB, half of it (the factor is fitted on this log: this checks the fit is wired in)."""
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs
    from capacity.vllm.versions import semantics_for

    args = ServingArgs(gpu_memory_utilization=0.55, max_model_len=32768)
    plan = plan_for("Qwen/Qwen3-30B-A3B-FP8", args, "GB10", semantics=semantics_for("0.30.0"))
    total = 130_663_642_562  # 121.69 GiB
    assert 0.0089 * total <= plan.memory["cuda_graphs"].bytes <= 0.0091 * total
    assert "unified memory" in plan.memory["cuda_graphs"].method
