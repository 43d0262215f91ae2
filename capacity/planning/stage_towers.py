"""Where vLLM 0.33 builds a multimodal model's towers and language model across pipeline stages, family by family.

Read in vLLM 0.33.0's model files (vllm/model_executor/models/), for the families listed in `TOWER_FAMILIES`:

- every one builds its tower(s) and projector under `SupportsMultiModal._mark_tower_model` (interfaces.py), which
  with Model Runner V2 on a stage other than the first replaces them by `StageMissingLayer` on the meta device
  (`vllm_config.use_v2_model_runner and not get_pp_group().is_first_rank`): towers on the first stage only, no
  `get_pp_group` test of their own (llava.py, llava_next.py, qwen2_vl.py, qwen2_5_vl.py, gemma3_mm.py, internvl.py;
  qwen3_vl.py's only PP tests are its language model's and the deepstack assertion below);
- the language model (`_mark_language_model`) is an ordinary PP-aware decoder, split by get_pp_indices over the text
  config's layers, and the model's `make_empty_intermediate_tensors` is the language model's: the keys sent between
  stages are its decoder's (capacity/memory/vllm_intermediate_keys.json, or read here where the class is not listed);
- MRV2's profile_run profiles the encoder cache on the first stage only (v1/worker/gpu/model_runner.py:
  `if self.supports_mm_inputs and self.is_first_pp_rank`), and only the first stage has an EncoderCache and an
  encoder runner: the encoder phase and the encoder cache are the first stage's (capacity/planning/stages.py).

Any other multimodal family is refused at PP > 1 in one line (not read); so is the V1 model runner (its tower
placement, every stage, and its profile_run at PP are not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capacity.errors import BadInput
from capacity.model.spec import ModelSpec


@dataclass(frozen=True)
class TowerFamily:
    """One multimodal class read at PP > 1: its vLLM file, the language model class it builds (None: the text
    config's own, as `init_vllm_registered_model(hf_config=text_config)` resolves it) and, where that class's module
    is not in the key list, the intermediate keys read by hand."""

    vllm_file: str
    language_model: str | None
    text_config_key: str = "text_config"
    keys: tuple[str, ...] = ()
    deepstack: bool = False  # qwen3_vl.py: a non-first stage must start at or past len(deepstack_visual_indexes)
    # bare nn.Parameters assigned inside _mark_tower_model: its hook replaces modules only, so every stage keeps them
    # (as vLLM keeps LLaVA-NeXT's image_newline at --limit-mm-per-prompt image=0: capacity/model/families/llava_next.py)
    every_stage: tuple[str, ...] = ()


# By config.json model_type.
TOWER_FAMILIES: dict[str, TowerFamily] = {
    "llava": TowerFamily("llava.py", None),
    "llava_next": TowerFamily("llava_next.py", None, every_stage=("image_newline",)),
    "qwen2_vl": TowerFamily("qwen2_vl.py", "Qwen2ForCausalLM"),  # init_vllm_registered_model(architectures=["Qwen2ForCausalLM"])
    "qwen2_5_vl": TowerFamily("qwen2_5_vl.py", "Qwen2ForCausalLM"),
    "gemma3": TowerFamily("gemma3_mm.py", "Gemma3ForCausalLM"),  # architectures=["Gemma3ForCausalLM"]
    "internvl_chat": TowerFamily("internvl.py", None, text_config_key="llm_config"),  # vLLM maps llm_config to text_config
    # Qwen3LLMForCausalLM: Qwen3LLMModel.forward sends IntermediateTensors({"hidden_states", "residual"}), its
    # make_empty_intermediate_tensors is Qwen3Model's (qwen2.py's factory, ["hidden_states", "residual"])
    "qwen3_vl": TowerFamily("qwen3_vl.py", "Qwen3LLMForCausalLM", keys=("hidden_states", "residual"), deepstack=True),
}


def tower_family(spec: ModelSpec, config: dict[str, Any], pp: int) -> TowerFamily | None:
    """The family read for a multimodal model (None for a text-only one); BadInput for one not read."""
    if not (spec.modalities or spec.encoder is not None):
        return None
    model_type = str(config.get("model_type"))
    if model_type == "mllama":
        raise BadInput(
            f"--pipeline-parallel-size {pp}: {spec.name} is an encoder-decoder (cross-attention) model; vLLM 0.33 does not serve "
            "MllamaForConditionalGeneration (removed in 0.10.2)"
        )
    family = TOWER_FAMILIES.get(model_type)
    if family is None:
        raise BadInput(
            f"--pipeline-parallel-size {pp}: where vLLM 0.33 places {spec.name}'s tower ({model_type}) on the stages is not read "
            f"(read: {', '.join(sorted(TOWER_FAMILIES))}); plan at --pipeline-parallel-size 1"
        )
    return family


def language_model_architecture(family: TowerFamily, config: dict[str, Any]) -> str:
    """The class vLLM builds for the language model: the family's fixed one, else the text config's `architectures[0]`,
    else transformers' causal-LM class for its model_type (VllmConfig.with_hf_config)."""
    if family.language_model is not None:
        return family.language_model
    text = config.get(family.text_config_key) or {}
    named = text.get("architectures")
    if isinstance(named, list) and named and isinstance(named[0], str):
        return named[0]
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(str(text.get("model_type")))
    if not isinstance(found, str):
        raise BadInput(f"config.json {family.text_config_key} names no architecture and its model_type {text.get('model_type')!r} has no causal-LM class")
    return found


def intermediate_keys(family: TowerFamily, config: dict[str, Any], listed: dict[str, list[str]], pp: int) -> tuple[tuple[str, ...], str]:
    """The keys a non-first stage receives (the language model's make_empty_intermediate_tensors), and that class."""
    arch = language_model_architecture(family, config)
    if family.keys:
        return family.keys, arch
    if arch not in listed:
        raise BadInput(
            f"--pipeline-parallel-size {pp}: which tensors the language model {arch} sends between stages is not read from vLLM 0.33; "
            "plan at --pipeline-parallel-size 1"
        )
    return tuple(listed[arch]), arch


def check_deepstack(family: TowerFamily, config: dict[str, Any], first_non_first_start: int | None, pp: int) -> None:
    """qwen3_vl.py asserts a non-first stage's start_layer >= len(deepstack_visual_indexes): vLLM fails to start."""
    if not family.deepstack or first_non_first_start is None:
        return
    levels = len((config.get("vision_config") or {}).get("deepstack_visual_indexes") or ())
    if first_non_first_start < levels:
        raise BadInput(
            f"--pipeline-parallel-size {pp}: the second stage starts at layer {first_non_first_start}, before the {levels} deepstack layers "
            "(vLLM 0.33's Qwen3-VL asserts start_layer >= len(deepstack_visual_indexes)); move layers to the first stage"
        )
