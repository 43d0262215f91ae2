"""vLLM's `--mm-processor-kwargs`, read as overrides of a model's published processor configs.

vLLM 0.33 merges the configured kwargs into every HF processor it builds (`InputProcessingContext.get_hf_processor`)
and into the size its dummy-input builders read (`_merge_and_resolve_mm_processor_kwargs`), so they change the
profiled item and every token count after it. capacity models the keys whose effect it knows, per family, and
refuses every other key in one line: a knob that changes the encoder budget is never dropped silently.

Modelled: the Qwen-VL size keys (`min_pixels`, `max_pixels`, `size.shortest_edge`, `size.longest_edge`), given
flat, for the models vLLM counts with `Qwen2VLProcessingInfo` and its subclasses (Qwen2-VL, Qwen2.5-VL, Qwen2.5-Omni,
Qwen3-VL, Qwen3.5), here; Gemma-4's `max_soft_tokens` in capacity/model/families/gemma4.py; Gemma-3's pan and scan in
capacity/model/items/pan_and_scan.py; InternVL's tiling keys in capacity/model/families/internvl_chat.py. Each family says what the kwargs
do to its planning files (`Family.with_processor_kwargs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capacity.errors import BadInput
from capacity.model.items.qwen_vl import processor_pixel_bounds
from capacity.user_files import json_object

if TYPE_CHECKING:  # pragma: no cover - typing only
    pass

QWEN_VL_SIZE_KEYS = ("min_pixels", "max_pixels", "size")
QWEN_VL_SIZE_EDGES = ("shortest_edge", "longest_edge")


def parse_mm_processor_kwargs(value: Any, where: str) -> dict[str, Any]:
    """A JSON object (the command line) or a mapping (a serve YAML), as vLLM's `--mm-processor-kwargs` takes it."""
    return json_object(value, where, "mm_processor_kwargs", '{"max_pixels": 1003520}')


def _pixels(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BadInput(f"--mm-processor-kwargs {key}: {value!r} is not a positive integer number of pixels")
    return value


def qwen_vl_size(kwargs: dict[str, Any], default_size: dict[str, Any], family: str) -> dict[str, int]:
    """The size vLLM resizes with once the kwargs apply (vLLM: Qwen2VLProcessingInfo._get_vision_size over the
    processor's size): `size` updates the processor's edges, then `min_pixels` / `max_pixels` override them."""
    unknown = sorted(set(kwargs) - set(QWEN_VL_SIZE_KEYS))
    if unknown:
        scoped = [k for k in unknown if k.endswith("_kwargs")]
        hint = (
            "give the size keys flat (they then apply to images and videos alike)"
            if scoped
            else f"capacity models {', '.join(QWEN_VL_SIZE_KEYS)} for {family}"
        )
        raise BadInput(f"--mm-processor-kwargs {', '.join(unknown)}: not modelled for {family}; {hint}, or plan without it")
    size = {k: v for k, v in default_size.items() if k in QWEN_VL_SIZE_EDGES}
    given_size = kwargs.get("size")
    if given_size is not None:
        if not isinstance(given_size, dict) or set(given_size) - set(QWEN_VL_SIZE_EDGES):
            raise BadInput(f"--mm-processor-kwargs size: {given_size!r}; {family} takes size as {{\"shortest_edge\": N, \"longest_edge\": N}} (pixel areas)")
        size.update({k: _pixels(v, f"size.{k}") for k, v in given_size.items()})
    for key, edge in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge")):
        if kwargs.get(key) is not None:  # HF takes None as no override (vLLM does not propagate it either)
            size[edge] = _pixels(kwargs[key], key)
    for edge in QWEN_VL_SIZE_EDGES:
        if edge not in size:
            raise BadInput(f"--mm-processor-kwargs: the processor config has no size.{edge} and the kwargs give none: {family}'s size is unknown")
    if size["shortest_edge"] > size["longest_edge"]:
        raise BadInput(
            f"--mm-processor-kwargs: min pixels {size['shortest_edge']} exceed max pixels {size['longest_edge']}; "
            "transformers' smart_resize would then exceed max_pixels: give min_pixels <= max_pixels"
        )
    return size


def with_qwen_vl_sizes(
    files: dict[str, dict[str, Any]], kwargs: dict[str, Any], family: str, default_image: dict[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """The planning files with the kwargs' size applied to the image processor (its published config, else
    `default_image`) and to the video processor when there is one (flat keys reach both scopes)."""
    out = dict(files)
    out["preprocessor_config.json"] = with_qwen_vl_size(files.get("preprocessor_config.json") or default_image or {}, kwargs, family)
    video = files.get("video_preprocessor_config.json")
    if video is not None:
        out["video_preprocessor_config.json"] = with_qwen_vl_size(video, kwargs, family)
    return out


def with_qwen_vl_size(processor_config: dict[str, Any], kwargs: dict[str, Any], family: str) -> dict[str, Any]:
    """A Qwen-VL image or video processor config with the kwargs' size applied to `size` and to its
    `min_pixels` / `max_pixels` aliases (vLLM completes the aliases both ways: _complete_mm_processor_size_aliases)."""
    out = dict(processor_config)
    size = qwen_vl_size(kwargs, processor_pixel_bounds(out), family)
    out["size"] = {**(out.get("size") if isinstance(out.get("size"), dict) else {}), **size}
    out["min_pixels"], out["max_pixels"] = size["shortest_edge"], size["longest_edge"]
    return out


def qwen_vl_max_pixels_within(vision: dict[str, Any], tokens: int) -> dict[str, int] | None:
    """The flat `max_pixels` whose largest Qwen-VL image has at most `tokens` merged tokens, and the most such:
    tokens x (patch x merge)^2 pixels. vLLM's largest image (Qwen2VLProcessingInfo.get_image_size_with_most_features)
    is the grid of at most max_pixels // (patch x merge)^2 merged patches, which smart_resize keeps (its area is
    within max_pixels); a grid of exactly `tokens` cells where `tokens` has a factor pair of aspect ratio <= 200.
    Videos follow: a Qwen2-VL frame pair takes the image's size, a Qwen3-VL video half of it. None when the vision
    config gives no patch_size / spatial_merge_size."""
    patch = vision.get("patch_size", vision.get("spatial_patch_size"))
    merge = vision.get("spatial_merge_size")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (patch, merge)) or tokens < 1:
        return None
    return {"max_pixels": tokens * (patch * merge) ** 2}

