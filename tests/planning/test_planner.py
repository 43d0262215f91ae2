"""The planner against numbers worked out by hand from vLLM 0.33's formulas (see comments)."""

from __future__ import annotations

import pytest

from capacity.planning.plan import ERROR

FULL, SLIDING, CROSS = "full", "sliding_window", "cross"  # the kinds as reports name them

GiB = 2**30
TEN_GIB = 10 * GiB  # 10,737,418,240


def hazard_ids(plan, severity=None):
    return {h.id for h in plan.hazards if severity is None or h.severity == severity}


# --- the worked example of the planner issue ------------------------------------------------------------


def test_whisper_large_v3_worked_example(make_plan):
    p = make_plan("openai/whisper-large-v3", kv_cache_memory_bytes=TEN_GIB, max_num_batched_tokens=8192, max_num_seqs=1024, block_size=16)
    # page = 2 x 16 tokens x 20 heads x 64 head_size x 2 B = 81,920 per layer
    assert [(g.group.kind, g.group.num_layers, g.group.page_size_bytes) for g in p.kv.groups] == [(FULL, 32, 81_920), (CROSS, 32, 81_920)]
    assert p.kv.bytes_per_block == 32 * 81_920 == 2_621_440
    assert p.kv.num_blocks == TEN_GIB // 2_621_440 == 4096
    # vLLM: self cdiv(448, 16) = 28 + cross cdiv(8192, 16) = 512; actual cross cdiv(1500, 16) = 94
    assert [g.blocks_per_request_vllm for g in p.kv.groups] == [28, 512]
    assert [g.blocks_per_request_actual for g in p.kv.groups] == [28, 94]
    assert round(p.concurrency.vllm_reported, 2) == 7.59  # 4096 / 540
    assert round(p.concurrency.actual, 2) == 33.57  # 4095 usable / 122
    assert p.concurrency.actual_requests == 33
    assert p.concurrency.tokens_vllm_reported == int(4096 / 540 * 448) == 3398
    # block table: max(448, 8192, 1500) = 8192 tokens -> 512 blocks (a multiple of 8) for both groups
    assert [g.block_table_width_blocks for g in p.kv.groups] == [512, 512]
    # warmup: prompt 2, decode_len 2 + 3 x 1 = 5; blocks 1 + 94; reqs min(1024, 8192 // 2, 4095 // 95 = 43)
    assert (p.warmup.prompt_len, p.warmup.decode_len, p.warmup.num_reqs) == (2, 5, 43)
    assert p.warmup.blocks_per_request == (1, 94)
    assert p.memory["kv_cache"].bytes == TEN_GIB and p.memory["kv_cache"].kind == "exact"
    assert p.verdict == "fits"


def test_whisper_json_contract(make_plan):
    d = make_plan("openai/whisper-large-v3", kv_cache_memory_bytes=TEN_GIB).to_dict()
    assert d["model"]["name"] == "openai/whisper-large-v3"
    assert d["gpu"]["name"] == "H200" and d["gpu"]["total_memory_bytes"] == 150_109_880_320  # measured cudaMemGetInfo total
    for term in ("weights", "activation_peak", "encoder_cache", "non_torch", "cuda_graphs", "kv_cache"):
        assert set(d["memory"][term]) >= {"bytes", "kind"}
        assert d["memory"][term]["kind"] in ("exact", "estimated", "measured")
    assert d["kv_cache"]["bytes_per_block"] == 2_621_440 and d["kv_cache"]["num_blocks"] == 4096
    g = d["kv_cache"]["groups"][1]
    assert (g["kind"], g["num_layers"], g["page_size_bytes"], g["blocks_per_request_vllm"], g["blocks_per_request_actual"], g["block_table_width_blocks"]) == (
        "cross", 32, 81_920, 512, 94, 512,
    )
    # the KV cache holds 33 requests; the server runs min(33, max_num_seqs 1024) = 33, limited by the KV cache
    assert d["concurrency"] == {"vllm_reported": 7.59, "actual": 33.57, "actual_requests": 33, "max_concurrent_requests": 33, "limited_by": "kv_cache"}
    assert d["kv_cache"]["tokens_vllm_reported"] == 3398
    assert d["budget"]["encoder_compute_budget"] == 8192 and d["budget"]["encoder_cache_size"] == 8192
    assert d["budget"]["max_tokens_per_item"] == {"audio": 1500} and d["budget"]["max_items_per_batch"] == {"audio": 5}
    assert (d["warmup"]["prompt_len"], d["warmup"]["decode_len"], d["warmup"]["num_reqs"]) == (2, 5, 43)
    assert all(set(h) >= {"id", "severity", "message"} for h in d["hazards"])
    assert d["verdict"] == "fits"


def test_whisper_exact_memory_terms(make_plan):
    p = make_plan("openai/whisper-large-v3")
    # 1,543,490,560 parameters (published count) x 2 B (float16 checkpoint, dtype auto)
    # 1,543,490,560 parameters + the zero K biases vLLM's fused qkv_proj / kv_proj add (96 x 1280), x 2 B
    assert p.memory["weights"].bytes == (1_543_490_560 + 96 * 1280) * 2 and p.memory["weights"].kind == "exact"
    # 5 audio items x 1500 tokens x 1280 hidden x 2 B
    assert p.memory["encoder_cache"].bytes == 5 * 1500 * 1280 * 2 == 19_200_000
    # requested = ceil(150,109,880,320 x 0.92) = ceil(138,101,089,894.4)
    assert p.requested_memory_bytes == 138_101_089_895


# --- Nemotron-Parse v1.1 ---------------------------------------------------------------------------------


def test_nemotron_parse_defaults_on_h200(make_plan):
    p = make_plan("nvidia/Nemotron-Parse")
    assert p.source.name == "nvidia/NVIDIA-Nemotron-Parse-v1.1" and "alias" in (p.source.alias_note or "")
    s = p.serving
    # max_model_len = decoder.max_sequence_length 9000; chunked prefill off -> mnbt = max(9000, 8192)
    assert (s.max_model_len, s.max_num_batched_tokens, s.max_num_seqs) == (9000, 9000, 1024)
    # (2048 // 16) * ((1648 // 16) // 4) + 1 = 128 * 25 + 1 = 3201
    assert p.budget.max_tokens_per_item == {"image": 3201}
    assert (p.budget.encoder_compute_budget, p.budget.encoder_cache_size) == (9000, 9000)
    assert p.budget.max_items_per_batch == {"image": 2}  # min(9000 // 3201, min(1024, 9000 // 3201) x 1)
    assert p.memory["encoder_cache"].bytes == 2 * 3201 * 1024 * 2 == 13_111_296
    assert p.parameter_count == 936_357_888
    assert p.memory["weights"].bytes == 936_357_888 * 2
    # page 2 x 16 x 16 heads x 64 x 2 B = 65,536; 10 decoder layers per group
    assert p.kv.bytes_per_block == 10 * 65_536 == 655_360
    assert [g.blocks_per_request_vllm for g in p.kv.groups] == [563, 563]  # cdiv(9000, 16) twice
    assert [g.blocks_per_request_actual for g in p.kv.groups] == [563, 201]  # cdiv(3201, 16) = 201
    assert [g.block_table_width_blocks for g in p.kv.groups] == [568, 568]  # 563 rounded up to a multiple of 8
    # no max_source_positions: warmup encoder length falls back to max_model_len 9000 -> 563 cross blocks
    assert p.warmup.max_encoder_len == 9000 and p.warmup.blocks_per_request == (1, 563)


def test_nemotron_parse_fixed_kv_concurrency(make_plan):
    p = make_plan("nvidia/NVIDIA-Nemotron-Parse-v1.1", kv_cache_memory_bytes=TEN_GIB)
    assert p.kv.num_blocks == TEN_GIB // 655_360 == 16_384
    assert round(p.concurrency.vllm_reported, 2) == round(16_384 / 1126, 2) == 14.55
    assert round(p.concurrency.actual, 2) == round(16_383 / 764, 2) == 21.44
    assert p.concurrency.actual_requests == 21


def test_nemotron_parse_block_table_hazard_at_2048(make_plan):
    p = make_plan("nvidia/Nemotron-Parse", max_model_len=2048)
    # mnbt default = max(2048, 8192) = 8192 -> post-fix table covers max(2048, 8192, 0) = 8192 tokens = 512 blocks
    assert p.serving.max_num_batched_tokens == 8192
    assert [g.block_table_width_blocks for g in p.kv.groups] == [512, 512]
    # pre-fix rule: max(2048, no max_source_positions) = 2048 tokens = 128 blocks < 201 needed for 3201 tokens
    assert [g.block_table_width_blocks_pre_fix for g in p.kv.groups] == [128, 128]
    ids = hazard_ids(p)
    assert "cross_attention_block_table_too_narrow_pre_fix" in ids
    assert "warmup_encoder_len_short" in ids  # warmup cross-attention gets 2048 keys, requests carry 3201
    assert "cross_attention_block_table_too_narrow" not in ids
    assert p.warmup.blocks_per_request == (1, 128)  # cdiv(2048, 16)
    assert [g.blocks_per_request_vllm for g in p.kv.groups] == [128, 512]


def test_nemotron_parse_batched_tokens_below_one_image(make_plan):
    p = make_plan("nvidia/Nemotron-Parse", max_model_len=2048, max_num_batched_tokens=3000)
    assert "encoder_item_exceeds_batched_tokens" in hazard_ids(p, ERROR)
    assert p.verdict == "does_not_fit"


# --- sliding window: Gemma-3 ------------------------------------------------------------------------------


def test_gemma3_sliding_window_groups(make_plan):
    p = make_plan("google/gemma-3-4b-it", kv_cache_memory_bytes=TEN_GIB)
    s = p.serving
    assert (s.max_model_len, s.max_num_batched_tokens, s.max_num_seqs) == (131_072, 8192, 1024)
    # 34 layers, full iff (i + 1) % 6 == 0: 29 sliding + 5 full; group_size 5 (29 >= 1.5 x 5)
    kinds = [(g.group.kind, g.group.num_layers, g.group.num_padding_layers) for g in p.kv.groups]
    assert kinds == [(SLIDING, 5, 0)] * 5 + [(SLIDING, 4, 1), (FULL, 5, 0)]
    # page 2 x 16 x 4 kv heads x 256 x 2 B = 65,536; bytes_per_block = 5 x 65,536
    assert p.kv.bytes_per_block == 327_680
    assert p.kv.num_blocks == TEN_GIB // 327_680 == 32_768
    # sliding: cdiv(min(1024 - 1 + 2 x 8192, 131072), 16) + 1 = 1088 + 1; full: cdiv(131072, 16)
    assert [g.blocks_per_request_vllm for g in p.kv.groups] == [1089] * 6 + [8192]
    assert p.kv.blocks_per_request_vllm == 14_726
    assert round(p.concurrency.vllm_reported, 2) == round(32_768 / 14_726, 2) == 2.23
    assert all(g.block_table_width_blocks == 8192 for g in p.kv.groups)  # not bounded by the window
    # 256 tokens per image: 8192 // 256 = 32 images per batch, 32 x 256 x 2560 x 2 B held
    assert p.budget.max_items_per_batch == {"image": 32}
    assert p.memory["encoder_cache"].bytes == 32 * 256 * 2560 * 2


# --- parallelism, dtype, block size, speculative decoding -------------------------------------------------------


def test_tensor_parallel_2_halves_kv_heads(make_plan):
    p = make_plan("openai/whisper-large-v3", kv_cache_memory_bytes=TEN_GIB, tensor_parallel_size=2)
    assert p.kv.groups[0].group.spec.num_kv_heads == 10
    assert p.kv.groups[0].group.page_size_bytes == 40_960
    assert p.kv.bytes_per_block == 32 * 40_960 == 1_310_720
    assert p.kv.num_blocks == 8192
    assert round(p.concurrency.vllm_reported, 2) == round(8192 / 540, 2) == 15.17
    assert round(p.concurrency.actual, 2) == round(8191 / 122, 2) == 67.14
    # Per rank as vLLM's whisper.py lays it out (d_model 1280, 32 + 32 layers, vocab 51866, 128 mel bins):
    # whole on every rank: conv1 1280*128*3+1280 = 492,800; conv2 1280*1280*3+1280 = 4,916,480; encoder positions
    # 1500*1280 = 1,920,000; decoder embed_tokens (an nn.Embedding, proj_out tied to it) 51866*1280 = 66,388,480;
    # decoder positions 448*1280 = 573,440; layer norms 32*2*2560 + 2560 + 32*3*2560 + 2560 = 414,720; row-parallel
    # biases (out_proj, fc2; decoder also encoder_attn.out_proj) 32*2*1280 + 32*3*1280 = 204,800: 74,910,720.
    # The other 1,543,490,560 - 74,910,720 = 1,468,579,840 parameters are split in two: 734,289,920. vLLM's fused
    # qkv_proj / kv_proj allocate the K bias Whisper's checkpoint lacks: 96 attentions x 1280 / 2 = 61,440.
    # (74,910,720 + 734,289,920 + 61,440) x 2 B = 1,618,524,160 B (vLLM's own class: the same, bench reference).
    assert p.memory["weights"].bytes == 1_618_524_160 and p.memory["weights"].kind == "exact"


def test_tensor_parallel_must_divide_heads(make_plan):
    p = make_plan("openai/whisper-large-v3", tensor_parallel_size=3)  # 20 heads
    assert "tp_does_not_divide_heads" in hazard_ids(p, ERROR)


def test_fp8_kv_cache(make_plan):
    p = make_plan("openai/whisper-large-v3", kv_cache_memory_bytes=TEN_GIB, kv_cache_dtype="fp8")
    assert p.kv.groups[0].group.page_size_bytes == 2 * 16 * 20 * 64 * 1 == 40_960
    assert p.kv.num_blocks == 8192


def test_block_size_32(make_plan):
    p = make_plan("openai/whisper-large-v3", kv_cache_memory_bytes=TEN_GIB, block_size=32)
    assert p.kv.bytes_per_block == 32 * 163_840 == 5_242_880
    assert p.kv.num_blocks == 2048
    assert [g.blocks_per_request_vllm for g in p.kv.groups] == [14, 256]  # cdiv(448, 32), cdiv(8192, 32)
    assert [g.blocks_per_request_actual for g in p.kv.groups] == [14, 47]  # cdiv(1500, 32)
    assert [g.block_table_width_blocks for g in p.kv.groups] == [256, 256]  # a multiple of 128 / gcd(128, 32) = 4
    assert round(p.concurrency.actual, 2) == round(2047 / 61, 2) == 33.56
    # warmup: blocks 1 + 47; reqs min(1024, 4096, 2047 // 48 = 42)
    assert p.warmup.blocks_per_request == (1, 47) and p.warmup.num_reqs == 42


def test_speculative_decoding_k2_warmup(make_plan):
    p = make_plan("openai/whisper-large-v3", kv_cache_memory_bytes=TEN_GIB, num_speculative_tokens=2)
    w = p.warmup
    # decode query 1 + 2; prompt 2 + 2; 5 decode steps; decode_len 4 + 5 x 3 = 19
    assert (w.decode_query_len, w.prompt_len, w.num_decode_steps, w.decode_len) == (3, 4, 5, 19)
    # self: cdiv(min(19 + 2 lookahead, 448), 16) = 2; cross: 94; reqs min(1024, 8192 // 4, 4095 // 96 = 42)
    assert w.blocks_per_request == (2, 94) and w.num_reqs == 42
    assert p.kv.blocks_per_request_vllm == 540  # KV sizing does not include lookahead
    assert "prefill_warmup_taken_for_decode" not in hazard_ids(p)
    assert "spec_decode_pre_40746" in hazard_ids(p)
    assert p.cuda_graph_count == 56  # FULL decode sizes rounded up to multiples of 3, <= 512


# --- vLLM's defaults for an H200 and an L4 ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "gpu", "expected"),
    [
        # H200 (140.4 GiB: >= 70 GiB tier, API server): 8192 tokens / 1024 seqs
        ("openai/whisper-large-v3", "H200", (448, 8192, 1024)),
        ("nvidia/NVIDIA-Nemotron-Parse-v1.1", "H200", (9000, 9000, 1024)),
        ("google/gemma-3-4b-it", "H200", (131_072, 8192, 1024)),
        # L4 (22.5 GiB: small tier): 2048 / 256; encoder-decoder raises tokens to max_model_len
        ("openai/whisper-large-v3", "L4", (448, 2048, 256)),
        ("nvidia/NVIDIA-Nemotron-Parse-v1.1", "L4", (9000, 9000, 256)),
        ("google/gemma-3-4b-it", "L4", (131_072, 2048, 256)),
    ],
)
def test_vllm_defaults_by_gpu(make_plan, model, gpu, expected):
    s = make_plan(model, gpu=gpu).serving
    assert (s.max_model_len, s.max_num_batched_tokens, s.max_num_seqs) == expected
    assert (s.gpu_memory_utilization, s.block_size) == (0.92, 16)


def test_l4_whisper_budget_and_graphs(make_plan):
    p = make_plan("openai/whisper-large-v3", gpu="L4")
    assert p.gpu.total_memory_bytes == 2203 * 2**30 // 100  # 22.03 GiB, CUDA's total (a CUDA OOM on an L4)
    assert p.requested_memory_bytes == 21_762_169_792  # ceil(23,654,532,382 x 0.92) = ceil(21,762,169,791.44)
    # budget max(2048, 1500) = 2048 -> 1 item; reqs min(256, 2048 // 1500 = 1)
    assert p.budget.max_items_per_batch == {"audio": 1}
    assert p.cuda_graph_count == 35  # 1, 2, 4, 8..248 step 8, 256
    assert p.cuda_graph_count == len([1, 2, 4, *range(8, 256, 8), 256])


def test_h200_whisper_graph_count(make_plan):
    assert make_plan("openai/whisper-large-v3").cuda_graph_count == len([1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]) == 51


def test_gpt_oss_graph_ceiling_is_preset_to_1024(make_plan):
    # vLLM 0.33 GptOssForCausalLMConfig.verify_and_update_config presets max_cudagraph_capture_size = 1024 ("from 67
    # to 83" graphs in its comment): on an H200 (max_num_seqs 1024, 16384 batched tokens) the FULL decode sizes run
    # 1, 2, 4, 8..248 step 8, 256..1024 step 16 = 3 + 31 + 49 = 83, where another model stops at 512 (51). The count is
    # of capture sizes: 83 PIECEWISE + 83 FULL decode.
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, 1025, 16)]
    assert make_plan("openai/gpt-oss-20b").cuda_graph_count == 2 * len(sizes) == 2 * 83
    # FULL decode graphs are capped by max_num_seqs (they hold at most max_num_seqs requests); PIECEWISE ones are not
    full = [1, 2, 4, *range(8, 256, 8), *range(256, 289, 16)]
    assert make_plan("openai/gpt-oss-20b", max_num_seqs=300).cuda_graph_count == len(sizes) + len(full)


# --- fitting --------------------------------------------------------------------------------------------------


def test_no_room_for_one_request_gives_the_length_that_fits(make_plan):
    # Qwen2.5-VL-7B: 28 layers x page (2 x 16 x 4 x 128 x 2 = 32,768) = 917,504 B per block
    p = make_plan("Qwen/Qwen2.5-VL-7B-Instruct", kv_cache_memory_bytes=2 * GiB)
    assert p.kv.bytes_per_block == 917_504
    assert p.kv.needed_for_one_request_bytes == 917_504 * 8000  # cdiv(128000, 16)
    # (2 GiB - 1 null block) // 917,504 = 2339 blocks -> 2339 x 16 tokens
    assert p.max_model_len_that_fits == 37_424
    assert "no_room_for_one_request" in hazard_ids(p, ERROR)
    assert p.verdict == "does_not_fit"
    assert "--max-model-len 37424" in p.suggested_command()


def test_auto_fit_max_model_len(make_plan):
    p = make_plan("Qwen/Qwen2.5-VL-7B-Instruct", kv_cache_memory_bytes=2 * GiB, max_model_len=-1)
    assert p.serving.max_model_len == 37_424
    assert p.verdict == "fits"


def test_encoder_decoder_cannot_fit_one_token_when_cross_attention_alone_overflows(make_plan):
    # 1 GiB: 408 usable blocks, but cross-attention alone counts cdiv(8192, 16) = 512 per request
    p = make_plan("openai/whisper-large-v3", kv_cache_memory_bytes=GiB)
    assert p.max_model_len_that_fits == 0
    assert "no_room_for_one_request" in hazard_ids(p, ERROR)


def test_qwen_budget_video_dominates(make_plan):
    p = make_plan("Qwen/Qwen2.5-VL-7B-Instruct")
    # image: 12,845,056 // 28^2 = 16,384; video: 14 frames -> 7 pairs x 16,384 = 114,688 (fits 128000)
    assert p.budget.max_tokens_per_item == {"image": 16_384, "video": 114_688}
    assert p.budget.modality_with_max_tokens == "video"
    assert p.budget.encoder_compute_budget == 114_688
    assert p.budget.max_items_per_batch == {"image": 7, "video": 1}
    assert p.memory["encoder_cache"].bytes == 114_688 * 3584 * 2 == 822_083_584


def test_max_model_len_above_derived_is_a_startup_error(make_plan):
    p = make_plan("openai/whisper-large-v3", max_model_len=1000)
    assert "max_model_len_above_model_limit" in hazard_ids(p, ERROR)


def test_unsupported_architectures_are_errors(make_plan):
    assert "model_not_served_by_vllm" in hazard_ids(make_plan("meta-llama/Llama-3.2-11B-Vision-Instruct"), ERROR)
    assert "model_not_served_by_vllm" in hazard_ids(make_plan("google-t5/t5-small"), ERROR)
    assert "model_needs_plugin" in hazard_ids(make_plan("facebook/bart-large"))


def test_mllama_cross_attention_layers(spec_of):
    spec = spec_of("meta-llama/Llama-3.2-11B-Vision-Instruct")
    kinds = [layer.kind for layer in spec.layers]
    assert kinds.count(CROSS) == 8 and kinds.count(FULL) == 32
    assert [i for i, k in enumerate(kinds) if k == CROSS] == [3, 8, 13, 18, 23, 28, 33, 38]
    assert spec.encoder_tokens_per_request == 4 * ((560 // 14) ** 2 + 1) == 6404


# --- block sizes vLLM 0.33's attention backends take ----------------------------------------------------------


@pytest.mark.parametrize(("block_size", "fix"), [(7, 16), (8, 16), (24, 32), (1, 16), (100, 96)])
def test_block_size_not_a_multiple_of_16_is_an_error(make_plan, block_size, fix):
    """FLASH_ATTN [MultipleOf(16)], FLASHINFER [16, 32, 64], TRITON_ATTN (% 16) and FLEX_ATTENTION [MultipleOf(16)]:
    no CUDA backend takes another size, and vLLM raises 'No valid attention backend found'."""
    p = make_plan("openai/whisper-tiny", block_size=block_size)
    hazard = next(h for h in p.hazards if h.id == "block_size_unsupported")
    assert hazard.severity == ERROR and not p.fits
    assert f"--block-size {block_size} is not a multiple of 16" in hazard.message and "AttentionBackend.supports_block_size" in hazard.message
    assert hazard.fix.startswith(f"use --block-size {fix} (allowed: 16, 32, 48, 64, ... any multiple of 16)")


@pytest.mark.parametrize("block_size", [16, 32, 48, 64, 128, 256])
def test_block_sizes_a_backend_takes_are_planned(make_plan, block_size):
    p = make_plan("openai/whisper-tiny", block_size=block_size)
    assert "block_size_unsupported" not in hazard_ids(p) and p.fits
