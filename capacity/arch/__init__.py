"""Real model architectures for the capacity planner.

``build_module`` instantiates the actual torch module of a model from its raw
``config.json`` dict, by default on the ``meta`` device (no memory, fast), so
parameter / buffer sizes can be measured exactly; on ``cuda`` the module is built
directly on the GPU in the requested dtype.

No torch / transformers import at module level (package layering rule): they are
imported inside the functions that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .safetensors_header import (
    read_safetensors_header,
    safetensors_parameter_bytes,
    safetensors_parameter_count,
    safetensors_summary,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = [
    "ARCHES",
    "buffer_bytes",
    "buffer_count",
    "build_module",
    "dtype_breakdown",
    "parameter_bytes",
    "parameter_count",
    "read_safetensors_header",
    "safetensors_parameter_bytes",
    "safetensors_parameter_count",
    "safetensors_summary",
]

ARCHES: tuple[str, ...] = (
    "whisper",
    "bart",
    "mbart",
    "t5",
    "florence2",
    "mllama",
    "qwen2_5_vl",
    "gemma3",
    "nemotron_parse",
    "decoder_only",
)


def build_module(
    arch: str,
    config: dict[str, Any],
    *,
    device: str = "meta",
    dtype: str = "bfloat16",
    init_weights: bool | None = None,
    attn_implementation: str | None = None,
) -> nn.Module:
    """Build the real architecture ``arch`` from a raw ``config.json`` dict.

    Args:
        arch: one of :data:`ARCHES`.
        config: the published ``config.json`` contents (not modified).
        device: ``"meta"`` (default; no storage), ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
            Tensors are created directly on this device.
        dtype: ``"bfloat16"`` / ``"float16"`` / ``"float32"`` (or ``bf16``/``fp16``/``fp32``,
            or ``"auto"`` = the config's ``torch_dtype``).
        init_weights: run weight initialisation; default: only when ``device != "meta"``.
            ``False`` leaves uninitialised memory (fine for memory measurements).
        attn_implementation: optional transformers attention backend (``"sdpa"``, ``"eager"``...).
    """
    if arch not in ARCHES:
        raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHES}")
    if arch == "nemotron_parse":
        from .nemotron_parse import build_nemotron_parse

        return build_nemotron_parse(
            config,
            device=device,
            dtype=dtype,
            init_weights=init_weights,
            attn_implementation=attn_implementation,
        )
    from .hf import build_hf

    return build_hf(
        arch,
        config,
        device=device,
        dtype=dtype,
        init_weights=init_weights,
        attn_implementation=attn_implementation,
    )


def _unique_parameters(module: nn.Module) -> list[Any]:
    # named_parameters() de-duplicates by identity, so tied weights appear once.
    return [p for _, p in module.named_parameters(remove_duplicate=True)]


def _buffers(module: nn.Module, persistent_only: bool) -> list[Any]:
    seen: set[int] = set()
    out: list[Any] = []
    for mod in module.modules():
        non_persistent = getattr(mod, "_non_persistent_buffers_set", set())
        for name, buf in mod._buffers.items():
            if buf is None or id(buf) in seen:
                continue
            if persistent_only and name in non_persistent:
                continue
            seen.add(id(buf))
            out.append(buf)
    return out


def _nbytes(t: Any) -> int:
    return int(t.numel()) * int(t.element_size())


def parameter_count(module: nn.Module) -> int:
    """Number of parameter elements, each tied / shared parameter counted once (buffers excluded)."""
    return sum(int(p.numel()) for p in _unique_parameters(module))


def parameter_bytes(module: nn.Module) -> int:
    """Bytes of the unique parameters in their actual dtypes (bf16 → 2 bytes each)."""
    return sum(_nbytes(p) for p in _unique_parameters(module))


def buffer_count(module: nn.Module, *, persistent_only: bool = True) -> int:
    """Number of buffer elements (persistent ones only by default; e.g. RoPE ``inv_freq`` is not)."""
    return sum(int(b.numel()) for b in _buffers(module, persistent_only))


def buffer_bytes(module: nn.Module, *, persistent_only: bool = True) -> int:
    """Bytes of buffers (persistent ones only by default)."""
    return sum(_nbytes(b) for b in _buffers(module, persistent_only))


def dtype_breakdown(module: nn.Module) -> dict[str, dict[str, int]]:
    """Bytes per dtype, split into ``parameters``, ``buffers`` (persistent) and ``non_persistent_buffers``.

    Use it to spot tensors kept outside the requested dtype (fp32 RoPE tables, int64 index buffers...).
    """
    result: dict[str, dict[str, int]] = {
        "parameters": {},
        "buffers": {},
        "non_persistent_buffers": {},
    }
    persistent = {id(b) for b in _buffers(module, True)}
    groups: list[tuple[str, list[Any]]] = [
        ("parameters", _unique_parameters(module)),
        ("buffers", _buffers(module, True)),
        (
            "non_persistent_buffers",
            [b for b in _buffers(module, False) if id(b) not in persistent],
        ),
    ]
    for key, tensors in groups:
        for t in tensors:
            name = str(t.dtype).removeprefix("torch.")
            result[key][name] = result[key].get(name, 0) + _nbytes(t)
    return result
