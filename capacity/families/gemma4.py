"""Gemma-4 (Gemma4ForConditionalGeneration): a SigLIP-like vision tower shared by images and video frames, and a
decoder of sliding-window and full-attention layers of different widths, optionally with MoE blocks.

Read from vLLM 0.33 (model_executor/models/gemma4.py, gemma4_mm.py) and transformers' Gemma4TextConfig:
- KV: sliding layers keep `num_key_value_heads` x `head_dim`; full layers `global_head_dim` and, when
  `attention_k_eq_v`, `num_global_key_value_heads` (transformers' per_layer_config, which Gemma4DecoderLayer reads).
  With k_eq_v vLLM still builds a QKVParallelLinear with a V part (K is loaded into both) and caches K and V;
  the last `num_kv_shared_layers` layers read the last earlier layer of their kind (no allocation);
- tokens per item (Gemma4ProcessingInfo.get_mm_max_tokens_per_item): an image is
  `vision_config.default_output_length` soft tokens (no preprocessor config needed); a video 32 frames x (70 soft
  tokens + boi + eoi + 6 timestamp tokens); images and videos unlimited per prompt;
- the vision tower is transformers' own module (AutoModel.from_config) with its linears made ReplicatedLinear, and
  the projector (embed_vision) a ReplicatedLinear: whole on every TP rank, as is the MoE router (GateLinear);
- the encoder runs on max_soft_tokens x pooling_kernel_size^2 patches per image (padded), 70 x k^2 per video frame.
What this file cannot model is refused in one line naming the field.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from capacity.errors import BadInput
from capacity.families.common import config_dtype, need, sub
from capacity.family import EncoderInput, Family
from capacity.kv_layout import kv_layers
from capacity.spec import DecoderShape, EncoderShape, Modality, ModelSpec, VllmSupport, derive_max_model_len
from capacity.vllm_registry import VLLM_VERSION

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from capacity.models import ModelSource
    from capacity.weights import StoredTensor

WHERE = "gemma4"

# transformers Gemma4TextConfig's field defaults (tests/test_gemma4.py checks them against the installed class).
TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_144,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 30,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131_072,
    "sliding_window": 512,
    "hidden_size_per_layer_input": 256,
    "attention_k_eq_v": False,
    "num_kv_shared_layers": 0,
    "enable_moe_block": False,
    "use_double_wide_mlp": False,
    "num_experts": None,
    "top_k_experts": None,
    "moe_intermediate_size": None,
    "tie_word_embeddings": True,
    "use_bidirectional_attention": None,
}
# Popped in Gemma4TextConfig.__post_init__ (not dataclass fields): the full-attention layers' overrides.
GLOBAL_HEAD_DIM_DEFAULT = 512
# transformers Gemma4VisionConfig's defaults; default_output_length has none there (vLLM reads it from the config).
VISION_DEFAULTS: dict[str, Any] = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 16,
    "patch_size": 16,
    "pooling_kernel_size": 3,
    "position_embedding_size": 10 * 1024,
}

# vLLM gemma4_mm.py
SUPPORTED_SOFT_TOKENS = (70, 140, 280, 560, 1120)  # _SUPPORTED_SOFT_TOKENS (max_soft_tokens values)
VIDEO_SOFT_TOKENS_PER_FRAME = 70  # _VIDEO_MAX_SOFT_TOKENS
VIDEO_MAX_FRAMES = 32  # _VIDEO_MAX_FRAMES
VIDEO_EXTRA_TOKENS_PER_FRAME = 2 + 6  # boi + eoi + about 6 timestamp tokens (get_mm_max_tokens_per_item)
# Gemma4DummyInputsBuilder: images and video frames of the image processor's size, which is None: 224 x 224.
DUMMY_SIDE = 224


def sliding_layer_types(num_layers: int) -> list[str]:
    """Gemma4TextConfig.__post_init__ without layer_types: 5 sliding : 1 full, the last layer forced full."""
    types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(num_layers)]
    types[-1] = "full_attention"
    return types


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The text config as vLLM reads it (transformers' Gemma4TextConfig), with what capacity cannot model refused."""
    raw = sub(config, "text_config", WHERE)
    text = {**TEXT_DEFAULTS, **raw, "model_type": "gemma4_text"}
    n = need(text, "num_hidden_layers", WHERE)
    if text.get("layer_types") is None:
        text["layer_types"] = sliding_layer_types(n)
    elif isinstance(text["layer_types"], list) and text["layer_types"] and text["layer_types"][-1] != "full_attention":
        text["layer_types"] = [*text["layer_types"][:-1], "full_attention"]  # transformers forces the last layer full
    if text.get("per_layer_config") is not None:
        text = from_per_layer_config(text)
    if text.get("use_bidirectional_attention") == "all":
        raise BadInput(
            "config.json text_config.use_bidirectional_attention is 'all' (transformers then halves sliding_window), which capacity has not "
            "checked against vLLM 0.33: not planned"
        )
    moe_built = text.get("num_experts") is not None  # vLLM Gemma4DecoderLayer: enable_moe_block = num_experts is not None
    if bool(text.get("enable_moe_block")) != moe_built:
        raise BadInput(
            f"config.json text_config.enable_moe_block is {text.get('enable_moe_block')!r} but num_experts is {text.get('num_experts')!r}: vLLM builds "
            "the MoE block iff num_experts is set, transformers iff enable_moe_block; fix the config so they agree"
        )
    if moe_built:
        for key in ("top_k_experts", "moe_intermediate_size"):
            need(text, key, WHERE)
    if (text.get("hidden_size_per_layer_input") or 0) > 0:
        raise BadInput(
            f"config.json text_config.hidden_size_per_layer_input is {text['hidden_size_per_layer_input']} (per-layer input embeddings, the "
            "E-series): vLLM's per-layer embedding table, projection and (max_num_batched_tokens x layers x width) buffer are not modelled yet"
        )
    return text


PER_LAYER_KEYS = ("head_dim", "num_key_value_heads")  # what Gemma4TextConfig's per_layer_config overrides


def from_per_layer_config(text: dict[str, Any]) -> dict[str, Any]:
    """An explicit per_layer_config (what transformers >= 5.x writes when it saves a Gemma-4 config: {"05": {"head_dim":
    512, "num_key_value_heads": 2}, ...}) read back as the global_* fields it was derived from, when it is that
    derivation: the same head_dim (and KV heads) override on exactly the full-attention layers. Anything else is
    refused naming the field."""
    overrides = text["per_layer_config"]
    full = {i for i, kind in enumerate(text["layer_types"]) if kind == "full_attention"}
    refuse = (
        "config.json text_config.per_layer_config {why}: capacity reads it only as the same head_dim / num_key_value_heads "
        "override on every full_attention layer (how transformers derives it from global_head_dim)"
    )
    if not isinstance(overrides, dict):
        raise BadInput(refuse.format(why=f"is {type(overrides).__name__}, not an object"))
    try:
        layers = {int(key): value for key, value in overrides.items()}
    except (TypeError, ValueError) as exc:
        raise BadInput(refuse.format(why="has a key that is not a layer index")) from exc
    shapes = {json.dumps(value, sort_keys=True) for value in layers.values()}
    if set(layers) != full or len(shapes) != 1:
        raise BadInput(refuse.format(why=f"overrides layers {sorted(layers)}, not exactly the full_attention layers {sorted(full)} alike"))
    shape = next(iter(layers.values()))
    if not isinstance(shape, dict) or not shape or set(shape) - set(PER_LAYER_KEYS) or "head_dim" not in shape:
        raise BadInput(refuse.format(why=f"sets {sorted(shape) if isinstance(shape, dict) else shape!r}"))
    out = {k: v for k, v in text.items() if k != "per_layer_config"}
    out["global_head_dim"] = shape["head_dim"]
    out.pop("num_global_key_value_heads", None)
    if "num_key_value_heads" in shape:
        out.update(num_global_key_value_heads=shape["num_key_value_heads"], attention_k_eq_v=True)
    return out


def kv_text(text: dict[str, Any]) -> dict[str, Any]:
    """What the one KV reader (capacity.kv_layout) reads for Gemma-4: global_head_dim and the k_eq_v KV heads made
    explicit (Gemma4TextConfig pops them into per_layer_config: head_dim global_head_dim, and num_key_value_heads
    num_global_key_value_heads when attention_k_eq_v and it is set)."""
    out = {**text, "global_head_dim": text.get("global_head_dim") or GLOBAL_HEAD_DIM_DEFAULT}
    if not text.get("attention_k_eq_v") or text.get("num_global_key_value_heads") is None:
        out.pop("num_global_key_value_heads", None)
    out["attention_k_eq_v"] = bool(out.get("num_global_key_value_heads"))
    return out


def image_soft_tokens(vision: dict[str, Any]) -> int:
    """Gemma4ProcessingInfo.get_mm_max_tokens_per_item: vision_config.default_output_length (no --mm-processor-kwargs)."""
    tokens = vision.get("default_output_length")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens <= 0:
        raise BadInput(f"config.json vision_config.default_output_length must be a positive integer (the image soft tokens vLLM plans with), got {tokens!r}")
    return tokens


def resized_patches(height: int, width: int, max_soft_tokens: int, patch: int, k: int) -> tuple[int, int]:
    """(patch rows, patch columns) of an image after Gemma4's aspect-ratio-preserving resize to at most
    max_soft_tokens x k^2 patches, each side a multiple of k x patch (transformers get_aspect_ratio_preserving_size,
    vLLM Gemma4ProcessingInfo._compute_num_soft_tokens)."""
    unit = patch * k
    scale = (max_soft_tokens * k * k / ((height / patch) * (width / patch))) ** 0.5
    return max(unit, int(height * scale // unit) * unit) // patch, max(unit, int(width * scale // unit) * unit) // patch


def dummy_soft_tokens(max_soft_tokens: int, patch: int, k: int) -> int:
    """Soft tokens of vLLM's 224 x 224 dummy image (or video frame) at max_soft_tokens."""
    rows, cols = resized_patches(DUMMY_SIDE, DUMMY_SIDE, max_soft_tokens, patch, k)
    return min(rows * cols // (k * k), max_soft_tokens)


def video_tokens(frames: int = VIDEO_MAX_FRAMES) -> int:
    """Gemma4ProcessingInfo.get_mm_max_tokens_per_item: num_frames x (70 + 2 + 6)."""
    return frames * (VIDEO_SOFT_TOKENS_PER_FRAME + VIDEO_EXTRA_TOKENS_PER_FRAME)


def decoder(text: dict[str, Any]) -> DecoderShape:
    """The decoder for the activation formula: the wider of the dense MLP and the routed experts' per-token width
    (top_k_experts x moe_intermediate_size; both run in every MoE layer, one after the other)."""
    double = text.get("use_double_wide_mlp") and (text.get("num_kv_shared_layers") or 0) > 0  # the KV-shared layers' MLPs
    ffn = need(text, "intermediate_size", WHERE) * (2 if double else 1)
    if text.get("num_experts") is not None:
        ffn = max(ffn, text["top_k_experts"] * text["moe_intermediate_size"])
    return DecoderShape(need(text, "hidden_size", WHERE), ffn, True, need(text, "vocab_size", WHERE), need(text, "num_hidden_layers", WHERE))


class Gemma4Family(Family):
    name = "gemma4"
    model_types = ("gemma4",)
    hf_class = "Gemma4ForConditionalGeneration"
    # vLLM: the vision tower is transformers' module with ReplicatedLinear layers, embed_vision a ReplicatedLinear,
    # the MoE router's proj a GateLinear: all whole on every TP rank.
    vllm_unsharded_modules = (r"(^|\.)vision_tower(\.|$)", r"(^|\.)embed_vision(\.|$)", r"\.router\.proj$")
    adds_vllm_tensors = True  # the V part of k_eq_v layers' QKVParallelLinear (vllm_tensors)

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        architecture = str((config.get("architectures") or [self.hf_class])[0])
        if architecture != self.hf_class:
            raise BadInput(f"config.json architectures names {architecture!r}: the gemma4 family plans {self.hf_class} only")
        if config.get("audio_config") is not None:
            raise BadInput(
                "config.json has an audio_config: Gemma-4's audio tower (tokens = the processor's audio_seq_length, a conformer encoder) is not "
                "modelled yet"
            )
        text = text_config(config)
        vision = {**VISION_DEFAULTS, **sub(config, "vision_config", WHERE)}
        image = image_soft_tokens(vision)
        video = video_tokens()
        k = need(vision, "pooling_kernel_size", WHERE)
        k2 = k * k
        patch = need(vision, "patch_size", WHERE)
        image_dummy = dummy_soft_tokens(image, patch, k)
        frame_dummy = dummy_soft_tokens(VIDEO_SOFT_TOKENS_PER_FRAME, patch, k)
        max_len, key = derive_max_model_len(text)
        shared = text.get("num_kv_shared_layers") or 0
        return ModelSpec(
            name=name,
            family=self,
            architecture=architecture,
            is_encoder_decoder=False,
            config_dtype=config_dtype(config, text),
            layers=kv_layers(kv_text(text), WHERE),
            modalities=(
                Modality("image", image, None, encoder_positions=image * k2, dummy_output_tokens=image_dummy),
                Modality(
                    "video",
                    video,
                    None,
                    encoder_positions=VIDEO_MAX_FRAMES * VIDEO_SOFT_TOKENS_PER_FRAME * k2,
                    dummy_output_tokens=VIDEO_MAX_FRAMES * frame_dummy,
                ),
            ),
            derived_max_model_len=max_len,
            max_len_key=f"text_config.{key}",
            max_source_positions=None,
            encoder_tokens_per_request=0,
            num_attention_heads=need(text, "num_attention_heads", WHERE),
            decoder=decoder(text),
            encoder=EncoderShape(
                seq_len=image * k2,  # the patches of one image (padded to max_patches), the pooling's input
                hidden_size=need(vision, "hidden_size", WHERE),
                ffn_size=need(vision, "intermediate_size", WHERE),
                num_layers=need(vision, "num_hidden_layers", WHERE),
                output_hidden_size=need(text, "hidden_size", WHERE),
                seq_len_tokens=image,
                gated_ffn=True,
                tensor_parallel=False,  # transformers' tower, whole on every rank
            ),
            vllm_support=VllmSupport("native", f"Gemma4ForConditionalGeneration (vllm/model_executor/models/gemma4_mm.py, vLLM {VLLM_VERSION})"),
            notes=(
                f"gemma4: {image} soft tokens per image (vision_config.default_output_length; vLLM's get_mm_max_tokens_per_item, "
                f"--mm-processor-kwargs max_soft_tokens not modelled), {video} per video ({VIDEO_MAX_FRAMES} frames x "
                f"({VIDEO_SOFT_TOKENS_PER_FRAME} + 2 + 6)); the encoder runs {image * k2} patches per image, {VIDEO_SOFT_TOKENS_PER_FRAME * k2} per frame "
                f"(padded); vLLM's {DUMMY_SIDE} x {DUMMY_SIDE} dummy image yields {image_dummy} embeddings, a dummy frame {frame_dummy}",
                "gemma4: --limit-mm-per-prompt video=0 leaves images as the profiled modality; a video's num_frames limit is not modelled (32 frames)",
                *((f"gemma4: the last {shared} layers read the KV of an earlier layer (no allocation)",) if shared else ()),
            ),
        )

    def vllm_tensors(self, tensors: tuple[StoredTensor, ...], config: dict[str, Any]) -> tuple[StoredTensor, ...]:
        """vLLM's QKVParallelLinear of a k_eq_v full-attention layer has a V part the checkpoint does not store
        (K is loaded into both): one V tensor the shape of each such layer's K (vLLM _gemma4_layer_weights_mapper)."""
        from capacity.weights import StoredTensor

        names = {t.name for t in tensors}
        added = [
            StoredTensor(t.name.replace(".self_attn.k_proj.", ".self_attn.v_proj."), t.shape, t.dtype)
            for t in tensors
            if ".self_attn.k_proj." in t.name and "vision_tower" not in t.name and t.name.replace(".self_attn.k_proj.", ".self_attn.v_proj.") not in names
        ]
        return (*tensors, *added)

    # --- the fake-tensor trace and the profiler ------------------------------------------------------------

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """vLLM's dummy item as Gemma4's processor hands it over: a 224 x 224 image (or 32 such frames) resized to
        its patch budget, `rows x cols` valid patches of 3 x patch^2 pixels, padded to max_soft_tokens x k^2 patches
        whose positions are (-1, -1)."""
        import torch

        vision = {**VISION_DEFAULTS, **(source.config.get("vision_config") or {})}
        k, patch = vision["pooling_kernel_size"], vision["patch_size"]
        video = next((m for m in spec.modalities if m.name == "video"), None)
        is_video = video is not None and video.max_tokens_per_item == tokens
        frames = VIDEO_MAX_FRAMES if is_video else 1
        soft = VIDEO_SOFT_TOKENS_PER_FRAME if is_video else image_soft_tokens(vision)
        rows, cols = resized_patches(DUMMY_SIDE, DUMMY_SIDE, soft, patch, k)
        padded = soft * k * k
        valid = rows * cols
        grid = torch.stack(torch.meshgrid(torch.arange(cols), torch.arange(rows), indexing="xy"), dim=-1).reshape(-1, 2)
        positions = torch.full((frames, padded, 2), -1, dtype=torch.long)
        positions[:, :valid] = grid
        pixels = torch.zeros(frames, padded, 3 * patch * patch, device=device, dtype=dtype)
        return EncoderInput(
            {"pixel_values": pixels, "image_position_ids": positions.to(device)},
            f"{frames} x {padded} patches of {patch} px ({valid} valid: a {DUMMY_SIDE} x {DUMMY_SIDE} dummy resized to {rows * patch} x {cols * patch}), "
            f"{'video' if is_video else 'image'} of {tokens} tokens",
            host={"valid_rows_per_frame": min(valid // (k * k), soft)},
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        """vLLM's _process_image_input / _process_video_input on `count` items: transformers' patch embedder,
        encoder and pooler on every item's patches in one batch, then embed_vision on the pooled soft tokens.
        The pooler's valid rows are taken by count, not by its boolean mask (no fake-tensor shape). vLLM splits the batch into chunks by free memory
        (_encoder_chunk); one batch is the upper bound."""
        import torch

        tower = model.model.vision_tower
        pixels = torch.cat([item.tensors["pixel_values"]] * count)
        positions = torch.cat([item.tensors["image_position_ids"]] * count)
        padding = (positions == -1).all(dim=-1)
        embeds = tower.patch_embedder(pixels, positions, padding)
        hidden = tower.encoder(inputs_embeds=embeds, attention_mask=~padding, pixel_position_ids=positions).last_hidden_state
        k2 = tower.config.pooling_kernel_size**2
        pooled, _ = tower.pooler(hidden_states=hidden, pixel_position_ids=positions, padding_positions=padding, output_length=pixels.shape[1] // k2)
        if getattr(tower.config, "standardize", False):
            pooled = (pooled - tower.std_bias.float()) * tower.std_scale.float()
        valid = pooled[:, : item.host["valid_rows_per_frame"]]  # the valid soft tokens come first (positions in order)
        rows = model.model.embed_vision(inputs_embeds=valid.to(embeds.dtype).reshape(1, -1, pooled.shape[-1])).squeeze(0)
        return list(rows.chunk(count))

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        return model.model.language_model(input_ids=input_ids, use_cache=False).last_hidden_state

    def lm_head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        return model.get_output_embeddings()(hidden)


FAMILY = Gemma4Family()
