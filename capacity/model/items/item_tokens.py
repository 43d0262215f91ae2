"""One max-size item's tokens as a family counts them, and the check the model-specific counters read configs with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ItemTokens:
    """Tokens of one max-size item of a modality, and how they were obtained."""

    modality: str
    tokens: int
    method: str  # "processor", "model", "vLLM rule", or "fallback formula"
    detail: str
    unmodelled: str = ""  # why vLLM's tokens for this item cannot be counted ("" = they are; tokens is then 0)
    image_size: tuple[int, int] | None = None  # (height, width) of the dummy image those tokens were counted on
    encoder_positions: int | None = None  # positions the encoder runs for the item, when not its tokens (LLaVA-NeXT tiles)


def positive(where: dict[str, Any], key: str, name: str) -> int:
    """`where[key]` when it is a positive integer; LookupError naming `name.key` else."""
    value = where.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise LookupError(f"{name}.{key} is {value!r}, not a positive integer")
    return value
