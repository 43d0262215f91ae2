"""Llama-3.2-Vision on the profiler: the tiled ViT's item, its cross-attention states, and the decoder's
cross-attention layers attending them (CPU probe on a tiny config; fake tensors on the catalog's 11B)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from capacity.model.families.mllama import widest_aspect_ratio
from capacity.serving.encoder_budget import build_budget
from profilers.probes import CpuProbe
from profilers.run import run_profile
from tests.profilers.test_run import folder_model

# 28 px tiles of 14 px patches: (28 // 14)^2 + 1 = 5 tokens per tile, 4 tiles = 20 cross-attention tokens per image
TINY_MLLAMA = {
    "architectures": ["MllamaForConditionalGeneration"],
    "model_type": "mllama",
    "image_token_index": 499,
    "torch_dtype": "float32",
    "text_config": {
        "model_type": "mllama_text_model",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 4,
        "cross_attention_layers": [1, 3],
        "vocab_size": 500,
        "max_position_embeddings": 256,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    "vision_config": {
        "model_type": "mllama_vision_model",
        "hidden_size": 32,
        "intermediate_size": 64,
        "attention_heads": 2,
        "num_hidden_layers": 2,
        "num_global_layers": 1,
        "image_size": 28,
        "patch_size": 14,
        "max_num_tiles": 4,
        "intermediate_layers_indices": [0],
        "vision_output_dim": 64,
        "num_channels": 3,
        "supported_aspect_ratios": [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]],
    },
}


@pytest.fixture
def tiny_mllama(tmp_path: Path):
    return folder_model(tmp_path / "tiny-mllama", TINY_MLLAMA, max_num_batched_tokens=256, max_num_seqs=4, dtype="float32")


def cross_key_lengths(model) -> tuple[list[int], object]:
    """The key lengths the decoder's cross-attention layers project, recorded by hooks on their k_proj."""
    seen: list[int] = []
    for layer in model.model.language_model.layers:
        if hasattr(layer, "cross_attn"):
            layer.cross_attn.k_proj.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[1]))
    return seen, model


def test_widest_aspect_ratio_is_the_processors_largest_tiling():
    # MllamaImageProcessor numbers the supported ratios from 1: (1, 4) is the 4th and the first of 4 tiles
    assert widest_aspect_ratio({}) == (4, (1, 4))
    assert widest_aspect_ratio({"supported_aspect_ratios": [[1, 1], [2, 2], [1, 2]]}) == (2, (2, 2))


def test_mllama_profile_encodes_tiles_and_runs_cross_attention(tiny_mllama):
    source, spec, gpu, serving = tiny_mllama
    budget = build_budget(spec, serving)
    # encoder budget max(256, 20) = 256 tokens -> 256 // 20 = 12 images of 20 tokens
    assert (budget.profile_items, budget.profile_tokens_per_item) == (12, 20)
    seen: list[str] = []
    p = run_profile(source, spec, serving, budget, gpu, CpuProbe(), on_phase=lambda n, d: seen.append(n))
    assert p.oom is None
    assert seen == ["weights", "encoder", "decoder", "sampler", "sampler_warmup", "warmup_prefill", "warmup_decode"]
    # each image's cross-attention states: 4 tiles x 5 tokens x text hidden 64 x 4 B, 12 of them kept
    assert p.encoder_cache_bytes == 12 * 4 * 5 * 64 * 4 == 61_440
    assert "4 tiles (aspect_ratio_id 4) x 5 tokens" in p.phase("encoder").detail
    # warmup requests carry max_encoder_len = max_model_len = 256 encoder positions (no max_source_positions)
    assert "256 encoder positions each" in p.phase("warmup_prefill").detail


def test_mllama_decoder_attends_the_encoder_states_in_its_cross_layers():
    """The profile's decoder pass gives the cross-attention layers one zero key per request (MRV2's dummy run);
    the warmup gives them its max_encoder_len positions; a text-only batch skips them as transformers does."""
    from capacity.model.family import family_named

    family = family_named("mllama")
    seen, model = cross_key_lengths(family.build_module(TINY_MLLAMA, device="cpu", dtype="float32", init_weights=False).eval())
    ids = torch.zeros(3, 5, dtype=torch.long)
    with torch.inference_mode():
        family.decode(model, ids, torch.zeros(3, 1, 64))
        assert seen == [1, 1]  # layers 1 and 3, one key each
        family.decode(model, ids, torch.zeros(3, 17, 64))
        assert seen[2:] == [17, 17]
        out = family.decode(model, ids, None)
    assert len(seen) == 4 and tuple(out.shape) == (3, 5, 64)


def test_mllama_item_feeds_the_real_vision_tower(tiny_mllama):
    from capacity.model.family import family_named

    source, spec, _, _ = tiny_mllama
    family = family_named("mllama")
    model = family.build_module(TINY_MLLAMA, device="cpu", dtype="float32", init_weights=False).eval()
    item = family.encoder_input(spec, source, "cpu", torch.float32, 20)
    assert tuple(item.tensors["pixel_values"].shape) == (1, 1, 4, 3, 28, 28)
    assert item.tensors["aspect_ratio_mask"].tolist() == [[[1, 1, 1, 1]]]
    with torch.inference_mode():
        outputs = family.encode(model, item, 3)
    assert [tuple(o.shape) for o in outputs] == [(20, 64)] * 3


def test_catalog_mllama_traces_its_tiles_under_fake_tensors():
    """The 11B's item on fake tensors: 4 tiles of 560 px, (560 // 14)^2 + 1 = 1601 tokens each, projected to 4096."""
    from capacity.gpu.catalog import gpu_by_name
    from capacity.model.registry import model_spec
    from capacity.serving.config import ServingArgs, resolve_serving
    from capacity.source.resolve import resolve_model
    from profilers.probes import FakeProbe

    source = resolve_model("meta-llama/Llama-3.2-11B-Vision-Instruct")
    spec = model_spec(source)
    gpu = gpu_by_name("H200")
    serving = resolve_serving(ServingArgs(max_num_batched_tokens=8192, max_num_seqs=8, max_model_len=8192), spec, gpu)
    budget = build_budget(spec, serving)
    assert (budget.profile_items, budget.profile_tokens_per_item) == (1, 6404)  # 8192 // 6404 = 1 image
    p = run_profile(source, spec, serving, budget, gpu, FakeProbe(), capture_graphs=False, warmup=False)
    assert p.oom is None and p.encoder_cache_bytes == 6404 * 4096 * 2  # bfloat16
    assert p.uses_convolution  # the patch embedding: the plan adds the cuDNN difference
