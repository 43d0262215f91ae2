"""InternVL (model_type internvl_chat, remote code): planned from vLLM 0.33's internvl.py / intern_vit.py.

Every expected value is worked out by hand below from OpenGVLab/InternVL3-8B's published config.json (the catalog's):
InternViT-300M (hidden 1024, 24 layers, FFN 4096, 16 heads, patch 14, image 448, qkv_bias, layer_norm, no qk-norm),
downsample_ratio 0.5, max_dynamic_patch 12, use_thumbnail, and a Qwen2 LLM (hidden 3584, 28 layers, 28 heads, 4 KV
heads, FFN 18944, vocabulary 151,674, max_position_embeddings 32768, rope_scaling dynamic x 2, untied head).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Any

import pytest

from capacity.errors import BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.memory.activations import activation_estimate
from capacity.memory.weights import weights_term
from capacity.model.registry import spec_from_files
from capacity.model.spec import rope_scaling_factor
from capacity.planning.kv_groups import kv_groups_for
from capacity.planning.planner import build_plan
from capacity.planning.sweep import SweepAxes, run_sweep
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.serving.encoder_budget import build_budget
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

ROOT = REPO_ROOT
NAME = "OpenGVLab/InternVL3-8B"

# --- hand arithmetic ----------------------------------------------------------------------------------
D, FFN, VIT_LAYERS, PATCH, CHANNELS = 1024, 4096, 24, 14, 3
POSITIONS = (448 // 14) ** 2 + 1  # 1025: 32 x 32 patches + the class token
VIT_EMBEDDINGS = D + (D * CHANNELS * PATCH * PATCH + D) + POSITIONS * D  # class + patch conv (w, b) + positions
VIT_LAYER = (3 * D * D + 3 * D) + (D * D + D) + (FFN * D + FFN) + (D * FFN + D) + 2 * 2 * D + 2 * D  # qkv, proj, fc1, fc2, 2 LayerNorms, ls1/ls2
MLP1 = 2 * (4 * D) + (4 * D * 3584 + 3584) + (3584 * 3584 + 3584)  # LayerNorm(4096), Linear(4096 -> 3584), Linear(3584 -> 3584)
# Qwen2.5-7B-Instruct's published index: total_size 15,231,233,024 B of bf16 = 7,615,616,512 parameters with a vocabulary of
# 152,064; InternVL3-8B's LLM is that shape with 151,674 rows in its embedding and its untied head.
LLM = 15_231_233_024 // 2 - 2 * (152_064 - 151_674) * 3584
PARAMETERS = VIT_EMBEDDINGS + VIT_LAYERS * VIT_LAYER + MLP1 + LLM


# `source` and `spec` of NAME: tests/conftest.py (module-scoped)


def plan_of(source: Any, spec: Any, gpu: str = "H200", **knobs: Any) -> Any:
    serving = resolve_serving(ServingArgs(**knobs), spec, gpu_by_name(gpu))
    return build_plan(source, spec, gpu_by_name(gpu), serving)


def test_hand_arithmetic_of_the_parts():
    assert VIT_EMBEDDINGS == 1_653_760
    assert VIT_LAYER == 12_598_272
    assert VIT_EMBEDDINGS + VIT_LAYERS * VIT_LAYER == 304_012_288  # "InternViT-300M"
    assert MLP1 == 27_540_480
    assert LLM == 7_612_820_992
    assert PARAMETERS == 7_944_373_760  # the Hub shows 7.94B params for InternVL3-8B


def test_internvl3_goes_to_its_family_with_vllms_image_tokens(spec):
    assert spec.family.name == "internvl_chat" and spec.architecture == "InternVLChatModel"
    assert spec.vllm_support.status == "native"
    # vLLM image_seq_length = int((448 // 14)^2 x 0.5^2) = 256 per tile; the most-features image is a 12-tile grid
    # (get_image_size_with_most_features over the target ratios) plus the thumbnail: 13 x 256 = 3,328
    image = {m.name: m for m in spec.modalities}["image"]
    assert image.max_tokens_per_item == 13 * 256 == 3328
    assert {m.name for m in spec.modalities} == {"image", "video"}  # a qwen2 LLM: vLLM's ctx_video_token is <|video_pad|>


def test_max_model_len_is_scaled_by_the_rope_factor_as_vllm_does(spec):
    assert spec.derived_max_model_len == 32768 * 2 == 65536  # llm_config max_position_embeddings x dynamic factor 2.0
    assert "RoPE factor 2" in spec.max_len_key


@pytest.mark.parametrize(
    ("text", "factor"),
    [
        ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, 2.0),
        ({"rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4}}, 4.0),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, 1.0),  # yarn: already scaled
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 1.0),
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}, 1.0),
        ({"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0}, "sliding_attention": {"rope_type": "default"}}}, 8.0),
        ({"rope_scaling": {"type": "dynamic", "factor": None}}, 1.0),  # null factor: vLLM falls back to 1.0
        ({}, 1.0),
    ],
)
def test_rope_scaling_factor_follows_vllms_rule(text, factor):
    assert rope_scaling_factor(text) == factor


def test_kv_page_from_llm_config(spec):
    serving = resolve_serving(ServingArgs(), spec, gpu_by_name("H200"))
    groups = kv_groups_for(spec, serving, gpu_by_name("H200"))
    # 2 (K, V) x block 16 x 4 KV heads x head 128 (3584 / 28) x 2 B = 32,768 B per layer, 28 layers in one group
    assert [(g.kind, g.num_layers, g.page_size_bytes) for g in groups] == [("full", 28, 32_768)]
    serving2 = resolve_serving(ServingArgs(tensor_parallel_size=2), spec, gpu_by_name("H200"))
    assert [g.page_size_bytes for g in kv_groups_for(spec, serving2, gpu_by_name("H200"))] == [16_384]  # 2 KV heads per rank


def test_weights_are_every_tensor_counted_by_hand(source, spec):
    serving = resolve_serving(ServingArgs(), spec, gpu_by_name("H200"))
    term, count, _ = weights_term(spec, source, serving)
    assert count == PARAMETERS
    # bf16, the embedding and the untied LM head padded to 151,680 rows (a multiple of 64): 2 x 6 x 3584 more elements
    assert term.bytes == PARAMETERS * 2 + 2 * (151_680 - 151_674) * 3584 * 2 == 15_888_833_536
    assert term.kind == "exact"


def test_weights_per_rank_at_tp2(source, spec):
    serving = resolve_serving(ServingArgs(tensor_parallel_size=2), spec, gpu_by_name("H200"))
    term, _, breakdown = weights_term(spec, source, serving)
    vit_layer = (3 * D * D + 3 * D) // 2 + (D * D // 2 + D) + (FFN * D + FFN) // 2 + (D * FFN // 2 + D) + 6 * D  # row biases, norms, ls whole
    h, kv, ffn = 3584, 512, 18944
    llm_layer = (h * h + h) // 2 + 2 * (kv * h + kv) // 2 + h * h // 2 + 3 * h * ffn // 2 + 2 * h  # 4 KV heads: 2 per rank
    llm = 28 * llm_layer + h + 2 * (151_680 // 2) * h  # final norm, embedding and head: 75,840 rows each
    per_rank = VIT_EMBEDDINGS + VIT_LAYERS * vit_layer + MLP1 + llm  # mlp1: plain nn.Linear in vLLM, whole on every rank
    assert term.bytes == per_rank * 2 == 7_974_011_904
    assert term.kind == "exact" and not breakdown.unclassified


def test_video_budget_takes_what_the_sequence_leaves_after_one_image(spec):
    serving = resolve_serving(ServingArgs(max_model_len=32768), spec, gpu_by_name("H200"))
    budget = build_budget(spec, serving)
    # get_num_frames_with_most_features with one image and one video: (32768 - 3328) // 256 = 115 frames of 256 tokens
    assert budget.max_tokens_per_item == {"image": 3328, "video": 115 * 256}
    assert budget.modality_with_max_tokens == "video"
    # the profiled item is built alone (mm_counts {video: 1}): 32768 // 256 = 128 frames
    assert budget.profile_tokens_per_item == 128 * 256 == 32768
    no_images = build_budget(spec, resolve_serving(ServingArgs(max_model_len=32768, limit_mm_per_prompt={"image": 0}), spec, gpu_by_name("H200")))
    assert no_images.max_tokens_per_item == {"video": 32768}
    images_only = build_budget(spec, resolve_serving(ServingArgs(max_model_len=32768, limit_mm_per_prompt={"video": 0}), spec, gpu_by_name("H200")))
    assert images_only.max_tokens_per_item == {"image": 3328} and images_only.profile_tokens_per_item == 3328


def test_encoder_terms_of_the_plan(source, spec):
    plan = plan_of(source, spec, max_model_len=32768)
    # 128 frames x 256 tokens x LLM width 3584 x 2 B held through the decoder pass
    assert plan.memory["encoder_cache"].bytes == 128 * 256 * 3584 * 2
    # formula: 128 tiles x 1025 positions x (2 x 1024 + max(4 x 1024, 2 x 4096)) x 2 B in InternViT
    assert activation_estimate(spec, plan.budget, plan.serving).encoder_bytes == 128 * POSITIONS * (2 * D + 2 * FFN) * 2
    images_only = plan_of(source, spec, max_model_len=32768, limit_mm_per_prompt={"video": 0})
    items = images_only.budget.profile_items
    assert items == max(1, images_only.serving.max_num_batched_tokens // 3328)
    assert activation_estimate(spec, images_only.budget, images_only.serving).encoder_bytes == items * 13 * POSITIONS * (2 * D + 2 * FFN) * 2


def without(config: dict[str, Any], *path: str) -> dict[str, Any]:
    out = copy.deepcopy(config)
    node = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return out


def with_value(config: dict[str, Any], value: Any, *path: str) -> dict[str, Any]:
    out = copy.deepcopy(config)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda c: without(c, "llm_config"), "llm_config"),
        (lambda c: with_value(c, 336, "force_image_size"), "force_image_size"),
        (lambda c: with_value(c, 0.3, "downsample_ratio"), "downsample_ratio"),
        (lambda c: without(c, "use_thumbnail"), "use_thumbnail"),
        (lambda c: with_value(c, "group_norm", "vision_config", "norm_type"), "norm_type"),
        (lambda c: with_value(c, True, "vision_config", "use_moe"), "use_moe"),
        (lambda c: with_value(c, -30, "select_layer"), "select_layer"),
        (lambda c: with_value(c, "internlm2", "llm_config", "model_type"), "llm_config.model_type"),
        (lambda c: with_value(c, {"quant_method": "awq", "bits": 4}, "quantization_config"), "quantization_config"),
    ],
)
def test_what_cannot_be_modelled_is_refused_naming_the_field(source, edit, named):
    with pytest.raises(BadInput, match=named.replace(".", r"\.")) as info:
        spec_from_files(edit(source.config), "edited")
    assert "\n" not in str(info.value)


def test_select_layer_drops_the_layers_vllm_does_not_build(source):
    config = with_value(source.config, -2, "select_layer")
    spec = spec_from_files(config, "select-2")
    serving = resolve_serving(ServingArgs(), spec, gpu_by_name("H200"))
    _, count, _ = weights_term(spec, type(source)(**{**source.__dict__, "config": config}), serving)
    assert count == PARAMETERS - VIT_LAYER  # 24 - 2 + 1 = 23 layers built
    assert spec.encoder.num_layers == 23


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capacity.cli", *args], capture_output=True, text=True, cwd=ROOT, check=False)


def test_cli_plan_default_path_l40s_tp2():
    out = run_cli("plan", "--model", NAME, "--gpu", "L40S", "-tp", "2", "--max-model-len", "32768", "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["memory"]["weights"]["bytes"] == 7_974_011_904
    assert plan["budget"]["max_tokens_per_item"] == {"image": 3328, "video": 29440}
    assert plan["kv_cache"]["groups"][0]["page_size_bytes"] == 16_384
    assert plan["verdict"] == "fits"


def test_sweep_plans_every_point_as_plan_does(source, spec):
    axes = SweepAxes(gpus=("L40S", "H200"), tensor_parallel_sizes=(1, 2), max_num_seqs=(64,), max_model_lens=(8192, 65536))
    result = run_sweep(NAME, ServingArgs(), axes)
    assert len(result.points) == 8 and all(p.verdict == "fits" for p in result.points)
    point = next(p for p in result.points if (p.gpu, p.tensor_parallel_size, p.max_model_len) == ("L40S", 2, 65536))
    plan = plan_of(source, spec, "L40S", tensor_parallel_size=2, max_num_seqs=64, max_model_len=65536)
    assert (point.num_blocks, point.weights_bytes) == (plan.kv.num_blocks, 7_974_011_904)
