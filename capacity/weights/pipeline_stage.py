"""The stored tensors one pipeline stage loads, as vLLM 0.33's PP-aware decoders build a stage.

A stage of `--pipeline-parallel-size` builds only its own decoder layers (`make_layers`: the layers outside
[start_layer, end_layer) are `PPMissingLayer`, never allocated). In vLLM 0.33's llama.py, the pattern the dense
decoders follow:

- `embed_tokens` (VocabParallelEmbedding) on the first stage, and also on the last when `tie_word_embeddings`
  (the LM head is tied to it there, `tie_weights`);
- the final norm and the `lm_head` (ParallelLMHead) on the last stage only.

The layer split itself is capacity/serving/pipeline.py's (vLLM get_pp_indices); this module only places tensors.
A tensor this module cannot place (a vision / audio tower, a multi-token-prediction layer past the decoder's count,
a name no rule knows) is refused in one line rather than guessed: where vLLM puts towers is per family (LLaVA builds
its tower on every stage) and is not modelled yet.
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


def _holds(name: str, stage: StageSlice) -> bool:
    """Whether the stage builds the layer this stored tensor loads into (BadInput where no rule places it)."""
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
        f"{name}: which pipeline stage vLLM builds this tensor on is not modelled (only decoder layers, embedding, final norm, LM head); plan at --pipeline-parallel-size 1"
    )


def stage_tensors(tensors: Iterable[StoredTensor], stage: StageSlice) -> list[StoredTensor]:
    """The stored tensors the stage loads (the rest are PPMissingLayer on it)."""
    return [t for t in tensors if _holds(t.name, stage)]
