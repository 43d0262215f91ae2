"""Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration): decoder-only with a windowed ViT for images and videos."""

from __future__ import annotations

from typing import Any

from capacity.families import register
from capacity.families.common import config_dtype, need
from capacity.families.decoder_only import decoder_shape
from capacity.kv_layout import kv_layers
from capacity.spec import EncoderShape, Modality, ModelSpec, VllmSupport, derive_max_model_len

# Qwen2.5-VL-7B-Instruct's published preprocessor_config.json (min_pixels 3136, max_pixels 12845056);
# a local folder's preprocessor_config.json overrides it.
DEFAULT_MAX_PIXELS = 12_845_056
MAX_FRAMES_PER_VIDEO = 14  # vLLM: qwen2_vl _MAX_FRAMES_PER_VIDEO


def max_image_tokens(max_pixels: int, patch: int, merge: int) -> int:
    """vLLM: get_max_image_tokens = max_pixels // (patch * merge)^2 merged tokens (16384 at the default)."""
    unit = patch * merge
    return max_pixels // (unit * unit)


class Qwen25VLAdapter:
    family = "qwen2_5_vl"
    model_types = ("qwen2_5_vl",)

    def spec(self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None) -> ModelSpec:
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
        vision = config.get("vision_config") or {}
        patch = vision.get("patch_size", vision.get("spatial_patch_size", 14))
        merge = vision.get("spatial_merge_size", 2)
        max_pixels = DEFAULT_MAX_PIXELS
        if preprocessor:
            max_pixels = preprocessor.get("max_pixels") or (preprocessor.get("size") or {}).get("longest_edge") or max_pixels
        image = max_image_tokens(int(max_pixels), patch, merge)
        hidden = need(text, "hidden_size", "qwen2_5_vl")
        max_len, key = derive_max_model_len(text)
        return ModelSpec(
            name=name,
            family=self.family,
            architecture="Qwen2_5_VLForConditionalGeneration",
            arch_builder="qwen2_5_vl",
            is_encoder_decoder=False,
            config_dtype=config_dtype(config, text),
            layers=kv_layers(text, "qwen2_5_vl"),
            modalities=(
                Modality("image", image, None),
                Modality("video", image, None, frame_pair_tokens=image, max_frames=MAX_FRAMES_PER_VIDEO),
            ),
            derived_max_model_len=max_len,
            max_len_key=key,
            max_source_positions=None,
            encoder_tokens_per_request=0,
            num_attention_heads=need(text, "num_attention_heads", "qwen2_5_vl"),
            decoder=decoder_shape(text, "qwen2_5_vl"),
            encoder=EncoderShape(
                seq_len=image * merge * merge,  # patches before the 2x2 merge
                hidden_size=vision.get("hidden_size", 1280),
                ffn_size=vision.get("intermediate_size", 3420),
                num_layers=vision.get("depth", 32),
                output_hidden_size=vision.get("out_hidden_size", hidden),
                seq_len_tokens=image,  # a video of n frame pairs has n times the patches
                gated_ffn=True,  # Qwen2.5-VL's vision MLP: gate, up, down (SiLU)
            ),
            vllm_support=VllmSupport("native", "Qwen2_5_VLForConditionalGeneration (vllm/model_executor/models/qwen2_5_vl.py)"),
            notes=(f"max_pixels {max_pixels}: {image} tokens per image; videos up to {MAX_FRAMES_PER_VIDEO} frames",),
        )


register(Qwen25VLAdapter())
