"""LoRA's memory as vLLM 0.33 (and, at the end, 0.8 to 0.32) allocates it, checked against buffer sizes worked out by hand from Qwen3-8B's config.

Qwen3-8B (catalog config): hidden 4096, intermediate 12288, 32 query heads and 8 KV heads of 128, vocab 151,936,
36 layers, untied embeddings, bfloat16. vLLM's shapes (vllm/lora/layers/*.py create_lora_weights), L adapters of rank r:
- qkv_proj (MergedQKVParallelLinearWithLoRA, 3 slices): lora_a 3 x (L, 1, r, 4096); lora_b (L, 1, 4096/tp, r) and
  2 x (L, 1, 1024/tp, r);
- o_proj (RowParallelLinearWithLoRA): lora_a (L, 1, r, 4096/tp); lora_b (L, 1, 4096, r);
- gate_up_proj (MergedColumnParallelLinearWithLoRA, 2 slices): lora_a 2 x (L, 1, r, 4096); lora_b 2 x (L, 1, 12288/tp, r);
- down_proj (RowParallelLinearWithLoRA): lora_a (L, 1, r, 12288/tp); lora_b (L, 1, 4096, r);
- embed_tokens: (L, 151936, r) + (L, 1, 4096, r); lm_head (logits processor): (L, 1, r, 4096) + (L, 1, 151936, r), and at
  TP 2 an int64 index of the 151,936-row padded vocabulary;
- punica metadata at max_num_batched_tokens T = 8192, max_num_seqs B = 1024 (H200 defaults): 4 x T int64 + 3 x B int64,
  and twice (2 x T int32 + two (L + 1) int32 + one (L + 2) int32), each allocation rounded up to 512 B.
"""

from __future__ import annotations

import json

import pytest

from capacity.cli.app import main

L, R, BF16 = 4, 16, 2
HIDDEN, FFN, Q, KV, VOCAB, LAYERS = 4096, 12288, 32 * 128, 8 * 128, 151_936, 36


def layer_of(n: int, r: int, q: int, kv: int, ffn: int, tp: int = 1) -> int:
    """One decoder layer's buffers for n adapters of rank r (hidden 4096, bfloat16), by the shapes above."""
    qkv = 3 * n * r * HIDDEN * BF16 + n * (q // tp + 2 * kv // tp) * r * BF16
    o_proj = n * r * (q // tp) * BF16 + n * HIDDEN * r * BF16
    gate_up = 2 * n * r * HIDDEN * BF16 + 2 * n * (ffn // tp) * r * BF16
    down = n * r * (ffn // tp) * BF16 + n * HIDDEN * r * BF16
    return qkv + o_proj + gate_up + down


def hand_layer(tp: int) -> int:
    return layer_of(L, R, Q, KV, FFN, tp)


def hand_punica(tokens: int = 8192, seqs: int = 1024) -> int:
    meta = 2 * tokens * 4 + 3 * 512  # (L + 1) x 4 = 20 B and (L + 2) x 4 = 24 B each round up to 512
    return 4 * tokens * 8 + 3 * seqs * 8 + 2 * meta


def hand_buffers(tp: int) -> int:
    embedding = L * VOCAB * R * BF16 + L * HIDDEN * R * BF16
    lm_head = L * R * HIDDEN * BF16 + L * VOCAB * R * BF16 + (VOCAB * 8 if tp > 1 else 0)
    return LAYERS * hand_layer(tp) + embedding + lm_head + hand_punica()


def plan_json(capsys, *args: str) -> dict:
    code = main(["plan", "--model", "Qwen3-8B", "--gpu", "H200", *args, "--json", "-"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


@pytest.mark.parametrize("tp", [1, 2])
def test_qwen3_8b_lora_buffers_equal_vllms_shapes_by_hand(capsys, tp):
    plan = plan_json(capsys, "--enable-lora", "--max-loras", "4", "--max-lora-rank", "16", "--tensor-parallel-size", str(tp))
    term = plan["memory"]["lora_buffers"]
    assert hand_layer(1) == 9_699_328 and hand_layer(2) == 6_684_672  # the worked figures in the report
    assert term["bytes"] == hand_buffers(tp)
    assert term["kind"] == "exact"
    assert plan["serving"]["lora"] == {"max_loras": 4, "max_lora_rank": 16, "max_cpu_loras": 4, "lora_dtype": "bfloat16", "fully_sharded_loras": False, "extra_vocab_size": None}


def test_lora_buffers_count_in_the_non_kv_memory_and_the_graphs_double(capsys):
    off = plan_json(capsys, "--estimate", "formula")
    on = plan_json(capsys, "--estimate", "formula", "--enable-lora", "--max-loras", "4")
    lora = sum(on["memory"][k]["bytes"] for k in ("lora_buffers", "lora_activations", "lora_cuda_graphs"))
    assert on["kv_cache"]["available_bytes"] == off["kv_cache"]["available_bytes"] - lora
    assert on["cuda_graph_count"] == 2 * off["cuda_graph_count"]  # lora cases [0, max_loras + 1]
    assert "lora_buffers" not in off["memory"] and "lora" not in off["serving"]
    # 3 slices x 8192 tokens x rank 16 x float32: qkv_proj's shrink buffer
    assert on["memory"]["lora_activations"]["bytes"] == 3 * 8192 * 16 * 4


def test_fully_sharded_loras_shard_lora_a_of_column_layers_and_lora_b_of_row_layers(capsys):
    plan = plan_json(capsys, "--estimate", "formula", "--enable-lora", "--max-loras", "4", "--fully-sharded-loras", "-tp", "2")
    tp = 2
    qkv = 3 * L * (R // tp) * HIDDEN * BF16 + L * (Q // tp + 2 * KV // tp) * R * BF16
    o_proj = L * R * (Q // tp) * BF16 + L * (HIDDEN // tp) * R * BF16
    gate_up = 2 * L * (R // tp) * HIDDEN * BF16 + 2 * L * (FFN // tp) * R * BF16
    down = L * R * (FFN // tp) * BF16 + L * (HIDDEN // tp) * R * BF16
    sharded = hand_buffers(tp) - LAYERS * hand_layer(tp) + LAYERS * (qkv + o_proj + gate_up + down)
    assert plan["memory"]["lora_buffers"]["bytes"] == sharded


def test_the_suggested_serve_line_carries_the_lora_flags(capsys):
    plan = plan_json(capsys, "--estimate", "formula", "--enable-lora", "--max-loras", "2", "--max-lora-rank", "32", "--max-cpu-loras", "8")
    command = plan["suggestion"]["command"]
    assert "--enable-lora --max-loras 2 --max-lora-rank 32 --max-cpu-loras 8" in command


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--enable-lora", "--max-lora-rank", "12"], "--max-lora-rank 12"),
        (["--enable-lora", "--max-loras", "4", "--max-cpu-loras", "2"], "--max-cpu-loras (2)"),
        (["--enable-lora", "--max-loras", "0"], "--max-loras must be >= 1"),
        (["--max-loras", "4"], "without --enable-lora"),
        (["--enable-lora", "--lora-extra-vocab-size", "256"], "vLLM 0.33 has no such option"),
        (["--enable-lora", "--lora-dtype", "float32"], "--lora-dtype 'float32'"),
        (["--enable-lora", "--fully-sharded-loras", "--max-lora-rank", "1", "-tp", "2"], "not divisible"),
    ],
)
def test_bad_lora_knobs_are_refused_in_one_line(capsys, args, names):
    code = main(["plan", "--model", "Qwen3-8B", "--gpu", "H200", "--estimate", "formula", *args])
    err = capsys.readouterr().err
    assert code == 2 and names in err and err.count("\n") == 1


def test_lora_on_a_moe_model_is_refused(capsys):
    code = main(["plan", "--model", "Qwen3-30B-A3B", "--gpu", "H200", "--estimate", "formula", "--enable-lora"])
    err = capsys.readouterr().err
    assert code == 2 and "MoE" in err and err.count("\n") == 1


def test_serve_yaml_lora_keys_plan_as_the_flags_do(capsys, tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("model: Qwen/Qwen3-8B\nenable-lora: true\nmax-loras: 4\nmax_lora_rank: 16\n")
    code = main(["plan", "--config", str(config), "--gpu", "H200", "--tensor-parallel-size", "2", "--json", "-"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["memory"]["lora_buffers"]["bytes"] == hand_buffers(2)


# --- earlier vLLM versions (capacity/vllm/lora_rules.py, read in each wheel: bench/results/vllm-lora-versions-2026-12-02) ---

PINNED = ("--estimate", "formula", "--enable-lora", "--max-loras", "4", "--max-num-batched-tokens", "8192", "--max-num-seqs", "1024")
EMBEDDING = L * VOCAB * R * BF16 + L * HIDDEN * R * BF16
LM_HEAD = L * R * HIDDEN * BF16 + L * VOCAB * R * BF16


@pytest.mark.parametrize(("version", "index_rows"), [("0.33.0", 1), ("0.30.0", 1), ("0.27.1", 2), ("0.20.2", 2), ("0.17.0", 2)])
def test_before_0_29_the_punica_embedding_index_holds_two_rows_of_tokens(capsys, version, index_rows):
    # PunicaWrapperBase._embeddings_indices: int64 (2, T) before 0.29.0, (T) from it; T = 8192, a multiple of 512
    plan = plan_json(capsys, *PINNED, "--vllm-version", version)
    assert plan["memory"]["lora_buffers"]["bytes"] == hand_buffers(1) + (index_rows - 1) * 8192 * 8


def test_vllm_0_12_to_0_15_wraps_neither_the_embedding_nor_the_lm_head_of_qwen3(capsys):
    plan = plan_json(capsys, *PINNED, "--vllm-version", "0.13.0")  # qwen3.py lists no embedding_modules there
    term = plan["memory"]["lora_buffers"]
    assert term["bytes"] == hand_buffers(1) - EMBEDDING - LM_HEAD + 8192 * 8
    assert "wraps no embedding" in term["method"] and term["method"].startswith("vLLM 0.12-0.15 ")


def test_model_runner_v2_of_0_23_captures_its_graphs_once_with_lora_and_0_24_twice(capsys):
    for version, doubled in (("0.23.0", False), ("0.24.0", True)):
        off = plan_json(capsys, "--estimate", "formula", "--vllm-version", version)
        on = plan_json(capsys, "--estimate", "formula", "--vllm-version", version, "--enable-lora")
        assert on["cuda_graph_count"] == (2 if doubled else 1) * off["cuda_graph_count"]
        # Model Runner V2 of 0.23-0.24 sets no graph memory aside (profile_cudagraph_memory returns 0): the second set,
        # like the first, is captured after the KV cache is sized
        assert on["memory"]["lora_cuda_graphs"]["bytes"] == 0
        after_on, after_off = on["memory"]["graphs_after_budget_bytes"], off["memory"]["graphs_after_budget_bytes"]
        assert after_off > 0 and (after_on > after_off) == doubled


@pytest.mark.parametrize(("gpu", "factor"), [("H200", 1.0), ("GB10", 2.402)])
def test_lora_graphs_cost_what_one_graph_costs_on_the_gpu(capsys, gpu, factor):
    """The second graph set (lora cases [0, max_loras + 1]) at max_num_seqs 256: 51 PIECEWISE sizes of 37 pieces and
    35 FULL decode graphs of 36 layers, each at the GPU's per-graph cost: 140 KiB a piece and 40 KiB a FULL layer on
    the H200, 2.402 x that on a GB10, whose vLLM counts each graph's host side (capacity/memory/unified_memory.py)."""
    code = main(["plan", "--model", "Qwen3-8B", "--gpu", gpu, "--estimate", "formula", "--enable-lora", "--max-num-seqs", "256", "--json", "-"])
    out = capsys.readouterr()
    assert code == 0, out.err
    piece, layer = round(140 * 1024 * factor), round(40 * 1024 * factor)
    assert json.loads(out.out)["memory"]["lora_cuda_graphs"]["bytes"] == 51 * 37 * piece + 35 * 36 * layer


# Llama-3.1-8B (catalog config): hidden 4096, intermediate 14336, 32 query and 8 KV heads of 128, vocab 128,256 (a
# multiple of 256), 32 layers, untied, bfloat16. Before 0.12 vLLM builds LoRA with 256 extra vocabulary rows per adapter.
LLAMA_VOCAB, LLAMA_FFN, LLAMA_LAYERS, E = 128_256, 14_336, 32, 256


def llama_buffers_before_0_12(n: int, r: int, extra: int, tokens: int, seqs: int, long_lora: bool) -> int:
    embedding = n * (LLAMA_VOCAB + extra) * r * BF16 + n * HIDDEN * r * BF16 + n * extra * HIDDEN * BF16  # + embeddings_tensors
    lm_head = n * r * HIDDEN * BF16 + n * (LLAMA_VOCAB + extra) * r * BF16 + n * extra * HIDDEN * BF16  # vocab padded to 256 + extra
    meta = 2 * tokens * 4 + 3 * 512 + 2 * seqs * 4 + 3 * 512  # token mapping by tokens, prompt mapping by max_num_seqs
    punica = 3 * tokens * 8 + 2 * tokens * 8 + 3 * seqs * 8 + (tokens * 8 if long_lora else 0) + meta
    return LLAMA_LAYERS * layer_of(n, r, HIDDEN, KV, LLAMA_FFN) + embedding + lm_head + punica


def llama_plan(capsys, *args: str) -> dict:
    code = main(["plan", "--model", "Llama-3.1-8B-Instruct", "--gpu", "A100-40GB", *args, "--json", "-"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


@pytest.mark.parametrize(("version", "long_lora"), [("0.11.0", False), ("0.10.2", False), ("0.9.2", True)])
def test_before_0_12_llama_lora_carries_256_extra_vocabulary_rows_per_adapter(capsys, version, long_lora):
    args = ("--estimate", "formula", "--enable-lora", "--max-loras", "2", "--max-num-batched-tokens", "2048", "--max-num-seqs", "256")
    plan = llama_plan(capsys, *args, "--vllm-version", version)
    buffers, rows = plan["memory"]["lora_buffers"], plan["memory"]["lora_extra_vocabulary"]
    assert buffers["bytes"] == llama_buffers_before_0_12(2, 16, E, 2048, 256, long_lora)
    assert buffers["kind"] == "exact"  # _long_lora_indices: 0.8-0.9 only, and the release is known
    # embed_tokens: 2 x 256 rows more; lm_head: vocab padded to 256 (128,256 already is) + 256, against 128,256
    assert rows == {"bytes": (2 * E + E) * HIDDEN * BF16, "kind": "exact", "method": rows["method"]}
    off = llama_plan(capsys, "--estimate", "formula", "--max-num-batched-tokens", "2048", "--max-num-seqs", "256", "--vllm-version", version)
    assert plan["cuda_graph_count"] == off["cuda_graph_count"] and plan["memory"]["lora_cuda_graphs"]["bytes"] == 0  # one set
    assert plan["memory"]["lora_activations"]["bytes"] > 3 * 2048 * 16 * 4  # + the sampler's 256 extra logit columns


def test_before_0_12_qwen3_is_not_wrapped_and_gets_no_extra_vocabulary(capsys):
    plan = plan_json(capsys, *PINNED, "--vllm-version", "0.11.0")
    meta = 2 * 8192 * 4 + 3 * 512 + 2 * 1024 * 4 + 3 * 512
    assert plan["memory"]["lora_buffers"]["bytes"] == LAYERS * hand_layer(1) + 3 * 8192 * 8 + 2 * 8192 * 8 + 3 * 1024 * 8 + meta
    assert "lora_extra_vocabulary" not in plan["memory"]


def test_the_extra_vocabulary_size_is_taken_where_vllm_has_it_and_refused_where_not(capsys):
    args = ("--estimate", "formula", "--enable-lora", "--max-num-batched-tokens", "2048", "--max-num-seqs", "256")
    plan = llama_plan(capsys, *args, "--vllm-version", "0.11.0", "--lora-extra-vocab-size", "512")
    assert plan["memory"]["lora_buffers"]["bytes"] == llama_buffers_before_0_12(1, 16, 512, 2048, 256, False)
    for version, size, needle in (("0.33.0", "256", "has no such option"), ("0.11.0", "384", "accepts only 256 or 512")):
        code = main(["plan", "--model", "Llama-3.1-8B-Instruct", "--gpu", "A100-40GB", *args, "--vllm-version", version, "--lora-extra-vocab-size", size])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and needle in err


@pytest.mark.parametrize(("version", "needle"), [("0.11.0", "--max-lora-rank 1: vLLM 0.11 accepts only 8, 16"), ("0.8.5", "V0 engine unless VLLM_USE_V1=1"), ("0.6.6", "V0 engine")])
def test_lora_vllm_cannot_serve_as_planned_is_refused_in_one_line(capsys, version, needle):
    rank = ["--max-lora-rank", "1"] if version == "0.11.0" else []
    code = main(["plan", "--model", "Qwen3-8B", "--gpu", "H200", "--vllm-version", version, "--enable-lora", *rank, "--estimate", "formula"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and needle in err, err


def test_mistral_lora_in_0_12_to_0_15_is_refused_because_its_releases_differ(capsys, tmp_path):
    config = {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_size": 1024,
        "intermediate_size": 2048,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "vocab_size": 32768,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    args = ["plan", "--model", str(tmp_path), "--gpu", "H200", "--enable-lora", "--estimate", "formula"]
    assert main([*args, "--vllm-version", "0.13.0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "0.12-0.14 map MistralForCausalLM to the Llama class" in err
    assert main([*args, "--vllm-version", "0.30.0", "--json", "-"]) == 0
    assert "wraps no embedding" in json.loads(capsys.readouterr().out)["memory"]["lora_buffers"]["method"]


def test_lora_on_0_8_is_planned_on_the_v1_engine_once_vllm_use_v1_is_set(capsys, monkeypatch):
    monkeypatch.setenv("VLLM_USE_V1", "1")  # 0.8's arg_utils keeps LoRA on V1 only when it is set explicitly
    args = ("--estimate", "formula", "--enable-lora", "--max-loras", "2", "--max-num-batched-tokens", "2048", "--max-num-seqs", "256")
    plan = llama_plan(capsys, *args, "--vllm-version", "0.8.5")
    assert plan["memory"]["lora_buffers"]["bytes"] == llama_buffers_before_0_12(2, 16, E, 2048, 256, True)
