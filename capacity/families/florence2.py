"""Florence-2: DaViT image encoder + BART encoder-decoder (vLLM 0.33: out-of-tree bart-plugin)."""

from __future__ import annotations

from typing import Any

from capacity.families import register
from capacity.families.bart import bart_decoder_layers, bart_decoder_shape
from capacity.families.common import config_dtype, need, sub
from capacity.spec import EncoderShape, Modality, ModelSpec, VllmSupport, derive_max_model_len

FLORENCE_IMAGE_SIZE = 768  # the processor's crop size


def image_tokens(image_size: int, strides: list[int]) -> int:
    """Spatial tokens of the last DaViT stage plus one pooled token: (768/32)^2 + 1 = 577."""
    stride = 1
    for s in strides:
        stride *= s
    return (image_size // stride) ** 2 + 1


class Florence2Adapter:
    family = "florence2"
    model_types = ("florence2",)

    def spec(self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None) -> ModelSpec:
        text = sub(config, "text_config", "florence2")
        vision = sub(config, "vision_config", "florence2")
        strides = vision.get("patch_stride", [4, 2, 2, 2])
        tokens = image_tokens(FLORENCE_IMAGE_SIZE, strides)
        positions = need(text, "max_position_embeddings", "florence2")
        max_len, key = derive_max_model_len(text)
        dims = vision.get("dim_embed", [256, 512, 1024, 2048])
        depths = vision.get("depths", [1, 1, 9, 1])
        # The heaviest DaViT stage for activations: stage 3 (1024 wide at 1/16 resolution).
        side = FLORENCE_IMAGE_SIZE // (strides[0] * strides[1] * strides[2])
        return ModelSpec(
            name=name,
            family=self.family,
            architecture="Florence2ForConditionalGeneration",
            arch_builder="florence2",
            is_encoder_decoder=True,
            config_dtype=config_dtype(config, text),
            layers=bart_decoder_layers(text, "florence2"),
            modalities=(Modality("image", tokens, 1),),
            derived_max_model_len=max_len,
            max_len_key=f"text_config.{key}",
            max_source_positions=None,
            # The BART encoder sees the image tokens plus the task prompt, at most its positions.
            encoder_tokens_per_request=positions,
            num_attention_heads=need(text, "decoder_attention_heads", "florence2"),
            decoder=bart_decoder_shape(text, "florence2"),
            encoder=EncoderShape(side * side, dims[2], 4 * dims[2], depths[2], need(text, "d_model", "florence2")),
            vllm_support=VllmSupport(
                "plugin", "Florence2ForConditionalGeneration needs the out-of-tree vllm-project/bart-plugin in vLLM 0.33"
            ),
            notes=(f"{tokens} image tokens per 768x768 image; the encoder prompt (image + task text) is at most {positions}",),
        )


register(Florence2Adapter())
