"""--mm-processor-kwargs: the Qwen-VL size keys change the profiled item as vLLM 0.33's Qwen2VLProcessingInfo does;
every other key is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.cli.app import main
from capacity.errors import BadInput
from capacity.model.items.qwen_vl import qwen_vl_max_image_grid
from capacity.model.processor_kwargs import parse_mm_processor_kwargs, qwen_vl_size
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs, load_serve_yaml
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")


def tokens(model: str, kwargs: dict | None) -> dict[str, int]:
    plan = plan_for(model, ServingArgs(mm_processor_kwargs=kwargs), "L40S")
    return dict(plan.budget.max_tokens_per_item)


def test_qwen2_5_vl_max_pixels_sets_the_image_and_the_video_frames() -> None:
    # 1,003,520 px // (patch 14 x merge 2 = 28)^2 = 1,280 cells; isqrt(1,280) = 35 and the largest divisor of 1,280 at
    # most 35 is 32: 32 x 40 cells = an 896 x 1120 image, kept by smart_resize (896 x 1120 = 1,003,520 <= max_pixels).
    # The video's frame pairs take that image size (Qwen2VLProcessingInfo.get_max_video_tokens): 1,280 per pair.
    plan = plan_for("Qwen/Qwen2.5-VL-7B-Instruct", ServingArgs(mm_processor_kwargs={"max_pixels": 1_003_520}), "L40S")
    video = next(m for m in plan.spec.modalities if m.name == "video")
    assert plan.budget.max_tokens_per_item["image"] == 1_280
    assert video.frame_pair_tokens == 1_280
    # the published default is 12,845,056 px // 28^2 = 16,384 = 128 x 128
    assert tokens("Qwen/Qwen2.5-VL-7B-Instruct", None)["image"] == 16_384


def test_a_cell_count_without_a_good_factor_pair_steps_down_as_vllm_does() -> None:
    # 1,031 is prime: 1 x 1,031 cells exceeds the aspect ratio 200, so vLLM tries 1,030 = 10 x 103 (ratio 10.3)
    assert qwen_vl_max_image_grid(3_136, 1_031 * 28 * 28, 14, 2) == (10, 103)
    assert tokens("Qwen/Qwen2.5-VL-7B-Instruct", {"max_pixels": 1_031 * 28 * 28})["image"] == 1_030


def test_qwen3_vl_flat_max_pixels_reaches_the_video_processor_too() -> None:
    # image: 1,003,520 // 32^2 = 980 cells; isqrt 31, largest divisor <= 31 is 28: 28 x 35 = 980 tokens.
    # video (qwen3_vl.py get_max_video_tokens; Qwen3VLProcessingInfo routes flat max_pixels to videos_kwargs):
    # longest_edge 1,003,520 // temporal 2 = 501,760 // 32^2 = 490 cells = 14 x 35 -> a 448 x 1120 frame; 2 frames x
    # 448 x 1120 = 1,003,520 <= max, kept; grid 1 x 28 x 70 = 1,960 patches // 2^2 = 490 tokens.
    assert tokens("Qwen/Qwen3-VL-4B-Instruct", {"max_pixels": 1_003_520}) == {"image": 980, "video": 490}


def test_size_updates_the_edges_and_max_pixels_wins_over_it() -> None:
    # _get_vision_size: size.update(kwargs["size"]), then min_pixels / max_pixels override the edges
    default = {"shortest_edge": 3_136, "longest_edge": 12_845_056}
    assert qwen_vl_size({"size": {"longest_edge": 602_112}}, default, "Qwen2.5-VL") == {"shortest_edge": 3_136, "longest_edge": 602_112}
    assert qwen_vl_size({"size": {"longest_edge": 602_112}, "max_pixels": 1_003_520}, default, "Qwen2.5-VL")["longest_edge"] == 1_003_520
    # 602,112 // 28^2 = 768 = 24 x 32
    assert tokens("Qwen/Qwen2.5-VL-7B-Instruct", {"size": {"longest_edge": 602_112}})["image"] == 768


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"fps": 2}, "fps: not modelled for Qwen2.5-VL"),
        ({"images_kwargs": {"max_pixels": 1_003_520}}, "give the size keys flat"),
        ({"max_pixels": 0}, "not a positive integer"),
        ({"min_pixels": 2_000_000, "max_pixels": 1_003_520}, "exceed max pixels"),
        ({"size": {"height": 448}}, "takes size as"),
    ],
)
def test_what_is_not_modelled_is_refused(kwargs: dict, needle: str) -> None:
    with pytest.raises(BadInput, match=needle):
        plan_for("Qwen/Qwen2.5-VL-7B-Instruct", ServingArgs(mm_processor_kwargs=kwargs), "L40S")


def test_other_families_refuse_any_key() -> None:  # mllama: no --mm-processor-kwargs rule
    with pytest.raises(BadInput, match="not modelled for the mllama family"):
        plan_for("meta-llama/Llama-3.2-11B-Vision-Instruct", ServingArgs(mm_processor_kwargs={"do_pan_and_scan": True}), "L40S")


def test_the_command_line_and_the_serve_yaml_take_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["plan", "--model", "Qwen/Qwen3-VL-4B-Instruct", "--gpu", "L40S", "--max-model-len", "32768", "--estimate", "formula", "--mm-processor-kwargs", '{"max_pixels": 1003520}', "--json", "-"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert '"max_pixels":1003520' in out.replace(" ", "").replace("\\", "")  # the suggested `vllm serve` line carries it
    serve = tmp_path / "serve.yaml"
    serve.write_text("model: Qwen/Qwen3-VL-4B-Instruct\nmm_processor_kwargs:\n  max_pixels: 1003520\n")
    values, model, ignored = load_serve_yaml(serve)
    assert values["mm_processor_kwargs"] == {"max_pixels": 1_003_520} and not ignored
    code = main(["plan", "--model", "Qwen/Qwen3-VL-4B-Instruct", "--estimate", "formula", "--mm-processor-kwargs", "max_pixels=5"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "not valid JSON" in err


def test_parse_takes_a_mapping_or_json() -> None:
    assert parse_mm_processor_kwargs('{"max_pixels": 5}', "x") == {"max_pixels": 5}
    with pytest.raises(BadInput, match="must be an object"):
        parse_mm_processor_kwargs("[1, 2]", "x")


REFERENCE = REPO_ROOT / "bench/results/vllm-qwen-vl-sizes-reference-2026-12-01/reference.json"


@pytest.mark.parametrize("case", json.loads(REFERENCE.read_text())["cases"], ids=lambda c: f"{c['model']}-{c['mm_processor_kwargs']}")
def test_token_counts_equal_vllms_own_methods(case: dict) -> None:
    # bench/vllm_qwen_vl_sizes_reference.py: vLLM 0.33.0's get_max_image_tokens / get_max_video_tokens under
    # MultiModalConfig(mm_processor_kwargs=...), merged and routed by vLLM's own get_merged_mm_kwargs
    counted = tokens(case["model"], case["mm_processor_kwargs"] or None)
    assert counted["image"] == case["max_image_tokens"]
    if "max_video_tokens" in case:
        assert counted["video"] == case["max_video_tokens"]


def test_gemma4_max_soft_tokens_sets_the_image_budget_and_its_patches() -> None:
    # vLLM gemma4_mm.py get_mm_max_tokens_per_item: a configured max_soft_tokens in _SUPPORTED_SOFT_TOKENS replaces
    # vision_config.default_output_length (280). The encoder's padded patch budget is 1,120 x pooling 3^2 = 10,080.
    # vLLM's 224 x 224 dummy image, resized for 1,120 soft tokens: scale sqrt(1,120 x 9 / (14 x 14)) = 7.171;
    # 224 x 7.171 = 1,606.3 // 48 = 33 -> 1,584 px = 99 patches a side, 9,801 // 9 = 1,089 embeddings.
    plan = plan_for("google/gemma-4-26B-A4B", ServingArgs(mm_processor_kwargs={"max_soft_tokens": 1120}, limit_mm_per_prompt={"video": 0}), "H200")
    image = next(m for m in plan.spec.modalities if m.name == "image")
    assert (image.max_tokens_per_item, image.encoder_positions, image.dummy_output_tokens) == (1_120, 10_080, 1_089)
    # scoped in images_kwargs it reads the same (vLLM's _get_max_soft_tokens); video frames keep 70 each: 32 x 78
    scoped = plan_for("google/gemma-4-26B-A4B", ServingArgs(mm_processor_kwargs={"images_kwargs": {"max_soft_tokens": 70}}), "H200")
    assert dict(scoped.budget.max_tokens_per_item) == {"image": 70, "video": 2_496}


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_soft_tokens": 300}, "takes 70, 140, 280, 560, 1120"),
        ({"max_soft_tokens": True}, "takes 70, 140, 280, 560, 1120"),
        ({"do_pan_and_scan": True}, "do_pan_and_scan: not modelled for Gemma-4"),
        ({"images_kwargs": {"max_soft_tokens": 70, "size": 3}}, "images_kwargs.size: not modelled"),
    ],
)
def test_gemma4_refuses_what_vllm_refuses_or_capacity_does_not_model(kwargs: dict, needle: str) -> None:
    with pytest.raises(BadInput, match=needle):
        plan_for("google/gemma-4-26B-A4B", ServingArgs(mm_processor_kwargs=kwargs), "H200")
