"""Gemma-3's pan and scan, as vLLM 0.33 counts it under `--mm-processor-kwargs` (vllm/model_executor/models/gemma3_mm.py).

With `do_pan_and_scan` an image wider (or taller) than `pan_and_scan_min_ratio_to_activate` is cut into crops along its
long side, each resized to the tower's 896 x 896, and encoded with the whole image: `(crops + 1) x 256` embeddings
(`Gemma3ProcessingInfo.get_num_image_tokens`). vLLM's dummy image is `image_size` wide and `image_size x
pan_and_scan_max_num_crops` tall (`get_image_size_with_most_features`), and its budget per image is that image's
embeddings; the separators of the placeholder ("Here is the original image ... crops ...", boi / eoi, newlines) are
prompt tokens, not embeddings: vLLM's encoder budget and cache count only the image tokens (`select_token_id`).

The four knobs are read from transformers' `Gemma3ProcessorKwargs._defaults` (the processor's `images_kwargs`), never
from preprocessor_config.json: vLLM's `_merge_kwargs` always carries those defaults, so they win over the image
processor's attributes. Transformers validates the types strictly (a bool for `do_pan_and_scan`, ints for the crop
size and count, a float for the ratio: `2` fails where `2.0` passes), and vLLM's startup fails on a value it rejects.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from capacity.errors import BadInput

KEYS = ("do_pan_and_scan", "pan_and_scan_min_crop_size", "pan_and_scan_max_num_crops", "pan_and_scan_min_ratio_to_activate")


@dataclass(frozen=True)
class PanAndScan:
    """The pan-and-scan settings vLLM's Gemma3ProcessingInfo reads; defaults: Gemma3ProcessorKwargs._defaults."""

    do_pan_and_scan: bool = False
    pan_and_scan_min_crop_size: int = 256
    pan_and_scan_max_num_crops: int = 4
    pan_and_scan_min_ratio_to_activate: float = 1.2

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any], family: str = "Gemma-3") -> PanAndScan:
        """The settings under --mm-processor-kwargs given flat; any other key, or a value transformers' strict
        validation (or vLLM's arithmetic) rejects, is refused in one line."""
        unknown = sorted(set(kwargs) - set(KEYS))
        if unknown:
            hint = "give them flat" if any(k.endswith("_kwargs") for k in unknown) else "plan without it"
            raise BadInput(f"--mm-processor-kwargs {', '.join(unknown)}: not modelled for {family} (capacity models {', '.join(KEYS)}); {hint}")
        settings = cls()
        given: dict[str, Any] = {}
        for key, value in kwargs.items():
            given[key] = checked(key, value, type(getattr(settings, key)))
        return cls(**{**asdict(settings), **given})

    def num_crops(self, width: int, height: int) -> int:
        """Crops besides the whole image (vLLM Gemma3ProcessingInfo.get_num_crops, after Gemma3ImageProcessor.pan_and_scan)."""
        if not self.do_pan_and_scan:
            return 0
        long_side, short_side = (width, height) if width >= height else (height, width)
        if long_side / short_side < self.pan_and_scan_min_ratio_to_activate:
            return 0
        along = min(math.floor(long_side / self.pan_and_scan_min_crop_size), math.floor(long_side / short_side + 0.5))
        along = min(self.pan_and_scan_max_num_crops, max(2, along))
        crop_long = math.ceil(long_side / along)
        if min(crop_long, short_side) < self.pan_and_scan_min_crop_size:
            return 0
        return along

    def image_tokens(self, width: int, height: int, tokens_per_crop: int) -> int:
        """vLLM get_num_image_tokens: (crops + 1) x image_seq_length."""
        return (self.num_crops(width, height) + 1) * tokens_per_crop

    def largest_image(self, native: int) -> tuple[int, int]:
        """(width, height) of vLLM's dummy image (get_image_size_with_most_features): native wide, native x max crops tall."""
        return native, native * self.pan_and_scan_max_num_crops

    def crops_of_largest_image(self, native: int) -> int:
        """Crops the tower encodes for vLLM's dummy image, the whole image included."""
        return self.num_crops(*self.largest_image(native)) + 1

    def describe(self) -> str:
        if not self.do_pan_and_scan:
            return "pan & scan off"
        return (
            f"pan & scan on (min crop {self.pan_and_scan_min_crop_size} px, at most {self.pan_and_scan_max_num_crops} crops, "
            f"from an aspect ratio of {self.pan_and_scan_min_ratio_to_activate})"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def checked(key: str, value: Any, kind: type) -> Any:
    """A value as transformers' strict validation of Gemma3's images_kwargs takes it, and as vLLM's arithmetic survives."""
    if kind is bool:
        if not isinstance(value, bool):
            raise BadInput(f"--mm-processor-kwargs {key}: {value!r} is not true or false (transformers refuses it and vLLM's startup fails)")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadInput(
                f"--mm-processor-kwargs {key}: {value!r} is not a positive integer (transformers refuses a non-integer; vLLM divides by the "
                "crop size and makes its dummy image max_num_crops tall, so 0 or less fails its startup)"
            )
        return value
    if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value):
        raise BadInput(
            f"--mm-processor-kwargs {key}: {value!r} is not a finite decimal number; write it with a point (2.0, not 2): transformers' strict "
            "validation refuses an integer here and vLLM's startup fails"
        )
    return value
