"""Which family plans a config, and the `ModelSpec` of a resolved model.

A config goes to the family whose `model_types` hold its `model_type`; failing that, to the first fallback family
(lowest `fallback_rank`) that `claims` it; failing that, it is refused in one line.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

from capacity.errors import BadInput
from capacity.model.config_limits import check_config_sizes
from capacity.model.family import Family, all_families
from capacity.model.spec import ModelSpec
from capacity.source.resolve import ModelSource, resolve_model


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
    return family_for(config).spec_from_files(config, name, preprocessor, processor, video_preprocessor)


def model_spec(source: ModelSource) -> ModelSpec:
    """The spec of a resolved model, from its config.json and every processor file it publishes."""
    return spec_from_files(source.config, source.name, source.preprocessor, source.processor, source.video_preprocessor)


def load_model(model: str, revision: str | None = None, mm_processor_kwargs: dict[str, Any] | None = None) -> tuple[ModelSource, ModelSpec]:
    """`--model` (and `--revision`) resolved, its processor files overridden by `--mm-processor-kwargs`, and its spec."""
    source = with_mm_processor_kwargs(resolve_model(model, revision), mm_processor_kwargs)
    return source, model_spec(source)
