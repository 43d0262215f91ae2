"""BART / mBART: text encoder-decoder (served by vLLM 0.33 only through the out-of-tree bart-plugin)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capacity.kv.layers import KVLayer
from capacity.model.families.common import config_dtype, need, self_and_cross_layers
from capacity.model.family import Family
from capacity.model.spec import (
    DecoderShape,
    EncoderShape,
    ModelSpec,
    VllmSupport,
    derive_max_model_len,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch


def bart_decoder_layers(text: dict[str, Any], where: str) -> tuple[KVLayer, ...]:
    """Self + cross attention per decoder layer, d_model // heads wide (no GQA)."""
    d_model = need(text, "d_model", where)
    heads = need(text, "decoder_attention_heads", where)
    return self_and_cross_layers(need(text, "decoder_layers", where), heads, d_model // heads)


def bart_decoder_shape(text: dict[str, Any], where: str) -> DecoderShape:
    return DecoderShape(
        need(text, "d_model", where),
        need(text, "decoder_ffn_dim", where),
        False,
        need(text, "vocab_size", where),
        need(text, "decoder_layers", where),
    )


HF_CLASS_BY_MODEL_TYPE = {"bart": "BartForConditionalGeneration", "mbart": "MBartForConditionalGeneration"}


class BartFamily(Family):
    name = "bart"
    model_types = ("bart", "mbart")

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        positions = need(config, "max_position_embeddings", "bart")
        max_len, key = derive_max_model_len(config)
        arch = (config.get("architectures") or ["BartForConditionalGeneration"])[0]
        return ModelSpec(
            name=name,
            family=self,
            architecture=arch,
            is_encoder_decoder=True,
            config_dtype=config_dtype(config),
            layers=bart_decoder_layers(config, "bart"),
            modalities=(),
            derived_max_model_len=max_len,
            max_len_key=key,
            max_source_positions=None,
            # A text prompt goes through the encoder: at most max_position_embeddings tokens.
            encoder_tokens_per_request=positions,
            num_attention_heads=need(config, "decoder_attention_heads", "bart"),
            decoder=bart_decoder_shape(config, "bart"),
            encoder=EncoderShape(
                seq_len=positions,
                hidden_size=need(config, "d_model", "bart"),
                ffn_size=need(config, "encoder_ffn_dim", "bart"),
                num_layers=need(config, "encoder_layers", "bart"),
                output_hidden_size=need(config, "d_model", "bart"),
            ),
            vllm_support=VllmSupport(
                "plugin",
                "BART/mBART are not in vLLM 0.33's registry; they need the out-of-tree vllm-project/bart-plugin",
                served_through="0.10.2",
            ),
            notes=(f"cross-attention holds the encoder prompt: up to {positions} tokens (max_position_embeddings)",),
        )

    def hf_class_name(self, config: dict[str, Any]) -> str:
        return HF_CLASS_BY_MODEL_TYPE[config.get("model_type", "bart")]

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        # A text encoder-decoder: vLLM profiles no encoder items for it (no multimodal budget).
        return model.model.decoder(input_ids=input_ids, encoder_hidden_states=encoder_states, use_cache=False).last_hidden_state


FAMILY = BartFamily()
