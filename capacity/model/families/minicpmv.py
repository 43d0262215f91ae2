"""MiniCPM-Llama3-V 2.5 (MiniCPMV, model_type `minicpmv`, version 2.5): Hub remote code vLLM 0.33 serves natively.

vLLM's MiniCPMV2_5 (vllm/model_executor/models/minicpmv.py): an Idefics2 (SigLIP) vision tower `vpm`, a perceiver
`resampler` of `query_num` queries per slice, and a LlamaForCausalLM `llm` whose config is config.json itself. Read
from vLLM and the checkpoint's image processor (image_processing_minicpmv.py, which vLLM loads with trust_remote_code):
- the image with the most features is `image_size` wide and `max_slice_num` (9) times as tall
  (get_image_size_with_most_features); the processor's slice grid for it (get_sliced_grid) is 1 x 9, and every
  slice plus the downsized source image gives `image_feature_size` tokens: (1 x 9 + 1) x 96 = 960;
- the tower runs every slice padded to the largest slice's patches (get_vision_hidden_states);
- weights: vpm and resampler listed from the config as vLLM allocates them (the resampler's linears are
  ReplicatedLinear / nn.MultiheadAttention: whole on every rank), the LLM built on the meta device;
- the profiler and the fake-tensor trace run the same modules composed from transformers' parts
  (capacity/model/arch/minicpmv.py), which allocate exactly the parameters listed here.
Other MiniCPM-V versions (2.0, 2.6, 4.x: other towers, videos, audio) are refused naming `version`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from capacity.errors import BadInput
from capacity.kv.text_config import kv_layers
from capacity.model.families.common import config_dtype, need, sub
from capacity.model.families.decoder_only import decoder_shape
from capacity.model.family import EncoderInput, Family
from capacity.model.spec import EncoderShape, Modality, ModelSpec, VllmSupport, scaled_max_model_len

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from torch import nn

    from capacity.source.resolve import ModelSource

WHERE = "minicpmv"
# MiniCPMVImageProcessor.__init__ defaults (image_processing_minicpmv.py).
PROCESSOR_DEFAULTS = {"max_slice_nums": 9, "scale_resolution": 448, "patch_size": 14, "image_feature_size": 64}
LLM_FIELDS_DROPPED = ("vision_config", "slice_config", "auto_map", "architectures", "model_type", "_name_or_path")


def version(config: dict[str, Any]) -> tuple[int, ...]:
    """vLLM get_version_by_config: `version` as "major.minor"; without it (2, 0) for hidden 2304 + 64 queries, else (2, 5)."""
    value = config.get("version")
    if value is None:
        return (2, 0) if config.get("hidden_size") == 2304 and config.get("query_num") == 64 else (2, 5)
    try:
        return tuple(int(x) for x in str(value).split("."))
    except ValueError as exc:
        raise BadInput(f"config.json (minicpmv) version {value!r} is not a version number") from exc


def llm_config(config: dict[str, Any]) -> dict[str, Any]:
    """The LlamaForCausalLM vLLM builds from config.json itself, with LlamaConfig's defaults filled."""
    from capacity.model.hf_config import materialized

    raw = {k: v for k, v in config.items() if k not in LLM_FIELDS_DROPPED}
    return materialized({**raw, "model_type": "llama", "architectures": ["LlamaForCausalLM"]})


def ensure_divide(length: float, patch: int) -> int:
    """MiniCPMVImageProcessor.ensure_divide: the nearest multiple of the patch, at least one patch."""
    return max(round(length / patch) * patch, patch)


def best_resize(width: float, height: float, scale: int, patch: int, allow_upscale: bool) -> tuple[int, int]:
    """MiniCPMVImageProcessor.find_best_resize: to about scale^2 pixels at the same ratio, sides multiples of the patch."""
    if width * height > scale * scale or allow_upscale:
        ratio = width / height
        height = int(scale / math.sqrt(ratio))
        width = int(height * ratio)
    return ensure_divide(width, patch), ensure_divide(height, patch)


@dataclass(frozen=True)
class Slicing:
    """How the image processor slices an image (image_processing_minicpmv.py), with vLLM's most-features image."""

    image_size: int  # config.json image_size: the most-features image is image_size x (image_size x max_slice_num)
    max_slice_num: int  # vLLM get_image_max_slice_num: config.max_slice_num, else 9
    max_slice_nums: int  # the image processor's cap on slices
    scale_resolution: int
    patch_size: int
    feature_size: int  # image_feature_size: tokens per slice (the resampler's query_num)

    @property
    def largest_image(self) -> tuple[int, int]:
        return self.image_size, self.image_size * self.max_slice_num

    def grid(self, width: int, height: int) -> tuple[int, int] | None:
        """get_sliced_grid: (columns, rows), or None when the image is not sliced."""
        log_ratio = math.log(width / height)
        multiple = min(math.ceil(width * height / (self.scale_resolution * self.scale_resolution)), self.max_slice_nums)
        if multiple <= 1:
            return None
        counts = [n for n in (multiple - 1, multiple, multiple + 1) if n != 1 and n <= self.max_slice_nums]
        candidates = [(m, n // m) for n in counts for m in range(1, n + 1) if n % m == 0]
        best, error = (1, 1), float("inf")
        for cols, rows in candidates:
            e = abs(log_ratio - math.log(cols / rows))
            if e < error:
                best, error = (cols, rows), e
        return best

    @property
    def max_tokens(self) -> int:
        """vLLM get_num_image_tokens of the most-features image: (columns x rows + 1) x image_feature_size."""
        grid = self.grid(*self.largest_image)
        cols, rows = grid if grid is not None else (0, 0)
        return (cols * rows + 1) * self.feature_size

    def slice_patches(self, width: int, height: int) -> list[int]:
        """Patches of each slice the processor cuts (slice_image): the downsized source image, then the grid's slices."""
        grid = self.grid(width, height)
        scale, patch = self.scale_resolution, self.patch_size
        if grid is None:
            w, h = best_resize(width, height, scale, patch, allow_upscale=True)
            return [(w // patch) * (h // patch)]
        w, h = best_resize(width, height, scale, patch, allow_upscale=False)
        cols, rows = grid
        cell = best_resize(ensure_divide(width, cols) / cols, ensure_divide(height, rows) / rows, scale, patch, allow_upscale=True)
        return [(w // patch) * (h // patch)] + [(cell[0] // patch) * (cell[1] // patch)] * (cols * rows)

    @property
    def encoder_positions(self) -> int:
        """The tower's positions for the most-features image: every slice padded to the largest (get_vision_hidden_states)."""
        patches = self.slice_patches(*self.largest_image)
        return len(patches) * max(patches)


def slicing(config: dict[str, Any], preprocessor: dict[str, Any] | None) -> Slicing:
    pre = {**PROCESSOR_DEFAULTS, **(preprocessor or {})}
    queries = need(config, "query_num", WHERE)
    if preprocessor is None:
        pre["image_feature_size"] = queries  # the resampler's queries: what the placeholder must hold
    elif pre["image_feature_size"] != queries:
        raise BadInput(f"preprocessor_config.json image_feature_size {pre['image_feature_size']} differs from config.json query_num {queries}: vLLM's placeholders and the resampler disagree")
    return Slicing(
        image_size=int(config.get("image_size", 448)),
        max_slice_num=int(config.get("max_slice_num", 9)),
        max_slice_nums=int(pre["max_slice_nums"]),
        scale_resolution=int(pre["scale_resolution"]),
        patch_size=int(pre["patch_size"]),
        feature_size=int(pre["image_feature_size"]),
    )


def vision_tensors(config: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """vLLM's Idefics2VisionTransformer (with its post layernorm) as vLLM allocates it, under the checkpoint's names."""
    vision = sub(config, "vision_config", WHERE)
    d = need(vision, "hidden_size", WHERE)
    ffn = need(vision, "intermediate_size", WHERE)
    patch = need(vision, "patch_size", WHERE)
    positions = (need(vision, "image_size", WHERE) // patch) ** 2
    p = "vpm"
    out: list[tuple[str, tuple[int, ...]]] = [
        (f"{p}.embeddings.patch_embedding.weight", (d, vision.get("num_channels", 3), patch, patch)),
        (f"{p}.embeddings.patch_embedding.bias", (d,)),
        (f"{p}.embeddings.position_embedding.weight", (positions, d)),
    ]
    layers = need(vision, "num_hidden_layers", WHERE) - (1 if config.get("drop_vision_last_layer") else 0)
    for i in range(layers):
        layer = f"{p}.encoder.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):  # QKVParallelLinear and RowParallelLinear, with biases
            out += [(f"{layer}.self_attn.{proj}.weight", (d, d)), (f"{layer}.self_attn.{proj}.bias", (d,))]
        out += [
            (f"{layer}.mlp.fc1.weight", (ffn, d)),
            (f"{layer}.mlp.fc1.bias", (ffn,)),
            (f"{layer}.mlp.fc2.weight", (d, ffn)),
            (f"{layer}.mlp.fc2.bias", (d,)),
        ]
        out += [(f"{layer}.{norm}.{leaf}", (d,)) for norm in ("layer_norm1", "layer_norm2") for leaf in ("weight", "bias")]
    out += [(f"{p}.post_layernorm.weight", (d,)), (f"{p}.post_layernorm.bias", (d,))]
    return out


def resampler_tensors(config: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """Resampler2_5 (vllm/model_executor/layers/resampler.py): query, kv_proj (no bias), nn.MultiheadAttention,
    LayerNorms on q, kv and the output, the output projection."""
    e = need(config, "hidden_size", WHERE)
    kv = need(sub(config, "vision_config", WHERE), "hidden_size", WHERE)
    p = "resampler"
    out: list[tuple[str, tuple[int, ...]]] = [(f"{p}.query", (need(config, "query_num", WHERE), e))]
    if kv != e:
        out.append((f"{p}.kv_proj.weight", (e, kv)))
    out += [
        (f"{p}.attn.in_proj_weight", (3 * e, e)),
        (f"{p}.attn.in_proj_bias", (3 * e,)),
        (f"{p}.attn.out_proj.weight", (e, e)),
        (f"{p}.attn.out_proj.bias", (e,)),
    ]
    out += [(f"{p}.{norm}.{leaf}", (e,)) for norm in ("ln_q", "ln_kv", "ln_post") for leaf in ("weight", "bias")]
    out.append((f"{p}.proj", (e, e)))
    return out


class MiniCPMVFamily(Family):
    name = "minicpmv"
    model_types = ("minicpmv",)
    parameters_source: ClassVar[str] = (
        "listed from config.json as vLLM's MiniCPMV2_5 allocates them (vpm and resampler by hand from idefics2_vision_model.py / "
        "resampler.py; the Llama LLM built on the meta device)"
    )
    # resampler.py: ReplicatedLinear kv_proj, nn.MultiheadAttention, nn.Parameter query / proj: whole on every rank.
    vllm_unsharded_modules: ClassVar[tuple[str, ...]] = (r"^resampler(\.|$)",)

    def text_config(self, config: dict[str, Any]) -> dict[str, Any]:
        return llm_config(config)

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        if version(config) != (2, 5):
            raise BadInput(f"config.json (minicpmv) version {'.'.join(map(str, version(config)))}: capacity plans MiniCPM-Llama3-V 2.5 (vLLM's MiniCPMV2_5) only")
        if config.get("quantization_config"):
            raise BadInput("config.json (minicpmv) has a quantization_config: quantized MiniCPM-V checkpoints are not modelled")
        vision = sub(config, "vision_config", WHERE)
        llm = llm_config(config)
        vision_tensors(config)  # fields checked now, not when the weights are counted
        resampler_tensors(config)
        cut = slicing(config, preprocessor)
        tokens = cut.max_tokens
        grid = cut.grid(*cut.largest_image)
        max_len, key, _factor = scaled_max_model_len(llm)
        notes = (
            f"minicpmv: {tokens} tokens per image = ({grid[0] if grid else 0} x {grid[1] if grid else 0} slices + the source image) x "
            f"image_feature_size {cut.feature_size}, for vLLM's most-features image {cut.largest_image[0]}x{cut.largest_image[1]}",
            f"minicpmv: the tower runs {len(cut.slice_patches(*cut.largest_image))} slices padded to {max(cut.slice_patches(*cut.largest_image))} "
            "patches each; its masked SDPA is estimated like unmasked attention (no score matrix)",
        )
        return ModelSpec(
            name=name,
            family=self,
            architecture=str((config.get("architectures") or ["MiniCPMV"])[0]),
            is_encoder_decoder=False,
            config_dtype=config_dtype(config),
            layers=kv_layers(llm, "minicpmv"),
            modalities=(Modality("image", tokens, None),),
            derived_max_model_len=max_len,
            max_len_key=key,
            max_source_positions=None,
            encoder_tokens_per_request=0,
            num_attention_heads=need(llm, "num_attention_heads", WHERE),
            decoder=decoder_shape(llm, "minicpmv"),
            encoder=EncoderShape(
                seq_len=cut.encoder_positions,
                hidden_size=need(vision, "hidden_size", WHERE),
                ffn_size=need(vision, "intermediate_size", WHERE),
                num_layers=need(vision, "num_hidden_layers", WHERE),
                output_hidden_size=need(llm, "hidden_size", WHERE),
            ),
            vllm_support=VllmSupport("native", "MiniCPMV2_5 (vllm/model_executor/models/minicpmv.py)"),
            notes=notes,
        )

    def parameter_shapes(self, config: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """vpm and resampler listed from the config; the Llama LLM's parameters from its class on the meta device."""
        from capacity.model.family import family_named

        raw = {k: v for k, v in config.items() if k not in LLM_FIELDS_DROPPED}
        text = family_named("decoder_only").parameter_shapes({**raw, "model_type": "llama", "architectures": ["LlamaForCausalLM"]})
        return (*vision_tensors(config), *resampler_tensors(config), *((f"llm.{n}", s) for n, s in text))

    def build_module(
        self, config: dict[str, Any], *, device: str = "meta", dtype: str = "bfloat16", init_weights: bool | None = None, attn_implementation: str | None = None
    ) -> nn.Module:
        from capacity.model.arch.minicpmv import build_minicpmv

        vision = sub(config, "vision_config", WHERE)
        return build_minicpmv(
            vision,
            llm_config(config),
            vision_layers=need(vision, "num_hidden_layers", WHERE) - (1 if config.get("drop_vision_last_layer") else 0),
            query_num=need(config, "query_num", WHERE),
            device=device,
            dtype=dtype,
            init_weights=init_weights,
            attn_implementation=attn_implementation,
        )

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """The most-features image's slices as vLLM hands them to the tower (get_vision_hidden_states): each slice's
        patches in one row of patch_size-high pixels, padded to the largest slice, with a mask of its real patches."""
        import torch

        cut = slicing(source.config, source.preprocessor)
        patches = cut.slice_patches(*cut.largest_image)[: max(1, tokens // cut.feature_size)]
        longest, patch = max(patches), cut.patch_size
        pixels = torch.zeros(len(patches), 3, patch, longest * patch, device=device, dtype=dtype)
        mask = torch.zeros(len(patches), 1, longest, dtype=torch.bool, device=device)
        for i, n in enumerate(patches):
            mask[i, 0, :n] = True
        return EncoderInput(
            {"pixel_values": pixels, "patch_attention_mask": mask},
            f"processed-shape slices ({len(patches)}, 3, {patch}, {longest * patch}): the source image and {len(patches) - 1} slices, "
            f"{cut.feature_size} tokens each",
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        """vpm on every slice of `count` images, then the resampler's queries over each slice's patches."""
        import torch

        pixels, mask = item.tensors["pixel_values"], item.tensors["patch_attention_mask"]
        slices = pixels.shape[0]
        if count > 1:
            pixels, mask = torch.cat([pixels] * count), torch.cat([mask] * count)
        states = model.vpm(pixel_values=pixels, patch_attention_mask=mask).last_hidden_state
        out = model.resampler(states, ~mask.flatten(1))  # (count x slices, queries, LLM width)
        return list(out.reshape(count, slices * out.shape[1], out.shape[2]).unbind(0))

    def cached_text_model(self, model: Any) -> Any:
        return model.llm.model

    def lm_head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        return model.llm.lm_head(hidden)


FAMILY = MiniCPMVFamily()
