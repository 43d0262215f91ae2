"""Plain decoder-only LLMs (*ForCausalLM): full or sliding-window self-attention, no encoder."""

from __future__ import annotations

from typing import Any

from capacity.families.common import config_dtype, need
from capacity.kv_layout import kv_layers
from capacity.spec import DecoderShape, ModelSpec, VllmSupport, derive_max_model_len


def looks_decoder_only(config: dict[str, Any]) -> bool:
    archs = config.get("architectures") or []
    return (
        any(isinstance(a, str) and a.endswith("ForCausalLM") for a in archs)
        and not config.get("is_encoder_decoder", False)
        and all(k in config for k in ("hidden_size", "num_attention_heads", "num_hidden_layers"))
    )


def decoder_shape(text: dict[str, Any], where: str) -> DecoderShape:
    # HF decoders with `intermediate_size` (Llama, Qwen, Gemma, Mistral, ...) use a gated MLP.
    ffn = need(text, "intermediate_size", where)
    if isinstance(ffn, list):  # per-layer widths (Gemma-3n): the widest layer bounds the activations
        ffn = max(ffn)
    return DecoderShape(
        need(text, "hidden_size", where),
        ffn,
        True,
        need(text, "vocab_size", where),
        need(text, "num_hidden_layers", where),
    )


class DecoderOnlyAdapter:
    family = "decoder_only"
    model_types: tuple[str, ...] = ()

    def spec(self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None) -> ModelSpec:
        max_len, key = derive_max_model_len(config)
        return ModelSpec(
            name=name,
            family=self.family,
            architecture=(config.get("architectures") or ["?"])[0],
            arch_builder="decoder_only",
            is_encoder_decoder=False,
            config_dtype=config_dtype(config),
            layers=kv_layers(config, "decoder-only"),
            modalities=(),
            derived_max_model_len=max_len,
            max_len_key=key,
            max_source_positions=None,
            encoder_tokens_per_request=0,
            num_attention_heads=need(config, "num_attention_heads", "decoder-only"),
            decoder=decoder_shape(config, "decoder-only"),
            encoder=None,
            vllm_support=VllmSupport("native", "assumed served natively; capacity does not check vLLM's registry for plain LLMs"),
        )


DECODER_ONLY = DecoderOnlyAdapter()
