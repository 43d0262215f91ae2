"""Sanity limits on a config.json's sizes, checked before anything is built from it.

A hostile or corrupt config (`num_hidden_layers: 10**12`, `hidden_size` not a multiple of the heads) must be
refused in one line, not run out of memory building per-layer lists or fail deep inside transformers. The
limits are far above any real model (the largest served models have ~130 layers, 128 heads, widths of
~50k, vocabularies of ~260k and contexts of ~10M tokens) and below what would exhaust a laptop's memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from capacity.errors import BadInput


@dataclass(frozen=True)
class SizeLimit:
    what: str
    keys: frozenset[str]
    maximum: int


LIMITS = (
    SizeLimit(
        "layer count",
        frozenset(
            {"num_hidden_layers", "num_layers", "decoder_layers", "encoder_layers", "num_decoder_layers", "num_encoder_layers", "n_layer", "n_layers", "num_global_layers", "depths"}
        ),
        1024,
    ),
    SizeLimit(
        "head count",
        frozenset({"num_attention_heads", "num_key_value_heads", "encoder_attention_heads", "decoder_attention_heads", "num_heads", "attention_heads", "n_head", "num_kv_heads"}),
        4096,
    ),
    SizeLimit(
        "width",
        frozenset(
            {
                "hidden_size",
                "d_model",
                "intermediate_size",
                "d_ff",
                "d_kv",
                "head_dim",
                "kv_channels",
                "decoder_ffn_dim",
                "encoder_ffn_dim",
                "ffn_dim",
                "embed_dim",
                "dim_embed",
                "n_embd",
                "n_inner",
                "projection_dim",
                "vision_output_dim",
                "mlp_hidden_size",
            }
        ),
        2**20,
    ),
    SizeLimit("vocabulary size", frozenset({"vocab_size"}), 2**24),
    SizeLimit(
        "position count",
        frozenset({"max_position_embeddings", "max_source_positions", "max_target_positions", "n_positions", "max_sequence_length", "original_max_position_embeddings"}),
        2**30,
    ),
    SizeLimit("image size in pixels", frozenset({"image_size", "max_resolution", "cpe_max_size", "patch_size", "spatial_patch_size"}), 16384),
)

# Widths attention splits across heads (transformers' validate_architecture: hidden_size % num_attention_heads;
# BART / Whisper / mBART attention: embed_dim must be divisible by num_heads), unless the config gives the head size.
WIDTH_KEYS = ("hidden_size", "d_model", "embed_dim")
HEAD_KEYS = ("num_attention_heads", "encoder_attention_heads", "decoder_attention_heads", "num_heads", "attention_heads")
HEAD_SIZE_KEYS = ("head_dim", "d_kv", "kv_channels")


def _objects(config: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every JSON object in the config (sub-configs such as text_config, vision_config), with its path."""
    yield path, config
    for key, value in config.items():
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, dict):
                yield from _objects(item, f"{path}{key}.")


def _numbers(value: Any) -> list[int | float]:
    items = value if isinstance(value, list) else [value]
    return [v for v in items if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) else None


def check_config_sizes(config: dict[str, Any], where: str = "config.json") -> None:
    """Refuse (BadInput, one line) sizes beyond LIMITS and widths the attention heads do not divide."""
    limit_of = {key: limit for limit in LIMITS for key in limit.keys}
    for path, obj in _objects(config):
        for key, value in obj.items():
            limit = limit_of.get(key)
            if limit is None:
                continue
            if any(isinstance(v, (str, bool)) for v in (value if isinstance(value, list) else [value])):
                raise BadInput(f"{where}: {path}{key} = {value!r} must be a number: fix the config (or the --hf-overrides value)")
            for number in _numbers(value):
                if isinstance(number, float) and not number.is_integer():
                    raise BadInput(f"{where}: {path}{key} = {number} must be a whole number")
                if number > limit.maximum:
                    raise BadInput(
                        f"{where}: {path}{key} = {int(number):,} is not a plausible {limit.what} (capacity refuses more than {limit.maximum:,}): fix the config"
                    )
        if any(k in obj for k in HEAD_SIZE_KEYS):
            continue
        width_key = next((k for k in WIDTH_KEYS if _as_int(obj.get(k)) is not None), None)
        if width_key is None:
            continue
        width = _as_int(obj[width_key])
        for heads_key in HEAD_KEYS:
            heads = _as_int(obj.get(heads_key))
            if width and heads and heads > 0 and width > 0 and width % heads:
                raise BadInput(
                    f"{where}: {path}{width_key} = {width} is not a multiple of {path}{heads_key} = {heads} "
                    "(each head gets width / heads; transformers and vLLM refuse it): fix the config"
                )
