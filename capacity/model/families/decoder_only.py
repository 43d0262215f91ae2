"""Plain decoder-only LLMs (*ForCausalLM): full or sliding-window self-attention, no encoder."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from capacity.kv.text_config import kv_layers
from capacity.model.families.common import config_dtype, need
from capacity.model.family import Family
from capacity.model.shard_rules import ShardRules
from capacity.model.spec import DecoderShape, ModelSpec, VllmSupport, vllm_max_model_len

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn


def looks_decoder_only(config: dict[str, Any]) -> bool:
    archs = config.get("architectures") or []
    return (
        any(isinstance(a, str) and a.endswith("ForCausalLM") for a in archs)
        and not config.get("is_encoder_decoder", False)
        and all(k in config for k in ("hidden_size", "num_attention_heads", "num_hidden_layers"))
    )


def lfm2_ffn_size(text: dict[str, Any], ffn: int) -> int:
    """vLLM Lfm2MLP: with block_auto_adjust_ff_dim (transformers' Lfm2Config default: true) the MLP is
    2/3 x intermediate_size, x block_ffn_dim_multiplier, rounded up to block_multiple_of (LFM2-1.2B: 12,288 -> 8,192)."""
    if not text.get("block_auto_adjust_ff_dim", True):
        return ffn
    ffn = int(2 * ffn / 3)
    multiplier = text.get("block_ffn_dim_multiplier", 1.0)
    if multiplier is not None:
        ffn = int(multiplier * ffn)
    multiple_of = int(text.get("block_multiple_of", 256))
    return multiple_of * -(-ffn // multiple_of)


def decoder_shape(text: dict[str, Any], where: str) -> DecoderShape:
    # HF decoders with `intermediate_size` (Llama, Qwen, Gemma, Mistral, ...) use a gated MLP.
    ffn = need(text, "intermediate_size", where)
    if isinstance(ffn, list):  # per-layer widths (Gemma-3n): the widest layer bounds the activations
        ffn = max(ffn)
    if text.get("model_type") == "lfm2":
        ffn = lfm2_ffn_size(text, ffn)
    return DecoderShape(
        need(text, "hidden_size", where),
        ffn,
        True,
        need(text, "vocab_size", where),
        need(text, "num_hidden_layers", where),
    )


class DecoderOnlyFamily(Family):
    """Any config with a *ForCausalLM architecture no other family claims (after the generic multimodal family)."""

    name = "decoder_only"
    fallback_rank: ClassVar[int | None] = 1
    # vLLM llama.py and its kin.
    tensor_parallel_rules = ShardRules(
        column=r"\.(q_proj|k_proj|v_proj|gate_proj|up_proj)$",
        row=r"\.(o_proj|down_proj)$",
        vocab_embedding=r"embed_tokens$",
        lm_head=r"^lm_head$",
        encoder="",
    )

    def claims(self, config: dict[str, Any]) -> bool:
        return looks_decoder_only(config)

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        max_len, key = vllm_max_model_len(config, str(config.get("model_type", "")))  # x the RoPE factor (--hf-overrides may set one)
        return ModelSpec(
            name=name,
            family=self,
            architecture=(config.get("architectures") or ["?"])[0],
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

    def build_module(
        self, config: dict[str, Any], *, device: str = "meta", dtype: str = "bfloat16", init_weights: bool | None = None, attn_implementation: str | None = None
    ) -> nn.Module:
        from capacity.model.arch import build_causal_lm

        return build_causal_lm(config, device=device, dtype=dtype, init_weights=init_weights, attn_implementation=attn_implementation)

    def cached_text_model(self, model: Any) -> Any:
        return model.model


FAMILY = DecoderOnlyFamily()
