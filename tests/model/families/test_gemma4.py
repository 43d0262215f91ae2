"""The gemma4 family: google/gemma-4-26B-A4B (catalog: its published config.json) planned as vLLM 0.33 plans it.

Expected values are worked out by hand from the config (hidden 2816, 30 layers: 25 sliding of 8 KV heads x 256,
5 full of 2 global KV heads x 512 (attention_k_eq_v), window 1024, 128 experts of 704 (top 8), dense MLP 2112,
vocab 262,144 tied; vision tower 1152 wide, patch 16, pooling 3, default_output_length 280) and from vLLM 0.33's
gemma4_mm.py, or come from vLLM's own functions (bench/results/vllm-kv-reference-2026-11-30 and
vllm-weights-reference-2026-11-30, compared case by case in test_kv_vllm_reference.py and test_weights.py).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from capacity.cli.app import main
from capacity.errors import BadInput
from capacity.kv.layers import FullAttentionLayer, SlidingWindowLayer
from capacity.model.families.gemma4 import TEXT_DEFAULTS, VISION_DEFAULTS
from capacity.model.registry import model_spec, spec_from_files
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

ROOT = REPO_ROOT
CONFIG: dict[str, Any] = json.loads((ROOT / "capacity" / "source" / "catalog" / "models" / "google--gemma-4-26B-A4B" / "config.json").read_text())
WEIGHTS_REFERENCE = json.loads((ROOT / "bench" / "results" / "vllm-weights-reference-2026-11-30" / "reference.json").read_text())


def vllm_weights(tp: int) -> int:
    """rank 0's parameter bytes of vLLM 0.33's own Gemma4ForConditionalGeneration at TP `tp` (committed numbers)."""
    return next(c["rank0_parameter_bytes"] for c in WEIGHTS_REFERENCE["cases"] if c["model"] == "google/gemma-4-26B-A4B" and c["tp"] == tp and not c.get("ep"))


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = main(["plan", "--model", "google/gemma-4-26B-A4B", "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def with_text(**changes: Any) -> dict[str, Any]:
    config = copy.deepcopy(CONFIG)
    config["text_config"].update(changes)
    return config


# --- the config ------------------------------------------------------------------------------------------


def test_defaults_are_transformers_own():
    """Fields a published config may omit take Gemma4TextConfig's / Gemma4VisionConfig's defaults (vLLM reads configs
    through them)."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Gemma4TextConfig"):
        pytest.skip("this transformers has no Gemma-4")
    import dataclasses

    def defaults(cls: Any) -> dict[str, Any]:
        return {f.name: f.default for f in dataclasses.fields(cls)}

    assert {k: defaults(transformers.Gemma4TextConfig)[k] for k in TEXT_DEFAULTS} == TEXT_DEFAULTS
    assert {k: defaults(transformers.Gemma4VisionConfig)[k] for k in VISION_DEFAULTS} == VISION_DEFAULTS


def test_kv_layers_of_the_published_config():
    spec = spec_from_files(CONFIG, "gemma-4-26b-a4b")
    assert spec.family.name == "gemma4"
    kinds = Counter((type(layer), layer.kv_heads(), layer.head_size) for layer in spec.layers)
    # layer_types: every 6th layer full; full layers: global_head_dim 512, num_global_key_value_heads 2 (k_eq_v)
    assert kinds == {(SlidingWindowLayer, 8, 256): 25, (FullAttentionLayer, 2, 512): 5}
    assert [i for i, layer in enumerate(spec.layers) if isinstance(layer, FullAttentionLayer)] == [5, 11, 17, 23, 29]
    assert {layer.sliding_window for layer in spec.layers if isinstance(layer, SlidingWindowLayer)} == {1024}
    assert spec.derived_max_model_len == 262_144 and spec.max_len_key == "text_config.max_position_embeddings"


def test_per_layer_config_as_transformers_writes_it():
    """transformers 5.x saves a Gemma-4 text config with the per-layer overrides it derived (keys "05", ...) instead of
    global_head_dim / num_global_key_value_heads: read back, the same layers."""
    text = {k: v for k, v in CONFIG["text_config"].items() if k not in ("global_head_dim", "num_global_key_value_heads")}
    text["per_layer_config"] = {f"{i:02d}": {"head_dim": 512, "num_key_value_heads": 2} for i in (5, 11, 17, 23, 29)}
    assert spec_from_files({**CONFIG, "text_config": text}, "resaved").layers == spec_from_files(CONFIG, "published").layers
    text["per_layer_config"]["05"] = {"head_dim": 512, "sliding_window": 4096}
    with pytest.raises(BadInput, match="per_layer_config"):
        spec_from_files({**CONFIG, "text_config": text}, "resaved")


def test_tokens_per_item_as_vllm_get_mm_max_tokens_per_item():
    spec = spec_from_files(CONFIG, "gemma-4-26b-a4b")
    image, video = spec.modalities
    assert (image.name, image.max_tokens_per_item, image.supported_limit) == ("image", 280, None)  # default_output_length
    assert (video.name, video.max_tokens_per_item, video.supported_limit) == ("video", 32 * (70 + 2 + 6), None)
    # the encoder runs max_soft_tokens x pooling_kernel_size^2 patches: 280 x 9 per image, 32 frames x 70 x 9 per video
    assert (image.encoder_positions, video.encoder_positions) == (2520, 20160)
    # vLLM's dummy items are 224 x 224: resized to at most 2520 patches, sides multiples of 48 px:
    # sqrt(2520 x 256 / 224^2) = 3.586 -> floor(224 x 3.586 / 48) x 48 = 768 px = 48 patches -> 48^2 / 9 = 256;
    # a frame at 70 tokens: sqrt(630 x 256 / 224^2) = 1.793 -> 8 x 48 = 384 px = 24 patches -> 24^2 / 9 = 64
    assert (image.dummy_output_tokens, video.dummy_output_tokens) == (256, 32 * 64)
    assert spec.encoder is not None and not spec.encoder.tensor_parallel  # transformers' tower, whole on every rank


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (with_text(per_layer_config={"5": {"head_dim": 512}}), "per_layer_config"),
        (with_text(enable_moe_block=False), "enable_moe_block"),
        (with_text(use_bidirectional_attention="all"), "use_bidirectional_attention"),
        ({**CONFIG, "architectures": ["Gemma4UnifiedForConditionalGeneration"]}, "architectures"),
        ({**CONFIG, "vision_config": {k: v for k, v in CONFIG["vision_config"].items() if k != "default_output_length"}}, "default_output_length"),
    ],
    ids=["per_layer_config", "moe-mismatch", "bidirectional-all", "architecture", "no-default_output_length"],
)
def test_what_it_cannot_model_is_refused_naming_the_field(config: dict[str, Any], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(BadInput, match=field):
        spec_from_files(config, "gemma4-variant")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    code = main(["plan", "--model", str(folder), "--estimate", "formula"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and field in err and "Traceback" not in err


# --- plans -----------------------------------------------------------------------------------------------


def test_formula_plan_on_h100_at_tp2(capsys: pytest.CaptureFixture[str]):
    plan = plan_json(capsys, "--estimate", "formula", "--gpu", "H100-80GB", "-tp", "2")
    groups = plan["kv_cache"]["groups"]
    # TP 2: sliding 4 KV heads x 256, page 2 x 16 x 4 x 256 x 2 = 65,536 B; full 1 head x 512 at block 16 is 32,768 B,
    # so vLLM doubles its block to 32 (unify_kv_cache_spec_page_size). 25 sliding layers, 5 full: groups of 5.
    assert [(g["kind"], g["num_layers"], g["block_size"], g["page_size_bytes"]) for g in groups] == [("sliding_window", 5, 16, 65_536)] * 5 + [("full", 5, 32, 65_536)]
    assert plan["kv_cache"]["bytes_per_block"] == 5 * 65_536
    # H100 80 GB, `vllm serve`: max_num_batched_tokens 8192; sliding cdiv(1023 + 2 x 8192, 16) + 1, full cdiv(262144, 32)
    assert [g["blocks_per_request_vllm"] for g in groups] == [1089] * 5 + [8192]
    assert plan["kv_cache"]["num_blocks"] == plan["memory"]["kv_cache"]["bytes"] // (5 * 65_536)
    assert plan["memory"]["weights"]["bytes"] == vllm_weights(2) and plan["memory"]["weights"]["kind"] == "exact"
    # encoder budget max(8192, 2496): 8192 // 2496 = 3 videos profiled, 3 x 2048 embeddings x 2816 x 2 B held
    assert plan["budget"]["modality_with_max_tokens"] == "video" and plan["budget"]["max_items_per_batch"] == {"image": 29, "video": 3}
    assert plan["memory"]["encoder_cache"]["bytes"] == 3 * 2048 * 2816 * 2 == 34_603_008
    # the vision tower is not sharded: its activations are TP 1's; per position 2 x (2 x 1152 + max(4 x 1152, 3 x 4304))
    encoder = 3 * 20160 * 2 * (2 * 1152 + max(4 * 1152, 3 * 4304))
    assert f"encoder {encoder:,} B" in plan["memory"]["activation_peak"]["method"]
    assert plan["verdict"] == "fits"


def test_images_only_and_fp8_kv(capsys: pytest.CaptureFixture[str]):
    plan = plan_json(capsys, "--estimate", "formula", "--limit-mm-per-prompt", "video=0", "--kv-cache-dtype", "fp8", "--max-model-len", "32768")
    # images only: 8192 // 280 = 29 images of 256 dummy embeddings
    assert plan["budget"]["modality_with_max_tokens"] == "image" and plan["budget"]["profile_items"] == 29
    assert plan["memory"]["encoder_cache"]["bytes"] == 29 * 256 * 2816 * 2
    # H200 (139.8 GiB, under 160): 8192 batched tokens; fp8: sliding 2 x 16 x 8 x 256 = 65,536 B, full 2 x 16 x 2 x 512
    # = 32,768 B -> block 32; sliding cdiv(1023 + 2 x 8192, 16) + 1, full cdiv(32768, 32)
    groups = plan["kv_cache"]["groups"]
    assert [(g["block_size"], g["page_size_bytes"], g["blocks_per_request_vllm"]) for g in groups] == [(16, 65_536, 1089)] * 5 + [(32, 65_536, 1024)]
    assert plan["memory"]["weights"]["bytes"] == vllm_weights(1)


def test_default_plan_traces_the_vision_tower(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """The default path (--estimate trace; the suite's conftest sets formula) runs the tower's own patch embedder, encoder and pooler under fake tensors: its encoder
    outputs are vLLM's dummy videos' embeddings (3 x 32 frames x 64 soft tokens)."""
    pytest.importorskip("torch")
    monkeypatch.delenv("CAPACITY_ESTIMATE", raising=False)
    plan = plan_json(capsys, "--gpu", "H200")
    assert not any("trace stopped" in note for note in plan["notes"]), plan["notes"]
    assert plan["memory"]["activation_peak"]["method"].startswith("fake-tensor trace")
    assert plan["memory"]["encoder_cache"]["bytes"] == 3 * 32 * 64 * 2816 * 2
    assert plan["memory"]["weights"]["bytes"] == vllm_weights(1)


def test_sweep_points_equal_plans(capsys: pytest.CaptureFixture[str]):
    code = main(["sweep", "--model", "gemma-4-26b-a4b", "--estimate", "formula", "--gpu", "H200", "-tp", "1,2", "--max-model-len", "32768", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    points = json.loads(out)["points"]
    for point in points:
        tp = point["tensor_parallel_size"]
        assert point["weights_bytes"] == vllm_weights(tp)
        plan = plan_json(capsys, "--estimate", "formula", "--gpu", "H200", "-tp", str(tp), "--max-model-len", "32768")
        assert point["num_blocks"] == plan["kv_cache"]["num_blocks"] and point["actual_requests"] == plan["concurrency"]["actual_requests"]


def test_v_projections_vllm_allocates_for_k_eq_v_layers():
    """The 5 full-attention layers store k_proj only (attention_k_eq_v); vLLM's QKVParallelLinear holds a V part as
    wide as K: 5 x (2 heads x 512) x 2816 x 2 B = 28,835,840 B on top of the checkpoint's parameters."""
    pytest.importorskip("torch")
    from capacity.gpu.catalog import gpu_by_name
    from capacity.memory.weights import model_tensors, weights_breakdown
    from capacity.serving.config import ServingArgs, resolve_serving
    from capacity.source.resolve import resolve_model

    source = resolve_model("google/gemma-4-26B-A4B")
    spec = model_spec(source)
    stored, _ = model_tensors(spec, source)
    serving = resolve_serving(ServingArgs(dtype="bfloat16"), spec, gpu_by_name("H200"))
    wb = weights_breakdown(spec, source, serving)
    assert wb.total_bytes - 2 * sum(t.numel for t in stored) == 5 * 1024 * 2816 * 2 == 28_835_840
    # experts all resident: 30 layers x 128 x (2 x 704 + 704) x 2816 x 2 B, halved at TP 2
    assert wb.bytes_of("moe-experts") == 30 * 128 * 3 * 704 * 2816 * 2 == 45_675_970_560
    tp2 = weights_breakdown(spec, source, resolve_serving(ServingArgs(dtype="bfloat16", tensor_parallel_size=2), spec, gpu_by_name("H200")))
    assert tp2.bytes_of("moe-experts") == 45_675_970_560 // 2
    assert tp2.bytes_of("replicated") == wb.bytes_of("replicated")  # vision tower, embed_vision, routers, norms: whole


def test_kv_shared_layers_allocate_nothing():
    """With num_kv_shared_layers (Gemma-3n style) the last layers read the last earlier layer of their kind (vLLM's
    kv_sharing_target_layer_name): 30 - 6 = 24 layers allocate, 20 sliding and 4 full."""
    from capacity.gpu.catalog import gpu_by_name
    from capacity.kv.layers import SharedKVLayer
    from capacity.planning.kv_groups import kv_groups_for
    from capacity.serving.config import ServingArgs, resolve_serving

    spec = spec_from_files(with_text(num_kv_shared_layers=6), "gemma4-shared")
    shared = [layer for layer in spec.layers if isinstance(layer, SharedKVLayer)]
    # layers 24..28 are sliding: they read layer 22 (the last sliding one before 24); layer 29 (full) reads 23
    assert [layer.target_layer for layer in shared] == [22, 22, 22, 22, 22, 23]
    groups = kv_groups_for(spec, resolve_serving(ServingArgs(), spec, gpu_by_name("H200")), gpu_by_name("H200"))
    # 20 sliding and 4 full layers with KV: group size 4 (20 >= 1.5 x 4), 5 sliding groups + 1 full
    assert [(g.kind, g.num_layers) for g in groups] == [("sliding_window", 4)] * 5 + [("full", 4)]


def test_transformers_default_gemma4_config_is_refused_in_one_line():
    """transformers' default Gemma4Config has no vision tower config: refused, naming the field."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Gemma4Config"):
        pytest.skip("this transformers has no Gemma-4")
    config = json.loads(json.dumps(transformers.Gemma4Config().to_dict(), default=str))
    config["architectures"] = ["Gemma4ForConditionalGeneration"]
    with pytest.raises(BadInput, match="vision_config"):
        spec_from_files(config, "gemma4-default")
