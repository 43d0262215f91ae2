"""The profiler's encoder item and module parts across what transformers' layouts and installs give."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from capacity.errors import BadInput
from capacity.model.families.qwen2_5_omni import thinker_text, thinker_visual
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from profilers.run import profiled_item


class NoTorchvision:
    name = "generic"

    def encoder_input(self, *args: object) -> None:
        raise ImportError("Lfm2VlImageProcessor requires the Torchvision library")


def test_an_item_the_family_cannot_build_is_refused_in_one_line() -> None:
    spec = plan_for("Qwen/Qwen2.5-VL-3B-Instruct", ServingArgs(), "H200").spec
    with pytest.raises(BadInput, match="not implemented yet here: the generic family cannot build its 256-token item .ImportError: Lfm2Vl"):
        profiled_item(NoTorchvision(), spec, None, "cpu", None, 256)  # type: ignore[arg-type]


def test_the_thinkers_parts_are_read_in_both_transformers_layouts() -> None:
    tower, text = object(), object()
    # transformers 5.17: thinker.visual, thinker.model is the text model
    old = SimpleNamespace(visual=tower, model=text)
    assert thinker_visual(old) is tower and thinker_text(old) is text
    # later 5.x: thinker.model holds both
    new = SimpleNamespace(model=SimpleNamespace(visual=tower, language_model=text))
    assert thinker_visual(new) is tower and thinker_text(new) is text


# --- the generic family's video item (Qwen-VL-style towers) ---------------------------------------------------

TINY_GLM4V = {
    "architectures": ["Glm4vForConditionalGeneration"],
    "model_type": "glm4v",
    "torch_dtype": "float32",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 500,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "attention_bias": True,
    "partial_rotary_factor": 0.5,
    "rope_scaling": {"type": "default", "mrope_section": [2, 3, 3]},
    "image_token_id": 499,
    "video_token_id": 498,
    "video_start_token_id": 497,
    "video_end_token_id": 496,
    "image_start_token_id": 495,
    "image_end_token_id": 494,
    "vision_config": {
        "hidden_size": 32,
        "depth": 1,
        "num_heads": 2,
        "intermediate_size": 64,
        "image_size": 28,
        "patch_size": 14,
        "out_hidden_size": 64,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "rms_norm_eps": 1e-5,
    },
}


def test_glm41v_profiles_its_31974_token_video_as_patches_and_grid() -> None:
    """The item issue 26 found unbuildable: 6 frame pairs x 146 x 146 patches, each 3 channels x 2 frames x 14 x 14."""
    torch = pytest.importorskip("torch")
    plan = plan_for("zai-org/GLM-4.1V-9B-Thinking", ServingArgs(), "H200")
    assert (plan.budget.modality_with_max_tokens, plan.budget.profile_tokens_per_item) == ("video", 31_974)
    item = plan.spec.family.encoder_input(plan.spec, plan.source, "meta", torch.bfloat16, 31_974)
    assert tuple(item.tensors["pixel_values_videos"].shape) == (6 * 146 * 146, 3 * 2 * 14 * 14)
    assert item.host == {"video_grid_thw": [6, 146, 146]}
    assert "6 frame pair(s) of 2044x2044 px" in item.note


def test_a_video_item_runs_the_towers_video_features() -> None:
    """get_video_features on 2 frame pairs of 4 x 6 patches: 48 patches merged 2 x 2 -> 12 rows of the text width."""
    torch = pytest.importorskip("torch")
    from capacity.model.family import EncoderInput, family_named

    family = family_named("generic")
    model = family.build_module(TINY_GLM4V, device="cpu", dtype="float32", init_weights=False).eval()
    item = EncoderInput({"pixel_values_videos": torch.zeros(2 * 4 * 6, 3 * 2 * 14 * 14), "video_grid_thw": torch.tensor([[2, 4, 6]])}, "")
    with torch.inference_mode():
        outputs = family.encode(model, item, 3)
    assert [tuple(o.shape) for o in outputs] == [(12, 64)] * 3
