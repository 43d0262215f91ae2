"""Ultravox on the profiler: its modules composed from transformers' parts (capacity/model/arch/ultravox.py) allocate
exactly the parameters vLLM's UltravoxModel does, and its dummy audio traces under fake tensors."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from capacity.gpu.catalog import gpu_by_name
from capacity.model.family import family_named
from capacity.model.registry import model_spec
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.serving.encoder_budget import build_budget
from capacity.source.resolve import resolve_model
from profilers.probes import FakeProbe
from profilers.run import run_profile
from tests.support.paths import REPO_ROOT

NAME = "fixie-ai/ultravox-v0_6-llama-3_1-8b"
CONFIG = json.loads((REPO_ROOT / "capacity/source/catalog/models/fixie-ai--ultravox-v0_6-llama-3_1-8b/config.json").read_text())


def test_the_composed_model_allocates_the_parameters_vllm_does():
    family = family_named("ultravox")
    listed = {n: s for n, s in family.parameter_shapes(CONFIG)}
    built = {n: tuple(p.shape) for n, p in family.build_module(CONFIG, device="meta").named_parameters()}
    assert sum(math.prod(s) for s in built.values()) == sum(math.prod(s) for s in listed.values())
    # the projector, name by name: ln_pre 1280 x 8 wide, linear_1 to 4096, SwiGLU halves it, ln_mid, linear_2 to the LLM's 4096
    assert {n: s for n, s in built.items() if n.startswith("multi_modal_projector.")} == {n: s for n, s in listed.items() if n.startswith("multi_modal_projector.")}
    # the K bias vLLM's fused qkv_proj allocates (the checkpoint has none)
    assert built["audio_tower.layers.0.self_attn.k_proj.bias"] == (1280,)


def test_the_projector_stacks_eight_frames_per_token():
    """1500 encoder positions per 30 s chunk, padded to 1504 and stacked by 8: ceil(1500 / 8) = 188 tokens."""
    from capacity.model.arch.ultravox import _projector_class

    projector = _projector_class()(32 * 8, 64, 48, 8, "swiglu", True)
    assert tuple(projector(torch.zeros(2, 1500, 32)).shape) == (2, 188, 48)


def test_ultravox_audio_traces_under_fake_tensors():
    source = resolve_model(NAME)
    spec = model_spec(source)
    gpu = gpu_by_name("H200")
    serving = resolve_serving(ServingArgs(max_num_batched_tokens=8192, max_num_seqs=8, max_model_len=8192), spec, gpu)
    budget = build_budget(spec, serving)
    # vLLM's dummy audio: 16 chunks of 30 s x 188 tokens = 3,008; 8192 // 3008 = 2 items
    assert (budget.profile_items, budget.profile_tokens_per_item) == (2, 3008)
    p = run_profile(source, spec, serving, budget, gpu, FakeProbe(), capture_graphs=False, warmup=False)
    assert p.oom is None and "(16, 128, 3000)" in p.phase("encoder").detail
    assert p.encoder_cache_bytes == 2 * 3008 * 4096 * 2  # two audios' tokens x the LLM's width x bfloat16
    assert p.weights_bytes >= (8_030_261_248 + 637_009_920 + 50_343_936) * 2
