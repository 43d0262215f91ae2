"""vLLM 0.33's size rules for Qwen-VL images and videos (Qwen2VLProcessingInfo and its subclasses), with the
transformers resize functions they call: the largest dummy item and its merged-token grid."""

from __future__ import annotations

import math
from typing import Any

MAX_ASPECT_RATIO = 200  # vLLM get_image_size_with_most_features / transformers smart_resize: aspect ratios above 200 are refused


def processor_pixel_bounds(processor_config: dict[str, Any] | None) -> dict[str, Any]:
    """{"shortest_edge": min pixels, "longest_edge": max pixels} of a Qwen-VL image or video processor config: its
    size edges, else the min_pixels / max_pixels aliases (transformers' Qwen2-VL processors hold either); an edge
    neither gives is left out."""
    config = processor_config or {}
    size = config.get("size") if isinstance(config.get("size"), dict) else {}
    bounds = {edge: size.get(edge) or config.get(alias) for edge, alias in (("shortest_edge", "min_pixels"), ("longest_edge", "max_pixels"))}
    return {edge: value for edge, value in bounds.items() if value}


def image_smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The size Qwen-VL's image processor resizes to (transformers: qwen2_vl image_processing smart_resize)."""
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise LookupError(f"aspect ratio of {height}x{width} exceeds {MAX_ASPECT_RATIO}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        return max(factor, math.floor(height / beta / factor) * factor), max(factor, math.floor(width / beta / factor) * factor)
    if h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        return math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def size_with_most_features(max_pixels: int, unit: int) -> tuple[int, int]:
    """(height, width) with the most unit x unit cells within max_pixels, aspect ratio <= 200
    (vLLM: Qwen2VLProcessingInfo.get_image_size_with_most_features)."""
    for cells in range(max_pixels // (unit * unit), 0, -1):
        rows = next(d for d in range(math.isqrt(cells), 0, -1) if cells % d == 0)  # the closest factor pair, rows <= cols
        if cells // rows / rows <= MAX_ASPECT_RATIO:
            return unit * rows, unit * (cells // rows)
    raise LookupError(f"max pixels {max_pixels} hold no {unit} x {unit} cell")


def qwen_vl_max_image_grid(min_pixels: int, max_pixels: int, patch: int, merge: int) -> tuple[int, int]:
    """(rows, cols) of merged tokens of vLLM's largest Qwen-VL image (Qwen2VLProcessingInfo.get_max_image_tokens:
    the size with the most features, then _get_vision_info's smart_resize)."""
    unit = patch * merge
    height, width = size_with_most_features(max_pixels, unit)
    height, width = image_smart_resize(height, width, unit, min_pixels, max_pixels)
    return height // unit, width // unit


def video_smart_resize(frames: int, height: int, width: int, temporal: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The frame size Qwen3-VL's video processor resizes to (transformers: video_processing_qwen3_vl.smart_resize)."""
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(frames / temporal) * temporal
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt(frames * height * width / max_pixels)
        return max(factor, math.floor(height / beta / factor) * factor), max(factor, math.floor(width / beta / factor) * factor)
    if t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        return math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar
