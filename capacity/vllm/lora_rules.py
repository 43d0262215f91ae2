"""How each vLLM version range allocates LoRA's GPU memory where it differs from 0.33 (data).

Read in the wheels' sources of 0.8.2 to 0.33.0 (the LoRA layers' create_lora_weights, the punica wrapper, the model
classes' embedding_modules, both runners' LoRA graph cases), with file and line for every fact:
bench/results/vllm-lora-versions-2026-12-02/REPORT.md. capacity/memory/lora.py applies them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LoraRules:
    """One range's LoRA allocations, as differences from 0.33's."""

    embedding_index_rows: int = 1  # PunicaWrapperBase._embeddings_indices: int64 (rows, max_num_batched_tokens)
    lm_head_vocab_limit: int = 258048  # LogitsProcessorWithLoRA.create_lora_weights refuses a larger vocabulary
    unwrapped_embeddings: frozenset[str] = frozenset()  # classes that list no embedding_modules in this range
    refused: dict[str, str] = field(default_factory=dict)  # architecture -> why its layout in this range is not known
    mrv2_lora_graphs: bool = True  # Model Runner V2 captures every size again with LoRA active (get_lora_capture_cases)


_LATEST = LoraRules()
_BEFORE_0_29 = LoraRules(embedding_index_rows=2)  # (2, T) until 0.29.0's punica_base.py
_MRV2_ONE_SET = LoraRules(embedding_index_rows=2, mrv2_lora_graphs=False)  # capture(has_lora=...): one set
_BEFORE_0_20 = LoraRules(embedding_index_rows=2, lm_head_vocab_limit=257024)  # 0.16.0's limit (0.17+: 258048)
_BEFORE_0_16 = LoraRules(
    embedding_index_rows=2,
    lm_head_vocab_limit=257024,
    unwrapped_embeddings=frozenset({"Qwen3ForCausalLM"}),
    refused={
        "MistralForCausalLM": "0.12-0.14 map MistralForCausalLM to the Llama class, whose embedding and LM head get LoRA buffers, and "
        "0.15 does not: the range's releases differ"
    },
)

# By VllmSemantics.name. A range not here (the V0 engine, 0.8-0.10, 0.11) is refused with NOT_MODELLED's reason.
LORA_RULES: dict[str, LoraRules] = {
    "0.33": _LATEST,
    "0.29-0.32": _LATEST,  # the same as 0.33 (0.29.0, 0.30.0, 0.32.0 read)
    "0.27-0.28": _BEFORE_0_29,
    "0.24-0.26": _BEFORE_0_29,
    "0.23": _MRV2_ONE_SET,
    "0.20-0.22": _MRV2_ONE_SET,  # MRV2 is opt-in there
    "0.16-0.19": _BEFORE_0_20,
    "0.12-0.15": _BEFORE_0_16,
}
NOT_MODELLED = (
    "its LoRA adds 256 rows of extra vocabulary per adapter to the embedding and the LM head (lora_extra_vocab_size, "
    "removed in 0.12.0) and sizes the punica metadata otherwise"
)
