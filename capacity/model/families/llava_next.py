"""LLaVA-NeXT (model_type llava_next, vLLM's LlavaNextForConditionalGeneration): the generic multimodal family with
vLLM 0.33's anyres image rule and tower.

What differs from the generic family, each from vllm/model_executor/models/llava_next.py and llava.py:
- tokens per image: LlavaNextProcessingInfo's count at its size with the most features
  (`capacity.model.items.llava_next`), from the config alone;
- encoder positions: every tile (rows x cols of the best pinpoint, plus the base image) runs the vision tower's
  (image_size // patch_size)^2 + 1 positions;
- the tower vLLM builds under `_mark_tower_model("image")`: vision_tower and multi_modal_projector, left out at
  --limit-mm-per-prompt image=0 (image_newline, a bare parameter built there, stays);
- the projector: LlavaMultiModalProjector's linear_1 column-parallel, linear_2 row-parallel;
- the vision tower vLLM allocates: `init_vision_tower_for_llava` builds only the layers up to the deepest
  vision_feature_layer (get_layer_index: -2 of 24 -> 23) and no post_layernorm (require_post_norm=False);
- the fake-tensor trace runs the tower and projector on the dummy image's tiles and packs them as vLLM's
  `_merge_image_patch_embeddings` ("spatial_unpad"), its shapes from the rule, without the image processor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from capacity.model.families.llava import LlavaFamily
from capacity.model.family import EncoderInput
from capacity.model.hf_config import materialized
from capacity.model.items.item_tokens import ItemTokens
from capacity.model.items.llava_next import AnyresImages

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from capacity.model.spec import ModelSpec
    from capacity.source.resolve import ModelSource

# llava_next.py LlavaNextForConditionalGeneration.__init__ builds the same tower modules as LLaVA under
# _mark_tower_model(vllm_config, "image"), and image_newline there too, but as a bare nn.Parameter, not a module: vLLM
# keeps it at image=0 (its own class holds 8,192 B more than without it: bench/results/vllm-weights-reference-2026-11-30).


class LlavaNextFamily(LlavaFamily):
    name = "llava_next"
    model_types: ClassVar[tuple[str, ...]] = ("llava_next",)
    method_label = "llava_next"

    def item_tokens(
        self, modality: str, config: dict[str, Any], full: dict[str, Any], preprocessor: dict[str, Any] | None, processor: dict[str, Any] | None
    ) -> ItemTokens:
        if modality != "image":
            return super().item_tokens(modality, config, full, preprocessor, processor)
        rule = AnyresImages.from_config(full)
        height, width = rule.size_with_most_features()
        return ItemTokens(
            "image",
            rule.tokens(height, width),
            "vLLM rule",
            rule.describe(),
            image_size=(height, width),
            encoder_positions=rule.tiles(height, width) * rule.tile_positions,
        )

    # --- the fake-tensor trace and the profiler ----------------------------------------------------------

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """vLLM's dummy image as the processor hands it over: its tiles, (1 + rows x cols) x 3 x side x side."""
        import torch

        rule = AnyresImages.from_config(materialized(source.config))
        height, width = rule.size_with_most_features()
        if rule.tokens(height, width) != tokens:
            raise NotImplementedError(f"the llava_next trace encodes vLLM's {rule.tokens(height, width)}-token dummy image, not a {tokens}-token item")
        rows, cols = rule.tile_grid(height, width)
        tiles = rows * cols + 1
        pixels = torch.zeros((1, tiles, 3, rule.tile_side, rule.tile_side), device=device, dtype=dtype)
        features, newlines = rule.unpadded_features(height, width)
        return EncoderInput(
            {"pixel_values": pixels},
            f"the {height}x{width} dummy image as {tiles} tiles of {rule.tile_side} px ({rows} x {cols} + base)",
            host={"rows": rows, "cols": cols, "unpadded_rows": newlines, "unpadded_cols": features // newlines, "grid": rule.grid},
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        """The tower on every tile, the feature layer without its CLS position ("default"), the projector, then
        vLLM's spatial_unpad packing: base tile, then the tiles' map cropped to the image with a newline per row."""
        import torch

        inner = getattr(model, "model", model)
        config = inner.config
        pixels = item.tensors["pixel_values"]
        tiles = pixels.shape[1]
        stacked = torch.cat([pixels] * count).flatten(0, 1)
        out = inner.vision_tower(stacked, output_hidden_states=True)
        layer = config.vision_feature_layer
        selected = out.hidden_states[layer] if isinstance(layer, int) else torch.cat([out.hidden_states[i] for i in layer], dim=-1)
        if config.vision_feature_select_strategy == "default":
            selected = selected[:, 1:]
        embeds = inner.multi_modal_projector(selected).view(count, tiles, selected.shape[1], -1)
        host = item.host
        grid, rows, cols = host["grid"], host["rows"], host["cols"]
        keep_h, keep_w = host["unpadded_rows"], host["unpadded_cols"]
        top, left = (grid * rows - keep_h) // 2, (grid * cols - keep_w) // 2
        packed = []
        for per_image in embeds:
            base, other = per_image[0], per_image[1:]
            other = other.view(rows, cols, grid, grid, -1).permute(4, 0, 2, 1, 3).contiguous().flatten(1, 2).flatten(2, 3)
            other = other[:, top : top + keep_h, left : left + keep_w]
            newline = inner.image_newline[:, None, None].expand(*other.shape[:-1], 1)
            other = torch.cat((other, newline), dim=-1).flatten(1, 2).transpose(0, 1)
            packed.append(torch.cat((base, other), dim=0))
        return packed


FAMILY = LlavaNextFamily()
