"""LLaVA (model_type llava, vLLM's LlavaForConditionalGeneration): the generic multimodal family with the tower vLLM
allocates.

What differs from the generic family, each from vllm/model_executor/models/llava.py:
- the tower vLLM builds under `_mark_tower_model("image")`: vision_tower and multi_modal_projector, left out at
  --limit-mm-per-prompt image=0;
- the projector: LlavaMultiModalProjector's linear_1 column-parallel, linear_2 row-parallel;
- the vision tower vLLM allocates: `init_vision_tower_for_llava` builds only the layers up to the deepest
  vision_feature_layer (get_layer_index: -2 of 24 -> 23) and no post_layernorm (require_post_norm=False): for
  LLaVA-1.5's CLIP ViT-L/14-336, one layer of 12,596,224 parameters and the 2,048 of the norm fewer than the
  checkpoint stores.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

from capacity.errors import BadInput
from capacity.model.families.generic import GenericFamily
from capacity.model.family import Tower
from capacity.model.hf_config import materialized

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.weights.stored_tensor import StoredTensor

LLAVA_TOWER = Tower(("image",), ("vision_tower", "multi_modal_projector"))  # llava.py LlavaForConditionalGeneration.__init__
LLAVA_PROJECTOR = ((r"(^|\.)multi_modal_projector\.linear_1$",), (r"(^|\.)multi_modal_projector\.linear_2$",))  # llava.py LlavaMultiModalProjector

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
        kind = full.get("model_type", "llava")
        raise BadInput(f"{kind}: vision_feature_layer {feature!r} / vision_config.num_hidden_layers {total!r}: vLLM needs integers to build its vision tower")
    return max(total + i + 1 if i < 0 else i for i in layers)


class LlavaFamily(GenericFamily):
    name = "llava"
    model_types: ClassVar[tuple[str, ...]] = ("llava",)
    fallback_rank: ClassVar[int | None] = None
    method_label = "llava"
    adds_vllm_tensors = True  # vllm_tensors changes the set (drops the unused vision layers): a summary's total is not vLLM's

    def towers(self, config: dict[str, Any]) -> tuple[Tower, ...]:
        return (LLAVA_TOWER,)

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


FAMILY = LlavaFamily()
