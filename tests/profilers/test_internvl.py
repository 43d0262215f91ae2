"""InternVL (internvl_chat) on the profiler: transformers' -hf port built from the Hub's config allocates exactly the
parameters vLLM's InternVLChatModel does, and its tiles trace under fake tensors (OpenGVLab/InternVL3-8B)."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("torch")

from capacity.gpu.catalog import gpu_by_name
from capacity.model.family import family_named
from capacity.model.registry import model_spec
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.serving.encoder_budget import build_budget
from capacity.source.resolve import resolve_model
from profilers.probes import FakeProbe
from profilers.run import run_profile
from tests.support.paths import REPO_ROOT

CONFIG = json.loads((REPO_ROOT / "capacity/source/catalog/models/OpenGVLab--InternVL3-8B/config.json").read_text())


def test_the_hf_port_allocates_the_parameters_vllm_does():
    family = family_named("internvl_chat")
    listed = sum(math.prod(shape) for _, shape in family.parameter_shapes(CONFIG))  # InternViT + mlp1 from intern_vit.py / internvl.py
    built = family.build_module(CONFIG, device="meta")
    assert sum(p.numel() for p in built.parameters()) == listed
    # the Hub's tie_word_embeddings false reaches the LLM: an lm_head of its own, 151,674 x 3,584
    assert tuple(built.lm_head.weight.shape) == (151_674, 3_584)
    assert built.lm_head.weight is not built.model.language_model.embed_tokens.weight


def test_internvl_tiles_trace_under_fake_tensors():
    source = resolve_model("OpenGVLab/InternVL3-8B")
    spec = model_spec(source)
    gpu = gpu_by_name("H200")
    args = ServingArgs(max_num_batched_tokens=8192, max_num_seqs=8, max_model_len=8192, limit_mm_per_prompt={"video": 0})
    serving = resolve_serving(args, spec, gpu)
    budget = build_budget(spec, serving)
    # the largest image: 12 tiles + the thumbnail, (448 // 14)^2 x 0.5^2 = 256 tokens each = 3,328; 8192 // 3328 = 2 images
    assert (budget.profile_items, budget.profile_tokens_per_item) == (2, 3328)
    p = run_profile(source, spec, serving, budget, gpu, FakeProbe(), capture_graphs=False, warmup=False)
    assert p.oom is None
    assert "processed-shape tiles (13, 3, 448, 448)" in p.phase("encoder").detail
    assert p.encoder_cache_bytes == 2 * 3328 * 3584 * 2  # two images' rows x the LLM's hidden size x bfloat16
    assert p.weights_bytes >= 7_944_373_760 * 2  # every listed parameter in bfloat16
