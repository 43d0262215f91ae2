"""What a checkpoint stores, from its safetensors headers alone: tensors, elements and bytes per dtype.

One summary type for every place the headers come from: a model folder on disk, the Hub (headers read with
HTTP ranges, capacity/source/hub_http.py, never the weights), or a summary recorded earlier (the
HF assets cache, or a catalog entry). The weights term reads it the same way whatever the source
(`capacity/memory/weights.py`).

A published index's `metadata` is not a source: `total_size` cannot say which bytes are 16-bit and which fp32,
and `total_parameters` (transformers' `num_parameters()` at save time) can count a tied LM head that is not stored:
google/medgemma-27b-it's index records 28,842,036,848 parameters and 54,864,813,280 bytes of BF16, and the
difference, 28,842,036,848 - 54,864,813,280 / 2 = 1,409,630,208 = 262,208 x 5,376, is the embedding counted a
second time (its weight_map stores only embed_tokens).

Pure Python: no torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capacity.errors import BadInput
from capacity.source.safetensors_header import SAFETENSORS_DTYPE_BYTES, read_safetensors_header

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
SUMMARY_FORMAT = "capacity.safetensors-summary/1"
# Dtypes vLLM casts to the serving dtype when it loads an unquantized checkpoint. In a quantized checkpoint
# (any dtype outside these) only the 16-bit tensors (embeddings, norms, the unquantized layers) are cast; the
# quantized weights and their scales and zero points (integers, fp8, fp4, e8m0, and fp32 scales) keep their bytes.
CAST_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})
CAST_WHEN_QUANTIZED = frozenset({"F16", "BF16"})


@dataclass(frozen=True)
class CheckpointWeights:
    """A checkpoint's stored tensors, summed from its safetensors headers (or from its index's metadata)."""

    source: str  # how it was read, for the weights term's method
    element_count: int  # tensor elements as stored (each stored tensor once: tied weights stored once count once)
    data_bytes: int  # bytes of tensor data as stored (data_offsets)
    tensor_count: int
    files: tuple[str, ...] = ()
    elements_by_dtype: dict[str, int] = field(default_factory=dict)
    bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    # every stored tensor as the headers name it: (name, shape, safetensors dtype); () when only the totals are known
    # (a summary recorded before the names were kept)
    tensors: tuple[tuple[str, tuple[int, ...], str], ...] = field(default=(), repr=False, compare=False)

    @property
    def quantized_dtypes(self) -> tuple[str, ...]:
        """Stored dtypes that make this a quantized checkpoint (none for an all-float one)."""
        return tuple(sorted(d for d in self.bytes_by_dtype if d not in CAST_DTYPES))

    def serving_bytes(self, dtype_bytes: int) -> int:
        """Bytes once vLLM has loaded it: unquantized, every float tensor in the serving dtype; quantized, the 16-bit
        tensors in the serving dtype and everything else (quantized weights, scales, zero points) as stored."""
        cast = CAST_WHEN_QUANTIZED if self.quantized_dtypes else CAST_DTYPES
        kept = sum(n for d, n in self.bytes_by_dtype.items() if d not in cast)
        return sum(n for d, n in self.elements_by_dtype.items() if d in cast) * dtype_bytes + kept

    def tensors_dict(self) -> dict[str, Any]:
        """The named tensors, recorded beside the summary (`to_dict`) in the HF assets cache."""
        return {"tensors": [[name, list(shape), dtype] for name, shape, dtype in self.tensors]}

    def to_dict(self) -> dict[str, Any]:
        """The recorded summary format (`SUMMARY_FORMAT`; documented in capacity/source/catalog/README.md)."""
        return {
            "format": SUMMARY_FORMAT,
            "source": self.source,
            "files": list(self.files),
            "tensor_count": self.tensor_count,
            "element_count": self.element_count,
            "data_bytes": self.data_bytes,
            "elements_by_dtype": dict(sorted(self.elements_by_dtype.items())),
            "bytes_by_dtype": dict(sorted(self.bytes_by_dtype.items())),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str, source: str | None = None) -> CheckpointWeights:
        """Read a recorded summary; a file in another format is bad input naming `where`."""
        if data.get("format") != SUMMARY_FORMAT:
            raise BadInput(f"{where}: not a {SUMMARY_FORMAT} summary (format {data.get('format')!r}): delete or re-record it")
        try:
            elements = {str(k): int(v) for k, v in data["elements_by_dtype"].items()}
            nbytes = {str(k): int(v) for k, v in data["bytes_by_dtype"].items()}
            weights = cls(
                source=source or str(data["source"]),
                element_count=int(data["element_count"]),
                data_bytes=int(data["data_bytes"]),
                tensor_count=int(data["tensor_count"]),
                files=tuple(str(f) for f in data["files"]),
                elements_by_dtype=elements,
                bytes_by_dtype=nbytes,
                tensors=tuple((str(n), tuple(int(d) for d in shape), str(dtype)) for n, shape, dtype in data.get("tensors") or ()),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadInput(f"{where}: malformed safetensors summary ({type(exc).__name__}: {exc}): delete or re-record it") from exc
        if sum(elements.values()) != weights.element_count or sum(nbytes.values()) != weights.data_bytes:
            raise BadInput(f"{where}: safetensors summary totals do not match its per-dtype sums: delete or re-record it")
        return weights


def summarize_headers(headers: Mapping[str, Mapping[str, Any]], source: str) -> CheckpointWeights:
    """Sum headers {file name: {tensor name: {dtype, shape, data_offsets}}}; a header that does not add up is
    bad input naming its file (a corrupt or truncated header must not be planned)."""
    elements: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    named: list[tuple[str, tuple[int, ...], str]] = []
    for file, header in headers.items():
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype, numel, size = _tensor(file, name, info)
            elements[dtype] = elements.get(dtype, 0) + numel
            nbytes[dtype] = nbytes.get(dtype, 0) + size
            named.append((name, tuple(int(d) for d in info["shape"]), dtype))
    return CheckpointWeights(
        source=source,
        element_count=sum(elements.values()),
        data_bytes=sum(nbytes.values()),
        tensor_count=len(named),
        files=tuple(headers),
        elements_by_dtype=elements,
        bytes_by_dtype=nbytes,
        tensors=tuple(named),
    )


def _tensor(file: str, name: str, info: Any) -> tuple[str, int, int]:
    """(dtype, elements, bytes) of one header entry, checked: known dtype, sane offsets, bytes = elements x size."""
    bad = f"corrupt safetensors header in {file}: tensor {name!r}"
    if not isinstance(info, Mapping):
        raise BadInput(f"{bad} is not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in SAFETENSORS_DTYPE_BYTES:
        raise BadInput(f"{bad} has unknown dtype {dtype!r}")
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise BadInput(f"{bad} has a bad shape {shape!r}")
    if not isinstance(offsets, (list, tuple)) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets) or not 0 <= offsets[0] <= offsets[1]:
        raise BadInput(f"{bad} has bad data_offsets {offsets!r}")
    numel = 1
    for d in shape:
        numel *= d
    size = offsets[1] - offsets[0]
    per = SAFETENSORS_DTYPE_BYTES[dtype]
    if float(per).is_integer() and size != numel * int(per):
        raise BadInput(f"{bad}: {size} bytes for {numel} x {dtype} elements")
    return str(dtype), numel, size


def folder_weights(folder: Path, *, strict: bool = True) -> CheckpointWeights | None:
    """The safetensors headers of the shards in a model folder: those its index names, else every *.safetensors.

    None when the folder holds no shard (an index alone does not count, see the module's docstring). With `strict` (a folder the user gave), an index naming shards some of
    which are missing is bad input; otherwise (an HF cache snapshot, where a partial download is normal) it is None.
    """
    index_path = folder / INDEX_FILE
    if index_path.is_file():
        shards = sorted({str(v) for v in _read_index(index_path)["weight_map"].values()})
        missing = [s for s in shards if not (folder / s).is_file()]
        if len(missing) == len(shards):
            return None
        if missing:
            if not strict:
                return None
            raise BadInput(f"{index_path} names {len(shards)} shards but {len(missing)} are missing (first: {missing[0]}): complete the folder or remove the index")
        paths = [folder / s for s in shards]
    else:
        paths = sorted(folder.glob("*.safetensors"))
    if not paths:
        return None
    headers: dict[str, Mapping[str, Any]] = {}
    for path in paths:
        try:
            headers[path.name] = read_safetensors_header(os.fspath(path))
        except (OSError, ValueError, TypeError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise BadInput(f"cannot read the safetensors header of {path}: {_reason(exc)} (a truncated or corrupt file)") from exc
    return summarize_headers(headers, "safetensors headers of the model folder")


def _read_index(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read {path}: {_reason(exc)}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("weight_map"), dict):
        raise BadInput(f"{path} is not a safetensors index (an object with a weight_map)")
    return data


def _reason(exc: BaseException) -> str:
    return " ".join(str(getattr(exc, "strerror", None) or exc).split())[:200]
