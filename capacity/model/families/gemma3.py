"""Gemma-3 (Gemma3ForConditionalGeneration): SigLIP encoder, decoder with 5:1 sliding-window:full layers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from capacity.kv.text_config import kv_layers
from capacity.model.families.common import config_dtype, need, sub
from capacity.model.families.decoder_only import decoder_shape
from capacity.model.family import EncoderInput, Family, Tower
from capacity.model.items.pan_and_scan import PanAndScan
from capacity.model.spec import EncoderShape, Modality, ModelSpec, VllmSupport, derive_max_model_len, keyed_by_layer_type

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from capacity.source.resolve import ModelSource

# Gemma3TextConfig defaults (transformers), used where the published config is sparse.
TEXT_DEFAULTS: dict[str, Any] = {
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "vocab_size": 262_208,
    "sliding_window": 4096,
    "max_position_embeddings": 131_072,
    "sliding_window_pattern": 6,
    "hidden_activation": "gelu_pytorch_tanh",
}
ROPE_THETA = {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}  # Gemma3TextConfig.default_theta
SIGLIP_DEFAULTS: dict[str, Any] = {"image_size": 224, "patch_size": 16, "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12}
# where with_processor_kwargs leaves vLLM's --mm-processor-kwargs in the processor config the spec reads
MM_KWARGS_KEY = "mm_processor_kwargs"


def pan_and_scan(processor: dict[str, Any] | None) -> PanAndScan:
    """The pan-and-scan settings vLLM reads: --mm-processor-kwargs (carried in the processor config by
    with_processor_kwargs) over transformers' Gemma3ProcessorKwargs defaults (off)."""
    return PanAndScan.from_kwargs((processor or {}).get(MM_KWARGS_KEY) or {})


def layer_types(num_layers: int, pattern: int) -> list[str]:
    """HF Gemma3TextConfig: layer i is full attention iff (i + 1) % pattern == 0."""
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(num_layers)]


def rope_parameters(text: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The rope parameters per layer type as transformers' Gemma3TextConfig builds them from a legacy config: full
    layers take `rope_scaling` (the 4B-27B configs: linear, factor 8) over rope_theta (default 1e6), sliding layers a
    default rope of rope_local_base_freq (default 1e4). vLLM's Gemma3Attention calls get_rope with
    config.rope_parameters[layer_type]: two caches (vllm/model_executor/models/gemma3.py)."""
    given = text.get("rope_parameters")
    if keyed_by_layer_type(given):
        return given
    scaling = text.get("rope_scaling") if isinstance(text.get("rope_scaling"), dict) else {}
    full = {"rope_type": "default", **scaling, "rope_theta": text.get("rope_theta", ROPE_THETA["full_attention"])}
    sliding = {"rope_type": "default", "rope_theta": text.get("rope_local_base_freq", ROPE_THETA["sliding_attention"])}
    return {"sliding_attention": sliding, "full_attention": full}


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder's config as vLLM reads it (transformers' Gemma3TextConfig): defaults filled, layer types and rope
    parameters per layer type."""
    text = {**TEXT_DEFAULTS, **sub(config, "text_config", "gemma3")}
    n_layers = need(text, "num_hidden_layers", "gemma3")
    types = text.get("layer_types") or layer_types(n_layers, text["sliding_window_pattern"])
    return {**text, "layer_types": types, "rope_parameters": rope_parameters(text)}


class Gemma3Family(Family):
    name = "gemma3"
    model_types = ("gemma3",)
    hf_class = "Gemma3ForConditionalGeneration"

    def text_config(self, config: dict[str, Any]) -> dict[str, Any]:
        return text_config(config)

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        text = text_config(config)
        vision = {**SIGLIP_DEFAULTS, **sub(config, "vision_config", "gemma3")}
        types = text["layer_types"]
        tokens = config.get("mm_tokens_per_image", 256)  # per crop: vLLM's image_seq_length
        patches = (vision["image_size"] // vision["patch_size"]) ** 2
        scan = pan_and_scan(processor)
        crops = scan.crops_of_largest_image(vision["image_size"])
        width, height = scan.largest_image(vision["image_size"])
        max_len, key = derive_max_model_len(text)
        side = vision["image_size"]
        parts = f"({crops - 1} crops + the whole image) x {tokens}, each {side} x {side}" if crops > 1 else f"one {side} x {side} image"
        image_note = (
            f"{crops * tokens} embeddings per image = {parts} in the tower "
            f"({scan.describe()}; vLLM's largest image {width} x {height}, get_num_image_tokens)"
        )
        if (processor or {}).get(MM_KWARGS_KEY):
            image_note += f"; --mm-processor-kwargs {json.dumps((processor or {})[MM_KWARGS_KEY], sort_keys=True)} applied"
            if scan.do_pan_and_scan and crops - 1 < scan.pan_and_scan_max_num_crops:
                image_note += (
                    f" (vLLM budgets its dummy image's {crops - 1} extra crops; an image of another shape can take up to "
                    f"{scan.pan_and_scan_max_num_crops} at run time, more than it budgets)"
                )
        return ModelSpec(
            name=name,
            family=self,
            architecture="Gemma3ForConditionalGeneration",
            is_encoder_decoder=False,
            config_dtype=config_dtype(config, text),
            layers=kv_layers({**text, "layer_types": types}, "gemma3"),
            modalities=(Modality("image", crops * tokens, None),),
            derived_max_model_len=max_len,
            max_len_key=f"text_config.{key}",
            max_source_positions=None,
            encoder_tokens_per_request=0,
            num_attention_heads=text["num_attention_heads"],
            decoder=decoder_shape(text, "gemma3"),
            encoder=EncoderShape(
                seq_len=patches,  # per crop; an image of n x 256 embeddings is n crops
                seq_len_tokens=tokens,
                hidden_size=vision["hidden_size"],
                ffn_size=vision["intermediate_size"],
                num_layers=vision["num_hidden_layers"],
                output_hidden_size=need(text, "hidden_size", "gemma3"),
            ),
            vllm_support=VllmSupport("native", "Gemma3ForConditionalGeneration (vllm/model_executor/models/gemma3_mm.py)"),
            notes=(image_note, "RoPE scaling not applied to max_model_len for gemma3"),
        )

    def with_processor_kwargs(self, config: dict[str, Any], files: dict[str, dict[str, Any]], kwargs: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Pan and scan (do_pan_and_scan and its three pan_and_scan_* knobs, flat) sets the crops of vLLM's largest image;
        the processor config carries the kwargs to the spec and the encoder item."""
        scan = PanAndScan.from_kwargs(kwargs)
        given = {k: v for k, v in scan.to_json().items() if k in kwargs}
        processor = {**(files.get("processor_config.json") or {}), MM_KWARGS_KEY: given}
        return {**files, "processor_config.json": processor}

    def towers(self, config: dict[str, Any]) -> tuple[Tower, ...]:
        """gemma3_mm.py: vision_tower and multi_modal_projector under _mark_tower_model(image)."""
        return (Tower(("image",), ("vision_tower", "multi_modal_projector")),)

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """SigLIP on the item's crops of 896 x 896 (one without pan & scan; the whole image and its crops with it, as
        vLLM's pixel_values hold them), each projected to 256 tokens."""
        import torch

        size = (source.config.get("vision_config") or {}).get("image_size", 896)
        per_crop = source.config.get("mm_tokens_per_image", 256)
        crops = max(1, tokens // per_crop)
        pixels = torch.zeros(crops, 3, size, size, device=device, dtype=dtype)
        scan = pan_and_scan(source.processor)
        return EncoderInput({"pixel_values": pixels}, f"processed-shape tensor ({crops}, 3, {size}, {size}): one image, {scan.describe()}")

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        crops = item.tensors["pixel_values"].shape[0]
        pixels = item.tensors["pixel_values"].repeat(count, 1, 1, 1)
        states = model.model.vision_tower(pixel_values=pixels).last_hidden_state
        embeds = model.model.multi_modal_projector(states)  # (count x crops, 256, hidden)
        return list(embeds.reshape(count, crops * embeds.shape[1], embeds.shape[2]).unbind(0))

    def cached_text_model(self, model: Any) -> Any:
        return model.model.language_model


FAMILY = Gemma3Family()
