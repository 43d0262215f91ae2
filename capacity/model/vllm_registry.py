"""Which architectures vLLM registers as multimodal: whether vLLM serves an architecture the generic family plans.

The names are data (`vllm_multimodal_architectures.json` beside this file, with its reference).
"""

from __future__ import annotations

import json
from importlib import resources

from capacity import VLLM_VERSION

__all__ = ["MULTIMODAL_ARCHITECTURES", "VLLM_VERSION"]

_DATA = json.loads(resources.files(__package__).joinpath("vllm_multimodal_architectures.json").read_text())
MULTIMODAL_ARCHITECTURES: frozenset[str] = frozenset(_DATA["multimodal_architectures"])  # vllm/model_executor/models/registry.py _MULTIMODAL_MODELS
if _DATA["vllm_version"] != VLLM_VERSION:  # the names must be of the release the plans mirror
    raise RuntimeError(f"vllm_multimodal_architectures.json lists vLLM {_DATA['vllm_version']}'s names, capacity plans {VLLM_VERSION}")
