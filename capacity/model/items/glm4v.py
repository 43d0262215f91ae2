"""GLM-4.1V video tokens by vLLM 0.33's rule (Glm4vProcessingInfo): its dummy video at every frame count vLLM tries."""

from __future__ import annotations

from typing import Any

from capacity.model.items.item_tokens import positive
from capacity.model.items.qwen_vl import video_smart_resize

# model_types whose videos vLLM 0.33 counts with Glm4vProcessingInfo (dummy video, frames chosen by seq_len).
GLM4V_VIDEO = ("glm4v", "glm4v_moe")
GLM4V_MAX_FRAMES = 600  # vLLM: glm4_1v _MAX_FRAMES_PER_VIDEO
GLM4V_MIN_PIXELS = 112 * 112  # transformers glm4v smart_resize's default min_pixels (vLLM's _get_vision_info passes none)


def glm4v_video_tokens_by_frames(
    vision: dict[str, Any], preprocessor: dict[str, Any] | None, video_preprocessor: dict[str, Any] | None
) -> tuple[int, ...]:
    """Tokens of GLM-4.1V's dummy video at 1..600 frames (Glm4vProcessingInfo._get_max_video_frames' loop): frames at
    the largest image's size, resized so that frames x height x width <= the video size.longest_edge pixels."""
    merge = positive(vision, "spatial_merge_size", "vision_config")
    grids = glm4v_video_grids(vision, preprocessor, video_preprocessor)
    return tuple(t * h * w // (merge * merge) for t, h, w in grids)


def glm4v_video_grids(
    vision: dict[str, Any], preprocessor: dict[str, Any] | None, video_preprocessor: dict[str, Any] | None
) -> tuple[tuple[int, int, int], ...]:
    """(grid_t, grid_h, grid_w) in patches of GLM-4.1V's dummy video at 1..600 frames: the video_grid_thw its
    processor hands the vision tower (frame pairs, then the patch rows and columns of one frame)."""
    if video_preprocessor is None:
        raise LookupError("no video_preprocessor_config.json: its video size is unknown")
    image_size = (preprocessor or {}).get("size") if isinstance((preprocessor or {}).get("size"), dict) else {}
    video_size = video_preprocessor.get("size") if isinstance(video_preprocessor.get("size"), dict) else {}
    image_pixels = positive(image_size, "longest_edge", "preprocessor_config.json size")  # a pixel area, not an edge
    video_pixels = positive(video_size, "longest_edge", "video_preprocessor_config.json size")
    patch = positive(vision, "patch_size", "vision_config")
    merge = positive(vision, "spatial_merge_size", "vision_config")
    temporal = positive(vision, "temporal_patch_size", "vision_config")
    processor_temporal = video_preprocessor.get("temporal_patch_size", temporal)
    if temporal != 2 or processor_temporal != 2:  # vLLM's smart_resize call keeps temporal_factor's default, 2
        raise LookupError(f"temporal_patch_size {temporal} / {processor_temporal} (vLLM's frame count assumes 2)")
    factor = patch * merge
    # get_image_size_with_most_features: _get_vision_info(9999999 x 9999999, num_frames=1 -> 2, image max pixels)
    side_h, side_w = video_smart_resize(2, 9999999, 9999999, 2, factor, GLM4V_MIN_PIXELS, image_pixels)
    grids = []
    for frames in range(1, GLM4V_MAX_FRAMES + 1):  # _get_vision_info(target size, num_frames, video max pixels)
        height, width = video_smart_resize(max(frames, temporal), side_h, side_w, 2, factor, GLM4V_MIN_PIXELS, video_pixels)
        grid_t = max(-(-frames // temporal), 1)  # frames padded to temporal_patch_size
        grids.append((grid_t, height // patch, width // patch))
    return tuple(grids)
