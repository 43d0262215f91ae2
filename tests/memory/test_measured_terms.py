"""The terms a GPU profile measured, as the plan takes them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from capacity.memory.measured_profile import RANDOM_WEIGHTS, load_profile, random_weights_kind
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from capacity.weights.quant_schemes import quant_method

H200_AWQ = Path(__file__).parents[2] / "bench/results/h200-catalog-2026-12-01/profile-Qwen--Qwen2.5-Omni-7B-AWQ.json"
AWQ_MODEL = "Qwen/Qwen2.5-Omni-7B-AWQ"


def test_a_quantized_checkpoint_is_profiled_with_weights_marked_unquantized():
    assert quant_method({"quantization_config": {"quant_method": "awq", "bits": 4}}) == "awq"
    assert quant_method({"architectures": ["LlamaForCausalLM"]}) is None
    assert random_weights_kind(None, "bfloat16") == RANDOM_WEIGHTS
    assert random_weights_kind("awq", "bfloat16") == "random, built unquantized (awq layers in bfloat16)"


def test_weights_of_an_unquantized_build_are_replaced_by_the_checkpoints_count():
    """The H200 profile of Qwen2.5-Omni-7B-AWQ built its AWQ layers as plain bf16 ones: 17,093 MiB allocated, where
    vLLM loads the 4-bit checkpoint. Its weights term is then the checkpoint's own count (the formula's exact figure),
    and the terms the profile measured beside it (activations) stay measured."""
    measured = load_profile(H200_AWQ)
    unquantized = dataclasses.replace(measured, fingerprint=dataclasses.replace(measured.fingerprint, weights=random_weights_kind("awq", "bfloat16")))
    args = ServingArgs(max_num_batched_tokens=8192, max_num_seqs=1024)
    from_formula = plan_for(AWQ_MODEL, args, "H200").memory["weights"]
    from_profile = plan_for(AWQ_MODEL, args, "H200", profile=unquantized).memory
    assert measured.weights_bytes > 2 * from_formula.bytes  # bf16 against 4-bit: the measured bytes are not the checkpoint's
    assert from_profile["weights"].bytes == from_formula.bytes and from_profile["weights"].kind == from_formula.kind
    assert f"built the layers unquantized: {measured.weights_bytes:,} B" in from_profile["weights"].method
    assert from_profile["activation_peak"].kind == "measured"
