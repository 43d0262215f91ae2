"""LLaVA-NeXT (llava_next): vLLM 0.33's anyres image rule and tower, on the published llava-v1.6-vicuna-7b-hf config.

The counts are compared with what vLLM 0.33's own LlavaNextProcessingInfo returned for the same configs
(bench/vllm_llava_next_reference.py, committed in bench/results/vllm-llava-next-reference-2026-12-01/); the
weights with vLLM's own model class (bench/results/vllm-weights-reference-2026-11-30, tests/weights/test_per_rank.py).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Any

import pytest

from capacity.errors import BadInput
from capacity.model.families.llava import tower_layers_built
from capacity.model.hf_config import materialized
from capacity.model.items.llava_next import AnyresImages, select_best_resolution
from capacity.model.registry import family_for, spec_from_files
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

ROOT = REPO_ROOT
CONFIG = json.loads((ROOT / "capacity" / "source" / "catalog" / "models" / "llava-hf--llava-v1.6-vicuna-7b-hf" / "config.json").read_text())
REFERENCE = json.loads((ROOT / "bench" / "results" / "vllm-llava-next-reference-2026-12-01" / "reference.json").read_text())


def variant(fields: dict[str, Any]) -> dict[str, Any]:
    config = copy.deepcopy(CONFIG)
    config.update(copy.deepcopy(fields))
    return config


def rule(fields: dict[str, Any] | None = None) -> AnyresImages:
    return AnyresImages.from_config(materialized(variant(fields or {})))


def test_800x600_image_worked_by_hand():
    """height 600, width 800, pinpoints (h, w) 336x672, 672x336, 672x672, 1008x336, 336x1008:
    select_best_resolution: 672x672 scales it by min(672/800, 672/600) = 0.84 to 672 x 504 = 338,688 effective pixels,
    more than any other (336x672: 0.56 -> 448 x 336 = 150,528; 336x1008 the same; 672x336, 1008x336: 0.42 -> 84,672)
    -> 2 x 2 tiles of 336. The tiles' map is 48 x 48 patches (24 per tile); the image is wider (800/600 = 1.33 > 1),
    so new height = int(round(600 x 48/800, 7)) = 36, padding (48 - 36) // 2 = 6 rows top and bottom: 36 x 48 = 1,728
    features + 36 newlines + the base tile's 24^2 + 1 - 1 (CLS dropped, "default") = 576 -> 2,340 tokens; 5 tiles."""
    images = rule()
    assert images.tile_grid(600, 800) == (2, 2)
    assert images.unpadded_features(600, 800) == (1_728, 36)
    assert images.tokens(600, 800) == 2_340
    assert images.tiles(600, 800) == 5


def test_most_features_image_is_672_square_with_2928_tokens():
    """672x672: 2 x 2 tiles, nothing to unpad: 48 x 48 = 2,304 + 48 newlines + 576 base = 2,928; the tower runs
    5 tiles x (24^2 + 1) = 2,885 positions."""
    spec = spec_from_files(CONFIG, "llava-hf/llava-v1.6-vicuna-7b-hf")
    assert spec.family is family_for(CONFIG) and spec.family.name == "llava_next"
    (image,) = spec.modalities
    assert (image.name, image.max_tokens_per_item, image.encoder_positions) == ("image", 2_928, 2_885)
    assert "672x672" in spec.notes[0] and "2 x 2 tiles" in spec.notes[0]


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=lambda c: c["name"])
def test_counts_equal_vllm_own_processing_info(case: dict[str, Any]):
    """Every size of every case: tokens, tile grid, unpadded features and newlines, tiles; and the size with the
    most features with its tokens (vLLM's profiled item)."""
    images = rule(case["fields"])
    for row in case["images"]:
        height, width = row["height"], row["width"]
        assert images.tokens(height, width) == row["tokens"], (height, width)
        assert list(images.tile_grid(height, width)) == row["grid"]
        assert images.unpadded_features(height, width) == (row["unpadded"], row["newlines"])
        assert images.tiles(height, width) == row["tiles"]
    assert list(images.size_with_most_features()) == case["most_features"]
    assert images.tokens(*images.size_with_most_features()) == case["max_image_tokens"]
    assert images.tile_positions == case["tower_positions_per_tile"]


def test_reference_covers_the_catalog_config_and_its_variants():
    names = [c["name"] for c in REFERENCE["cases"]]
    assert "catalog" in names and len(names) >= 5 and REFERENCE["vllm_version"] == "0.33.0"


def test_best_resolution_ties_keep_the_first_pinpoint():
    """A 336x336 image fits 336x672 and 672x336 alike (effective 112,896, wasted 112,896): the first listed wins."""
    assert select_best_resolution(336, 336, ((336, 672), (672, 336))) == (336, 672)
    assert select_best_resolution(336, 336, ((672, 336), (336, 672))) == (672, 336)


def test_tower_layers_vllm_builds():
    """llava.py _get_num_hidden_layers: feature layer -2 of 24 -> 23 layers; -1 -> 24; a list -> its deepest."""
    full = materialized(CONFIG)
    assert tower_layers_built(full) == 23
    assert tower_layers_built({**full, "vision_feature_layer": -1}) == 24
    assert tower_layers_built({**full, "vision_feature_layer": [3, -5]}) == 20


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"vision_feature_select_strategy": "cls"}, "vision_feature_select_strategy"),
        ({"image_grid_pinpoints": [[336, "672"]]}, "image_grid_pinpoints"),
        ({"image_grid_pinpoints": []}, "image_grid_pinpoints"),
        ({"vision_config": {**CONFIG["vision_config"], "image_size": 335}}, "image_size"),
        ({"vision_config": {"model_type": "pixtral", "image_size": 336, "patch_size": 14}}, "vision_config.model_type"),
    ],
)
def test_fields_the_rule_cannot_read_are_refused_naming_them(fields: dict[str, Any], named: str):
    with pytest.raises(BadInput, match=named):
        AnyresImages.from_config({**materialized(CONFIG), **fields})


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capacity.cli", *args], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_cli_plans_the_catalog_entry_offline_and_leaves_the_tower_out_at_image_0():
    """The default plan profiles 2 images of 2,928 tokens (8,192 batched tokens // 2,928); --limit-mm-per-prompt
    image=0 leaves the tower out: vLLM's own class holds 13,477,888,000 B then, 14,101,665,792 B with it."""
    whole = run_cli("plan", "--model", "llava-hf/llava-v1.6-vicuna-7b-hf", "--gpu", "H200", "--estimate", "trace", "--json")
    assert whole.returncode == 0, whole.stderr[-500:]
    plan = json.loads(whole.stdout)
    assert plan["budget"]["max_tokens_per_item"] == {"image": 2_928} and plan["budget"]["max_items_per_batch"] == {"image": 2}
    assert plan["memory"]["weights"]["bytes"] == 14_101_665_792
    # the trace ran the tower on the tiles and packed them: 2 items x 2,928 rows x 4,096 x 2 B held as encoder outputs
    assert "fake-tensor trace" in plan["memory"]["activation_peak"]["method"]
    assert plan["memory"]["encoder_cache"]["bytes"] == 2 * 2_928 * 4_096 * 2
    text_only = run_cli("plan", "--model", "llava-v1.6-vicuna-7b", "--gpu", "H200", "--estimate", "formula", "--limit-mm-per-prompt", "image=0", "--json")
    assert text_only.returncode == 0, text_only.stderr[-500:]
    assert json.loads(text_only.stdout)["memory"]["weights"]["bytes"] == 13_477_888_000


def test_transformers_default_llava_next_config_is_planned_by_this_family():
    """LlavaNextConfig's defaults (CLIP-L/336, the five v1.6 pinpoints, "default" strategy): the same 2,928 tokens."""
    from transformers import CONFIG_MAPPING

    config = json.loads(json.dumps(CONFIG_MAPPING["llava_next"]().to_dict(), default=str))
    config["architectures"] = ["LlavaNextForConditionalGeneration"]
    spec = spec_from_files(config, "default")
    assert spec.family.name == "llava_next" and spec.modalities[0].max_tokens_per_item == 2_928


def tiny_config() -> dict[str, Any]:
    """A LLaVA-NeXT of 2-patch tiles (28 px, patch 14), pinpoints up to 2 x 2 tiles, tiny towers."""
    return {
        "architectures": ["LlavaNextForConditionalGeneration"],
        "model_type": "llava_next",
        "image_grid_pinpoints": [[28, 56], [56, 28], [56, 56]],
        "image_token_index": 5,
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "text_config": {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 64},
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 28, "patch_size": 14},
    }


def test_trace_encode_packs_as_transformers_and_vllm_do():
    """The family's encode on the dummy image's tiles equals transformers' own get_image_features (the same
    spatial_unpad packing vLLM's _merge_image_patch_embeddings does) on random pixels, row for row; its rows are the
    rule's tokens: a 56 x 56 image, 2 x 2 tiles of 2 x 2 patches: 4 x 4 = 16 + 4 newlines + 4 base = 24."""
    import torch

    from capacity.model.families.llava_next import FAMILY

    config = tiny_config()
    spec = spec_from_files(config, "tiny")
    assert spec.modalities[0].max_tokens_per_item == 24
    model = FAMILY.build_module(config, device="cpu", dtype="float32", init_weights=True).eval()
    source = type("Source", (), {"config": config})()
    item = FAMILY.encoder_input(spec, source, "cpu", torch.float32, 24)
    pixels = torch.randn_like(item.tensors["pixel_values"])
    item = type(item)({"pixel_values": pixels}, item.note, item.host)
    with torch.no_grad():
        ours = FAMILY.encode(model, item, 2)
        theirs = model.model.get_image_features(
            pixel_values=pixels, image_sizes=torch.tensor([[56, 56]]), vision_feature_layer=-2, vision_feature_select_strategy="default"
        )
    theirs = getattr(theirs, "pooler_output", theirs)
    reference = theirs[0] if isinstance(theirs, (list, tuple)) else theirs
    assert len(ours) == 2 and tuple(ours[0].shape) == (24, 32)
    torch.testing.assert_close(ours[0], reference.reshape(24, 32))
    torch.testing.assert_close(ours[1], ours[0])


def test_a_feature_layer_that_is_not_an_integer_is_refused():
    with pytest.raises(BadInput, match="vision_feature_layer"):
        tower_layers_built({**materialized(CONFIG), "vision_feature_layer": "last"})
