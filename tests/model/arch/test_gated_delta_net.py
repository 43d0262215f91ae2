"""Gated DeltaNet layers as vLLM 0.33's profile run allocates them (capacity/model/arch/gated_delta_net.py), and the trace of
transformers' modules made to allocate the same (gated_delta_net.run_as_vllm) instead of the PyTorch fallback.

Expected bytes are worked by hand from vLLM's source (QwenGatedDeltaNetAttention.forward_cuda with no attention
metadata, _warmup_prefill_kernels, chunk.py:chunk_gated_delta_rule_fwd), each allocation rounded up to 512 B as the
CUDA caching allocator does. The small layer: Hk 2 key heads, Hv 4 value heads, K = V = 16, hidden 64, bfloat16,
T = 1,000 tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.model.arch.gated_delta_net import Alloc, GatedDeltaNetDims, chunk_program, held_bytes, peak_bytes, profile_run_program, warmup_program
from tests.support.paths import FIXTURES as TEST_FIXTURES

FIXTURES = TEST_FIXTURES / "configs"


def dims(interleaved: bool, state_dtype: str = "bfloat16") -> GatedDeltaNetDims:
    return GatedDeltaNetDims(
        num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=16, hidden_size=64, dtype="bfloat16", state_dtype=state_dtype, interleaved=interleaved
    )


# Qwen3-Next (interleaved layout), T = 1,000, bf16:
#   mixed_qkvz 1000 x (2x32 + 2x64) x 2 = 384,000; ba 1000 x 8 x 2 = 16,000 -> 16,384
#   value, z 1000 x 4 x 16 x 2 = 128,000 each; b, a 1000 x 4 x 2 = 8,000 -> 8,192 each
#   query, key 1000 x 32 x 2 = 64,000 each; mixed_qkv 1000 x 128 x 2 = 256,000
#   core_attn_out, normed, output 128,000 each (output: 1000 x 64 x 2)
NEXT_PEAK = 384_000 + 16_384 + 2 * 128_000 + 2 * 8_192 + 2 * 64_000 + 256_000 + 3 * 128_000
# Qwen3.5 (flat layout): mixed_qkvz, ba, core_attn_out, then b/a .contiguous() (dropped), normed, output
QWEN3_5_PEAK = 384_000 + 16_384 + 3 * 128_000
# the 64-token warmup: dummy qkv 64 x 128 x 2 = 16,384; dummy a, b 512 each; q, k 64 x 2 x 16 x 2 = 4,096 each;
# v 64 x 4 x 16 x 2 = 8,192; g, beta 64 x 4 x 4 = 1,024 each; state 4 x 16 x 16 x 2 = 2,048; cu_seqlens 8 -> 512
WARMUP_INPUTS = 16_384 + 2 * 512 + 2 * 4_096 + 8_192 + 2 * 1_024 + 2_048 + 512
# chunk path at T 64, one chunk: g_cumsum 1,024 + A (fp32) 65,536 + Ai (bf16) 32,768 while solve_tril runs
CHUNK_PEAK = 1_024 + 65_536 + 32_768


def test_profile_run_of_a_qwen3_next_layer_holds_the_hand_worked_bytes():
    assert NEXT_PEAK == 1_440_768
    assert peak_bytes(profile_run_program(dims(True), 1000, first_call=False)) == NEXT_PEAK
    # the warmup (first call) adds 38,400 + 99,328 on top of the 1,184,768 held before the core: below the end's peak
    assert peak_bytes(profile_run_program(dims(True), 1000, first_call=True)) == NEXT_PEAK
    assert held_bytes(profile_run_program(dims(True), 1000, first_call=True)) == 128_000  # the output alone


def test_profile_run_of_a_qwen3_5_layer_holds_the_hand_worked_bytes():
    assert peak_bytes(profile_run_program(dims(False), 1000, first_call=False)) == QWEN3_5_PEAK == 784_384
    assert peak_bytes(profile_run_program(dims(False), 1000, first_call=True)) == QWEN3_5_PEAK


def test_the_warmup_and_chunk_path_on_64_tokens():
    assert peak_bytes(chunk_program(dims(True), 64, 1, 1)) == CHUNK_PEAK == 99_328
    assert WARMUP_INPUTS == 38_400
    assert peak_bytes(warmup_program(dims(True))) == WARMUP_INPUTS + CHUNK_PEAK
    # a float32 recurrent state (Qwen3.5's mamba_ssm_dtype) doubles the state: 4,096
    assert peak_bytes(warmup_program(dims(True, "float32"))) == WARMUP_INPUTS + 2_048 + CHUNK_PEAK
    assert held_bytes(warmup_program(dims(True))) == 0


def test_the_chunk_path_is_linear_in_tokens_and_not_padded_per_request():
    # 8 requests of 8 tokens packed: 64 tokens in 8 chunks; A is [1, T, Hv, 64], h is [1, NT, Hv, V, K]
    steps = {s.name: s for s in chunk_program(dims(True), 64, 8, 8) if isinstance(s, Alloc)}
    assert steps["A"].shape == (1, 64, 4, 64) and steps["A"].dtype == "float32"
    assert steps["h"].shape == (1, 8, 4, 16, 16) and steps["final_state"].shape == (8, 4, 16, 16)


# --- the trace: transformers' modules allocating vLLM's tensors --------------------------------------------------


def tiny(fixture: str, **extra: object) -> dict:
    """The published config (tests/fixtures/configs) shrunk: 4 layers (3 Gated DeltaNet + 1 full attention), hidden
    64, linear heads 2 x 16 (keys) and 4 x 16 (values), a small vocabulary and MoE."""
    config = json.loads((FIXTURES / f"{fixture}.json").read_text())
    config.update(
        num_hidden_layers=4,
        layer_types=config["layer_types"][:4],
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        vocab_size=512,
        **extra,
    )
    return config


NEXT_MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32}


def traced_layer(config: dict, adapt: bool) -> tuple[list[tuple[tuple[int, ...], str]], int, object]:
    """One Gated DeltaNet layer of the model built from `config` run under fake tensors on 8 x 125 tokens:
    (shape, dtype) of every tensor it allocated, its peak above its input, and its output."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    from capacity.model.registry import family_for, spec_from_files
    from profilers.probes import FakeProbe

    spec = spec_from_files(config, "tiny")
    probe = FakeProbe()
    made: list[tuple[tuple[int, ...], str]] = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    made.append((tuple(t.shape), str(t.dtype).removeprefix("torch.")))
            return out

    with probe.tracking(), torch.inference_mode():
        with probe.host():
            model = family_for(config).build_module(config, device="meta", dtype="bfloat16")
        model = probe.adopt_module(model).eval()
        if adapt:
            assert spec.family.run_layers_as_vllm(model, spec).startswith("3 Gated DeltaNet layers")
        layer = next(m for m in model.modules() if type(m).__name__.endswith("GatedDeltaNet"))
        hidden = torch.zeros(8, 125, 64, dtype=torch.bfloat16)
        probe.reset_peak()
        start = probe.allocated()
        with Log():
            out = layer(hidden)
        return made, probe.peak() - start, out


def per_chunk_blocks(made: list[tuple[tuple[int, ...], str]]) -> list[tuple[int, ...]]:
    return [shape for shape, dtype in made if dtype == "float32" and shape[-2:] == (64, 64)]


@pytest.mark.parametrize(("fixture", "expected"), [("Qwen--Qwen3-Next-80B-A3B-Instruct", NEXT_PEAK), ("Qwen--Qwen3.5-27B-text", QWEN3_5_PEAK)])
def test_a_traced_layer_allocates_vllms_tensors_not_the_fallbacks(fixture: str, expected: int):
    extra = NEXT_MOE if "Next" in fixture else {}
    config = tiny(fixture, **extra)
    fallback, fallback_peak, _ = traced_layer(config, adapt=False)
    assert per_chunk_blocks(fallback)  # transformers' torch_chunk_gated_delta_rule: [B, H, n_chunks, 64, 64] float32
    made, peak, out = traced_layer(config, adapt=True)
    assert per_chunk_blocks(made) == []
    assert peak == expected  # 8 x 125 = 1,000 tokens, first call (with the 64-token warmup below the peak)
    assert tuple(out.shape) == (8, 125, 64)
    assert fallback_peak > 2 * expected


def test_a_traced_plan_says_how_its_gated_delta_net_layers_were_charged(tmp_path: Path):
    pytest.importorskip("torch")
    from capacity.gpu.catalog import gpu_by_name
    from capacity.memory.measured_profile import MemoryProfile
    from capacity.model.registry import model_spec
    from capacity.planning.planner import build_plan
    from capacity.serving.config import ServingArgs, resolve_serving
    from capacity.serving.encoder_budget import build_budget
    from capacity.source.resolve import resolve_model
    from profilers.probes import FakeProbe
    from profilers.run import run_profile

    folder = tmp_path / "tiny-qwen3-next"
    folder.mkdir()
    config = tiny("Qwen--Qwen3-Next-80B-A3B-Instruct", **NEXT_MOE)
    (folder / "config.json").write_text(json.dumps(config))
    source = resolve_model(str(folder))
    spec = model_spec(source)
    gpu = gpu_by_name("H200")
    serving = resolve_serving(ServingArgs(max_num_batched_tokens=512, max_num_seqs=8, max_model_len=512), spec, gpu)
    profile = run_profile(source, spec, serving, build_budget(spec, serving), gpu, FakeProbe(), capture_graphs=False, warmup=False)
    assert profile.modelled_layers.startswith("3 Gated DeltaNet layers allocate what vLLM 0.33's profile run allocates")
    assert MemoryProfile.from_dict(json.loads(json.dumps(profile.to_dict()))).modelled_layers == profile.modelled_layers
    method = build_plan(source, spec, gpu, serving, profile=profile).memory["activation_peak"].method
    assert "estimated from vLLM's source" in method and "values are not computed" in method
