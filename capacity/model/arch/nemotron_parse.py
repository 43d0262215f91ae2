"""NVIDIA Nemotron-Parse (v1.1 / v1.2) assembled from native transformers parts.

Nemotron-Parse is not in transformers (remote code only).  It is rebuilt here as

* ``encoder``: transformers' native ``RadioModel`` (C-RADIOv2-H: timm
  ``vit_huge_patch16_224`` = 32 layers, width 1280, 16 heads, MLP 5120; CPE
  position table for ``max_resolution`` 2048 → 128x128 positions; one cls token
  per teacher (4) padded with registers to ``register_multiple`` 8 prefix tokens;
  summary = cls tokens of the teachers with ``use_summary`` → 3 x 1280 = 3840).
* ``neck`` (``nn.ModuleDict``, names as in the remote code):
  ``conv1`` Conv1d 1280→d_model(1024) k=1 (bias), ``layer_norm1``,
  ``conv2`` Conv2d 1024→1024 k=s=(1,4) (no bias), ``layer_norm2``,
  ``sum_proj`` Linear 3840→1024 (bias), ``layer_norm3`` (all LayerNorm eps 1e-6).
  Output = (H/16)*((W/16)//4) patch tokens + 1 summary token
  (2048x1648 → 128*25+1 = 3201).
* ``decoder``: transformers ``MBartDecoder`` with the learned position table
  replaced by a parameter-free zero module (Nemotron-Parse uses no absolute
  positions); ``layernorm_embedding`` + final ``layer_norm``; scaled embeddings.
* ``lm_head``: Linear d_model→vocab, no bias; tied to ``decoder.embed_tokens``
  when ``tie_word_embeddings`` is true (v1.2), untied otherwise (v1.1).

Parameter counts (bf16 build): v1.1 936,357,888, v1.2 903,131,136.  They include
the 2 x 32 x 1280 = 81,920 ``layer_scale*.lambda1`` parameters that the native
``RadioModel`` always creates (identity, value 1.0; C-RADIO checkpoints have none).

torch / transformers are imported inside functions only.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import TYPE_CHECKING, Any

from capacity.model.arch.hf import build_context, resolve_dtype

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = [
    "build_nemotron_parse",
    "encoder_tokens",
    "mbart_decoder_config",
    "radio_config",
]

# timm ViT family: size name -> (width, depth, heads, mlp_ratio)
_VIT_SIZES: dict[str, tuple[int, int, int, float]] = {
    "tiny": (192, 12, 3, 4.0),
    "small": (384, 12, 6, 4.0),
    "base": (768, 12, 12, 4.0),
    "large": (1024, 24, 16, 4.0),
    "huge": (1280, 32, 16, 4.0),
}
_NECK_EPS = 1e-6
_NECK_POOL = (1, 4)


def _encoder_args(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    encoder = config.get("encoder") or config.get("vision_config") or {}
    return encoder, encoder.get("args") or {}


def radio_config(config: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for transformers' ``RadioConfig`` from the Nemotron-Parse ``encoder`` block.

    Only fields present in both transformers 5.17 and 5.24 are used.
    """
    encoder, args = _encoder_args(config)
    model_name = str(args.get("model", "vit_huge_patch16_224"))
    match = re.fullmatch(r"vit_([a-z]+)_patch(\d+)(?:_(\d+))?", model_name)
    if match is None or match.group(1) not in _VIT_SIZES:
        raise ValueError(f"unsupported RADIO backbone {model_name!r}")
    width, depth, heads, mlp_ratio = _VIT_SIZES[match.group(1)]
    patch_size = int(encoder.get("patch_size", match.group(2)))
    max_img = int(args.get("cpe_max_size") or encoder.get("max_resolution") or 2048)

    teachers = list(args.get("teachers") or [])
    if args.get("cls_token_per_teacher", False):
        num_cls = max(len(teachers), 1)
    else:
        num_cls = 1
    if "num_registers" in args:
        num_registers = int(args["num_registers"])
    else:
        multiple = int(args.get("register_multiple") or 0)
        num_registers = (multiple - num_cls % multiple) if multiple else 0
    if teachers:
        summary_idxs = [i for i, t in enumerate(teachers) if t.get("use_summary", True)]
    else:
        summary_idxs = [0]
    return {
        "hidden_size": width,
        "num_hidden_layers": depth,
        "num_attention_heads": heads,
        "mlp_ratio": mlp_ratio,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-6,
        "qkv_bias": True,
        "layerscale_value": 1.0,
        "num_channels": 3,
        "patch_size": patch_size,
        "max_img_size": max_img,
        "num_cls_tokens": num_cls,
        "num_registers": num_registers,
        "summary_idxs": summary_idxs,
    }


def mbart_decoder_config(config: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``MBartConfig`` describing the Nemotron-Parse decoder."""
    dec = config.get("decoder") or config.get("text_config") or {}
    d_model = int(dec.get("d_model", dec.get("hidden_size", 1024)))
    ffn = dec.get("decoder_ffn_dim", dec.get("encoder_ffn_dim", 4 * d_model))
    layers = dec.get("decoder_layers", dec.get("num_hidden_layers", 10))
    heads = dec.get("decoder_attention_heads", dec.get("encoder_attention_heads", 16))
    vocab = dec.get("vocab_size", config.get("vocab_size"))
    if vocab is None:
        raise ValueError("Nemotron-Parse config has no vocab_size")
    out: dict[str, Any] = {
        "vocab_size": int(vocab),
        "d_model": d_model,
        "decoder_layers": int(layers),
        "decoder_attention_heads": int(heads),
        "decoder_ffn_dim": int(ffn),
        # encoder_* only matter for MBartConfig validation, not for the decoder build
        "encoder_layers": int(dec.get("encoder_layers", layers)),
        "encoder_attention_heads": int(dec.get("encoder_attention_heads", heads)),
        "encoder_ffn_dim": int(dec.get("encoder_ffn_dim", ffn)),
        "activation_function": str(dec.get("activation_function", "gelu")),
        "scale_embedding": bool(dec.get("scale_embedding", True)),
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "decoder_layerdrop": 0.0,
        # the position table is removed after the build; keep the nominal limit for reference
        "max_position_embeddings": int(config.get("max_sequence_length", 1024)),
        "pad_token_id": dec.get("pad_token_id", config.get("pad_token_id", 1)),
        "bos_token_id": dec.get("bos_token_id", config.get("bos_token_id", 0)),
        "eos_token_id": dec.get("eos_token_id", config.get("eos_token_id", 2)),
        "is_decoder": True,
        "add_cross_attention": True,
        "is_encoder_decoder": False,
        "use_cache": True,
        "tie_word_embeddings": False,
    }
    return out


def encoder_tokens(
    config: dict[str, Any], height: int | None = None, width: int | None = None
) -> int:
    """Encoder output length for one image (patch tokens after the (1,4) pool + 1 summary token)."""
    image_size = config.get("image_size") or [2048, 1648]
    h = int(height if height is not None else image_size[0])
    w = int(width if width is not None else image_size[1])
    patch = int(radio_config(config)["patch_size"])
    return (h // patch) * ((w // patch) // _NECK_POOL[1]) + 1


@functools.lru_cache(maxsize=1)
def _classes() -> tuple[type, type]:
    """Create the torch-dependent classes lazily (no torch import at module import time)."""
    import torch
    from torch import nn

    class ZeroPositions(nn.Module):
        """Stands in for ``MBartLearnedPositionalEmbedding``: adds nothing, has no parameters."""

        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("zero", torch.zeros(()), persistent=False)

        def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
            return self.zero

    class NemotronParseModel(nn.Module):
        """RADIO encoder + conv neck + mBART decoder (no position table) + lm_head."""

        def __init__(
            self,
            encoder: nn.Module,
            neck: nn.ModuleDict,
            decoder: nn.Module,
            lm_head: nn.Linear,
            config: dict[str, Any],
        ) -> None:
            super().__init__()
            self.encoder = encoder
            self.neck = neck
            self.decoder = decoder
            self.lm_head = lm_head
            self.config = config

        @property
        def patch_size(self) -> int:
            return int(self.encoder.config.patch_size)

        def encode(self, pixel_values: torch.Tensor) -> torch.Tensor:
            """Pixels (B, 3, H, W) → encoder hidden states (B, (H/p)*((W/p)//4) + 1, 1024)."""
            out = self.encoder(pixel_values)
            features, summary = out.features, out.summary
            batch = features.shape[0]
            rows = pixel_values.shape[-2] // self.patch_size
            cols = pixel_values.shape[-1] // self.patch_size
            x = self.neck["conv1"](features.transpose(1, 2)).transpose(1, 2)
            x = self.neck["layer_norm1"](x)
            x = x.transpose(1, 2).reshape(batch, x.shape[-1], rows, cols)
            x = self.neck["conv2"](x)
            x = self.neck["layer_norm2"](x.flatten(2).transpose(1, 2))
            s = self.neck["layer_norm3"](self.neck["sum_proj"](summary))
            return torch.cat([x, s.unsqueeze(1)], dim=1)

        def forward(
            self,
            pixel_values: torch.Tensor | None = None,
            decoder_input_ids: torch.Tensor | None = None,
            encoder_hidden_states: torch.Tensor | None = None,
            **decoder_kwargs: Any,
        ) -> torch.Tensor:
            """Return logits for ``decoder_input_ids`` (encodes ``pixel_values`` unless states are given)."""
            if encoder_hidden_states is None:
                if pixel_values is None:
                    raise ValueError("need pixel_values or encoder_hidden_states")
                encoder_hidden_states = self.encode(pixel_values)
            out = self.decoder(
                input_ids=decoder_input_ids,
                encoder_hidden_states=encoder_hidden_states,
                **decoder_kwargs,
            )
            return self.lm_head(out.last_hidden_state)

    return ZeroPositions, NemotronParseModel


def build_nemotron_parse(
    config: dict[str, Any],
    *,
    device: str = "meta",
    dtype: str | Any = "bfloat16",
    init_weights: bool | None = None,
    attn_implementation: str | None = None,
) -> nn.Module:
    """Build Nemotron-Parse from its raw ``config.json`` dict (see module docstring)."""
    from torch import nn
    from transformers.models.mbart.configuration_mbart import MBartConfig
    from transformers.models.mbart.modeling_mbart import MBartDecoder
    from transformers.models.radio.configuration_radio import RadioConfig
    from transformers.models.radio.modeling_radio import RadioModel

    torch_dtype = resolve_dtype(dtype, config)
    if init_weights is None:
        init_weights = device != "meta"
    zero_positions_cls, model_cls = _classes()

    radio_cfg = RadioConfig(**radio_config(config))
    dec_cfg = MBartConfig(**mbart_decoder_config(config))
    for cfg in (radio_cfg, dec_cfg):
        cfg.dtype = torch_dtype
        if attn_implementation is not None:
            cfg._attn_implementation = attn_implementation
    tie = bool(config.get("tie_word_embeddings", False))
    width = radio_cfg.hidden_size
    neck_width = dec_cfg.d_model  # 1024 in every published Nemotron-Parse
    summary_dim = width * len(radio_cfg.summary_idxs)

    with build_context(device, torch_dtype, init_weights=init_weights):
        encoder = RadioModel(radio_cfg)
        neck = nn.ModuleDict(
            {
                "conv1": nn.Conv1d(width, neck_width, kernel_size=1),
                "layer_norm1": nn.LayerNorm(neck_width, eps=_NECK_EPS),
                "conv2": nn.Conv2d(
                    neck_width,
                    neck_width,
                    kernel_size=_NECK_POOL,
                    stride=_NECK_POOL,
                    bias=False,
                ),
                "layer_norm2": nn.LayerNorm(neck_width, eps=_NECK_EPS),
                "sum_proj": nn.Linear(summary_dim, neck_width),
                "layer_norm3": nn.LayerNorm(neck_width, eps=_NECK_EPS),
            }
        )
        # Build with a 1-row position table (no transient allocation of the unused
        # table), swap it for the zero module, then restore the nominal limit.
        nominal_positions = dec_cfg.max_position_embeddings
        dec_cfg.max_position_embeddings = 1
        decoder = MBartDecoder(dec_cfg)
        decoder.embed_positions = zero_positions_cls()
        dec_cfg.max_position_embeddings = nominal_positions
        decoder.max_target_positions = nominal_positions
        if tie:
            # allocate nothing for the head: it shares the embedding matrix
            lm_head = nn.Linear(
                dec_cfg.d_model, dec_cfg.vocab_size, bias=False, device="meta"
            )
            lm_head.weight = decoder.embed_tokens.weight
        else:
            lm_head = nn.Linear(dec_cfg.d_model, dec_cfg.vocab_size, bias=False)
    return model_cls(encoder, neck, decoder, lm_head, copy.deepcopy(config))
