"""The generic family: a multimodal decoder that transformers builds, when no dedicated family claims its config.

Every figure keeps its kind and says "generic" in its method. What it reads, and how:
- the text config as vLLM reads it: transformers' config class with its defaults (vLLM loads configs through
  AutoConfig); its KV layers through the one reader, `capacity.kv.text_config.kv_layers` (full, sliding, MLA, hybrid
  linear attention / mamba, KV sharing, chunked local attention; what it cannot read is refused naming the field);
- tokens per item from the model's own HF classes on a max-size dummy input, as vLLM's dummy-input builders do:
  images through the processor's placeholder count (`_get_num_multimodal_tokens`, built from the processor and
  preprocessor configs without a tokenizer) at the largest of the sizes its image processor allows; audio through
  the feature extractor on its longest clip, then the model's own `get_audio_features` on the meta device (its
  downsampling). What cannot be built offline falls back to a per-modality formula the spec's notes name;
- the encoder for the activation formula from the vision / audio sub-config; the fake-tensor trace runs the
  model's own `get_image_features` / `get_audio_features` on the processor's tensors.

The rules vLLM keeps for particular models (Qwen-VL images and videos, Idefics3, LFM2-VL, GLM-4.1V videos) are in
`capacity.model.items`, with the transformers classes built offline (`items.hf_processor`); this module picks them.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import asdict, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from capacity.errors import BadInput
from capacity.kv.text_config import kv_layers
from capacity.model.families.common import config_dtype
from capacity.model.families.decoder_only import decoder_shape
from capacity.model.families.qwen2_5_vl import VISUAL_TOWER
from capacity.model.family import EncoderInput, Family, ModelBuffer, Tower
from capacity.model.hf_config import materialized
from capacity.model.items.glm4v import GLM4V_MAX_FRAMES, GLM4V_VIDEO, glm4v_video_tokens_by_frames
from capacity.model.items.hf_processor import candidate_sizes, feature_extractor, headless_processor, image_processor, processor_class
from capacity.model.items.idefics3 import IDEFICS3_IMAGES, idefics3_image_tokens
from capacity.model.items.item_tokens import ItemTokens
from capacity.model.items.lfm2_vl import LFM2_VL_IMAGES, lfm2_vl_image_tokens
from capacity.model.items.qwen_vl import (
    MAX_FRAMES_PER_VIDEO,
    NO_PIXEL_BOUNDS,
    QWEN2_VL_VIDEO,
    QWEN3_VL_VIDEO,
    QWEN_VL_IMAGES,
    qwen3_vl_video_tokens,
    qwen_vl_image_tokens,
)
from capacity.model.items.video_grid import video_tensors
from capacity.model.processor_kwargs import qwen_vl_max_pixels_within, with_qwen_vl_sizes
from capacity.model.shipped import shipped
from capacity.model.spec import EncoderShape, Modality, ModelSpec, VllmSupport, vllm_max_model_len
from capacity.model.vllm_registry import MULTIMODAL_ARCHITECTURES, VLLM_VERSION

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from capacity.source.resolve import ModelSource

# The sub-configs that make a config multimodal, and the modality each feeds.
MODALITY_SUBCONFIGS: tuple[tuple[str, str], ...] = (("vision_config", "image"), ("audio_config", "audio"))

# vLLM 0.33's _mark_tower_model blocks, by model_type (transformers' module names, as the meta build names them).
TOWERS: dict[str, tuple[Tower, ...]] = {
    "lfm2_vl": (Tower(("image",), ("vision_tower", "multi_modal_projector")),),  # Lfm2VLForConditionalGeneration.__init__
    "qwen2_audio": (Tower(("audio",), ("audio_tower", "multi_modal_projector")),),  # qwen2_audio.py
    **dict.fromkeys(("qwen2_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "glm4v"), (VISUAL_TOWER,)),
}

# The text-config field whose channels the model class's get_mamba_state_shape_from_config reads for its state layers,
# by model_type, where the layers read another (Lfm2VLForConditionalGeneration: hidden_size; its ShortConv layers conv_dim).
ALIGNED_STATE_CHANNELS: dict[str, str] = {"lfm2_vl": "hidden_size"}

# Qwen3-VL's deepstack: vLLM's Qwen3VLForConditionalGeneration / Qwen3VLMoeForConditionalGeneration.__init__ allocate
# `deepstack_input_embeds`, one zeros(max_num_batched_tokens, text hidden_size) per deepstack level (in the model dtype
# and on the GPU: inside the loader's dtype and device contexts), whenever the visual tower is built (0.33:
# `use_deepstack ... and not isinstance(self.visual, StageMissingLayer)`; read in 0.11.0, 0.12.0, 0.13.0, 0.16.0-0.21.0,
# 0.30.0 and 0.33.0). Qwen3.5 sets use_deepstack but allocates none (qwen3_5.py).
DEEPSTACK_MODEL_TYPES = ("qwen3_vl", "qwen3_vl_moe")

# Modules vLLM 0.33 builds whole on every rank (ReplicatedLinear), by model_type.
UNSHARDED_MODULES: dict[str, tuple[str, ...]] = {
    "lfm2_vl": (r"(^|\.)multi_modal_projector\.linear_[12]$",),  # Lfm2VLMultiModalProjector: ReplicatedLinear
}


class GenericFamily(Family):
    name = "generic"
    # Tried before the plain-decoder fallback: a config with a vision or audio sub-config is not a text-only LLM.
    fallback_rank: ClassVar[int | None] = 0
    method_label = "generic"

    def claims(self, config: dict[str, Any]) -> bool:
        return bool(config.get("architectures")) and any(isinstance(config.get(key), dict) for key, _ in MODALITY_SUBCONFIGS)

    def spec_from_files(
        self,
        config: dict[str, Any],
        name: str,
        preprocessor: dict[str, Any] | None,
        processor: dict[str, Any] | None,
        video_preprocessor: dict[str, Any] | None,
    ) -> ModelSpec:
        spec = self.spec(config, name, preprocessor, processor)
        video = video_modality(
            config, materialized(config), spec.modalities, video_preprocessor, processor_class(processor, preprocessor), preprocessor
        )
        if video is None:
            return spec
        notes = [n for n in spec.notes if not n.startswith("generic family: videos")]
        how = (
            f"not counted: {video.unmodelled}"
            if video.unmodelled
            else f"{video.frame_pair_tokens} tokens per frame pair, up to {video.max_frames} frames as max_model_len allows (Qwen2-VL rule)"
            if video.frame_pair_tokens
            else f"the count of up to {GLM4V_MAX_FRAMES} frames with the most tokens that fit max_model_len beside one image, frames shrunk to fit the video pixels (GLM-4.1V rule)"
            if video.tokens_by_frames
            else f"{video.max_tokens_per_item} tokens per video (Qwen3-VL rule: 2 frames)"
        )
        notes.append(f"generic family: video ({how}; {video_note(config)})")
        encoder = spec.encoder
        if video.frame_pair_tokens is not None and encoder is not None:  # a video of n frame pairs runs n times the patches
            encoder = replace(encoder, seq_len_tokens=video.frame_pair_tokens)
        return replace(spec, modalities=(*spec.modalities, video), encoder=encoder, notes=tuple(notes))

    def with_processor_kwargs(
        self, config: dict[str, Any], files: dict[str, dict[str, Any]], kwargs: dict[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """The Qwen-VL size keys for the model_types vLLM counts with Qwen2VLProcessingInfo (flat keys reach the image
        and the video processor alike: _merge_and_resolve_mm_processor_kwargs); refused for any other model."""
        model_type = str(config.get("model_type"))
        if model_type not in QWEN_VL_IMAGES:
            return super().with_processor_kwargs(config, files, kwargs)
        if files.get("preprocessor_config.json") is None:
            raise BadInput(f"--mm-processor-kwargs: model_type {model_type!r} without its preprocessor_config.json: the size they override is unknown")
        return with_qwen_vl_sizes(files, kwargs, model_type)

    def item_size_kwargs(self, config: dict[str, Any], tokens: int) -> dict[str, Any] | None:
        """The Qwen-VL max_pixels for the model_types whose size keys with_processor_kwargs models; None for any other."""
        if str(config.get("model_type")) not in QWEN_VL_IMAGES:
            return None
        return qwen_vl_max_pixels_within(materialized(config).get("vision_config") or {}, tokens)

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        """The spec from the config and the image / audio preprocessor configs (videos: spec_from_files)."""
        architecture = str((config.get("architectures") or ["?"])[0])
        if config.get("is_encoder_decoder"):
            raise BadInput(
                f"{architecture}: is_encoder_decoder is true; the generic family plans decoder-only multimodal models "
                "(an encoder-decoder's cross-attention layout needs a dedicated family)"
            )
        full = materialized(config)
        text = full.get("text_config") if isinstance(full.get("text_config"), dict) else full
        layers = kv_layers(text, "generic")  # the KV layout: the one reader (fails closed naming the field)
        aligned = ALIGNED_STATE_CHANNELS.get(str(config.get("model_type")))
        if aligned is not None:  # the model class sizes hybrid pages from another text-config field
            layers = tuple(layer.with_aligned_channels(int(text[aligned])) for layer in layers)
        items = [self.item_tokens(modality, config, full, preprocessor, processor) for key, modality in MODALITY_SUBCONFIGS if isinstance(full.get(key), dict)]
        items = [item for item in items if item.tokens > 0 or item.unmodelled]
        counted = [item for item in items if not item.unmodelled]
        if not items:
            raise BadInput(f"{architecture}: no vision_config / audio_config the generic family can count tokens for")
        widest = max(counted, key=lambda item: item.tokens) if counted else None
        max_len, key = vllm_max_model_len(text, str(config.get("model_type", "")))  # x the RoPE factor (--hf-overrides may set one)
        supported = architecture in MULTIMODAL_ARCHITECTURES
        notes = [
            f"{self.name} family: {item.modality} tokens not counted ({item.unmodelled})"
            if item.unmodelled
            else f"{self.name} family: {item.tokens} tokens per {item.modality} ({item.method}: {item.detail})"
            for item in items
        ]
        notes.append("generic family: text config read through transformers' config class (its defaults filled, as vLLM's AutoConfig does)")
        if any(k.startswith("video") for k in (preprocessor or {})):
            notes.append("generic family: videos are not modelled; vLLM may profile a video item with more tokens than an image")
        return ModelSpec(
            name=name,
            family=self,
            architecture=architecture,
            is_encoder_decoder=False,
            config_dtype=config_dtype(config, text),
            layers=layers,
            modalities=tuple(
                Modality(item.modality, item.tokens, None, encoder_positions=item.encoder_positions, unmodelled=item.unmodelled) for item in items
            ),
            derived_max_model_len=max_len,
            max_len_key=f"text_config.{key}" if text is not full else key,
            max_source_positions=None,
            encoder_tokens_per_request=0,
            num_attention_heads=int(text["num_attention_heads"]),
            decoder=decoder_shape(text, "generic"),
            encoder=encoder_shape(widest, full, text) if widest is not None else None,
            vllm_support=VllmSupport("native", f"{architecture} is in vLLM {VLLM_VERSION}'s multimodal registry")
            if supported
            else VllmSupport("unsupported", f"{architecture} is not in vLLM {VLLM_VERSION}'s multimodal registry"),
            notes=tuple(notes),
        )

    def item_tokens(
        self, modality: str, config: dict[str, Any], full: dict[str, Any], preprocessor: dict[str, Any] | None, processor: dict[str, Any] | None
    ) -> ItemTokens:
        """Tokens of one max-size item of `modality` (a family built on this one overrides it with its model's rule)."""
        return item_tokens(modality, config, full, preprocessor, processor)

    def towers(self, config: dict[str, Any]) -> tuple[Tower, ...]:
        return TOWERS.get(str(config.get("model_type")), ())

    def unsharded_modules(self, config: dict[str, Any]) -> tuple[str, ...]:
        return UNSHARDED_MODULES.get(str(config.get("model_type")), ())

    def load_buffers(self, config: dict[str, Any], max_num_batched_tokens: int, dtype_bytes: int, towers_built: bool = True) -> tuple[ModelBuffer, ...]:
        """Qwen3-VL's deepstack_input_embeds (DEEPSTACK_MODEL_TYPES), whole on every rank, where the visual tower is
        built. Before 0.30 (0.11.0-0.21.0 read) vLLM allocated them even when --limit-mm-per-prompt 0 left the tower
        unbuilt; capacity plans that case as 0.33 builds it."""
        if str(config.get("model_type")) not in DEEPSTACK_MODEL_TYPES or not towers_built:
            return ()
        levels = len((config.get("vision_config") or {}).get("deepstack_visual_indexes") or ())
        hidden = self.text_config(config)["hidden_size"]
        return tuple(ModelBuffer(f"deepstack_input_embeds[{level}]", (max_num_batched_tokens, hidden), dtype_bytes) for level in range(levels))

    def hf_class_name(self, config: dict[str, Any]) -> str:
        """`architectures[0]` when transformers has that class, else the model_type's image/audio-text-to-text class."""
        import transformers
        from transformers.models.auto import modeling_auto

        named = str((config.get("architectures") or [""])[0])
        if hasattr(transformers, named):
            return named
        for mapping in ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES", "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES"):
            found = getattr(modeling_auto, mapping, {}).get(str(config.get("model_type")))
            if isinstance(found, str) and hasattr(transformers, found):
                return found
        return named

    # --- profiler and fake-tensor trace hooks -------------------------------------------------------------

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """The processor's tensors for one max-size item of the spec's widest modality: an image, audio, or the
        dummy video of a Qwen-VL-style tower (video_tensors)."""
        encoded = [m for m in spec.modalities if m.name != "video"]
        if len(encoded) < len(spec.modalities) and all(m.max_tokens_per_item != tokens for m in encoded):
            return video_tensors(source, device, dtype, tokens)
        modality = max(encoded, key=lambda m: m.max_tokens_per_item).name
        if modality == "audio":
            features, note = audio_features(source.config, source.preprocessor)
            return EncoderInput({"input_features": features.to(device=device, dtype=dtype)}, note)
        # transformers 5 may save the image processor's settings inside processor_config.json (LFM2.5-VL)
        nested = (source.processor or {}).get("image_processor")
        tensors, note = image_tensors(source.config, source.preprocessor or (nested if isinstance(nested, dict) else None))
        return EncoderInput(
            {k: v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device=device) for k, v in tensors.items()},
            note,
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        """The model's own get_image_features / get_audio_features on `count` copies of the item."""
        import torch

        batch = {k: torch.cat([v] * count) if count > 1 else v for k, v in item.tensors.items()}
        method = features_method(model, "audio" if "input_features" in batch else "video" if "pixel_values_videos" in batch else "image")
        accepted = inspect.signature(method).parameters
        inputs = {k: v for k, v in batch.items() if k in accepted or "kwargs" in accepted}
        if "input_features" in batch:
            inputs.update(full_clip_masks(method, tuple(batch["input_features"].shape), batch["input_features"].device))
        out = method(**inputs)
        return list(feature_rows(out).chunk(count))

    def cached_text_model(self, model: Any) -> Any:
        return language_model(model)

    def lm_head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        return model.get_output_embeddings()(hidden)


# --- tokens per item ------------------------------------------------------------------------------------


def item_tokens(
    modality: str, config: dict[str, Any], full: dict[str, Any], preprocessor: dict[str, Any] | None, processor: dict[str, Any] | None
) -> ItemTokens:
    """Tokens of one max-size item. Counts that build transformers classes (feature extractors, image processors, the
    audio tower on the meta device) are kept by their inputs: shipped for the catalog's entries (capacity/model/shipped),
    else in the disk cache."""
    if modality != "audio" and counted_by_rule(config, preprocessor):
        return image_item_tokens(config, full, preprocessor, processor)
    from capacity import disk_cache

    key = {"modality": modality, **{f"{name}_sha256": disk_cache.sha256_of(data) for name, data in (("config", config), ("preprocessor", preprocessor), ("processor", processor))}}
    return disk_cache.remembered(
        "item-tokens",
        key,
        lambda: audio_item_tokens(config, full, preprocessor) if modality == "audio" else image_item_tokens(config, full, preprocessor, processor),
        asdict,
        lambda stored: ItemTokens(**{**stored, "image_size": tuple(stored["image_size"]) if stored.get("image_size") else None}),
        shipped=shipped("item-tokens"),
    )


def counted_by_rule(config: dict[str, Any], preprocessor: dict[str, Any] | None) -> bool:
    """Image tokens counted by vLLM's own rule for the model, from its configs alone (no transformers class built)."""
    model_type = str(config.get("model_type"))
    return model_type in IDEFICS3_IMAGES or model_type in LFM2_VL_IMAGES or (model_type in QWEN_VL_IMAGES and bool(preprocessor))


def image_item_tokens(config: dict[str, Any], full: dict[str, Any], preprocessor: dict[str, Any] | None, processor: dict[str, Any] | None) -> ItemTokens:
    vision = full.get("vision_config") or {}
    if str(config.get("model_type")) in IDEFICS3_IMAGES:  # its HF processor counts with the tokenizer; vLLM's rule does not
        return idefics3_image_tokens(full, preprocessor, processor)
    if str(config.get("model_type")) in LFM2_VL_IMAGES:  # vLLM counts with its own rule, the processor needs the tokenizer
        return lfm2_vl_image_tokens(preprocessor, processor)
    if str(config.get("model_type")) in QWEN_VL_IMAGES and preprocessor:
        counted = qwen_vl_image_tokens(vision, preprocessor)
        return counted if counted is not None else image_fallback({}, vision, reason=NO_PIXEL_BOUNDS)
    if not preprocessor:  # the processor's class defaults are not the model's (LLaVA's crop 224 vs its 336 tower)
        return image_fallback(config, vision, reason="no preprocessor_config.json: the model's image processor settings are unknown")
    try:
        image_proc = image_processor(config, preprocessor)
        proc = headless_processor(config, full, image_proc, processor, preprocessor)
        best, best_shape = 0, (0, 0)
        for shape in candidate_sizes(image_proc, vision):
            counted = proc._get_num_multimodal_tokens(image_sizes=[list(shape)])
            tokens = int((getattr(counted, "num_image_tokens", None) or [0])[0])
            if tokens > best:
                best, best_shape = tokens, shape
        if best <= 0:
            raise LookupError("the processor counted no image tokens")
        built_from = " + ".join(n for n, d in (("preprocessor_config.json", preprocessor), ("processor_config.json", processor)) if d)
        return ItemTokens(
            "image",
            best,
            "processor",
            f"{type(proc).__name__}._get_num_multimodal_tokens with {type(image_proc).__name__} ({built_from}), most tokens at {best_shape[0]}x{best_shape[1]}",
        )
    except Exception as exc:  # no class, a backend missing, a processor that needs its tokenizer: the formula
        return image_fallback(config, vision, reason=f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}")


def image_fallback(config: dict[str, Any], vision: dict[str, Any], *, reason: str) -> ItemTokens:
    """(image_size // patch_size)^2 patches, merged by the config's spatial merge / downsample factor."""
    if isinstance(config.get("mm_tokens_per_image"), int):
        return ItemTokens("image", int(config["mm_tokens_per_image"]), "fallback formula", f"mm_tokens_per_image ({reason})")
    dynamic = dynamic_resizing(config)
    if dynamic:  # refused where vLLM budgets images (serving.refuse_unmodelled), not under --language-model-only or image=0
        why = f"{dynamic}, so the image tokens depend on its settings: give the model's preprocessor_config.json ({reason})"
        return ItemTokens("image", 0, "fallback formula", "", unmodelled=why)
    size, patch = vision.get("image_size"), vision.get("patch_size")
    size = max(size) if isinstance(size, (list, tuple)) and size else size  # [448, 448]
    patch = max(patch) if isinstance(patch, (list, tuple)) and patch else patch
    if not (isinstance(size, int) and isinstance(patch, int) and patch > 0):
        raise BadInput(f"vision_config lacks image_size / patch_size, which the generic family's image fallback needs ({reason})")
    patches = (size // patch) ** 2
    merge = vision.get("spatial_merge_size") or config.get("spatial_merge_size")
    ratio = config.get("downsample_ratio")
    scale = config.get("scale_factor")
    if isinstance(merge, int) and merge > 1:
        tokens, how = patches // (merge * merge), f"/ spatial_merge_size {merge}^2"
    elif isinstance(ratio, (int, float)) and 0 < ratio < 1:
        tokens, how = int(patches * ratio * ratio), f"x downsample_ratio {ratio}^2"
    elif isinstance(scale, int) and scale > 1:
        tokens, how = patches // (scale * scale), f"/ scale_factor {scale}^2"
    else:
        tokens, how = patches, "(no merge)"
    return ItemTokens("image", tokens, "fallback formula", f"(image_size {size} // patch_size {patch})^2 {how}, one tile ({reason})")


# Image-processor attributes that make the tokens of an image depend on its settings: tiles, pinpoints, pixel caps.
DYNAMIC_IMAGE_SETTINGS = ("image_grid_pinpoints", "do_image_splitting", "crop_to_patches", "max_patches", "max_image_size", "max_pixels", "max_image_tiles")


def dynamic_resizing(config: dict[str, Any]) -> str | None:
    """Why the one-tile formula cannot stand in for the model's image processor, or None when it resizes to one
    fixed size (read from the processor class's defaults, which say how it works, not the model's numbers)."""
    try:
        proc = image_processor(config, None)
    except Exception as exc:
        return f"no image processor class can be built for it ({type(exc).__name__})"
    name = type(proc).__name__
    for attr in DYNAMIC_IMAGE_SETTINGS:
        if getattr(proc, attr, None):
            return f"its {name} tiles or caps images by {attr}"
    size = getattr(proc, "size", None)
    if size is not None and (getattr(size, "longest_edge", None) if not isinstance(size, dict) else size.get("longest_edge")):
        return f"its {name} resizes images by size.longest_edge"
    return None


def audio_features(config: dict[str, Any], preprocessor: dict[str, Any] | None) -> tuple[Any, str]:
    """The feature extractor on its longest clip (chunk_length seconds of noise): the model's input features."""
    import numpy as np

    extractor = feature_extractor(config, preprocessor)
    defaults = "" if preprocessor else " (class defaults, feature_size = num_mel_bins: no preprocessor_config.json)"
    rate = int(extractor.sampling_rate)
    seconds = int(getattr(extractor, "chunk_length", 30) or 30)
    audio = np.random.default_rng(0).standard_normal(seconds * rate).astype(np.float32) * 0.1
    feats = extractor(audio, sampling_rate=rate, return_tensors="pt")
    tensor = feats["input_features"]
    return tensor, f"{type(extractor).__name__}{defaults} on {seconds} s of {rate} Hz audio -> {tuple(tensor.shape[1:])} features"


def audio_item_tokens(config: dict[str, Any], full: dict[str, Any], preprocessor: dict[str, Any] | None) -> ItemTokens:
    try:
        features, note = audio_features(config, preprocessor)
        rows = meta_audio_rows(json.dumps(config, sort_keys=True), tuple(features.shape))
        return ItemTokens("audio", rows, "model", f"{note}; the model's audio path (get_audio_features, else its audio tower) on the meta device emits {rows} embeddings")
    except Exception as exc:  # no extractor, a backend missing, a tower that reads values: the formula
        audio = full.get("audio_config") or {}
        positions = audio.get("max_source_positions")
        if not isinstance(positions, int):
            raise BadInput(f"audio_config lacks max_source_positions, which the generic family's audio fallback needs ({type(exc).__name__}: {exc})") from exc
        return ItemTokens(
            "audio",
            positions,
            "fallback formula",
            f"audio_config.max_source_positions (encoder positions of one clip, before any pooling or projector downsampling: an upper bound) "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]})",
        )


@lru_cache(maxsize=16)
def meta_audio_rows(config_json: str, shape: tuple[int, ...]) -> int:
    """Embeddings the model's own audio path emits for one clip: get_audio_features on the meta device."""
    import torch

    from capacity.model.family import family_named

    model = family_named("generic").build_module(json.loads(config_json), device="meta", dtype="float32")
    method = features_method(model, "audio")
    with torch.inference_mode():
        out = method(input_features=torch.zeros(shape, device="meta"), **full_clip_masks(method, shape))
    return int(feature_rows(out).shape[0])


def full_clip_masks(method: Any, shape: tuple[int, ...], device: Any = "meta") -> dict[str, Any]:
    """Masks a get_audio_features requires (AudioFlamingo3's input_features_mask): every frame of the clip is real."""
    import torch

    required = [
        name
        for name, param in inspect.signature(method).parameters.items()
        if "mask" in name and param.default is inspect.Parameter.empty and param.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    return {name: torch.ones(shape[0], shape[-1], dtype=torch.bool, device=device) for name in required}


def features_method(model: Any, modality: str) -> Any:
    """The model's own get_<modality>_features; a model without one (Qwen2-Audio) runs its tower (pooling included)."""
    name = f"get_{modality}_features"
    if hasattr(model, name):
        return getattr(model, name)
    inner = getattr(model, "model", model)
    for owner in (model, inner):
        tower = getattr(owner, "audio_tower" if modality == "audio" else "vision_tower", None)
        if tower is not None:
            return tower
    raise NotImplementedError(f"{type(model).__name__} has neither {name} nor a {modality} tower")


def image_tensors(config: dict[str, Any], preprocessor: dict[str, Any] | None) -> tuple[dict[str, Any], str]:
    """The image processor's tensors for the most-tokens image (a mid-grey picture of that shape)."""
    import numpy as np

    if not preprocessor:
        raise NotImplementedError("no preprocessor_config.json: the generic trace cannot run the model's image processor")
    full = materialized(config)
    counted = image_item_tokens(config, full, preprocessor, None)
    image_proc = image_processor(config, preprocessor)
    shapes = candidate_sizes(image_proc, full.get("vision_config") or {})
    height, width = shapes[-1]
    if counted.image_size is not None:
        height, width = counted.image_size
    elif "most tokens at " in counted.detail:
        height, width = (int(v) for v in counted.detail.rsplit("most tokens at ", 1)[1].split("x"))
    picture = np.full((height, width, 3), 128, dtype=np.uint8)
    out = image_proc(images=[picture], return_tensors="pt")
    tensors = {k: v for k, v in out.items() if hasattr(v, "is_floating_point")}
    return tensors, f"{type(image_proc).__name__} on a {height}x{width} image -> " + ", ".join(f"{k} {tuple(v.shape)}" for k, v in tensors.items())


# --- videos ---------------------------------------------------------------------------------------------

VIDEO_TOKEN_KEYS = ("video_token_id", "video_token_index")


def takes_videos(config: dict[str, Any], video_preprocessor: dict[str, Any] | None) -> bool:
    """A video_preprocessor_config.json, or a video token in config.json's top level."""
    return video_preprocessor is not None or any(config.get(key) is not None for key in VIDEO_TOKEN_KEYS)


def video_note(config: dict[str, Any]) -> str:
    return f"model_type {config.get('model_type')!r} takes videos (video_preprocessor_config.json or {' / '.join(VIDEO_TOKEN_KEYS)})"


def video_modality(
    config: dict[str, Any],
    full: dict[str, Any],
    modalities: tuple[Modality, ...],
    video_preprocessor: dict[str, Any] | None,
    processor_cls: str | None = None,
    preprocessor: dict[str, Any] | None = None,
) -> Modality | None:
    """The video modality vLLM budgets for this model: counted for the Qwen2-VL, Qwen3-VL and GLM-4.1V rules, else
    marked unmodelled (planning is then refused unless --limit-mm-per-prompt video=0); None when it takes no videos."""
    if not takes_videos(config, video_preprocessor):
        return None
    model_type = str(config.get("model_type"))
    vision = full.get("vision_config") or {}
    image = next((m for m in modalities if m.name == "image"), None)
    try:
        if model_type in QWEN3_VL_VIDEO:
            tokens, patches = qwen3_vl_video_tokens(vision, video_preprocessor)
            return Modality("video", tokens, None, encoder_positions=patches)
        if model_type in QWEN2_VL_VIDEO and image is not None and not image.unmodelled:
            # get_num_video_tokens at the largest image's size: ceil(frames / temporal_patch_size 2) x the image's tokens
            if vision.get("temporal_patch_size") != 2:
                raise LookupError(f"vision_config.temporal_patch_size {vision.get('temporal_patch_size')!r} (the frame-pair rule needs 2)")
            return Modality("video", image.max_tokens_per_item, None, frame_pair_tokens=image.max_tokens_per_item, max_frames=MAX_FRAMES_PER_VIDEO)
        if model_type in GLM4V_VIDEO:
            if processor_cls != "Glm4vProcessor":  # get_mm_max_tokens_per_item's formula counts timestamp tokens by the tokenizer
                raise LookupError(f"processor_class {processor_cls!r}: vLLM counts its videos' timestamp tokens with the tokenizer unless it is Glm4vProcessor")
            by_frames = glm4v_video_tokens_by_frames(vision, preprocessor, video_preprocessor)
            return Modality("video", max(by_frames), 1, tokens_by_frames=by_frames)  # get_supported_mm_limits: video 1
    except LookupError as exc:
        return Modality("video", 0, None, unmodelled=f"the generic family cannot count its video tokens ({exc})")
    return Modality("video", 0, None, unmodelled=f"the generic family cannot count video tokens for model_type {model_type!r}")


# --- the model -----------------------------------------------------------------------------------------


def feature_rows(out: Any) -> torch.Tensor:
    """get_*_features' embeddings as one (tokens, hidden) tensor, whatever container this transformers returns."""
    import torch

    if not isinstance(out, (torch.Tensor, list, tuple)):
        pooled = getattr(out, "pooler_output", None)
        out = pooled if pooled is not None else out.last_hidden_state
    if isinstance(out, (list, tuple)):
        out = torch.cat([o.reshape(-1, o.shape[-1]) for o in out])
    return out.reshape(-1, out.shape[-1])


def language_model(model: Any) -> Any:
    inner = getattr(model, "model", model)
    for attr in ("language_model", "text_model"):
        if hasattr(inner, attr):
            return getattr(inner, attr)
    raise NotImplementedError(f"{type(model).__name__} has no language_model the generic trace can run")


def encoder_shape(item: ItemTokens, full: dict[str, Any], text: dict[str, Any]) -> EncoderShape:
    """The widest modality's encoder, for the activation formula: its sub-config's width, MLP and depth."""
    key = "audio_config" if item.modality == "audio" else "vision_config"
    sub = full.get(key) or {}
    hidden = _first(sub, key, ("embed_dim", "hidden_size", "d_model", "width"))  # Qwen2-VL: embed_dim is the tower, hidden_size its output
    ratio = sub.get("mlp_ratio")
    ffn = int(hidden * ratio) if isinstance(ratio, (int, float)) and ratio > 0 else _first(sub, key, ("intermediate_size", "encoder_ffn_dim", "mlp_dim"))
    depth = _first(sub, key, ("num_hidden_layers", "encoder_layers", "depth", "num_layers"))
    merge = sub.get("spatial_merge_size")
    ratio = full.get("downsample_ratio")
    positions = sub.get("max_source_positions")
    if item.modality == "audio" and isinstance(positions, int):  # the audio tower runs on its positions, then downsamples
        seq_len = positions
    elif isinstance(merge, int) and merge > 1:  # the tower runs on the patches before its merge
        seq_len = item.tokens * merge * merge
    elif isinstance(ratio, (int, float)) and 0 < ratio < 1:
        seq_len = round(item.tokens / (ratio * ratio))
    elif isinstance(full.get("scale_factor"), int) and full["scale_factor"] > 1:  # Idefics3: pixel shuffle by scale_factor^2
        seq_len = item.tokens * full["scale_factor"] ** 2
    elif isinstance(full.get("downsample_factor"), int) and full["downsample_factor"] > 1:  # LFM2-VL: pixel unshuffle
        seq_len = item.tokens * full["downsample_factor"] ** 2
    else:
        seq_len = item.tokens
    return EncoderShape(
        seq_len=seq_len,
        hidden_size=hidden,
        ffn_size=ffn,
        num_layers=depth,
        output_hidden_size=int(text["hidden_size"]),
    )


def _first(sub: dict[str, Any], where: str, keys: tuple[str, ...]) -> int:
    for key in keys:
        value = sub.get(key)
        if isinstance(value, int) and value > 0:
            return value
    raise BadInput(f"{where} has none of {', '.join(keys)}, which the generic family's encoder formula needs")


FAMILY = GenericFamily()
