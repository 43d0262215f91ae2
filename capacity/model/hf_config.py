"""A config as vLLM reads it: transformers' config class with its defaults filled in (vLLM loads configs through
AutoConfig), sub-configs as dicts."""

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
    config = json.loads(config_json)
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
