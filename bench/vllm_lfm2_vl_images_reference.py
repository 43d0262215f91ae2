"""What vLLM 0.33.0 counts as LFM2-VL image embeddings, from its own Lfm2VLProcessingInfo and transformers'
Lfm2VlImageProcessor, for a grid of image-processor settings and image sizes (no tokenizer, no model files).

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_lfm2_vl_images_reference.py \
        bench/results/vllm-lfm2-vl-images-2026-12-01/reference.json

For each settings case the script builds transformers' Lfm2VlImageProcessor with those settings (its class
defaults otherwise) and, for vLLM's dummy image (Lfm2VLProcessingInfo.get_image_size_with_most_features) and a few
other sizes, runs the image processor on a grey picture of that size (its spatial_shapes), then vLLM's
get_image_repl on them with a stand-in processor whose tokens are plain strings: the number of image tokens in
the replacement is what vLLM's encoder budget counts (PromptUpdateDetails.select_token_id(image_token_id)).
The ProcessingInfo's context is a stand-in whose get_merged_mm_kwargs returns the call's kwargs unchanged (no
--mm-processor-kwargs). A case where vLLM's own code raises (its placeholder and the processor's tiles disagree)
records the error.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

CATALOG_PROCESSOR = Path(__file__).resolve().parents[1] / "capacity" / "source" / "catalog" / "models" / "LiquidAI--LFM2.5-VL-1.6B" / "processor_config.json"
SETTINGS: list[dict] = [
    # the catalog's LFM2.5-VL-1.6B processor_config.json, its image_processor settings as the processor loads them
    {k: v for k, v in json.loads(CATALOG_PROCESSOR.read_text())["image_processor"].items() if k != "image_processor_type"},
    {},  # the class defaults, equal to the published LFM2.5-VL-1.6B config.json's values
    {"max_image_tokens": 1024},
    {"max_image_tokens": 255, "max_pixels_tolerance": 1.0},  # the 511-px dummy rounds to 512: too large, tiled
    {"max_pixels_tolerance": 0.5},  # the 512-px dummy is tiled: 2 x 1 tiles + a thumbnail
    {"min_tiles": 1, "max_tiles": 1},
    {"do_image_splitting": False},
    {"downsample_factor": 4, "max_image_tokens": 64, "min_image_tokens": 16},
    {"encoder_patch_size": 14, "tile_size": 448, "max_image_tokens": 300},
]
SIZES = [(512, 512), (300, 800), (1080, 1920), (2000, 500), (64, 64), (4000, 4000)]


def main(out_path: str) -> None:
    import numpy as np
    import torch
    import transformers
    import vllm
    from transformers.models.lfm2_vl.image_processing_lfm2_vl import Lfm2VlImageProcessor
    from vllm.model_executor.models.lfm2_vl import Lfm2VLProcessingInfo

    info = object.__new__(Lfm2VLProcessingInfo)
    info.ctx = types.SimpleNamespace(get_merged_mm_kwargs=lambda kwargs: dict(kwargs))
    results = []
    for settings in SETTINGS:
        image_processor = Lfm2VlImageProcessor(**settings)
        processor = types.SimpleNamespace(
            image_processor=image_processor,
            image_token="<image>",
            image_start_token="<|image_start|>",
            image_end_token="<|image_end|>",
            image_thumbnail_token="<|img_thumbnail|>",
        )
        info.get_image_processor = lambda processor=processor, **kwargs: processor.image_processor
        dummy = info.get_image_size_with_most_features()
        rows = []
        for height, width in [(dummy.height, dummy.width), *SIZES]:
            picture = np.full((height, width, 3), 128, dtype=np.uint8)
            row: dict = {"height": height, "width": width}
            try:
                out = image_processor(images=[picture], return_tensors="pt")
                spatial = out["spatial_shapes"]
                repl = info.get_image_repl(width, height, spatial, processor, {})
                row.update(
                    embeddings=repl.count(processor.image_token),
                    processor_tiles=int(spatial.shape[0]),
                    grid=list(info._get_image_feature_grid_size(width, height, processor, {})[:2]),
                )
            except Exception as exc:  # vLLM's own assertion or error: recorded
                row["error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
            rows.append(row)
        results.append({"settings": settings, "dummy": [dummy.height, dummy.width], "images": rows})
        print(settings, rows[0], file=sys.stderr)
    document = {
        "vllm_version": vllm.__version__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "method": "bench/vllm_lfm2_vl_images_reference.py: transformers' Lfm2VlImageProcessor (spatial_shapes) + vLLM's "
        "Lfm2VLProcessingInfo.get_image_size_with_most_features / get_image_repl / _get_image_feature_grid_size",
        "cases": results,
    }
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parents[1] / "bench" / "results" / "vllm-lfm2-vl-images-2026-12-01" / "reference.json"))
