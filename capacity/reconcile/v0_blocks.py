"""`capacity reconcile`'s KV block rows for a V0-engine encoder-decoder start (Mllama, Whisper, BART in vLLM 0.6.x).

Pure Python. Read from vLLM 0.6.3's wheel:
- CacheEngine.get_cache_block_size: one block holds block_size tokens of K and V in *every* attention layer that
  ModelConfig.get_num_attention_layers counts (hf_text_config.num_hidden_layers: Mllama-11B's 40 = 32 self + 8
  cross-attention layers). Self- and cross-attention blocks come from that one pool (the block manager allocates a
  request's cross blocks from the same GPU allocator), so V0 has no per-group layout.
- worker.determine_num_available_blocks: num_gpu_blocks = (total x utilization - peak) // that block size; the
  distributed executor takes the minimum over the workers and prints '# GPU blocks: N, # CPU blocks: M'.
- gpu_executor / distributed_gpu_executor.initialize_cache: 'Maximum concurrency for L tokens per request: %.2fx'
  = num_gpu_blocks x block_size / max_model_len: the decoder's tokens only; no cross-attention term.
V0 prints no KV token count, so these rows replace capacity's per-group rows (num_blocks, blocks per request,
concurrency, tokens), which follow V1's layout.
"""

from __future__ import annotations

from fractions import Fraction

from capacity.planning.plan import Plan
from capacity.reconcile.num_blocks import HALF_CENT, exact, printed_gib_bytes
from capacity.reconcile.rows import ReconcileRow
from capacity.vllm.log_facts import VllmLogFacts

V0_REPLACED = ("num_blocks", "blocks_per_request", "max_concurrency", "kv_cache_tokens")


def v0_bytes_per_block(plan: Plan) -> tuple[int, str] | None:
    """(bytes, why) of one V0 block (CacheEngine.get_cache_block_size), or None when capacity's KV groups are not all
    full attention with one page size (a layout V0's formula does not cover)."""
    groups = plan.kv.groups
    pages = {g.group.spec.page_size_bytes for g in groups}
    sizes = {g.group.spec.block_size for g in groups}
    if len(pages) != 1 or len(sizes) != 1 or any(g.group.kind not in ("full", "cross") for g in groups):
        return None
    page, layers = pages.pop(), plan.spec.decoder.num_layers
    return layers * page, f"{layers} attention layers (the text config's num_hidden_layers, self and cross alike) x {page:,} B a layer's block"


def _refused(key: str, label: str, vllm: str, why: str) -> ReconcileRow:
    return ReconcileRow(key, label, vllm, "refused", "", None, why, "", vllm, None)


def v0_encoder_decoder_rows(rows: list[ReconcileRow], facts: VllmLogFacts, plan: Plan) -> tuple[list[ReconcileRow], str]:
    """The rows with capacity's per-group KV rows replaced by V0's single-pool count, and a note saying so."""
    kept = [r for r in rows if r.key not in V0_REPLACED]
    bs, length = plan.serving.block_size, plan.serving.max_model_len
    layout = v0_bytes_per_block(plan)
    n_log = facts.num_gpu_blocks
    c_log = facts.max_concurrency
    out: list[ReconcileRow] = []
    if layout is None:
        why = "V0 sizes one block over every attention layer with one page size; capacity's KV groups for this model differ (sliding window, MLA, Mamba): not compared"
        if n_log is not None:
            out.append(_refused("num_blocks", "KV blocks (num_blocks)", f"{n_log:,}", why))
        if c_log is not None:
            out.append(_refused("max_concurrency", "maximum concurrency", f"{c_log:.2f}x", why))
        return kept + out, "V0 encoder-decoder KV rows refused: " + why
    bpb, bpb_why = layout
    if plan.gpu.defaulted:
        if facts.kv_cache_gib is None:
            return kept, "V0 encoder-decoder: neither the GPU's total nor the KV memory is known; the KV block rows need --gpu"
        lo_b, hi_b = printed_gib_bytes(facts.kv_cache_gib)
        n_lo, n_hi = lo_b // bpb, hi_b // bpb
        source = f"the log's {facts.kv_cache_gib} GiB of KV memory // {bpb:,} B per V0 block"
    else:
        n_lo = n_hi = plan.kv.available_bytes // bpb
        source = f"capacity's {plan.kv.available_bytes:,} B of KV memory // {bpb:,} B per V0 block"
    cap_n = f"{n_lo:,}" if n_lo == n_hi else f"{n_lo:,}-{n_hi:,}"
    block_why = f"V0 block: {bpb_why} = {bpb:,} B; capacity: {source}"
    if n_log is not None:
        agrees = n_lo <= n_log <= n_hi
        d = 0 if agrees else (n_lo - n_log if n_lo > n_log else n_hi - n_log)
        out.append(
            ReconcileRow(
                "num_blocks",
                "KV blocks (# GPU blocks)",
                f"{n_log:,}",
                cap_n,
                "0" if agrees else f"{d:+,}",
                agrees,
                f"vLLM V0 printed '# GPU blocks: {n_log:,}' (the fewest over its workers); {block_why}",
                "blocks",
                n_log,
                n_lo if n_lo == n_hi else cap_n,
            )
        )
    if c_log is not None:
        c_lo, c_hi = Fraction(n_lo * bs, length), Fraction(n_hi * bs, length)
        agrees = c_lo <= exact(c_log) + HALF_CENT and exact(c_log) - HALF_CENT <= c_hi
        cap_c = round(float(c_lo), 2)
        why = f"V0: num_gpu_blocks x block_size {bs} / max_model_len {length:,}, decoder tokens only (no cross-attention term)"
        if n_log is not None:
            why += f"; the log's {n_log:,} blocks give {n_log * bs / length:.2f}x"
        why += f"; capacity: {cap_n} x {bs} / {length:,}"
        out.append(
            ReconcileRow(
                "max_concurrency", "maximum concurrency", f"{c_log:.2f}x", f"{cap_c:.2f}x", f"{cap_c - c_log:+.2f}x", agrees, why + ".", "x", c_log, cap_c
            )
        )
    note = (
        "V0 encoder-decoder: self- and cross-attention blocks share one pool of blocks spanning every attention layer "
        "(vLLM 0.6 CacheEngine.get_cache_block_size), and V0's concurrency line counts decoder tokens only; capacity's "
        "per-group rows (V1's layout) are replaced by that count"
    )
    return kept + out, note
