"""MiniCPM-Llama3-V 2.5 on the profiler: its modules composed from transformers' parts (capacity/model/arch/minicpmv.py)
allocate exactly the parameters vLLM's MiniCPMV2_5 does, and its sliced image traces under fake tensors."""

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

NAME = "openbmb/MiniCPM-Llama3-V-2_5"
CONFIG = json.loads((REPO_ROOT / "capacity/source/catalog/models/openbmb--MiniCPM-Llama3-V-2_5/config.json").read_text())


def test_the_composed_model_allocates_the_parameters_vllm_does():
    family = family_named("minicpmv")
    listed = dict(family.parameter_shapes(CONFIG))
    built = {n: tuple(p.shape) for n, p in family.build_module(CONFIG, device="meta").named_parameters()}
    assert sum(math.prod(s) for s in built.values()) == sum(math.prod(s) for s in listed.values())
    # the resampler: 96 queries of 4096, keys projected from the 1152-wide tower, 32 heads of 128
    assert built["resampler.query"] == (96, 4096) and built["resampler.kv_proj.weight"] == (4096, 1152)
    assert built["resampler.attn.in_proj_weight"] == (3 * 4096, 4096)


def test_minicpmv_slices_trace_under_fake_tensors():
    source = resolve_model(NAME)
    spec = model_spec(source)
    gpu = gpu_by_name("H200")
    serving = resolve_serving(ServingArgs(max_num_batched_tokens=8192, max_num_seqs=8, max_model_len=8192), spec, gpu)
    budget = build_budget(spec, serving)
    # the 448 x 4032 image: its source downsized and a 1 x 9 grid of slices, (9 + 1) x 96 = 960 tokens; 8192 // 960 = 8
    assert (budget.profile_items, budget.profile_tokens_per_item) == (8, 960)
    p = run_profile(source, spec, serving, budget, gpu, FakeProbe(), capture_graphs=False, warmup=False)
    assert p.oom is None
    # every slice padded to the largest's 1,056 patches (the source image, 14 x 1,056 px in one row)
    assert "processed-shape slices (10, 3, 14, 14784)" in p.phase("encoder").detail
    assert p.encoder_cache_bytes == 8 * 960 * 4096 * 2  # eight images' tokens x the LLM's width x float16


TINY_MINICPMV = {
    "architectures": ["MiniCPMV"],
    "model_type": "minicpmv",
    "version": "2.5",
    "torch_dtype": "float32",
    "hidden_size": 256,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 500,
    "max_position_embeddings": 256,
    "query_num": 8,
    "image_size": 56,
    "patch_size": 14,
    "rms_norm_eps": 1e-5,
    "vision_config": {"model_type": "idefics2", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_hidden_layers": 1, "image_size": 56, "patch_size": 14},
}


def test_the_resampler_gives_query_num_tokens_per_slice_whatever_its_patches():
    """Three slices of 10, 6 and 6 patches (padded to 10, masked) through the tower and the resampler, two images:
    3 slices x 8 queries = 24 rows of the LLM's 256 per image."""
    from capacity.model.family import EncoderInput

    family = family_named("minicpmv")
    model = family.build_module(TINY_MINICPMV, device="cpu", dtype="float32", init_weights=False).eval()
    mask = torch.zeros(3, 1, 10, dtype=torch.bool)
    mask[0, 0, :10], mask[1:, 0, :6] = True, True
    item = EncoderInput({"pixel_values": torch.zeros(3, 3, 14, 10 * 14), "patch_attention_mask": mask}, "")
    with torch.inference_mode():
        outputs = family.encode(model, item, 2)
    assert [tuple(o.shape) for o in outputs] == [(24, 256)] * 2
