"""`capacity reconcile` of a log that does not print the GPU's total: what the log alone determines, and what needs `--gpu`.

A startup of vLLM 0.11-0.20 prints its available KV memory but not the GPU's total (that is in a DEBUG line), so
capacity cannot plan the memory budget (requested = total x utilization) without `--gpu`. Much of a comparison needs
no total: the weights ('Model loading took'), the encoder budget, the CUDA-graph figures vLLM printed, and the KV
arithmetic from the logged available KV memory under capacity's KV layout for the model and knobs:

    num_blocks  = available // bytes_per_block           (vLLM: get_num_blocks, for each byte count printing as K GiB)
    concurrency = num_blocks / blocks per request        (vLLM: get_max_concurrency_for_kv_cache_config)
    tokens      = int(concurrency x max_model_len)       (0.33; 0.11-0.20: num_blocks // groups x block_size)

The rows that need the total (requested, free, non-KV, available KV, an estimate read from a utilization line) keep
vLLM's figure and say "needs --gpu" in capacity's column; they are `needs_gpu` in the JSON.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from capacity.planning.plan import Plan
from capacity.reconcile.kv_rows import concurrency_under_log_rule
from capacity.reconcile.num_blocks import HALF_CENT, BlockEvidence, exact, printed_gib_bytes, tokens_are_per_request
from capacity.reconcile.rows import NEEDS_GPU, ReconcileRow
from capacity.vllm.log_facts import VllmLogFacts
from capacity.vllm.versions import VllmSemantics

# Rows whose capacity figure is planned from the GPU's total (requested = ceil(total x utilization)).
TOTAL_KEYS = ("gpu_total_memory", "requested_memory", "free_at_startup", "free_minus_requested", "non_kv", "available_kv_cache")
# Rows the KV arithmetic from the log's own KV memory replaces.
KV_KEYS = ("num_blocks", "max_concurrency", "kv_cache_tokens")


def needs_gpu(row: ReconcileRow, why: str, vllm: str | None = None) -> ReconcileRow:
    """`row` with capacity's figure replaced by "needs --gpu" (not compared); vLLM's is kept, or replaced by `vllm`
    where it too was worked out from a total (capacity's stand-in)."""
    return replace(
        row,
        vllm=row.vllm if vllm is None else vllm,
        vllm_value=row.vllm_value if vllm is None else vllm,
        capacity=NEEDS_GPU,
        difference="",
        agrees=None,
        capacity_value=None,
        capacity_exact="",
        explanation=f"{why}: pass --gpu NAME (capacity gpus) or --gpu SIZE (the total vLLM prints in 'Free memory on device (F/T GiB)') to compare it.",
        needs_gpu=True,
    )


def _per_request(facts: VllmLogFacts, plan: Plan, sem: VllmSemantics | None) -> int:
    """Blocks per request as the log's version counts them (concurrency_under_log_rule's divisor)."""
    by_encoder = concurrency_under_log_rule(plan, sem) != plan.concurrency.vllm_reported
    return plan.kv.blocks_per_request_actual if by_encoder else plan.kv.blocks_per_request_vllm


def _span(lo: float | int, hi: float | int, fmt: str) -> str:
    a, b = format(lo, fmt), format(hi, fmt)
    return a if a == b else f"{a}-{b}"


def log_kv_rows(facts: VllmLogFacts, plan: Plan, sem: VllmSemantics | None, blocks: BlockEvidence | None) -> list[ReconcileRow]:
    """num_blocks, concurrency and tokens from the log's KV memory under capacity's KV layout, beside vLLM's lines."""
    kv_gib = facts.kv_cache_gib
    if kv_gib is None:
        return []
    kv = plan.kv
    bpb = kv.bytes_per_block
    b_lo, b_hi = printed_gib_bytes(kv_gib)
    n_lo, n_hi = b_lo // bpb, b_hi // bpb
    base = f"the log's {kv_gib} GiB of KV memory ({b_lo:,}-{b_hi:,} B as printed) // capacity's {bpb:,} B per block = {_span(n_lo, n_hi, ',')} blocks"
    rows: list[ReconcileRow] = []
    counted = facts.kv_cache_tokens is not None or facts.max_concurrency is not None
    if not counted:
        why = f"vLLM prints no token or concurrency line to count its blocks from; capacity: {base}"
        rows.append(
            ReconcileRow("num_blocks", "KV blocks (num_blocks)", "not printed", _span(n_lo, n_hi, ","), "", None, why, "blocks", None, _span(n_lo, n_hi, ","))
        )
    elif blocks is not None:
        agrees = blocks.consistent
        why = f"vLLM does not print num_blocks; its token and concurrency lines allow {blocks.text()} ({blocks.basis}); capacity: {base}"
        if not agrees:
            why += "; the log's lines do not fit capacity's KV layout for this model and knobs (bytes per block, block size, max_model_len)"
        rows.append(
            ReconcileRow(
                "num_blocks", "KV blocks (num_blocks)", blocks.text(), _span(n_lo, n_hi, ","), "", agrees, why, "blocks",
                blocks.text(), _span(n_lo, n_hi, ","),
            )
        )  # fmt: skip
    per = _per_request(facts, plan, sem)
    length = plan.serving.max_model_len
    if facts.max_concurrency is not None:
        c = facts.max_concurrency
        c_lo, c_hi = Fraction(n_lo, per), Fraction(n_hi, per)
        agrees = c_lo <= exact(c) + HALF_CENT and exact(c) - HALF_CENT <= c_hi
        shown = _span(float(c_lo), float(c_hi), ".2f")
        why = f"num_blocks / blocks per request; capacity: {base}, / {per} blocks per request = {shown}x"
        rows.append(ReconcileRow("max_concurrency", "maximum concurrency", f"{c:.2f}x", f"{shown}x", "", agrees, why + ".", "x", c, shown))
    if facts.kv_cache_tokens is not None:
        t = facts.kv_cache_tokens
        bs = min((g.group.spec.block_size for g in kv.groups), default=plan.serving.block_size)
        if tokens_are_per_request(facts, bs):
            t_lo, t_hi = int(n_lo / per * length), int(n_hi / per * length)
            how = f"int(num_blocks / {per} x max_model_len {length:,})"
        else:
            groups = len(kv.groups)
            t_lo, t_hi = n_lo // groups * bs, n_hi // groups * bs
            how = f"num_blocks // {groups} groups x block_size {bs} (vLLM 0.11-0.20's count)"
        agrees = t_lo <= t <= t_hi
        why = f"{how}; capacity: {base}, giving {_span(t_lo, t_hi, ',')} tokens"
        rows.append(
            ReconcileRow(
                "kv_cache_tokens",
                "KV cache size (tokens)",
                f"{t:,} tokens",
                f"{_span(t_lo, t_hi, ',')} tokens",
                "",
                agrees,
                why + ".",
                "tokens",
                t,
                _span(t_lo, t_hi, ","),
            )
        )
    return rows


def log_only_rows(rows: list[ReconcileRow], facts: VllmLogFacts, plan: Plan, sem: VllmSemantics | None, blocks: BlockEvidence | None) -> list[ReconcileRow]:
    """A comparison's rows when the GPU's total is not known: the rows planned from the total say "needs --gpu", the KV
    rows are worked from the log's own KV memory (where it prints one), the rest stand as they are."""
    from_log = {r.key: r for r in log_kv_rows(facts, plan, sem, blocks)}
    why_total = "capacity plans this from the GPU's total (requested = total x gpu_memory_utilization), which the log does not print"
    out: list[ReconcileRow] = []
    for row in rows:
        if row.key in from_log:
            out.append(from_log.pop(row.key))
        elif row.key == "non_kv" and facts.requested_gib is None:
            out.append(
                needs_gpu(
                    row,
                    why_total + "; vLLM's non-KV memory is requested - available, and the log prints neither the requested memory nor the total",
                    f"requested - {facts.kv_cache_gib} GiB",
                )
            )
        elif row.key in TOTAL_KEYS or row.key in KV_KEYS:
            out.append(
                needs_gpu(
                    row, why_total if row.key in TOTAL_KEYS else "the log prints no KV memory to count blocks from, and capacity's own needs the GPU's total"
                )
            )
        elif row.key == "cuda_graphs_estimate" and facts.cudagraph_estimate_utilization is not None and facts.cudagraph_estimated_gib is None:
            current, without = facts.cudagraph_estimate_utilization
            out.append(
                needs_gpu(
                    row,
                    "vLLM's estimate is read from its utilization line, (current - equivalent utilization) x the GPU's total",
                    f"({current} - {without}) x total",
                )
            )
        else:
            out.append(row)
    out.extend(from_log.values())  # a KV row the plan-based rows lacked (e.g. num_blocks without a per-request count)
    return out
