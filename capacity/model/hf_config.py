"""A config as vLLM reads it: transformers' config class with its defaults filled in (vLLM loads configs through
AutoConfig), sub-configs as dicts. transformers is imported only for a config neither shipped nor cached."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from typing import Any

from capacity.errors import BadInput


def materialized(config: dict[str, Any]) -> dict[str, Any]:
    """The config with transformers' defaults filled in, sub-configs as dicts (what vLLM's AutoConfig sees)."""
    return json.loads(_materialized_json(json.dumps(config, sort_keys=True)))


@lru_cache(maxsize=64)
def _materialized_json(config_json: str) -> str:
    """transformers' class for the config, built once per config and kept by its sha256: shipped for the catalog's
    configs (capacity/model/shipped), else in capacity's disk cache (capacity/disk_cache.py)."""
    from capacity import disk_cache
    from capacity.model.shipped import shipped

    config = json.loads(config_json)
    key = {"config_sha256": disk_cache.sha256_of(config)}
    return disk_cache.remembered("configs", key, lambda: _built_json(config), lambda text: text, _checked_json, shipped=shipped("configs"))


def _checked_json(stored: object) -> str:
    if not isinstance(stored, str) or not isinstance(json.loads(stored), dict):
        raise ValueError("not a config")
    return stored


def _built_json(config: dict[str, Any]) -> str:
    model_type = config.get("model_type")
    try:
        from transformers import CONFIG_MAPPING
    except ImportError as exc:
        raise BadInput("the generic family reads configs through transformers: pip install the project") from exc
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise BadInput(
            f"model_type {model_type!r} has no config class in this transformers (remote code?): the generic family plans "
            "architectures transformers builds"
        )
    raw = copy.deepcopy(config)
    raw.pop("model_type", None)
    try:
        return json.dumps(CONFIG_MAPPING[model_type](**raw).to_dict(), default=str)
    except (TypeError, ValueError, KeyError) as exc:
        raise BadInput(f"transformers cannot read this {model_type} config: {' '.join(str(exc).split())[:200]}") from exc
