"""What vLLM 0.33.0 counts as LLaVA-NeXT image embeddings, from its own LlavaNextProcessingInfo, for the catalog's
LLaVA-NeXT config and variants of it (pinpoints, feature select strategy, tower), at several image sizes.

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_llava_next_reference.py \
        bench/results/vllm-llava-next-reference-2026-12-01/reference.json

For each case the script builds transformers' LlavaNextConfig from the case's config dict (the catalog's
llava-hf/llava-v1.6-vicuna-7b-hf config.json, optionally with fields replaced) and hands it to vLLM's
LlavaNextProcessingInfo through a stand-in context whose get_hf_config returns it (the count reads the HF config
only: no processor file, no tokenizer). For every size it records get_num_image_tokens, the unpadded features and
newlines (_get_num_unpadded_features at the grid transformers' get_anyres_image_grid_shape gives, as
get_num_image_tokens calls it) and the tiles (transformers' image_size_to_num_patches, what the tower encodes);
and get_image_size_with_most_features (the dummy image LlavaDummyInputsBuilder builds) with
get_max_image_tokens. A case where vLLM's own code raises records the error.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
import types
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "capacity" / "source" / "catalog" / "models" / "llava-hf--llava-v1.6-vicuna-7b-hf" / "config.json"
BASE = json.loads(CATALOG.read_text())

# (name, fields replaced in the catalog's config)
VARIANTS: list[tuple[str, dict]] = [
    ("catalog", {}),
    ("full strategy", {"vision_feature_select_strategy": "full"}),
    # a 3 x 3 fine-tune's pinpoints (orby-yanan/llava-v1.6-mistral-7b-3x3 lists these eight)
    ("3x3 pinpoints", {"image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008], [672, 1008], [1008, 1008], [1008, 672]]}),
    ("wide-first pinpoints", {"image_grid_pinpoints": [[336, 1008], [672, 672], [1008, 336]]}),
    ("feature layer -1", {"vision_feature_layer": -1}),
    (
        "siglip tower",
        {
            "vision_config": {"model_type": "siglip_vision_model", "image_size": 384, "patch_size": 16, "hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16},
            "image_grid_pinpoints": [[384, 768], [768, 384], [768, 768], [384, 1152], [1152, 384]],
            "vision_feature_select_strategy": "full",
        },
    ),
]
# (height, width)
SIZES = [(336, 336), (600, 800), (800, 600), (1080, 1920), (1920, 1080), (672, 672), (336, 1008), (1008, 336), (100, 2000), (2000, 100), (333, 500), (4000, 4000), (224, 224), (1, 1)]


def main(out_path: str) -> None:
    import torch
    import transformers
    import vllm
    from transformers import LlavaNextConfig
    from transformers.models.llava_next.modeling_llava_next import get_anyres_image_grid_shape, image_size_to_num_patches
    from vllm.model_executor.models.llava_next import LlavaNextProcessingInfo

    cases = []
    for name, fields in VARIANTS:
        raw = copy.deepcopy(BASE)
        raw.update(copy.deepcopy(fields))
        kwargs = {k: v for k, v in raw.items() if k != "model_type"}
        hf_config = LlavaNextConfig(**kwargs)
        info = object.__new__(LlavaNextProcessingInfo)
        info.ctx = types.SimpleNamespace(get_hf_config=lambda *args, c=hf_config, **kw: c)
        encoder = info.get_vision_encoder_info()
        rows = []
        for height, width in SIZES:
            row: dict = {"height": height, "width": width}
            try:
                grid_h, grid_w = get_anyres_image_grid_shape((height, width), hf_config.image_grid_pinpoints, encoder.get_image_size())
                unpadded, newlines = info._get_num_unpadded_features(
                    original_height=height, original_width=width, npatches=encoder.get_patch_grid_length(), num_patch_height=grid_h, num_patch_width=grid_w
                )
                row.update(
                    tokens=info.get_num_image_tokens(image_width=width, image_height=height),
                    grid=[int(grid_h), int(grid_w)],
                    unpadded=int(unpadded),
                    newlines=int(newlines),
                    tiles=int(image_size_to_num_patches((height, width), hf_config.image_grid_pinpoints, encoder.get_image_size())),
                )
            except Exception as exc:  # vLLM's own error: recorded
                row["error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
            rows.append(row)
        case: dict = {"name": name, "fields": fields, "images": rows}
        try:
            most = info.get_image_size_with_most_features()
            case.update(
                most_features=[most.height, most.width],
                max_image_tokens=info.get_max_image_tokens(),
                tower_positions_per_tile=encoder.get_num_image_tokens(image_width=encoder.get_image_size(), image_height=encoder.get_image_size()),
            )
        except Exception as exc:
            case["error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
        cases.append(case)
        print(name, case.get("most_features"), case.get("max_image_tokens"), file=sys.stderr)
    document = {
        "vllm_version": vllm.__version__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "config": f"{CATALOG.relative_to(ROOT)} (fields replaced per case)",
        "method": "bench/vllm_llava_next_reference.py: vLLM's LlavaNextProcessingInfo.get_num_image_tokens / "
        "_get_num_unpadded_features / get_image_size_with_most_features / get_max_image_tokens and its vision encoder "
        "info, with transformers' get_anyres_image_grid_shape and image_size_to_num_patches, on transformers' LlavaNextConfig",
        "cases": cases,
    }
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "bench" / "results" / "vllm-llava-next-reference-2026-12-01" / "reference.json"))
