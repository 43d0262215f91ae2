"""Llama-3.2-Vision (MllamaForConditionalGeneration): tiled ViT, text decoder with interleaved cross-attention."""

from __future__ import annotations

from typing import Any

from capacity.kv.layers import CrossAttentionLayer, FullAttentionLayer
from capacity.model.families.common import config_dtype, need, sub
from capacity.model.family import Family
from capacity.model.spec import (
    DecoderShape,
    EncoderShape,
    Modality,
    ModelSpec,
    VllmSupport,
    derive_max_model_len,
)


def tokens_per_tile(image_size: int, patch_size: int) -> int:
    """(image_size // patch)^2 patches + 1 class token = 1601 for 560 / 14."""
    return (image_size // patch_size) ** 2 + 1


class MllamaFamily(Family):
    name = "mllama"
    model_types = ("mllama",)
    hf_class = "MllamaForConditionalGeneration"
    profilable = False  # its cross-attention layers take the vision states per tile: no profiler hooks yet

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        text = sub(config, "text_config", "mllama")
        vision = sub(config, "vision_config", "mllama")
        hidden = need(text, "hidden_size", "mllama")
        heads = need(text, "num_attention_heads", "mllama")
        kv_heads = text.get("num_key_value_heads") or heads
        head_size = text.get("head_dim") or hidden // heads
        cross_layers = set(need(text, "cross_attention_layers", "mllama"))
        n_layers = need(text, "num_hidden_layers", "mllama")
        layers = tuple(
            CrossAttentionLayer(kv_heads, head_size) if i in cross_layers else FullAttentionLayer(kv_heads, head_size) for i in range(n_layers)
        )
        tile = tokens_per_tile(need(vision, "image_size", "mllama"), need(vision, "patch_size", "mllama"))
        tiles = need(vision, "max_num_tiles", "mllama")
        tokens = tile * tiles
        padded_tile = tile + (-tile) % 8  # HF pads each tile's sequence to a multiple of 8
        max_len, key = derive_max_model_len(text)
        return ModelSpec(
            name=name,
            family=self,
            architecture="MllamaForConditionalGeneration",
            is_encoder_decoder=True,
            config_dtype=config_dtype(config, text),
            layers=layers,
            modalities=(Modality("image", tokens, None),),
            derived_max_model_len=max_len,
            max_len_key=f"text_config.{key}",
            max_source_positions=None,
            encoder_tokens_per_request=tokens,
            num_attention_heads=heads,
            decoder=DecoderShape(hidden, need(text, "intermediate_size", "mllama"), True, need(text, "vocab_size", "mllama"), n_layers),
            encoder=EncoderShape(
                seq_len=padded_tile * tiles,
                hidden_size=need(vision, "hidden_size", "mllama"),
                ffn_size=need(vision, "intermediate_size", "mllama"),
                num_layers=need(vision, "num_hidden_layers", "mllama") + vision.get("num_global_layers", 0),
                output_hidden_size=hidden,
            ),
            vllm_support=VllmSupport(
                "removed",
                "MllamaForConditionalGeneration was removed from vLLM with V0 (last supported in 0.10.2); vLLM 0.33 refuses it",
            ),
            notes=(f"{tile} tokens per tile x {tiles} tiles = {tokens} cross-attention tokens per image",),
        )


FAMILY = MllamaFamily()
