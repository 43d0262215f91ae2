"""What vLLM 0.33.0's own code gives for Qwen/Qwen2.5-Omni-7B-AWQ (the catalog's published configs): the weights its
thinker class allocates on one tensor-parallel rank, and the tokens per multimodal item it budgets.

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_omni_reference.py \
        bench/results/vllm-omni-reference-2026-12-01/reference.json

Weights: as bench/vllm_weights_reference.py does (vLLM's CPU platform, a one-process group, the TP size and rank
patched into vLLM's parallel layers), the class vLLM's registry picks for `Qwen2_5OmniForConditionalGeneration`
(`Qwen2_5OmniThinkerForConditionalGeneration`) is built on the meta device from the catalog folder, with the
checkpoint's AWQ `quantization_config`, in bfloat16. On the CPU platform `AutoAWQConfig.get_quant_method` gives every
quantized linear layer `AutoAWQMarlinLinearMethod`, whose `create_weights` is the one the CUDA platform runs too
(qweight / qzeros int32, scales in the model dtype; the kernel is chosen per platform but the created tensors do not
depend on it). The unique parameter bytes are summed, per top-level module (`visual`, `audio_tower`, `language_model`)
and per dtype: what one rank holds before `process_weights_after_loading`. What the CUDA kernels leave after it
cannot run here (their repacks are CUDA ops); it is written out in `after_load_bytes` from vLLM's code:
- MarlinLinearKernel (compute capability 7.5-8.x, 10.x, 12.x; 9.0 where Machete cannot take the shape):
  `_convert_awq_to_standard_format` repacks qweight [K, N/8] -> [K/8, N] and qzeros [G, N/8] -> [N/8, G] (int32, the
  same bytes), `gptq_marlin_repack`, `marlin_permute_scales` and `marlin_zero_points` keep the sizes (no padding: every
  shape here is a multiple of Marlin's tiles): after = created;
- MacheteLinearKernel (compute capability 9.0 exactly, shapes in % 64 and out % 128): `machete_prepack_B` returns
  `torch::empty_like(B)` (the same bytes), the scales stay, and the zero points become `-scales x zeros` in the
  scales' dtype, [G, N]: each layer's qzeros grow from G x N / 8 int32 to G x N bf16 (4x).
Buffers (the audio tower's fp32 sinusoid table, rotary inv_freq) are not parameters and not counted.

Tokens: `Qwen2_5OmniThinkerProcessingInfo.get_mm_max_tokens_per_item` run on a stand-in `self` whose HF processor
holds transformers' `Qwen2VLImageProcessor` and `WhisperFeatureExtractor` built from the catalog's
preprocessor_config.json (the tokenizer plays no part in the counts and is not in the catalog), at several seq_lens,
and the dummy inputs' sizes (`Qwen2_5OmniThinkerDummyInputsBuilder.get_dummy_mm_data`: audio length, image size,
video frames).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from vllm_weights_reference import TP, model_folder, patch_tp  # noqa: E402

MODEL = "Qwen/Qwen2.5-Omni-7B-AWQ"
CATALOG = ROOT / "capacity" / "source" / "catalog" / "models" / MODEL.replace("/", "--")
SEQ_LENS = (4096, 16384, 32768, 65536, 131072)


def by_module(model: Any) -> dict[str, dict[str, int]]:
    """Unique parameter bytes per top-level module and per dtype."""
    out: dict[str, dict[str, int]] = {}
    for name, p in model.named_parameters(remove_duplicate=True):
        top = name.split(".")[0]
        entry = out.setdefault(top, {})
        key = str(p.dtype).replace("torch.", "")
        entry[key] = entry.get(key, 0) + p.numel() * p.element_size()
    return out


def after_load_bytes(model: Any, kernel: str) -> int:
    """Rank 0's parameter bytes once every AWQ linear layer's process_weights_after_loading ran with `kernel`."""
    total = sum(p.numel() * p.element_size() for _, p in model.named_parameters(remove_duplicate=True))
    for module in model.modules():
        qzeros, scales = getattr(module, "qzeros", None), getattr(module, "scales", None)
        if qzeros is None or scales is None:
            continue
        if kernel == "MacheteLinearKernel":
            # transform_w_zp: x.data = (-1.0 * w_s * unpacked_zeros.to(w_s.dtype)): [G, N] in the scales' dtype
            total += scales.numel() * scales.element_size() - qzeros.numel() * qzeros.element_size()
        elif kernel != "MarlinLinearKernel":
            raise ValueError(f"no load-time conversion written out for {kernel}")
    return total


def weights(root: Path) -> list[dict[str, Any]]:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import destroy_model_parallel, init_distributed_environment, initialize_model_parallel
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import get_model_architecture

    folder = model_folder(MODEL, root)
    results = []
    started = False
    for tp in (1, 2, 4):
        args = EngineArgs(model=str(folder), tokenizer=str(folder), skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16", max_model_len=4096)
        cfg = args.create_engine_config()
        with set_current_vllm_config(cfg):
            if not started:
                init_distributed_environment(world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{root / 'dist'}", backend="gloo")
                started = True
            destroy_model_parallel()
            initialize_model_parallel(1, 1)
            cls, arch = get_model_architecture(cfg.model_config)
            TP["size"], TP["rank"] = tp, 0
            patch_tp()
            torch.set_default_dtype(torch.bfloat16)
            t0 = time.perf_counter()
            with torch.device("meta"):
                model = cls(vllm_config=cfg, prefix="")
            modules = by_module(model)
            total = sum(sum(d.values()) for d in modules.values())
            methods = sorted({type(m.quant_method).__name__ for m in model.modules() if getattr(m, "quant_method", None) is not None})
            results.append(
                {
                    "model": MODEL,
                    "tp": tp,
                    "architecture": arch,
                    "class": cls.__name__,
                    "quantization": cfg.model_config.quantization,
                    "quant_methods": methods,
                    "dtype": "bfloat16",
                    "rank": 0,
                    "rank0_parameter_bytes": int(total),
                    "rank0_bytes_by_module_and_dtype": modules,
                    "rank0_after_load_bytes": {k: int(after_load_bytes(model, k)) for k in ("MarlinLinearKernel", "MacheteLinearKernel")},
                    "build_s": round(time.perf_counter() - t0, 2),
                }
            )
            print({k: v for k, v in results[-1].items() if k != "rank0_bytes_by_module_and_dtype"}, file=sys.stderr)
            del model
    return results


def tokens() -> dict[str, Any]:
    from transformers import Qwen2VLImageProcessor, WhisperFeatureExtractor
    from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import Qwen2_5OmniConfig
    from vllm.model_executor.models.qwen2_5_omni_thinker import Qwen2_5OmniThinkerDummyInputsBuilder, Qwen2_5OmniThinkerProcessingInfo

    pre = json.loads((CATALOG / "preprocessor_config.json").read_text())
    config = Qwen2_5OmniConfig(**json.loads((CATALOG / "config.json").read_text()))
    image_processor = Qwen2VLImageProcessor(**{k: v for k, v in pre.items() if k not in ("feature_extractor_type", "image_processor_type", "processor_class")})
    extractor = WhisperFeatureExtractor(**{k: v for k, v in pre.items() if k in ("feature_size", "sampling_rate", "hop_length", "chunk_length", "n_fft", "padding_value", "return_attention_mask", "dither")})

    class Processor:
        def __init__(self) -> None:
            self.image_processor = image_processor
            self.feature_extractor = extractor

    class Info(Qwen2_5OmniThinkerProcessingInfo):
        def __init__(self) -> None:
            pass

        def get_hf_config(self) -> Any:
            return config.thinker_config

        def get_hf_processor(self, **kwargs: object) -> Any:
            return Processor()

        def get_feature_extractor(self, **kwargs: object) -> Any:
            return extractor

        def _merge_and_resolve_mm_processor_kwargs(self, mm_kwargs: Any) -> dict[str, Any]:
            return {}

    info = Info()

    class Builder(Qwen2_5OmniThinkerDummyInputsBuilder):
        def __init__(self) -> None:
            self.info = info

        def _get_dummy_audios(self, *, length: int, num_audios: int, overrides: Any = None) -> Any:
            return [("audio samples", length)] * num_audios

        def _get_dummy_images(self, *, width: int, height: int, num_images: int, overrides: Any = None) -> Any:
            return [("image", width, height)] * num_images

        def _get_dummy_videos(self, *, width: int, height: int, num_frames: int, num_videos: int, overrides: Any = None) -> Any:
            return [("video", width, height, num_frames)] * num_videos

    counts = {"image": 1, "video": 1, "audio": 1}
    return {
        "model": MODEL,
        "image_processor_size": dict(image_processor.size),
        "image_size_with_most_features": list(info.get_image_size_with_most_features()),
        "max_tokens_per_item": {str(n): dict(info.get_mm_max_tokens_per_item(n, counts)) for n in SEQ_LENS},
        "max_tokens_per_item_video_alone": {str(n): dict(info.get_mm_max_tokens_per_item(n, {"video": 1})) for n in SEQ_LENS},
        "dummy_mm_data": {str(n): {k: v[0] for k, v in Builder().get_dummy_mm_data(n, counts, {}).items()} for n in SEQ_LENS},
    }


def main() -> None:
    import torch
    import vllm

    out_path = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        weight_cases = weights(Path(tmp))
    document = {
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "platform": "vLLM CPU platform (VLLM_TARGET_DEVICE=cpu), models built on the meta device",
        "method": "bench/vllm_omni_reference.py (see its docstring)",
        "weights": weight_cases,
        "tokens": tokens(),
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
