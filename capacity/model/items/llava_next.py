"""LLaVA-NeXT image tokens by vLLM 0.33's rule (LlavaNextProcessingInfo, model_executor/models/llava_next.py).

An image of height x width is tiled "anyres": transformers' `select_best_resolution` picks the grid pinpoint
(height, width) that keeps the most of the image and wastes the least, the image is split into rows x cols
tiles of the vision tower's side (`get_anyres_image_grid_shape`), and a base image of one tile is added. Every
tile is a (image_size // patch_size)^2 patch grid; the embeddings an image yields (get_num_image_tokens) are

    base         = patches of one tile as the feature select strategy keeps them (CLIP: grid^2 + 1 with its CLS
                   token; "default" drops the CLS, "full" keeps it: get_num_selected_vision_tokens)
    unpadded     = the tiles' (rows x grid) x (cols x grid) feature map with the padding of the resize removed
                   along the side the image does not fill (_get_num_unpadded_features)
    newlines     = one `image_newline` per row of that map
    tokens       = unpadded + newlines + base

vLLM profiles the pinpoint with the most tokens (get_image_size_with_most_features, then LlavaDummyInputsBuilder
builds its dummy image at that size). Pure arithmetic on the config: no processor file is read, as vLLM reads
none for the count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capacity.errors import BadInput

# Patch positions the vision tower runs for one tile, by vision_config.model_type (vLLM's VisionEncoderInfo
# get_num_image_tokens): CLIP adds its class embedding; SigLIP has none.
TOWER_EXTRA_POSITIONS: dict[str, int] = {"clip_vision_model": 1, "siglip_vision_model": 0}


def select_best_resolution(height: int, width: int, pinpoints: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """transformers image_processing_utils.select_best_resolution: the (height, width) pinpoint with the largest
    effective resolution (the image scaled to fit it), ties broken by the least wasted area; the first such wins."""
    best: tuple[int, int] | None = None
    best_effective, best_wasted = 0, float("inf")
    for pin_h, pin_w in pinpoints:
        scale = min(pin_w / width, pin_h / height)
        down_w, down_h = int(width * scale), int(height * scale)
        effective = min(down_w * down_h, width * height)
        wasted = pin_w * pin_h - effective
        if effective > best_effective or (effective == best_effective and wasted < best_wasted):
            best, best_effective, best_wasted = (pin_h, pin_w), effective, wasted
    if best is None:
        raise BadInput(f"image_grid_pinpoints {list(pinpoints)} fit no {height}x{width} image")
    return best


@dataclass(frozen=True)
class AnyresImages:
    """What LlavaNextProcessingInfo reads of the config: the pinpoints and the vision tower's tile and patch sides."""

    pinpoints: tuple[tuple[int, int], ...]  # image_grid_pinpoints, each (height, width)
    tile_side: int  # vision_config.image_size
    patch_side: int  # vision_config.patch_size
    select_strategy: str  # vision_feature_select_strategy: "default" drops the CLS position, "full" keeps it
    tower_extra_positions: int  # positions a tile runs besides its patches (CLIP's class embedding: 1)

    @classmethod
    def from_config(cls, full: dict[str, Any]) -> AnyresImages:
        """From a config with transformers' LlavaNextConfig defaults filled in (what vLLM's AutoConfig sees);
        a field the rule cannot read is refused in one line naming it."""
        vision = full.get("vision_config") if isinstance(full.get("vision_config"), dict) else {}
        tower = str(vision.get("model_type"))
        if tower not in TOWER_EXTRA_POSITIONS:
            raise BadInput(
                f"llava_next: vision_config.model_type {tower!r}: capacity counts LLaVA-NeXT images for the "
                f"{' and '.join(TOWER_EXTRA_POSITIONS)} towers only"
            )
        strategy = full.get("vision_feature_select_strategy")
        if strategy not in ("default", "full"):
            raise BadInput(f"llava_next: vision_feature_select_strategy {strategy!r} is neither 'default' nor 'full' (vLLM's get_num_selected_vision_tokens)")
        pins = full.get("image_grid_pinpoints")
        if not isinstance(pins, list) or not pins or not all(_is_pair(p) for p in pins):
            raise BadInput(f"llava_next: image_grid_pinpoints {pins!r} is not a list of [height, width] pairs of positive integers")
        side, patch = vision.get("image_size"), vision.get("patch_size")
        if not (_positive_int(side) and _positive_int(patch)) or side % patch:
            raise BadInput(f"llava_next: vision_config.image_size {side!r} is not a positive multiple of patch_size {patch!r} (CLIPEncoderInfo.get_patch_grid_length)")
        return cls(tuple((int(h), int(w)) for h, w in pins), side, patch, strategy, TOWER_EXTRA_POSITIONS[tower])

    @property
    def grid(self) -> int:
        """Patches per tile side (get_patch_grid_length)."""
        return self.tile_side // self.patch_side

    @property
    def tile_positions(self) -> int:
        """Positions the vision tower runs per tile (VisionEncoderInfo.get_num_image_tokens)."""
        return self.grid**2 + self.tower_extra_positions

    def base_tokens(self) -> int:
        """The base image's embeddings (get_num_selected_vision_tokens): "default" drops one position, "full" none."""
        return self.tile_positions - 1 if self.select_strategy == "default" else self.tile_positions

    def tile_grid(self, height: int, width: int) -> tuple[int, int]:
        """(rows, cols) of tiles (transformers get_anyres_image_grid_shape, as vLLM calls it with (height, width))."""
        pin_h, pin_w = select_best_resolution(height, width, self.pinpoints)
        return pin_h // self.tile_side, pin_w // self.tile_side

    def tiles(self, height: int, width: int) -> int:
        """Tiles the tower encodes for the image: rows x cols plus the base image (image_size_to_num_patches)."""
        rows, cols = self.tile_grid(height, width)
        return rows * cols + 1

    def unpadded_features(self, height: int, width: int) -> tuple[int, int]:
        """(features, newlines) of the tiles' map less its padding (LlavaNextProcessingInfo._get_num_unpadded_features)."""
        rows, cols = self.tile_grid(height, width)
        current_h, current_w = self.grid * rows, self.grid * cols
        if width / height > current_w / current_h:  # wider than the map: rows of padding above and below
            new_h = int(round(height * (current_w / width), 7))
            current_h -= 2 * ((current_h - new_h) // 2)
        else:
            new_w = int(round(width * (current_h / height), 7))
            current_w -= 2 * ((current_w - new_w) // 2)
        return current_h * current_w, current_h

    def tokens(self, height: int, width: int) -> int:
        """Embeddings of one image (LlavaNextProcessingInfo.get_num_image_tokens)."""
        features, newlines = self.unpadded_features(height, width)
        return features + newlines + self.base_tokens()

    def size_with_most_features(self) -> tuple[int, int]:
        """(height, width) of vLLM's dummy image: the first pinpoint with strictly the most tokens
        (get_image_size_with_most_features)."""
        best, best_tokens = self.pinpoints[0], 0
        for pin_h, pin_w in self.pinpoints:
            tokens = self.tokens(pin_h, pin_w)
            if tokens > best_tokens:
                best, best_tokens = (pin_h, pin_w), tokens
        return best

    def describe(self) -> str:
        height, width = self.size_with_most_features()
        rows, cols = self.tile_grid(height, width)
        features, newlines = self.unpadded_features(height, width)
        return (
            f"LlavaNextProcessingInfo.get_num_image_tokens at get_image_size_with_most_features {height}x{width}: "
            f"{rows} x {cols} tiles of {self.tile_side} -> {features} unpadded + {newlines} newlines + {self.base_tokens()} base "
            f"({self.select_strategy} strategy)"
        )


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_pair(value: object) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 2 and all(_positive_int(v) for v in value)
