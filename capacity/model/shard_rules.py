"""`ShardRules`: which modules of a family's transformers model are which of vLLM 0.33's parallel layers.

A family that the tensor-parallel profiler can shard sets `Family.tensor_parallel_rules` to one of these,
read from vLLM's model file for it (vllm/model_executor/models/<family>.py); `profilers/sharding.py` applies
them. Plain regexes over module names: no torch here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ShardRules:
    """Which modules of a family's transformers model are which of vLLM's parallel layers (regexes on names)."""

    column: str
    row: str
    vocab_embedding: str  # "" : the family's embedding is whole on every rank in vLLM
    lm_head: str
    encoder: str  # the multimodal encoder's modules (mm_encoder_tp_mode)
    kv_projection: str = r"\.(k_proj|v_proj)$"
    gathered_column: str = ""  # column-parallel layers whose output the next layer needs whole
    encoder_data_parallel: bool = False  # vLLM SupportsMultiModal.supports_encoder_tp_data

    def role(self, name: str, encoder_whole: bool) -> str | None:
        if encoder_whole and self.encoder and re.search(self.encoder, name):
            return None
        for role, pattern in (
            ("gathered_column", self.gathered_column),
            ("column", self.column),
            ("row", self.row),
            ("vocab_embedding", self.vocab_embedding),
            ("lm_head", self.lm_head),
        ):
            if pattern and re.search(pattern, name):
                return role
        return None
