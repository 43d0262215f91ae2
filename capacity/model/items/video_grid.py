"""The dummy video vLLM 0.33 profiles for a Qwen-VL-style tower (Qwen2-VL, Qwen3-VL, GLM-4.1V): its video_grid_thw,
frame pairs x patch rows x patch columns, for the item of a given token count (the budget's max-token video), and the
processed-shape tensors the generic family's profiler hands the tower (video_tensors).

vLLM builds the dummy video at the size and frame count its get_mm_max_tokens_per_item counted (capacity/model/items
qwen_vl.py, glm4v.py hold those rules); the grid here is the same computation's shape, so the profiled item has
exactly the tokens the plan counts: grid_t x grid_h x grid_w / spatial_merge_size^2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capacity.model.family import EncoderInput
from capacity.model.hf_config import materialized
from capacity.model.items.glm4v import GLM4V_VIDEO, glm4v_video_grids
from capacity.model.items.item_tokens import positive
from capacity.model.items.qwen_vl import QWEN2_VL_VIDEO, QWEN3_VL_VIDEO, processor_pixel_bounds, qwen3_vl_video_grid, qwen_vl_max_image_grid

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.source.resolve import ModelSource


def video_grid(model_type: str, vision: dict[str, Any], preprocessor: dict[str, Any] | None, video_preprocessor: dict[str, Any] | None, tokens: int) -> tuple[int, int, int]:
    """(grid_t, grid_h, grid_w) of the `tokens`-token dummy video; LookupError when no rule gives that count."""
    merge = positive(vision, "spatial_merge_size", "vision_config")
    if model_type in GLM4V_VIDEO:  # the fewest frames whose video has `tokens` tokens (_get_max_video_frames' choice)
        grids = [g for g in glm4v_video_grids(vision, preprocessor, video_preprocessor) if g[0] * g[1] * g[2] // (merge * merge) == tokens]
        if not grids:
            raise LookupError(f"no GLM-4.1V dummy video of 1 to 600 frames has {tokens} tokens")
        return grids[0]
    if model_type in QWEN3_VL_VIDEO:
        grid = qwen3_vl_video_grid(vision, video_preprocessor)
    elif model_type in QWEN2_VL_VIDEO:  # frame pairs at the largest image's size (get_num_video_tokens)
        bounds = processor_pixel_bounds(preprocessor)
        if "shortest_edge" not in bounds or "longest_edge" not in bounds:
            raise LookupError("preprocessor_config.json gives no pixel bounds: the largest image's size is unknown")
        rows, cols = qwen_vl_max_image_grid(bounds["shortest_edge"], bounds["longest_edge"], positive(vision, "patch_size", "vision_config"), merge)
        grid = (max(tokens // (rows * cols), 1), rows * merge, cols * merge)
    else:
        raise LookupError(f"model_type {model_type!r} has no Qwen-VL-style video rule")
    if grid[0] * grid[1] * grid[2] // (merge * merge) != tokens:
        raise LookupError(f"the dummy video's grid {grid} holds {grid[0] * grid[1] * grid[2] // (merge * merge)} tokens, not the {tokens} counted")
    return grid


def video_tensors(source: ModelSource, device: str, dtype: Any, tokens: int) -> EncoderInput:
    """vLLM's dummy video of `tokens` tokens as the processor hands it to a Qwen-VL-style tower: flattened patches
    (frame pairs x rows x columns of them, each channels x temporal_patch_size x patch^2 values) and video_grid_thw."""
    import torch

    full = materialized(source.config)
    vision = full.get("vision_config") or {}
    try:
        t, h, w = video_grid(str(source.config.get("model_type")), vision, source.preprocessor, source.video_preprocessor, tokens)
    except LookupError as exc:
        raise NotImplementedError(f"the generic family builds videos for Qwen-VL-style towers only ({exc})") from exc
    patch, temporal = vision["patch_size"], vision.get("temporal_patch_size", 2)
    pixels = torch.zeros(t * h * w, vision.get("in_channels", 3) * temporal * patch * patch, device=device, dtype=dtype)
    grid = torch.tensor([[t, h, w]], device=device)
    note = f"processed-shape video patches: {t} frame pair(s) of {h * patch}x{w * patch} px -> video_grid_thw ({t}, {h}, {w}), {t * h * w} patches"
    return EncoderInput({"pixel_values_videos": pixels, "video_grid_thw": grid}, note, host={"video_grid_thw": [t, h, w]})
