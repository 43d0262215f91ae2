"""What vLLM 0.33.0's own Qwen-VL code gives for the largest image and video under `--mm-processor-kwargs`.

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_qwen_vl_sizes_reference.py \
        bench/results/vllm-qwen-vl-sizes-reference-2026-12-01/reference.json

vLLM's `Qwen2VLProcessingInfo` / `Qwen3VLProcessingInfo` methods (`get_max_image_tokens`, `get_max_video_tokens`
for Qwen3-VL) run on an instance made without `__init__`, whose context is a stand-in: its `get_merged_mm_kwargs` is
vLLM's own `InputProcessingContext.get_merged_mm_kwargs` over vLLM's `MultiModalConfig(mm_processor_kwargs=...)`
(so the configured kwargs are merged and routed into `images_kwargs` / `videos_kwargs` by vLLM's code); the HF
config is the catalog's published config.json through transformers; the image / video processors are transformers'
classes built from the catalog's published processor configs (their `size` as the processor holds it).
The supported kwarg names per scope are the processors' `valid_kwargs` annotations, as
`BaseProcessingInfo.get_supported_mm_processor_kwargs` reads them (Qwen3-VL adds min/max_pixels for videos).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "capacity" / "source" / "catalog" / "models"

CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("Qwen/Qwen2.5-VL-7B-Instruct", {}),
    ("Qwen/Qwen2.5-VL-7B-Instruct", {"max_pixels": 1_003_520}),
    ("Qwen/Qwen2.5-VL-7B-Instruct", {"max_pixels": 1_031 * 28 * 28}),
    ("Qwen/Qwen2.5-VL-7B-Instruct", {"size": {"longest_edge": 602_112}}),
    ("Qwen/Qwen2.5-VL-7B-Instruct", {"size": {"longest_edge": 602_112}, "max_pixels": 1_003_520}),
    ("Qwen/Qwen3-VL-4B-Instruct", {}),
    ("Qwen/Qwen3-VL-4B-Instruct", {"max_pixels": 1_003_520}),
    ("Qwen/Qwen3-VL-4B-Instruct", {"min_pixels": 200_704, "max_pixels": 2_007_040}),
)


def read(model: str, name: str) -> dict[str, Any] | None:
    path = CATALOG / model.replace("/", "--") / name
    return json.loads(path.read_text()) if path.exists() else None


def info_for(model: str, kwargs: dict[str, Any]) -> Any:
    from transformers import AutoConfig, Qwen2VLImageProcessor, Qwen3VLVideoProcessor
    from vllm.config.multimodal import MultiModalConfig
    from vllm.model_executor.models.qwen2_vl import Qwen2VLProcessingInfo
    from vllm.model_executor.models.qwen3_vl import Qwen3VLProcessingInfo
    from vllm.multimodal.processing.context import InputProcessingContext

    config = read(model, "config.json") or {}
    hf_config = AutoConfig.for_model(**config)
    qwen3 = config["model_type"].startswith("qwen3")
    cls = Qwen3VLProcessingInfo if qwen3 else Qwen2VLProcessingInfo
    image = Qwen2VLImageProcessor(**{k: v for k, v in (read(model, "preprocessor_config.json") or {}).items() if k not in ("image_processor_type", "processor_class")})
    video = None
    if qwen3:
        video = Qwen3VLVideoProcessor(**{k: v for k, v in (read(model, "video_preprocessor_config.json") or {}).items() if k not in ("video_processor_type", "processor_class")})
    supported = {"images_kwargs": set(type(image).valid_kwargs.__annotations__)}
    if video is not None:
        supported["videos_kwargs"] = set(type(video).valid_kwargs.__annotations__) | {"min_pixels", "max_pixels"}
    else:  # Qwen2.5-VL's videos go through Qwen2VLVideoProcessor
        from transformers import Qwen2VLVideoProcessor

        supported["videos_kwargs"] = set(Qwen2VLVideoProcessor.valid_kwargs.__annotations__)
    mm_config = MultiModalConfig(mm_processor_kwargs=dict(kwargs))
    ctx = SimpleNamespace(model_config=SimpleNamespace(get_multimodal_config=lambda: mm_config))
    ctx.get_merged_mm_kwargs = lambda kw, **extra: InputProcessingContext.get_merged_mm_kwargs(ctx, kw, **extra)
    info = object.__new__(cls)
    info.ctx = ctx
    info.__dict__["supported_mm_processor_kwargs"] = supported
    info.get_hf_config = lambda *a, **k: hf_config
    info.get_image_processor = lambda **k: image
    if video is not None:
        info.get_video_processor = lambda **k: video
    return info, qwen3


def main(out: Path) -> None:
    rows = []
    for model, kwargs in CASES:
        info, qwen3 = info_for(model, kwargs)
        size = info.get_image_size_with_most_features()
        row: dict[str, Any] = {
            "model": model,
            "mm_processor_kwargs": kwargs,
            "image_size_with_most_features": [size.height, size.width],
            "max_image_tokens": info.get_max_image_tokens(),
        }
        if qwen3:
            row["max_video_tokens"] = info.get_max_video_tokens(seq_len=262_144, mm_counts={"video": 1})
        rows.append(row)
        print(row)
    import transformers
    import vllm

    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"vllm": vllm.__version__, "transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d")}
    out.write_text(json.dumps({"meta": meta, "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
