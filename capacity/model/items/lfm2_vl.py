"""LFM2-VL image tokens by vLLM 0.33's rule (Lfm2VLProcessingInfo), without the tokenizer.

vLLM's encoder budget counts the embeddings of its dummy image's placeholder: only the `<image>` tokens
(`PromptUpdateDetails.select_token_id(image_token_id)`); the image start / end, thumbnail and
`<|img_row_i_col_j|>` markers around them are prompt tokens, not embeddings. The dummy image is a square of
side int(sqrt(max_image_tokens x encoder_patch_size^2 x downsample_factor^2)) (get_image_size_with_most_features).

- An image that is not "too large" (`_is_image_too_large`: its sides rounded to patch x downsample exceed
  max_image_tokens x (patch x downsample)^2 x max_pixels_tolerance pixels), or one vLLM does not split
  (min_tiles == max_tiles == 1), is one picture at its `smart_resize` size: ceil(h / patch / downsample) x
  ceil(w / patch / downsample) embeddings (get_num_image_tokens: the processor's last spatial shape).
- A larger one is cut into the grid `_get_grid_layout` picks (transformers' find_closest_aspect_ratio over the
  (cols, rows) with min_tiles <= cols x rows <= max_tiles), each tile ceil((tile_size // patch) / downsample)^2
  embeddings, plus the thumbnail at its smart_resize size.

The settings are the image processor's: transformers' Lfm2VlImageProcessor class defaults overridden by the
model's preprocessor_config.json (flat) or processor_config.json (nested under "image_processor", transformers 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from capacity.errors import BadInput
from capacity.model.items.item_tokens import ItemTokens


def round_by_factor(number: float, factor: int) -> int:
    """transformers lfm2_vl round_by_factor: the multiple of `factor` closest to `number` (Python's round)."""
    return round(number / factor) * factor


def target_ratios(min_tiles: int, max_tiles: int) -> list[tuple[int, int]]:
    """Lfm2VLProcessingInfo._target_ratios: (cols, rows) with min_tiles <= cols x rows <= max_tiles, by tile count."""
    ratios = {(w, h) for n in range(min_tiles, max_tiles + 1) for w in range(1, n + 1) for h in range(1, n + 1) if min_tiles <= w * h <= max_tiles}
    return sorted(ratios, key=lambda r: r[0] * r[1])


def closest_aspect_ratio(aspect: float, ratios: list[tuple[int, int]], width: int, height: int, tile_size: int) -> tuple[int, int]:
    """transformers find_closest_aspect_ratio: the (cols, rows) nearest the image's width / height; on a tie the later
    ratio wins when the image covers more than half its area (tile_size^2 x cols x rows)."""
    best, best_diff = (1, 1), float("inf")
    for cols, rows in ratios:
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and width * height > 0.5 * tile_size * tile_size * cols * rows:
            best = (cols, rows)
    return best


@dataclass(frozen=True)
class Lfm2VlImageSettings:
    """The image-processor settings vLLM's Lfm2VLProcessingInfo reads; defaults are transformers' Lfm2VlImageProcessor's."""

    downsample_factor: int = 2
    encoder_patch_size: int = 16
    min_image_tokens: int = 64
    max_image_tokens: int = 256
    max_pixels_tolerance: float = 2.0
    min_tiles: int = 2
    max_tiles: int = 10
    tile_size: int = 512
    use_thumbnail: bool = True
    do_image_splitting: bool = True

    @classmethod
    def from_files(cls, preprocessor: dict[str, Any] | None, processor: dict[str, Any] | None) -> tuple[Lfm2VlImageSettings, str] | None:
        """The settings from preprocessor_config.json, else processor_config.json's "image_processor"; None when
        neither file is there (the class defaults are not assumed to be the model's)."""
        nested = (processor or {}).get("image_processor")
        for values, source in ((preprocessor, "preprocessor_config.json"), (nested, "processor_config.json image_processor")):
            if isinstance(values, dict) and values:
                return cls._checked({f.name: values[f.name] for f in fields(cls) if f.name in values}, source), source
        return None

    @classmethod
    def _checked(cls, values: dict[str, Any], source: str) -> Lfm2VlImageSettings:
        settings = cls(**values)
        for f in fields(cls):
            value = getattr(settings, f.name)
            if f.type == "bool":
                ok = isinstance(value, bool)
            elif f.type == "float":
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
            else:
                ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
            if not ok:
                raise BadInput(f"lfm2_vl: {source} {f.name} is {value!r}, which vLLM's LFM2-VL image count cannot take")
        if settings.min_tiles > settings.max_tiles:
            raise BadInput(f"lfm2_vl: {source} min_tiles {settings.min_tiles} > max_tiles {settings.max_tiles} (the image processor refuses it)")
        return settings

    @property
    def factor(self) -> int:
        """encoder_patch_size x downsample_factor: the pixels of one embedding's side."""
        return self.encoder_patch_size * self.downsample_factor

    def dummy_side(self) -> int:
        """Lfm2VLProcessingInfo.get_image_size_with_most_features: int(sqrt(max_image_tokens x factor^2))."""
        return int(math.sqrt(self.max_image_tokens * self.encoder_patch_size**2 * self.downsample_factor**2))

    def is_image_too_large(self, height: int, width: int) -> bool:
        """Lfm2VLProcessingInfo._is_image_too_large."""
        h_bar = max(self.encoder_patch_size, round_by_factor(height, self.factor))
        w_bar = max(self.encoder_patch_size, round_by_factor(width, self.factor))
        return h_bar * w_bar > self.max_image_tokens * self.encoder_patch_size**2 * self.downsample_factor**2 * self.max_pixels_tolerance

    def smart_resize(self, height: int, width: int) -> tuple[int, int]:
        """Lfm2VLProcessingInfo.smart_resize as (height, width): sides multiples of the factor, pixels within
        [min_image_tokens, max_image_tokens] x factor^2 (vLLM returns (width, height))."""
        f = self.factor
        min_pixels, max_pixels = self.min_image_tokens * f * f, self.max_image_tokens * f * f
        h_bar, w_bar = max(f, round_by_factor(height, f)), max(f, round_by_factor(width, f))
        if h_bar * w_bar > max_pixels:
            beta = math.sqrt(height * width / max_pixels)
            h_bar, w_bar = max(f, math.floor(height / beta / f) * f), max(f, math.floor(width / beta / f) * f)
        elif h_bar * w_bar < min_pixels:
            beta = math.sqrt(min_pixels / (height * width))
            h_bar, w_bar = math.ceil(height * beta / f) * f, math.ceil(width * beta / f) * f
        return h_bar, w_bar

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """(cols, rows) of vLLM's _get_image_feature_grid_size: (1, 1) unless the image is too large and vLLM splits
        (it splits unless min_tiles == max_tiles == 1, whatever do_image_splitting says)."""
        splits = not self.min_tiles == self.max_tiles == 1
        if not (splits and self.is_image_too_large(height, width)):
            return 1, 1
        return closest_aspect_ratio(width / height, target_ratios(self.min_tiles, self.max_tiles), width, height, self.tile_size)

    def tile_tokens(self) -> int:
        """get_num_image_tokens' num_tiles_tokens: ceil((tile_size // patch) / downsample)^2."""
        return math.ceil(self.tile_size // self.encoder_patch_size / self.downsample_factor) ** 2

    def picture_tokens(self, height: int, width: int) -> int:
        """get_num_image_tokens' num_thumbnail_tokens for a picture the processor resizes to smart_resize."""
        h, w = self.smart_resize(height, width)
        return math.ceil(h // self.encoder_patch_size / self.downsample_factor) * math.ceil(w // self.encoder_patch_size / self.downsample_factor)

    def image_tokens(self, height: int, width: int) -> tuple[int, int, int]:
        """(embeddings, cols, rows) of one image (vLLM: get_image_repl's <image> tokens)."""
        cols, rows = self.grid(height, width)
        if cols * rows == 1:
            return self.picture_tokens(height, width), 1, 1
        if not (self.do_image_splitting and self.use_thumbnail):
            # The processor would not split it (do_image_splitting false), or would end on a tile instead of a
            # thumbnail (use_thumbnail false), while vLLM's placeholder counts tiles and a thumbnail: they disagree.
            raise BadInput(
                f"lfm2_vl: vLLM counts a {cols} x {rows} tile grid and a thumbnail for a {height} x {width} image, but the image "
                f"processor has do_image_splitting {self.do_image_splitting} / use_thumbnail {self.use_thumbnail}: vLLM's "
                "placeholder and the processor's tiles disagree, which capacity does not model"
            )
        return cols * rows * self.tile_tokens() + self.picture_tokens(height, width), cols, rows

    def dummy_image_tokens(self) -> tuple[int, str]:
        """The embeddings of vLLM's dummy image, and how they were counted."""
        side = self.dummy_side()
        tokens, cols, rows = self.image_tokens(side, side)
        h, w = self.smart_resize(side, side)
        if cols * rows == 1:
            how = f"one picture resized to {h} x {w}: ({h} // {self.encoder_patch_size} / {self.downsample_factor}) x ({w} // {self.encoder_patch_size} / {self.downsample_factor})"
        else:
            how = f"{cols} x {rows} tiles of {self.tile_tokens()} + a {h} x {w} thumbnail"
        return tokens, f"Lfm2VLProcessingInfo on its {side} x {side} dummy image: {how} = {tokens}"


# model_types whose images vLLM 0.33 counts with Lfm2VLProcessingInfo.
LFM2_VL_IMAGES = ("lfm2_vl",)


def lfm2_vl_image_tokens(preprocessor: dict[str, Any] | None, processor: dict[str, Any] | None) -> ItemTokens:
    """The <image> embeddings of vLLM's LFM2-VL dummy image (Lfm2VlImageSettings); not counted, and
    the modality refused unless --limit-mm-per-prompt image=0, when neither processor file is there."""
    found = Lfm2VlImageSettings.from_files(preprocessor, processor)
    if found is None:
        return ItemTokens(
            "image",
            0,
            "vLLM rule",
            "",
            unmodelled=(
                "no preprocessor_config.json / processor_config.json: the tokens per image depend on the image processor's "
                "max_image_tokens, encoder_patch_size, downsample_factor and tiling settings, which were not found"
            ),
        )
    settings, source = found
    tokens, detail = settings.dummy_image_tokens()
    side = settings.dummy_side()
    return ItemTokens("image", tokens, "vLLM rule", f"{detail} ({source})", image_size=(side, side))
