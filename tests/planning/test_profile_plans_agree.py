"""A GPU profile and the fake-tensor trace of the same model plan the same terms when their phases agree.

Every profile ran transformers' module (profilers/run.py): the H200 profiles in bench/results/h200-catalog-2026-12-01
measured transformers' Qwen2.5-VL tower, the trace traced it. The family's factor to vLLM's varlen encoder kernels
(Qwen25VLFamily.trace_encoder_to_vllm, 0.694) and a quantized checkpoint's per-rank weights apply on both paths.
"""

from __future__ import annotations

import pytest

from capacity.memory.measured_profile import MemoryProfile, load_profile
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from tests.support.paths import REPO_ROOT

H200 = REPO_ROOT / "bench" / "results" / "h200-catalog-2026-12-01"


def profile_of(model: str) -> MemoryProfile:
    return load_profile(H200 / f"profile-{model.replace('/', '--')}.json")


def args_of(profile: MemoryProfile) -> ServingArgs:
    k = profile.fingerprint.knobs
    return ServingArgs(max_num_batched_tokens=k["max_num_batched_tokens"], max_num_seqs=k["max_num_seqs"], dtype=k["dtype"])


def test_h200_profile_of_qwen2_5_vl_plans_vllms_encoder_activation() -> None:
    measured = profile_of("Qwen/Qwen2.5-VL-3B-Instruct")
    # from the JSON: encoder phase peak 29,452,797,952 - before 8,106,904,064 = 21,345,893,888 B (above every other
    # phase: sampler_warmup 10,788,588,032 - 8,921,385,472 = 1,867,202,560); transient headroom 21,345,893,888 -
    # encoder outputs 469,762,048 = 20,876,131,840 B of transformers' tower; x 0.694 = 14,488,035,496.96
    assert measured.activation_peak_bytes == 20_876_131_840
    plan = plan_for("Qwen/Qwen2.5-VL-3B-Instruct", args_of(measured), "H200", profile=measured)
    assert plan.memory["activation_peak"].bytes == 14_488_035_497
    assert "x 0.694" in plan.memory["activation_peak"].method


def test_trace_of_qwen2_5_vl_plans_what_its_h200_profile_plans(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from profilers.api import trace_model

    monkeypatch.setenv("CAPACITY_CACHE_DIR", str(tmp_path))
    measured = profile_of("Qwen/Qwen2.5-VL-3B-Instruct")
    args = args_of(measured)
    traced_plan, traced = trace_model("Qwen/Qwen2.5-VL-3B-Instruct", args, gpu_name="H200")
    # the phases agree (20,357.0 MiB measured): the two plans' activation peaks must too (they differed by 30.6 %
    # when only the trace was scaled to vLLM's kernels)
    assert traced.activation_peak_bytes == pytest.approx(20_876_131_840, rel=0.001)
    assert traced_plan.memory["activation_peak"].bytes == pytest.approx(14_488_035_497, rel=0.001)
    measured_plan = plan_for("Qwen/Qwen2.5-VL-3B-Instruct", args, "H200", profile=measured)
    assert traced_plan.non_kv_bytes == pytest.approx(measured_plan.non_kv_bytes, rel=0.03)


def test_h200_profile_of_an_awq_checkpoint_plans_the_quantized_weights() -> None:
    measured = profile_of("Qwen/Qwen2.5-Omni-7B-AWQ")
    # the profiler built the thinker dense in bfloat16: 17,923,745,280 B, over twice what 4-bit AWQ tensors hold
    assert measured.weights_bytes == 17_923_745_280
    args = args_of(measured)
    plan = plan_for("Qwen/Qwen2.5-Omni-7B-AWQ", args, "H200", profile=measured)
    unprofiled = plan_for("Qwen/Qwen2.5-Omni-7B-AWQ", args, "H200")
    weights, count = plan.memory["weights"], unprofiled.memory["weights"]
    assert (weights.bytes, weights.kind) == (count.bytes, count.kind) and "the profile built the layers dense: 17,923,745,280 B" in weights.method
    assert plan.memory["weights"].bytes < measured.weights_bytes // 2


def test_verify_takes_transformers_tower_excess_off_its_peak() -> None:
    """`capacity verify` runs transformers' tower, which holds what the plan's x 0.694 took off: 20,876,131,840 -
    14,488,035,497 = 6,388,096,343 B on the H200 profile of Qwen2.5-VL-3B. That much of verify's peak is not vLLM's;
    verify holds back whole pool blocks for it (ceil(6,388,096,343 / 589,824) = 10,831)."""
    import dataclasses

    from capacity.memory.activations import tower_excess_bytes
    from capacity.planning.verify_result import OVER_BUDGET, VERIFIED, VerifyResult

    measured = profile_of("Qwen/Qwen2.5-VL-3B-Instruct")
    plan = plan_for("Qwen/Qwen2.5-VL-3B-Instruct", args_of(measured), "H200", profile=measured)
    excess = tower_excess_bytes(plan.spec.family, plan.memory["activation_peak"])
    assert excess == 6_388_096_343
    assert tower_excess_bytes(plan.spec.family, plan_for("Qwen/Qwen2.5-VL-3B-Instruct", args_of(measured), "H200").memory["activation_peak"]) == 0
    requested = 138_101_089_895
    run = VerifyResult(
        model="Qwen/Qwen2.5-VL-3B-Instruct", gpu_name="NVIDIA H200", device="cuda", requested_bytes=requested, baseline_device_used_bytes=0,
        kv_pool_bytes=0, block_tables_bytes=0, requests=22, context_len=128_000, encoder_len=0, decode_steps=3,
        peak_allocated_bytes=requested + excess - 1, peak_used_bytes=requested + excess - 1, wall_s=0.0, phases=(), oom=None, reproducer="",
        peak_reserved_bytes=requested + excess - 1, gpu_total_bytes=150_109_880_320, headroom_bytes=10 * 2**30,
    )  # fmt: skip
    assert (run.unused_bytes, run.outcome) == (1 - excess, OVER_BUDGET)  # without the excess taken off: over by all of it
    counted = dataclasses.replace(run, tower_excess_bytes=excess)
    assert (counted.unused_bytes, counted.outcome) == (1, VERIFIED)
    # the run held back whole blocks for it (10,831 x 589,824 B = 6,388,383,744 B >= the excess): a pool that much
    # smaller, and a peak as much lower, stand for the same memory of vLLM's
    held = 10_831 * 589_824
    assert held >= excess > held - 589_824
    smaller_pool = dataclasses.replace(counted, pool_held_back_bytes=held, peak_used_bytes=run.peak_used_bytes - held, peak_allocated_bytes=run.peak_allocated_bytes - held)
    assert smaller_pool.unused_bytes == 1
