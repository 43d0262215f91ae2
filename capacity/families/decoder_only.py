"""Plain decoder-only LLMs (*ForCausalLM): full or sliding-window self-attention, no encoder."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from capacity.families.common import config_dtype, need
from capacity.family import Family
from capacity.spec import FULL, SLIDING, AttentionLayer, DecoderShape, ModelSpec, VllmSupport, derive_max_model_len

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn


def looks_decoder_only(config: dict[str, Any]) -> bool:
    archs = config.get("architectures") or []
    return (
        any(isinstance(a, str) and a.endswith("ForCausalLM") for a in archs)
        and not config.get("is_encoder_decoder", False)
        and all(k in config for k in ("hidden_size", "num_attention_heads", "num_hidden_layers"))
    )


def self_attention_layers(text: dict[str, Any], where: str, layer_types: list[str] | None = None) -> tuple[AttentionLayer, ...]:
    """One layer per decoder layer; `layer_types` ("sliding_attention"/"full_attention") picks the kind."""
    hidden = need(text, "hidden_size", where)
    heads = need(text, "num_attention_heads", where)
    kv_heads = text.get("num_key_value_heads") or heads
    head_size = text.get("head_dim") or hidden // heads
    n_layers = need(text, "num_hidden_layers", where)
    window = text.get("sliding_window")
    if layer_types is None:
        layer_types = text.get("layer_types")
    if layer_types is None:
        uses_window = bool(window) and text.get("use_sliding_window", True) is not False
        layer_types = ["sliding_attention" if uses_window else "full_attention"] * n_layers
    layers = []
    for kind in layer_types[:n_layers]:
        if kind == "sliding_attention":
            layers.append(AttentionLayer(SLIDING, kv_heads, head_size, int(window)))
        else:
            layers.append(AttentionLayer(FULL, kv_heads, head_size))
    return tuple(layers)


def decoder_shape(text: dict[str, Any], where: str) -> DecoderShape:
    # HF decoders with `intermediate_size` (Llama, Qwen, Gemma, Mistral, ...) use a gated MLP.
    return DecoderShape(
        need(text, "hidden_size", where),
        need(text, "intermediate_size", where),
        True,
        need(text, "vocab_size", where),
        need(text, "num_hidden_layers", where),
    )


class DecoderOnlyFamily(Family):
    """Any config with a *ForCausalLM architecture no other family claims (after the generic multimodal family)."""

    name = "decoder_only"
    fallback_rank: ClassVar[int | None] = 1

    def claims(self, config: dict[str, Any]) -> bool:
        return looks_decoder_only(config)

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        max_len, key = derive_max_model_len(config)
        return ModelSpec(
            name=name,
            family=self,
            architecture=(config.get("architectures") or ["?"])[0],
            is_encoder_decoder=False,
            config_dtype=config_dtype(config),
            layers=self_attention_layers(config, "decoder-only"),
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

    def build_module(
        self, config: dict[str, Any], *, device: str = "meta", dtype: str = "bfloat16", init_weights: bool | None = None, attn_implementation: str | None = None
    ) -> nn.Module:
        from capacity.arch import build_causal_lm

        return build_causal_lm(config, device=device, dtype=dtype, init_weights=init_weights, attn_implementation=attn_implementation)


FAMILY = DecoderOnlyFamily()
