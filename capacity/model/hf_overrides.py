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

from capacity.errors import BadInput
from capacity.model.spec import keyed_by_layer_type
from capacity.user_files import json_object


def parse_hf_overrides(value: Any, where: str) -> dict[str, Any]:
    """A JSON object (the command line) or a mapping (a serve YAML), as vLLM's `--hf-overrides` takes it."""
    return json_object(value, where, "hf_overrides", '{"max_position_embeddings": 131072}')


# Keys that shape no parameter: RoPE's settings size only non-persistent buffers (the rotary caches, counted as load
# buffers from the overridden config), so the model's parameters stay those of its own config.
SHAPE_NEUTRAL_KEYS = frozenset({"rope_scaling", "rope_parameters", "rope_theta"})


def shapes_unchanged(overrides: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether the overrides touch only SHAPE_NEUTRAL_KEYS (at the top, or inside a nested config)."""
    for key, value in overrides.items():
        if isinstance(value, dict) and is_nested_config(key, config.get(key)):
            if not shapes_unchanged(value, config[key]):
                return False
        elif key not in SHAPE_NEUTRAL_KEYS:
            return False
    return True


def is_nested_config(key: str, current: Any) -> bool:
    """A sub-config of config.json (a PretrainedConfig in transformers): a dict under a `*_config` key."""
    return isinstance(current, dict) and key.endswith("_config")


def check_overrides(config: dict[str, Any], overrides: dict[str, Any], path: str = "") -> None:
    """BadInput, one line, for an override vLLM or transformers would reject at startup: a RoPE setting that is not
    one (a `rope_scaling` that is not an object, a factor below 1 or not a number, a `rope_theta` not a number), or
    a nested config given to a model that has none of that name."""
    for key, value in overrides.items():
        where = f"--hf-overrides {path}{key}"
        if key.endswith("_config") and isinstance(value, dict) and not isinstance(config.get(key), dict):
            raise BadInput(f"{where}: this model's config.json has no {key} to update; name a key it has")
        if isinstance(value, dict) and isinstance(config.get(key), dict) and is_nested_config(key, config[key]):
            check_overrides(config[key], value, f"{path}{key}.")
        elif key in ("rope_scaling", "rope_parameters") and value is not None:
            for entry in list(value.values()) if keyed_by_layer_type(value) else [value]:
                if not isinstance(entry, dict):
                    raise BadInput(f"{where} = {value!r}: give an object like {{\"rope_type\": \"yarn\", \"factor\": 4.0, ...}}")
                factor = entry.get("factor")
                if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor < 1):
                    raise BadInput(f"{where}: factor {factor!r} must be a number >= 1 (transformers' RoPE validation)")
        elif key == "rope_theta" and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise BadInput(f"{where} = {value!r} must be a positive number")


def with_hf_overrides(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`config` as vLLM sees it under `--hf-overrides` (a new dict; `config` is left as it was); BadInput where
    `check_overrides` refuses them."""
    check_overrides(config, overrides)
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
