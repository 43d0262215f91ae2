"""A library of builders for real model architectures, and measurements of what they hold.

The builders (`build_hf_class`, `build_causal_lm` in `hf.py`, `build_nemotron_parse`, the Florence-2
config mapping) instantiate the actual torch module of a model from its raw ``config.json`` dict, by
default on the ``meta`` device (no memory, fast), so parameter / buffer sizes can be measured exactly; on
``cuda`` the module is built directly on the GPU in the requested dtype. Which builder a model needs is
its family's business (`capacity.model.family.Family.build_module`): this package knows no list of families.

No torch / transformers import at module level (package layering rule): they are
imported inside the functions that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capacity.model.arch.hf import build_causal_lm, build_hf_class

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = [
    "buffer_bytes",
    "buffer_count",
    "build_causal_lm",
    "build_hf_class",
    "dtype_breakdown",
    "parameter_bytes",
    "parameter_count",
]


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
