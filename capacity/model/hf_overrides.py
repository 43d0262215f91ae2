"""vLLM's `--hf-overrides` (and 0.10's `--rope-scaling`): values written over the model's config.json before vLLM
reads it, so they change every figure that comes from the config (the derived max_model_len, RoPE caches, shapes).

vLLM 0.33 (ModelConfig.__post_init__, `_apply_dict_overrides`): a key whose value is not a dict is set on the
config (`config.update`); a dict value is merged key by key into a nested config (`text_config`,
`vision_config`, ...: `_update_nested`), and set whole on any other key (a dict-valued parameter such as
`rope_scaling`). On the raw config.json a nested config is a dict under a key ending in `_config`. vLLM 0.10.0's
`--rope-scaling X` is `hf_overrides["rope_scaling"] = X` (ModelConfig.__post_init__, read in the 0.10.0 wheel).
"""

from __future__ import annotations

import copy
from typing import Any

from capacity.user_files import json_object


def parse_hf_overrides(value: Any, where: str) -> dict[str, Any]:
    """A JSON object (the command line) or a mapping (a serve YAML), as vLLM's `--hf-overrides` takes it."""
    return json_object(value, where, "hf_overrides", '{"max_position_embeddings": 131072}')


def is_nested_config(key: str, current: Any) -> bool:
    """A sub-config of config.json (a PretrainedConfig in transformers): a dict under a `*_config` key."""
    return isinstance(current, dict) and key.endswith("_config")


def with_hf_overrides(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`config` as vLLM sees it under `--hf-overrides` (a new dict; `config` is left as it was)."""
    out = copy.deepcopy(config)
    for key, value in overrides.items():
        if isinstance(value, dict) and is_nested_config(key, out.get(key)):
            _merge(out[key], value)  # vLLM: _update_nested
        else:
            out[key] = copy.deepcopy(value)  # vLLM: config.update / setattr
    return out


def _merge(target: dict[str, Any], updates: dict[str, Any]) -> None:
    for key, value in updates.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
