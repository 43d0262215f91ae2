"""`capacity reconcile`'s rows for the KV cache: non-KV memory (requested - available), available KV memory,
num_blocks, blocks per request, concurrency and the KV token count, vLLM's printed figure beside capacity's.
"""

from __future__ import annotations

import math
from fractions import Fraction

from capacity.planning.plan import Plan
from capacity.reconcile.num_blocks import HALF_CENT, BlockEvidence, exact, printed_gib_bytes, tokens_are_per_request
from capacity.reconcile.rows import ReconcileRow, count_row, gib_row
from capacity.units import GiB
from capacity.vllm.log_facts import VllmLogFacts
from capacity.vllm.versions import ENCODER_LENGTH, VllmSemantics


def _groups_text(plan: Plan, which: str) -> str:
    parts = []
    for g in plan.kv.groups:
        n = g.blocks_per_request_vllm if which == "vllm" else g.blocks_per_request_actual
        parts.append(f"{n} {g.group.kind}")
    return " + ".join(parts)


def _cross(plan: Plan) -> tuple[int, int] | None:
    """(cross blocks per request under vLLM 0.15+'s rule, cross blocks a request really holds), or None."""
    cross = [g for g in plan.kv.groups if g.group.spec.reads_encoder_output]
    if not cross:
        return None
    return sum(g.blocks_per_request_vllm for g in cross), sum(g.blocks_per_request_actual for g in cross)


_NON_KV_LABELS = {
    "weights": "weights",
    "activation_peak": "activation peak",
    "encoder_cache": "encoder cache",
    "non_torch": "non-torch",
    "cuda_graphs": "CUDA graphs",
}


def vllm_utilization(facts: VllmLogFacts, sem: VllmSemantics | None) -> float | None:
    """The gpu_memory_utilization vLLM ran with: printed, passed (non-default args), or its version's default."""
    if facts.gpu_memory_utilization is not None:
        return facts.gpu_memory_utilization
    given = facts.log_knobs.get("gpu_memory_utilization")
    if given is not None:
        return float(given)
    return None if sem is None else sem.default_gpu_memory_utilization


def same_requested(facts: VllmLogFacts, plan: Plan, sem: VllmSemantics | None) -> bool:
    """Whether capacity's requested memory can stand in for vLLM's (the log does not print it): same utilization."""
    u = vllm_utilization(facts, sem)
    return u is not None and math.isclose(u, plan.serving.gpu_memory_utilization)


def tokens_under_log_formula(facts: VllmLogFacts, plan: Plan) -> int:
    """capacity's KV token count as the log's version prints it: int(concurrency x max_model_len) (0.33, and every
    per-request count), else num_blocks // groups x block_size (vLLM 0.11-0.20, num_blocks_per_request aside)."""
    kv = plan.kv
    bs = min((g.group.spec.block_size for g in kv.groups), default=plan.serving.block_size)
    if tokens_are_per_request(facts, bs):
        return plan.concurrency.tokens_vllm_reported
    return kv.num_blocks // len(kv.groups) * bs


def concurrency_under_log_rule(plan: Plan, sem: VllmSemantics | None) -> float:
    """capacity's maximum concurrency as the log's version counts it: num_blocks / blocks per request, the
    cross-attention blocks by the encoder length where that version charged them so (0.11 and before)."""
    if sem is not None and sem.cross_attention_per_request == ENCODER_LENGTH and plan.spec.is_encoder_decoder:
        return plan.kv.num_blocks / plan.kv.blocks_per_request_actual
    return plan.concurrency.vllm_reported


def kv_rows(facts: VllmLogFacts, plan: Plan, sem: VllmSemantics | None, blocks: BlockEvidence | None) -> list[ReconcileRow]:
    rows: list[ReconcileRow] = []
    kv, s, mem = plan.kv, plan.serving, plan.memory
    log_u = facts.gpu_memory_utilization
    same_u = log_u is None or math.isclose(log_u, s.gpu_memory_utilization)
    # vLLM's non-KV memory = requested - available; without the log's requested memory, capacity's stands in (it is
    # planned with the log's version semantics, so with that version's utilization default).
    if facts.available_kv_cache_gib is not None and (facts.requested_gib is not None or same_requested(facts, plan, sem)):
        if facts.requested_gib is not None:
            r_lo, r_hi = printed_gib_bytes(facts.requested_gib)
            req_from = "the log's requested memory"
            requested = facts.requested_gib * GiB
        else:
            r_lo = r_hi = plan.requested_memory_bytes
            req_from = "capacity's requested memory (the log does not print it)"
            requested = plan.requested_memory_bytes
        a_lo, a_hi = printed_gib_bytes(facts.available_kv_cache_gib)
        vllm_non_kv = requested - facts.available_kv_cache_gib * GiB
        terms = " + ".join(f"{label} {mem[k].bytes / GiB:.2f} ({mem[k].kind})" for k, label in _NON_KV_LABELS.items())
        formula = f"vLLM {sem.name}: {sem.non_kv_formula}" if sem is not None else "vLLM (version unknown)"
        rows.append(
            gib_row(
                "non_kv",
                "non-KV memory (requested - available)",
                round(vllm_non_kv / GiB, 2),
                plan.non_kv_bytes,
                f"{formula}, from {req_from} - Available KV cache memory; capacity: {terms} GiB.",
                interval=(r_lo - a_hi, r_hi - a_lo),
            )
        )
    kv_gib = facts.kv_cache_gib
    if kv_gib is not None:
        reserved = facts.available_kv_cache_gib is None
        if reserved and s.kv_cache_memory_bytes is not None:
            why = "both set by --kv-cache-memory-bytes (vLLM skipped profiling)."
        elif reserved:
            why = (
                f"vLLM was started with --kv-cache-memory-bytes (about {kv_gib} GiB; profiling skipped); capacity profiled: "
                "plan with the same --kv-cache-memory-bytes to compare the KV rows."
            )
        elif s.kv_cache_memory_bytes is not None:
            why = f"vLLM profiled (requested - non-KV); capacity took --kv-cache-memory-bytes {s.kv_cache_memory_bytes:,}."
        else:
            why = "requested - non-KV in both: the difference is that of the non-KV rows" + (
                " and of the requested memory (another gpu_memory_utilization)." if not same_u else "."
            )
        rows.append(gib_row("available_kv_cache", "available KV cache memory", kv_gib, kv.available_bytes, why))
    if blocks is not None:
        d = kv.num_blocks - blocks.num_blocks_max if kv.num_blocks > blocks.num_blocks_max else kv.num_blocks - blocks.num_blocks_min
        agrees = blocks.num_blocks_min <= kv.num_blocks <= blocks.num_blocks_max
        why = (
            f"vLLM does not print num_blocks; the log's lines allow {blocks.text()} ({blocks.basis}); "
            f"capacity: {kv.available_bytes:,} B // {kv.bytes_per_block:,} B per block"
        )
        if not agrees:
            why += f"; {abs(d):,} blocks = {abs(d) * kv.bytes_per_block / GiB:.2f} GiB of KV memory {'more' if d > 0 else 'less'} in capacity's plan"
        if not blocks.consistent:
            why += "; the lines do not fit capacity's KV layout for this model and knobs (another model, block size or max_model_len?)"
        rows.append(
            ReconcileRow(
                "num_blocks",
                "KV blocks (num_blocks)",
                blocks.text(),
                f"{kv.num_blocks:,}",
                "0" if agrees else f"{d:+,}",
                agrees,
                why,
                "blocks",
                blocks.num_blocks_min if blocks.num_blocks_min == blocks.num_blocks_max else blocks.text(),
                kv.num_blocks,
            )
        )
    cross = _cross(plan)
    bs = s.block_size
    mnbt = s.max_num_batched_tokens
    enc = plan.spec.encoder_tokens_per_request
    implied = blocks.blocks_per_request if blocks is not None else ()
    if implied:
        cap = kv.blocks_per_request_vllm
        agrees = cap in implied
        why = f"vLLM: num_blocks / concurrency; capacity (vLLM 0.33's rule): {_groups_text(plan, 'vllm')} blocks"
        if cross is not None:
            why += f"; cross-attention: vLLM 0.15+ charge cdiv(max_num_batched_tokens {mnbt:,}, {bs}) = {cross[0]} blocks per request"
            if not agrees and kv.blocks_per_request_actual in implied:
                why += (
                    f"; this log charges the encoder length, cdiv({enc:,}, {bs}) = {cross[1]} (vLLM 0.11 sized cross-attention by "
                    f"max_num_encoder_input_tokens = the encoder length): {kv.blocks_per_request_actual} blocks, capacity's actual count"
                )
        vllm_b = implied[0] if len(implied) == 1 else None
        implied_text = candidates_text(implied)
        rows.append(
            ReconcileRow(
                "blocks_per_request",
                "blocks per request (vLLM's count)",
                implied_text,
                f"{cap}",
                "" if vllm_b is None else f"{cap - vllm_b:+,}",
                agrees,
                why,
                "blocks",
                vllm_b if vllm_b is not None else implied_text,
                cap,
            )
        )
    if facts.max_concurrency is not None:
        by_encoder = concurrency_under_log_rule(plan, sem) != plan.concurrency.vllm_reported
        per_request = kv.blocks_per_request_actual if by_encoder else kv.blocks_per_request_vllm
        cap_c = round(concurrency_under_log_rule(plan, sem), 2)
        c = facts.max_concurrency
        agrees = exact(c) - HALF_CENT <= Fraction(kv.num_blocks, per_request) <= exact(c) + HALF_CENT
        parts = [f"num_blocks / blocks per request; capacity: {kv.num_blocks:,} / {per_request} = {kv.num_blocks / per_request:.2f}x"]
        if by_encoder:
            parts[0] += f" (vLLM {sem.name if sem else ''}'s count, cross-attention by the encoder length; vLLM 0.33's: {plan.concurrency.vllm_reported:.2f}x)"
        if blocks is not None and blocks.num_blocks_min == blocks.num_blocks_max and not agrees:
            n = blocks.num_blocks_min
            parts.append(f"the log's {n:,} blocks under capacity's count give {n / kv.blocks_per_request_vllm:.2f}x")
        if cross is not None and cross[0] != cross[1]:
            parts.append(
                f"vLLM's encoder-decoder concurrency charges every request max_num_batched_tokens ({mnbt:,}) of cross-attention ({cross[0]} blocks), "
                f"but a request holds {enc:,} encoder tokens ({cross[1]} blocks): counting those and leaving out the null block, capacity's actual concurrency is "
                f"{plan.concurrency.actual:.2f}x = {plan.concurrency.actual_requests:,} requests at max_model_len"
            )
            if implied and kv.blocks_per_request_actual in implied and kv.blocks_per_request_vllm not in implied:
                parts.append(
                    f"this log (vLLM 0.11's rule) counts the {cross[1]} blocks already, so its figure is close to capacity's actual one, plus the null block"
                )
        rows.append(
            ReconcileRow(
                "max_concurrency",
                "maximum concurrency",
                f"{c:.2f}x",
                f"{cap_c:.2f}x",
                f"{cap_c - c:+.2f}x",
                agrees,
                "; ".join(parts) + ".",
                "x",
                c,
                cap_c,
            )
        )
    if facts.kv_cache_tokens is not None:
        t = facts.kv_cache_tokens
        cap_t = tokens_under_log_formula(facts, plan)
        groups = len(kv.groups)
        if not tokens_are_per_request(facts, bs):
            why = (
                f"vLLM 0.11-0.20 printed num_blocks // {groups} groups x block_size {bs}: the tokens one group's share of blocks holds, not tokens of requests; "
                f"capacity: its {kv.num_blocks:,} blocks under that formula (vLLM 0.33 prints int(concurrency x max_model_len) = "
                f"{plan.concurrency.tokens_vllm_reported:,})"
            )
            rows.append(count_row("kv_cache_tokens", "KV cache size (tokens)", t, cap_t, "tokens", why))
        else:
            why = f"int(concurrency x max_model_len) in both: capacity int({kv.num_blocks:,} / {kv.blocks_per_request_vllm} x {s.max_model_len:,})"
            if t != cap_t:
                why += "; the difference follows num_blocks"
            rows.append(count_row("kv_cache_tokens", "KV cache size (tokens)", t, cap_t, "tokens", why))
    return rows


def candidates_text(values: tuple[int, ...]) -> str:
    """The counts a rounded figure allows: "2041 or 2042", or a run of consecutive ones as "2041-2052"."""
    ordered = sorted(values)
    if len(ordered) > 2 and ordered[-1] - ordered[0] == len(ordered) - 1:
        return f"{ordered[0]}-{ordered[-1]}"
    return " or ".join(str(v) for v in ordered)
