"""profile_run's sampler phase (capacity.memory.sampler.sampler_bytes), worked out by hand from vLLM 0.33's code:
vllm/v1/worker/gpu/model_runner.py `_dummy_sampler_run` (a default pass, then a SamplingParams.for_sampler_warmup()
pass), sample/sampler.py `apply_sampling_params` (the fp32 copy), flashinfer 0.7.2 `top_k_top_p_sampling_from_logits`
(top_k_mask_logits' copy + softmax) and gumbel.py `gumbel_sample` (per-1024-block argmax and max per row)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from capacity.errors import BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.memory.measured_profile import MemoryProfile
from capacity.memory.rank_scaling import RankScaling, per_rank_headroom
from capacity.memory.sampler import (
    SAMPLER_0_33,
    SAMPLER_BEFORE_0_33,
    TOP_K_TOP_P,
    TOP_K_TOP_P_FLASHINFER,
    TOP_K_TOP_P_SORT,
    TOP_K_TOP_P_TRITON,
    SamplerForm,
    sampler_bytes,
    sampler_form,
    sampler_pass_bytes,
    v1_sampler_form,
)
from capacity.model.spec import DecoderShape
from capacity.vllm.log_startups import load_vllm_startups
from capacity.vllm.versions import LATEST, log_semantics, semantics_for
from tests.support.paths import REPO_ROOT

LOGS = REPO_ROOT / "bench" / "vllm_logs"

SMALL = DecoderShape(hidden_size=64, ffn_size=128, gated_ffn=True, vocab_size=1000, num_layers=2)
LLAMA_31_8B = DecoderShape(hidden_size=4096, ffn_size=14336, gated_ffn=True, vocab_size=128256, num_layers=32)
TRITON = SamplerForm(warmup_pass=True, flashinfer=False)


def test_small_example_each_pass_by_hand():
    # 4 rows x 1000 vocab, bf16, 16 decoder tokens of hidden 64 held by profile_run:
    # held (16 + 4) x 64 x 2 = 2,560; logits 4 x 1000 x 2 = 8,000
    held, logits = (16 + 4) * 64 * 2, 4 * 1000 * 2
    # default pass: gumbel_sample's local_argmax (int64) + local_max (fp32), 1 block of 1024 per row: 4 x 1 x 12
    assert sampler_pass_bytes(SMALL, 4, 2, 1, 0, 16) == held + logits + 4 * 12 == 10_608
    # warmup pass, FlashInfer: fp32 copy + top-k-masked copy + softmax probs, 4 x 1000 x 4 each
    assert sampler_pass_bytes(SMALL, 4, 2, 1, 3, 16) == held + logits + 3 * 4 * 1000 * 4 == 58_560
    assert sampler_bytes(SMALL, 4, 2, 1, SAMPLER_0_33, 16) == 58_560
    # Triton top-k/top-p masks the one fp32 copy in place
    assert sampler_bytes(SMALL, 4, 2, 1, TRITON, 16) == held + logits + 4 * 1000 * 4 == 26_560
    # capacity's form before 0.33: logits + one fp32 copy, nothing held
    assert sampler_bytes(SMALL, 4, 2, 1, SAMPLER_BEFORE_0_33, 16) == 4 * 1000 * (2 + 4) == 24_000


def test_small_example_at_tp2():
    # vocab 1000 pads to 1024 (pad_vocab_size, 64): 512 columns per rank. The all-gather holds the rank's logits, a
    # (2, 4, 512) buffer and its reshaped copy: 4 x 512 x 2 x (1 + 2 x 2) = 20,480. After it, 4 x 1024 x 2 = 8,192 B of
    # gathered logits stay alive (the [:1000] slice is a view) under the warmup pass's 3 x 4 x 1000 x 4 = 48,000 B.
    held = (16 + 4) * 64 * 2
    assert sampler_bytes(SMALL, 4, 2, 2, SAMPLER_0_33, 16) == held + max(4 * 512 * 2 * 5, 4 * 1024 * 2 + 48_000) == 58_752


def test_llama_31_8b_h100_knobs():
    # 1024 rows (max_num_seqs) x 128,256 vocab in bf16, 8192 batched tokens of hidden 4096
    held = (8192 + 1024) * 4096 * 2
    logits = 1024 * 128256 * 2
    assert held == 75_497_472 and logits == 262_668_288
    flashinfer = held + logits + 3 * 1024 * 128256 * 4
    assert sampler_bytes(LLAMA_31_8B, 1024, 2, 1, SAMPLER_0_33, 8192) == flashinfer == 1_914_175_488  # 1.78 GiB
    assert sampler_bytes(LLAMA_31_8B, 1024, 2, 1, TRITON, 8192) == held + logits + 1024 * 128256 * 4 == 863_502_336
    assert sampler_bytes(LLAMA_31_8B, 1024, 2, 1, SAMPLER_BEFORE_0_33, 8192) == 1024 * 128256 * 6 == 788_004_864  # 0.734 GiB


def test_flashinfer_path_follows_the_gpu():
    # flashinfer_sampler_supported: CUDA and FlashInferBackend.supports_compute_capability (SM 8.0 to 12.1)
    assert sampler_form(gpu_by_name("H100-SXM"), True) == SAMPLER_0_33
    assert sampler_form(gpu_by_name("L4"), True).flashinfer
    assert not sampler_form(gpu_by_name("T4"), True).flashinfer  # Turing: SM 7.5
    assert not sampler_form(gpu_by_name("MI300X"), True).flashinfer  # ROCm
    assert SAMPLER_0_33.fp32_copies == 3 and TRITON.fp32_copies == 1 and SAMPLER_BEFORE_0_33.fp32_copies == 1


def test_warmup_pass_is_a_version_field():
    # 0.29.0 - 0.32.0 wheels: one default pass ("NOTE(woosuk): ... the sampler may skip top_k, top_p, and logprobs")
    assert LATEST.sampler_warmup_pass
    assert semantics_for("0.33.0").sampler_warmup_pass
    for version in ("0.32.0", "0.31.1", "0.28.1rc1.dev50", "0.15.1"):
        semantics = semantics_for(version)
        assert semantics is not None and not semantics.sampler_warmup_pass


def test_a_version_without_the_warmup_pass_drops_its_phase():
    from capacity.memory.measured_profile import Fingerprint, PhaseMeasurement

    def phase(name: str, before: int, peak: int) -> PhaseMeasurement:
        return PhaseMeasurement(name, "", 0.0, before, before, peak, 0, None, None, None)

    fingerprint = Fingerprint(*(["x"] * 4), 0, *(["x"] * 11), {})  # type: ignore[arg-type]
    base = 1_000_000
    profile = MemoryProfile(
        fingerprint=fingerprint, baseline_device_used_bytes=0, weights_bytes=base, encoder_items=0, encoder_tokens_per_item=0,
        encoder_cache_bytes=0, total_consumed_bytes=base, transient_peak_headroom_bytes=680_000, warmup_peak_bytes=None, cuda_graphs=None,
        phases=(phase("decoder", base, base + 300_000), phase("sampler", base + 50_000, base + 150_000), phase("sampler_warmup", base + 50_000, base + 700_000)),
    )  # fmt: skip
    same = RankScaling(1, 1, 1.0, 1.0)
    assert per_rank_headroom(profile, same) == 680_000  # the warmup pass sets the peak; 20,000 B stay allocated after
    # a 0.32 plan: the warmup phase goes, the default pass gains capacity's earlier fp32 copy (40,000 B here):
    # max(300,000, 150,000 + 40,000) - 20,000
    legacy = replace(same, warmup_pass=False, legacy_copy_bytes=40_000)
    assert legacy.reshapes(profile) and not same.reshapes(profile)
    assert per_rank_headroom(profile, legacy) == 280_000
    assert per_rank_headroom(profile, replace(legacy, legacy_copy_bytes=400_000)) == 530_000


# --- the V1 model runner's _dummy_sampler_run (vLLM before MRV2 ran by default) ---------------------------------------
# Read from the wheels' vllm/v1/worker/gpu_model_runner.py, v1/sample/sampler.py, v1/sample/ops/topk_topp_sampler.py and
# envs.py (0.9.2, 0.10.2, 0.15.1, 0.17.0, 0.18.0, 0.19.1, 0.21.0, 0.23.0, 0.24.0, 0.27.1). Peaks measured with each
# wheel's own Sampler on CPU: bench/vllm_sampler_reference.py -> bench/results/vllm-sampler-reference-2026-12-01.

REFERENCE = REPO_ROOT / "bench" / "results" / "vllm-sampler-reference-2026-12-01" / "reference.json"


SORT_ON_H200 = REPO_ROOT / "bench" / "results" / "h200-sampler-sort-2026-12-01" / "results.json"
# apply_top_k_top_p with top_k and top_p (0.9.2 - 0.15.1), per logit, all alive at the scatter: Sampler.forward's fp32
# copy 4, logits.sort values 4 + int64 indices 8, top-k `logits_sort < kth` bool 1, softmax (cumsum in place) 4, top-p
# bool mask 1, logits_sort.scatter result 4 (what each wheel's Sampler holds on CPU)
SORT_LATER_STAGES = 4 + 4 + 8 + 1 + 4 + 1 + 4


def test_sort_path_bytes_by_hand():
    # on CUDA the sort itself is the peak: the fp32 copy 4 + its outputs 4 + 8 + torch.sort's temporaries 20 (the int64
    # index sequence 8, the radix sort's alternate key 4 and value 8 buffers), above the later stages' 26
    assert TOP_K_TOP_P_SORT.bytes_per_logit == 4 + 4 + 8 + (8 + 4 + 8) == 36 > SORT_LATER_STAGES == 26
    measured = json.loads(SORT_ON_H200.read_text())["results"]
    assert len(measured) == 6 and all(abs(r["bytes_per_logit"] - 36) < 0.2 and r["sort_stage_peak_bytes"] == r["peak_above_logits_bytes"] for r in measured)
    # Triton masks the fp32 copy in place; forward_native's softmax 4 and random_sample's exponential_ draw 4
    assert TOP_K_TOP_P_TRITON.bytes_per_logit == 4 + 4 + 4 == 12
    # flashinfer_sample: the fp32 copy + top_k_top_p_sampling_from_logits' top-k-masked copy + softmax (read, not run)
    assert TOP_K_TOP_P_FLASHINFER.bytes_per_logit == 3 * 4 and TOP_K_TOP_P_FLASHINFER.kind == "estimated"


def test_v1_sampler_phase_small_example():
    # 4 rows x 1000 vocab in bf16: logits 8,000 B + the path's own bytes
    sort = SamplerForm(warmup_pass=False, flashinfer=False, v1_top_k_top_p=TOP_K_TOP_P_SORT)
    triton = SamplerForm(warmup_pass=False, flashinfer=False, v1_top_k_top_p=TOP_K_TOP_P_TRITON)
    assert sampler_bytes(SMALL, 4, 2, 1, sort, 16) == 4 * 1000 * (2 + 36) == 152_000
    assert sampler_bytes(SMALL, 4, 2, 1, triton, 16) == 4 * 1000 * (2 + 12) == 56_000
    # Llama 3.1 8B, 256 rows (API server, < 70 GiB GPU): 256 x 128,256 x 38 = 1,247,674,368 B (1.16 GiB), 32 B per logit
    # more than capacity's earlier form (6 B per logit)
    assert sampler_bytes(LLAMA_31_8B, 256, 2, 1, sort, 2048) == 256 * 128_256 * 38 == 1_247_674_368
    assert 1_247_674_368 - sampler_bytes(LLAMA_31_8B, 256, 2, 1, SAMPLER_BEFORE_0_33, 2048) == 256 * 128256 * 32


def test_reference_matches_vllms_own_sampler():
    doc = json.loads(REFERENCE.read_text())
    seen = set()
    for r in doc["results"]:
        version = tuple(int(x) for x in r["version"].split(".")[:2])
        if r["top_k_top_p"] == "sort" and version >= (0, 17):
            expected = 22  # apply_top_k_top_p_pytorch, the fallback below 8 rows: not what the dummy run takes
        elif r["top_k_top_p"] == "sort":
            expected = SORT_LATER_STAGES  # a CPU sort keeps no temporaries: the later stages are the CPU peak
        else:
            expected = TOP_K_TOP_P[r["top_k_top_p"]].bytes_per_logit
        # rows x vocab x the path's bytes, plus per-row vectors (argmax ids, k as int64, the k-th values, ...)
        per_row = (r["peak_bytes_above_logits"] - r["rows"] * r["vocab"] * expected) / r["rows"]
        assert 0 <= per_row <= 32, r  # 16 B (sort, Triton) or 20 B (0.17.0+ sort fallback)
        seen.add((r["version"], r["top_k_top_p"]))
    assert {("0.9.2", "sort"), ("0.15.1", "sort"), ("0.19.1", "triton"), ("0.27.1", "triton")} <= seen


@pytest.mark.parametrize(
    ("version", "gpu", "env", "paths"),
    [
        ("0.9.2", "A100-40GB", None, ("sort",)),  # FlashInfer only when installed: no Requires-Dist
        ("0.10.2", "A100-40GB", "1", ("flashinfer",)),  # installed and not disabled
        ("0.15.1", "RTX-6000-Ada", None, ("sort",)),  # VLLM_USE_FLASHINFER_SAMPLER unset: forward_native
        ("0.19.1", "A100-40GB", None, ("triton",)),  # apply_top_k_top_p: HAS_TRITON and >= 8 rows
        ("0.21.0", "L4", None, ("flashinfer", "triton")),  # default True, then the generator pass's forward_native
        ("0.24.0", "RTX-5090", "0", ("triton",)),
        ("0.27.1", "T4", None, ("triton",)),  # SM 7.5: flashinfer_sampler_supported() False
        ("0.27.1", "MI300X", None, ("triton",)),
    ],
)
def test_v1_top_k_top_p_per_version(version: str, gpu: str, env: str | None, paths: tuple[str, ...]):
    semantics = semantics_for(version)
    assert semantics is not None
    assert semantics.with_sampler_env(env).v1_top_k_top_p(gpu_by_name(gpu)) == paths


def test_a_tie_takes_the_measured_path():
    form = v1_sampler_form(gpu_by_name("A100-40GB"), semantics_for("0.27.1"))  # FlashInfer 12 B estimated, Triton 12 B measured
    assert form.v1_top_k_top_p == TOP_K_TOP_P_TRITON and form.flashinfer


def test_env_value_must_be_an_integer():
    with pytest.raises(BadInput, match="VLLM_USE_FLASHINFER_SAMPLER"):
        semantics_for("0.27.1").with_sampler_env("yes")


def test_the_sampler_line_of_a_log_sets_the_path():
    # qwen3-8b-a100-40gb-v0.9.2.log: "FlashInfer is not available. Falling back to the PyTorch-native implementation of
    # top-p & top-k sampling." (TopKTopPSampler.__init__, 0.9.2)
    facts = load_vllm_startups(LOGS / "qwen3-8b-a100-40gb-v0.9.2.log")[0]
    assert facts.flashinfer_sampler is False
    semantics = log_semantics(facts)
    assert semantics is not None and semantics.with_sampler_env("1").use_flashinfer_sampler
    assert log_semantics(replace(facts, flashinfer_sampler=True)).v1_top_k_top_p(gpu_by_name("A100-40GB")) == ("flashinfer",)


def test_only_the_v1_runner_takes_the_v1_form():
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    args = ServingArgs(max_model_len=4096)
    v015 = plan_for("meta-llama/Llama-3.1-8B-Instruct", args, "A100-40GB", semantics=semantics_for("0.15.1"))  # V1 runner
    v024 = plan_for("meta-llama/Llama-3.1-8B-Instruct", args, "A100-40GB", semantics=semantics_for("0.24.0"))  # MRV2 (listed)
    assert "apply_top_k_top_p (sort)" in v015.memory["activation_peak"].method
    assert "V1 _dummy_sampler_run" not in v024.memory["activation_peak"].method
