"""MiniCPM-Llama3-V 2.5 (model_type minicpmv, remote code): planned from vLLM 0.33's MiniCPMV2_5 and the checkpoint's
image processor. Values worked out by hand from the catalog's published config.json (version 2.5, image_size 448,
query_num 96, Llama-3-8B text fields, vision_config idefics2: hidden 1152, 27 layers, FFN 4304, patch 14, image 980),
preprocessor_config.json (max_slice_nums 9, scale_resolution 448, image_feature_size 96) and safetensors index.
"""

from __future__ import annotations

import copy
import json

import pytest

from capacity.errors import BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.memory.activations import activation_estimate
from capacity.memory.weights import weights_term
from capacity.model.families.minicpmv import slicing
from capacity.model.registry import spec_from_files
from capacity.planning.kv_groups import kv_groups_for
from capacity.planning.planner import build_plan
from capacity.serving.config import ServingArgs, resolve_serving
from tests.support.paths import REPO_ROOT

NAME = "openbmb/MiniCPM-Llama3-V-2_5"
INDEX = REPO_ROOT / "capacity" / "source" / "catalog" / "models" / "openbmb--MiniCPM-Llama3-V-2_5" / "model.safetensors.index.json"

V, VF = 1152, 4304
VPM = (V * 3 * 14 * 14 + V) + (980 // 14) ** 2 * V + 27 * (4 * (V * V + V) + (VF * V + VF) + (V * VF + V) + 4 * V) + 2 * V
E = 4096
RESAMPLER = 96 * E + E * V + (3 * E * E + 3 * E) + (E * E + E) + 3 * 2 * E + E * E  # query, kv_proj, MHA in/out, 3 LNs, proj
LLAMA3_8B = 16_060_522_496 // 2  # Llama-3(.1)-8B-Instruct's published bf16 index: the same shapes (vocabulary 128,256)


# `source` and `spec` of NAME: tests/conftest.py (module-scoped)


def test_image_tokens_of_the_most_features_image(source, spec):
    # vLLM's most-features image is 448 x (448 x 9); its slice grid: ratio 9 -> candidates 8 and 9 slices, and 1 x 9
    # matches log(448 / 4032) exactly: (1 x 9 + 1) x 96 = 960
    assert [(m.name, m.max_tokens_per_item) for m in spec.modalities] == [("image", 960)]
    cut = slicing(source.config, source.preprocessor)
    assert cut.grid(448, 4032) == (1, 9)
    # the source image downsized to ~448^2 at ratio 1/9: 154 x 1344 px = 11 x 96 patches; nine 448 x 448 slices of 32 x 32
    assert cut.slice_patches(448, 4032) == [11 * 96] + [32 * 32] * 9
    assert cut.encoder_positions == 10 * 1056  # padded to the largest slice


def test_text_side_is_config_json_itself(spec):
    assert spec.derived_max_model_len == 8192
    serving = resolve_serving(ServingArgs(), spec, gpu_by_name("H200"))
    groups = kv_groups_for(spec, serving, gpu_by_name("H200"))
    assert [(g.kind, g.num_layers, g.page_size_bytes) for g in groups] == [("full", 32, 2 * 16 * 8 * 128 * 2)]


def test_weights_match_the_published_index(source, spec):
    assert VPM == 417_792_240 and RESAMPLER == 89_038_848
    serving = resolve_serving(ServingArgs(), spec, gpu_by_name("H200"))
    term, count, _ = weights_term(spec, source, serving)
    assert count == VPM + RESAMPLER + LLAMA3_8B == 8_537_092_336
    # the published index stores every tensor in 4-byte floats: total_size / 4 is the element count
    assert json.loads(INDEX.read_text())["metadata"]["total_size"] == 4 * count
    assert term.bytes == count * 2 and term.kind == "exact"  # served in float16 (config torch_dtype)


def test_encoder_terms(source, spec):
    serving = resolve_serving(ServingArgs(max_num_batched_tokens=2048), spec, gpu_by_name("H200"))
    plan = build_plan(source, spec, gpu_by_name("H200"), serving)
    assert plan.budget.profile_items == 2048 // 960 == 2
    assert plan.memory["encoder_cache"].bytes == 2 * 960 * 4096 * 2
    # 2 images x 10 slices x 1056 positions x (2 x 1152 + max(4 x 1152, 2 x 4304)) x 2 B
    assert activation_estimate(spec, plan.budget, plan.serving).encoder_bytes == 2 * 10_560 * (2 * V + 2 * VF) * 2


@pytest.mark.parametrize(
    ("changes", "named"),
    [({"version": 2.6}, "version 2.6"), ({"quantization_config": {"quant_method": "awq"}}, "quantization_config")],
)
def test_other_versions_are_refused(source, changes, named):
    config = copy.deepcopy(source.config)
    config.update(changes)
    with pytest.raises(BadInput, match=named):
        spec_from_files(config, "edited", source.preprocessor)


def test_feature_size_and_query_num_must_agree(source):
    with pytest.raises(BadInput, match="image_feature_size 64 differs from config.json query_num 96"):
        spec_from_files(source.config, "edited", {**source.preprocessor, "image_feature_size": 64})
