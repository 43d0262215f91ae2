"""Per-family forward adapters for the profiler: dummy inputs, encoder, decoder, LM head.

One registry keyed by the spec's `arch_builder`. A family without an adapter cannot be profiled
yet, and says so (plan it offline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from capacity.errors import BadInput
from capacity.models import ModelSource
from capacity.spec import ModelSpec

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class EncoderInput:
    """One max-size item as the processor would hand it to the encoder, and how it was made."""

    tensors: dict[str, Any]
    note: str


class ForwardAdapter(Protocol):
    def item(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput: ...
    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]: ...
    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor: ...
    def lm_head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor: ...
    def hidden_size(self, spec: ModelSpec) -> int: ...


class WhisperForward:
    """Whisper: the real feature extractor on 30 s of 16 kHz audio -> (mel bins, 3000) frames."""

    def item(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        import numpy as np
        from transformers import WhisperFeatureExtractor

        pre = dict(source.preprocessor or {})
        mel = int(source.config.get("num_mel_bins", 80))
        extractor = WhisperFeatureExtractor(feature_size=pre.get("feature_size", mel), sampling_rate=pre.get("sampling_rate", 16000))
        seconds = extractor.chunk_length
        audio = np.random.default_rng(0).standard_normal(seconds * extractor.sampling_rate).astype(np.float32) * 0.1
        feats = extractor(audio, sampling_rate=extractor.sampling_rate, return_tensors="pt").input_features
        return EncoderInput(
            {"input_features": feats.to(device=device, dtype=dtype)},
            f"WhisperFeatureExtractor on {seconds} s of {extractor.sampling_rate} Hz audio -> {tuple(feats.shape[1:])} log-mel frames",
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        feats = item.tensors["input_features"].expand(count, -1, -1).contiguous()
        out = model.model.encoder(input_features=feats).last_hidden_state
        return list(out.unbind(0))

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        return model.model.decoder(input_ids=input_ids, encoder_hidden_states=encoder_states, use_cache=False).last_hidden_state

    def lm_head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        return model.proj_out(hidden)

    def hidden_size(self, spec: ModelSpec) -> int:
        return spec.decoder.hidden_size


class NemotronParseForward:
    """Nemotron-Parse: pages resized and padded to image_size; a tensor of that processed shape."""

    def item(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        import torch

        height, width = source.config["image_size"]
        gen = torch.Generator(device="cpu").manual_seed(0)
        pixels = torch.rand(1, 3, height, width, generator=gen).to(device=device, dtype=dtype)
        return EncoderInput(
            {"pixel_values": pixels},
            f"processed-shape tensor (1, 3, {height}, {width}): the resize-and-pad processor is remote code, not buildable offline",
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        pixels = item.tensors["pixel_values"].expand(count, -1, -1, -1).contiguous()
        return list(model.encode(pixels).unbind(0))

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        return model.decoder(input_ids=input_ids, encoder_hidden_states=encoder_states, use_cache=False).last_hidden_state

    def lm_head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        return model.lm_head(hidden)

    def hidden_size(self, spec: ModelSpec) -> int:
        return spec.decoder.hidden_size


class DecoderOnlyForward:
    """Plain *ForCausalLM: no encoder."""

    def item(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        return EncoderInput({}, "no encoder")

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        return []

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        return model.model(input_ids=input_ids, use_cache=False).last_hidden_state

    def lm_head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        return model.lm_head(hidden)

    def hidden_size(self, spec: ModelSpec) -> int:
        return spec.decoder.hidden_size


class Qwen25VLForward(DecoderOnlyForward):
    """Qwen2.5-VL: the max-token item (a video at max pixels, or an image) as processed patches."""

    def item(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        import torch

        vision = source.config.get("vision_config") or {}
        patch = vision.get("patch_size", vision.get("spatial_patch_size", 14))
        merge = vision.get("spatial_merge_size", 2)
        temporal = vision.get("temporal_patch_size", 2)
        image_tokens = spec.modalities[0].max_tokens_per_item
        side = int(image_tokens**0.5)  # the most-square merged grid (128 x 128 at the default max_pixels)
        frames = max(tokens // (side * side), 1)  # frame pairs of the budget's max-token item
        grid = torch.tensor([[frames, side * merge, side * merge]], device=device)
        n_patches = frames * (side * merge) ** 2
        pixels = torch.zeros(n_patches, 3 * temporal * patch * patch, device=device, dtype=dtype)
        return EncoderInput(
            {"pixel_values": pixels, "grid_thw": grid},
            f"processed-shape patches for {frames} frame pair(s) of {side * merge * patch}x{side * merge * patch} px ({n_patches} patches)",
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        import torch

        pixels = item.tensors["pixel_values"]
        grid = item.tensors["grid_thw"]
        out = model.model.visual(torch.cat([pixels] * count) if count > 1 else pixels, grid_thw=grid.repeat(count, 1))
        if not isinstance(out, torch.Tensor):  # newer transformers return an output object
            out = getattr(out, "pooler_output", None) if getattr(out, "pooler_output", None) is not None else out.last_hidden_state
        return list(out.chunk(count))

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        return model.model.language_model(input_ids=input_ids, use_cache=False).last_hidden_state


class Gemma3Forward(DecoderOnlyForward):
    """Gemma-3: SigLIP on one 896 x 896 image (pan & scan off), projected to 256 tokens."""

    def item(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        import torch

        size = (source.config.get("vision_config") or {}).get("image_size", 896)
        pixels = torch.zeros(1, 3, size, size, device=device, dtype=dtype)
        return EncoderInput({"pixel_values": pixels}, f"processed-shape tensor (1, 3, {size}, {size}): one image, pan & scan off")

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        pixels = item.tensors["pixel_values"].expand(count, -1, -1, -1).contiguous()
        states = model.model.vision_tower(pixel_values=pixels).last_hidden_state
        return list(model.model.multi_modal_projector(states).unbind(0))

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        return model.model.language_model(input_ids=input_ids, use_cache=False).last_hidden_state


class TextEncoderDecoderForward:
    """BART / mBART / T5: text encoder-decoders; vLLM profiles no encoder items for them (no multimodal budget)."""

    def item(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        raise BadInput(f"{spec.family} takes no multimodal items to profile")

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        return []

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        decoder = model.model.decoder if hasattr(model, "model") else model.decoder  # BART keeps it under .model, T5 not
        return decoder(input_ids=input_ids, encoder_hidden_states=encoder_states, use_cache=False).last_hidden_state

    def lm_head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        return model.lm_head(hidden)

    def hidden_size(self, spec: ModelSpec) -> int:
        return spec.decoder.hidden_size


class Florence2Forward(TextEncoderDecoderForward):
    """Florence-2: DaViT on one 768 x 768 image, projected to the BART width; BART decoder."""

    def item(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        import torch

        pixels = torch.zeros(1, 3, 768, 768, device=device, dtype=dtype)
        return EncoderInput({"pixel_values": pixels}, "processed-shape tensor (1, 3, 768, 768): the processor is remote code")

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        pixels = item.tensors["pixel_values"].expand(count, -1, -1, -1).contiguous()
        states = model.model.vision_tower(pixels).last_hidden_state
        return list(model.model.multi_modal_projector(states).unbind(0))

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        decoder = model.model.language_model.decoder
        return decoder(input_ids=input_ids, encoder_hidden_states=encoder_states, use_cache=False).last_hidden_state


ADAPTERS: dict[str, ForwardAdapter] = {
    "florence2": Florence2Forward(),
    "whisper": WhisperForward(),
    "nemotron_parse": NemotronParseForward(),
    "decoder_only": DecoderOnlyForward(),
    "qwen2_5_vl": Qwen25VLForward(),
    "gemma3": Gemma3Forward(),
    "bart": TextEncoderDecoderForward(),
    "mbart": TextEncoderDecoderForward(),
    "t5": TextEncoderDecoderForward(),
}


def forward_adapter(spec: ModelSpec) -> ForwardAdapter:
    adapter = ADAPTERS.get(spec.arch_builder)
    if adapter is None:
        raise BadInput(
            f"profiling {spec.family} ({spec.architecture}) on a GPU is not implemented yet "
            f"(profilable: {', '.join(sorted(ADAPTERS))}); plan it from its config with --offline"
        )
    return adapter
