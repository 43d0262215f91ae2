"""What vLLM 0.33.0's own model classes allocate for weights on one tensor-parallel rank, for the cases in CASES.

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_weights_reference.py \
        bench/results/vllm-weights-reference-2026-11-30/reference.json

For each case the script builds a real VllmConfig from the case's config.json (the catalog's) on vLLM's CPU
platform, initialises a one-process distributed group, and then has vLLM's parallel layers see a
tensor-parallel group of the case's size: `get_tensor_model_parallel_world_size` and
`get_tensor_model_parallel_rank` are replaced, in every loaded module that imported them, by the case's TP size
and rank (rank 0, the largest). The model class vLLM picks for the architecture is then built on the meta
device (no memory) in the case's dtype, and the bytes of its unique parameters are summed: the weights one rank
holds before load-time repacking. tests/weights/test_per_rank.py compares capacity's `weights_breakdown` with these
numbers. Nemotron-Parse is not among the cases: its config needs the model's remote code
(hf_nemotron_parse_config.py), which is not in the catalog.

gpt-oss-20b's MXFP4 experts (GptOssMxfp4MoEMethod.create_weights) take their padded sizes from the MoE backend,
which vLLM selects from the GPU (select_mxfp4_moe_backend); on the CPU platform it would pick its CPU backend, so
each gpt-oss case names the backend vLLM 0.33 picks on a GPU kind and the script has the method take it (the
method's own maybe_roundup_sizes and create_weights then run unchanged). What the backend's load-time conversion
(process_weights_after_loading) leaves resident is recorded as "rank0_after_load_bytes":
- TRITON (Hopper): the conversion runs triton_kernels' own layout code (the copy vLLM ships in
  vllm/third_party/triton_kernels) on meta tensors, as _swizzle_mxfp4 does on SM90: the block scales padded to a
  multiple of 4 groups, HopperMXValueLayout / HopperMXScaleLayout (mx_axis 1, 8 warps) swizzle values and scales,
  the checkpoint-layout weights and scales are deleted, the biases become float32;
- FLASHINFER_TRTLLM_MXFP4_BF16 and MARLIN cannot run on a CPU (flashinfer and gptq_marlin_repack are CUDA code):
  their conversion is written out from reading vLLM's code, in after_load_bytes() below.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "capacity" / "source" / "catalog" / "models"

CASES: list[dict] = [
    {"model": "openai/whisper-tiny", "tp": 1},
    {"model": "openai/whisper-tiny", "tp": 2},
    {"model": "openai/whisper-large-v3", "tp": 1},
    {"model": "openai/whisper-large-v3", "tp": 2},
    {"model": "openai/whisper-large-v3", "tp": 4},
    {"model": "meta-llama/Llama-3.1-8B-Instruct", "tp": 1},
    {"model": "meta-llama/Llama-3.1-8B-Instruct", "tp": 2},
    {"model": "meta-llama/Llama-3.1-8B-Instruct", "tp": 8},  # 8 KV heads: one per rank
    {"model": "Qwen/Qwen3-30B-A3B", "tp": 2},
    {"model": "Qwen/Qwen3-30B-A3B", "tp": 4},
    {"model": "Qwen/Qwen3-30B-A3B", "tp": 4, "ep": True},
    {"model": "Qwen/Qwen3-30B-A3B", "tp": 8},  # 4 KV heads < 8: replicated
    {"model": "google/gemma-3-4b-it", "tp": 1},
    {"model": "google/gemma-3-4b-it", "tp": 2},
    {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "tp": 1},
    {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "tp": 2},
    {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "tp": 4},
    {"model": "google/gemma-4-26B-A4B", "tp": 1},
    {"model": "google/gemma-4-26B-A4B", "tp": 2},
    {"model": "google/gemma-4-26B-A4B", "tp": 4},  # 2 global KV heads < 4: one per rank
    {"model": "google/gemma-4-26B-A4B", "tp": 4, "ep": True},
    # Gemma-4 E2B (published config): audio tower, per-layer input embeddings (embed_tokens_per_layer, vocab-parallel),
    # KV-shared layers with q_proj only; without the audio tower (audio=0) and without both towers (every modality 0)
    {"model": "google/gemma-4-E2B-it", "tp": 1},
    {"model": "google/gemma-4-E2B-it", "tp": 2},
    {"model": "google/gemma-4-E2B-it", "tp": 4},
    {"model": "google/gemma-4-E2B-it", "tp": 1, "limit_mm": {"audio": 0}},
    {"model": "google/gemma-4-E2B-it", "tp": 2, "limit_mm": {"image": 0, "video": 0, "audio": 0}},
    # gpt-oss-20b (MXFP4 experts): the MoE method's backend decides the padded sizes, and vLLM picks it from the GPU
    # (select_mxfp4_moe_backend), which the CPU platform cannot: each case names the backend vLLM 0.33 picks on a GPU
    # kind (Hopper: TRITON; Ampere / Ada / consumer Blackwell: MARLIN; data-centre Blackwell: FLASHINFER_TRTLLM_MXFP4_BF16)
    # and the script has the MoE method take it. "after_load" adds what the backend's load-time conversion leaves.
    # LFM2.5-VL-1.6B (published config; no safetensors index in the catalog): whole, and with --limit-mm-per-prompt
    # image=0, where vLLM leaves out the modules built under _mark_tower_model (vision tower and projector); its
    # text_config alone (Lfm2ForCausalLM)
    {"model": "LiquidAI/LFM2.5-VL-1.6B", "tp": 1},
    {"model": "LiquidAI/LFM2.5-VL-1.6B", "tp": 2},
    {"model": "LiquidAI/LFM2.5-VL-1.6B", "tp": 1, "limit_mm": {"image": 0}},
    {"model": "LiquidAI/LFM2.5-VL-1.6B", "tp": 2, "limit_mm": {"image": 0}},
    {"model": "LiquidAI/LFM2.5-VL-1.6B#text_config", "tp": 1},
    {"model": "LiquidAI/LFM2.5-VL-1.6B#text_config", "tp": 4},
    # the towers vLLM 0.33 leaves out (_mark_tower_model) when every one of their modalities is limited to 0
    {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "tp": 2, "limit_mm": {"image": 0, "video": 0}},
    {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "tp": 1, "limit_mm": {"video": 0}},
    {"model": "google/gemma-3-4b-it", "tp": 1, "limit_mm": {"image": 0}},
    {"model": "Qwen/Qwen2-Audio-7B-Instruct", "tp": 1, "limit_mm": {"audio": 0}},
    {"model": "Qwen/Qwen3-VL-4B-Instruct", "tp": 1, "limit_mm": {"image": 0, "video": 0}},
    # LLaVA-NeXT (published llava-v1.6-vicuna-7b-hf config): the CLIP tower built to vision_feature_layer -2 (23 of 24
    # layers, no post_layernorm), image_newline and the projector; left out at image=0
    # LLaVA-1.5 (published llava-1.5-7b-hf config): the same CLIP-L/14-336 tower rule as LLaVA-NeXT (llava.py)
    {"model": "llava-hf/llava-1.5-7b-hf", "tp": 1},
    {"model": "llava-hf/llava-1.5-7b-hf", "tp": 2},
    {"model": "llava-hf/llava-v1.6-vicuna-7b-hf", "tp": 1},
    {"model": "llava-hf/llava-v1.6-vicuna-7b-hf", "tp": 2},
    {"model": "llava-hf/llava-v1.6-vicuna-7b-hf", "tp": 1, "limit_mm": {"image": 0}},
    {"model": "openai/gpt-oss-20b", "tp": 1, "mxfp4_backend": "TRITON"},
    {"model": "openai/gpt-oss-20b", "tp": 2, "mxfp4_backend": "TRITON"},
    {"model": "openai/gpt-oss-20b", "tp": 2, "ep": True, "mxfp4_backend": "TRITON"},
    {"model": "openai/gpt-oss-20b", "tp": 1, "mxfp4_backend": "MARLIN"},
    {"model": "openai/gpt-oss-20b", "tp": 2, "mxfp4_backend": "MARLIN"},
    {"model": "openai/gpt-oss-20b", "tp": 2, "mxfp4_backend": "FLASHINFER_TRTLLM_MXFP4_BF16"},
    # hybrids: gated delta net (Qwen3-Next, Qwen3.5: in_proj_qkvz / in_proj_ba / conv1d column-parallel, A_log and
    # dt_bias split by heads, out_proj row) and Mamba-2 mixers (Nemotron-H), at TP 1, 2 and 4
    {"model": "Qwen/Qwen3-Next-80B-A3B-Thinking", "tp": 1},
    {"model": "Qwen/Qwen3-Next-80B-A3B-Thinking", "tp": 2},
    {"model": "Qwen/Qwen3-Next-80B-A3B-Thinking", "tp": 4},
    {"model": "Qwen/Qwen3.5-27B", "tp": 1},
    {"model": "Qwen/Qwen3.5-27B", "tp": 2},
    {"model": "Qwen/Qwen3.5-0.8B", "tp": 2},
    {"model": "nvidia/Nemotron-H-56B-Base-8K", "tp": 1},
    {"model": "nvidia/Nemotron-H-56B-Base-8K", "tp": 2},
    {"model": "nvidia/Nemotron-H-56B-Base-8K", "tp": 4},
]

TP = {"size": 1, "rank": 0}


def model_folder(model: str, root: Path) -> Path:
    """A folder with the catalog's files for `model` (a folder entry, or a single config file); `model#key`: the
    config's sub-config `key` alone as config.json (a published VL config's text_config)."""
    model, _, key = model.partition("#")
    stem = model.replace("/", "--")
    folder = root / (stem + (f"--{key}" if key else ""))
    folder.mkdir(exist_ok=True)
    src = CATALOG / stem
    if src.is_dir():
        for f in src.iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
    else:
        (folder / "config.json").write_bytes((CATALOG / f"{stem}.json").read_bytes())
    if key:
        (folder / "config.json").write_text(json.dumps(json.loads((folder / "config.json").read_text())[key]))
    return folder


def patch_tp() -> None:
    """Every loaded module's view of the TP group: TP["size"] ranks, this one TP["rank"]."""
    for module in list(sys.modules.values()):
        if module is None:
            continue
        for name, fn in (("get_tensor_model_parallel_world_size", lambda: TP["size"]), ("get_tensor_model_parallel_rank", lambda: TP["rank"])):
            if hasattr(module, name):
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(module, name, fn)


def force_mxfp4_backend(name: str | None) -> None:
    """Have GptOssMxfp4MoEMethod take the named backend instead of selecting one for the (CPU) platform."""
    from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import Mxfp4MoeBackend
    from vllm.model_executor.layers.quantization import mxfp4

    original = getattr(force_mxfp4_backend, "original", None) or mxfp4.select_mxfp4_moe_backend
    force_mxfp4_backend.original = original  # type: ignore[attr-defined]
    mxfp4.select_mxfp4_moe_backend = original if name is None else (lambda moe, activation_key=None: (Mxfp4MoeBackend[name], None))


def hopper_swizzled_bytes(weight, scale) -> int:
    """Bytes of triton_kernels' Hopper layouts of one MXFP4 weight [E, N, K / 2] and its scales [E, N, K / 32], as
    vLLM's _swizzle_mxfp4 builds them on SM90 (scales padded to 0 mod 4 groups first), on meta tensors."""
    import torch
    from vllm.utils.import_utils import import_triton_kernels

    import_triton_kernels()
    from triton_kernels.tensor import FP4, convert_layout, wrap_torch_tensor
    from triton_kernels.tensor_details.layout import HopperMXScaleLayout, HopperMXValueLayout

    scale = torch.nn.functional.pad(scale, (0, -scale.shape[-1] % 4))
    value = convert_layout(wrap_torch_tensor(weight.transpose(-2, -1), dtype=FP4), HopperMXValueLayout, mx_axis=1)
    swizzled = convert_layout(wrap_torch_tensor(scale.transpose(-2, -1)), HopperMXScaleLayout, mx_axis=1, num_warps=8)
    return sum(t.storage.data.numel() * t.storage.data.element_size() for t in (value, swizzled))


def after_load_bytes(model, backend: str) -> int:
    """Rank 0's parameter bytes once each MXFP4 MoE layer's process_weights_after_loading has run for `backend`."""
    import torch

    total = sum(p.numel() * p.element_size() for _, p in model.named_parameters(remove_duplicate=True))
    for module in model.modules():
        w13 = getattr(module, "w13_weight", None)
        if w13 is None or getattr(getattr(module, "quant_method", None), "weight_dtype", "") != "gpt_oss_mxfp4":
            continue
        bias = sum(b.numel() for b in (module.w13_bias, module.w2_bias))
        created = sum(t.numel() * t.element_size() for t in (module.w13_weight, module.w2_weight, module.w13_weight_scale, module.w2_weight_scale))
        if backend == "TRITON":
            # convert_gpt_oss_weight_to_mxfp4_moe_kernel_format: biases .to(float32); _swizzle_mxfp4 on both weights
            swizzled = hopper_swizzled_bytes(module.w13_weight, module.w13_weight_scale) + hopper_swizzled_bytes(module.w2_weight, module.w2_weight_scale)
            total += swizzled - created + bias * (4 - 2)
        elif backend == "FLASHINFER_TRTLLM_MXFP4_BF16":
            # TRTLLM branch: weights and scales permuted and interleaved into tensors of their own shapes (the scales
            # reshaped back to [E, N, K / 32]), biases .to(float32); TrtLlmMxfp4ExpertsBase.__init__ adds gemm1_alpha,
            # gemm1_beta and gemm1_clamp_limit, float32 [local experts] each (gpt-oss sets all three).
            total += bias * (4 - 2) + 3 * module.w13_weight.shape[0] * torch.tensor([], dtype=torch.float32).element_size()
        elif backend == "MARLIN":
            # prepare_moe_mxfp4_layer_for_marlin: gptq_marlin_repack keeps size_k x size_n / 8 int32 per expert (the
            # packed bytes), the scales stay one e8m0 byte per 32 values (permuted), the biases stay in params_dtype.
            pass
        else:
            raise ValueError(f"no load-time conversion written out for {backend}")
    return total


def no_compiled_activation_kernels() -> None:
    """QuickGELU (CLIP's activation) binds torch.ops._C.gelu_quick in its constructor on the CPU platform too, and
    this CPU install has no vllm._C: the constructor is run without the binding. The module holds no parameters,
    so the bytes summed do not change."""
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers import activation

    activation.QuickGELU.__init__ = lambda self: CustomOp.__init__(self)


def main() -> None:
    import torch
    import vllm
    from vllm.config import set_current_vllm_config
    from vllm.distributed import destroy_model_parallel, init_distributed_environment, initialize_model_parallel
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import get_model_architecture

    out_path = Path(sys.argv[1])
    no_compiled_activation_kernels()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = False
        only = os.environ.get("MODELS")  # a comma-separated subset of the cases' models
        for case in CASES:
            if only and case["model"] not in only.split(","):
                continue
            folder = model_folder(case["model"], root)
            args = EngineArgs(
                model=str(folder),
                tokenizer=str(folder),
                skip_tokenizer_init=True,
                enforce_eager=True,
                dtype="bfloat16",
                max_model_len=case.get("max_model_len", 4096 if "whisper" not in case["model"] else 448),
                enable_expert_parallel=bool(case.get("ep")),
                **({"limit_mm_per_prompt": case["limit_mm"]} if "limit_mm" in case else {}),
            )
            cfg = args.create_engine_config()
            with set_current_vllm_config(cfg):
                if not started:
                    init_distributed_environment(world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{root / 'dist'}", backend="gloo")
                    started = True
                destroy_model_parallel()
                initialize_model_parallel(1, 1)  # per case: the EP group exists only for a MoE config
                cls, arch = get_model_architecture(cfg.model_config)
                TP["size"], TP["rank"] = case["tp"], 0
                patch_tp()
                force_mxfp4_backend(case.get("mxfp4_backend"))
                torch.set_default_dtype(torch.bfloat16)
                t0 = time.perf_counter()
                try:
                    with torch.device("meta"):
                        model = cls(vllm_config=cfg, prefix="")
                except Exception as exc:  # record what vLLM refused, keep going
                    results.append({**case, "architecture": arch, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                    print(case, "error", exc, file=sys.stderr)
                    continue
                total = sum(p.numel() * p.element_size() for _, p in model.named_parameters(remove_duplicate=True))
                result = {**case, "architecture": arch, "dtype": "bfloat16", "rank": 0, "rank0_parameter_bytes": int(total)}
                if case.get("mxfp4_backend"):
                    result["rank0_after_load_bytes"] = int(after_load_bytes(model, case["mxfp4_backend"]))
                results.append({**result, "build_s": round(time.perf_counter() - t0, 2)})
                print(results[-1], file=sys.stderr)
                del model
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(
        json.dumps(
            {
                "vllm": vllm.__version__,
                "torch": torch.__version__,
                "platform": "vLLM CPU platform (VLLM_TARGET_DEVICE=cpu), models built on the meta device",
                "method": "bench/vllm_weights_reference.py: vLLM's model class with get_tensor_model_parallel_world_size/rank replaced by the case's TP size and rank 0; "
                "gpt-oss cases: the MXFP4 MoE backend named by the case (select_mxfp4_moe_backend replaced), rank0_after_load_bytes after its load-time conversion "
                "(TRITON: triton_kernels' Hopper layouts run on meta tensors; TRTLLM, MARLIN: written out in after_load_bytes)",
                "cases": results,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
