"""What vLLM 0.33.0's own code gives for Gemma-3's pan and scan and InternVL's dynamic tiles under `--mm-processor-kwargs`.

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_mm_kwargs_reference.py \
        bench/results/vllm-mm-kwargs-reference-2026-12-01/reference.json

vLLM's `Gemma3ProcessingInfo` and `InternVLProcessingInfo` methods run on instances made without `__init__`, as
bench/vllm_qwen_vl_sizes_reference.py does: the context's `get_merged_mm_kwargs` is vLLM's own
`InputProcessingContext.get_merged_mm_kwargs` over vLLM's `MultiModalConfig(mm_processor_kwargs=...,
mm_device_do_normalize=False)` (False is what vLLM resolves for both models: neither sets
`supports_mm_device_do_normalize`), so the configured kwargs reach vLLM's code as they do in a server.

- Gemma-3: the HF config is the catalog's config.json through transformers' `Gemma3Config`; the processor is
  transformers' `Gemma3Processor` over `Gemma3ImageProcessor(**published preprocessor_config.json, **kwargs)` (as
  vLLM's `cached_processor_from_config` passes the kwargs) and a stand-in tokenizer (below).
- InternVL: the HF config is a namespace of the catalog's config.json (its class is Hub remote code; vLLM reads only
  the attributes set here); vLLM builds its own `InternVLChatProcessor`, image and video processors from it.

The stand-in tokenizer: the catalog holds no tokenizer files (no model downloads here). vLLM's token counts read the
tokenizer only for the ids of the special tokens (`<image_soft_token>`, `<start_of_image>`, `<end_of_image>`;
`<IMG_CONTEXT>`, `<img>`, `</img>`, and `<|video_pad|>` whose presence decides InternVL's video processor), and the
embeddings of an image are the placeholder's image-token ids (`PromptUpdateDetails.select_token_id`). A word-level
tokenizer holding those special tokens gives the same embedding counts; the placeholder's full length (the
separators and Gemma-3's "Here is the original image ..." text) depends on the real tokenizer and is not recorded.

Cases that make vLLM's code raise are recorded with the exception (type and message): that is what the server does
at startup with that setting.
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

GEMMA3_MODELS = ("google/gemma-3-4b-it", "google/gemma-3-27b-it", "google/medgemma-27b-it")
GEMMA3_KWARGS: tuple[dict[str, Any], ...] = (
    {},
    {"do_pan_and_scan": True},
    {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 8},
    {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 2},
    {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 1},
    {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 1, "pan_and_scan_min_ratio_to_activate": 1.0},
    {"do_pan_and_scan": True, "pan_and_scan_min_crop_size": 1000},
    {"do_pan_and_scan": True, "pan_and_scan_min_crop_size": 900, "pan_and_scan_max_num_crops": 3},
    {"do_pan_and_scan": True, "pan_and_scan_min_ratio_to_activate": 5.0},
    {"do_pan_and_scan": True, "pan_and_scan_min_ratio_to_activate": 2},
    {"pan_and_scan_max_num_crops": 8},
    {"do_pan_and_scan": False},
    # bad values: what vLLM's code does with them
    {"do_pan_and_scan": "yes"},
    {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": "4"},
    {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 0},
    {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": -1},
    {"do_pan_and_scan": True, "pan_and_scan_min_crop_size": 0},
    {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 4.0},
)
# (width, height) of images whose tokens get_num_image_tokens gives under each setting
GEMMA3_IMAGES: tuple[tuple[int, int], ...] = (
    (896, 896), (1075, 896), (1076, 896), (1792, 896), (2000, 700), (640, 1920), (4000, 1000), (300, 1200),
    (3584, 896), (896, 3584), (500, 400), (8000, 600), (1000, 4100),
)

INTERNVL_MODEL = "OpenGVLab/InternVL3-8B"
INTERNVL_KWARGS: tuple[dict[str, Any], ...] = (
    {},
    {"max_dynamic_patch": 6},
    {"max_dynamic_patch": 1},
    {"max_dynamic_patch": 2},
    {"max_dynamic_patch": 24},
    {"dynamic_image_size": False},
    {"use_thumbnail": False},
    {"use_thumbnail": False, "max_dynamic_patch": 7},
    {"min_dynamic_patch": 4, "max_dynamic_patch": 6},
    {"min_dynamic_patch": 5, "max_dynamic_patch": 6, "use_thumbnail": False},
    # bad values and keys: what vLLM's code does with them
    {"min_dynamic_patch": 8, "max_dynamic_patch": 6},
    {"max_dynamic_patch": 0},
    {"max_dynamic_patch": -1},
    {"max_dynamic_patch": "6"},
    {"dynamic_image_size": "false"},
    {"do_pan_and_scan": True},
)
INTERNVL_IMAGES: tuple[tuple[int, int], ...] = (
    (448, 448), (800, 600), (1920, 1080), (600, 1800), (5376, 448), (1344, 1792), (2000, 300), (100, 100),
)
INTERNVL_SEQ_LENS = (16_384, 32_768)


def read(model: str, name: str) -> dict[str, Any] | None:
    path = CATALOG / model.replace("/", "--") / name
    return json.loads(path.read_text()) if path.exists() else None


def stand_in_tokenizer(specials: list[str], named: dict[str, str] | None = None) -> Any:
    """A word-level fast tokenizer whose vocabulary is [UNK] and the given special tokens (see the module docstring)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{t: i + 1 for i, t in enumerate(specials)}}
    model = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=model, unk_token="[UNK]", additional_special_tokens=specials, extra_special_tokens=named or {})


def context(kwargs: dict[str, Any]) -> Any:
    from vllm.config.multimodal import MultiModalConfig
    from vllm.multimodal.processing.context import InputProcessingContext

    mm_config = MultiModalConfig(mm_processor_kwargs=dict(kwargs), mm_device_do_normalize=False)
    ctx = SimpleNamespace(model_config=SimpleNamespace(get_multimodal_config=lambda: mm_config))
    ctx.get_merged_mm_kwargs = lambda kw, **extra: InputProcessingContext.get_merged_mm_kwargs(ctx, kw, **extra)
    return ctx


def failure(exc: BaseException) -> dict[str, str]:
    return {"error": type(exc).__name__, "message": str(exc).splitlines()[0][:300]}


# --- Gemma-3 ----------------------------------------------------------------------------------------------


def gemma3_info(model: str, kwargs: dict[str, Any]) -> Any:
    from transformers import Gemma3Config, Gemma3ImageProcessor, Gemma3Processor
    from vllm.model_executor.models.gemma3_mm import Gemma3ProcessingInfo

    config = read(model, "config.json") or {}
    hf_config = Gemma3Config(**{k: v for k, v in config.items() if k != "model_type"})
    published = {k: v for k, v in (read(model, "preprocessor_config.json") or {}).items() if k not in ("image_processor_type", "processor_class")}
    published = {k: v for k, v in published.items() if v is not None} or {"size": {"height": 896, "width": 896}}
    seq_len = (read(model, "processor_config.json") or {}).get("image_seq_length", config.get("mm_tokens_per_image", 256))
    tokenizer = stand_in_tokenizer(
        ["<start_of_image>", "<end_of_image>", "<image_soft_token>"],
        {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"},
    )
    ctx = context(kwargs)

    def hf_processor(**request: object) -> Any:
        merged = ctx.get_merged_mm_kwargs(request)
        image = Gemma3ImageProcessor(**{**published, **merged})
        return Gemma3Processor(image_processor=image, tokenizer=tokenizer, image_seq_length=seq_len)

    info = object.__new__(Gemma3ProcessingInfo)
    info.ctx = ctx
    info.get_hf_config = lambda *a, **k: hf_config
    info.get_hf_processor = hf_processor
    return info


def gemma3_row(model: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"model": model, "mm_processor_kwargs": kwargs}
    try:
        info = gemma3_info(model, kwargs)
        processor = info.get_hf_processor()
        size = info.get_image_size_with_most_features()
        row["image_size_with_most_features"] = [size.height, size.width]

        def tokens(width: int, height: int) -> dict[str, int]:
            crops = info.get_num_crops(image_width=width, image_height=height, processor=processor, mm_kwargs={})
            n = info.get_num_image_tokens(image_width=width, image_height=height, processor=processor, mm_kwargs={})
            repl = info.get_image_repl(image_width=width, image_height=height, processor=processor, mm_kwargs={})
            embeds = int(repl.is_embed(repl.full).sum()) if repl.is_embed is not None else len(repl.full)
            return {"num_crops": crops, "num_image_tokens": n, "embeds": embeds}

        row["max_feature_image"] = tokens(size.width, size.height)
        row["images"] = [{"width": w, "height": h, **tokens(w, h)} for w, h in GEMMA3_IMAGES]
    except Exception as exc:  # noqa: BLE001 - what vLLM's code raises is the result
        row.update(failure(exc))
    return row


# --- InternVL ---------------------------------------------------------------------------------------------


def internvl_info(kwargs: dict[str, Any], video_token: bool) -> Any:
    from vllm.model_executor.models.internvl import InternVLProcessingInfo

    config = read(INTERNVL_MODEL, "config.json") or {}
    hf_config = SimpleNamespace(
        **{k: v for k, v in config.items() if k not in ("vision_config", "llm_config")}, vision_config=SimpleNamespace(**config["vision_config"])
    )
    hf_config.get_text_config = lambda *a, **k: SimpleNamespace(model_type=config["llm_config"]["model_type"])
    specials = ["<img>", "</img>", "<IMG_CONTEXT>"] + (["<|video_pad|>"] if video_token else [])
    tokenizer = stand_in_tokenizer(specials)
    info = object.__new__(InternVLProcessingInfo)
    info.ctx = context(kwargs)
    info.get_hf_config = lambda *a, **k: hf_config
    info.get_tokenizer = lambda *a, **k: tokenizer
    return info


def internvl_row(kwargs: dict[str, Any], video_token: bool) -> dict[str, Any]:
    row: dict[str, Any] = {
        "model": INTERNVL_MODEL,
        "mm_processor_kwargs": kwargs,
        "tokenizer_has_video_token": video_token,
    }
    try:
        info = internvl_info(kwargs, video_token)
        row["ctx_video_token"] = info.ctx_video_token
        processor = info.get_hf_processor()
        size = info.get_image_size_with_most_features()
        row["image_size_with_most_features"] = [size.height, size.width]
        row["max_image_tokens"] = info.get_max_image_tokens()
        row["image_seq_length"] = processor.image_seq_length
        row["images"] = [
            {"width": w, "height": h, "num_image_tokens": info.get_num_image_tokens(image_width=w, image_height=h, processor=processor)}
            for w, h in INTERNVL_IMAGES
        ]
        if info.ctx_video_token:
            row["num_frames_with_most_features"] = [
                {"seq_len": s, "mm_counts": counts, "frames": info.get_num_frames_with_most_features(s, counts)}
                for s in INTERNVL_SEQ_LENS
                for counts in ({"image": 1, "video": 1}, {"video": 1})
            ]
    except Exception as exc:  # noqa: BLE001 - what vLLM's code raises is the result
        row.update(failure(exc))
    return row


def main(out: Path) -> None:
    gemma3 = [gemma3_row(model, kwargs) for model in GEMMA3_MODELS for kwargs in GEMMA3_KWARGS]
    internvl = [internvl_row(kwargs, video) for video in (True, False) for kwargs in INTERNVL_KWARGS]
    for row in gemma3 + internvl:
        print({k: v for k, v in row.items() if k not in ("images", "num_frames_with_most_features")})
    import transformers
    import vllm

    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"vllm": vllm.__version__, "transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d")}
    out.write_text(json.dumps({"meta": meta, "gemma3": gemma3, "internvl": internvl}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
