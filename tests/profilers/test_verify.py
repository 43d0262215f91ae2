"""`capacity verify` on the CPU probe: the pool the plan promises, its requests, the encoder and decode steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

pytest.importorskip("torch")

from capacity.cli.app import main
from tests.profilers.test_run import TINY_WHISPER

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")


def test_verify_allocates_the_planned_pool_and_runs_the_requests(tmp_path: Path, capsys):
    folder = tmp_path / "tiny-whisper"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_WHISPER))
    argv = ["verify", "--model", str(folder), "--cpu-probe", "--gpu", "L4", "--max-num-batched-tokens", "2048", "--max-num-seqs", "16"]
    code = main([*argv, "--kv-cache-memory-bytes", "4M", "--dtype", "float32", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(out.out)["verify"]
    # page 2 x 16 x 4 heads x 16 x 4 B = 8,192 per layer, 2 layer slots: 16,384 B per block; 4 MiB -> 256 blocks
    assert result["kv_pool_bytes"] == 256 * 16_384 == 4 * 2**20
    # real blocks per request: cdiv(448, 16) = 28 self + cdiv(1500, 16) = 94 cross; (256 - 1) // 122 = 2 requests
    assert (result["requests"], result["context_len"], result["encoder_len"]) == (2, 448, 1500)
    assert [p["name"] for p in result["phases"]] == ["weights", "kv_pool", "encoder", "decode_0", "decode_1", "decode_2"]
    assert result["peak_allocated_bytes"] >= result["kv_pool_bytes"]
    assert result["passed"] and result["oom"] is None
    assert result["reproducer"].startswith("capacity verify --model ")
    # no caching allocator on the CPU probe: it reserves exactly what is live, so no slack
    assert result["peak_reserved_bytes"] <= result["peak_allocated_bytes"] and result["allocator_slack_bytes"] == 0
    # the plan's L4 stands in for the device: 22.03 GiB = 2203 x 2^30 // 100 = 23,654,532,382 B total (CUDA's, from an
    # out-of-memory message), 753,729,536 B CUDA context (estimate), requested ceil(23,654,532,382 x 0.92) =
    # ceil(21,762,169,791.44) = 21,762,169,792 -> headroom 23,654,532,382 - 753,729,536 - 21,762,169,792
    assert result["gpu_total_bytes"] == 23_654_532_382 and result["requested_bytes"] == 21_762_169_792
    assert result["headroom_bytes"] == 1_138_633_054
    assert result["outcome"] == "verified" and result["hazards"] == []


def test_verify_refuses_models_it_cannot_run(capsys):
    code = main(["verify", "--model", "google-t5/t5-small", "--cpu-probe", "--gpu", "H200"])
    err = capsys.readouterr().err
    assert code == 2 and "verify runs BART-style encoder-decoders and text decoders" in err and "t5 is not one yet" in err and err.count("\n") == 1


def test_verify_needs_a_gpu_or_the_cpu_probe(capsys):
    code = main(["verify", "--model", "openai/whisper-tiny"])
    err = capsys.readouterr().err
    assert code == 2 and "no usable NVIDIA GPU" in err


# --- reading a run: the caching allocator's slack -------------------------------------------------------------
#
# bench/results/h200-verify-2026-11-30: Nemotron-Parse v1.1 verified on the H200 (cudaMemGetInfo total
# 150,109,880,320 B, gpu_memory_utilization 0.92 -> requested ceil(150,109,880,320 x 0.92) = 138,101,089,895 B).
# Its peak device use above the baseline, 138,414,129,152 B, is 313,039,257 B over the requested memory. The
# allocator's reserved peak (the last phase's memory_reserved) is 138,628,038,656 B against an allocated peak of
# 138,126,646,272 B: 501,392,384 B reserved but unallocated, which vLLM's formula (allocated peak) leaves out too.
# Headroom: 150,109,880,320 - 1,024,262,144 (baseline) - 138,101,089,895 = 10,984,528,281 B.


def h200_nemotron_parse():
    from capacity.memory.measured_profile import OomResult, PhaseMeasurement
    from capacity.planning.verify_result import VerifyResult

    path = REPO_ROOT / "bench" / "results" / "h200-verify-2026-11-30" / "verify-nvidia--NVIDIA-Nemotron-Parse-v1.1.json"
    measured = json.loads(path.read_text())["verify"]
    phases = tuple(PhaseMeasurement(**p) for p in measured["phases"])
    fields = {k: v for k, v in measured.items() if k in VerifyResult.__dataclass_fields__ and k != "phases"}
    fields["oom"] = OomResult(**measured["oom"]) if measured["oom"] else None
    total = 150_109_880_320
    return VerifyResult(
        **fields,
        phases=phases,
        peak_reserved_bytes=max(p.reserved_bytes for p in phases),
        gpu_total_bytes=total,
        headroom_bytes=total - measured["baseline_device_used_bytes"] - measured["requested_bytes"],
        gpu_memory_utilization=0.92,
    )


def rendered(result) -> str:
    from rich.console import Console

    from reports.terminal import render_verify

    console = Console(record=True, width=250)
    render_verify(result, console)
    return " ".join(console.export_text().split())


def test_h200_overshoot_is_the_allocators_slack_and_faithful_to_vllm():
    from capacity.planning.verify_result import WITHIN_ALLOCATOR_SLACK

    result = h200_nemotron_parse()
    assert result.requested_bytes == 138_101_089_895 and result.peak_used_bytes == 138_414_129_152
    assert result.over_requested_bytes == 313_039_257
    assert result.peak_reserved_bytes == 138_628_038_656 and result.allocator_slack_bytes == 501_392_384
    assert result.headroom_bytes == 10_984_528_281
    assert result.outcome == WITHIN_ALLOCATOR_SLACK and result.passed and result.faithful_to_vllm
    (hazard,) = result.hazards
    assert (hazard.id, hazard.severity) == ("over_requested_by_allocator_slack", "warning")
    assert "313,039,257 B (0.23%) above the requested 138,101,089,895 B" in hazard.message
    assert "within the 501,392,384 B the CUDA caching allocator held reserved but unallocated" in hazard.message
    assert "using 313,039,257 B of the 10,984,528,281 B gpu_memory_utilization 0.92 leaves free" in hazard.message
    text = rendered(result)
    assert "allocator slack (reserved 138,628,038,656 - allocated peak 138,126,646,272) 501,392,384 B" in text
    assert "VERIFIED (as vLLM would run it)" in text and "The plan has a bug" not in text
    doc = result.to_dict()
    assert (doc["allocator_slack_bytes"], doc["over_requested_bytes"], doc["outcome"], doc["passed"]) == (501_392_384, 313_039_257, WITHIN_ALLOCATOR_SLACK, True)


def test_slack_beyond_the_headroom_is_an_error_vllm_would_hit_too():
    """With only 400,000,000 B of headroom, the 501,392,384 B slack does not fit beside the requested memory: vLLM
    would start (its formula leaves the slack out) and run out of memory under this load. The fix keeps requested +
    slack within the free memory: (138,101,089,895 + 400,000,000 - 501,392,384) / 150,109,880,320 = 0.9193 -> 0.91."""
    from dataclasses import replace

    from capacity.planning.verify_result import SLACK_EXCEEDS_HEADROOM

    result = replace(h200_nemotron_parse(), headroom_bytes=400_000_000)
    assert result.outcome == SLACK_EXCEEDS_HEADROOM and not result.passed and result.faithful_to_vllm
    (hazard,) = result.hazards
    assert (hazard.id, hazard.severity) == ("allocator_slack_exceeds_headroom", "error")
    assert "501,392,384 B reserved but unallocated" in hazard.message and "more than the 400,000,000 B" in hazard.message
    assert hazard.fix.startswith("lower --gpu-memory-utilization to 0.91 or less") and hazard.knobs == (("gpu_memory_utilization", 0.91),)
    text = rendered(result)
    assert "FAILED as vLLM would" in text and "The plan has a bug" not in text


def test_overshoot_beyond_the_slack_is_a_plan_bug():
    """1 B more than requested + slack: the planned allocations themselves exceeded the budget."""
    from dataclasses import replace

    from capacity.planning.verify_result import OVER_BUDGET

    base = h200_nemotron_parse()
    result = replace(base, peak_used_bytes=base.requested_bytes + base.allocator_slack_bytes + 1)
    assert result.over_requested_bytes == 501_392_385
    assert result.outcome == OVER_BUDGET and not result.passed and not result.faithful_to_vllm and result.hazards == ()
    text = rendered(result)
    assert "501,392,385 B over the requested memory, more than the allocator's 501,392,384 B of slack" in text
    assert "The plan has a bug; reproduce with: capacity verify --model nvidia/NVIDIA-Nemotron-Parse-v1.1" in text


def test_within_the_requested_memory_is_verified():
    from dataclasses import replace

    from capacity.planning.verify_result import VERIFIED

    result = replace(h200_nemotron_parse(), peak_used_bytes=138_101_089_895)
    assert result.outcome == VERIFIED and result.passed and result.hazards == ()


def test_a_cuda_oom_is_not_called_a_plan_bug_outright():
    """An OOM does not say whether the allocations or the allocator's reserve overflowed: the report names both."""
    from dataclasses import replace

    from capacity.memory.measured_profile import OomResult
    from capacity.planning.verify_result import OUT_OF_MEMORY

    result = replace(h200_nemotron_parse(), oom=OomResult("encoder", "2 max-size items", "CUDA out of memory"))
    assert result.outcome == OUT_OF_MEMORY and not result.passed
    text = rendered(result)
    assert "FAILED: out of memory in encoder (2 max-size items)" in text
    assert "exceeds the 10,984,528,281 B of headroom, vLLM would run out of memory the same way" in text
    assert "The plan has a bug" not in text
