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

import re
from typing import TYPE_CHECKING, Any, ClassVar

from capacity.errors import BadInput
from capacity.model.families.generic import LLAVA_PROJECTOR, GenericFamily
from capacity.model.family import EncoderInput, Tower
from capacity.model.hf_config import materialized
from capacity.model.items.item_tokens import ItemTokens
from capacity.model.items.llava_next import AnyresImages

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from capacity.model.spec import ModelSpec
    from capacity.source.resolve import ModelSource
    from capacity.weights.stored_tensor import StoredTensor

# llava_next.py LlavaNextForConditionalGeneration.__init__: the modules under _mark_tower_model(vllm_config, "image").
# image_newline is built there too, but as a bare nn.Parameter, not a module: vLLM keeps it at image=0 (its own
# class holds 8,192 B more than without it: bench/results/vllm-weights-reference-2026-11-30).
LLAVA_NEXT_TOWER = Tower(("image",), ("vision_tower", "multi_modal_projector"))

# The tower's layers and final norm, as checkpoints name them (vision_tower.vision_model.encoder...) and as
# transformers 5's meta build does (model.vision_tower.encoder...).
_TOWER_LAYER = re.compile(r"(^|\.)vision_tower\.(vision_model\.)?encoder\.layers\.(?P<index>\d+)\.")
_POST_NORM = re.compile(r"(^|\.)vision_tower\.(vision_model\.)?post_layernorm\.")


def tower_layers_built(full: dict[str, Any]) -> int:
    """Vision layers vLLM builds (llava.py _get_num_hidden_layers with utils.get_layer_index): up to the deepest
    feature layer; a negative index counts from the end (num_hidden_layers + index + 1)."""
    total = (full.get("vision_config") or {}).get("num_hidden_layers")
    feature = full.get("vision_feature_layer", -2)
    layers = list(feature) if isinstance(feature, (list, tuple)) else [feature]
    if not isinstance(total, int) or not layers or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
        raise BadInput(f"llava_next: vision_feature_layer {feature!r} / vision_config.num_hidden_layers {total!r}: vLLM needs integers to build its vision tower")
    return max(total + i + 1 if i < 0 else i for i in layers)


class LlavaNextFamily(GenericFamily):
    name = "llava_next"
    model_types: ClassVar[tuple[str, ...]] = ("llava_next",)
    fallback_rank: ClassVar[int | None] = None
    method_label = "llava_next"
    adds_vllm_tensors = True  # vllm_tensors changes the set (drops the unused vision layers): a summary's total is not vLLM's

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

    def towers(self, config: dict[str, Any]) -> tuple[Tower, ...]:
        return (LLAVA_NEXT_TOWER,)

    def column_parallel_modules(self, config: dict[str, Any]) -> tuple[str, ...]:
        return LLAVA_PROJECTOR[0]  # LlavaMultiModalProjector.linear_1: ColumnParallelLinear

    def row_parallel_modules(self, config: dict[str, Any]) -> tuple[str, ...]:
        return LLAVA_PROJECTOR[1]  # LlavaMultiModalProjector.linear_2: RowParallelLinear

    def vllm_tensors(self, tensors: tuple[StoredTensor, ...], config: dict[str, Any]) -> tuple[StoredTensor, ...]:
        """Without the vision layers past the deepest feature layer and the post_layernorm, which vLLM never builds."""
        built = tower_layers_built(materialized(config))

        def kept(name: str) -> bool:
            layer = _TOWER_LAYER.search(name)
            return not _POST_NORM.search(name) and (layer is None or int(layer.group("index")) < built)

        return tuple(t for t in tensors if kept(t.name))

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
