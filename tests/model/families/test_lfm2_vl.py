"""LiquidAI LFM2 hybrids (short convolution + attention) and LFM2-VL images, as vLLM 0.33 plans them.

Numbers are worked by hand below, or come from vLLM's own code: bench/results/vllm-kv-reference-2026-11-30 (KV),
bench/results/vllm-weights-reference-2026-11-30 (weights) and bench/results/vllm-lfm2-vl-images-2026-12-01 (image
embeddings: transformers' Lfm2VlImageProcessor + vLLM's Lfm2VLProcessingInfo.get_image_repl). vLLM is not imported.
The config is the published LFM2.5-VL-1.6B config.json (capacity/source/catalog/README.md has its source and sha256).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from capacity.cli.app import main
from capacity.errors import BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.kv.layers import ShortConvLayer
from capacity.kv.specs import KVKnobs, MambaSpec
from capacity.model.items.lfm2_vl import Lfm2VlImageSettings, closest_aspect_ratio, target_ratios
from capacity.model.registry import spec_from_files
from capacity.planning.kv_groups import kv_groups_for
from capacity.serving.config import ServingArgs, resolve_serving
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

ROOT = REPO_ROOT
CONFIG = json.loads((ROOT / "capacity" / "source" / "catalog" / "models" / "LiquidAI--LFM2.5-VL-1.6B" / "config.json").read_text())
IMAGES = json.loads((ROOT / "bench" / "results" / "vllm-lfm2-vl-images-2026-12-01" / "reference.json").read_text())
NAME = "LiquidAI/LFM2.5-VL-1.6B"


# --- the conv state ---------------------------------------------------------------------------------------


def test_layers_are_ten_short_convolutions_and_six_attention_layers():
    spec = spec_from_files(CONFIG, NAME)
    convs = [layer for layer in spec.layers if isinstance(layer, ShortConvLayer)]
    assert len(spec.layers) == 16 and len(convs) == 10
    # Lfm2VLForConditionalGeneration sizes hybrid pages from text_config.hidden_size (2,048 here too)
    assert set(convs) == {ShortConvLayer(conv_dim=2048, conv_kernel=3, aligned_conv_dim=2048)}
    # the text config alone (Lfm2ForCausalLM, which reads conv_dim) is read the same way by the decoder-only family
    text = spec_from_files(CONFIG["text_config"], "lfm2").layers
    assert [type(layer) for layer in text] == [type(layer) for layer in spec.layers]
    assert {layer for layer in text if isinstance(layer, ShortConvLayer)} == {ShortConvLayer(conv_dim=2048, conv_kernel=3)}


def test_vl_pages_sized_from_hidden_size_can_be_outgrown():
    """A (hypothetical) LFM2-VL config whose conv_dim 8,192 exceeds hidden_size 2,048: vLLM pads the Mamba page for
    (3 - 1) x 2,048 x 2 = 8,192 B, i.e. the 16-token fp8 attention page of 16,384 B, while each conv layer keeps
    (3 - 1) x 8,192 x 2 = 32,768 B: the state outgrows its page (vLLM's MambaSpec assert)."""
    config = {**CONFIG, "text_config": {**CONFIG["text_config"], "conv_dim": 8192}}
    spec = spec_from_files(config, NAME)
    gpu = gpu_by_name("H200")
    serving = resolve_serving(ServingArgs(limit_mm_per_prompt={"image": 0}, kv_cache_dtype="fp8", max_model_len=32768), spec, gpu)
    groups = kv_groups_for(spec, serving, gpu)
    state = next(g.spec for g in groups if isinstance(g.spec, MambaSpec))
    assert (sum(state.state_bytes), state.page_size_bytes, state.overflows_page) == (32_768, 16_384, True)


@pytest.mark.parametrize(
    ("tp", "spec_tokens", "dtype_bytes", "expected"),
    [
        (1, 0, 2, 8_192),  # (conv_L_cache 3 - 1) x conv_dim 2,048 x 2 B
        (2, 0, 2, 4_096),  # conv_dim split: 1,024 channels per rank
        (1, 4, 2, 24_576),  # (3 - 1 + 4 speculative) x 2,048 x 2 B
        (4, 2, 4, 8_192),  # float32: (2 + 2) x 512 x 4 B
    ],
)
def test_conv_state_bytes_by_hand(tp, spec_tokens, dtype_bytes, expected):
    layer = ShortConvLayer(conv_dim=2048, conv_kernel=3)
    knobs = KVKnobs(block_size=16, tensor_parallel_size=tp, kv_dtype_bytes=2, model_dtype_bytes=dtype_bytes, num_speculative_tokens=spec_tokens)
    assert layer.state_bytes(knobs) == (expected,)
    # what the platform pads pages for leaves the speculative slots out (get_mamba_state_shape_from_config)
    assert layer.aligned_state_bytes(knobs) == 2 * (2048 // tp) * dtype_bytes
    assert layer.kv_spec(knobs).num_prefill_checkpoint_blocks == 0 and layer.checkpoint_alignment(knobs) is None


def test_tp_that_does_not_divide_conv_dim_is_named():
    assert ShortConvLayer(conv_dim=2048, conv_kernel=3).tp_indivisible(3) == ("conv_dim (2048)",)


def _groups(**kwargs: Any) -> tuple[Any, list[Any]]:
    spec = spec_from_files(CONFIG, NAME)
    gpu = gpu_by_name("H200")
    serving = resolve_serving(ServingArgs(limit_mm_per_prompt={"image": 0}, **kwargs), spec, gpu)
    return serving, kv_groups_for(spec, serving, gpu)


def test_pages_by_hand_at_tp1():
    """Attention: 8 KV heads x 64 x (K + V) x 2 B = 2,048 B a token, 32,768 B a 16-token page. The 8,192 B conv state
    fits one: the block stays 16 and the Mamba page is padded to 32,768 B. 10 conv layers and 6 attention layers:
    group size 6 (10 >= 1.5 x 6), so the conv layers form 2 groups of 5 + 1 padding layer; 6 x 32,768 = 196,608 B a
    block. In align mode (prefix caching on) a conv group holds 2 blocks a request, attention cdiv(128,000, 16)."""
    serving, groups = _groups()
    assert serving.block_size == 16
    assert [(g.kind, g.num_layers, g.num_padding_layers, g.page_size_bytes) for g in groups] == [
        ("mamba", 5, 1, 32_768),
        ("mamba", 5, 1, 32_768),
        ("full", 6, 0, 32_768),
    ]
    assert all(sum(g.spec.state_bytes) == 8_192 for g in groups if isinstance(g.spec, MambaSpec))


def test_state_that_outgrows_its_padded_page_is_an_error(capsys):
    """fp8 KV: a 16-token attention page is 16,384 B; 4 speculative tokens make the state (2 + 4) x 2,048 x 2 =
    24,576 B, but vLLM padded the page for 8,192 B: it asserts at startup (bench reference case 'fp8 spec4').
    --block-size 32 gives a 32,768 B page that holds it (the reference's 'spec4 block32' case starts)."""
    _, groups = _groups(kv_cache_dtype="fp8", num_speculative_tokens=4, max_model_len=32768)
    assert [g.spec.overflows_page for g in groups] == [True, True, False]
    code = main(["plan", "--model", NAME, "--estimate", "formula", "--limit-mm-per-prompt", "image=0", "--kv-cache-dtype", "fp8",
                 "--num-speculative-tokens", "4", "--max-model-len", "32768", "--json"])  # fmt: skip
    plan = json.loads(capsys.readouterr().out)
    hazard = next(h for h in plan["hazards"] if h["id"] == "mamba_state_outgrows_page")
    assert code != 0 and hazard["severity"] == "error" and "24,576 B" in hazard["message"] and "16,384 B" in hazard["message"]
    assert "--block-size 32" in hazard["fix"]


# --- images -----------------------------------------------------------------------------------------------


def test_catalog_entry_plans_images_and_text_only(capsys):
    """The catalog's processor_config.json: 256 embeddings per image (below), the tower's weights in: 3,193,251,808 B;
    at image=0 vLLM leaves the vision tower and projector out: 2,340,681,216 B (the weights reference's cases)."""
    code = main(["plan", "--model", NAME, "--estimate", "formula", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0 and plan["budget"]["max_tokens_per_item"] == {"image": 256}
    assert plan["memory"]["weights"]["bytes"] == 3_193_251_808
    code = main(["plan", "--model", NAME, "--estimate", "formula", "--limit-mm-per-prompt", "image=0", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0 and plan["memory"]["weights"]["bytes"] == 2_340_681_216


def test_without_a_processor_file_images_are_refused_unless_turned_off(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    code = main(["plan", "--model", str(tmp_path), "--estimate", "formula"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "preprocessor_config.json / processor_config.json" in err and "--limit-mm-per-prompt image=0" in err
    assert main(["plan", "--model", str(tmp_path), "--estimate", "formula", "--limit-mm-per-prompt", "image=0"]) == 0


def test_published_processor_config_counts_256_per_image():
    """get_image_size_with_most_features: sqrt(256 x 16^2 x 2^2) = 512. 512 x 512 is not too large (512^2 =
    262,144 <= 256 x 1,024 x 2.0), so one picture; smart_resize keeps 512 x 512 (262,144 = max pixels):
    (512 // 16 / 2)^2 = 16 x 16 = 256 embeddings."""
    processor = json.loads((ROOT / "capacity" / "source" / "catalog" / "models" / "LiquidAI--LFM2.5-VL-1.6B" / "processor_config.json").read_text())
    spec = spec_from_files(CONFIG, NAME, None, processor)
    assert [(m.name, m.max_tokens_per_item, m.unmodelled) for m in spec.modalities] == [("image", 256, "")]
    assert spec.encoder is not None and spec.encoder.seq_len == 1_024  # 256 x downsample_factor 2^2 patches
    assert "512 x 512 dummy image" in spec.notes[0]


def test_tiled_dummy_by_hand():
    """max_pixels_tolerance 0.5: the 512 x 512 dummy is too large (262,144 > 131,072). Grids (cols, rows) with
    2..10 tiles; aspect 1 first matches exactly at 2 x 2 (3 x 3 ties, but 512^2 is not above half of 9 tiles'
    area). 4 tiles x (512 // 16 / 2)^2 = 4 x 256, + the thumbnail at smart_resize 512 x 512: 256. 1,280."""
    settings = Lfm2VlImageSettings(max_pixels_tolerance=0.5)
    assert closest_aspect_ratio(1.0, target_ratios(2, 10), 512, 512, 512) == (2, 2)
    assert settings.dummy_image_tokens()[0] == 1_280


def test_settings_come_from_either_processor_file_and_bad_values_are_refused():
    assert Lfm2VlImageSettings.from_files(None, None) is None
    flat = Lfm2VlImageSettings.from_files({"max_image_tokens": 1024}, None)
    nested = Lfm2VlImageSettings.from_files(None, {"image_processor": {"max_image_tokens": 1024}})
    assert flat is not None and nested is not None and flat[0] == nested[0] == Lfm2VlImageSettings(max_image_tokens=1024)
    with pytest.raises(BadInput, match="max_image_tokens"):
        Lfm2VlImageSettings.from_files({"max_image_tokens": "many"}, None)
    with pytest.raises(BadInput, match="min_tiles 4 > max_tiles 2"):
        Lfm2VlImageSettings.from_files({"min_tiles": 4, "max_tiles": 2}, None)


@pytest.mark.parametrize("case", IMAGES["cases"], ids=[json.dumps(c["settings"]) for c in IMAGES["cases"]])
def test_image_embeddings_equal_vllm(case):
    """Every size of every settings case: vLLM's count, or (where vLLM counts a tile grid the image processor did
    not produce: do_image_splitting false) capacity's refusal."""
    found = Lfm2VlImageSettings.from_files(None, {"image_processor": case["settings"]}) if case["settings"] else None
    settings = found[0] if found else Lfm2VlImageSettings()
    assert [settings.dummy_side()] * 2 == case["dummy"]
    for row in case["images"]:
        cols, rows = row["grid"]
        if cols * rows > 1 and row["processor_tiles"] != cols * rows + 1:
            with pytest.raises(BadInput, match="disagree"):
                settings.image_tokens(row["height"], row["width"])
            continue
        assert settings.image_tokens(row["height"], row["width"]) == (row["embeddings"], cols, rows), row


def test_reference_covers_tiled_and_single_pictures():
    assert IMAGES["vllm_version"].startswith("0.33.0")
    rows = [row for case in IMAGES["cases"] for row in case["images"]]
    assert any(r["grid"] != [1, 1] for r in rows) and any(r["grid"] == [1, 1] for r in rows) and len(rows) >= 50


def test_a_folder_with_its_processor_config_plans_images(tmp_path, capsys):
    """With a processor_config.json (transformers 5's layout: settings under "image_processor"; these values are the
    ones config.json states), images count 256 each by vLLM's rule, and the tower's weights stay in:
    3,193,251,808 B at TP 1 (the weights reference's whole-model case)."""
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    settings = {key: CONFIG[key] for key in ("downsample_factor", "encoder_patch_size", "min_image_tokens", "max_image_tokens", "max_pixels_tolerance", "min_tiles", "max_tiles", "tile_size", "use_thumbnail", "do_image_splitting")}
    (tmp_path / "processor_config.json").write_text(json.dumps({"processor_class": "Lfm2VlProcessor", "image_processor": settings}))
    code = main(["plan", "--model", str(tmp_path), "--estimate", "formula", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0
    assert plan["budget"]["max_tokens_per_item"] == {"image": 256}
    assert plan["memory"]["weights"]["bytes"] == 3_193_251_808


@pytest.mark.parametrize(
    ("filename", "blob"),
    [("config.json", "37c2fe5d67001f42a5a9d1a3bbefdb8dc18867b2"), ("processor_config.json", "d2dfab54984ecbf3214bd80070283bc2a61085d6")],
)
def test_stored_files_are_the_hub_blobs_a_record_of_revision_919fde3_names(filename, blob):
    """Shoozes/candle tools/lfm2_vl/reference-lock.json records, for LiquidAI/LFM2.5-VL-1.6B at revision 919fde3d,
    each file's git blob id (sha1 of "blob <size>\\0" + bytes); the stored files hash to them (catalog README)."""
    import hashlib

    data = (ROOT / "capacity" / "source" / "catalog" / "models" / "LiquidAI--LFM2.5-VL-1.6B" / filename).read_bytes()
    assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob
