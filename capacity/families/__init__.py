"""The one registry of model-family adapters, keyed by config.json's `model_type`.

Each adapter turns a raw config.json dict into a `ModelSpec`: encoder tokens per item and
modality, the decoder's KV layers, vLLM's max_model_len rule and how vLLM 0.33 serves it.
"""

from __future__ import annotations

from typing import Any, Protocol

from capacity.config_limits import check_config_sizes
from capacity.errors import BadInput
from capacity.spec import ModelSpec


class FamilyAdapter(Protocol):
    family: str
    model_types: tuple[str, ...]

    def spec(self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None) -> ModelSpec: ...


_REGISTRY: dict[str, FamilyAdapter] = {}


def register(adapter: FamilyAdapter) -> FamilyAdapter:
    for model_type in adapter.model_types:
        _REGISTRY[model_type] = adapter
    return adapter


def supported_model_types() -> list[str]:
    _load()
    return sorted(_REGISTRY)


def adapter_for(config: dict[str, Any]) -> FamilyAdapter:
    """The adapter for a config; unknown architectures fail closed with a one-line BadInput."""
    _load()
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in _REGISTRY:
        return _REGISTRY[model_type]
    from capacity.families.decoder_only import DECODER_ONLY, looks_decoder_only

    if looks_decoder_only(config):
        return DECODER_ONLY
    archs = config.get("architectures") or []
    raise BadInput(
        f"unsupported architecture (model_type={model_type!r}, architectures={archs}): capacity knows "
        f"{', '.join(supported_model_types())} and plain *ForCausalLM decoders; open an issue with the config.json"
    )


def model_spec(config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None) -> ModelSpec:
    check_config_sizes(config)  # absurd sizes are refused before an adapter builds per-layer lists from them
    return adapter_for(config).spec(config, name, preprocessor)


def _load() -> None:
    if _REGISTRY:
        return
    # Importing a family module registers its adapter.
    from capacity.families import (  # noqa: F401
        bart,
        florence2,
        gemma3,
        mllama,
        nemotron_parse,
        qwen2_5_vl,
        t5,
        whisper,
    )
