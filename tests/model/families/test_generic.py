"""The generic family: multimodal decoders transformers builds, with no dedicated family."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from capacity.errors import BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.model.registry import family_for, model_spec, spec_from_files
from capacity.planning.kv_groups import kv_groups_for
from capacity.serving.config import ServingArgs, resolve_serving
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

ROOT = REPO_ROOT
CATALOG = ROOT / "capacity" / "source" / "catalog" / "models"


def published(name: str) -> dict[str, Any]:
    """A published config.json of the catalog (source and sha256: capacity/source/catalog/README.md)."""
    data: dict[str, Any] = json.loads((CATALOG / name / "config.json").read_text())
    return data


def default_config(model_type: str, architecture: str) -> dict[str, Any]:
    """transformers' default config of the class (not a checkpoint), as a plain dict."""
    from transformers import CONFIG_MAPPING

    config: dict[str, Any] = json.loads(json.dumps(CONFIG_MAPPING[model_type]().to_dict(), default=str))
    config["architectures"] = [architecture]
    config["model_type"] = model_type
    return config


def pages(spec: Any) -> list[tuple[str, int, int]]:
    serving = resolve_serving(ServingArgs(), spec, gpu_by_name("H200"))
    return [(g.kind, g.num_layers, g.page_size_bytes) for g in kv_groups_for(spec, serving, gpu_by_name("H200"))]


def test_llava_default_config_plans_by_the_image_formula():
    spec = spec_from_files(default_config("llava", "LlavaForConditionalGeneration"), "llava")
    assert spec.family.name == "llava"  # the generic family's rules, with the tower vLLM allocates (families/llava.py)
    # CLIP-L/14 at 336 px: (336 // 14)^2 = 576 patch features (vLLM llava.py get_max_image_tokens: 576)
    assert [(m.name, m.max_tokens_per_item) for m in spec.modalities] == [("image", 576)]
    assert "fallback formula" in spec.notes[0] and "no preprocessor_config.json" in spec.notes[0]
    # Llama-2-7B text: 32 layers, 32 KV heads x 128, bf16, block 16: 2 x 16 x 32 x 128 x 2 = 262,144 B per layer
    assert pages(spec) == [("full", 32, 262_144)]
    assert spec.vllm_support.status == "native"


def test_published_llava_counts_image_tokens_with_its_processor():
    """llava-hf/llava-1.5-7b-hf with its published preprocessor and processor configs (the catalog's)."""
    from capacity.source.resolve import resolve_model

    source = resolve_model("llava-hf/llava-1.5-7b-hf")
    spec = model_spec(source)
    # CLIP crop 336 / patch 14: 576 patches + 1 CLS (num_additional_image_tokens), the 'default' strategy drops
    # the CLS: 576 (vLLM llava.py get_max_image_tokens: 576)
    assert [(m.name, m.max_tokens_per_item) for m in spec.modalities] == [("image", 576)]
    assert "processor: LlavaProcessor._get_num_multimodal_tokens" in spec.notes[0]
    assert "preprocessor_config.json + processor_config.json" in spec.notes[0]


def test_qwen2_vl_image_tokens_by_vllms_rule():
    """The published Qwen2-VL preprocessor settings (max_pixels 12,845,056, 14 px patches merged 2 x 2)."""
    preprocessor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "min_pixels": 3136,
        "max_pixels": 12845056,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
    }
    spec = spec_from_files(default_config("qwen2_vl", "Qwen2VLForConditionalGeneration"), "qwen2-vl", preprocessor)
    # sqrt(12,845,056) = 3584 px = 128 x 28 px: 128 x 128 = 16,384 merged tokens (vLLM qwen2_vl get_max_image_tokens)
    assert [(m.name, m.max_tokens_per_item) for m in spec.modalities] == [("image", 16_384), ("video", 16_384)]
    # its config's video_token_id: vLLM's Qwen2-VL video is frames at that largest image size, 2 frames per 16,384 tokens
    assert (spec.modalities[1].frame_pair_tokens, spec.modalities[1].max_frames) == (16_384, 14)
    assert "vLLM rule: Qwen2VLProcessingInfo.get_max_image_tokens: 128 x 128" in spec.notes[0]


def test_voxtral_published_config_counts_audio_through_the_model():
    """The voxtral family is the generic one plus vLLM's own item size (one file: capacity/model/families/voxtral.py)."""
    spec = spec_from_files(published("mistralai--Voxtral-Mini-3B-2507"), "mistralai/Voxtral-Mini-3B-2507")
    assert spec.family.name == "voxtral"
    # one 30 s chunk: 30 s x 16 kHz / hop 160 = 3000 mel frames -> conv stride 2: 1500 positions -> the projector
    # joins 4 frames (audio intermediate_size 5120 / hidden 1280): 375 embeddings
    assert [(m.name, m.max_tokens_per_item, m.supported_limit) for m in spec.modalities] == [("audio", 375, 5)]
    assert "model:" in spec.notes[0]
    # vLLM voxtral.py: get_max_audio_tokens = max_model_len; get_supported_mm_limits = 5 audios
    from capacity.serving.encoder_budget import build_budget

    serving = resolve_serving(ServingArgs(max_model_len=8192), spec, gpu_by_name("H200"))
    budget = build_budget(spec, serving, enable_cache=False)
    assert (budget.max_tokens_per_item, budget.allowed_limits) == ({"audio": 8192}, {"audio": 5})
    # the encoder runs 1500 positions per 375-token chunk: 8192 tokens -> 1500 x 8192 // 375 = 32,768 positions
    assert spec.encoder is not None and spec.encoder.seq_len_for(8192) == 32_768
    # text: 30 layers, 8 KV heads x 128: 2 x 16 x 8 x 128 x 2 = 65,536 B per layer
    assert pages(spec) == [("full", 30, 65_536)]
    assert spec.encoder is not None and (spec.encoder.seq_len, spec.encoder.output_hidden_size) == (1500, 3072)
    assert spec.derived_max_model_len == 131_072


def _without_conv_dim(config: dict) -> dict:
    return {**config, "text_config": {k: v for k, v in config["text_config"].items() if k != "conv_dim"}}


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (lambda: published("Qwen--Qwen3.5-27B"), "resizes images by size.longest_edge"),
        # LFM2's conv layers read conv_dim, which transformers' Lfm2Config has no default for (vLLM needs it too)
        (lambda: _without_conv_dim(published("LiquidAI--LFM2.5-VL-1.6B")), "needs a positive 'conv_dim'"),
        (lambda: default_config("gemma3n", "Gemma3nForConditionalGeneration"), "vision_config lacks image_size / patch_size"),
        (lambda: published("Qwen--Qwen3-VL-32B-Instruct"), "resizes images by size.longest_edge"),
        # (llava_next, refused here before for its image_grid_pinpoints, is planned by its own family: test_llava_next.py)
        (lambda: default_config("llava_onevision", "LlavaOnevisionForConditionalGeneration"), "tiles or caps images by image_grid_pinpoints"),
    ],
    ids=["qwen3.5-no-preprocessor", "lfm2.5-conv-without-conv-dim", "gemma3n-no-image-size", "qwen3-vl-no-preprocessor", "llava-onevision-no-preprocessor"],
)
def test_what_it_cannot_read_is_refused_in_one_line(config, field):
    """Refused when the spec is read, or (image tokens that need the image processor's settings) when it is planned
    with vLLM's default limits, which budget images (test_generic_language_model_only.py: not at image=0)."""
    from capacity.gpu.catalog import gpu_by_name
    from capacity.serving.config import ServingArgs, resolve_serving

    with pytest.raises(BadInput, match=field.replace("(", r"\(").replace("[", r"\[")) as exc:
        resolve_serving(ServingArgs(), spec_from_files(config(), "x"), gpu_by_name("H200"))
    assert "\n" not in str(exc.value)


def test_claims_multimodal_configs_before_the_plain_decoder_fallback():
    config = {**default_config("llava", "LlavaForConditionalGeneration"), "model_type": "an_unlisted_vlm"}  # no family lists it
    assert family_for(config).name == "generic"
    text_only = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}
    assert family_for(text_only).name == "decoder_only"
    with pytest.raises(BadInput, match="is_encoder_decoder is true"):
        spec_from_files({**config, "is_encoder_decoder": True}, "x")


def tiny_qwen2_audio() -> dict[str, Any]:
    config = default_config("qwen2_audio", "Qwen2AudioForConditionalGeneration")
    text = {k: v for k, v in config["text_config"].items() if k != "layer_types"}
    text.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
    config["text_config"] = text
    config["audio_config"].update(d_model=64, encoder_ffn_dim=128, encoder_layers=2, encoder_attention_heads=4)
    return config


def test_fake_trace_runs_the_models_own_audio_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(tiny_qwen2_audio()))
    out = subprocess.run(
        [sys.executable, "-m", "capacity.cli", "plan", "--model", str(tmp_path), "--gpu", "H200", "--offline", "--dtype", "bfloat16",
         "--max-num-batched-tokens", "8192", "--json"],
        capture_output=True, text=True, cwd=ROOT, env={"CAPACITY_ESTIMATE": "trace", "PATH": "/usr/bin:/bin"}, check=False,
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["budget"]["max_tokens_per_item"] == {"audio": 750}  # 3000 frames -> 1500 -> avg-pool 2 -> 750 (vLLM qwen2_audio: 750)
    cache = plan["memory"]["encoder_cache"]
    # 8192 // 750 = 10 items held through the decoder pass, 750 x 64 wide in bf16: 10 x 750 x 64 x 2
    assert cache["bytes"] == 960_000
    # the trace holds the same bytes as the budget's formula: exact on both paths (issue 24, "one story")
    assert cache["kind"] == "exact" and cache["method"].endswith("(the fake-tensor trace holds the same bytes)")
    assert all(term["method"].startswith("generic: ") for key, term in plan["memory"].items() if isinstance(term, dict) and "method" in term)


# --- videos: counted for the Qwen2-VL / Qwen3-VL / GLM-4.1V rules, else refused unless --limit-mm-per-prompt video=0


def folder_copy(tmp_path: Path, entry: str, drop: tuple[str, ...] = ()) -> Path:
    """A catalog entry's published files in a plain folder (no catalog flag), less the files named in `drop`."""
    folder = tmp_path / entry
    folder.mkdir()
    for path in (CATALOG / entry).iterdir():
        if path.name not in drop:
            (folder / path.name).write_bytes(path.read_bytes())
    return folder


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capacity.cli", *args], capture_output=True, text=True, timeout=300, cwd=ROOT)


# GLM-4.1V-9B-Thinking (glm4_1v.py Glm4vProcessingInfo; processor_class Glm4vProcessor, so get_mm_max_tokens_per_item
# returns None and vLLM counts the embeddings of its dummy inputs). Patch 14 x merge 2: factor 28, 4 patches a token.
# Image (get_image_size_with_most_features): smart_resize of 9,999,999^2 at 2 frames (num_frames 1 raised to the
# temporal patch 2) within the preprocessor's size.longest_edge 9,633,792 pixels: side = floor(sqrt(9,633,792 / 2)
# = 2,194.7 / 28 = 78.4) x 28 = 2,184; get_num_image_tokens(2,184^2): 2 x 2,184^2 = 9,539,712 fits, 1 x 156 x 156
# = 24,336 patches / 4 = 6,084 tokens.
# Video (get_num_frames_with_most_features -> _get_max_video_frames): n frames at 2,184^2 resized within the video
# size.longest_edge 47,040,000; t_bar = round(n / 2) x 2 (half to even), 2,184^2 = 4,769,856, so t_bar <= 8 keeps
# 2,184 and larger t_bar shrinks the side to floor(sqrt(47,040,000 / n) / 28) x 28; tokens = ceil(n / 2) x cells^2:
#   n 1-8: ceil(n/2) x 6,084 <= 24,336      n 9: t_bar 8, 5 x 6,084 = 30,420      n 10: 5 x 77^2 = 29,645
#   n 11: 6 x 73^2 = 31,974 (2,044 px)       n 12: 6 x 70^2 = 29,400               n 13: 7 x 67^2 = 31,423
#   n 14: 7 x 65^2 = 29,575                  n 15: 8 x 63^2 = 31,752
#   n >= 16: at most ceil(n/2) / n x 47,040,000 / 28^2 = ceil(n/2) / n x 60,000 <= 9/17 x 60,000 = 31,764.
# So the largest video is 11 frames at 2,044^2: 31,974 tokens (the dummy video holds max(n, 2) frames; the timestamp
# and begin/end tokens of its placeholder are not embeddings: get_num_embeds counts the image_token_id positions).


def test_glm4v_video_tokens_follow_vllm_frame_rule_at_max_model_len_65536():
    """At max_model_len 65,536 the budget's video (beside one 6,084-token image: 59,452 left) and the profiled video
    (mm_counts {video: 1}) are both the 11-frame 31,974-token video, above the image: it is profiled."""
    from capacity.planning.planner import plan_for

    budget = plan_for("zai-org/GLM-4.1V-9B-Thinking", ServingArgs(max_model_len=65_536), "H200").to_dict()["budget"]
    assert budget["max_tokens_per_item"] == {"image": 6_084, "video": 31_974}
    assert budget["modality_with_max_tokens"] == "video" and budget["profile_item_tokens"] == 31_974
    assert budget["allowed_limits"]["video"] == 1  # get_supported_mm_limits: {"image": None, "video": 1}


def test_glm4v_video_at_a_short_max_model_len():
    """At 16,384: beside an image 10,300 tokens are left; 1-2 frames (6,084) fit, 3-8 frames need >= 12,168, and
    shrunk frames (n >= 9, s = sqrt(60,000 / n) cells a side) hold >= n/2 x (s - 1)^2 >= 30,000 - sqrt(60,000 x 600)
    = 24,000: the video is 6,084 (a tie with the image, broken by the name: video). The profiled video has the whole
    16,384: 3-4 frames, 2 x 6,084 = 12,168 (5-6 frames need 18,252)."""
    from capacity.planning.planner import plan_for

    budget = plan_for("zai-org/GLM-4.1V-9B-Thinking", ServingArgs(max_model_len=16_384), "H200").to_dict()["budget"]
    assert budget["max_tokens_per_item"] == {"image": 6_084, "video": 6_084}
    assert budget["modality_with_max_tokens"] == "video" and budget["profile_item_tokens"] == 12_168


def test_glm4v_catalog_entry_plans_with_formulas_and_a_folder_copy_plans_too(tmp_path):
    out = run_cli("plan", "--model", "zai-org/GLM-4.1V-9B-Thinking", "--gpu", "H200", "--estimate", "formula", "--json")
    assert out.returncode == 0, out.stderr[-500:]
    plan = json.loads(out.stdout)
    # default max_model_len 32,768: the profiled video (no image beside it) is again the 31,974-token one (<= 32,768);
    # the budget's video (<= 32,768 - 6,084 = 26,684) is at least 8 frames' 24,336.
    assert plan["budget"]["profile_item_tokens"] == 31_974
    assert 24_336 <= plan["budget"]["max_tokens_per_item"]["video"] <= 26_684
    # encoder cache: 1 item x 31,974 tokens x out_hidden_size 4,096 x 2 B (bf16)
    assert plan["memory"]["encoder_cache"]["bytes"] == 31_974 * 4_096 * 2
    folder = folder_copy(tmp_path, "zai-org--GLM-4.1V-9B-Thinking")
    images_only = run_cli("plan", "--model", str(folder), "--gpu", "H200", "--limit-mm-per-prompt", "video=0", "--json")
    assert images_only.returncode == 0, images_only.stderr[-500:]
    budget = json.loads(images_only.stdout)["budget"]
    assert budget["max_tokens_per_item"] == {"image": 6_084} and budget["allowed_limits"]["video"] == 0


def test_glm4v_with_another_processor_class_is_refused(tmp_path):
    """Without processor_class Glm4vProcessor vLLM counts timestamp tokens with the tokenizer: not modelled, refused."""
    folder = folder_copy(tmp_path, "zai-org--GLM-4.1V-9B-Thinking")
    for name in ("preprocessor_config.json", "video_preprocessor_config.json"):
        data = json.loads((folder / name).read_text())
        data["processor_class"] = "Glm46VProcessor"
        (folder / name).write_text(json.dumps(data))
    out = run_cli("plan", "--model", str(folder), "--gpu", "H200", "--json")
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    error = [line for line in out.stderr.splitlines() if line.startswith("capacity: error:")]
    assert len(error) == 1 and "processor_class 'Glm46VProcessor'" in error[0] and "--limit-mm-per-prompt video=0" in error[0]


def test_qwen3_vl_without_its_video_preprocessor_config_is_refused(tmp_path):
    """Qwen3-VL's video size lives in video_preprocessor_config.json: without it the video is not counted."""
    from capacity.planning.planner import plan_for

    folder = folder_copy(tmp_path, "Qwen--Qwen3-VL-4B-Instruct", drop=("video_preprocessor_config.json",))
    with pytest.raises(BadInput, match=r"no video_preprocessor_config.json.*--limit-mm-per-prompt video=0"):
        plan_for(str(folder), ServingArgs(), "H200")
    plan = plan_for(str(folder), ServingArgs(limit_mm_per_prompt={"video": 0}), "H200").to_dict()
    assert plan["budget"]["max_tokens_per_item"] == {"image": 16_384}


def test_qwen2_vl_video_is_the_profiled_item_at_its_max_model_len():
    """allenai/olmOCR-7B-0225-preview (Qwen2-VL, video_token_id in its config) at its max_model_len 32,768.

    qwen2_vl.py get_max_video_tokens: frames at the largest image (16,384 tokens per 2 frames, temporal patch 2);
    _get_max_video_frames(32,768) grows from 1 frame while the tokens fit: 4 frames = ceil(4 / 2) x 16,384 = 32,768
    fit, 5 frames = 3 x 16,384 = 49,152 do not; min(4, 14 per video) = 4 frames: 32,768 tokens, above the image's."""
    from capacity.planning.planner import plan_for

    budget = plan_for("allenai/olmOCR-7B-0225-preview", ServingArgs(), "H200").to_dict()["budget"]
    assert budget["max_tokens_per_item"] == {"image": 16_384, "video": 32_768}
    assert budget["modality_with_max_tokens"] == "video"
    images_only = plan_for("allenai/olmOCR-7B-0225-preview", ServingArgs(limit_mm_per_prompt={"video": 0}), "H200").to_dict()["budget"]
    assert images_only["max_tokens_per_item"] == {"image": 16_384}
    # the profiled item is that video: 2 frame pairs of the largest image's 256 x 256 patches (3,584 px), video_grid_thw
    torch = pytest.importorskip("torch")
    from capacity.source.resolve import resolve_model

    source = resolve_model("allenai/olmOCR-7B-0225-preview")
    spec = model_spec(source)
    item = spec.family.encoder_input(spec, source, "meta", torch.bfloat16, 32_768)
    assert item.host == {"video_grid_thw": [2, 256, 256]} and tuple(item.tensors["pixel_values_videos"].shape) == (131_072, 3 * 2 * 14 * 14)
    # the encoder formula runs 2 frame pairs of 128 x 128 merged cells = 2 x 65,536 patches
    assert spec.encoder is not None and spec.encoder.seq_len_for(32_768) == 131_072


def test_the_video_guard_leaves_a_model_without_videos_alone():
    """Voxtral's item is max_model_len tokens, which no per-item figure of its spec equals: no video, so it is encoded."""
    import torch

    from capacity.source.resolve import resolve_model

    source = resolve_model("mistralai/Voxtral-Mini-3B-2507")
    spec = model_spec(source)
    item = spec.family.encoder_input(spec, source, "cpu", torch.float32, spec.derived_max_model_len)
    assert "input_features" in item.tensors


def test_the_processor_class_named_in_preprocessor_config_is_the_one_built():
    # vLLM (get_processor_cls_name_from_config) reads processor_class from processor_config.json, else from
    # preprocessor_config.json, before falling back to the model_type's mapping (LlavaProcessor for llava)
    from capacity.model.items.hf_processor import headless_processor

    config = {"model_type": "llava", "vision_config": {}}
    assert type(headless_processor(config, config, None, None, {"processor_class": "LlavaNextProcessor"})).__name__ == "LlavaNextProcessor"
    assert type(headless_processor(config, config, None, None, None)).__name__ == "LlavaProcessor"
