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
import math
from typing import TYPE_CHECKING, Any

from capacity.errors import BadInput
from capacity.kv.text_config import kv_layers
from capacity.model.families.common import config_dtype, need, sub
from capacity.model.family import EncoderInput, Family, ModelBuffer, Tower
from capacity.model.spec import DecoderShape, EncoderShape, Modality, ModelSpec, VllmSupport, derive_max_model_len
from capacity.model.vllm_registry import VLLM_VERSION

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from capacity.source.resolve import ModelSource
    from capacity.weights.stored_tensor import StoredTensor

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
# transformers Gemma4Processor's default audio_seq_length (the audio soft-token cap vLLM plans with) and
# Gemma4AudioFeatureExtractor's defaults: 16 kHz, 20 ms frames, 10 ms hop (vLLM _compute_audio_num_tokens fixes both).
AUDIO_SEQ_LENGTH_DEFAULT = 750
AUDIO_SAMPLING_RATE_DEFAULT = 16_000
AUDIO_FRAME_MS, AUDIO_HOP_MS = 20, 10
AUDIO_SUBSAMPLING_CONVS = 2  # two Conv2d layers, kernel 3, stride 2, padding 1 + 1 (the conformer's subsampling)


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
    """What the one KV reader (capacity.kv.text_config) reads for Gemma-4: global_head_dim and the k_eq_v KV heads made
    explicit (Gemma4TextConfig pops them into per_layer_config: head_dim global_head_dim, and num_key_value_heads
    num_global_key_value_heads when attention_k_eq_v and it is set)."""
    out = {**text, "global_head_dim": text.get("global_head_dim") or GLOBAL_HEAD_DIM_DEFAULT}
    if not text.get("attention_k_eq_v") or text.get("num_global_key_value_heads") is None:
        out.pop("num_global_key_value_heads", None)
    out["attention_k_eq_v"] = bool(out.get("num_global_key_value_heads"))
    return out


def image_soft_tokens(vision: dict[str, Any], processor: dict[str, Any] | None = None) -> int:
    """Gemma4ProcessingInfo.get_mm_max_tokens_per_item: --mm-processor-kwargs max_soft_tokens (carried in the processor
    config by with_processor_kwargs), else vision_config.default_output_length."""
    configured = ((processor or {}).get(MM_KWARGS_KEY) or {}).get("max_soft_tokens")
    if configured is not None:
        return int(configured)
    tokens = vision.get("default_output_length")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens <= 0:
        raise BadInput(f"config.json vision_config.default_output_length must be a positive integer (the image soft tokens vLLM plans with), got {tokens!r}")
    return tokens


# where with_processor_kwargs leaves vLLM's --mm-processor-kwargs in the processor config the spec reads
MM_KWARGS_KEY = "mm_processor_kwargs"


def configured_max_soft_tokens(kwargs: dict[str, Any]) -> int:
    """vLLM's _get_max_soft_tokens: the flat max_soft_tokens, else images_kwargs.max_soft_tokens; a value outside
    _SUPPORTED_SOFT_TOKENS fails vLLM's dummy processing at startup ("Unsupported max_soft_tokens value")."""
    scoped = kwargs.get("images_kwargs")
    unknown = sorted(set(kwargs) - {"max_soft_tokens", "images_kwargs"}) + sorted(f"images_kwargs.{k}" for k in (scoped or {}) if k != "max_soft_tokens")
    if unknown or (scoped is not None and not isinstance(scoped, dict)):
        raise BadInput(f"--mm-processor-kwargs {', '.join(unknown) or 'images_kwargs'}: not modelled for Gemma-4 (capacity models max_soft_tokens); plan without it")
    value = kwargs.get("max_soft_tokens")
    if value is None and isinstance(scoped, dict):
        value = scoped.get("max_soft_tokens")
    if isinstance(value, bool) or value not in SUPPORTED_SOFT_TOKENS:
        raise BadInput(
            f"--mm-processor-kwargs max_soft_tokens {value!r}: vLLM's Gemma-4 processor takes {', '.join(map(str, SUPPORTED_SOFT_TOKENS))} "
            "and fails its startup profiling on another value"
        )
    return int(value)


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


def audio_seq_length(processor: dict[str, Any] | None) -> int:
    """Gemma4ProcessingInfo.get_mm_max_tokens_per_item: the processor's audio_seq_length (processor_config.json,
    else transformers Gemma4Processor's default)."""
    value = (processor or {}).get("audio_seq_length", AUDIO_SEQ_LENGTH_DEFAULT)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise BadInput(f"processor_config.json audio_seq_length must be a positive integer (the audio soft tokens vLLM plans with), got {value!r}")
    return value


def audio_sampling(processor: dict[str, Any] | None) -> tuple[int, bool]:
    """(sampling_rate, fft_overdrive) of the processor's Gemma4AudioFeatureExtractor (its defaults when absent)."""
    extractor = (processor or {}).get("feature_extractor") or {}
    kind = extractor.get("feature_extractor_type", "Gemma4AudioFeatureExtractor")
    if kind != "Gemma4AudioFeatureExtractor":
        raise BadInput(
            f"processor_config.json feature_extractor.feature_extractor_type is {kind!r}: capacity models vLLM's dummy audio for "
            "Gemma4AudioFeatureExtractor only"
        )
    return int(extractor.get("sampling_rate", AUDIO_SAMPLING_RATE_DEFAULT)), bool(extractor.get("fft_overdrive", False))


def dummy_audio_samples(sampling_rate: int, fft_overdrive: bool) -> int:
    """vLLM _dummy_audio_num_samples: the feature extractor's fft_length, 2^ceil(log2(frame_length)) (x 2 with
    fft_overdrive); 512 samples at 16 kHz."""
    frame = round(sampling_rate * AUDIO_FRAME_MS / 1000)
    return 2 ** math.ceil(math.log2(frame)) * (2 if fft_overdrive else 1)


def audio_soft_tokens(samples: int, sampling_rate: int, cap: int) -> int:
    """vLLM Gemma4ProcessingInfo._compute_audio_num_tokens: semicausal mel framing (frame_length // 2 zeros first,
    frames of frame_length + 1 every hop), then two stride-2 convolutions, capped at audio_seq_length."""
    frame, hop = round(sampling_rate * AUDIO_FRAME_MS / 1000), round(sampling_rate * AUDIO_HOP_MS / 1000)
    frames = (samples + frame // 2 - (frame + 1)) // hop + 1
    if frames <= 0:
        return 0
    for _ in range(AUDIO_SUBSAMPLING_CONVS):
        frames = (frames + 2 - 3) // 2 + 1
    return min(frames, cap)


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
    # The E-series adds the audio tower (transformers' module, ReplicatedLinear) and embed_audio, and each layer's
    # per_layer_input_gate / per_layer_projection (ReplicatedLinear).
    vllm_unsharded_modules = (
        r"(^|\.)vision_tower(\.|$)",
        r"(^|\.)embed_vision(\.|$)",
        r"\.router\.proj$",
        r"(^|\.)audio_tower(\.|$)",
        r"(^|\.)embed_audio(\.|$)",
        r"\.per_layer_input_gate$",
        r"\.per_layer_projection$",
    )
    adds_vllm_tensors = True  # the V part of k_eq_v layers' QKVParallelLinear (vllm_tensors)

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        architecture = str((config.get("architectures") or [self.hf_class])[0])
        if architecture != self.hf_class:
            raise BadInput(f"config.json architectures names {architecture!r}: the gemma4 family plans {self.hf_class} only")
        text = text_config(config)
        vision = {**VISION_DEFAULTS, **sub(config, "vision_config", WHERE)}
        image = image_soft_tokens(vision, processor)
        video = video_tokens()
        k = need(vision, "pooling_kernel_size", WHERE)
        k2 = k * k
        patch = need(vision, "patch_size", WHERE)
        image_dummy = dummy_soft_tokens(image, patch, k)
        frame_dummy = dummy_soft_tokens(VIDEO_SOFT_TOKENS_PER_FRAME, patch, k)
        max_len, key = derive_max_model_len(text)
        shared = text.get("num_kv_shared_layers") or 0
        audio = self.audio_modality(config, processor)
        ple = text.get("hidden_size_per_layer_input") or 0
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
                *audio,
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
                f"gemma4: {image} soft tokens per image (vLLM's get_mm_max_tokens_per_item: "
                f"{'--mm-processor-kwargs max_soft_tokens' if (processor or {}).get(MM_KWARGS_KEY) else 'vision_config.default_output_length'}), {video} per video ({VIDEO_MAX_FRAMES} frames x "
                f"({VIDEO_SOFT_TOKENS_PER_FRAME} + 2 + 6)); the encoder runs {image * k2} patches per image, {VIDEO_SOFT_TOKENS_PER_FRAME * k2} per frame "
                f"(padded); vLLM's {DUMMY_SIDE} x {DUMMY_SIDE} dummy image yields {image_dummy} embeddings, a dummy frame {frame_dummy}",
                "gemma4: --limit-mm-per-prompt video=0 leaves images as the profiled modality; a video's num_frames limit is not modelled (32 frames)",
                *((f"gemma4: the last {shared} layers read the KV of an earlier layer (no allocation)",) if shared else ()),
                *(
                    (
                        f"gemma4: {audio[0].max_tokens_per_item} tokens per audio (the processor's audio_seq_length); vLLM's dummy audio "
                        f"({dummy_audio_samples(*audio_sampling(processor))} samples, the fft_length) yields {audio[0].dummy_output_tokens} embedding; "
                        "the activation formula runs the vision tower's widths on its positions",
                    )
                    if audio
                    else ()
                ),
                *(
                    (
                        f"gemma4: per-layer input embeddings (PLE): a vocab-parallel table of {text.get('vocab_size_per_layer_input') or text['vocab_size']:,} x "
                        f"({text['num_hidden_layers']} layers x {ple}) and vLLM's per_layer_embeddings buffer (max_num_batched_tokens x "
                        f"{text['num_hidden_layers']} x {ple}, in the load window)",
                    )
                    if ple
                    else ()
                ),
            ),
        )

    def audio_modality(self, config: dict[str, Any], processor: dict[str, Any] | None) -> tuple[Modality, ...]:
        """The audio modality of a checkpoint with an audio_config (Gemma4ProcessingInfo.has_audio): audio_seq_length
        tokens per item for the budget; vLLM's dummy audio is fft_length samples, which the conformer turns into
        a few positions and as many embeddings."""
        if config.get("audio_config") is None:
            return ()
        cap = audio_seq_length(processor)
        rate, overdrive = audio_sampling(processor)
        dummy = audio_soft_tokens(dummy_audio_samples(rate, overdrive), rate, cap)
        return (Modality("audio", cap, None, encoder_positions=dummy, dummy_output_tokens=dummy),)

    def item_size_kwargs(self, config: dict[str, Any], tokens: int) -> dict[str, Any] | None:
        """The largest max_soft_tokens vLLM takes (_SUPPORTED_SOFT_TOKENS) within `tokens`: an image's soft tokens
        (video frames keep 70 each, audio its length); None below the smallest."""
        fitting = [n for n in SUPPORTED_SOFT_TOKENS if n <= tokens]
        return {"max_soft_tokens": fitting[-1]} if fitting else None

    def with_processor_kwargs(self, config: dict[str, Any], files: dict[str, dict[str, Any]], kwargs: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """max_soft_tokens sets the image's soft tokens and patch budget (video frames keep 70: vLLM overrides them);
        the processor config carries it to the spec and the encoder item."""
        soft = configured_max_soft_tokens(kwargs)
        processor = {**(files.get("processor_config.json") or {}), MM_KWARGS_KEY: {"max_soft_tokens": soft}}
        return {**files, "processor_config.json": processor}

    def towers(self, config: dict[str, Any]) -> tuple[Tower, ...]:
        """vLLM Gemma4ForConditionalGeneration: the vision tower and embed_vision under _mark_tower_model({image,
        video}), the audio tower and embed_audio under _mark_tower_model(audio)."""
        vision = Tower(("image", "video"), ("vision_tower", "embed_vision"))
        return (vision, Tower(("audio",), ("audio_tower", "embed_audio"))) if config.get("audio_config") is not None else (vision,)

    def load_buffers(self, config: dict[str, Any], max_num_batched_tokens: int, dtype_bytes: int, towers_built: bool = True) -> tuple[ModelBuffer, ...]:
        """vLLM Gemma4ForConditionalGeneration.__init__ (inside _mark_language_model, so in the load window, whole on
        every rank): per_layer_embeddings = zeros(max_num_batched_tokens, num_hidden_layers,
        hidden_size_per_layer_input) in the model dtype, when hidden_size_per_layer_input > 0."""
        text = text_config(config)
        ple = text.get("hidden_size_per_layer_input") or 0
        if ple <= 0:
            return ()
        layers = text["num_hidden_layers"]
        return (ModelBuffer("per_layer_embeddings", (max_num_batched_tokens, layers, ple), dtype_bytes),)

    def vllm_tensors(self, tensors: tuple[StoredTensor, ...], config: dict[str, Any]) -> tuple[StoredTensor, ...]:
        """vLLM's QKVParallelLinear of a k_eq_v full-attention layer has a V part the checkpoint does not store
        (K is loaded into both): one V tensor the shape of each such layer's K (vLLM _gemma4_layer_weights_mapper)."""
        from capacity.weights.stored_tensor import StoredTensor

        names = {t.name for t in tensors}
        added = [
            StoredTensor(t.name.replace(".self_attn.k_proj.", ".self_attn.v_proj."), t.shape, t.dtype)
            for t in tensors
            if ".self_attn.k_proj." in t.name and "vision_tower" not in t.name and t.name.replace(".self_attn.k_proj.", ".self_attn.v_proj.") not in names
        ]
        return (*tensors, *added)

    # --- the fake-tensor trace and the profiler ------------------------------------------------------------

    def build_module(
        self,
        config: dict[str, Any],
        *,
        device: str = "meta",
        dtype: str = "bfloat16",
        init_weights: bool | None = None,
        attn_implementation: str | None = None,
    ) -> Any:
        """transformers' Gemma4ForConditionalGeneration; its audio tower (Gemma4AudioModel) supports no SDPA, so it
        gets eager attention when another implementation is asked for the rest."""
        attn: Any = attn_implementation
        if isinstance(attn, str) and config.get("audio_config") is not None:
            attn = {"": attn, "text_config": attn, "vision_config": attn, "audio_config": "eager"}
        return super().build_module(config, device=device, dtype=dtype, init_weights=init_weights, attn_implementation=attn)

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """vLLM's dummy item as Gemma4's processor hands it over: a 224 x 224 image (or 32 such frames) resized to
        its patch budget, `rows x cols` valid patches of 3 x patch^2 pixels, padded to max_soft_tokens x k^2 patches
        whose positions are (-1, -1); an audio item: the fft_length-sample dummy's mel frames."""
        import torch

        audio = next((m for m in spec.modalities if m.name == "audio"), None)
        if audio is not None and audio.max_tokens_per_item == tokens:
            return self.audio_input(source, device, dtype)

        vision = {**VISION_DEFAULTS, **(source.config.get("vision_config") or {})}
        k, patch = vision["pooling_kernel_size"], vision["patch_size"]
        video = next((m for m in spec.modalities if m.name == "video"), None)
        is_video = video is not None and video.max_tokens_per_item == tokens
        frames = VIDEO_MAX_FRAMES if is_video else 1
        soft = VIDEO_SOFT_TOKENS_PER_FRAME if is_video else image_soft_tokens(vision, source.processor)
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

    def audio_input(self, source: ModelSource, device: str, dtype: torch.dtype) -> EncoderInput:
        """vLLM's dummy audio through Gemma4AudioFeatureExtractor: fft_length samples (a multiple of its
        pad_to_multiple_of 128 already), frame_length // 2 zeros first, frames of frame_length + 1 every hop: that many
        mel frames of feature_size bins, all valid."""
        import torch

        rate, overdrive = audio_sampling(source.processor)
        samples = dummy_audio_samples(rate, overdrive)
        frame, hop = round(rate * AUDIO_FRAME_MS / 1000), round(rate * AUDIO_HOP_MS / 1000)
        mel_frames = (samples + frame // 2 - (frame + 1)) // hop + 1
        bins = int(((source.processor or {}).get("feature_extractor") or {}).get("feature_size", 128))
        features = torch.zeros(1, mel_frames, bins, device=device, dtype=dtype)
        mask = torch.ones(1, mel_frames, device=device, dtype=torch.bool)
        return EncoderInput(
            {"input_features": features, "input_features_mask": mask},
            f"audio of {samples} samples ({mel_frames} mel frames of {bins} bins)",
            host={"audio": True},
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        """vLLM's _process_image_input / _process_video_input on `count` items: transformers' patch embedder,
        encoder and pooler on every item's patches in one batch, then embed_vision on the pooled soft tokens.
        The pooler's valid rows are taken by count, not by its boolean mask (no fake-tensor shape). vLLM splits the batch into chunks by free memory
        (_encoder_chunk); one batch is the upper bound."""
        import torch

        if item.host.get("audio"):
            return self.encode_audio(model, item, count)
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

    def encode_audio(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        """vLLM's _process_audio_input on `count` items: transformers' audio tower on the batch of mel features,
        embed_audio on its output, the valid positions of each item kept (by the tower's output mask)."""
        import torch

        features = torch.cat([item.tensors["input_features"]] * count)
        mask = torch.cat([item.tensors["input_features_mask"]] * count)
        out = model.model.audio_tower(features, mask)
        embeds = model.model.embed_audio(inputs_embeds=out.last_hidden_state)
        return [row for row in embeds]

    def cached_text_model(self, model: Any) -> Any:
        return model.model.language_model

    def lm_head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        return model.get_output_embeddings()(hidden)


FAMILY = Gemma4Family()
