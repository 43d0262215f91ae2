"""Whisper (WhisperForConditionalGeneration): audio encoder, decoder with self + cross attention."""

from __future__ import annotations

from typing import Any

from capacity.families import register
from capacity.families.common import config_dtype, need, self_and_cross_layers
from capacity.spec import (
    DecoderShape,
    EncoderShape,
    Modality,
    ModelSpec,
    VllmSupport,
    derive_max_model_len,
)


class WhisperAdapter:
    family = "whisper"
    model_types = ("whisper",)

    def spec(self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None) -> ModelSpec:
        d_model = need(config, "d_model", "whisper")
        heads = need(config, "decoder_attention_heads", "whisper")
        n_dec = need(config, "decoder_layers", "whisper")
        # vLLM: WhisperProcessingInfo.get_num_audio_tokens = max_source_positions (1500 for 30 s).
        source_positions = need(config, "max_source_positions", "whisper")
        head_size = d_model // heads
        layers = self_and_cross_layers(n_dec, heads, head_size)
        max_len, key = derive_max_model_len(config)
        return ModelSpec(
            name=name,
            family=self.family,
            architecture="WhisperForConditionalGeneration",
            arch_builder="whisper",
            is_encoder_decoder=True,
            config_dtype=config_dtype(config),
            layers=layers,
            modalities=(Modality("audio", source_positions, 1),),
            derived_max_model_len=max_len,
            max_len_key=key,
            max_source_positions=source_positions,
            encoder_tokens_per_request=source_positions,
            num_attention_heads=heads,
            # vllm/model_executor/models/whisper.py: proj_out is tied to decoder.embed_tokens, a whole nn.Embedding
            decoder=DecoderShape(d_model, need(config, "decoder_ffn_dim", "whisper"), False, need(config, "vocab_size", "whisper"), n_dec, lm_head_sharded=False),
            encoder=EncoderShape(
                seq_len=source_positions,
                hidden_size=d_model,
                ffn_size=need(config, "encoder_ffn_dim", "whisper"),
                num_layers=need(config, "encoder_layers", "whisper"),
                output_hidden_size=d_model,
            ),
            vllm_support=VllmSupport("native", "WhisperForConditionalGeneration (vllm/model_executor/models/whisper.py)"),
            notes=("30 s of 16 kHz audio -> 3000 mel frames -> 1500 encoder positions per item",),
        )


register(WhisperAdapter())
