"""The encoder outputs vLLM's profile_run holds as temporary encoder-cache entries (exact)."""

from __future__ import annotations

from capacity.memory.term import EXACT, MemoryTerm
from capacity.model.spec import ModelSpec
from capacity.serving.config import ServingConfig
from capacity.serving.encoder_budget import MultiModalBudget


def encoder_cache_term(spec: ModelSpec, budget: MultiModalBudget, serving: ServingConfig) -> MemoryTerm:
    """profile_run holds N x T x hidden outputs as temporary encoder-cache entries through the decoder pass."""
    items, tokens = budget.profile_items, budget.profile_tokens_per_item
    if items == 0 or spec.encoder is None:
        return MemoryTerm(0, EXACT, "no encoder profiling (no multimodal budget)")
    hidden = spec.encoder.output_hidden_size
    rows = spec.encoder_output_tokens(budget.modality_with_max_tokens, tokens)
    of = "" if rows == tokens else f" (of its {tokens} placeholder tokens, the embeddings vLLM's dummy item yields)"
    return MemoryTerm(
        items * rows * hidden * serving.dtype_bytes,
        EXACT,
        f"{items} {budget.modality_with_max_tokens} items x {rows} tokens{of} x {hidden} hidden x {serving.dtype_bytes} B",
    )
