"""gpt-oss MXFP4 (capacity/weights/mxfp4.py): the MoE backend vLLM 0.33 picks per GPU, its padded expert sizes and load-time
conversion, and the whole plan of openai/gpt-oss-20b, every figure worked out by hand from the catalog's config
(hidden 2880, intermediate 2880, 32 experts, 24 layers, 64 query and 8 KV heads of 64, vocab 201,088) and vLLM's
code: GptOssMxfp4MoEMethod.create_weights, mxfp4_round_up_hidden_size_and_intermediate_size,
convert_gpt_oss_weight_to_mxfp4_moe_kernel_format. bench/vllm_weights_reference.py checks the same figures against
vLLM's own model class (tests/weights/test_per_rank.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from capacity.cli.app import main
from capacity.errors import BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.weights.mxfp4 import MARLIN, TRITON, TRTLLM_BF16, ExpertShapes, backend_for, gpt_oss_mxfp4

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")


@pytest.fixture()
def hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No HF cache, the default estimate (the trace path, not the test suite's formula), a scratch directory."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.delenv("CAPACITY_ESTIMATE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


GPT_OSS = {
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_local_experts": 32,
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]},
}


@pytest.mark.parametrize(
    ("gpu", "backend"),
    [("H200", TRITON), ("H100-80GB", TRITON), ("B200", TRTLLM_BF16), ("A100-80GB", MARLIN), ("L40S", MARLIN), ("RTX-5090", MARLIN)],
)
def test_backend_vllm_picks_for_the_gpu(gpu: str, backend):
    assert backend_for(gpu_by_name(gpu))[0] is backend


@pytest.mark.parametrize(("gpu", "why"), [("T4", "below 8.0"), ("MI300X", "rocm"), ("80GiB", "given by its size")])
def test_gpus_where_the_backend_is_unknown_or_vllm_refuses_are_refused(gpu: str, why: str):
    with pytest.raises(BadInput, match=why):
        backend_for(gpu_by_name(gpu))


def test_only_gpt_oss_mxfp4_configs_take_this_layout():
    assert gpt_oss_mxfp4({**GPT_OSS, "model_type": "llama"}, gpu_by_name("H200")) is None
    assert gpt_oss_mxfp4({**GPT_OSS, "quantization_config": {"quant_method": "fp8"}}, gpu_by_name("H200")) is None
    with pytest.raises(BadInput, match="plan with a GPU"):
        gpt_oss_mxfp4(GPT_OSS, None)


def test_padded_sizes_per_backend_and_tensor_parallelism():
    h200, b200, l40s = (gpt_oss_mxfp4(GPT_OSS, gpu_by_name(g)) for g in ("H200", "B200", "L40S"))
    assert h200 is not None and b200 is not None and l40s is not None
    # TRITON: intermediate to a multiple of 64 (2880 is one; 1440 -> 1472, 720 -> 768), hidden kept
    assert h200.shapes(1, False) == ExpertShapes(32, 2880, 2880)
    assert h200.shapes(2, False) == ExpertShapes(32, 2880, 1472)
    assert h200.shapes(4, False) == ExpertShapes(32, 2880, 768)
    # TRTLLM and MARLIN: hidden to 256 (3072), intermediate to 128 (2880 -> 2944, 1440 -> 1536)
    assert b200.shapes(1, False) == l40s.shapes(1, False) == ExpertShapes(32, 3072, 2944)
    assert b200.shapes(2, False) == ExpertShapes(32, 3072, 1536)
    # --enable-expert-parallel at TP 2: MoE TP 1 (the whole intermediate size), 16 experts a rank
    assert h200.shapes(2, True) == ExpertShapes(16, 2880, 2880)
    with pytest.raises(BadInput, match="does not divide"):
        h200.shapes(7, False)


def test_created_tensors_and_conversions_by_hand():
    # TP 1, TRITON: w13 32*5760*1440 = 265,420,800; its scales 32*5760*90 = 16,588,800; w2 32*2880*1440 = 132,710,400;
    # its scales 32*2880*90 = 8,294,400; biases bf16 32*5760*2 = 368,640 and 32*2880*2 = 184,320
    shapes = ExpertShapes(32, 2880, 2880)
    assert shapes.created() == {
        "w13_weight": 265_420_800,
        "w13_weight_scale": 16_588_800,
        "w2_weight": 132_710_400,
        "w2_weight_scale": 8_294_400,
        "w13_bias": 368_640,
        "w2_bias": 184_320,
    }
    # Hopper swizzle: w13 scales rows 5760 -> 5888 (256), groups 90 -> 92 (0 mod 4): 32*5888*92 = 17,334,272 (+745,472);
    # w2 scales rows 2880 -> 3072: 32*3072*92 = 9,043,968 (+749,568); values need no padding (rows to 16, bytes to
    # 32: 5760, 2880 and 1440 are multiples); biases to float32: +(184,320 + 92,160) * 2 = 552,960. Total 2,048,000.
    assert TRITON.conversion_bytes(shapes) == 745_472 + 749_568 + 552_960
    # TRTLLM at TP 2 (3072, 1536): biases 32*(3072 + 3072) elements * 2 = 393,216, gemm1 alpha/beta/clamp 3*32*4 = 384
    assert TRTLLM_BF16.conversion_bytes(ExpertShapes(32, 3072, 1536)) == 393_216 + 384
    assert MARLIN.conversion_bytes(shapes) == 0


def test_gpt_oss_20b_weights_by_hand(hermetic: Path):
    """Per layer outside the experts at TP 1: q, k, v 5120*2880*2 = 29,491,200 + biases 10,240; o 2880*4096*2 =
    23,592,960 + bias 5,760; sinks 64*2 = 128; norms 2*2880*2 = 11,520; router 32*2880*2 + 32*2 = 184,384: 53,296,192
    x 24 = 1,279,108,608; embedding and LM head 2*201,088*2880*2 = 2,316,533,760; final norm 5,760. Experts (TRITON,
    H100) 423,567,360 created + 2,048,000 converted a layer, x 24 = 10,214,768,640. Total 13,810,416,768 B.
    At TP 2: vocab rows 100,544 a rank: 1,158,266,880; per layer q 2048*2880*2 = 11,796,480 + 4,096, k and v
    256 each: 2,949,120 + 1,024, o 11,796,480 + 5,760 (bias whole), sinks 32*2 = 64, norms 11,520, router 184,384:
    26,748,928 x 24 = 641,974,272; experts (2880, 1472): 135,659,520 + 8,478,720 + 67,829,760 + 4,239,360 + 188,416 +
    184,320 = 216,580,096 created, + scales 32*3072*92 - 8,478,720 = 565,248 and 32*3072*48 - 4,239,360 = 479,232,
    + biases 186,368 * 2 = 372,736 converted: 217,997,312 x 24 = 5,231,935,488. Total 7,032,182,400 B."""
    pytest.importorskip("torch")
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    tp1 = plan_for("openai/gpt-oss-20b", ServingArgs(), "H100-80GB")
    assert tp1.memory["weights"].bytes == 13_810_416_768
    assert tp1.memory["weights"].kind == "exact" and tp1.memory["weights"].method.startswith("exact (from config, vLLM 0.33 MXFP4 layout)")
    wb = tp1.weights_per_rank
    assert wb is not None and wb.unclassified == ()
    assert wb.bytes_of("moe-experts (mxfp4, as vLLM creates them)") == 24 * 423_567_360
    assert wb.bytes_of("mxfp4 kernel format (load-time conversion)") == 24 * 2_048_000
    tp2 = plan_for("openai/gpt-oss-20b", ServingArgs(tensor_parallel_size=2), "H100-80GB")
    assert tp2.memory["weights"].bytes == 7_032_182_400
    assert tp2.weights_per_rank is not None and tp2.weights_per_rank.bytes_of("column-parallel") == 24 * (11_796_480 + 4_096 + 64)


def test_gpt_oss_20b_plans_alike_on_every_path(hermetic: Path, capsys: pytest.CaptureFixture[str]):
    """The default path, --estimate formula and the sweep plan the same weights (and the same KV cache at TP 2)."""
    pytest.importorskip("torch")
    figures = []
    for extra in ([], ["--estimate", "formula"]):
        assert main(["plan", "--model", "openai/gpt-oss-20b", "--gpu", "H100-80GB", "-tp", "2", "--json", *extra]) == 0
        memory = json.loads(capsys.readouterr().out)["memory"]
        figures.append((memory["weights"]["bytes"], memory["kv_cache"]["bytes"]))
    assert figures[0] == figures[1] and figures[0][0] == 7_032_182_400
    csv_path = hermetic / "sweep.csv"
    assert main(["sweep", "--model", "openai/gpt-oss-20b", "--gpu", "H100-80GB", "-tp", "1,2", "--max-num-seqs", "64", "--csv", str(csv_path)]) == 0
    rows = {r["tensor_parallel_size"]: int(r["weights_bytes"]) for r in csv.DictReader(csv_path.open())}
    assert rows == {"1": 13_810_416_768, "2": 7_032_182_400}


def test_gpt_oss_on_a_gpu_vllm_refuses_exits_2_in_one_line(hermetic: Path, capsys: pytest.CaptureFixture[str]):
    pytest.importorskip("torch")
    assert main(["plan", "--model", "openai/gpt-oss-20b", "--gpu", "T4"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and "Mxfp4Config.get_min_capability 80" in captured.err


def test_checkpoint_headers_give_the_dense_tensors_and_vllm_the_experts(hermetic: Path):
    """A folder with gpt-oss's safetensors layout (experts stored as *_blocks / *_scales / *_bias): the dense tensors
    come from the headers (bf16), the experts are what vLLM allocates, not what is stored. A one-layer model: hidden
    64, intermediate 64, 2 experts, 4 query and 2 KV heads of 16, vocab 128. On an H200 (TRITON, no padding at 64):
    experts w13 2*128*32 = 8,192 + scales 2*128*2 = 512, w2 2*64*32 = 4,096 + scales 2*64*2 = 256, biases
    (2*128 + 2*64)*2 = 768: 13,824; conversion: scales swizzled to rows 256 and 4 groups, 2*256*4 - 512 = 1,536 and
    2*256*4 - 256 = 1,792, biases +384*2 = 768: 4,096. Dense: embedding and head 2*128*64*2 = 32,768; q, k, v, o
    (64 + 32 + 32 + 64)*64*2 = 24,576 + biases (64 + 32 + 32 + 64)*2 = 384; sinks 4*2 = 8; norms 3*64*2 = 384;
    router 2*64*2 + 2*2 = 260: 58,380. Total 76,300 B. On a B200 (FLASHINFER_TRTLLM_MXFP4_BF16) the experts are padded
    to hidden 256 and intermediate 128, far from the stored 13,824 B: w13 2*256*128 = 65,536 + scales 2*256*8 = 4,096,
    w2 2*256*64 = 32,768 + scales 2*256*4 = 2,048, biases (2*256 + 2*256)*2 = 2,048: 106,496; conversion biases
    +1,024*2 = 2,048 and 3 float32 vectors of 2 experts = 24: 2,072. Total 166,948 B."""
    pytest.importorskip("torch")
    from capacity.memory.weights import weights_breakdown
    from capacity.model.registry import model_spec
    from capacity.serving.config import ServingArgs, resolve_serving
    from capacity.source.resolve import resolve_model
    from tests.support.safetensors_files import safetensors_bytes

    config = {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "hidden_size": 64,
        "intermediate_size": 64,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 128,
        "sliding_window": 8,
        "layer_types": ["sliding_attention"],
        "max_position_embeddings": 256,
        "tie_word_embeddings": False,
        "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
    }
    layer = "model.layers.0"
    tensors = {
        "model.embed_tokens.weight": ("BF16", [128, 64]),
        "lm_head.weight": ("BF16", [128, 64]),
        "model.norm.weight": ("BF16", [64]),
        f"{layer}.input_layernorm.weight": ("BF16", [64]),
        f"{layer}.post_attention_layernorm.weight": ("BF16", [64]),
        f"{layer}.self_attn.sinks": ("BF16", [4]),
        **{f"{layer}.self_attn.{p}.weight": ("BF16", [n, 64]) for p, n in (("q_proj", 64), ("k_proj", 32), ("v_proj", 32))},
        **{f"{layer}.self_attn.{p}.bias": ("BF16", [n]) for p, n in (("q_proj", 64), ("k_proj", 32), ("v_proj", 32), ("o_proj", 64))},
        f"{layer}.self_attn.o_proj.weight": ("BF16", [64, 64]),
        f"{layer}.mlp.router.weight": ("BF16", [2, 64]),
        f"{layer}.mlp.router.bias": ("BF16", [2]),
        f"{layer}.mlp.experts.gate_up_proj_blocks": ("U8", [2, 128, 2, 16]),
        f"{layer}.mlp.experts.gate_up_proj_scales": ("U8", [2, 128, 2]),
        f"{layer}.mlp.experts.gate_up_proj_bias": ("BF16", [2, 128]),
        f"{layer}.mlp.experts.down_proj_blocks": ("U8", [2, 64, 2, 16]),
        f"{layer}.mlp.experts.down_proj_scales": ("U8", [2, 64, 2]),
        f"{layer}.mlp.experts.down_proj_bias": ("BF16", [2, 64]),
    }
    folder = hermetic / "tiny-gpt-oss"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(safetensors_bytes(tensors, with_data=False))
    source = resolve_model(str(folder))
    spec = model_spec(source)
    gpu = gpu_by_name("H200")
    serving = resolve_serving(ServingArgs(), spec, gpu)
    wb = weights_breakdown(spec, source, serving, gpu=gpu)
    assert wb.source == "safetensors headers of the model folder" and wb.unclassified == ()
    assert wb.bytes_of("moe-experts (mxfp4, as vLLM creates them)") == 13_824
    assert wb.bytes_of("mxfp4 kernel format (load-time conversion)") == 4_096
    assert wb.total_bytes == 76_300
    b200 = gpu_by_name("B200")
    wb = weights_breakdown(spec, source, resolve_serving(ServingArgs(), spec, b200), gpu=b200)
    assert wb.bytes_of("moe-experts (mxfp4, as vLLM creates them)") == 106_496
    assert wb.total_bytes == 58_380 + 106_496 + 2_072
