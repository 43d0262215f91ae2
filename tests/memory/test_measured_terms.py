"""How a profile records its weights (a quantized checkpoint built dense: tests/planning/test_profile_plans_agree.py plans it)."""

from __future__ import annotations

from capacity.memory.measured_profile import RANDOM_WEIGHTS, random_weights_kind
from capacity.weights.quant_schemes import quant_method


def test_a_quantized_checkpoint_is_profiled_with_weights_marked_unquantized():
    assert quant_method({"quantization_config": {"quant_method": "awq", "bits": 4}}) == "awq"
    assert quant_method({"architectures": ["LlamaForCausalLM"]}) is None
    assert random_weights_kind(None, "bfloat16") == RANDOM_WEIGHTS
    assert random_weights_kind("awq", "bfloat16") == "random, built unquantized (awq layers in bfloat16)"
