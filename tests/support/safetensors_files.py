"""Safetensors files written by hand for tests and benchmarks: 8-byte little-endian header length, JSON header,
zero-filled data (the format: github.com/huggingface/safetensors, "Format")."""

from __future__ import annotations

import json
import struct
from typing import Any

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U8": 1, "F8_E4M3": 1}


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]], *, metadata: dict[str, str] | None = None, with_data: bool = True) -> bytes:
    """`tensors`: name -> (safetensors dtype, shape). `with_data=False` writes the header alone (what planning reads)."""
    header: dict[str, Any] = {} if metadata is None else {"__metadata__": metadata}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    return struct.pack("<Q", len(blob)) + blob + (bytes(offset) if with_data else b"")
