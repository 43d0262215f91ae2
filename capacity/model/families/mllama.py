"""Llama-3.2-Vision (MllamaForConditionalGeneration): tiled ViT, text decoder with interleaved cross-attention."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capacity.kv.layers import CrossAttentionLayer, FullAttentionLayer
from capacity.model.families.common import config_dtype, need, sub
from capacity.model.family import EncoderInput, Family
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

    from capacity.source.resolve import ModelSource

# transformers' MllamaVisionConfig default (the published configs list the same 8 ratios)
SUPPORTED_ASPECT_RATIOS = ((1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2), (3, 1), (4, 1))


def tokens_per_tile(image_size: int, patch_size: int) -> int:
    """(image_size // patch)^2 patches + 1 class token = 1601 for 560 / 14."""
    return (image_size // patch_size) ** 2 + 1


def widest_aspect_ratio(vision: dict[str, Any]) -> tuple[int, tuple[int, int]]:
    """(aspect_ratio_id, (rows, cols)) of the first supported tiling with the most tiles: the processor's largest
    image (MllamaImageProcessor numbers the supported ratios from 1; 0 pads)."""
    ratios = [tuple(r) for r in vision.get("supported_aspect_ratios") or SUPPORTED_ASPECT_RATIOS]
    most = max(rows * cols for rows, cols in ratios)
    index = next(i for i, (rows, cols) in enumerate(ratios) if rows * cols == most)
    return index + 1, ratios[index]  # type: ignore[return-value]


class MllamaFamily(Family):
    name = "mllama"
    model_types = ("mllama",)
    hf_class = "MllamaForConditionalGeneration"

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        text = sub(config, "text_config", "mllama")
        vision = sub(config, "vision_config", "mllama")
        hidden = need(text, "hidden_size", "mllama")
        heads = need(text, "num_attention_heads", "mllama")
        kv_heads = text.get("num_key_value_heads") or heads
        head_size = text.get("head_dim") or hidden // heads
        cross_layers = set(need(text, "cross_attention_layers", "mllama"))
        n_layers = need(text, "num_hidden_layers", "mllama")
        layers = tuple(
            CrossAttentionLayer(kv_heads, head_size) if i in cross_layers else FullAttentionLayer(kv_heads, head_size) for i in range(n_layers)
        )
        tile = tokens_per_tile(need(vision, "image_size", "mllama"), need(vision, "patch_size", "mllama"))
        tiles = need(vision, "max_num_tiles", "mllama")
        tokens = tile * tiles
        padded_tile = tile + (-tile) % 8  # HF pads each tile's sequence to a multiple of 8
        max_len, key = derive_max_model_len(text)
        return ModelSpec(
            name=name,
            family=self,
            architecture="MllamaForConditionalGeneration",
            is_encoder_decoder=True,
            config_dtype=config_dtype(config, text),
            layers=layers,
            modalities=(Modality("image", tokens, None),),
            derived_max_model_len=max_len,
            max_len_key=f"text_config.{key}",
            max_source_positions=None,
            encoder_tokens_per_request=tokens,
            num_attention_heads=heads,
            decoder=DecoderShape(hidden, need(text, "intermediate_size", "mllama"), True, need(text, "vocab_size", "mllama"), n_layers),
            encoder=EncoderShape(
                seq_len=padded_tile * tiles,
                hidden_size=need(vision, "hidden_size", "mllama"),
                ffn_size=need(vision, "intermediate_size", "mllama"),
                num_layers=need(vision, "num_hidden_layers", "mllama") + vision.get("num_global_layers", 0),
                output_hidden_size=hidden,
            ),
            vllm_support=VllmSupport(
                "removed",
                "MllamaForConditionalGeneration was removed from vLLM with V0 (last supported in 0.10.2); vLLM 0.33 refuses it",
                served_through="0.10.2",
            ),
            notes=(f"{tile} tokens per tile x {tiles} tiles = {tokens} cross-attention tokens per image",),
        )


    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """One image of the widest tiling as MllamaImageProcessor hands it over: pixel_values (1 image, tiles, 3,
        size, size), its aspect_ratio_id and a mask of its tiles; `tokens` / tokens_per_tile tiles."""
        import torch

        vision = sub(source.config, "vision_config", "mllama")
        size, patch = need(vision, "image_size", "mllama"), need(vision, "patch_size", "mllama")
        ratio_id, (rows, cols) = widest_aspect_ratio(vision)
        tiles = max(1, min(tokens // tokens_per_tile(size, patch), rows * cols))
        max_tiles = need(vision, "max_num_tiles", "mllama")
        pixels = torch.zeros(1, 1, max_tiles, vision.get("num_channels", 3), size, size, device=device, dtype=dtype)
        mask = torch.zeros(1, 1, max_tiles, dtype=torch.long, device=device)
        mask[..., :tiles] = 1
        ids = torch.full((1, 1), ratio_id, dtype=torch.long, device=device)
        return EncoderInput(
            {"pixel_values": pixels, "aspect_ratio_ids": ids, "aspect_ratio_mask": mask},
            f"processed-shape tiles ({max_tiles}, 3, {size}, {size}): one {rows * size}x{cols * size} px image, {tiles} tiles "
            f"(aspect_ratio_id {ratio_id}) x {tokens_per_tile(size, patch)} tokens",
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        """The tiled ViT (local and global layers) on `count` images, projected to the text width: each image's
        cross-attention states, tiles x tokens_per_tile rows (MllamaModel: vision_model, multi_modal_projector)."""
        t = item.tensors
        vision = model.model.vision_model(
            pixel_values=t["pixel_values"].expand(count, -1, -1, -1, -1, -1),
            aspect_ratio_ids=t["aspect_ratio_ids"].expand(count, -1),
            aspect_ratio_mask=t["aspect_ratio_mask"].expand(count, -1, -1),
        ).last_hidden_state  # (count, 1 image, tiles, tokens per tile, vision_output_dim)
        states = model.model.multi_modal_projector(vision)
        return list(states.reshape(count, -1, states.shape[-1]).unbind(0))

    def cached_text_model(self, model: Any) -> Any:
        return model.model.language_model

    def cross_attention_kv(self, model: Any, layer: int, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """MllamaTextCrossAttention's keys (k_proj, then k_norm per head) and values (v_proj) of the image's states."""
        attn = model.model.language_model.layers[layer].cross_attn
        shape = (states.shape[0], -1, attn.num_key_value_heads, attn.head_dim)
        return attn.k_norm(attn.k_proj(states).view(shape)), attn.v_proj(states).view(shape)

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        """The text model; its cross-attention layers attend `encoder_states` (one per request), or are skipped
        without them (a text-only batch, as transformers' MllamaTextModel does)."""
        return model.model.language_model(input_ids=input_ids, cross_attention_states=encoder_states, use_cache=False).last_hidden_state


FAMILY = MllamaFamily()
