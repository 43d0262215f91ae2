"""InternVL (InternVLChatModel, model_type `internvl_chat`): Hub remote code that vLLM 0.33 serves natively.

vLLM's own implementation (vllm/model_executor/models/internvl.py, intern_vit.py, and the processor in
vllm/transformers_utils/processors/internvl.py) is what this family reads; transformers has no class for the Hub's
config, so the spec and the weights are read from vLLM's code; the profiler and the fake-tensor trace run transformers'
InternVLForConditionalGeneration (the -hf port of the same modules) built from a config translated from the Hub's
(`hf_config`), whose parameters are exactly those listed here (tests/model/families):
- images: 448 px tiles (`vision_config.image_size`), up to `max_dynamic_patch` of them plus a thumbnail, each
  `(image_size // patch_size)^2 x downsample_ratio^2` tokens after the pixel shuffle (256 for InternVL3);
- videos (when the LLM's tokenizer has a video context token: Qwen2/Qwen3/GPT-OSS LLMs): one tile per frame, as many
  frames as the sequence holds after one largest image (`get_num_frames_with_most_features`);
- weights: the InternViT tower, the `mlp1` projector (LayerNorm, Linear, GELU, Linear; plain nn modules in vLLM,
  whole on every rank) and the LLM (`llm_config`, built on the meta device through transformers, which has its class);
- the text side from `llm_config` through the one KV reader (`capacity/kv/text_config.py`), as vLLM reads it (its
  `_CONFIG_ATTRS_MAPPING` maps `llm_config` to `text_config`), the RoPE factor applied to max_model_len as vLLM does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from capacity.errors import BadInput
from capacity.kv.text_config import kv_layers
from capacity.model.families.common import config_dtype, need, sub
from capacity.model.families.decoder_only import decoder_shape
from capacity.model.family import EncoderInput, Family, Tower
from capacity.model.spec import EncoderShape, Modality, ModelSpec, VllmSupport, scaled_max_model_len

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from capacity.source.resolve import ModelSource

WHERE = "internvl_chat"
# InternVLProcessingInfo.ctx_video_token: the LLM types whose tokenizer names a video context token.
VIDEO_CONTEXT_TOKENS = {"qwen2": "<|video_pad|>", "qwen3": "<|video_pad|>", "qwen3_moe": "<|video_pad|>", "gpt_oss": "<|reserved_200000|>"}
NORM_TYPES = ("layer_norm", "rms_norm")  # intern_vit.py NORM2FN
# --mm-processor-kwargs vLLM's InternVLChatImageProcessor takes (InternVLProcessingInfo.get_image_processor setdefaults
# them from config.json; image_size is left out: it would change the tiles but not InternViT's position table)
TILING_KWARGS: dict[str, type] = {"min_dynamic_patch": int, "max_dynamic_patch": int, "dynamic_image_size": bool, "use_thumbnail": bool}
# where with_processor_kwargs leaves them in the processor config the spec reads
MM_KWARGS_KEY = "mm_processor_kwargs"


def llm_config(config: dict[str, Any]) -> dict[str, Any]:
    """`llm_config` with transformers' defaults filled, as the Hub's InternVLChatConfig builds it (`Qwen2Config(**llm_config)`)."""
    from capacity.model.hf_config import materialized

    llm = sub(config, "llm_config", WHERE)
    if not isinstance(llm.get("model_type"), str):
        raise BadInput("config.json (internvl_chat) llm_config lacks 'model_type', which names the LLM vLLM builds")
    try:
        return materialized(llm)
    except BadInput as exc:
        raise BadInput(f"config.json (internvl_chat) llm_config.model_type {llm['model_type']!r}: {exc}") from exc


@dataclass(frozen=True)
class Tiling:
    """How InternVL cuts an image into tiles, from config.json (vLLM InternVLProcessingInfo.get_image_processor)."""

    image_size: int  # vision_config.image_size: the tile side the processor resizes to
    patch_size: int
    downsample_ratio: float
    min_dynamic_patch: int
    max_dynamic_patch: int
    dynamic_image_size: bool
    use_thumbnail: bool

    @classmethod
    def from_config(cls, config: dict[str, Any], vision: dict[str, Any], kwargs: dict[str, Any] | None = None) -> Tiling:
        """The tiling of config.json, with --mm-processor-kwargs over it (vLLM: kwargs.setdefault(key, config.key))."""
        config = {**config, **(kwargs or {})}
        image_size = need(vision, "image_size", WHERE)
        forced = config.get("force_image_size")
        if forced is not None and forced != image_size:
            # internvl.py sizes num_image_token from force_image_size, the processor tiles at vision_config.image_size
            raise BadInput(
                f"config.json (internvl_chat) force_image_size {forced} differs from vision_config.image_size {image_size}: vLLM's token count and its tiles disagree; not modelled"
            )
        ratio = need(config, "downsample_ratio", WHERE)
        if not (0 < ratio <= 1) or abs(1 / ratio - round(1 / ratio)) > 1e-9:
            raise BadInput(f"config.json (internvl_chat) downsample_ratio {ratio}: the pixel shuffle needs 1 / downsample_ratio to be an integer")
        dynamic = config.get("dynamic_image_size")
        if not isinstance(dynamic, bool):
            raise BadInput("config.json (internvl_chat) lacks 'dynamic_image_size' (true or false), which decides the tiling")
        thumbnail = config.get("use_thumbnail")
        if not isinstance(thumbnail, bool):
            raise BadInput("config.json (internvl_chat) lacks 'use_thumbnail' (true or false), which decides the tiling")
        tiling = cls(
            image_size=image_size,
            patch_size=need(vision, "patch_size", WHERE),
            downsample_ratio=float(ratio),
            min_dynamic_patch=need(config, "min_dynamic_patch", WHERE),
            max_dynamic_patch=need(config, "max_dynamic_patch", WHERE),
            dynamic_image_size=dynamic,
            use_thumbnail=thumbnail,
        )
        if tiling.dynamic_image_size and tiling.min_dynamic_patch > tiling.max_dynamic_patch:
            # get_internvl_target_ratios is then empty: get_image_size_with_most_features raises at startup
            raise BadInput(
                f"internvl_chat: min_dynamic_patch {tiling.min_dynamic_patch} exceeds max_dynamic_patch {tiling.max_dynamic_patch}: vLLM finds no "
                "tile grid (\"Cannot have a largest feature size of 0!\") and fails at startup"
            )
        return tiling

    @property
    def patches_per_tile(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def positions_per_tile(self) -> int:
        """Tokens inside InternViT per tile: the patches plus the class token (1025 at 448 / 14)."""
        return self.patches_per_tile + 1

    @property
    def tokens_per_tile(self) -> int:
        """vLLM image_seq_length = int((image_size // patch_size)^2 x downsample_ratio^2): 256 at 448 / 14 / 0.5."""
        return int(self.patches_per_tile * self.downsample_ratio**2)

    @property
    def shuffle_factor(self) -> int:
        """int(1 / downsample_ratio): mlp1's input is vit_hidden x this^2 wide."""
        return round(1 / self.downsample_ratio)

    @property
    def max_tiles(self) -> int:
        """Tiles of the image with the most features (get_image_size_with_most_features): the largest grid the
        target ratios allow (max_dynamic_patch tiles when dynamic, else 1), plus the thumbnail when the grid has
        more than one tile (calculate_internvl_targets)."""
        grid = self.max_dynamic_patch if self.dynamic_image_size else 1
        return grid + (1 if self.use_thumbnail and grid != 1 else 0)


def vision_layers_built(config: dict[str, Any], vision: dict[str, Any]) -> int:
    """InternVisionModel's layers: vLLM builds up to the feature layer only (_init_vision_model, select_layer)."""
    depth = need(vision, "num_hidden_layers", WHERE)
    select = config.get("select_layer", -1)
    if not isinstance(select, int) or isinstance(select, bool):
        raise BadInput(f"config.json (internvl_chat) select_layer {select!r} is not an integer")
    built = depth + select + 1 if select < 0 else select + 1
    if not 1 <= built <= depth:
        raise BadInput(f"config.json (internvl_chat) select_layer {select} selects no layer of the {depth}-layer vision tower")
    return built


def vision_tensors(config: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """InternVisionModel's parameters as vLLM allocates them (intern_vit.py), under the checkpoint's names."""
    vision = sub(config, "vision_config", WHERE)
    d = need(vision, "hidden_size", WHERE)
    ffn = need(vision, "intermediate_size", WHERE)
    patch = need(vision, "patch_size", WHERE)
    channels = vision.get("num_channels", 3)
    norm_type = vision.get("norm_type", "rms_norm")
    if norm_type not in NORM_TYPES:
        raise BadInput(f"config.json (internvl_chat) vision_config.norm_type {norm_type!r} is not one of {', '.join(NORM_TYPES)}")
    if vision.get("use_moe"):
        raise BadInput("config.json (internvl_chat) vision_config.use_moe is true: vLLM's InternViT has no MoE layers; not modelled")
    tiling = Tiling.from_config(config, vision)
    p = "vision_model"
    out: list[tuple[str, tuple[int, ...]]] = [
        (f"{p}.embeddings.class_embedding", (1, 1, d)),
        (f"{p}.embeddings.patch_embedding.weight", (d, channels, patch, patch)),  # Conv2dLayer(bias=True)
        (f"{p}.embeddings.patch_embedding.bias", (d,)),
        (f"{p}.embeddings.position_embedding", (1, tiling.positions_per_tile, d)),
    ]
    norm_leaves = ("weight", "bias") if norm_type == "layer_norm" else ("weight",)  # nn.LayerNorm / RMSNorm
    for i in range(vision_layers_built(config, vision)):
        layer = f"{p}.encoder.layers.{i}"
        out.append((f"{layer}.attn.qkv.weight", (3 * d, d)))  # QKVParallelLinear(bias=qkv_bias)
        if vision.get("qkv_bias", True):
            out.append((f"{layer}.attn.qkv.bias", (3 * d,)))
        if vision.get("qk_normalization", False):
            out += [(f"{layer}.attn.q_norm.weight", (d,)), (f"{layer}.attn.k_norm.weight", (d,))]  # RMSNorm(dummy_dim = d)
        out += [
            (f"{layer}.attn.proj.weight", (d, d)),  # RowParallelLinear, bias=True
            (f"{layer}.attn.proj.bias", (d,)),
            (f"{layer}.mlp.fc1.weight", (ffn, d)),
            (f"{layer}.mlp.fc1.bias", (ffn,)),
            (f"{layer}.mlp.fc2.weight", (d, ffn)),
            (f"{layer}.mlp.fc2.bias", (d,)),
        ]
        out += [(f"{layer}.{norm}.{leaf}", (d,)) for norm in ("norm1", "norm2") for leaf in norm_leaves]
        out += [(f"{layer}.ls1", (d,)), (f"{layer}.ls2", (d,))]
    return out


def projector_tensors(config: dict[str, Any], llm_hidden: int) -> list[tuple[str, tuple[int, ...]]]:
    """`mlp1` (internvl.py _init_mlp1): LayerNorm(vit x s^2), Linear(vit x s^2 -> llm), GELU, Linear(llm -> llm)."""
    vision = sub(config, "vision_config", WHERE)
    width = need(vision, "hidden_size", WHERE) * Tiling.from_config(config, vision).shuffle_factor ** 2
    return [
        ("mlp1.0.weight", (width,)),
        ("mlp1.0.bias", (width,)),
        ("mlp1.1.weight", (llm_hidden, width)),
        ("mlp1.1.bias", (llm_hidden,)),
        ("mlp1.3.weight", (llm_hidden, llm_hidden)),
        ("mlp1.3.bias", (llm_hidden,)),
    ]


class InternVLChatFamily(Family):
    name = "internvl_chat"
    model_types = ("internvl_chat",)
    hf_class = "InternVLForConditionalGeneration"  # transformers' port of InternViT + mlp1 + the LLM (profiler, trace)
    parameters_source: ClassVar[str] = (
        "listed from config.json as vLLM's InternVLChatModel allocates them (InternViT and mlp1 by hand from intern_vit.py / "
        "internvl.py; the LLM built from llm_config on the meta device)"
    )
    # internvl.py _init_mlp1: nn.LayerNorm / nn.Linear, not vLLM's parallel layers: whole on every rank.
    vllm_unsharded_modules: ClassVar[tuple[str, ...]] = (r"^mlp1\.",)
    # H200 encoder phase vs the fake trace in bench/results/h200-catalog-2026-12-01: 6,956.5 MiB measured, 6,444.0
    # traced (x 1.080); the InternViT patch convolution's and attention's workspaces, as for Florence-2 and Nemotron-Parse
    trace_undercount_percent: ClassVar[int | None] = 8

    def towers(self, config: dict[str, Any]) -> tuple[Tower, ...]:
        """internvl.py InternVLChatModel.__init__: vision_model and mlp1 under _mark_tower_model({image, video})."""
        return (Tower(("image", "video"), ("vision_model", "mlp1")),)

    def spec(self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None) -> ModelSpec:
        if config.get("quantization_config") or (config.get("llm_config") or {}).get("quantization_config"):
            raise BadInput(
                "config.json (internvl_chat) has a quantization_config: quantized InternVL checkpoints are not modelled (vLLM leaves the vision tower unquantized)"
            )
        vision = sub(config, "vision_config", WHERE)
        llm = llm_config(config)
        kwargs = (processor or {}).get(MM_KWARGS_KEY) or {}
        tiling = Tiling.from_config(config, vision, kwargs)
        vision_tensors(config)  # its fields checked now, not when the weights are counted
        tile = tiling.tokens_per_tile
        image = tiling.max_tiles * tile
        llm_type = str(llm.get("model_type"))
        modalities = [Modality("image", image, None)]
        notes = [
            f"internvl_chat: {image} tokens per image = {tiling.max_tiles} tiles x {tile} ((image_size {tiling.image_size} // patch "
            f"{tiling.patch_size})^2 x downsample_ratio {tiling.downsample_ratio}^2); "
            + (f"{tiling.max_tiles - tiling.use_thumbnail} tiles" + (" + thumbnail" if tiling.use_thumbnail else "") if tiling.max_tiles > 1 else "one tile")
            + (f"; --mm-processor-kwargs {json.dumps(kwargs, sort_keys=True)} applied over config.json's tiling" if kwargs else ""),
        ]
        if llm_type in VIDEO_CONTEXT_TOKENS:
            modalities.append(Modality("video", tile, None, frame_tokens=tile))
            notes.append(
                f"internvl_chat: videos of one {tile}-token tile per frame, as many frames as max_model_len holds after one largest image "
                f"(vLLM get_num_frames_with_most_features); assumes the tokenizer has {VIDEO_CONTEXT_TOKENS[llm_type]} as vLLM checks "
                "(Qwen2.5/Qwen3 tokenizers do); --limit-mm-per-prompt video=0 plans without videos"
            )
        max_len, key, factor = scaled_max_model_len(llm)
        if factor != 1.0:
            notes.append(
                f"internvl_chat: max_model_len {max_len} (llm_config.{key}), as vLLM scales it; vLLM also caps it by "
                "tokenizer_config.json's model_max_length (before the factor), which capacity does not read"
            )
        return ModelSpec(
            name=name,
            family=self,
            architecture=str((config.get("architectures") or ["InternVLChatModel"])[0]),
            is_encoder_decoder=False,
            config_dtype=config_dtype(config, llm),
            layers=kv_layers(llm, "internvl_chat llm_config"),
            modalities=tuple(modalities),
            derived_max_model_len=max_len,
            max_len_key=f"llm_config.{key}",
            max_source_positions=None,
            encoder_tokens_per_request=0,
            num_attention_heads=need(llm, "num_attention_heads", WHERE),
            decoder=decoder_shape(llm, "internvl_chat llm_config"),
            encoder=EncoderShape(
                seq_len=tiling.positions_per_tile,  # per tile: patches + class token
                hidden_size=need(vision, "hidden_size", WHERE),
                ffn_size=need(vision, "intermediate_size", WHERE),
                num_layers=vision_layers_built(config, vision),
                output_hidden_size=need(llm, "hidden_size", WHERE),
                seq_len_tokens=tile,  # an item of n x 256 tokens is n tiles of 1025 positions
            ),
            vllm_support=VllmSupport("native", "InternVLChatModel (vllm/model_executor/models/internvl.py, intern_vit.py)"),
            notes=tuple(notes),
        )

    def item_size_kwargs(self, config: dict[str, Any], tokens: int) -> dict[str, Any] | None:
        """max_dynamic_patch (and min_dynamic_patch no higher): the largest grid whose tiles, the thumbnail counted
        (Tiling.max_tiles), hold at most `tokens` tokens at tokens_per_tile each; None when the image is one tile
        already (dynamic_image_size off) or not one tile fits."""
        tiling = Tiling.from_config(config, sub(config, "vision_config", WHERE))
        tiles = tokens // tiling.tokens_per_tile
        if not tiling.dynamic_image_size or tiles < 1:
            return None
        grid = (tiles - 1 if tiles > 2 else 1) if tiling.use_thumbnail else tiles  # a grid of 2+ tiles adds the thumbnail
        return {"min_dynamic_patch": min(tiling.min_dynamic_patch, grid), "max_dynamic_patch": grid}

    def with_processor_kwargs(self, config: dict[str, Any], files: dict[str, dict[str, Any]], kwargs: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The tiling keys vLLM's InternVLChatImageProcessor takes (min/max_dynamic_patch, dynamic_image_size, use_thumbnail)
        set the largest image's tiles; the processor config carries them to the spec. Refused where vLLM fails: any
        other key (InternVLChatImageProcessor.__init__ takes no other), and every key when vLLM also builds the video
        processor (an LLM with a video context token): InternVLChatVideoProcessor takes only image_size and raises
        TypeError on the merged kwargs at startup (bench/results/vllm-mm-kwargs-reference-2026-12-01)."""
        unknown = sorted(set(kwargs) - set(TILING_KWARGS))
        if unknown:
            raise BadInput(
                f"--mm-processor-kwargs {', '.join(unknown)}: not modelled for InternVL (capacity models {', '.join(TILING_KWARGS)}; "
                "vLLM's InternVLChatImageProcessor takes no other key and fails at startup); plan without it"
            )
        llm_type = str(sub(config, "llm_config", WHERE).get("model_type"))
        if llm_type in VIDEO_CONTEXT_TOKENS:
            raise BadInput(
                f"--mm-processor-kwargs {', '.join(sorted(kwargs))}: vLLM 0.33 fails at startup for this InternVL: its {llm_type} LLM has a video "
                f"token ({VIDEO_CONTEXT_TOKENS[llm_type]}), so vLLM builds InternVLChatVideoProcessor with the same kwargs and it takes none of them "
                "(TypeError: unexpected keyword argument); set the tiling in config.json (or vLLM's --hf-overrides) instead"
            )
        for key, value in kwargs.items():
            kind = TILING_KWARGS[key]
            if kind is bool and not isinstance(value, bool):
                raise BadInput(f"--mm-processor-kwargs {key}: {value!r} is not true or false (vLLM would take any non-empty value as true)")
            if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise BadInput(f"--mm-processor-kwargs {key}: {value!r} is not a positive integer number of tiles")
        Tiling.from_config(config, sub(config, "vision_config", WHERE), kwargs)  # refused here when vLLM finds no grid
        processor = {**(files.get("processor_config.json") or {}), MM_KWARGS_KEY: dict(kwargs)}
        return {**files, "processor_config.json": processor}

    def parameter_shapes(self, config: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """InternViT + mlp1 listed from the config; the LLM's parameters from its class built on the meta device."""
        from capacity.model.family import family_named

        llm = sub(config, "llm_config", WHERE)
        text = family_named("decoder_only").parameter_shapes(llm)
        return (*vision_tensors(config), *projector_tensors(config, need(llm, "hidden_size", WHERE)), *((f"language_model.{n}", s) for n, s in text))

    def hf_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The Hub's config as transformers' InternVLConfig: InternViT's fields under their -hf names (built up to the
        feature layer, as vLLM builds it; no final norm: use_mean_pooling leaves it an identity), the LLM as text_config
        with the top-level tie_word_embeddings vLLM reads, the pixel shuffle's downsample_ratio, the last layer's
        patch features (select_layer -1, the class token dropped)."""
        vision = sub(config, "vision_config", WHERE)
        tied = bool(config.get("tie_word_embeddings", False))
        return {
            "model_type": "internvl",
            "tie_word_embeddings": tied,
            "vision_config": {
                "model_type": "internvl_vision",
                "hidden_size": need(vision, "hidden_size", WHERE),
                "num_hidden_layers": vision_layers_built(config, vision),
                "num_attention_heads": need(vision, "num_attention_heads", WHERE),
                "intermediate_size": need(vision, "intermediate_size", WHERE),
                "hidden_act": vision.get("hidden_act", "gelu"),
                "layer_norm_eps": vision.get("layer_norm_eps", 1e-6),
                "image_size": [need(vision, "image_size", WHERE)] * 2,
                "patch_size": [need(vision, "patch_size", WHERE)] * 2,
                "num_channels": vision.get("num_channels", 3),
                "norm_type": vision.get("norm_type", "rms_norm"),
                "use_qk_norm": bool(vision.get("qk_normalization", False)),
                "attention_bias": bool(vision.get("qkv_bias", True)),
                "use_absolute_position_embeddings": True,
                "use_mean_pooling": True,
            },
            "text_config": {**sub(config, "llm_config", WHERE), "tie_word_embeddings": tied},
            "downsample_ratio": need(config, "downsample_ratio", WHERE),
            "projector_hidden_act": "gelu",
            "vision_feature_layer": -1,
            "vision_feature_select_strategy": "default",
        }

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """The item's tiles as InternVLChatImageProcessor hands them over: tokens / tokens_per_tile tiles of image_size
        px (the largest image's grid and thumbnail; a video's frames, one tile each)."""
        import torch

        vision = sub(source.config, "vision_config", WHERE)
        tiling = Tiling.from_config(source.config, vision, (source.processor or {}).get(MM_KWARGS_KEY) or {})
        tiles = max(1, tokens // tiling.tokens_per_tile)
        side = tiling.image_size
        pixels = torch.zeros(tiles, vision.get("num_channels", 3), side, side, device=device, dtype=dtype)
        return EncoderInput({"pixel_values": pixels}, f"processed-shape tiles ({tiles}, 3, {side}, {side}) x {tiling.tokens_per_tile} tokens each")

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        """InternViT on every tile of `count` items, pixel-shuffled and projected by mlp1 (get_image_features)."""
        import torch

        pixels = item.tensors["pixel_values"]
        tiles = pixels.shape[0]
        out = model.model.get_image_features(
            pixel_values=torch.cat([pixels] * count) if count > 1 else pixels, vision_feature_layer=-1, vision_feature_select_strategy="default"
        )
        features = out if isinstance(out, torch.Tensor) else out.pooler_output  # (count x tiles, tokens per tile, hidden)
        return list(features.reshape(count, tiles * features.shape[1], features.shape[2]).unbind(0))

    def run_layers_as_vllm(self, model: Any, spec: ModelSpec) -> str:
        """As the base hook; and a dynamic-NTK RoPE keeps its frequencies, as vLLM's DynamicNTKScalingRotaryEmbedding
        (one cos/sin cache made at startup) does, where transformers' would re-derive them from the largest position
        of every batch: a data-dependent step the fake-tensor trace cannot take (InternVL3's Qwen2 LLM: dynamic, factor 2).
        The frequencies' values change no tensor's size: no memory term moves."""
        words = super().run_layers_as_vllm(model, spec)
        for module in model.modules():
            kind = getattr(module, "rope_type", None)
            if isinstance(kind, str) and "dynamic" in kind:
                module.rope_type = "default"
        return words

    def cached_text_model(self, model: Any) -> Any:
        return model.model.language_model


FAMILY = InternVLChatFamily()
