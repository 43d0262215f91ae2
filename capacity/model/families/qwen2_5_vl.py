"""Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration): decoder-only with a windowed ViT for images and videos."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from capacity.kv.text_config import kv_layers
from capacity.model.families.common import config_dtype, need
from capacity.model.families.decoder_only import decoder_shape
from capacity.model.family import EncoderInput, Family, Tower
from capacity.model.items.qwen_vl import MAX_FRAMES_PER_VIDEO, processor_pixel_bounds, qwen_vl_max_image_grid
from capacity.model.processor_kwargs import qwen_vl_max_pixels_within, with_qwen_vl_sizes
from capacity.model.shard_rules import ShardRules
from capacity.model.spec import EncoderShape, Modality, ModelSpec, VllmSupport, derive_max_model_len

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from capacity.source.resolve import ModelSource

# Qwen2.5-VL-7B-Instruct's published preprocessor_config.json (min_pixels 3136, max_pixels 12845056);
# a local folder's preprocessor_config.json overrides it.
DEFAULT_MIN_PIXELS = 3_136
DEFAULT_MAX_PIXELS = 12_845_056

# qwen2_vl.py / qwen2_5_vl.py / qwen2_5_omni_thinker.py / qwen3_vl.py / qwen3_5.py / glm4_1v.py: self.visual under
# _mark_tower_model({image, video})
VISUAL_TOWER = Tower(("image", "video"), ("visual",))


def pixel_bounds(preprocessor: dict[str, Any] | None) -> tuple[int, int]:
    """(min, max) pixels of the image processor: its size edges, else its min_pixels / max_pixels, else the defaults."""
    bounds = processor_pixel_bounds(preprocessor)
    return int(bounds.get("shortest_edge", DEFAULT_MIN_PIXELS)), int(bounds.get("longest_edge", DEFAULT_MAX_PIXELS))


def image_grid(config: dict[str, Any], preprocessor: dict[str, Any] | None) -> tuple[int, int]:
    """(rows, cols) of merged tokens of vLLM's largest image (128 x 128 = 16,384 at the default max_pixels)."""
    vision = config.get("vision_config") or {}
    patch = vision.get("patch_size", vision.get("spatial_patch_size", 14))
    merge = vision.get("spatial_merge_size", 2)
    low, high = pixel_bounds(preprocessor)
    return qwen_vl_max_image_grid(low, high, patch, merge)


class Qwen25VLFamily(Family):
    name = "qwen2_5_vl"
    model_types = ("qwen2_5_vl",)
    hf_class = "Qwen2_5_VLForConditionalGeneration"
    # vLLM runs the vision tower with varlen kernels (xformers / FlashAttention), where transformers' SDPA path
    # materialises per-window attention. Qwen2.5-VL-7B on an L4 (vLLM 0.9.0.1, one 16,384-token image): vLLM's
    # non-weights memory 2.39 GiB (19.83 requested - 1.81 available - 15.63 loaded) - 0.386 non-torch (0.27 + the
    # cuDNN difference the plan adds for a model with convolutions) - 0.11 encoder cache = 1.89 GiB of activations
    # where the trace of transformers' tower gives 2.73 GiB: 0.694. (0.736 until 2026-12-01 subtracted 0.27 non-torch
    # only, which the 0.18 GiB of load buffers capacity did not count then hid.) 0.9.0.1's non-KV also holds the L4's
    # CUDA context (0.8.0-0.9.0.1 count all non-torch device memory), so the factor overstates that release's tower.
    trace_encoder_to_vllm: ClassVar[float | None] = 0.694
    # vLLM qwen2_5_vl.py: vision qkv QKVParallelLinear, proj Row, gate/up Merged, down Row, merger mlp Column + Row;
    # supports_encoder_tp_data = True.
    tensor_parallel_rules = ShardRules(
        column=r"\.(q_proj|k_proj|v_proj|gate_proj|up_proj|attn\.qkv|merger\.mlp\.0)$",
        row=r"\.(o_proj|down_proj|attn\.proj|merger\.mlp\.2)$",
        vocab_embedding=r"embed_tokens$",
        lm_head=r"^lm_head$",
        encoder=r"^model\.visual\.",
        encoder_data_parallel=True,
    )

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
        vision = config.get("vision_config") or {}
        merge = vision.get("spatial_merge_size", 2)
        max_pixels = pixel_bounds(preprocessor)[1]
        rows, cols = image_grid(config, preprocessor)
        image = rows * cols
        hidden = need(text, "hidden_size", "qwen2_5_vl")
        max_len, key = derive_max_model_len(text)
        return ModelSpec(
            name=name,
            family=self,
            architecture="Qwen2_5_VLForConditionalGeneration",
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
            notes=(f"max_pixels {max_pixels}: {rows} x {cols} = {image} tokens per image; videos up to {MAX_FRAMES_PER_VIDEO} frames",),
        )

    def towers(self, config: dict[str, Any]) -> tuple[Tower, ...]:
        return (VISUAL_TOWER,)

    def with_processor_kwargs(
        self, config: dict[str, Any], files: dict[str, dict[str, Any]], kwargs: dict[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """Qwen2VLProcessingInfo's size keys; the frames of a video take the image's size (get_max_video_tokens)."""
        return with_qwen_vl_sizes(files, kwargs, "Qwen2.5-VL", {"min_pixels": DEFAULT_MIN_PIXELS, "max_pixels": DEFAULT_MAX_PIXELS})

    def item_size_kwargs(self, config: dict[str, Any], tokens: int) -> dict[str, Any] | None:
        """max_pixels = tokens x (patch x merge)^2 (28 x 28 here): an image of at most `tokens` merged patches, and
        a video's frame pairs of the same size (capacity/model/processor_kwargs.py qwen_vl_max_pixels_within)."""
        vision = config.get("vision_config") or {}
        return qwen_vl_max_pixels_within({"patch_size": 14, "spatial_merge_size": 2, **vision}, tokens)

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """The max-token item (a video at max pixels, or an image) as processed patches."""
        import torch

        vision = source.config.get("vision_config") or {}
        patch = vision.get("patch_size", vision.get("spatial_patch_size", 14))
        merge = vision.get("spatial_merge_size", 2)
        temporal = vision.get("temporal_patch_size", 2)
        rows, cols = image_grid(source.config, source.preprocessor)  # the largest image's merged grid
        frames = max(tokens // (rows * cols), 1)  # frame pairs of the budget's max-token item
        grid = torch.tensor([[frames, rows * merge, cols * merge]], device=device)
        n_patches = frames * rows * merge * cols * merge
        pixels = torch.zeros(n_patches, 3 * temporal * patch * patch, device=device, dtype=dtype)
        return EncoderInput(
            {"pixel_values": pixels, "grid_thw": grid},
            f"processed-shape patches for {frames} frame pair(s) of {rows * merge * patch}x{cols * merge * patch} px ({n_patches} patches)",
            host={"grid_thw": [frames, rows * merge, cols * merge]},
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        return encode_visual(model.model.visual, item, count)

    def cached_text_model(self, model: Any) -> Any:
        return model.model.language_model


def encode_visual(visual: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
    """`count` copies of the item through transformers' Qwen2.5-VL vision tower (the traced fallback under fake tensors)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    pixels = item.tensors["pixel_values"]
    grid = item.tensors["grid_thw"]
    pixels = torch.cat([pixels] * count) if count > 1 else pixels
    if isinstance(pixels, FakeTensor):
        out = traced_visual(visual, pixels, grid.repeat(count, 1), [item.host["grid_thw"]] * count)
    else:
        out = visual(pixels, grid_thw=grid.repeat(count, 1))
    if not isinstance(out, torch.Tensor):  # newer transformers return an output object
        out = getattr(out, "pooler_output", None) if getattr(out, "pooler_output", None) is not None else out.last_hidden_state
    return list(out.chunk(count))


def traced_visual(visual: Any, pixels: torch.Tensor, grid: torch.Tensor, grid_rows: list[list[int]]) -> Any:
    """The vision tower under fake tensors, where its data-dependent steps cannot run.

    The per-family fallback: window indices, cu_seqlens and position ids are computed on the host from the
    known grid and passed in precomputed (transformers' vision_utils accepts them), and the attention's
    `lengths.tolist()` gets the per-frame lengths. Windowed layers then attend per frame instead of per
    window: the same q/k/v views and the same output bytes, in 7 calls instead of 7,168 (the kernels
    materialise no score matrix either way).
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

    try:
        from transformers import vision_utils
        from transformers.utils.generic import get_max_seqlen
    except ImportError as exc:  # older transformers compute these inside the model, on data
        raise NotImplementedError("this transformers has no precomputable vision indices; the trace cannot run Qwen2.5-VL's vision tower") from exc
    with unset_fake_temporarily():
        host_grid = torch.tensor(grid_rows)
        position_ids = vision_utils.get_vision_position_ids(host_grid, visual.spatial_merge_size)
        cu_seqlens, max_seqlen = vision_utils.get_vision_attention_seqlens(host_grid, visual.config)
        window_index, cu_window_seqlens = vision_utils.get_vision_window_index(
            host_grid, spatial_merge_size=visual.spatial_merge_size, window_size=visual.window_size, patch_size=visual.patch_size
        )
        max_window_seqlen = get_max_seqlen(cu_window_seqlens, visual.config, kwarg_name="max_window_seqlen")
        frame_lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
        segment_counts = {len(frame_lengths), len(cu_window_seqlens) - 1}  # the two `lengths` the attention splits by
    original = FakeTensor.tolist

    def tolist(tensor: Any) -> Any:
        if tensor.dim() == 1 and not tensor.is_floating_point() and tensor.numel() in segment_counts:
            return list(frame_lengths)
        return original(tensor)

    FakeTensor.tolist = tolist  # type: ignore[method-assign]
    try:
        return visual(
            pixels,
            grid_thw=grid,
            position_ids=position_ids,
            cu_seqlens=cu_seqlens,
            max_seqlen=max_seqlen,
            window_index=window_index,
            cu_window_seqlens=cu_window_seqlens,
            max_window_seqlen=max_window_seqlen,
        )
    finally:
        FakeTensor.tolist = original  # type: ignore[method-assign]


FAMILY = Qwen25VLFamily()
