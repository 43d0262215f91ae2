"""Map the remote-code Florence-2 ``config.json`` to transformers' native format.

``microsoft/Florence-2-large`` publishes ``text_config.model_type =
"florence2_language"`` and ``vision_config.model_type = "davit"``; transformers'
native ``Florence2Config`` (as used by ``florence-community/Florence-2-large``)
expects a BART ``text_config`` and a ``Florence2VisionConfig``
(``model_type = "florence_vision"``).  Pure Python: no torch import.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["is_remote_code_format", "to_native_florence2_config"]

# davit (remote code) key -> Florence2VisionConfig key; identical names pass through.
_VISION_RENAMES: dict[str, str] = {"dim_embed": "embed_dim", "in_chans": "in_channels"}
_VISION_KEYS: tuple[str, ...] = (
    "in_channels",
    "depths",
    "patch_size",
    "patch_stride",
    "patch_padding",
    "patch_prenorm",
    "embed_dim",
    "num_heads",
    "num_groups",
    "window_size",
    "drop_path_rate",
    "mlp_ratio",
    "qkv_bias",
    "activation_function",
    "projection_dim",
    "max_temporal_embeddings",
    "max_position_embeddings",
    "initializer_range",
)
# The native projector hard-codes these; anything else cannot be represented.
_NATIVE_FEATURE_SOURCE = ["spatial_avg_pool", "temporal_avg_pool"]
_TOP_LEVEL_DROP = ("auto_map", "vocab_size", "projection_dim", "ignore_index")


def is_remote_code_format(config: dict[str, Any]) -> bool:
    """True for the ``florence2_language`` / ``davit`` (trust_remote_code) layout."""
    text_type = (config.get("text_config") or {}).get("model_type")
    vision_type = (config.get("vision_config") or {}).get("model_type")
    return text_type == "florence2_language" or vision_type == "davit"


def _map_vision(vision: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"model_type": "florence_vision"}
    for key, value in vision.items():
        key = _VISION_RENAMES.get(key, key)
        if key in _VISION_KEYS:
            out[key] = copy.deepcopy(value)
    temporal = vision.get("visual_temporal_embedding") or {}
    if "max_temporal_embeddings" in temporal:
        out["max_temporal_embeddings"] = int(temporal["max_temporal_embeddings"])
    pos = vision.get("image_pos_embed") or {}
    if pos:
        if pos.get("type", "learned_abs_2d") != "learned_abs_2d":
            raise ValueError(
                f"unsupported Florence-2 image_pos_embed type {pos.get('type')!r}"
            )
        if "max_pos_embeddings" in pos:
            out["max_position_embeddings"] = int(pos["max_pos_embeddings"])
    if temporal and temporal.get("type", "COSINE") != "COSINE":
        raise ValueError(
            f"unsupported Florence-2 temporal embedding {temporal.get('type')!r}"
        )
    source = vision.get("image_feature_source")
    if source is not None and list(source) != _NATIVE_FEATURE_SOURCE:
        raise ValueError(
            f"native Florence2 only supports image_feature_source={_NATIVE_FEATURE_SOURCE}"
        )
    if "projection_dim" not in out and "projection_dim" in top:
        out["projection_dim"] = int(top["projection_dim"])
    return out


def to_native_florence2_config(config: dict[str, Any]) -> dict[str, Any]:
    """Return a native ``Florence2Config`` dict; native-format input is returned (copied) as is."""
    if not is_remote_code_format(config):
        return copy.deepcopy(config)
    out = {k: copy.deepcopy(v) for k, v in config.items() if k not in _TOP_LEVEL_DROP}
    out["model_type"] = "florence2"
    text = copy.deepcopy(config.get("text_config") or {})
    text["model_type"] = "bart"
    if "vocab_size" not in text and "vocab_size" in config:
        text["vocab_size"] = config["vocab_size"]
    out["text_config"] = text
    out["vision_config"] = _map_vision(config.get("vision_config") or {}, config)
    # Native Florence2 ties lm_head to the BART shared embedding, as the original did.
    out.setdefault("tie_word_embeddings", True)
    out.setdefault("is_encoder_decoder", True)
    return out
