"""The model families: every module of this package that defines a `FAMILY` (a `capacity.family.Family`).

No list to edit: the package's modules are discovered, so a new family is one new file. A config goes to
the family whose `model_types` hold its `model_type`; failing that, to the first fallback family (lowest
`fallback_rank`) that `claims` it; failing that, it is refused in one line.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import Any

from capacity.config_limits import check_config_sizes
from capacity.errors import BadInput
from capacity.family import Family
from capacity.spec import ModelSpec


@lru_cache(maxsize=1)
def all_families() -> tuple[Family, ...]:
    """Every family of this package, by name."""
    found: dict[str, Family] = {}
    for module in pkgutil.iter_modules(__path__):
        if module.name.startswith("_"):
            continue
        family = getattr(importlib.import_module(f"{__name__}.{module.name}"), "FAMILY", None)
        if isinstance(family, Family):
            if family.name in found:
                raise RuntimeError(f"two families are named {family.name!r}")
            found[family.name] = family
    return tuple(found[name] for name in sorted(found))


@lru_cache(maxsize=1)
def _by_model_type() -> dict[str, Family]:
    claims: dict[str, Family] = {}
    for family in all_families():
        for model_type in family.model_types:
            if model_type in claims:
                raise RuntimeError(f"model_type {model_type!r} is claimed by {claims[model_type].name} and {family.name}")
            claims[model_type] = family
    return claims


def _fallbacks() -> list[Family]:
    return sorted((f for f in all_families() if f.fallback_rank is not None), key=lambda f: f.fallback_rank or 0)


def supported_model_types() -> list[str]:
    return sorted(_by_model_type())


def family_named(name: str) -> Family:
    for family in all_families():
        if family.name == name:
            return family
    raise BadInput(f"unknown model family {name!r}: capacity knows {', '.join(f.name for f in all_families())}")


def family_for(config: dict[str, Any]) -> Family:
    """The family that plans this config; a config no family claims fails closed with a one-line BadInput."""
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in _by_model_type():
        return _by_model_type()[model_type]
    for family in _fallbacks():
        if family.claims(config):
            return family
    archs = config.get("architectures") or []
    raise BadInput(
        f"unsupported architecture (model_type={model_type!r}, architectures={archs}): capacity knows "
        f"{', '.join(supported_model_types())} and plain *ForCausalLM decoders; open an issue with the config.json"
    )


def model_spec(
    config: dict[str, Any],
    name: str,
    preprocessor: dict[str, Any] | None = None,
    processor: dict[str, Any] | None = None,
    video_preprocessor: dict[str, Any] | None = None,
) -> ModelSpec:
    """The spec of a config; `preprocessor` / `processor` / `video_preprocessor` are the model's
    preprocessor_config.json / processor_config.json / video_preprocessor_config.json."""
    check_config_sizes(config)  # absurd sizes are refused before a family builds per-layer lists from them
    return family_for(config).spec_from_files(config, name, preprocessor, processor, video_preprocessor)
