"""Qwen2.5-Omni (model_type qwen2_5_omni): vLLM 0.33 serves its thinker (qwen2_5_omni_thinker.py).

Expected values are worked out by hand from the catalog's published Qwen/Qwen2.5-Omni-7B-AWQ files:
- thinker_config.text_config: 28 layers, hidden 3584, 28 heads, 4 KV heads (head 3584 / 28 = 128), FFN 18944, vocabulary
  152,064 (a multiple of 64), 32,768 positions, untied LM head, use_sliding_window false;
- vision_config: 32 blocks of 1280 (FFN 3420, gated), patch 14, merge 2, temporal patch 2, out 3584;
- audio_config: 32 layers of 1280 (FFN 5120), 128 mel bins, output 3584;
- quantization_config: AWQ 4-bit, group 128, zero points, modules_to_not_convert ["visual"];
- preprocessor_config.json: max_pixels 12,845,056, chunk_length 300, sampling_rate 16,000, hop_length 160.
and checked against vLLM 0.33's own code (bench/vllm_omni_reference.py, bench/results/vllm-omni-reference-2026-12-01).
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest

from capacity.errors import BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.memory.weights import weights_breakdown, weights_term
from capacity.model.registry import spec_from_files
from capacity.planning.kv_groups import kv_groups_for
from capacity.planning.planner import build_plan
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.serving.encoder_budget import build_budget, max_tokens_per_item
from tests.support.paths import REPO_ROOT

NAME = "Qwen/Qwen2.5-Omni-7B-AWQ"
REFERENCE = json.loads((REPO_ROOT / "bench" / "results" / "vllm-omni-reference-2026-12-01" / "reference.json").read_text())

H, KV, HEAD, FFN, LAYERS, VOCAB = 3584, 4 * 128, 128, 18944, 28, 152_064
# Sum of in x out over one text layer's linear layers: q, k, v, o, gate, up, down.
LINEAR = H * H + 2 * KV * H + H * H + 3 * FFN * H
# AWQ per linear layer of in x out: qweight in x out / 8 int32 (in x out / 2 B), qzeros in / 128 x out / 8 int32
# (in x out / 256 B), scales in / 128 x out in bf16 (in x out / 64 B).
AWQ_LAYER = LINEAR // 2 + LINEAR // 256 + LINEAR // 64
TEXT = LAYERS * (AWQ_LAYER + (H + 2 * KV) * 2 + 2 * H * 2) + H * 2 + 2 * VOCAB * H * 2  # + q/k/v biases, 2 norms; final norm; embedding, LM head
V, VFFN = 1280, 3420
VISION = (
    V * 3 * 2 * 14 * 14  # patch_embed Conv3d, no bias
    + 32 * (2 * V + 4 * (V * V + V) + 2 * (VFFN * V + VFFN) + (V * VFFN + V))  # norms, q/k/v/proj, gate/up, down
    + (V + (4 * V) * (4 * V) + 4 * V + H * 4 * V + H)  # merger: ln_q, mlp.0 (5120 -> 5120), mlp.2 (5120 -> 3584)
)
A, AFFN = 1280, 5120
AUDIO = (
    (A * 128 * 3 + A) + (A * A * 3 + A) + 2 * H  # conv1, conv2, audio_bos_eos_token
    + 32 * ((A * A) + 2 * (A * A + A) + (A * A + A) + 2 * 2 * A + (AFFN * A + AFFN) + (A * AFFN + A))  # k (no bias), q/v, out, LNs, fc1, fc2
    + 2 * A + (H * A + H)  # ln_post, proj
)


def test_hand_arithmetic_of_the_parts():
    assert LINEAR == 233_046_016
    assert AWQ_LAYER == 121_074_688
    assert TEXT == 5_570_747_392
    assert VISION * 2 == 1_353_100_288
    assert AUDIO * 2 == 1_279_294_464


def test_vllm_built_the_thinker_with_awq_in_the_text_model_only():
    tp1 = next(c for c in REFERENCE["weights"] if c["tp"] == 1)
    assert tp1["class"] == "Qwen2_5OmniThinkerForConditionalGeneration" and tp1["quantization"] == "awq"
    parts = tp1["rank0_bytes_by_module_and_dtype"]
    assert parts["visual"] == {"bfloat16": VISION * 2} and parts["audio_tower"] == {"bfloat16": AUDIO * 2}
    assert sum(parts["language_model"].values()) == TEXT
    assert parts["language_model"]["int32"] == LAYERS * (LINEAR // 2 + LINEAR // 256)  # qweight + qzeros
    assert set(parts) == {"visual", "audio_tower", "language_model"}  # no talker, no token2wav


def test_spec_reads_the_thinker(spec):
    assert spec.family.name == "qwen2_5_omni" and spec.architecture == "Qwen2_5OmniThinkerForConditionalGeneration"
    assert spec.vllm_support.status == "native" and spec.config_dtype == "bfloat16"
    assert spec.derived_max_model_len == 32_768 and spec.num_attention_heads == 28
    assert (spec.decoder.hidden_size, spec.decoder.ffn_size, spec.decoder.vocab_size, spec.decoder.num_layers) == (H, FFN, VOCAB, LAYERS)


def test_tokens_per_item_by_hand(spec):
    image = 12_845_056 // (14 * 2) ** 2  # max_pixels // (patch x merge)^2
    mel = min(300, 30) * 16_000 // 160  # vLLM's dummy audio: min(chunk_length, 30) s
    positions = (mel - 1) // 2 + 1  # the stride-2 convolution
    audio = (positions - 2) // 2 + 1  # the 2x average pool
    assert (image, mel, positions, audio) == (16_384, 3000, 1500, 750)
    by_name = {m.name: m for m in spec.modalities}
    assert by_name["image"].max_tokens_per_item == image and by_name["audio"].max_tokens_per_item == audio
    assert spec.encoder_positions("audio", audio) == positions
    # videos: frames padded to pairs, each pair `image` tokens, at most 14 frames, the most that fit max_model_len
    # (at least one frame): 32,768 -> 4 frames -> 2 pairs -> 32,768 tokens
    assert max_tokens_per_item(by_name["video"], 32_768) == 2 * image
    assert max_tokens_per_item(by_name["video"], 4096) == image  # one frame, padded to a pair


@pytest.mark.parametrize("seq_len", sorted(REFERENCE["tokens"]["max_tokens_per_item"], key=int))
def test_tokens_equal_vllms_processing_info(spec, seq_len):
    vllm = REFERENCE["tokens"]["max_tokens_per_item"][seq_len]
    assert {m.name: max_tokens_per_item(m, int(seq_len)) for m in spec.modalities} == vllm


def test_profiled_item_is_the_video_at_the_default_length(source, spec):
    serving = resolve_serving(ServingArgs(), spec, gpu_by_name("H200"))
    budget = build_budget(spec, serving)
    assert budget.max_tokens_per_item == {"image": 16_384, "video": 32_768, "audio": 750}
    assert budget.modality_with_max_tokens == "video" and budget.profile_items == 1
    plan = build_plan(source, spec, gpu_by_name("H200"), serving)
    assert plan.memory["encoder_cache"].bytes == 32_768 * H * 2  # one video's embeddings, 3584 wide, bf16


def test_kv_layout_is_the_text_models(spec):
    gpu = gpu_by_name("H200")
    groups = kv_groups_for(spec, resolve_serving(ServingArgs(), spec, gpu), gpu)
    assert [(g.kind, g.num_layers, g.page_size_bytes) for g in groups] == [("full", LAYERS, 2 * 16 * 4 * HEAD * 2)]  # 32,768 B
    groups = kv_groups_for(spec, resolve_serving(ServingArgs(tensor_parallel_size=2, kv_cache_dtype="fp8"), spec, gpu), gpu)
    assert [g.page_size_bytes for g in groups] == [2 * 16 * 2 * HEAD * 1]  # 2 KV heads per rank, 1-byte fp8


def test_weights_as_created_equal_vllms_model_class(source, spec):
    """Without a GPU: the tensors vLLM's create_weights allocates (before any kernel's load-time conversion)."""
    for case in REFERENCE["weights"]:
        serving = resolve_serving(ServingArgs(tensor_parallel_size=case["tp"]), spec, gpu_by_name("H200"))
        wb = weights_breakdown(spec, source, serving)
        assert wb.total_bytes == case["rank0_parameter_bytes"], case["tp"]
        assert not wb.unclassified
    assert REFERENCE["weights"][0]["rank0_parameter_bytes"] == TEXT + 2 * (VISION + AUDIO) == 8_203_142_144


@pytest.mark.parametrize(("gpu", "kernel"), [("A100-80GB", "MarlinLinearKernel"), ("L4", "MarlinLinearKernel"), ("B200", "MarlinLinearKernel"), ("H200", "MacheteLinearKernel"), ("H100-80GB", "MacheteLinearKernel")])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_weights_after_the_gpus_awq_kernel(source, spec, gpu, kernel, tp):
    """Machete (compute capability 9.0) keeps the zero points as bf16 [groups, out]; Marlin keeps the sizes."""
    want = next(c for c in REFERENCE["weights"] if c["tp"] == tp)["rank0_after_load_bytes"][kernel]
    g = gpu_by_name(gpu)
    serving = resolve_serving(ServingArgs(tensor_parallel_size=tp), spec, g)
    term, _, wb = weights_term(spec, source, serving, g)
    assert term.bytes == want and term.kind == "exact" and kernel in term.method
    if tp == 1 and kernel == "MacheteLinearKernel":
        # each qzeros of in x out: in / 128 x out / 8 int32 -> in / 128 x out bf16, 3 x in x out / 256 more bytes
        assert want - REFERENCE["weights"][0]["rank0_parameter_bytes"] == LAYERS * 3 * LINEAR // 256 == 76_468_224


@pytest.mark.parametrize(("gpu", "named"), [("24GiB", "given by its size"), ("T4", "compute capability 7"), ("MI300X", "rocm")])
def test_gpus_whose_awq_kernel_is_not_modelled_are_refused(source, spec, gpu, named):
    g = gpu_by_name(gpu)
    with pytest.raises(BadInput, match=named) as info:
        weights_term(spec, source, resolve_serving(ServingArgs(), spec, gpu_by_name("H200")), g)
    assert "\n" not in str(info.value)


def edited(config: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(config)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is None:
        node.pop(path[-1])
    else:
        node[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("thinker_config",), None, "thinker_config"),
        (("thinker_config", "text_config"), None, "text_config"),
        (("thinker_config", "audio_config"), None, "audio_config"),
        (("thinker_config", "vision_config", "spatial_merge_size"), None, "spatial_merge_size"),
        (("thinker_config", "text_config", "sliding_window"), 4096, None),  # use_sliding_window false: ignored
    ],
)
def test_missing_fields_are_refused_naming_them(source, path, value, named):
    config = edited(source.config, path, value)
    if named is None:
        assert spec_from_files(config, "edited").layers == spec_from_files(source.config, "same").layers
        return
    with pytest.raises(BadInput, match=named) as info:
        spec_from_files(config, "edited")
    assert "\n" not in str(info.value)


def test_audio_tokens_follow_the_preprocessor(source):
    spec = spec_from_files(source.config, "short chunks", preprocessor={"chunk_length": 10, "sampling_rate": 16_000, "hop_length": 160, "max_pixels": 1_003_520})
    by_name = {m.name: m.max_tokens_per_item for m in spec.modalities}
    # 10 s -> 1000 mel frames -> 500 positions -> 250 tokens; 1,003,520 // 784 = 1280 tokens per image
    assert by_name == {"image": 1280, "video": 1280, "audio": 250}


def test_mm_processor_kwargs_size_keys_resize_images_and_videos_not_audio(source):
    from capacity.model.registry import spec_from_files, with_mm_processor_kwargs

    resized = with_mm_processor_kwargs(source, {"max_pixels": 1_003_520})
    spec = spec_from_files(resized.config, "resized", resized.preprocessor)
    by_name = {m.name: m.max_tokens_per_item for m in spec.modalities}
    # 1,003,520 // (14 x 2)^2 = 1,280 = 32 x 40 merged tokens (the closest factor pair, smart_resize keeps it)
    assert by_name == {"image": 1280, "video": 1280, "audio": 750}


def test_awq_layers_a_kernel_would_pad_are_refused(source):
    """An FFN of 19,008 (not a multiple of 128): Marlin would pad it, Machete refuse it for another kernel: exit 2."""
    config = edited(source.config, ("thinker_config", "text_config", "intermediate_size"), 19_008)
    spec = spec_from_files(config, "padded")
    g = gpu_by_name("A100-80GB")
    with pytest.raises(BadInput, match=r"mlp\.(gate|up|down)_proj .*19008") as info:
        weights_term(spec, replace(source, config=config), resolve_serving(ServingArgs(), spec, g), g)
    assert "\n" not in str(info.value)
