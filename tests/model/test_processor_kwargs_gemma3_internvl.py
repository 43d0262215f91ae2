"""--mm-processor-kwargs for Gemma-3 (pan and scan) and InternVL (dynamic tiles), against vLLM 0.33's own methods.

The reference numbers are bench/results/vllm-mm-kwargs-reference-2026-12-01/reference.json, written by
bench/vllm_mm_kwargs_reference.py (vLLM's Gemma3ProcessingInfo / InternVLProcessingInfo on the catalog's configs,
the kwargs merged by vLLM's own get_merged_mm_kwargs). A case whose vLLM code raised is one vLLM's startup fails on:
capacity refuses it in one line.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from capacity.cli.app import main
from capacity.errors import BadInput
from capacity.model.family import EncoderInput, family_named
from capacity.model.items.pan_and_scan import PanAndScan
from capacity.model.registry import model_spec, spec_from_files, with_mm_processor_kwargs
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from capacity.source.resolve import resolve_model
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

ROOT = REPO_ROOT
REFERENCE = json.loads((ROOT / "bench/results/vllm-mm-kwargs-reference-2026-12-01/reference.json").read_text())
INTERNVL = json.loads((ROOT / "capacity/source/catalog/models/OpenGVLab--InternVL3-8B/config.json").read_text())


def image_tokens(model: str, kwargs: dict[str, Any] | None, gpu: str = "H200") -> int:
    return plan_for(model, ServingArgs(mm_processor_kwargs=kwargs), gpu).budget.max_tokens_per_item["image"]


def label(row: dict[str, Any]) -> str:
    return f"{row['model'].split('/')[1]}-{json.dumps(row['mm_processor_kwargs'], sort_keys=True)}"


# --- Gemma-3 ------------------------------------------------------------------------------------------------

GEMMA3_OK = [r for r in REFERENCE["gemma3"] if "error" not in r and min(r["image_size_with_most_features"]) > 0]
# vLLM's code raised (strict type validation, a division by zero), or sized its dummy image negative (-896 px tall:
# its dummy-image builder cannot make it): its startup fails
GEMMA3_FAILS = [r for r in REFERENCE["gemma3"] if r not in GEMMA3_OK]


def test_the_reference_covers_what_it_should() -> None:
    assert {r["model"] for r in GEMMA3_OK} == {"google/gemma-3-4b-it", "google/gemma-3-27b-it", "google/medgemma-27b-it"}
    assert len(GEMMA3_OK) == 3 * 11 and len(GEMMA3_FAILS) == 3 * 7
    assert REFERENCE["meta"]["vllm"] == "0.33.0"


@pytest.mark.parametrize("row", GEMMA3_OK, ids=label)
def test_gemma3_counts_equal_vllms_own_methods(row: dict[str, Any]) -> None:
    scan = PanAndScan.from_kwargs(row["mm_processor_kwargs"])
    width, height = scan.largest_image(896)
    assert [height, width] == row["image_size_with_most_features"]  # get_image_size_with_most_features
    largest = row["max_feature_image"]
    assert scan.num_crops(width, height) == largest["num_crops"]
    # the embeddings of vLLM's placeholder (select_token_id) are get_num_image_tokens: no separator is an embedding
    assert largest["embeds"] == largest["num_image_tokens"]
    for image in row["images"]:
        assert scan.num_crops(image["width"], image["height"]) == image["num_crops"], image
        assert scan.image_tokens(image["width"], image["height"], 256) == image["num_image_tokens"] == image["embeds"], image
    assert image_tokens(row["model"], row["mm_processor_kwargs"] or None) == largest["embeds"]


@pytest.mark.parametrize("row", [r for r in GEMMA3_FAILS if r["model"] == "google/gemma-3-4b-it"], ids=label)
def test_gemma3_settings_vllm_fails_on_are_refused_in_one_line(row: dict[str, Any]) -> None:
    with pytest.raises(BadInput) as refused:
        plan_for(row["model"], ServingArgs(mm_processor_kwargs=row["mm_processor_kwargs"]), "H200")
    assert "\n" not in str(refused.value)


def test_gemma3_pan_and_scan_worked_by_hand() -> None:
    # do_pan_and_scan with transformers' defaults (min crop 256, at most 4 crops, ratio 1.2). vLLM's largest image is
    # 896 wide and 896 x 4 = 3,584 tall: ratio 4 >= 1.2; crops = min(floor(3,584 / 256) = 14, floor(4 + 0.5) = 4) = 4,
    # max(2, 4) = 4, min(4, 4) = 4; each crop ceil(3,584 / 4) = 896 tall, 896 >= 256: 4 crops. Embeddings: (4 + 1) x 256
    # = 1,280. SigLIP (patch 14) runs (896 / 14)^2 = 4,096 positions per crop: 5 x 4,096 = 20,480 per image. The encoder
    # budget at max_num_batched_tokens 8,192 profiles 8,192 // 1,280 = 6 images (vLLM: compute budget // tokens per item).
    plan = plan_for("google/gemma-3-27b-it", ServingArgs(mm_processor_kwargs={"do_pan_and_scan": True}, max_num_batched_tokens=8192), "H200")
    assert plan.budget.max_tokens_per_item["image"] == 1_280
    assert plan.spec.encoder_positions("image", 1_280) == 20_480
    assert plan.budget.profile_items == 6
    assert any("--mm-processor-kwargs" in note and "applied" in note and "(4 crops + the whole image) x 256" in note for note in plan.spec.notes)
    # without the kwargs: one 896 x 896 image, 256 embeddings, 4,096 positions, 8,192 // 256 = 32 images profiled
    plain = plan_for("google/gemma-3-27b-it", ServingArgs(max_num_batched_tokens=8192), "H200")
    assert (plain.budget.max_tokens_per_item["image"], plain.spec.encoder_positions("image", 256), plain.budget.profile_items) == (256, 4_096, 32)


def test_gemma3_defaults_are_transformers_processor_defaults() -> None:
    # transformers 5.20 (vLLM 0.33's) keeps them in Gemma3ProcessorKwargs._defaults; later releases in
    # Gemma3Processor.images_kwargs. The reference's boundary images pin them for vLLM: 1,075 x 896 (ratio 1.1998)
    # takes no crop, 1,076 x 896 (1.2009) two; 3,584 x 896 four, not 14 (floor(3,584 / 256)).
    from transformers import Gemma3Processor

    defaults = getattr(Gemma3Processor, "images_kwargs", None)
    if not isinstance(defaults, dict):
        from transformers.models.gemma3.processing_gemma3 import Gemma3ProcessorKwargs

        defaults = Gemma3ProcessorKwargs._defaults["images_kwargs"]
    assert PanAndScan().to_json() == {k: defaults[k] for k in PanAndScan().to_json()}


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"do_pan_and_scan": True, "images_kwargs": {"do_pan_and_scan": True}}, "images_kwargs: not modelled for Gemma-3.*give them flat"),
        ({"max_pixels": 1_003_520}, r"max_pixels: not modelled for Gemma-3 \(capacity models do_pan_and_scan"),
        ({"do_pan_and_scan": True, "pan_and_scan_max_num_crops": -1}, "not a positive integer"),
        ({"do_pan_and_scan": True, "pan_and_scan_min_crop_size": "256"}, "not a positive integer"),
        ({"do_pan_and_scan": 1}, "not true or false"),
        ({"do_pan_and_scan": True, "pan_and_scan_min_ratio_to_activate": 2}, r"2\.0, not 2"),
    ],
)
def test_gemma3_refusals_name_what_is_modelled(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(BadInput, match=needle):
        plan_for("google/gemma-3-4b-it", ServingArgs(mm_processor_kwargs=kwargs), "H200")


def test_gemma3_profiled_item_is_the_crops_vllm_hands_the_tower() -> None:
    import torch

    source = with_mm_processor_kwargs(resolve_model("google/gemma-3-4b-it"), {"do_pan_and_scan": True})
    spec = model_spec(source)
    item = spec.family.encoder_input(spec, source, "meta", torch.bfloat16, 1_280)
    assert tuple(item.tensors["pixel_values"].shape) == (5, 3, 896, 896)  # vLLM's pixel_values: num_patches = crops + 1


def test_gemma3_encode_gives_one_embedding_row_per_image_token() -> None:
    # a tiny Gemma-3 built by transformers: 56 px images, patch 14 -> 4 x 4 patches pooled to mm_tokens_per_image 4
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    config = Gemma3Config(
        text_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 300},
        vision_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 56, "patch_size": 14},
        mm_tokens_per_image=4,
        image_token_index=299,
        boi_token_index=297,
        eoi_token_index=298,
    )
    model = Gemma3ForConditionalGeneration(config).eval()
    crops = EncoderInput({"pixel_values": torch.zeros(3, 3, 56, 56)}, "an image and two crops")
    with torch.no_grad():
        out = family_named("gemma3").encode(model, crops, 2)
    assert [tuple(t.shape) for t in out] == [(3 * 4, 32), (3 * 4, 32)]


def test_the_command_line_plans_pan_and_scan_and_refuses_a_bad_value(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--model", "google/gemma-3-4b-it", "--gpu", "H200", "--estimate", "formula", "--mm-processor-kwargs", '{"do_pan_and_scan": true}', "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "1280 embeddings per image = (4 crops + the whole image) x 256" in out
    code = main(["plan", "--model", "google/gemma-3-4b-it", "--estimate", "formula", "--mm-processor-kwargs", '{"pan_and_scan_max_num_crops": 0}'])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "pan_and_scan_max_num_crops" in err


# --- InternVL -----------------------------------------------------------------------------------------------


def internvl_without_video() -> dict[str, Any]:
    """InternVL3-8B's config with an LLM type that has no video context token (vLLM then builds no video processor,
    as the reference's rows with `tokenizer_has_video_token` false do); the tiling fields are the published ones."""
    config = copy.deepcopy(INTERNVL)
    config["llm_config"]["model_type"] = "llama"
    return config


def internvl_image_tokens(config: dict[str, Any], kwargs: dict[str, Any]) -> int:
    family = family_named("internvl_chat")
    files = family.with_processor_kwargs(config, {}, kwargs) if kwargs else {}
    spec = spec_from_files(config, "internvl", None, files.get("processor_config.json"))
    return next(m.max_tokens_per_item for m in spec.modalities if m.name == "image")


INTERNVL_IMAGE_ONLY = [r for r in REFERENCE["internvl"] if not r["tokenizer_has_video_token"]]
# vLLM takes these without failing but reads them oddly: max_dynamic_patch 0 becomes one tile through the thumbnail
# rule, and the string "false" counts as true; capacity refuses them rather than plan a misread setting
CAPACITY_REFUSES_TOO = ({"max_dynamic_patch": 0}, {"dynamic_image_size": "false"})


@pytest.mark.parametrize("row", [r for r in INTERNVL_IMAGE_ONLY if "error" not in r and r["mm_processor_kwargs"] not in CAPACITY_REFUSES_TOO], ids=label)
def test_internvl_image_tokens_equal_vllms_own_methods(row: dict[str, Any]) -> None:
    assert internvl_image_tokens(internvl_without_video(), row["mm_processor_kwargs"]) == row["max_image_tokens"]


@pytest.mark.parametrize("row", [r for r in INTERNVL_IMAGE_ONLY if "error" in r or r["mm_processor_kwargs"] in CAPACITY_REFUSES_TOO], ids=label)
def test_internvl_settings_vllm_fails_on_are_refused(row: dict[str, Any]) -> None:
    with pytest.raises(BadInput) as refused:
        internvl_image_tokens(internvl_without_video(), row["mm_processor_kwargs"])
    assert "\n" not in str(refused.value)


def test_internvl_worked_by_hand() -> None:
    # max_dynamic_patch 6 with the thumbnail: vLLM's candidate grids reach 6 + 1 = 7 tiles (resolve_internvl_min_max_num),
    # the 7 x 1 image (3,136 x 448) is cut on the closest grid of at most 6 tiles, 6 x 1, plus the thumbnail: 7 tiles x
    # (448 / 14)^2 x 0.5^2 = 7 x 256 = 1,792 tokens; InternViT runs 7 x 1,025 positions.
    config = internvl_without_video()
    assert internvl_image_tokens(config, {"max_dynamic_patch": 6}) == 1_792
    files = family_named("internvl_chat").with_processor_kwargs(config, {}, {"max_dynamic_patch": 6})
    spec = spec_from_files(config, "internvl", None, files["processor_config.json"])
    assert spec.encoder_positions("image", 1_792) == 7 * 1_025
    assert any('--mm-processor-kwargs {"max_dynamic_patch": 6} applied' in note for note in spec.notes)


@pytest.mark.parametrize("row", [r for r in REFERENCE["internvl"] if r["tokenizer_has_video_token"] and r["mm_processor_kwargs"]], ids=label)
def test_internvl3_with_its_video_processor_fails_in_vllm_and_is_refused(row: dict[str, Any]) -> None:
    # InternVL3-8B's Qwen2 tokenizer has <|video_pad|>: vLLM builds InternVLChatVideoProcessor with the merged kwargs,
    # and its __init__ takes only image_size (an unknown key already fails the image processor)
    assert row["error"] == "TypeError" and "unexpected keyword argument" in row["message"]
    with pytest.raises(BadInput) as refused:
        plan_for("OpenGVLab/InternVL3-8B", ServingArgs(mm_processor_kwargs=row["mm_processor_kwargs"]), "H200")
    assert "\n" not in str(refused.value) and "fails at startup" in str(refused.value)


def test_internvl3_without_kwargs_is_vllms_default() -> None:
    row = next(r for r in REFERENCE["internvl"] if r["tokenizer_has_video_token"] and not r["mm_processor_kwargs"])
    assert image_tokens("OpenGVLab/InternVL3-8B", None) == row["max_image_tokens"] == 3_328


@pytest.mark.parametrize("seq_len", [16_384, 32_768])
def test_internvl3_video_frames_equal_vllms_get_num_frames_with_most_features(seq_len: int) -> None:
    # vLLM: (seq_len - max image tokens x images) // 256 frames of one 256-token tile (the video processor's tiling is one
    # tile per frame whatever the image kwargs); with images off, the sequence holds seq_len // 256 frames
    row = next(r for r in REFERENCE["internvl"] if r["tokenizer_has_video_token"] and not r["mm_processor_kwargs"])
    frames = {(f["seq_len"], "image" in f["mm_counts"]): f["frames"] for f in row["num_frames_with_most_features"]}
    both = plan_for("OpenGVLab/InternVL3-8B", ServingArgs(max_model_len=seq_len), "H200").budget.max_tokens_per_item
    video_only = plan_for("OpenGVLab/InternVL3-8B", ServingArgs(max_model_len=seq_len, limit_mm_per_prompt={"image": 0}), "H200").budget.max_tokens_per_item
    assert both["video"] == frames[(seq_len, True)] * 256
    assert video_only["video"] == frames[(seq_len, False)] * 256
