"""Idefics3 / SmolVLM image tokens by vLLM 0.33's rule (Idefics3ProcessingInfo), without the tokenizer: its HF
processor counts with the tokenizer, vLLM's rule does not."""

from __future__ import annotations

import math
from typing import Any

from capacity.errors import BadInput
from capacity.model.items.item_tokens import ItemTokens, positive

# model_types whose images vLLM 0.33 counts with Idefics3ProcessingInfo (SmolVLMProcessingInfo subclasses it).
IDEFICS3_IMAGES = ("idefics3", "smolvlm")
IDEFICS3_MAX_SIDE = 4096  # transformers idefics3 / smolvlm image processors: MAX_IMAGE_SIZE


def idefics3_image_tokens(full: dict[str, Any], preprocessor: dict[str, Any] | None, processor: dict[str, Any] | None) -> ItemTokens:
    """The <image> embeddings of vLLM's dummy image, a square of max_image_size.longest_edge
    (vLLM: Idefics3ProcessingInfo.get_num_image_tokens = max(num_patches, 1) x image_seq_len). The budget counts
    only these (get_num_embeds: select_token_id(image_token_id)); the <fake_token_around_image>, <global-img>,
    <row_i_col_j> and newline text tokens around them are prompt tokens, not embeddings, and are not counted."""
    pre, proc = preprocessor or {}, processor or {}
    vision = full.get("vision_config") or {}
    try:
        size = positive(pre.get("size") if isinstance(pre.get("size"), dict) else {}, "longest_edge", "preprocessor_config.json size")
        tile_side = positive(pre.get("max_image_size") if isinstance(pre.get("max_image_size"), dict) else {}, "longest_edge", "preprocessor_config.json max_image_size")
        seq_len = positive(proc, "image_seq_len", "processor_config.json")
        patch = positive(vision, "patch_size", "vision_config")
        side = positive(vision, "image_size", "vision_config")
        scale = positive(full, "scale_factor", "config.json")
    except LookupError as exc:
        raise BadInput(f"{full.get('model_type')}: {exc}, which vLLM's Idefics3 image count needs") from exc
    split = bool(pre.get("do_image_splitting", True))  # the image processors' class default
    per_tile = (side // patch) ** 2 // (scale * scale)  # the connector's pixel shuffle: what one tile yields
    if per_tile != seq_len:
        raise BadInput(
            f"{full.get('model_type')}: processor_config.json image_seq_len {seq_len} is not (image_size {side} // patch_size {patch})^2 "
            f"/ scale_factor {scale}^2 = {per_tile}, the embeddings one tile yields"
        )
    tiles, rows, cols = idefics3_image_patches(tile_side, tile_side, size, tile_side, split)
    tiles = max(tiles, 1)  # get_num_patches: an unsplit image is one
    return ItemTokens(
        "image",
        tiles * seq_len,
        "vLLM rule",
        f"Idefics3ProcessingInfo.get_num_image_tokens on its {tile_side}x{tile_side} dummy image: ({rows} x {cols} tiles + 1 global) "
        f"x image_seq_len {seq_len}" if rows else f"Idefics3ProcessingInfo.get_num_image_tokens: 1 tile x image_seq_len {seq_len}",
    )


def idefics3_image_patches(height: int, width: int, longest_edge: int, tile_side: int, split: bool) -> tuple[int, int, int]:
    """(tiles incl. the global image, rows, cols) of an image (vLLM: Idefics3ProcessingInfo._get_image_feature_grid_size,
    i.e. transformers' Idefics3ImageProcessor.get_number_of_image_patches); (0, 0, 0) when it is not split."""
    if not split:
        return 0, 0, 0
    if width >= height:  # _resize_output_size_rescale_to_max_len: the longest edge to size.longest_edge, the other even
        height, width = int(longest_edge / (width / height)), longest_edge
        height += height % 2
    else:
        height, width = longest_edge, int(longest_edge * (width / height))
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    if max(height, width) > IDEFICS3_MAX_SIDE:  # _resize_output_size_scale_below_upper_bound
        aspect = width / height
        height, width = (int(IDEFICS3_MAX_SIDE / aspect), IDEFICS3_MAX_SIDE) if width >= height else (IDEFICS3_MAX_SIDE, int(IDEFICS3_MAX_SIDE * aspect))
        height, width = max(height, 1), max(width, 1)
    rows, cols = math.ceil(height / tile_side), math.ceil(width / tile_side)  # sides rounded up to whole tiles
    if rows > 1 or cols > 1:
        return rows * cols + 1, rows, cols
    return 0, 0, 0
