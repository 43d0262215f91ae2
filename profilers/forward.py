"""Per-family forward adapters for the profiler: dummy inputs, encoder, decoder, LM head.

One registry keyed by the spec's `arch_builder`. A family without an adapter cannot be profiled
yet, and says so (plan it offline).
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    host: dict[str, Any] = field(default_factory=dict)  # plain values the device tensors were made from


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
            host={"grid_thw": [frames, side * merge, side * merge]},
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        import torch
        from torch._subclasses.fake_tensor import FakeTensor

        pixels = item.tensors["pixel_values"]
        grid = item.tensors["grid_thw"]
        pixels = torch.cat([pixels] * count) if count > 1 else pixels
        if isinstance(pixels, FakeTensor):
            out = self._traced_visual(model, pixels, grid.repeat(count, 1), [item.host["grid_thw"]] * count)
        else:
            out = model.model.visual(pixels, grid_thw=grid.repeat(count, 1))
        if not isinstance(out, torch.Tensor):  # newer transformers return an output object
            out = getattr(out, "pooler_output", None) if getattr(out, "pooler_output", None) is not None else out.last_hidden_state
        return list(out.chunk(count))

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        return model.model.language_model(input_ids=input_ids, use_cache=False).last_hidden_state

    @staticmethod
    def _traced_visual(model: Any, pixels: torch.Tensor, grid: torch.Tensor, grid_rows: list[list[int]]) -> Any:
        """The vision tower under fake tensors, where its data-dependent steps cannot run.

        The per-family fallback: window indices, cu_seqlens and position ids are computed on the host from the
        known grid and passed in precomputed (transformers' vision_utils accepts them), and the attention's
        `lengths.tolist()` gets the per-frame lengths. Windowed layers then attend per frame instead of per
        window: the same q/k/v views and the same output bytes, in 7 calls instead of 7,168 (the kernels
        materialise no score matrix either way).
        """
        import torch
        from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

        try:
            from transformers import vision_utils
            from transformers.utils.generic import get_max_seqlen
        except ImportError as exc:  # older transformers compute these inside the model, on data
            raise NotImplementedError("this transformers has no precomputable vision indices; the trace cannot run Qwen2.5-VL's vision tower") from exc
        visual = model.model.visual
        with unset_fake_temporarily():
            host_grid = torch.tensor(grid_rows)
            position_ids = vision_utils.get_vision_position_ids(host_grid, visual.spatial_merge_size)
            cu_seqlens, max_seqlen = vision_utils.get_vision_attention_seqlens(host_grid, visual.config)
            window_index, cu_window_seqlens = vision_utils.get_vision_window_index(
                host_grid, spatial_merge_size=visual.spatial_merge_size, window_size=visual.window_size, patch_size=visual.patch_size
            )
            max_window_seqlen = get_max_seqlen(cu_window_seqlens, visual.config, kwarg_name="max_window_seqlen")
            frame_lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
            segment_counts = {len(frame_lengths), len(cu_window_seqlens) - 1}  # the two `lengths` the attention splits by
        original = FakeTensor.tolist

        def tolist(tensor: Any) -> Any:
            if tensor.dim() == 1 and not tensor.is_floating_point() and tensor.numel() in segment_counts:
                return list(frame_lengths)
            return original(tensor)

        FakeTensor.tolist = tolist  # type: ignore[method-assign]
        try:
            return visual(
                pixels,
                grid_thw=grid,
                position_ids=position_ids,
                cu_seqlens=cu_seqlens,
                max_seqlen=max_seqlen,
                window_index=window_index,
                cu_window_seqlens=cu_window_seqlens,
                max_window_seqlen=max_window_seqlen,
            )
        finally:
            FakeTensor.tolist = original  # type: ignore[method-assign]


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
