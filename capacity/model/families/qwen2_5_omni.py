"""Qwen2.5-Omni (model_type `qwen2_5_omni`): vLLM 0.33 serves its thinker only.

config.json nests everything vLLM builds in `thinker_config` (`text_config`, `vision_config`, `audio_config`);
`talker_config` and `token2wav_config` describe the speech generator, which vLLM does not load. What vLLM 0.33 does,
read from vllm/model_executor/models/qwen2_5_omni_thinker.py and registry.py:
- `Qwen2_5OmniForConditionalGeneration` and `Qwen2_5OmniModel` both map to
  `Qwen2_5OmniThinkerForConditionalGeneration`, whose `hf_to_vllm_mapper` drops every `talker.` and `token2wav.`
  tensor; the text model is vLLM's `Qwen2ForCausalLM` built from `thinker_config.text_config` (its KV layout: the
  text config's layers, KV heads and head size; `use_sliding_window` false: full attention everywhere);
- the vision tower is vLLM's `Qwen2_5_VisionTransformer` (parallel layers, `quant_config` passed: a quantized
  checkpoint's `modules_to_not_convert` names it `visual`), the audio tower transformers' own
  `Qwen2_5OmniAudioEncoder` (plain `nn.Linear`: whole on every rank, never quantized);
- tokens per item (`Qwen2_5OmniThinkerProcessingInfo.get_mm_max_tokens_per_item`): images and videos by
  Qwen2.5-VL's rule from the image processor's max_pixels (videos at most 14 frames, sized by max_model_len), audio by
  Qwen2-Audio's: `min(chunk_length, 30) x sampling_rate // hop_length` mel frames, halved twice
  (`_get_feat_extract_output_lengths`: the stride-2 convolution, then the tower's 2x average pool);
- the dummy inputs do not set `use_audio_in_video` (the processor's default, False): profiling runs videos without
  their audio.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from capacity.errors import BadInput
from capacity.kv.text_config import kv_layers
from capacity.model.families.common import config_dtype, need, sub
from capacity.model.families.decoder_only import decoder_shape
from capacity.model.families.qwen2_5_vl import FAMILY as QWEN2_5_VL
from capacity.model.families.qwen2_5_vl import VISUAL_TOWER, encode_visual, image_grid, pixel_bounds
from capacity.model.family import EncoderInput, Family, Tower
from capacity.model.items.qwen_vl import MAX_FRAMES_PER_VIDEO
from capacity.model.spec import EncoderShape, Modality, ModelSpec, VllmSupport, scaled_max_model_len

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from capacity.source.resolve import ModelSource

WHERE = "qwen2_5_omni"
ARCHITECTURE = "Qwen2_5OmniThinkerForConditionalGeneration"
# WhisperFeatureExtractor's defaults, for a preprocessor_config.json that leaves them out.
CHUNK_LENGTH, SAMPLING_RATE, HOP_LENGTH = 30, 16_000, 160
MAX_DUMMY_AUDIO_SECONDS = 30  # qwen2_audio.py get_mm_max_tokens_per_item / the Omni dummy audio: min(chunk_length, 30)


def thinker(config: dict[str, Any]) -> dict[str, Any]:
    return sub(config, "thinker_config", WHERE)


def text_of(config: dict[str, Any]) -> dict[str, Any]:
    return sub(thinker(config), "text_config", f"{WHERE} thinker_config")


def audio_mel_frames(preprocessor: dict[str, Any] | None) -> int:
    """Mel frames of vLLM's dummy audio: min(chunk_length, 30) s at the extractor's rate, one frame per hop."""
    fe = preprocessor or {}
    chunk = fe.get("chunk_length", CHUNK_LENGTH)
    rate = fe.get("sampling_rate", SAMPLING_RATE)
    hop = fe.get("hop_length", HOP_LENGTH)
    for key, value in (("chunk_length", chunk), ("sampling_rate", rate), ("hop_length", hop)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise BadInput(f"preprocessor_config.json ({WHERE}) {key} must be a positive integer, got {value!r}")
    return min(chunk, MAX_DUMMY_AUDIO_SECONDS) * rate // hop


def audio_lengths(mel_frames: int) -> tuple[int, int]:
    """(positions after the stride-2 convolution, tokens after the 2x pool): vLLM qwen2_audio._get_feat_extract_output_lengths."""
    positions = (mel_frames - 1) // 2 + 1
    return positions, (positions - 2) // 2 + 1


class Qwen25OmniFamily(Family):
    name = "qwen2_5_omni"
    model_types = ("qwen2_5_omni",)
    hf_class = "Qwen2_5OmniThinkerForConditionalGeneration"  # transformers' thinker: vLLM's parameters, same shapes
    # The fake-tensor trace and the profiler run transformers' thinker (dense: the trace's weights are fake; the plan's
    # weights term is capacity/weights/per_rank.py's), its vision tower on images and videos as Qwen2.5-VL's hooks do; an audio
    # item is not traced (formulas).
    # vLLM runs the same vision class as Qwen2.5-VL's (Qwen2_5_VisionTransformer): that family's calibration of the
    # traced tower to vLLM's varlen kernels applies.
    trace_encoder_to_vllm: ClassVar[float | None] = QWEN2_5_VL.trace_encoder_to_vllm
    parameters_source: ClassVar[str] = (
        "of the thinker (transformers' Qwen2_5OmniThinkerForConditionalGeneration from thinker_config, built on the meta "
        "device; the talker and token2wav, which vLLM does not load, left out)"
    )
    # qwen2_5_omni_thinker.py: the audio tower is transformers' Qwen2_5OmniAudioEncoder (nn.Linear, nn.Conv1d): whole
    # on every rank and outside any quant_config.
    vllm_unsharded_modules: ClassVar[tuple[str, ...]] = (r"(^|\.)audio_tower(\.|$)",)

    def text_config(self, config: dict[str, Any]) -> dict[str, Any]:
        return text_of(config)

    def hf_config(self, config: dict[str, Any]) -> dict[str, Any]:
        return thinker(config)

    def spec(self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None) -> ModelSpec:
        think = thinker(config)
        text = text_of(config)
        vision = sub(think, "vision_config", f"{WHERE} thinker_config")
        sub(think, "audio_config", f"{WHERE} thinker_config")  # the audio tower vLLM builds from it: required
        patch = need(vision, "patch_size", f"{WHERE} vision_config")
        merge = need(vision, "spatial_merge_size", f"{WHERE} vision_config")
        max_pixels = pixel_bounds(preprocessor)[1]
        rows, cols = image_grid(think, preprocessor)  # Qwen2VLProcessingInfo.get_max_image_tokens, as for Qwen2.5-VL
        image = rows * cols
        mel = audio_mel_frames(preprocessor)
        audio_positions, audio_tokens = audio_lengths(mel)
        hidden = need(text, "hidden_size", f"{WHERE} text_config")
        max_len, key, _factor = scaled_max_model_len(text)
        notes = (
            f"{WHERE}: vLLM 0.33 serves the thinker ({ARCHITECTURE}); the talker and token2wav are not loaded",
            f"{WHERE}: max_pixels {max_pixels}: {rows} x {cols} = {image} tokens per image ({patch} x {merge} px per token); videos up to "
            f"{MAX_FRAMES_PER_VIDEO} frames at that size, 2 frames per {image} tokens",
            f"{WHERE}: {audio_tokens} tokens per audio: min(chunk_length, 30) s = {mel} mel frames -> {audio_positions} "
            f"positions (stride-2 convolution) -> {audio_tokens} (2x pool); profiled videos carry no audio (use_audio_in_video off)",
        )
        return ModelSpec(
            name=name,
            family=self,
            architecture=ARCHITECTURE,
            is_encoder_decoder=False,
            config_dtype=config_dtype(config, think, text),
            layers=kv_layers(text, f"{WHERE} thinker text model"),
            modalities=(
                Modality("image", image, None),
                Modality("video", image, None, frame_pair_tokens=image, max_frames=MAX_FRAMES_PER_VIDEO),
                Modality("audio", audio_tokens, None, encoder_positions=audio_positions),
            ),
            derived_max_model_len=max_len,
            max_len_key=f"thinker text_config {key}",
            max_source_positions=None,
            encoder_tokens_per_request=0,
            num_attention_heads=need(text, "num_attention_heads", f"{WHERE} text_config"),
            decoder=decoder_shape(text, f"{WHERE} text_config"),
            # The vision tower (the larger of the two; every profiled item but an audio is the tower's). An audio runs
            # the Whisper-style tower: 1280 wide with a 5120 GELU MLP, 2 x 5120 live per position against the vision
            # MLP's 3 x 3420, so the formula prices its positions within 0.2 %.
            encoder=EncoderShape(
                seq_len=image * merge * merge,  # patches before the 2x2 merge
                hidden_size=need(vision, "hidden_size", f"{WHERE} vision_config"),
                ffn_size=need(vision, "intermediate_size", f"{WHERE} vision_config"),
                num_layers=need(vision, "depth", f"{WHERE} vision_config"),
                output_hidden_size=vision.get("out_hidden_size", hidden),
                seq_len_tokens=image,
                gated_ffn=True,
            ),
            vllm_support=VllmSupport("native", f"{ARCHITECTURE} (vllm/model_executor/models/qwen2_5_omni_thinker.py); talker and token2wav not loaded"),
            notes=notes,
        )

    def towers(self, config: dict[str, Any]) -> tuple[Tower, ...]:
        """qwen2_5_omni_thinker.py: audio_tower under _mark_tower_model(audio), visual under ({image, video})."""
        return (Tower(("audio",), ("audio_tower",)), VISUAL_TOWER)

    def with_processor_kwargs(
        self, config: dict[str, Any], files: dict[str, dict[str, Any]], kwargs: dict[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """The Qwen-VL size keys, as for Qwen2.5-VL: Qwen2_5OmniThinkerProcessingInfo counts images and videos with
        Qwen2VLProcessingInfo's _get_vision_info and the same merged kwargs (the audio keys are left as they are)."""
        return QWEN2_5_VL.with_processor_kwargs(config, files, kwargs)

    def item_size_kwargs(self, config: dict[str, Any], tokens: int) -> dict[str, Any] | None:
        """The Qwen-VL max_pixels for the thinker's vision tower (audio items keep their size)."""
        return QWEN2_5_VL.item_size_kwargs(thinker(config), tokens)

    # --- profiler and fake-tensor trace hooks (torch inside) ---------------------------------------------

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """The profiled image or video as the vision tower's patches (Qwen2.5-VL's hook on thinker_config); an audio is
        not traced."""
        image = spec.modalities[0].max_tokens_per_item
        if tokens % image:
            raise BadInput(f"tracing {WHERE}'s audio tower ({tokens} tokens per audio) is not implemented yet")
        return QWEN2_5_VL.encoder_input(spec, replace(source, config=thinker(source.config)), device, dtype, tokens)

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        return encode_visual(thinker_visual(model), item, count)

    def cached_text_model(self, model: Any) -> Any:
        return thinker_text(model)


# transformers 5.17 holds the thinker's vision tower as `thinker.visual` and its text model as `thinker.model`;
# later 5.x nest both in `thinker.model` (`.visual`, `.language_model`).
def thinker_visual(thinker: Any) -> Any:
    return thinker.visual if hasattr(thinker, "visual") else thinker.model.visual


def thinker_text(thinker: Any) -> Any:
    return thinker.model.language_model if hasattr(thinker.model, "language_model") else thinker.model


FAMILY = Qwen25OmniFamily()
