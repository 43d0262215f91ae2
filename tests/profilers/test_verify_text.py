"""`capacity verify` over the pool as a transformers cache: decoder-only LLMs and VLMs, and Llama-3.2-Vision's
cross-attention layers reading the encoder's keys from their blocks (CPU probe, tiny configs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from capacity.cli.app import main
from capacity.kv.specs import FullAttentionSpec, SlidingWindowSpec, group_slots, kv_cache_groups
from profilers.pool_cache import GroupLayout, context, group_layouts, pool_layer_class
from tests.profilers.test_mllama import TINY_MLLAMA
from tests.profilers.test_run import TINY_LLAMA, TINY_QWEN_VL

# 112 x 112 px at most: 8 x 8 patches of 14 px, merged 2 x 2 -> 16 tokens per image (frames alike)
SMALL_QWEN_VL_IMAGES = {"min_pixels": 3136, "max_pixels": 12544}


def verify(folder: Path, config: dict, capsys, *extra: str, files: dict | None = None) -> dict:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    for name, doc in (files or {}).items():
        (folder / name).write_text(json.dumps(doc))
    argv = ["verify", "--model", str(folder), "--cpu-probe", "--gpu", "L4", "--max-num-batched-tokens", "512", "--max-num-seqs", "8"]
    code = main([*argv, "--kv-cache-memory-bytes", "8M", "--dtype", "float32", "--json", *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)["verify"]


def test_group_slots_follow_the_groups_vllm_makes():
    full, sliding = FullAttentionSpec(16, 2, 16, 2), SlidingWindowSpec(16, 2, 16, 2, sliding_window=64)
    # Gemma-3's 5:1 pattern over 8 layers: 6 sliding, 2 full -> group_size 2 (6 >= 1.5 x 2): sliding groups 0-2, full 3
    specs = [sliding] * 5 + [full] + [sliding, full]
    places = group_slots(specs)
    # sliding layers 0,1,2,3,4,6 are the bucket's j = 0..5: group j % 3, slot j // 3
    assert places == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (3, 0), (2, 1), (3, 1)]
    groups = kv_cache_groups(specs)
    assert [g.num_layers for g in groups] == [sum(1 for p in places if p[0] == i) for i in range(len(groups))] == [2, 2, 2, 2]
    assert group_slots([full] * 3) == [(0, 0), (0, 1), (0, 2)]


def test_a_pool_layer_writes_the_pool_and_attends_its_context():
    pool = torch.zeros(1, 2, 9, 2 * 4 * 3)  # 1 slot, K/V, 9 blocks of 2 tokens x 4 heads x 3
    (layout,) = group_layouts([(4, 2, 4, 3)], requests=2, num_blocks=9)
    assert layout == GroupLayout(first_block=1, blocks_per_request=4, block_size=2, kv_heads=4, head_size=3)
    keys, values = context(pool, 0, 0, layout, 2), context(pool, 0, 1, layout, 2)
    assert tuple(keys.shape) == (2, 4, 8, 3)
    layer = pool_layer_class()(keys, values, length=7)
    assert layer.get_mask_sizes(1) == (8, 0)
    k, v = layer.update(torch.ones(2, 4, 1, 3), torch.full((2, 4, 1, 3), 2.0))
    assert tuple(k.shape) == (2, 4, 8, 3) and layer.get_seq_length() == 8
    # position 7 is the second token of each request's last block: request 0's blocks are 1-4, request 1's 5-8
    for block in (4, 8):
        assert pool[0, 0, block].view(2, 4, 3)[1].eq(1).all() and pool[0, 1, block].view(2, 4, 3)[1].eq(2).all()
        assert pool[0, :, block].view(2, 2, 4, 3)[:, 0].eq(0).all()  # the block's first token untouched
    assert pool[0, :, [0, 1, 2, 3, 5, 6, 7]].eq(0).all()  # the null block and every other block untouched


def test_a_sliding_layer_keeps_its_window():
    pool = torch.zeros(1, 2, 5, 2 * 1 * 1)
    (layout,) = group_layouts([(4, 2, 1, 1)], requests=1, num_blocks=5)
    layer = pool_layer_class()(context(pool, 0, 0, layout, 1), context(pool, 0, 1, layout, 1), length=100, window=4)
    # 100 tokens in, window 4: the query sees the last 3 and itself; the mask starts at 100 - 4 + 1 = 97
    assert layer.get_mask_sizes(1) == (4, 97)
    k, _ = layer.update(torch.ones(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
    assert k.shape[-2] == 4


def test_the_plan_needs_more_blocks_than_the_pool_is_refused():
    from capacity.errors import BadInput

    with pytest.raises(BadInput, match="3 requests need 10 blocks but the planned pool holds 9"):
        group_layouts([(3, 16, 2, 16)], requests=3, num_blocks=9)


def test_verify_runs_a_decoder_only_model_over_the_pool(tmp_path: Path, capsys):
    result = verify(tmp_path / "tiny-llama", TINY_LLAMA, capsys)
    # page 2 x 16 x 2 kv heads x 16 x 4 B = 4,096 per layer, 2 layers: 8,192 B per block; 8 MiB -> 1,024 blocks;
    # cdiv(256, 16) = 16 blocks per request: (1,024 - 1) // 16 = 63 requests, max_num_seqs 8
    assert result["kv_pool_bytes"] == 1024 * 8192 and (result["requests"], result["context_len"], result["encoder_len"]) == (8, 256, 0)
    assert [p["name"] for p in result["phases"]] == ["weights", "kv_pool", "prefill", "decode_0", "decode_1", "decode_2"]
    assert "one request's first 256 tokens" in result["phases"][2]["detail"]  # min(512, max_model_len 256)
    assert result["outcome"] == "verified" and result["oom"] is None


def test_verify_runs_a_vlm_with_its_encoder_cache_alive(tmp_path: Path, capsys):
    config = {**TINY_QWEN_VL, "torch_dtype": "float32"}
    result = verify(tmp_path / "tiny-qwen-vl", config, capsys, files={"preprocessor_config.json": SMALL_QWEN_VL_IMAGES})
    phases = {p["name"]: p for p in result["phases"]}
    assert list(phases) == ["weights", "kv_pool", "encoder", "prefill", "decode_0", "decode_1", "decode_2"]
    # the encoder's outputs stay allocated through prefill and decode: at least the items' tokens x 64 x 4 B
    encoder = phases["encoder"]
    kept = encoder["allocated_after_bytes"] - encoder["allocated_before_bytes"]
    assert "kept as the encoder cache" in encoder["detail"] and kept >= 16 * 64 * 4
    assert phases["decode_0"]["allocated_before_bytes"] >= encoder["allocated_after_bytes"]


# Gemma-3's 5:1 sliding:full layers over 7 layers (layer 5 full), 32-token window, a 28 px SigLIP of 4 patches
TINY_GEMMA3 = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "torch_dtype": "float32",
    "mm_tokens_per_image": 4,
    "image_token_index": 499,
    "boi_token_index": 497,
    "eoi_token_index": 498,
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_hidden_layers": 7,
        "sliding_window": 32,
        "sliding_window_pattern": 6,
        "vocab_size": 500,
        "max_position_embeddings": 256,
    },
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_hidden_layers": 1, "image_size": 28, "patch_size": 14},
}


def test_verify_runs_sliding_window_groups_over_the_pool(tmp_path: Path, capsys):
    result = verify(tmp_path / "tiny-gemma3", TINY_GEMMA3, capsys)
    # 6 sliding + 1 full layer: 7 groups of one slot, page 2 x 16 x 2 x 16 x 4 B = 4,096 B per block, 2,048 blocks;
    # per request the full group's cdiv(256, 16) = 16 blocks and each sliding group's cdiv(256, 16) + 1 = 17
    # (its window reaches max_model_len 256 within one 512-token step): (2,048 - 1) // (16 + 6 x 17) = 17, max_num_seqs 8
    assert result["kv_pool_bytes"] == 2048 * 4096 and result["requests"] == 8
    assert [p["name"] for p in result["phases"]] == ["weights", "kv_pool", "encoder", "prefill", "decode_0", "decode_1", "decode_2"]
    assert result["outcome"] == "verified"


def test_verify_mllama_reads_the_images_keys_from_its_cross_blocks(tmp_path: Path, capsys):
    result = verify(tmp_path / "tiny-mllama", TINY_MLLAMA, capsys)
    # two groups (2 full layers, 2 cross layers) of 2 slots, page 2 x 16 x 2 x 16 x 4 B = 4,096: 8,192 B per block;
    # per request cdiv(256, 16) = 16 self + cdiv(20, 16) = 2 cross blocks: (1,024 - 1) // 18 = 56, max_num_seqs 8
    assert (result["requests"], result["context_len"], result["encoder_len"]) == (8, 256, 20)
    names = [p["name"] for p in result["phases"]]
    assert names == ["weights", "kv_pool", "encoder", "cross_kv", "prefill", "decode_0", "decode_1", "decode_2"]
    assert "cross over 20" in result["phases"][-1]["detail"]
    assert result["outcome"] == "verified"


def test_mllama_cross_layers_attend_the_pool_not_new_states():
    """With the pool as the cache and no states passed, each cross layer attends its 20 cached positions."""
    from capacity.model.family import family_named
    from profilers.pool_cache import pool_cache

    family = family_named("mllama")
    model = family.build_module(TINY_MLLAMA, device="cpu", dtype="float32", init_weights=False).eval()
    text = family.cached_text_model(model)
    lengths: list[int] = []
    for layer in text.layers:
        if hasattr(layer, "cross_attn"):
            layer.cross_attn.o_proj.register_forward_hook(lambda m, args, out: lengths.append(out.shape[1]))
    layers = []
    for i in range(4):
        n = 20 if i in (1, 3) else 31
        layers.append(pool_layer_class()(torch.randn(2, 2, 32, 16), torch.randn(2, 2, 32, 16), n) if n == 31 else pool_layer_class()(torch.randn(2, 2, 20, 16), torch.randn(2, 2, 20, 16), 20))
    with torch.inference_mode():
        kwarg = "cache" if "cache" in __import__("inspect").signature(text.forward).parameters else "past_key_values"
        out = text(input_ids=torch.zeros(2, 1, dtype=torch.long), **{kwarg: pool_cache(layers)}, use_cache=True).last_hidden_state
    assert lengths == [1, 1] and tuple(out.shape) == (2, 1, 64)  # both cross layers ran, one query each
    assert layers[0].get_seq_length() == 32 and layers[1].get_seq_length() == 20  # self grew by one, cross did not


def test_verify_refuses_state_layers_in_one_line(capsys):
    code = main(["verify", "--model", "nvidia/Nemotron-H-56B-Base-8K", "--cpu-probe", "--gpu", "H200"])
    err = capsys.readouterr().err
    assert code == 2 and "verify runs attention KV layers (full, sliding_window, cross)" in err and "mamba" in err and err.count("\n") == 1


def test_verify_runs_gemma3_at_its_catalog_size_on_fake_tensors():
    """The whole steady state of google/gemma-3-4b-it at the H200's defaults, on fake tensors (no memory): 7 KV
    groups (29 sliding layers in 6 groups of 5 slots, the last padded by one; 5 full layers in 1), the pool one
    allocation of num_blocks x bytes_per_block,
    every request's blocks inside it, prefill and decode through transformers over the pool's views."""
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs
    from profilers.probes import FakeProbe
    from profilers.run import WholeModel
    from profilers.verify import run_verify

    plan = plan_for("google/gemma-3-4b-it", ServingArgs(), "H200")
    kv = plan.kv
    assert [g.group.kind for g in kv.groups] == ["sliding_window"] * 6 + ["full"]
    result = run_verify(plan, FakeProbe(), steps=1, placement=WholeModel())  # WholeModel: a meta build the probe adopts
    assert result.oom is None and result.requests == min(plan.concurrency.actual_requests, plan.serving.max_num_seqs)
    pool = next(p for p in result.phases if p.name == "kv_pool")
    assert pool.allocated_after_bytes - pool.allocated_before_bytes == kv.num_blocks * kv.bytes_per_block + plan.memory["block_tables"].bytes
    assert [p.name for p in result.phases] == ["weights", "kv_pool", "encoder", "prefill", "decode_0"]
