"""Nemotron-Parse (NemotronParseForConditionalGeneration): RADIO ViT-H/16 + neck, mBART decoder without positions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from capacity.errors import BadInput
from capacity.model.families.common import config_dtype, need, self_and_cross_layers, sub
from capacity.model.family import EncoderInput, Family
from capacity.model.shard_rules import ShardRules
from capacity.model.spec import (
    DecoderShape,
    EncoderShape,
    Modality,
    ModelSpec,
    VllmSupport,
    derive_max_model_len,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from torch import nn

    from capacity.source.resolve import ModelSource

RADIO_PREFIX_TOKENS = 8  # cls tokens per teacher (4) padded to register_multiple 8
VIT_H = {"hidden": 1280, "ffn": 5120, "layers": 32}  # vit_huge_patch16_224


def image_tokens(height: int, width: int, patch: int) -> int:
    """vLLM: NemotronParseProcessingInfo.get_num_image_tokens = (H//p) * ((W//p)//4) + 1."""
    return (height // patch) * ((width // patch) // 4) + 1


class NemotronParseFamily(Family):
    name = "nemotron_parse"
    model_types = ("nemotron_parse",)
    verify_decoder_path = ("decoder",)
    trace_undercount_percent: ClassVar[int | None] = 15  # H200 activation peak vs the fake trace (bench/results/trace-2026-11-30)
    # vLLM nemotron_parse.py + radio.py / intern_vit.py: RADIO attention qkv/proj and MLP fc1/fc2 parallel, the neck's
    # sum_proj a ColumnParallelLinear, mBART decoder layers parallel, BartScaledWordEmbedding vocab-parallel.
    # transformers' RadioModel names its attention q/k/v_proj + o_proj (5.24) or, ViT-style, attention.query/key/value
    # + output.dense (5.17).
    tensor_parallel_rules = ShardRules(
        column=r"(\.(q_proj|k_proj|v_proj|fc1)|\.attention\.(query|key|value))$",
        row=r"(\.(o_proj|out_proj|fc2)|\.attention\.output\.dense)$",
        vocab_embedding=r"^decoder\.embed_tokens$",
        lm_head=r"^lm_head$",
        encoder=r"^(encoder|neck)\.",
        gathered_column=r"^neck\.sum_proj$",
    )

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        decoder = sub(config, "decoder", "nemotron_parse")
        encoder = sub(config, "encoder", "nemotron_parse")
        size = need(config, "image_size", "nemotron_parse")
        if not (isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) and v > 0 for v in size)):
            raise BadInput(f"config.json (nemotron_parse) image_size must be [H, W] of positive integers, got {size!r}")
        height, width = size
        patch = need(encoder, "patch_size", "nemotron_parse")
        tokens = image_tokens(height, width, patch)
        d_model = need(decoder, "d_model", "nemotron_parse")
        heads = need(decoder, "decoder_attention_heads", "nemotron_parse")
        n_dec = need(decoder, "decoder_layers", "nemotron_parse")
        head_size = d_model // heads
        layers = self_and_cross_layers(n_dec, heads, head_size)
        # NemotronParseConfig passes its max_sequence_length (default 9000) down to the decoder
        # sub-config, which is vLLM's text config; derive_max_model_len finds it there.
        text = dict(decoder)
        text.setdefault("max_sequence_length", config.get("max_sequence_length", 9000))
        max_len, key = derive_max_model_len(text)
        source_positions = config.get("max_source_positions")
        return ModelSpec(
            name=name,
            family=self,
            architecture="NemotronParseForConditionalGeneration",
            is_encoder_decoder=True,
            config_dtype=config_dtype(config, decoder),
            layers=layers,
            modalities=(Modality("image", tokens, 1),),
            derived_max_model_len=max_len,
            max_len_key=f"decoder.{key}",
            max_source_positions=source_positions if isinstance(source_positions, int) else None,
            encoder_tokens_per_request=tokens,
            num_attention_heads=heads,
            decoder=DecoderShape(
                d_model,
                # vLLM's MBartDecoderNoPos reads the FFN width from encoder_ffn_dim; a config without it
                # (the reconstructed v1.2 in the catalog) falls back to decoder_ffn_dim, as capacity/arch does.
                need(decoder, "encoder_ffn_dim" if "encoder_ffn_dim" in decoder else "decoder_ffn_dim", "nemotron_parse"),
                False,
                need(decoder, "vocab_size", "nemotron_parse"),
                n_dec,
            ),
            encoder=EncoderShape(
                seq_len=(height // patch) * (width // patch) + RADIO_PREFIX_TOKENS,
                hidden_size=VIT_H["hidden"],
                ffn_size=VIT_H["ffn"],
                num_layers=VIT_H["layers"],
                output_hidden_size=d_model,
            ),
            vllm_support=VllmSupport("native", "NemotronParseForConditionalGeneration (vllm/model_executor/models/nemotron_parse.py)"),
            notes=(
                f"every page is resized and padded to {height}x{width}: always {tokens} encoder tokens per image",
                "config has no max_source_positions: MRV2's max_encoder_len falls back to max_model_len",
            )
            if source_positions is None
            else (f"every page is resized and padded to {height}x{width}: always {tokens} encoder tokens per image",),
        )

    def build_module(
        self, config: dict[str, Any], *, device: str = "meta", dtype: str = "bfloat16", init_weights: bool | None = None, attn_implementation: str | None = None
    ) -> nn.Module:
        """transformers' RadioModel, its neck and an mBART decoder without positions (capacity.model.arch.nemotron_parse)."""
        from capacity.model.arch.nemotron_parse import build_nemotron_parse

        return build_nemotron_parse(config, device=device, dtype=dtype, init_weights=init_weights, attn_implementation=attn_implementation)

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """Pages are resized and padded to image_size: a tensor of that processed shape."""
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


FAMILY = NemotronParseFamily()
