"""Florence-2: DaViT image encoder + BART encoder-decoder (vLLM 0.33: out-of-tree bart-plugin)."""

from __future__ import annotations

from typing import Any

from capacity.families import register
from capacity.families.bart import bart_decoder_layers, bart_decoder_shape
from capacity.families.common import config_dtype, need, sub
from capacity.spec import EncoderShape, Modality, ModelSpec, VllmSupport, derive_max_model_len

FLORENCE_IMAGE_SIZE = 768  # the processor's crop size


def stride_product(strides: list[int]) -> int:
    out = 1
    for s in strides:
        out *= s
    return out


def image_tokens(image_size: int, strides: list[int]) -> int:
    """Spatial tokens of the last DaViT stage plus one pooled token: (768/32)^2 + 1 = 577."""
    return (image_size // stride_product(strides)) ** 2 + 1


def davit_widest_stage(strides: list[int], dims: list[int]) -> int:
    """The DaViT stage with the most activation bytes per image: tokens x width (MLP ratio 4 everywhere).

    At 768 px: stage 1 has 192^2 tokens x 256 wide, 4x the product of stage 3 (48^2 x 1024)."""
    sizes = [(FLORENCE_IMAGE_SIZE // stride_product(strides[: i + 1])) ** 2 * dims[i] for i in range(len(dims))]
    return max(range(len(dims)), key=lambda i: sizes[i])


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
        stage = davit_widest_stage(strides, dims)
        side = FLORENCE_IMAGE_SIZE // stride_product(strides[: stage + 1])
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
            encoder=EncoderShape(side * side, dims[stage], 4 * dims[stage], depths[stage], need(text, "d_model", "florence2")),
            vllm_support=VllmSupport(
                "plugin", "Florence2ForConditionalGeneration needs the out-of-tree vllm-project/bart-plugin in vLLM 0.33"
            ),
            notes=(f"{tokens} image tokens per 768x768 image; the encoder prompt (image + task text) is at most {positions}",),
        )


register(Florence2Adapter())
