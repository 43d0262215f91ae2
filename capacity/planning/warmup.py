"""MRV2's kernel warmup batches (vllm/v1/worker/gpu/warmup.py, 0.33 with PRs #40746 and #47308)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from capacity.kv.specs import KVGroup
from capacity.model.spec import ModelSpec


@dataclass(frozen=True)
class WarmupPlan:
    decode_query_len: int  # 1 + k
    prompt_len: int  # decode_query_len + 1 = 2 + k (PR #40746)
    num_decode_steps: int  # 3, or 5 with speculative decoding
    decode_len: int  # prompt_len + num_decode_steps * decode_query_len
    max_encoder_len: int  # encoder length given to every warmup request (0 for decoder-only)
    max_encoder_len_source: str
    blocks_per_request: tuple[int, ...]  # per KV group, at decode_len
    max_blocks_per_req: int
    num_reqs_before_kv_cap: int
    num_reqs: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def max_encoder_len(spec: ModelSpec, max_model_len: int) -> tuple[int, str]:
    """MRV2 EncoderDecoderModelState: getattr(hf_config, "max_source_positions", max_model_len)."""
    if not spec.is_encoder_decoder:
        return 0, "decoder-only"
    if spec.max_source_positions is not None:
        return spec.max_source_positions, "max_source_positions"
    return max_model_len, "max_model_len (config has no max_source_positions)"


def num_lookahead_tokens(num_speculative_tokens: int) -> int:
    """vLLM: VllmConfig.num_lookahead_tokens for EAGLE / MTP / draft-model speculators (= k)."""
    return num_speculative_tokens


def warmup_plan(
    spec: ModelSpec,
    groups: list[KVGroup],
    *,
    num_speculative_tokens: int,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_blocks: int,
) -> WarmupPlan:
    k = num_speculative_tokens
    decode_query_len = 1 + k
    prompt_len = decode_query_len + 1
    steps = 5 if k > 0 else 3
    decode_len = prompt_len + steps * decode_query_len
    enc_len, enc_source = max_encoder_len(spec, max_model_len)
    lookahead = num_lookahead_tokens(k)
    # _reserved_block_count, which each spec owns (cross-attention reserves the encoder length, others the tokens).
    blocks = tuple(g.spec.warmup_blocks(decode_len, lookahead=lookahead, max_model_len=max_model_len, max_encoder_len=enc_len) for g in groups)
    max_blocks = sum(blocks)
    reqs = min(max_num_seqs, max_num_batched_tokens // max(prompt_len, decode_query_len))
    capped = min(reqs, max(1, (num_blocks - 1) // max_blocks)) if max_blocks > 0 else reqs
    return WarmupPlan(
        decode_query_len=decode_query_len,
        prompt_len=prompt_len,
        num_decode_steps=steps,
        decode_len=decode_len,
        max_encoder_len=enc_len,
        max_encoder_len_source=enc_source,
        blocks_per_request=blocks,
        max_blocks_per_req=max_blocks,
        num_reqs_before_kv_cap=reqs,
        num_reqs=capped,
    )
