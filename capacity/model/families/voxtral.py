"""Voxtral (VoxtralForConditionalGeneration): the generic family, with vLLM 0.33's own audio item size.

vLLM's VoxtralProcessingInfo sizes the largest audio by max_model_len (get_max_audio_tokens returns
model_config.max_model_len, at 12.5 tokens per second: 375 per 30 s chunk), allows 5 audios per prompt
(get_supported_mm_limits), and profiles the encoder on that one long audio. Everything else is the generic family's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from capacity.model.families.generic import GenericFamily
from capacity.model.family import EncoderInput
from capacity.model.spec import ModelSpec

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from capacity.source.resolve import ModelSource

MAX_AUDIOS_PER_PROMPT = 5  # vLLM voxtral.py get_supported_mm_limits


class VoxtralFamily(GenericFamily):
    name = "voxtral"
    model_types = ("voxtral",)
    fallback_rank = None  # claims its model_type only

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        spec = super().spec(config, name, preprocessor, processor)
        chunk = spec.modalities[0].max_tokens_per_item  # one 30 s chunk through the model's own audio path
        assert spec.encoder is not None
        return replace(
            spec,
            family=self,
            modalities=(replace(spec.modalities[0], supported_limit=MAX_AUDIOS_PER_PROMPT, sized_by_max_model_len=True),),
            encoder=replace(spec.encoder, seq_len_tokens=chunk),  # encoder positions grow with the chunks of the item
            notes=(
                *spec.notes,
                f"voxtral: vLLM sizes the largest audio by max_model_len ({chunk} tokens per 30 s chunk), at most "
                f"{MAX_AUDIOS_PER_PROMPT} audios per prompt",
            ),
        )

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """As many 30 s chunks as the item's tokens need, as vLLM's dummy audio of max_model_len tokens."""
        chunk = super().encoder_input(spec, source, device, dtype, tokens)
        per_chunk = spec.encoder.seq_len_tokens if spec.encoder is not None and spec.encoder.seq_len_tokens else tokens
        chunks = -(-tokens // per_chunk)
        features = chunk.tensors["input_features"]
        return EncoderInput({"input_features": features.expand(chunks, -1, -1).contiguous()}, f"{chunks} x {chunk.note}")

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        # One item is several chunks: the model's audio path on all of them, one output per item.
        import torch

        rows = super().encode(model, item, count)
        return list(torch.cat(rows).chunk(count))


FAMILY = VoxtralFamily()
