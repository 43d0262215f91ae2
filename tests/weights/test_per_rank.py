"""Weights per rank (capacity/weights/per_rank.py), every value worked out by hand in the comments from vLLM 0.33's layers:
ColumnParallelLinear / QKVParallelLinear / RowParallelLinear (linear.py), VocabParallelEmbedding and
ParallelLMHead (vocab_parallel_embedding.py: pad_vocab_size to 64, then / TP), FusedMoE and determine_expert_map,
and the checkpoint formats of AWQ, GPTQ, fp8, NVFP4. Plus: at TP 2 the default
trace path, the formula path and the sweep give the same per-rank terms."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from capacity.cli.app import main
from capacity.errors import BadInput
from capacity.weights.parallel_layers import Parallelism, WeightLayout, pad_vocab_size
from capacity.weights.per_rank import weights_per_rank
from capacity.weights.quant_schemes import quant_scheme, quantized_tensors
from capacity.weights.stored_tensor import MODEL_DTYPE, StoredTensor
from tests.support.paths import REPO_ROOT
from tests.support.safetensors_files import safetensors_bytes

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")


def t(name: str, *shape: int, dtype: str = MODEL_DTYPE) -> StoredTensor:
    return StoredTensor(name, tuple(shape), dtype)


# A Llama-like model: hidden 64, 4 query heads and 2 KV heads of 16, FFN 128, vocab 100, one layer, untied head.
LLAMA = WeightLayout(num_attention_heads=4, num_kv_heads=2, head_size=16)
LLAMA_TENSORS = [
    t("model.embed_tokens.weight", 100, 64),
    t("model.layers.0.input_layernorm.weight", 64),
    t("model.layers.0.self_attn.q_proj.weight", 64, 64),
    t("model.layers.0.self_attn.k_proj.weight", 32, 64),
    t("model.layers.0.self_attn.v_proj.weight", 32, 64),
    t("model.layers.0.self_attn.o_proj.weight", 64, 64),
    t("model.layers.0.post_attention_layernorm.weight", 64),
    t("model.layers.0.mlp.gate_proj.weight", 128, 64),
    t("model.layers.0.mlp.up_proj.weight", 128, 64),
    t("model.layers.0.mlp.down_proj.weight", 64, 128),
    t("model.norm.weight", 64),
    t("lm_head.weight", 100, 64),
]


def test_pad_vocab_size():
    assert pad_vocab_size(100) == 128 and pad_vocab_size(128) == 128 and pad_vocab_size(51866) == 51904


def test_llama_like_at_tp_1_is_every_parameter_once():
    # 100*64 + 64 + 64*64 + 2*32*64 + 64*64 + 64 + 3*128*64 + 64 + 100*64 = 49,856 parameters x 2 B = 99,712 B
    wb = weights_per_rank(LLAMA_TENSORS, LLAMA, Parallelism(1, dtype_bytes=2))
    assert wb.full_bytes == 99_712
    # vLLM allocates the vocabulary padded to 128 rows even at TP 1: + 2 x 28 x 64 x 2 B = 7,168
    assert wb.total_bytes == 99_712 + 7_168


def test_llama_like_at_tp_2_by_hand():
    wb = weights_per_rank(LLAMA_TENSORS, LLAMA, Parallelism(2, dtype_bytes=2))
    # vocab-parallel: 100 rows padded to 128, 64 per rank, embedding and head: 2 x 64 x 64 x 2 B = 16,384
    assert wb.bytes_of("vocab-parallel") == 16_384
    # column: q 32 of 64 rows, gate and up 64 of 128 rows: (32*64 + 2*64*64) x 2 B = 20,480
    assert wb.bytes_of("column-parallel") == 20_480
    # K and V: 2 KV heads over 2 ranks, one head (16 rows) each: 2 x 16 x 64 x 2 B = 4,096
    assert wb.bytes_of("kv-projection") == 4_096
    # row: o_proj 64 x 32 columns, down_proj 64 x 64 columns: (2048 + 4096) x 2 B = 12,288
    assert wb.bytes_of("row-parallel") == 12_288
    # norms whole: 3 x 64 x 2 B = 384
    assert wb.bytes_of("replicated") == 384
    assert wb.total_bytes == 16_384 + 20_480 + 4_096 + 12_288 + 384 == 53_632


def test_kv_heads_replicated_when_fewer_than_tp():
    wb = weights_per_rank(LLAMA_TENSORS, LLAMA, Parallelism(4, dtype_bytes=2))
    # TP 4 > 2 KV heads: num_kv_heads = 1 per rank (replicated twice): K and V keep 16 of 32 rows: 2 x 16 x 64 x 2 B
    assert wb.bytes_of("kv-projection") == 4_096
    # q: 16 of 64 rows; gate/up: 32 of 128: (16*64 + 2*32*64) x 2 B = 10,240
    assert wb.bytes_of("column-parallel") == 10_240
    # vocab: 128 / 4 = 32 rows x 64 x 2 B, twice = 8,192
    assert wb.bytes_of("vocab-parallel") == 8_192


def test_row_parallel_bias_is_whole_column_bias_is_split():
    layout = WeightLayout(num_attention_heads=8, num_kv_heads=8, head_size=8)
    tensors = [t("l.fc1.weight", 256, 64), t("l.fc1.bias", 256), t("l.fc2.weight", 64, 256), t("l.fc2.bias", 64)]
    wb = weights_per_rank(tensors, layout, Parallelism(2, dtype_bytes=2))
    # fc1: (128*64 + 128) x 2 = 16,640; fc2: 64*128*2 + the whole bias 64*2 = 16,512
    assert wb.bytes_of("column-parallel") == 16_640
    assert wb.bytes_of("row-parallel") == 16_512


def test_tied_head_counted_once():
    tied = WeightLayout(num_attention_heads=4, num_kv_heads=2, head_size=16, tie_word_embeddings=True)
    wb1 = weights_per_rank(LLAMA_TENSORS, tied, Parallelism(1, dtype_bytes=2))
    # the stored lm_head is the embedding in vLLM: 49,856 - 6,400 parameters, the embedding padded to 128 rows
    assert wb1.total_bytes == (49_856 - 6_400) * 2 + 28 * 64 * 2
    assert wb1.bytes_of("tied (counted in the embedding)") == 0


def test_moe_experts_all_resident_split_by_tp_or_divided_by_ep():
    moe = WeightLayout(num_attention_heads=4, num_kv_heads=2, head_size=16, num_experts=6)
    # 6 experts as a checkpoint stores them: gate/up 32 x 64 and down 64 x 32 each: 6 x 3 x 2048 x 2 B = 73,728 B
    experts = [t(f"model.layers.0.mlp.experts.{e}.{p}.weight", *s) for e in range(6) for p, s in (("gate_proj", (32, 64)), ("up_proj", (32, 64)), ("down_proj", (64, 32)))]
    router = t("model.layers.0.mlp.gate.weight", 6, 64)
    full = 6 * 3 * 2048 * 2
    assert weights_per_rank(experts, moe, Parallelism(1, dtype_bytes=2)).bytes_of("moe-experts") == full
    # without EP every rank holds all 6 experts with half the intermediate size
    assert weights_per_rank(experts, moe, Parallelism(2, dtype_bytes=2)).bytes_of("moe-experts") == full // 2
    # EP over 4 ranks: 6 // 4 = 1 each, the first 6 % 4 = 2 ranks one more: rank 0 holds 2 whole experts
    ep = weights_per_rank([*experts, router], moe, Parallelism(4, enable_expert_parallel=True, dtype_bytes=2))
    assert ep.bytes_of("moe-experts") == 2 * 3 * 2048 * 2 == 24_576
    assert ep.bytes_of("replicated") == 6 * 64 * 2  # the router is a ReplicatedLinear
    # ranks 1, 2, 3 hold experts 2-3, 4, 5: 2, 1, 1 experts
    held = [weights_per_rank(experts, moe, Parallelism(4, True, 2, rank=r)).bytes_of("moe-experts") // (3 * 2048 * 2) for r in range(4)]
    assert held == [2, 2, 1, 1]


def test_fused_moe_experts_of_a_meta_build():
    moe = WeightLayout(num_attention_heads=4, num_kv_heads=2, head_size=16, num_experts=8)
    fused = [t("model.layers.0.mlp.experts.gate_up_proj", 8, 64, 64), t("model.layers.0.mlp.experts.down_proj", 8, 64, 32)]
    # 8 x (64*64 + 64*32) x 2 B = 98,304; TP 2 without EP: half; EP over 2: 4 experts = half too
    assert weights_per_rank(fused, moe, Parallelism(2, dtype_bytes=2)).total_bytes == 49_152
    assert weights_per_rank(fused, moe, Parallelism(2, enable_expert_parallel=True, dtype_bytes=2)).total_bytes == 49_152


# --- quantization_config arithmetic (one 4096 x 4096 linear layer) -----------------------------------------

LINEAR = [t("model.layers.0.self_attn.o_proj.weight", 4096, 4096)]
WIDE = WeightLayout(num_attention_heads=32, num_kv_heads=32, head_size=128)


def quantized_bytes(qc: dict, tp: int = 1) -> int:
    scheme = quant_scheme({"quantization_config": qc})
    assert scheme is not None
    return weights_per_rank(quantized_tensors(LINEAR, scheme, WIDE), WIDE, Parallelism(tp, dtype_bytes=2)).total_bytes


def test_awq_4bit_group_128():
    # qweight int32 [4096, 4096/8] = 8,388,608 B; qzeros int32 [32, 512] = 65,536 B; scales fp16 [32, 4096] = 262,144 B
    assert quantized_bytes({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}) == 8_716_288
    # row-parallel at TP 2: every tensor split along the input rows: half of each
    assert quantized_bytes({"quant_method": "awq", "bits": 4, "group_size": 128}, tp=2) == 8_716_288 // 2


def test_gptq_4bit_group_128():
    # qweight int32 [512, 4096] = 8,388,608; g_idx int32 [4096] = 16,384; qzeros [32, 512] x 4 = 65,536; scales [32, 4096] x 2 = 262,144
    assert quantized_bytes({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}) == 8_732_672


def test_fp8_block_and_per_tensor():
    # fp8 weight 4096 x 4096 x 1 B = 16,777,216; block scales fp32 [32, 32] = 4,096
    assert quantized_bytes({"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}) == 16_781_312
    # per-tensor: one fp32 weight scale, and one input scale when activations are static
    assert quantized_bytes({"quant_method": "fp8", "activation_scheme": "static"}) == 16_777_216 + 4 + 4


def test_nvfp4_modelopt():
    # uint8 [4096, 2048] = 8,388,608; fp8 scales [4096, 4096/16] = 1,048,576; weight_scale_2 and input_scale fp32: 8
    assert quantized_bytes({"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4", "group_size": 16}}) == 9_437_192


def test_compressed_tensors_w4a16_group_128():
    qc = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}}},
    }
    # weight_packed int32 [4096, 512] = 8,388,608; weight_scale bf16 [4096, 32] = 262,144; weight_shape int64 [2] = 16
    assert quantized_bytes(qc) == 8_650_768


def test_mxfp4_experts_only_with_wildcard_exclusions():
    """gpt-oss style: quant_method mxfp4, attention excluded by `model.layers.*.self_attn`; only the experts are
    MXFP4. Fused experts [2 experts, 64 out, 128 in]: uint8 weights 2*64*128/2 = 8,192 B and one e8m0 scale per 32
    values, 2*64*4 = 512 B; the excluded q_proj stays bf16, 64*64*2 = 8,192 B."""
    scheme = quant_scheme({"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}})
    assert scheme is not None
    moe = WeightLayout(num_attention_heads=4, num_kv_heads=4, head_size=16, num_experts=2)
    tensors = [t("model.layers.0.self_attn.q_proj.weight", 64, 64), t("model.layers.0.mlp.experts.gate_up_proj", 2, 64, 128)]
    wb = weights_per_rank(quantized_tensors(tensors, scheme, moe), moe, Parallelism(1, dtype_bytes=2))
    assert wb.bytes_of("moe-experts") == 8_192 + 512
    assert wb.bytes_of("column-parallel") == 8_192


def test_unknown_quantization_fails_closed_naming_the_field():
    with pytest.raises(BadInput, match="quantization_config.quant_method 'bitsandbytes'"):
        quant_scheme({"quantization_config": {"quant_method": "bitsandbytes"}})
    with pytest.raises(BadInput, match="quantization_config.bits"):
        quant_scheme({"quantization_config": {"quant_method": "awq", "bits": 3}})


def test_headers_keep_quantized_stored_bytes_and_cast_dense_tensors():
    # From safetensors headers: an AWQ layer as stored, and a float32 norm that vLLM loads in bfloat16.
    tensors = [
        t("l.o_proj.qweight", 4096, 512, dtype="I32"),
        t("l.o_proj.qzeros", 32, 512, dtype="I32"),
        t("l.o_proj.scales", 32, 4096, dtype="F16"),
        t("l.norm.weight", 4096, dtype="F32"),
    ]
    wb = weights_per_rank(tensors, WIDE, Parallelism(1, dtype_bytes=2))
    assert wb.total_bytes == 8_716_288 + 4096 * 2


# --- the same per-rank terms on every path --------------------------------------------------------


@pytest.fixture()
def hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.delenv("CAPACITY_ESTIMATE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_tp2_weights_same_on_trace_formula_and_sweep_paths(hermetic: Path, capsys: pytest.CaptureFixture[str]):
    pytest.importorskip("torch")
    base = ["--model", "openai/whisper-tiny", "--gpu", "L4", "-tp", "2", "--json"]
    traced = _json(capsys, ["plan", *base])
    formula = _json(capsys, ["plan", *base, "--estimate", "formula"])
    # the sweep traces once for TP 1 and 2 (TP is not a traced knob) and must still equal plan at each TP
    sweep = _json(capsys, ["sweep", "--model", "openai/whisper-tiny", "--gpu", "L4", "-tp", "1,2", "--json"])
    # whisper-tiny per rank at TP 2 (d_model 384, 4 + 4 layers, vocab 51865, 80 mel bins), whole on every rank:
    # conv1 384*80*3+384 = 92,544; conv2 384*384*3+384 = 442,752; encoder positions 1500*384 = 576,000; decoder
    # embed_tokens (nn.Embedding in vLLM's whisper.py) 51865*384 = 19,916,160; decoder positions 448*384 = 172,032;
    # layer norms 4*2*768 + 768 + 4*3*768 + 768 = 16,896; row-parallel biases 4*2*384 + 4*3*384 = 7,680: 21,224,064.
    # The other 37,760,640 - 21,224,064 = 16,536,576 parameters halve: 8,268,288. vLLM's fused qkv_proj and
    # cross-attention kv_proj also allocate a K bias whisper's checkpoint lacks: 12 x 384, halved: 2,304.
    # (21,224,064 + 8,268,288 + 2,304) x 2 B.
    expected = (21_224_064 + 8_268_288 + 2_304) * 2
    assert expected == 58_989_312
    assert traced["memory"]["weights"]["bytes"] == formula["memory"]["weights"]["bytes"] == expected
    tp1_point, point = sweep["points"]
    assert point["tensor_parallel_size"] == 2 and point["weights_bytes"] == expected
    # plan (default trace) and sweep agree on the whole point, not only the weights
    assert point["non_kv_bytes"] == traced["memory"]["non_kv_bytes"]
    assert point["num_blocks"] == traced["kv_cache"]["num_blocks"]
    assert point["actual_requests"] == traced["concurrency"]["actual_requests"]
    assert point["warnings"] == " ".join(h["id"] for h in traced["hazards"] if h["severity"] == "warning")
    # the trace's activations are one rank's. whisper-tiny's peak is the sampler's warmup-param pass: its head is
    # tied to a whole embedding in vLLM, so at TP 2 the logits' all-gather leaves 2 x 51,865 columns of 2 B logits
    # alive (logits[..., :vocab] is a view) under the pass's three fp32 copies, where TP 1 held 51,865 columns:
    # 256 rows (L4's max_num_seqs) x 51,865 x 2 B more
    tp1 = _json(capsys, ["plan", *base[:-3], "-tp", "1", "--json"])
    assert (tp1_point["actual_requests"], tp1_point["non_kv_bytes"]) == (tp1["concurrency"]["actual_requests"], tp1["memory"]["non_kv_bytes"])
    assert traced["memory"]["activation_peak"]["bytes"] == tp1["memory"]["activation_peak"]["bytes"] + 256 * 51865 * 2
    assert "per rank at TP 2" in traced["memory"]["activation_peak"]["method"]


def test_per_rank_headroom_divides_encoder_and_decoder_phases_not_the_sampler():
    """A profile measured on the whole model, re-planned at TP 2: each phase's peak above the level before
    profile_run scales by the formula's per-rank ratio (the decoder's less the encoder outputs it holds)."""
    from dataclasses import replace

    from capacity.gpu.catalog import gpu_by_name
    from capacity.memory.measured_profile import Fingerprint, MemoryProfile, PhaseMeasurement
    from capacity.memory.rank_scaling import per_rank_headroom, rank_scaling
    from capacity.model.registry import model_spec
    from capacity.serving.config import ServingArgs, resolve_serving
    from capacity.source.resolve import resolve_model

    source = resolve_model("openai/whisper-tiny")
    spec = model_spec(source)
    serving = resolve_serving(ServingArgs(tensor_parallel_size=2), spec, gpu_by_name("L4"))
    scaling = replace(rank_scaling(spec, serving, measured_tp=1), sampler_extra_bytes=0)  # the gather: below
    # whisper-tiny: hidden 384, FFN 1536, not gated. Per token at TP 1: 2*384 + max(4*384, 2*1536) = 3,840 elements;
    # at TP 2: 2*384 + max(3*384//2 + 384, 2*1536//2) = 768 + max(960, 1536) = 2,304: ratio 0.6 (encoder and decoder alike)
    assert scaling.encoder_ratio == scaling.decoder_ratio == 2304 / 3840 == 0.6

    def phase(name: str, before: int, peak: int) -> PhaseMeasurement:
        return PhaseMeasurement(name, "", 0.0, before, before, peak, 0, None, None, None)

    fingerprint = Fingerprint(*(["x"] * 4), 0, *(["x"] * 11), {})  # type: ignore[arg-type]
    base = 1_000_000
    profile = MemoryProfile(
        fingerprint=fingerprint, baseline_device_used_bytes=0, weights_bytes=base, encoder_items=1, encoder_tokens_per_item=1,
        encoder_cache_bytes=100_000, total_consumed_bytes=base, transient_peak_headroom_bytes=900_000, warmup_peak_bytes=None,
        cuda_graphs=None, phases=(phase("encoder", base, base + 500_000), phase("decoder", base + 100_000, base + 900_000), phase("sampler", base + 100_000, base + 300_000)),
    )  # fmt: skip
    # decoder: 100,000 held + (900,000 - 100,000) x 0.6 = 580,000; encoder 500,000 x 0.6 = 300,000; sampler 300,000 whole
    assert per_rank_headroom(profile, scaling) == 580_000
    # a sampler-bound profile keeps its sampler peak
    sampler_bound = replace(profile, phases=(*profile.phases[:2], phase("sampler", base, base + 700_000)))
    assert per_rank_headroom(sampler_bound, scaling) == 700_000
    # ... plus what the logits' all-gather adds at TP 2 (RankScaling.sampler_extra_bytes)
    assert per_rank_headroom(sampler_bound, replace(scaling, sampler_extra_bytes=50_000)) == 750_000


def _llama_folder(root: Path, **extra: object) -> Path:
    folder = root / "llama"
    folder.mkdir()
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 1, "vocab_size": 100,
        "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps({**config, **extra}))
    return folder


def _breakdown(folder: Path, **knobs: object):
    from capacity.gpu.catalog import gpu_by_name
    from capacity.memory.weights import weights_breakdown, weights_term
    from capacity.model.registry import model_spec
    from capacity.serving.config import ServingArgs, resolve_serving
    from capacity.source.resolve import resolve_model

    source = resolve_model(str(folder))
    spec = model_spec(source)
    serving = resolve_serving(ServingArgs(**knobs), spec, gpu_by_name("H200"))  # type: ignore[arg-type]
    return weights_breakdown(spec, source, serving), weights_term(spec, source, serving)[0]


def test_safetensors_headers_of_a_folder_at_tp2(hermetic: Path):
    """A folder with a Llama-like config and a header-only safetensors file: the same hand value as above."""
    folder = _llama_folder(hermetic)
    header_only = safetensors_bytes({tensor.name: ("F32", list(tensor.shape)) for tensor in LLAMA_TENSORS}, with_data=False)
    (folder / "model.safetensors").write_bytes(header_only)
    wb, term = _breakdown(folder, tensor_parallel_size=2)
    assert wb.total_bytes == term.bytes == 53_632  # float32 stored, loaded in bfloat16: the TP 2 hand value above
    assert wb.source == "safetensors headers of the model folder"


def test_awq_config_without_headers_is_per_scheme_arithmetic(hermetic: Path):
    """The Llama-like model with an AWQ quantization_config and no safetensors: the meta build's linear weights
    become AWQ's stored tensors. 4-bit, group 32, per [out, in] layer: qweight in*out/8 int32 = in*out/2 B, qzeros
    (in/32)*(out/8) int32 = in*out/64 B, scales (in/32)*out fp16 = in*out/16 B: in*out*37/64 B. Linear parameters
    4096 (q) + 2*2048 (k, v) + 4096 (o) + 3*8192 (gate, up, down) = 36,864: 21,312 B. Unquantized: embedding and
    LM head padded to 128 rows, 2 x 128*64*2 = 32,768 B; norms 3*64*2 = 384 B. 54,464 B."""
    folder = _llama_folder(hermetic, quantization_config={"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True, "version": "gemm"})
    wb, term = _breakdown(folder)
    assert wb.total_bytes == term.bytes == 54_464
    assert term.kind == "estimated" and "awq" in term.method and "quantization_config" in term.method
    # TP 2: every quantized tensor halves along its split axis (column: out, row: in), K and V keep one of their two
    # heads, the padded vocabulary halves, the norms stay: 21,312 / 2 + 16,384 + 384 = 27,424 B
    wb2, _ = _breakdown(folder, tensor_parallel_size=2)
    assert wb2.total_bytes == 27_424


def test_unknown_quantization_in_a_folder_exits_2_naming_the_field(hermetic: Path, capsys: pytest.CaptureFixture[str]):
    folder = _llama_folder(hermetic, quantization_config={"quant_method": "hqq"})
    code = main(["plan", "--model", str(folder), "--estimate", "formula"])
    err = capsys.readouterr().err
    assert code == 2 and "quantization_config.quant_method 'hqq'" in err and len(err.strip().splitlines()) == 1


# --- against vLLM itself ----------------------------------------------------------------------------------

REFERENCE = REPO_ROOT / "bench" / "results" / "vllm-weights-reference-2026-11-30" / "reference.json"


def _reference_cases() -> list[dict]:
    return [c for c in json.loads(REFERENCE.read_text())["cases"] if "rank0_parameter_bytes" in c]


# The GPU on which vLLM 0.33 picks each MXFP4 MoE backend a gpt-oss case names (capacity/weights/mxfp4.py backend_for).
_BACKEND_GPU = {"TRITON": "H200", "MARLIN": "L40S", "FLASHINFER_TRTLLM_MXFP4_BF16": "B200"}


def _case_id(c: dict) -> str:
    limits = "".join(f"-{m}{n}" for m, n in c.get("limit_mm", {}).items())
    return f"{c['model']}-tp{c['tp']}{'-ep' if c.get('ep') else ''}{'-' + c['mxfp4_backend'] if c.get('mxfp4_backend') else ''}{limits}"


def _case_source(model: str):
    """The catalog entry, or with `#key` its config's sub-config alone (a published VL config's text_config)."""
    from capacity.source.resolve import ModelSource, resolve_model

    name, _, key = model.partition("#")
    source = resolve_model(name)
    if not key:
        return source
    return ModelSource(name=model, requested=model, origin="catalog", config=source.config[key])


@pytest.mark.parametrize("case", _reference_cases(), ids=_case_id)
def test_weights_per_rank_equal_vllm_own_model_classes(case: dict, hermetic: Path):
    """bench/vllm_weights_reference.py built vLLM 0.33's own model class on the meta device with its parallel
    layers seeing a TP group of the case's size, and summed rank 0's parameter bytes (committed numbers). gpt-oss:
    the MXFP4 experts as created for the backend vLLM picks on the case's GPU, and what stays after the backend's
    load-time conversion (the weights figure capacity plans with)."""
    pytest.importorskip("torch")
    from capacity.gpu.catalog import gpu_by_name
    from capacity.memory.weights import weights_breakdown
    from capacity.model.registry import model_spec
    from capacity.serving.config import ServingArgs, resolve_serving

    source = _case_source(case["model"])
    spec = model_spec(source)
    gpu = gpu_by_name(_BACKEND_GPU.get(case.get("mxfp4_backend", ""), "H200"))
    # LFM2.5-VL's images are not countable without its processor files (resolve_serving refuses them), but the weights
    # of the whole model (image limit > 0: the tower is built) do not depend on the count: the limits are set after.
    args = ServingArgs(tensor_parallel_size=case["tp"], enable_expert_parallel=bool(case.get("ep")), dtype=case["dtype"], limit_mm_per_prompt={m.name: 0 for m in spec.modalities if m.unmodelled})
    serving = replace(resolve_serving(args, spec, gpu), limit_mm_per_prompt={m.name: 999 for m in spec.modalities} | case.get("limit_mm", {}))
    wb = weights_breakdown(spec, source, serving, gpu=gpu)
    if "rank0_after_load_bytes" in case:
        assert wb.total_bytes == case["rank0_after_load_bytes"]
        assert wb.total_bytes - wb.bytes_of("mxfp4 kernel format (load-time conversion)") == case["rank0_parameter_bytes"]
        assert case["mxfp4_backend"] in wb.quantization
    else:
        assert wb.total_bytes == case["rank0_parameter_bytes"]


def test_quantized_checkpoint_known_by_its_header_summary_only(hermetic: Path):
    """A Hub checkpoint whose headers were summed (no tensor names): TP 1 is the summary's bytes; at TP 2 the stored
    total is split as the layout worked out from quantization_config splits. The Llama-like AWQ model above stores
    I32 qweight + qzeros 36,864 x 33/64 = 19,008 B, F16 scales 1,152 + embedding, head and norms 12,992 elements,
    and (say) one 1,000-element F32 tensor: 19,008 + 14,144 x 2 + 4,000 = 51,296 B once loaded in float16.
    The AWQ layout is 47,296 B whole (21,312 quantized + 25,600 embedding and head + 384 norms), 27,424 B on rank 0
    at TP 2: 51,296 x 27,424 // 47,296 = 29,743 B."""
    from capacity.gpu.catalog import gpu_by_name
    from capacity.memory.weights import weights_term
    from capacity.model.registry import model_spec
    from capacity.serving.config import ServingArgs, resolve_serving
    from capacity.source.checkpoint import CheckpointWeights
    from capacity.source.resolve import resolve_model

    folder = _llama_folder(hermetic, quantization_config={"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm"})
    summary = CheckpointWeights(
        source="safetensors headers of acme/llama-awq read from the Hub",
        element_count=4_752 + 14_144 + 1_000,
        data_bytes=19_008 + 14_144 * 2 + 4_000,
        tensor_count=40,
        elements_by_dtype={"I32": 4_752, "F16": 14_144, "F32": 1_000},
        bytes_by_dtype={"I32": 19_008, "F16": 28_288, "F32": 4_000},
    )
    source = replace(resolve_model(str(folder)), origin="hub", path=None, weights=summary)
    spec = model_spec(source)
    for tp, expected in ((1, 51_296), (2, 29_743)):
        serving = resolve_serving(ServingArgs(tensor_parallel_size=tp, dtype="float16"), spec, gpu_by_name("H200"))
        term = weights_term(spec, source, serving)[0]
        assert term.bytes == expected and term.kind == "estimated"


def test_fp8_moe_catalog_checkpoint_from_its_quantization_config(hermetic: Path):
    """Qwen/Qwen3-30B-A3B-FP8 (catalog: config.json only) is planned from its quantization_config: fp8 block
    [128, 128], lm_head and the routers (`mlp.gate`) left bf16. By hand (hidden 2048, 48 layers, 32 heads and 4 KV
    heads of 128, 128 experts of 768, vocab 151,936): per layer q 4096*2048 + fp32 scales 32*16*4 = 8,390,656;
    k and v 2 x (512*2048 + 4*16*4) = 2,097,664; o 2048*4096 + 16*32*4 = 8,390,656; experts gate/up 128*1536*2048 +
    128*12*16*4 = 402,751,488 and down 128*2048*768 + 128*16*6*4 = 201,375,744; router 128*2048*2 = 524,288; norms
    (2048 + 2048 + 128 + 128)*2 = 8,704: 623,539,200 x 48 = 29,929,881,600; embedding and LM head 2*151936*2048*2 =
    1,244,659,712; final norm 4,096. Total 31,174,545,408 B."""
    pytest.importorskip("torch")
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    plan = plan_for("Qwen/Qwen3-30B-A3B-FP8", ServingArgs(), "H200")
    weights = plan.memory["weights"]
    assert weights.bytes == 31_174_545_408 and weights.kind == "estimated" and "fp8" in weights.method
    assert plan.weights_per_rank is not None and plan.weights_per_rank.unclassified == ()
    # DeepSeek-V3 (MLA: q_a_proj and kv_a_proj_with_mqa are ReplicatedLinear, quantized too) plans at TP 8
    ds = plan_for("deepseek-ai/DeepSeek-V3", ServingArgs(tensor_parallel_size=8), "H200")
    assert ds.weights_per_rank is not None and ds.weights_per_rank.unclassified == ()
    assert ds.memory["weights"].kind == "estimated" and ds.weights_per_rank.bytes_of("replicated-linear") > 0


def test_a_layouts_remembered_classifications_are_classifys_and_a_repeat_gives_the_same_breakdown():
    """classify's answers are kept per layout (parallel_layers.classifications): a breakdown worked out with them
    equals one worked out from an empty memo, and every remembered answer is what classify gives."""
    from capacity.weights import parallel_layers

    parallel_layers._CLASSIFIED.clear()
    first = weights_per_rank(LLAMA_TENSORS, LLAMA, Parallelism(2, dtype_bytes=2))
    memo = parallel_layers.classifications(LLAMA)
    assert len(memo) == len(LLAMA_TENSORS)
    assert all(memo[tensor] is parallel_layers.classify(tensor, LLAMA) for tensor in LLAMA_TENSORS)
    copies = [StoredTensor(x.name, x.shape, x.dtype) for x in LLAMA_TENSORS]  # equal tensors, new objects
    assert weights_per_rank(copies, LLAMA, Parallelism(2, dtype_bytes=2)) == first
    tied = replace(LLAMA, tie_word_embeddings=True)  # another layout: its own answers (the head is tied there)
    assert parallel_layers.classifications(tied) is not memo
    weights_per_rank(LLAMA_TENSORS, tied, Parallelism(1, dtype_bytes=2))
    assert parallel_layers.classifications(tied)[LLAMA_TENSORS[-1]] is parallel_layers.TIED
