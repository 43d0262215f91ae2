"""Small helpers the family adapters share for reading config.json dicts."""

from __future__ import annotations

from typing import Any

from capacity.errors import BadInput
from capacity.kv.layers import CrossAttentionLayer, FullAttentionLayer, KVLayer


def need(config: dict[str, Any], key: str, where: str) -> Any:
    """A required config field; missing or non-positive gets a one-line BadInput."""
    value = config.get(key)
    if value is None:
        raise BadInput(f"config.json ({where}) lacks '{key}', which the {where} adapter needs: fix the config")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
        raise BadInput(f"config.json ({where}) has {key}={value}; it must be positive")
    return value


def sub(config: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = config.get(key)
    if not isinstance(value, dict):
        raise BadInput(f"config.json ({where}) lacks the '{key}' object the {where} adapter needs")
    return value


def config_dtype(config: dict[str, Any], *subs: dict[str, Any]) -> str:
    """The checkpoint dtype (`torch_dtype` / `dtype`); vLLM treats a missing one as float32."""
    for c in (config, *subs):
        for key in ("torch_dtype", "dtype"):
            value = c.get(key)
            if isinstance(value, str):
                return value.replace("torch.", "")
    return "float32"


def self_and_cross_layers(num_layers: int, heads: int, head_size: int) -> tuple[KVLayer, ...]:
    """An encoder-decoder decoder: per layer one self-attention and one cross-attention (no GQA)."""
    layers: list[KVLayer] = []
    for _ in range(num_layers):
        layers.append(FullAttentionLayer(heads, head_size))
        layers.append(CrossAttentionLayer(heads, head_size))
    return tuple(layers)
