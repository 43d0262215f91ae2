"""T5: text encoder-decoder with relative positions (not served by vLLM 0.33)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


class T5Family(Family):
    name = "t5"
    model_types = ("t5", "mt5", "umt5")
    hf_class = "T5ForConditionalGeneration"

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        d_model = need(config, "d_model", "t5")
        heads = need(config, "num_heads", "t5")
        head_size = need(config, "d_kv", "t5")  # T5's head width is d_kv, not d_model // heads
        n_enc = need(config, "num_layers", "t5")
        n_dec = config.get("num_decoder_layers") or n_enc
        layers = self_and_cross_layers(n_dec, heads, head_size)
        max_len, key = derive_max_model_len(config)
        gated = str(config.get("feed_forward_proj", "relu")).startswith("gated")
        return ModelSpec(
            name=name,
            family=self,
            architecture=(config.get("architectures") or ["T5ForConditionalGeneration"])[0],
            is_encoder_decoder=True,
            config_dtype=config_dtype(config),
            layers=layers,
            modalities=(),
            derived_max_model_len=max_len,
            max_len_key=key,
            max_source_positions=None,
            encoder_tokens_per_request=max_len,
            num_attention_heads=heads,
            decoder=DecoderShape(d_model, need(config, "d_ff", "t5"), gated, need(config, "vocab_size", "t5"), n_dec),
            encoder=EncoderShape(max_len, d_model, need(config, "d_ff", "t5"), n_enc, d_model),
            vllm_support=VllmSupport("unsupported", "T5 is not in vLLM 0.33's registry and has no plugin listed"),
            notes=("relative positions: n_positions (512) is nominal, used as the encoder and decoder length",),
        )

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        # A text encoder-decoder: vLLM profiles no encoder items for it (no multimodal budget).
        return model.decoder(input_ids=input_ids, encoder_hidden_states=encoder_states, use_cache=False).last_hidden_state


FAMILY = T5Family()
