"""Which family plans a config, and the `ModelSpec` of a resolved model.

A config goes to the family whose `model_types` hold its `model_type`; failing that, to the first fallback family
(lowest `fallback_rank`) that `claims` it; failing that, it is refused in one line.

Only the family a config needs is imported (a plan is mostly imports): `declared_families` reads each family
module's own declaration (`model_types = (...)`, `fallback_rank = N` in its class body) from its source text, without
importing it; the module found is imported and its FAMILY checked to claim what its source declared, else every
family is imported (`all_families`). tests/model/test_registry.py checks the declarations read equal the imported
families' attributes, so a family whose claims cannot be read this way fails a test, not a plan.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from capacity.errors import BadInput
from capacity.model.config_limits import check_config_sizes
from capacity.model.family import FAMILIES_PACKAGE, Family, all_families
from capacity.model.hf_overrides import shapes_unchanged, with_hf_overrides
from capacity.model.spec import ModelSpec, derived_max_model_len_before_0_30, scaled_max_model_len
from capacity.source.resolve import ModelSource, resolve_model

_MODEL_TYPES = re.compile(r"^    model_types(?:\s*:[^=\n]+)?\s*=\s*\(([^)]*)\)", re.M)
_FALLBACK_RANK = re.compile(r"^    fallback_rank(?:\s*:[^=\n]+)?\s*=\s*(\d+|None)\b", re.M)
_STRING = re.compile(r"\"([^\"]+)\"|'([^']+)'")


@lru_cache(maxsize=1)
def declared_families() -> tuple[dict[str, str], tuple[tuple[int, str], ...], bool]:
    """({model_type: family module}, ((fallback_rank, module), ... by rank), whether every module was read) as the
    family modules' sources declare them, read without importing any (a module declaring either twice is not read)."""
    import capacity.model.families as package

    by_type: dict[str, str] = {}
    fallbacks: list[tuple[int, str]] = []
    complete = True
    for path in sorted(p for folder in package.__path__ for p in Path(folder).glob("*.py")):
        if path.name.startswith("_"):
            continue
        text = path.read_text(encoding="utf-8")
        types, ranks = _MODEL_TYPES.findall(text), _FALLBACK_RANK.findall(text)
        if len(types) > 1 or len(ranks) > 1:
            complete = False
            continue
        for found in _STRING.findall(types[0]) if types else ():
            by_type.setdefault(found[0] or found[1], path.stem)
        if ranks and ranks[0] != "None":
            fallbacks.append((int(ranks[0]), path.stem))
    return by_type, tuple(sorted(fallbacks)), complete


def _family_module(module: str) -> Family | None:
    family = getattr(importlib.import_module(f"{FAMILIES_PACKAGE}.{module}"), "FAMILY", None)
    return family if isinstance(family, Family) else None


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


def _declared_family_for(config: dict[str, Any]) -> Family | None:
    """family_for through the declared families, importing only those it asks; None where a declaration and its
    module disagree (then every family is imported)."""
    by_type, fallbacks, complete = declared_families()
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in by_type:
        family = _family_module(by_type[model_type])
        return family if family is not None and model_type in family.model_types else None
    if not complete:  # an unread module may claim this model_type
        return None
    for rank, module in fallbacks:
        family = _family_module(module)
        if family is None or family.fallback_rank != rank:
            return None
        if family.claims(config):
            return family
    return None


def family_for(config: dict[str, Any]) -> Family:
    """The family that plans this config; a config no family claims fails closed with a one-line BadInput."""
    declared = _declared_family_for(config)
    if declared is not None:
        return declared
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


def with_mm_processor_kwargs(source: ModelSource, kwargs: dict[str, Any] | None) -> ModelSource:
    """The model source as vLLM's processors see it under --mm-processor-kwargs: its processor configs overridden by
    the family's reading of the kwargs (refused in one line where the family does not model them)."""
    if not kwargs:
        return source
    files = dict(source.files)
    if source.preprocessor is not None:
        files["preprocessor_config.json"] = source.preprocessor
    files = family_for(source.config).with_processor_kwargs(source.config, files, dict(kwargs))
    return replace(source, preprocessor=files.get("preprocessor_config.json"), files=files)


def spec_from_files(
    config: dict[str, Any],
    name: str,
    preprocessor: dict[str, Any] | None = None,
    processor: dict[str, Any] | None = None,
    video_preprocessor: dict[str, Any] | None = None,
) -> ModelSpec:
    """The spec of a config; `preprocessor` / `processor` / `video_preprocessor` are the model's
    preprocessor_config.json / processor_config.json / video_preprocessor_config.json."""
    check_config_sizes(config)  # absurd sizes are refused before a family builds per-layer lists from them
    family = family_for(config)
    spec = family.spec_from_files(config, name, preprocessor, processor, video_preprocessor)
    text = family.text_config(config)
    if spec.derived_max_model_len != scaled_max_model_len(text)[0]:  # a length of the family's own (encoder-decoder, ...)
        return spec
    before = derived_max_model_len_before_0_30(text, str(config.get("model_type", "")), spec.derived_max_model_len)
    return replace(spec, derived_max_model_len_before_0_30=before)


def model_spec(source: ModelSource) -> ModelSpec:
    """The spec of a resolved model, from its config.json and every processor file it publishes."""
    return spec_from_files(source.config, source.name, source.preprocessor, source.processor, source.video_preprocessor)


def with_config_overrides(source: ModelSource, overrides: dict[str, Any] | None) -> ModelSource:
    """The model source as vLLM reads it under --hf-overrides: its config.json with the overrides applied
    (capacity/model/hf_overrides.py). Overrides of RoPE keys alone keep the parameters of the original config (its
    recorded table, its cached meta build); any other key counts them afresh from the overridden one."""
    if not overrides:
        return source
    kept = source.shapes_config if shapes_unchanged(overrides, source.config) else None
    return replace(source, config=with_hf_overrides(source.config, overrides), config_before_overrides=kept)


def load_model(
    model: str, revision: str | None = None, mm_processor_kwargs: dict[str, Any] | None = None, hf_overrides: dict[str, Any] | None = None
) -> tuple[ModelSource, ModelSpec]:
    """`--model` (and `--revision`) resolved, its config overridden by `--hf-overrides`, its processor files by
    `--mm-processor-kwargs`, and its spec."""
    source = with_mm_processor_kwargs(with_config_overrides(resolve_model(model, revision), hf_overrides), mm_processor_kwargs)
    return source, model_spec(source)
