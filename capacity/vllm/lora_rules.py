"""How each vLLM version range allocates LoRA's GPU memory where it differs from 0.33 (data).

Read in the wheels' sources of 0.8.2 to 0.33.0 (the LoRA layers' create_lora_weights, the punica wrapper, the model
classes' embedding_modules, the LoRA config, both runners' LoRA graph cases), with file and line for every fact:
bench/results/vllm-lora-versions-2026-12-02/REPORT.md. capacity/memory/lora.py applies them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from capacity.serving.lora import MAX_LORA_RANKS as RANKS_FROM_0_12

RANKS_BEFORE_0_12 = tuple(r for r in RANKS_FROM_0_12 if r != 1)  # no rank 1 (0.8.2 config.py, 0.11.0 config/lora.py)


@dataclass(frozen=True)
class LoraRules:
    """One range's LoRA allocations, as differences from 0.33's."""

    embedding_index_rows: int = 1  # PunicaWrapperBase._embeddings_indices: int64 (rows, max_num_batched_tokens)
    lm_head_vocab_limit: int = 258048  # LogitsProcessorWithLoRA.create_lora_weights refuses a larger vocabulary
    unwrapped_embeddings: frozenset[str] = frozenset()  # classes that list no embedding_modules in this range
    wrapped_embeddings: frozenset[str] = frozenset()  # classes built as one that does (Mistral as Llama before 0.12)
    refused: dict[str, str] = field(default_factory=dict)  # architecture -> why its layout in this range is not known
    mrv2_lora_graphs: bool = True  # Model Runner V2 captures every size again with LoRA active (get_lora_capture_cases)
    v1_lora_graphs: bool = True  # the V1 runner does (cudagraph_specialize_lora, from 0.12.0)
    ranks: tuple[int, ...] = RANKS_FROM_0_12
    # Before 0.12.0: lora_extra_vocab_size rows per adapter in the wrapped embedding, the LM head padded to 256 plus
    # them, and the prompt mapping's kernel metadata sized by max_num_seqs
    extra_vocab: int = 0  # the default (0: no such option)
    extra_vocab_choices: tuple[int, ...] = ()
    lm_head_padding: int = 64  # lora_vocab_padding_size (256 before 0.12), else DEFAULT_VOCAB_PADDING_SIZE
    prompt_meta_by_seqs: bool = False  # PunicaWrapperGPU.prompt_mapping_meta = LoRAKernelMeta.make(max_loras, max_num_seqs)
    # PunicaWrapperBase._long_lora_indices (int64 tokens): True in 0.8-0.9, False from 0.10; None where the range spans
    # both and the release is not known (counted, and the buffers called estimated)
    long_lora_indices: bool | None = False


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
_EXTRA_VOCAB = LoraRules(  # 0.11.0 (0.10.2's allocations are the same)
    embedding_index_rows=2,
    lm_head_vocab_limit=257024,  # of the vocabulary with the extra rows
    unwrapped_embeddings=frozenset({"Qwen3ForCausalLM"}),
    wrapped_embeddings=frozenset({"MistralForCausalLM"}),  # the registry maps it to LlamaForCausalLM
    v1_lora_graphs=False,  # every size captured once, with the dummy LoRAs active
    ranks=RANKS_BEFORE_0_12,
    extra_vocab=256,
    extra_vocab_choices=(256, 512),
    lm_head_padding=256,
    prompt_meta_by_seqs=True,
)

# By VllmSemantics.name. A range not here (the V0 engine) is refused with NOT_MODELLED.
LORA_RULES: dict[str, LoraRules] = {
    "0.33": _LATEST,
    "0.29-0.32": _LATEST,  # the same as 0.33 (0.29.0, 0.30.0, 0.32.0 read)
    "0.27-0.28": _BEFORE_0_29,
    "0.26": _BEFORE_0_29,
    "0.25": _BEFORE_0_29,
    "0.24": _BEFORE_0_29,
    "0.23": _MRV2_ONE_SET,
    "0.20-0.22": _MRV2_ONE_SET,  # MRV2 is opt-in there
    "0.16-0.19": _BEFORE_0_20,
    "0.12-0.15": _BEFORE_0_16,
    "0.11": _EXTRA_VOCAB,
    "0.8-0.10": replace(_EXTRA_VOCAB, long_lora_indices=None),  # 0.8-0.9 hold it, 0.10.2 does not
}
LONG_LORA_GONE_IN = (0, 10)


def for_release(rules: LoraRules, release: tuple[int, ...] | None) -> LoraRules:
    """The range's rules narrowed to one release where it tells what the range does not (None: a range's rules)."""
    if rules.long_lora_indices is None and release is not None:
        return replace(rules, long_lora_indices=release[:2] < LONG_LORA_GONE_IN)
    return rules


NOT_MODELLED = "the V0 engine's LoRA (its model runner and block manager) is not modelled"
