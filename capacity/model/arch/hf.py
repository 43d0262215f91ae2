"""Builders for architectures that transformers implements natively.

torch / transformers are imported inside functions only (package layering rule).
Models are built with ``Model._from_config`` under a ``torch.device(...)`` context,
so on ``meta`` no memory is allocated and on ``cuda`` every tensor is created
directly on the GPU in the requested dtype (no CPU copy).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from torch import nn

__all__ = [
    "build_causal_lm",
    "build_context",
    "build_hf_class",
    "make_config",
    "resolve_dtype",
]

_DTYPE_ALIASES: dict[str, str] = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "float16": "float16",
    "fp32": "float32",
    "float": "float32",
    "float32": "float32",
}


def resolve_dtype(
    dtype: str | Any, config: dict[str, Any] | None = None
) -> torch.dtype:
    """Map ``"bfloat16"``/``"bf16"``/``"auto"``/a ``torch.dtype`` to a ``torch.dtype``.

    ``"auto"`` uses the config's ``torch_dtype`` / ``dtype`` (default bfloat16).
    """
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).removeprefix("torch.").lower()
    if name == "auto":
        cfg_dtype = None
        if config is not None:
            cfg_dtype = config.get("torch_dtype") or config.get("dtype")
        name = str(cfg_dtype or "bfloat16").removeprefix("torch.").lower()
    if name not in _DTYPE_ALIASES:
        raise ValueError(f"unsupported dtype {dtype!r}")
    return getattr(torch, _DTYPE_ALIASES[name])


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@contextlib.contextmanager
def build_context(
    device: str, dtype: torch.dtype, *, init_weights: bool
) -> Iterator[None]:
    """Create tensors on ``device`` with default float dtype ``dtype``.

    With ``init_weights=False`` torch / transformers weight initialisation is
    skipped (tensors keep whatever ``torch.empty`` gives), which is what makes a
    meta build take well under a second per billion parameters.
    """
    import torch

    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.device(device))
        stack.enter_context(_default_dtype(dtype))
        if not init_weights:
            from transformers.initialization import no_init_weights

            stack.enter_context(no_init_weights())
        yield


def make_config(model_type: str, config: dict[str, Any]) -> Any:
    """``CONFIG_MAPPING[model_type](**config)`` on a deep copy of the raw dict."""
    from transformers import CONFIG_MAPPING

    raw = copy.deepcopy(config)
    raw.pop("model_type", None)
    return CONFIG_MAPPING[model_type](**raw)


def _model_class(name: str) -> Any:
    import transformers

    try:
        return getattr(transformers, name)
    except AttributeError as exc:
        raise ValueError(f"transformers {transformers.__version__} has no model class {name!r}") from exc


def _kwargs(torch_dtype: torch.dtype, attn_implementation: str | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    return kwargs


def build_hf_class(
    class_name: str,
    config: dict[str, Any],
    *,
    model_type: str | None = None,
    device: str = "meta",
    dtype: str | Any = "bfloat16",
    init_weights: bool | None = None,
    attn_implementation: str | None = None,
) -> nn.Module:
    """Build transformers' ``class_name`` from a raw ``config.json`` dict (not modified).

    The config object is ``CONFIG_MAPPING[model_type]`` (default: the dict's own ``model_type``).
    """
    model_type = model_type or config.get("model_type")
    if not model_type:
        raise ValueError(f"building {class_name} needs a 'model_type' in the config")
    torch_dtype = resolve_dtype(dtype, config)
    if init_weights is None:
        init_weights = device != "meta"
    cfg = make_config(str(model_type), config)
    model_cls = _model_class(class_name)
    with build_context(device, torch_dtype, init_weights=init_weights):
        model = model_cls._from_config(cfg, **_kwargs(torch_dtype, attn_implementation))
    return _finish(model, init_weights)


def build_causal_lm(
    config: dict[str, Any],
    *,
    device: str = "meta",
    dtype: str | Any = "bfloat16",
    init_weights: bool | None = None,
    attn_implementation: str | None = None,
) -> nn.Module:
    """``AutoModelForCausalLM`` for the dict's ``model_type`` (a plain decoder-only LLM)."""
    from transformers import AutoModelForCausalLM

    model_type = config.get("model_type")
    if not model_type:
        raise ValueError("a causal LM config needs a 'model_type'")
    torch_dtype = resolve_dtype(dtype, config)
    if init_weights is None:
        init_weights = device != "meta"
    cfg = make_config(str(model_type), config)
    with build_context(device, torch_dtype, init_weights=init_weights):
        model = AutoModelForCausalLM.from_config(cfg, **_kwargs(torch_dtype, attn_implementation))
    return _finish(model, init_weights)


def _finish(model: nn.Module, init_weights: bool) -> nn.Module:
    """Re-tie shared weights when initialisation was skipped.

    ``no_init_weights`` replaces ``PreTrainedModel.init_weights``, which is also where
    transformers ties embeddings / lm_head; without this, BART would carry four
    copies of its embedding matrix.
    """
    if not init_weights:
        model.tie_weights()  # type: ignore[operator]
    return model
