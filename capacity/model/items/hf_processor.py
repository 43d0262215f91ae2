"""The model's own transformers classes built offline, as the generic family counts tokens per item with them:
the image processor and feature extractor from the preprocessor config, and the processor without a tokenizer (none
offline), whose placeholder count (`_get_num_multimodal_tokens`) gives the image tokens."""

from __future__ import annotations

import inspect
from typing import Any

from capacity.model.hf_config import materialized

# The largest side tried when a processor caps images by pixels rather than by a fixed size.
HUGE_SIDE = 8192


def processor_class(processor: dict[str, Any] | None, preprocessor: dict[str, Any] | None) -> str | None:
    """processor_class from processor_config.json, else preprocessor_config.json (vLLM: get_processor_cls_name_from_config)."""
    return next((str(c["processor_class"]) for c in (processor, preprocessor) if c and "processor_class" in c), None)


def _mapped_class(mapping: Any, model_type: str, wanted: str | None) -> Any:
    """A transformers class by the name a preprocessor config gives, else the model_type's PIL/slow variant."""
    import transformers

    names: list[str] = []
    if wanted:
        names += [wanted.removesuffix("Fast") + "Pil", wanted.removesuffix("Fast"), wanted]
    entry = mapping.get(model_type)
    if isinstance(entry, dict):
        names += [entry.get("pil"), entry.get("torchvision")]
    elif isinstance(entry, (tuple, list)):
        names += list(entry)
    elif isinstance(entry, str):
        names.append(entry)
    for name in names:
        if name and hasattr(transformers, name):
            try:
                return getattr(transformers, name)
            except ImportError:  # a backend (torchvision, torchaudio) this install lacks
                continue
    return None


def _init_kwargs(cls: Any, preprocessor: dict[str, Any], drop: tuple[str, ...]) -> dict[str, Any]:
    """The preprocessor config's values the class's __init__ takes (all of them when it takes **kwargs), less `drop`."""
    accepted = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in preprocessor.items() if (k in accepted or "kwargs" in accepted) and k not in drop}


def image_processor(config: dict[str, Any], preprocessor: dict[str, Any] | None) -> Any:
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    pre = dict(preprocessor or {})
    cls = _mapped_class(IMAGE_PROCESSOR_MAPPING_NAMES, str(config.get("model_type")), pre.get("image_processor_type"))
    if cls is None:
        raise LookupError(f"no image processor class for model_type {config.get('model_type')!r}")
    return cls(**_init_kwargs(cls, pre, ("image_processor_type", "processor_class", "auto_map")))


def headless_processor(
    config: dict[str, Any], full: dict[str, Any], image_proc: Any, processor: dict[str, Any] | None, preprocessor: dict[str, Any] | None = None
) -> Any:
    """The model's processor class without a tokenizer (none offline): its __init__ defaults, overridden by the
    model config's and processor_config.json's values of the same names, and the image processor."""
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    name = processor_class(processor, preprocessor) or PROCESSOR_MAPPING_NAMES.get(str(config.get("model_type")))
    cls = getattr(transformers, name, None) if isinstance(name, str) else None
    if cls is None or not hasattr(cls, "_get_num_multimodal_tokens"):
        raise LookupError(f"no processor with a placeholder count for model_type {config.get('model_type')!r}")
    proc = object.__new__(cls)
    params = inspect.signature(cls.__init__).parameters
    vision = full.get("vision_config") or {}
    for pname, param in params.items():
        if pname in ("self", "tokenizer", "kwargs", "args", "chat_template"):
            continue
        value = param.default if param.default is not inspect.Parameter.empty else None
        for source in (vision, full, processor or {}):
            if pname in source:
                value = source[pname]
        setattr(proc, pname, value)
    proc.image_processor = image_proc
    return proc


def candidate_sizes(image_proc: Any, vision: dict[str, Any]) -> list[tuple[int, int]]:
    """(height, width) shapes among which the most-tokens image lies: the image processor's fixed sizes, its
    grid pinpoints, tile grids up to its tile cap, and a huge square (processors capping by pixels shrink it)."""
    sides: set[int] = set()
    for attr in ("size", "crop_size", "max_image_size"):
        value = getattr(image_proc, attr, None)
        value = value if isinstance(value, dict) else (value.__dict__ if hasattr(value, "__dict__") else {})
        sides.update(int(v) for k, v in value.items() if isinstance(v, (int, float)) and k in ("height", "width", "shortest_edge", "longest_edge") and 0 < v <= HUGE_SIDE)
    if isinstance(vision.get("image_size"), int):
        sides.add(int(vision["image_size"]))
    shapes = {(HUGE_SIDE, HUGE_SIDE), (HUGE_SIDE, HUGE_SIDE // 2), (HUGE_SIDE // 2, HUGE_SIDE)}
    for side in sides:
        shapes.update({(side, side), (side, 2 * side), (2 * side, side)})
    for pin in getattr(image_proc, "image_grid_pinpoints", None) or []:
        shapes.add((int(pin[0]), int(pin[1])))
    tiles = getattr(image_proc, "max_patches", None) or getattr(image_proc, "max_image_tiles", None) or getattr(image_proc, "max_num_tiles", None)
    tile = min(sides) if sides else None
    if isinstance(tiles, int) and tile:
        for rows in range(1, tiles + 1):
            for cols in range(1, tiles // rows + 1):
                shapes.add((rows * tile, cols * tile))
    return sorted(shapes)


def feature_extractor(config: dict[str, Any], preprocessor: dict[str, Any] | None) -> Any:
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES

    pre = dict(preprocessor or {})
    cls = _mapped_class(FEATURE_EXTRACTOR_MAPPING_NAMES, str(config.get("model_type")), pre.get("feature_extractor_type"))
    if cls is None:
        raise LookupError(f"no feature extractor class for model_type {config.get('model_type')!r}")
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = _init_kwargs(cls, pre, ("feature_extractor_type", "processor_class"))
    mel_bins = (materialized(config).get("audio_config") or {}).get("num_mel_bins")
    if "feature_size" not in kwargs and isinstance(mel_bins, int) and "feature_size" in accepted:
        kwargs["feature_size"] = mel_bins  # without a preprocessor config: as many mel bins as the encoder reads
    return cls(**kwargs)
