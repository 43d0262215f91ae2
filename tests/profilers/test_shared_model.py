"""One fake model lent to many traces: each trace measures what it measures alone, and nothing of one reaches the next."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from capacity.gpu.catalog import gpu_by_name
from capacity.model.registry import load_model
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.serving.encoder_budget import build_budget
from profilers.probes import FakeProbe
from profilers.run import run_profile
from profilers.shared_model import SharedFakeModel, module_state


def comparable(profile: Any) -> dict[str, Any]:
    """A trace's result without its date and its phases' wall times (the only fields that differ run to run)."""
    d = profile.to_dict()
    d["fingerprint"].pop("created")
    for phase in d["phases"]:
        phase.pop("wall_s")
    return d


def trace(model: str, gpu: str, shared: SharedFakeModel | None = None, **knobs: Any) -> dict[str, Any]:
    source, spec = load_model(model)
    target = gpu_by_name(gpu)
    serving = resolve_serving(ServingArgs(**knobs), spec, target)
    budget = build_budget(spec, serving, enable_cache=False)
    if shared is None:
        profile = run_profile(source, spec, serving, budget, target, FakeProbe(), capture_graphs=False, warmup=False)
    else:
        profile = run_profile(source, spec, serving, budget, target, shared.probe(), capture_graphs=False, warmup=False, placement=shared)
    return comparable(profile)


@pytest.mark.parametrize(
    ("model", "first", "then"),
    [
        # an encoder-decoder with an image encoder: its encoder outputs, cross-attention and sampler sized by the knobs
        ("nvidia/Nemotron-Parse", {"max_num_seqs": 256, "max_model_len": 9000}, {"max_num_seqs": 16, "max_model_len": 2048}),
        # Gated DeltaNet layers whose forward the run replaces (a one-time kernel warmup in their first call)
        ("Qwen/Qwen3-Next-80B-A3B-Thinking", {"max_num_seqs": 64, "max_model_len": 4096}, {"max_num_seqs": 8, "max_model_len": 2048}),
    ],
)
def test_a_trace_after_another_on_the_shared_model_equals_the_trace_alone(model: str, first: dict[str, Any], then: dict[str, Any]) -> None:
    alone = trace(model, "L4", **then)
    shared = SharedFakeModel()
    before = trace(model, "L4", shared, **first)
    after = trace(model, "L4", shared, **then)
    assert shared.builds == 1  # the second trace ran on the first one's model
    assert after == alone
    assert before != alone  # other knobs, other figures: the comparison can fail
    weights = next(p for p in after["phases"] if p["name"] == "weights")
    assert weights["allocated_before_bytes"] == 0 and weights["allocated_after_bytes"] == after["weights_bytes"] > 0  # the lent model counted anew


def test_module_state_sees_a_cached_tensor_a_replaced_buffer_and_a_changed_scalar_but_not_a_replaced_forward() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    module.register_buffer("table", torch.zeros(2))
    built = module_state(module)
    module[0].forward = lambda x: x  # type: ignore[method-assign]  # run_as_vllm-style: every run sets its own
    assert module_state(module) == built
    module[1].cache = {"cos": torch.zeros(4)}
    assert module_state(module) != built
    del module[1].cache
    assert module_state(module) == built
    module.table = torch.ones(2)
    assert module_state(module) != built
    module.table = module._buffers["table"]
    module[0].seen_len = 9000
    assert module_state(module) != built


def test_a_model_a_trace_left_state_in_is_built_again() -> None:
    shared = SharedFakeModel()
    first = trace("openai/whisper-tiny", "L4", shared, max_num_seqs=8)
    assert shared.builds == 1
    module = shared._module
    module.model.decoder.cached_positions = torch.zeros(1)  # as a rotary cache made in a forward would be
    assert trace("openai/whisper-tiny", "L4", shared, max_num_seqs=8) == first
    assert shared.builds == 2 and shared._module is not module
    trace("openai/whisper-tiny", "L4", shared, max_num_seqs=16)
    assert shared.builds == 2  # the model built again is lent again


def test_another_dtype_builds_another_model() -> None:
    shared = SharedFakeModel()
    trace("openai/whisper-tiny", "L4", shared)
    float32 = trace("openai/whisper-tiny", "L4", shared, dtype="float32")
    assert shared.builds == 2
    assert float32 == trace("openai/whisper-tiny", "L4", dtype="float32")


def test_the_model_is_lent_only_to_its_own_probe() -> None:
    """Its fake tensors belong to the first run's FakeTensorMode: a run under another mode cannot use them."""
    shared = SharedFakeModel()
    trace("openai/whisper-tiny", "L4", shared)
    source, spec = load_model("openai/whisper-tiny")
    gpu = gpu_by_name("L4")
    serving = resolve_serving(ServingArgs(), spec, gpu)
    budget = build_budget(spec, serving, enable_cache=False)
    with pytest.raises(ValueError, match="own probe"):
        run_profile(source, spec, serving, budget, gpu, FakeProbe(), capture_graphs=False, warmup=False, placement=shared)
