"""Parameter sizes from safetensors headers only (pure Python, no torch).

A safetensors file starts with an 8-byte little-endian unsigned length ``N``
followed by ``N`` bytes of UTF-8 JSON.  Every key except ``__metadata__`` maps
to ``{"dtype": str, "shape": [int, ...], "data_offsets": [begin, end]}``.
Only the header is read; tensor data is never touched.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

__all__ = [
    "SAFETENSORS_DTYPE_BYTES",
    "SafetensorsSummary",
    "read_safetensors_header",
    "safetensors_files",
    "safetensors_parameter_bytes",
    "safetensors_parameter_count",
    "safetensors_summary",
]

# Bytes per element for the dtype names used by the safetensors format.
SAFETENSORS_DTYPE_BYTES: dict[str, float] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
    "C64": 8,
    "F4": 0.5,
    "F6_E2M3": 0.75,
    "F6_E3M2": 0.75,
}

_MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format itself caps headers at 100 MB
_INDEX_NAME = "model.safetensors.index.json"


@dataclass
class SafetensorsSummary:
    """Aggregate of one or more safetensors headers."""

    files: list[str] = field(default_factory=list)
    tensor_count: int = 0
    element_count: int = 0
    data_bytes: int = 0
    bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    elements_by_dtype: dict[str, int] = field(default_factory=dict)


def read_safetensors_header(path: str) -> dict[str, dict[str, object]]:
    """Return the JSON header of one ``.safetensors`` file (``__metadata__`` removed)."""
    with open(path, "rb") as fh:
        raw_len = fh.read(8)
        if len(raw_len) != 8:
            raise ValueError(f"{path}: file too short for a safetensors header")
        (header_len,) = struct.unpack("<Q", raw_len)
        if header_len > _MAX_HEADER_BYTES:
            raise ValueError(
                f"{path}: implausible safetensors header length {header_len}"
            )
        raw = fh.read(header_len)
        if len(raw) != header_len:
            raise ValueError(f"{path}: truncated safetensors header")
    header = json.loads(raw.decode("utf-8"))
    if not isinstance(header, dict):
        raise TypeError(f"{path}: safetensors header is not a JSON object")
    header.pop("__metadata__", None)
    return header


def safetensors_files(folder: str) -> list[str]:
    """Weight files of a local model folder.

    Uses ``model.safetensors.index.json`` (any ``*.safetensors.index.json``) when
    present, so only the shards the index references are counted; otherwise all
    ``*.safetensors`` files in the folder.
    """
    if os.path.isfile(folder):
        return [folder]
    names = sorted(os.listdir(folder))
    index_names = [n for n in names if n.endswith(".safetensors.index.json")]
    if _INDEX_NAME in index_names:
        index_names = [_INDEX_NAME]
    if index_names:
        shards: set[str] = set()
        for index_name in index_names:
            with open(os.path.join(folder, index_name), encoding="utf-8") as fh:
                index = json.load(fh)
            weight_map = index.get("weight_map", {})
            shards.update(str(v) for v in weight_map.values())
        return [os.path.join(folder, s) for s in sorted(shards)]
    return [os.path.join(folder, n) for n in names if n.endswith(".safetensors")]


def _numel(shape: object) -> int:
    if not isinstance(shape, list):
        raise TypeError(f"bad tensor shape {shape!r}")
    n = 1
    for dim in shape:
        n *= int(dim)
    return n


def safetensors_summary(folder: str) -> SafetensorsSummary:
    """Sum tensor counts, elements and data bytes over a folder's safetensors headers."""
    summary = SafetensorsSummary()
    files = safetensors_files(folder)
    if not files:
        raise FileNotFoundError(f"no safetensors files in {folder}")
    for path in files:
        summary.files.append(path)
        for name, info in read_safetensors_header(path).items():
            if not isinstance(info, dict):
                raise TypeError(f"{path}: bad header entry for {name!r}")
            dtype = str(info["dtype"])
            begin, end = (int(x) for x in info["data_offsets"])  # type: ignore[union-attr]
            nbytes = end - begin
            numel = _numel(info["shape"])
            summary.tensor_count += 1
            summary.element_count += numel
            summary.data_bytes += nbytes
            summary.bytes_by_dtype[dtype] = (
                summary.bytes_by_dtype.get(dtype, 0) + nbytes
            )
            summary.elements_by_dtype[dtype] = (
                summary.elements_by_dtype.get(dtype, 0) + numel
            )
    return summary


def safetensors_parameter_bytes(folder: str) -> int:
    """Total tensor data bytes stored in a local model folder (headers only).

    Uses the header ``data_offsets`` (exact on-disk size, correct for packed
    sub-byte dtypes).  Tied weights are counted as stored: once if the checkpoint
    stores them once.
    """
    return safetensors_summary(folder).data_bytes


def safetensors_parameter_count(folder: str) -> int:
    """Total number of tensor elements stored in a local model folder (headers only)."""
    return safetensors_summary(folder).element_count
