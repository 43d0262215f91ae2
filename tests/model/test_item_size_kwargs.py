"""Family.item_size_kwargs: the --mm-processor-kwargs a family models that keep its largest image within a token
budget (what `capacity fit` tries for smaller items), each checked against the family's own count of that image."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from capacity.model.family import family_named
from capacity.model.registry import load_model, spec_from_files
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("the item token counts are the spec's (config only); no memory figure is asserted")


def image_tokens(model: str, kwargs: dict[str, Any] | None) -> int:
    return plan_for(model, ServingArgs(mm_processor_kwargs=kwargs), "H200").budget.max_tokens_per_item["image"]


def hook(model: str, tokens: int) -> dict[str, Any] | None:
    source, spec = load_model(model)
    return spec.family.item_size_kwargs(source.config, tokens)


def test_qwen2_5_vl_max_pixels_is_the_budget_times_a_merged_patch():
    # patch 14 x merge 2 = 28 px a side: 8,192 x 784 = 6,422,528 px; the largest image is then 64 x 128 = 8,192 cells
    # (isqrt(8,192) = 90, whose largest divisor of 8,192 at most 90 is 64), its area exactly max_pixels (smart_resize keeps it)
    assert hook("Qwen/Qwen2.5-VL-7B-Instruct", 8192) == {"max_pixels": 6_422_528}
    assert image_tokens("Qwen/Qwen2.5-VL-7B-Instruct", {"max_pixels": 6_422_528}) == 8192
    # 1,031 is prime: 1,031 cells have no factor pair within aspect ratio 200, so the image steps down to 1,030 = 10 x 103
    assert image_tokens("Qwen/Qwen2.5-VL-7B-Instruct", hook("Qwen/Qwen2.5-VL-7B-Instruct", 1031)) == 1030


def test_qwen3_vl_and_qwen2_5_omni_take_their_own_patch_size():
    # Qwen3-VL: patch 16 x merge 2 = 32 px: 980 x 1,024 = 1,003,520 px, 28 x 35 = 980 cells (the video: 490, half)
    assert hook("Qwen/Qwen3-VL-4B-Instruct", 980) == {"max_pixels": 1_003_520}
    assert image_tokens("Qwen/Qwen3-VL-4B-Instruct", {"max_pixels": 1_003_520}) == 980
    # Qwen2.5-Omni's thinker vision tower: patch 14 x merge 2, as Qwen2.5-VL
    assert hook("Qwen/Qwen2.5-Omni-7B-AWQ", 4096) == {"max_pixels": 4096 * 784}


def internvl_without_video() -> dict[str, Any]:
    """InternVL3-8B's config with an LLM type without a video token (vLLM then takes tiling kwargs)."""
    config = copy.deepcopy(json.loads((REPO_ROOT / "capacity/source/catalog/models/OpenGVLab--InternVL3-8B/config.json").read_text()))
    config["llm_config"]["model_type"] = "llama"
    return config


@pytest.mark.parametrize(
    ("tokens", "kwargs", "image"),
    [
        # 256 tokens a tile (448 / 14 = 32 patches a side x 0.5^2 pixel shuffle): 1,792 // 256 = 7 tiles = a grid of 6 + the thumbnail
        (1_792, {"min_dynamic_patch": 1, "max_dynamic_patch": 6}, 1_792),
        (2_000, {"min_dynamic_patch": 1, "max_dynamic_patch": 6}, 1_792),
        # 2 tiles: a grid of 2 would add a thumbnail (3 tiles), so one tile and no thumbnail
        (600, {"min_dynamic_patch": 1, "max_dynamic_patch": 1}, 256),
        (255, None, None),
    ],
)
def test_internvl_max_dynamic_patch_counts_the_thumbnail(tokens: int, kwargs: dict[str, Any] | None, image: int | None):
    config = internvl_without_video()
    family = family_named("internvl_chat")
    assert family.item_size_kwargs(config, tokens) == kwargs
    if kwargs is not None:
        files = family.with_processor_kwargs(config, {}, kwargs)
        spec = spec_from_files(config, "internvl", None, files["processor_config.json"])
        assert next(m.max_tokens_per_item for m in spec.modalities if m.name == "image") == image


def test_gemma4_takes_the_largest_supported_max_soft_tokens_within_the_budget():
    # vLLM's _SUPPORTED_SOFT_TOKENS: 70, 140, 280, 560, 1120; an image's tokens are its max_soft_tokens
    assert hook("google/gemma-4-26B-A4B", 1000) == {"max_soft_tokens": 560}
    assert image_tokens("google/gemma-4-26B-A4B", {"max_soft_tokens": 560}) == 560
    assert hook("google/gemma-4-26B-A4B", 69) is None


def test_a_family_without_a_modelled_size_key_offers_none():
    assert hook("openai/whisper-large-v3", 1000) is None
    assert hook("Qwen/Qwen2.5-7B-Instruct", 1000) is None
