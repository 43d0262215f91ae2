"""vLLM 0.33's size rules for Qwen-VL images and videos (Qwen2VLProcessingInfo and its subclasses), with the
transformers resize functions they call: the largest dummy item and its merged-token grid."""

from __future__ import annotations

import math
from typing import Any

from capacity.model.items.item_tokens import ItemTokens, positive

# model_types whose videos vLLM 0.33 counts with Qwen3VLProcessingInfo.get_max_video_tokens (2 frames).
QWEN3_VL_VIDEO = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
# model_types whose videos follow Qwen2VLProcessingInfo.get_max_video_tokens (frames at the largest image's size).
QWEN2_VL_VIDEO = ("qwen2_vl",)
# model_types whose images vLLM 0.33 counts with Qwen2VLProcessingInfo or a subclass (Qwen3VLProcessingInfo)
QWEN_VL_IMAGES = QWEN2_VL_VIDEO + QWEN3_VL_VIDEO
MAX_FRAMES_PER_VIDEO = 14  # vLLM: qwen2_vl _MAX_FRAMES_PER_VIDEO
# Why a Qwen-VL image falls back to the generic formula (qwen_vl_image_tokens: None).
NO_PIXEL_BOUNDS = "preprocessor_config.json gives no size.shortest_edge / longest_edge (or min_pixels / max_pixels)"

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


def qwen_vl_image_tokens(vision: dict[str, Any], preprocessor: dict[str, Any]) -> ItemTokens | None:
    """vLLM's largest Qwen-VL image (Qwen2VLProcessingInfo.get_max_image_tokens) from the image processor's size:
    the grid with the most merged patches within size.longest_edge pixels, then smart_resize; None when the
    preprocessor config gives no pixel bounds (NO_PIXEL_BOUNDS: the caller's fallback formula)."""
    bounds = processor_pixel_bounds(preprocessor)
    low, high = bounds.get("shortest_edge"), bounds.get("longest_edge")
    if not isinstance(low, int) or not isinstance(high, int):
        return None
    patch = positive(vision, "patch_size", "vision_config")
    merge = positive(vision, "spatial_merge_size", "vision_config")
    rows, cols = qwen_vl_max_image_grid(low, high, patch, merge)
    unit = patch * merge
    return ItemTokens(
        "image",
        rows * cols,
        "vLLM rule",
        f"Qwen2VLProcessingInfo.get_max_image_tokens: {rows} x {cols} merged patches within {high} pixels, most tokens at {rows * unit}x{cols * unit}",
        image_size=(rows * unit, cols * unit),
    )


def qwen3_vl_video_tokens(vision: dict[str, Any], video_preprocessor: dict[str, Any] | None) -> tuple[int, int]:
    """(tokens, encoder patches) of vLLM's largest video (Qwen3VLProcessingInfo.get_max_video_tokens): 2 frames at
    the size with the most features within video size.longest_edge // temporal_patch_size pixels."""
    grid_t, grid_h, grid_w = qwen3_vl_video_grid(vision, video_preprocessor)
    merge = positive(vision, "spatial_merge_size", "vision_config")
    patches = grid_t * grid_h * grid_w
    return patches // (merge * merge), patches


def qwen3_vl_video_grid(vision: dict[str, Any], video_preprocessor: dict[str, Any] | None) -> tuple[int, int, int]:
    """(grid_t, grid_h, grid_w) in patches of vLLM's largest Qwen3-VL video: the video_grid_thw its processor hands
    the vision tower."""
    if video_preprocessor is None:
        raise LookupError("no video_preprocessor_config.json: its video size is unknown")
    size = video_preprocessor.get("size") if isinstance(video_preprocessor.get("size"), dict) else {}
    longest = positive(size, "longest_edge", "video_preprocessor_config.json size")
    shortest = positive(size, "shortest_edge", "video_preprocessor_config.json size")
    processor_temporal = positive(video_preprocessor, "temporal_patch_size", "video_preprocessor_config.json")
    patch = positive(vision, "patch_size", "vision_config")
    merge = positive(vision, "spatial_merge_size", "vision_config")
    temporal = positive(vision, "temporal_patch_size", "vision_config")
    frames = 2  # get_max_video_tokens: num_frames=2
    height, width = size_with_most_features(longest // processor_temporal, patch * merge)
    height, width = video_smart_resize(frames, height, width, temporal, patch * merge, shortest, longest)  # _get_vision_info
    grid_t = max(-(-frames // temporal) * temporal // temporal, 1)  # frames padded to temporal_patch_size
    return grid_t, height // patch, width // patch
