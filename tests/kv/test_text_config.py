"""KV layouts read from text configs (capacity/kv/text_config.py) and planned from config folders, worked out by hand
from vLLM 0.33's formulas (comments). The configs are in tests/fixtures/configs (see its README)."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest

from capacity.errors import BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.kv.layers import GatedDeltaNetLayer, Mamba2Layer, MLALayer, SharedKVLayer
from capacity.kv.specs import KVKnobs
from capacity.kv.text_config import kv_layers
from capacity.planning.kv_groups import kv_groups_for
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from tests.support.paths import FIXTURES as TEST_FIXTURES

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

FIXTURES = TEST_FIXTURES / "configs"
GiB = 2**30


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def kinds(config: dict) -> Counter:
    return Counter(layer.kind for layer in kv_layers(config, "test"))


@pytest.fixture
def folder(tmp_path):
    def make(name: str) -> str:
        target = tmp_path / name
        target.mkdir()
        shutil.copy(FIXTURES / f"{name}.json", target / "config.json")
        return str(target)

    return make


# --- reading the layout ---------------------------------------------------------------------------------


def test_layouts_of_the_fixture_configs():
    assert kinds(fixture("deepseek-ai--DeepSeek-R1")) == {"mla": 61}
    assert kinds(fixture("Qwen--Qwen3-Next-80B-A3B-Instruct")) == {"linear_attention": 36, "full": 12}  # every 4th layer is full
    assert kinds(fixture("google--gemma-3n-E4B-text")) == {"sliding_window": 16, "full": 4, "shared": 15}
    assert kinds(fixture("meta-llama--Llama-4-Scout-17B-16E-text")) == {"chunked_local": 36, "full": 12}  # NoPE layers are global
    assert kinds(fixture("synthetic--nemotron-h-style")) == {"mamba": 20, "full": 4}  # M and * of the pattern; MLP layers hold nothing


def test_mla_stores_one_latent_head_not_128_kv_heads():
    layer = kv_layers(fixture("deepseek-ai--DeepSeek-R1"), "test")[0]
    assert layer == MLALayer(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128)
    spec = layer.kv_spec(KVKnobs(block_size=16, tensor_parallel_size=8, kv_dtype_bytes=2, model_dtype_bytes=2))
    # (512 + 64) x 2 B per token, no separate V, the same on every TP rank; 128 heads x 128 x 2 (K and V) x 2 B would be 65,536
    assert spec.page_size_bytes == 16 * 576 * 2 == 18_432


def test_gated_delta_net_state_bytes():
    layer = kv_layers(fixture("Qwen--Qwen3-Next-80B-A3B-Instruct"), "test")[0]
    assert isinstance(layer, GatedDeltaNetLayer)
    knobs = KVKnobs(block_size=16, tensor_parallel_size=2, kv_dtype_bytes=2, model_dtype_bytes=2, num_speculative_tokens=1)
    conv, recurrent = layer.state_bytes(knobs)
    assert conv == (128 * 16 * 2 + 128 * 32) // 2 * (4 - 1 + 1) * 2 == 32_768  # conv dim / TP x (kernel - 1 + spec) x bf16
    assert recurrent == 32 // 2 * 128 * 128 * 2 == 524_288  # v heads / TP x head_v x head_k x bf16


def test_mamba2_state_bytes_replicate_groups_over_tp():
    layer = kv_layers(fixture("synthetic--nemotron-h-style"), "test")[0]
    assert isinstance(layer, Mamba2Layer) and layer.ssm_dtype == "float32"  # Nemotron-H keeps its SSM state in fp32
    conv, ssm = layer.state_bytes(KVKnobs(block_size=16, tensor_parallel_size=4, kv_dtype_bytes=2, model_dtype_bytes=2))
    assert conv == (128 * 64 + 2 * 8 * 128) // 4 * 3 * 2 == 15_360
    assert ssm == 128 // 4 * 64 * 128 * 4 == 1_048_576


def test_state_layers_name_what_tp_does_not_divide():
    # Qwen3-Next with 24 value heads at TP 16: conv dim 128 x 16 x 2 + 128 x 24 = 7,168 = 16 x 448 divides, 24 does not
    gdn = kv_layers({**fixture("Qwen--Qwen3-Next-80B-A3B-Instruct"), "linear_num_value_heads": 24}, "test")[0]
    assert gdn.tp_indivisible(16) == ("linear_num_value_heads (24)",)
    assert gdn.tp_indivisible(8) == ()  # 24 = 8 x 3, 7,168 = 8 x 896
    # Nemotron-H style, 8 groups of state 128, heads of 64: 100 heads at TP 8 (conv dim 100 x 64 + 2 x 8 x 128 = 8,448 = 8 x 1,056)
    mamba = kv_layers({**fixture("synthetic--nemotron-h-style"), "mamba_num_heads": 100}, "test")[0]
    assert mamba.tp_indivisible(8) == ("mamba heads (100)",)
    assert mamba.tp_indivisible(4) == ()
    # 8 groups over TP 16: MambaMixer2 asserts n_groups % tp == 0 or n_groups == 1
    assert "mamba n_groups (8)" in mamba.tp_indivisible(16)
    # the figures of a TP vLLM refuses are the largest rank's share: ceil(100 / 8) = 13 heads x 64 x 128 x fp32
    conv, ssm = mamba.state_bytes(KVKnobs(block_size=16, tensor_parallel_size=8, kv_dtype_bytes=2, model_dtype_bytes=2))
    assert (conv, ssm) == (1_056 * 3 * 2, 13 * 64 * 128 * 4) == (6_336, 425_984)


def test_a_tp_that_does_not_divide_mamba_heads_is_a_wont_start_verdict(tmp_path, capsys):
    # As for attention heads (tp_does_not_divide_heads): vLLM refuses to start, so the plan says so (exit 1), not bad input.
    from capacity.cli.app import main

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**fixture("synthetic--nemotron-h-style"), "mamba_num_heads": 100}))
    code = main(["plan", "--model", str(folder), "--gpu", "H200", "--tensor-parallel-size", "8", "--json"])
    out, _ = capsys.readouterr()
    assert code == 1
    hazards = {h["id"]: h for h in json.loads(out)["hazards"]}
    assert hazards["tp_does_not_divide_state_heads"]["severity"] == "error"
    assert "mamba heads (100)" in hazards["tp_does_not_divide_state_heads"]["message"]
    assert "tp_does_not_divide_heads" not in hazards  # 32 attention heads = 8 x 4


def test_kv_shared_layers_point_at_the_last_layer_of_their_kind():
    layers = kv_layers(fixture("google--gemma-3n-E4B-text"), "test")
    shared = [layer for layer in layers if isinstance(layer, SharedKVLayer)]
    assert len(shared) == 15
    # layers 20..34 share: sliding ones read layer 18, full ones layer 19 (vLLM gemma3n: first_kv_shared - 2 / - 1)
    assert {layer.target_layer for layer in shared} == {18, 19}
    assert all(layer.kv_spec(KVKnobs(16, 1, 2, 2)) is None for layer in shared)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"index_topk": 2048}, "index_topk"),
        ({"layer_types": ["linear_attention"] * 61}, "linear_num_value_heads"),
        ({"layer_types": ["cross_attention"] * 61, "kv_lora_rank": None}, "cross_attention"),
        ({"kv_lora_rank": 512, "qk_rope_head_dim": None}, "qk_rope_head_dim"),
        ({"num_hidden_layers": None}, "num_hidden_layers"),
    ],
)
def test_unreadable_layouts_fail_closed_naming_the_field(change, field):
    config = {**fixture("deepseek-ai--DeepSeek-R1"), **change}
    with pytest.raises(BadInput, match=field):
        kv_layers(config, "test")


# --- vLLM's block-size decisions ----------------------------------------------------------------------------


def groups_of(name: str, gpu: str, **knobs):
    from capacity.model.registry import spec_from_files
    from capacity.serving.config import resolve_serving

    spec = spec_from_files(fixture(name), name)
    target = gpu_by_name(gpu)
    serving = resolve_serving(ServingArgs(**knobs), spec, target)
    return kv_groups_for(spec, serving, target)


def test_mla_block_size_follows_the_backend():
    # Hopper: FlashAttention-MLA keeps 16; FlashMLA (fp8 KV) wants 64; Blackwell: FlashInfer-MLA 32 (qk_nope 128).
    assert groups_of("deepseek-ai--DeepSeek-R1", "H200")[0].spec.block_size == 16
    assert groups_of("deepseek-ai--DeepSeek-R1", "H200", kv_cache_dtype="fp8")[0].spec.block_size == 64
    assert groups_of("deepseek-ai--DeepSeek-R1", "B200")[0].spec.block_size == 32
    assert groups_of("deepseek-ai--DeepSeek-R1", "H200", block_size=128)[0].spec.block_size == 128  # --block-size wins


def test_hybrid_page_unification_raises_the_attention_block():
    # Mamba page (TP 1, bf16): conv (2 x 16 x 128 + 32 x 128) x 3 x 2 = 49,152 + recurrent 32 x 128 x 128 x 2 = 1,048,576.
    # Attention page per token: 2 KV heads x (256 + 256) x 2 B = 2,048. Without FlashInfer's 64-token checkpoint grid
    # (A100): 16 x cdiv(1,097,728, 16 x 2,048) = 544 tokens; on the H200 in align mode: 64 x cdiv(1,097,728, 64 x 2,048) = 576.
    a100 = groups_of("Qwen--Qwen3-Next-80B-A3B-Instruct", "A100-80GB", max_model_len=32768)
    h200 = groups_of("Qwen--Qwen3-Next-80B-A3B-Instruct", "H200", max_model_len=32768)
    assert {g.spec.block_size for g in a100 if g.kind == "full"} == {544}
    assert {g.page_size_bytes for g in a100} == {544 * 2048}  # the Mamba page padded to exactly the attention page
    assert {g.spec.block_size for g in h200 if g.kind == "full"} == {576}
    assert [(g.kind, g.num_layers, g.num_padding_layers) for g in h200] == [("mamba", 12, 0)] * 3 + [("full", 12, 0)]
    assert h200[0].spec.page_size_padded == 576 * 2048 and sum(h200[0].spec.state_bytes) == 1_097_728


def test_mamba_cache_mode_and_speculative_tokens_count_state_blocks():
    align = groups_of("Qwen--Qwen3-Next-80B-A3B-Instruct", "H200", max_model_len=32768, num_speculative_tokens=2)
    none = groups_of("Qwen--Qwen3-Next-80B-A3B-Instruct", "H200", max_model_len=32768, num_speculative_tokens=2, enable_prefix_caching=False)
    from capacity.kv.specs import BlockContext

    ctx = BlockContext(32768, 8192)
    assert align[0].spec.blocks_per_request_vllm(ctx) == 2 + 2 + 1  # align: 2 + speculative + one prefill checkpoint
    assert none[0].spec.blocks_per_request_vllm(ctx) == 1 + 2  # none: the running state + speculative blocks
    assert none[0].spec.block_size == 32768  # mamba_block_size = max_model_len when prefix caching is off


def test_chunked_local_attention_blocks_per_request():
    from capacity.kv.specs import BlockContext

    groups = groups_of("meta-llama--Llama-4-Scout-17B-16E-text", "H200", max_model_len=131072, max_num_batched_tokens=8192)
    chunked = [g for g in groups if g.kind == "chunked_local"]
    # cdiv(min(8192 + 2 x 8192 in flight, 131072), 16) = 1,536 blocks; full attention cdiv(131072, 16) = 8,192
    assert chunked[0].spec.blocks_per_request_vllm(BlockContext(131072, 8192)) == 1536
    assert [g.num_layers for g in groups] == [12, 12, 12, 12]


# --- plans from config folders ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "per_block"),
    [
        ("deepseek-ai--DeepSeek-R1", 61 * 16 * 576 * 2),  # 61 MLA layers of 18,432 B: 1,124,352
        ("Qwen--Qwen3-Next-80B-A3B-Instruct", 12 * 576 * 2048),  # 12 layer slots per group of 1,179,648 B pages
        ("google--gemma-3n-E4B-text", 4 * 2 * 16 * 2 * 256 * 2),  # 5 groups of 4 layers, 32,768 B pages
        ("meta-llama--Llama-4-Scout-17B-16E-text", 12 * 2 * 16 * 8 * 128 * 2),  # 4 groups of 12 layers, 65,536 B pages
    ],
)
def test_capacity_plans_these_configs(folder, name, per_block):
    plan = plan_for(folder(name), ServingArgs(kv_cache_memory_bytes=20 * GiB, max_model_len=8192), "H200")
    assert plan.kv.bytes_per_block == per_block
    assert plan.kv.num_blocks == 20 * GiB // per_block


def test_gemma4_full_layers_are_wider_and_pages_unify_by_block_size():
    layers = kv_layers(fixture("google--gemma-4-e2b-text"), "test")
    assert Counter((layer.kind, layer.head_size) for layer in layers) == {("sliding_window", 256): 25, ("full", 512): 5}
    groups = groups_of("google--gemma-4-e2b-text", "H200", max_model_len=32768)
    # full page 2 x 16 x 4 x 512 x 2 = 131,072; a sliding page (65,536 at 16 tokens) doubles its block to 32 tokens
    assert [(g.kind, g.spec.block_size, g.num_layers, g.page_size_bytes) for g in groups] == [("sliding_window", 32, 5, 131_072)] * 5 + [("full", 16, 5, 131_072)]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"index_topk": 2048}, "index_topk"),  # DeepSeek-V3.2's sparse-attention indexer keeps its own cache
        ({"layer_types": ["linear_attention"] * 61}, "linear_num_value_heads"),
        ({"kv_lora_rank": 512, "qk_rope_head_dim": None}, "qk_rope_head_dim"),
    ],
)
def test_the_cli_refuses_what_it_cannot_lay_out_in_one_line(tmp_path, capsys, change, needle):
    from capacity.cli.app import main

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**fixture("deepseek-ai--DeepSeek-R1"), **change}))
    code = main(["plan", "--model", str(folder), "--gpu", "H200"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("capacity: error:") and needle in lines[0]


def test_each_spec_owns_its_bytes_per_request():
    from capacity.kv.specs import BlockContext

    ctx = BlockContext(max_model_len=32768, max_num_batched_tokens=8192)
    mla = groups_of("deepseek-ai--DeepSeek-R1", "H200", max_model_len=32768)[0].spec
    assert mla.max_memory_usage_bytes(ctx) == 2048 * 18_432  # cdiv(32768, 16) pages of 18,432 B
    state = groups_of("Qwen--Qwen3-Next-80B-A3B-Instruct", "H200", max_model_len=32768)[0].spec
    assert state.max_memory_usage_bytes(ctx) == 3 * 576 * 2048  # align mode: 3 padded state pages, whatever the length


def test_reports_show_state_groups_without_heads(folder):
    from reports.frames import kv_groups_frame

    plan = plan_for(folder("Qwen--Qwen3-Next-80B-A3B-Instruct"), ServingArgs(kv_cache_memory_bytes=20 * GiB, max_model_len=32768), "H200")
    df = kv_groups_frame(plan)
    assert df["kind"].tolist() == ["mamba", "mamba", "mamba", "full"]
    assert df["num_kv_heads_per_rank"].isna().tolist() == [True, True, True, False] and int(df["num_kv_heads_per_rank"].iloc[3]) == 2
    assert plan.to_dict()["kv_cache"]["groups"][0]["state_bytes"] == [49_152, 1_048_576]  # conv, recurrent (TP 1, bf16)


def test_granite_style_mamba2_names():
    # Granite-4 spells the Mamba-2 fields mamba_n_heads / mamba_d_head / mamba_d_state / mamba_n_groups / mamba_d_conv
    # and sizes the mixer as mamba_expand x hidden_size (vLLM granitemoehybrid.get_mamba_state_shape_from_config).
    config = {
        "num_hidden_layers": 4, "layer_types": ["mamba", "mamba", "mamba", "attention"], "hidden_size": 1536, "num_attention_heads": 12,
        "num_key_value_heads": 4, "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4,
        "mamba_expand": 2,
    }  # fmt: skip
    layers = kv_layers(config, "test")
    assert [layer.kind for layer in layers] == ["mamba", "mamba", "mamba", "full"]
    conv, ssm = layers[0].state_bytes(KVKnobs(block_size=16, tensor_parallel_size=1, kv_dtype_bytes=2, model_dtype_bytes=2))
    assert conv == (2 * 1536 + 2 * 1 * 128) * 3 * 2 == 19_968 and ssm == 48 * 64 * 128 * 2 == 786_432
