"""The stored tensors one pipeline stage loads, as vLLM 0.33's PP-aware decoders build a stage.

A stage of `--pipeline-parallel-size` builds only its own decoder layers (`make_layers`: the layers outside
[start_layer, end_layer) are `PPMissingLayer`, never allocated). In vLLM 0.33's llama.py, the pattern the dense
decoders follow:

- `embed_tokens` (VocabParallelEmbedding) on the first stage, and also on the last when `tie_word_embeddings`
  (the LM head is tied to it there, `tie_weights`);
- the final norm and the `lm_head` (ParallelLMHead) on the last stage only.

The layer split itself is capacity/serving/pipeline.py's (vLLM get_pp_indices); this module only places tensors.
A multimodal model's towers are the modules its vLLM class builds under `_mark_tower_model` (the family's `towers`,
passed in as module names): Model Runner V2 builds them on the first stage only, `StageMissingLayer` on the meta
device elsewhere (vllm/model_executor/models/interfaces.py: `use_v2_model_runner and not get_pp_group().is_first_rank`);
`builds_towers` says whether this stage builds them. A tensor this module cannot place (a multi-token-prediction layer
past the decoder's count, a name no rule knows) is refused in one line rather than guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from capacity.errors import BadInput
from capacity.weights.stored_tensor import StoredTensor

# The decoder's stack: `model.layers.N.`, and the same under a multimodal wrapper or a state-space backbone.
_DECODER_LAYER = re.compile(r"^(?:model\.|backbone\.|language_model\.(?:model\.)?|model\.language_model\.)layers\.(\d+)\.")
_EMBEDDING = re.compile(r"^(?:model\.|language_model\.(?:model\.)?|model\.language_model\.)embed_tokens\.")
_LM_HEAD = re.compile(r"^(?:language_model\.)?lm_head\.")
_FINAL_NORM = re.compile(r"^(?:model\.|language_model\.(?:model\.)?|model\.language_model\.)norm\.")


@dataclass(frozen=True)
class StageSlice:
    """What one stage builds: decoder layers [start, end) of `num_layers`, the first / last stage's extras."""

    start: int
    end: int
    num_layers: int  # the decoder's num_hidden_layers (a stored layer at or past it is not placed)
    first: bool
    last: bool
    tie_word_embeddings: bool = False
    towers: tuple[str, ...] = ()  # module names built under _mark_tower_model, matched against a name's dotted parts
    builds_towers: bool = False  # the stage builds them (MRV2: the first stage only)
    every_stage: tuple[str, ...] = ()  # bare parameters assigned inside the tower context: not replaced, on every stage


def _holds(name: str, stage: StageSlice) -> bool:
    """Whether the stage builds the layer this stored tensor loads into (BadInput where no rule places it)."""
    parts = name.split(".")
    if any(part in stage.every_stage for part in parts):
        return True
    if any(part in stage.towers for part in parts):
        return stage.builds_towers
    layer = _DECODER_LAYER.match(name)
    if layer:
        index = int(layer.group(1))
        if index >= stage.num_layers:
            raise BadInput(
                f"{name}: decoder layer {index} is past the model's {stage.num_layers} layers (a multi-token-prediction layer?); "
                "its pipeline stage is not modelled: plan at --pipeline-parallel-size 1"
            )
        return stage.start <= index < stage.end
    if _EMBEDDING.match(name):
        return stage.first or (stage.last and stage.tie_word_embeddings)  # llama.py: is_first_rank or (tied and is_last_rank)
    if _LM_HEAD.match(name) or _FINAL_NORM.match(name):
        return stage.last
    raise BadInput(
        f"{name}: which pipeline stage vLLM builds this tensor on is not modelled (only decoder layers, embedding, final norm, LM head, the towers of the multimodal families read); plan at --pipeline-parallel-size 1"
    )


def stage_tensors(tensors: Iterable[StoredTensor], stage: StageSlice) -> list[StoredTensor]:
    """The stored tensors the stage loads (the rest are PPMissingLayer on it)."""
    return [t for t in tensors if _holds(t.name, stage)]
