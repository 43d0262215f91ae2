"""Florence-2: DaViT image encoder + BART encoder-decoder (vLLM 0.33: out-of-tree bart-plugin)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from capacity.model.families.bart import bart_decoder_layers, bart_decoder_shape
from capacity.model.families.common import config_dtype, need, sub
from capacity.model.family import EncoderInput, Family
from capacity.model.spec import EncoderShape, Modality, ModelSpec, VllmSupport, derive_max_model_len

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from capacity.source.resolve import ModelSource

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


class Florence2Family(Family):
    name = "florence2"
    model_types = ("florence2",)
    hf_class = "Florence2ForConditionalGeneration"
    # H200 activation peak vs the fake trace: +74 % in bench/results/trace-2026-11-30, and again in
    # h200-catalog-2026-12-01 (encoder phase 5,344.4 MiB measured, 3,074.6 traced: x 1.738). Read as the DaViT
    # tower's cuDNN convolution workspaces (allocator memory fake tensors do not see); not isolated op by op.
    trace_undercount_percent: ClassVar[int | None] = 74

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
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
            family=self,
            architecture="Florence2ForConditionalGeneration",
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
                "plugin", "Florence2ForConditionalGeneration needs the out-of-tree vllm-project/bart-plugin in vLLM 0.33", served_through="0.10.2"
            ),
            notes=(f"{tokens} image tokens per 768x768 image; the encoder prompt (image + task text) is at most {positions}",),
        )

    def hf_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The remote-code layout (florence2_language / davit) mapped to transformers' native Florence2Config."""
        from capacity.model.arch.florence2 import to_native_florence2_config

        return to_native_florence2_config(config)

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """DaViT on one 768 x 768 image (the processor is remote code)."""
        import torch

        pixels = torch.zeros(1, 3, FLORENCE_IMAGE_SIZE, FLORENCE_IMAGE_SIZE, device=device, dtype=dtype)
        return EncoderInput({"pixel_values": pixels}, "processed-shape tensor (1, 3, 768, 768): the processor is remote code")

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        pixels = item.tensors["pixel_values"].expand(count, -1, -1, -1).contiguous()
        states = model.model.vision_tower(pixels).last_hidden_state
        return list(model.model.multi_modal_projector(states).unbind(0))

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        decoder = model.model.language_model.decoder
        return decoder(input_ids=input_ids, encoder_hidden_states=encoder_states, use_cache=False).last_hidden_state


FAMILY = Florence2Family()
