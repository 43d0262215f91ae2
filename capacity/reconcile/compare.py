"""`capacity reconcile`: a vLLM startup log side by side with capacity's plan, term by term, each difference explained.

Pure Python. The log's figures are rounded as vLLM printed them (GiB to 2 decimals, concurrency to 2 decimals),
so a log figure stands for an interval: a row `agrees` when capacity's figure lies inside it. vLLM never prints
num_blocks; it is recovered from the lines that depend on it (`blocks_from_log`). Differences are capacity - vLLM.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from capacity.memory.terms import CUDA_CONTEXT_BYTES
from capacity.planning.plan import Plan, loaded_bytes
from capacity.units import GiB, MiB, cdiv
from capacity.vllm.compile_lines import log_note
from capacity.vllm.log_facts import VllmLogFacts
from capacity.vllm.log_startups import load_vllm_log
from capacity.vllm.versions import ENCODER_LENGTH, LATEST, VllmSemantics, log_semantics

_HALF_CENT = Fraction(5, 1000)  # half a unit of the 2nd decimal: vLLM's GiB and concurrency figures


@dataclass(frozen=True)
class ReconcileRow:
    key: str  # stable id (JSON, tests)
    term: str  # label
    vllm: str  # vLLM's figure as printed, with its unit
    capacity: str  # capacity's figure, same unit
    difference: str  # capacity - vLLM ("" when not comparable)
    agrees: bool | None  # capacity's figure within the log's printing precision; None: not comparable
    explanation: str
    unit: str
    vllm_value: float | int | str | None
    capacity_value: float | int | str | None
    capacity_exact: str = ""  # capacity's figure in bytes, for the GiB rows

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BlockEvidence:
    """num_blocks (and blocks per request) consistent with every KV line of the log."""

    num_blocks_min: int
    num_blocks_max: int
    blocks_per_request: tuple[int, ...]  # implied by num_blocks / concurrency; () when the log cannot tell
    basis: str
    consistent: bool = True  # False: the lines contradict each other under capacity's KV layout

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        if self.num_blocks_min == self.num_blocks_max:
            return f"{self.num_blocks_min:,}"
        return f"{self.num_blocks_min:,}-{self.num_blocks_max:,}"


@dataclass(frozen=True)
class ReconcileResult:
    log: str
    model: str
    gpu: str
    vllm_version: str
    vllm_version_basis: str
    rows: tuple[ReconcileRow, ...]
    notes: tuple[str, ...]
    blocks: BlockEvidence | None
    facts: VllmLogFacts
    semantics: str = "0.33"  # the vLLM rules the plan used (capacity.vllm.versions)

    def row(self, key: str) -> ReconcileRow:
        for r in self.rows:
            if r.key == key:
                return r
        raise KeyError(key)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(r.key for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "capacity_reconcile_version": 1,
            "log": self.log,
            "model": self.model,
            "gpu": self.gpu,
            "vllm_version": self.vllm_version,
            "vllm_version_basis": self.vllm_version_basis,
            "plan_semantics": self.semantics,
            "difference_sign": "capacity - vLLM",
            "rows": [r.to_dict() for r in self.rows],
            "num_blocks_from_log": None if self.blocks is None else self.blocks.to_dict(),
            "notes": list(self.notes),
            "log_facts": self.facts.to_dict(),
        }


# --- num_blocks from the log ---------------------------------------------------------------------------------


def _exact(x: float) -> Fraction:
    return Fraction(repr(x))


def _printed_gib_bytes(gib: float, decimals: int = 2) -> tuple[int, int]:
    """Byte range whose round(b / 2**30, decimals) prints as `gib`."""
    half = Fraction(5, 10 ** (decimals + 1))
    lo = math.ceil(max(_exact(gib) - half, Fraction(0)) * GiB)
    hi = math.floor((_exact(gib) + half) * GiB)
    return lo, hi


def tokens_are_per_request(facts: VllmLogFacts, block_size: int) -> bool:
    """Whether the log's token count is int(concurrency x max_model_len) (0.33's one line, and the two-line logs of
    releases that already counted so) rather than num_blocks // groups x block_size (0.11-0.20): a count that is
    not a multiple of the block size can only be the former."""
    if facts.capacity_format == "one-line":
        return True
    return facts.kv_cache_tokens is not None and facts.kv_cache_tokens % block_size != 0


def blocks_from_log(facts: VllmLogFacts, *, bytes_per_block: int, num_groups: int, block_size: int, blocks_per_request: int | None) -> BlockEvidence | None:
    """The num_blocks values (and blocks per request) that reproduce every KV figure the log printed.

    - KV memory K GiB (Available / reserved): num_blocks = bytes // bytes_per_block for bytes printing as K.
    - two-line token count T (0.11-0.20): T = num_blocks // num_groups x block_size.
    - concurrency C (2 decimals): C = num_blocks / blocks_per_req.
    - one-line token count T (0.33): T = int(num_blocks / blocks_per_req x max_model_len).
    `blocks_per_request` (capacity's count under vLLM 0.33's rule) is used only when nothing else bounds num_blocks.
    """
    lo, hi = 0, None
    why: list[str] = []
    kv = facts.kv_cache_gib
    if kv is not None:
        b_lo, b_hi = _printed_gib_bytes(kv)
        lo, hi = b_lo // bytes_per_block, b_hi // bytes_per_block
        why.append(f"{kv} GiB of KV cache // {bytes_per_block:,} B per block")
    tokens, length, conc = facts.kv_cache_tokens, facts.concurrency_max_model_len, facts.max_concurrency
    per_request = tokens_are_per_request(facts, block_size)
    if not per_request and tokens is not None:
        k = tokens // block_size
        lo, hi = max(lo, k * num_groups), min(hi if hi is not None else k * num_groups + num_groups - 1, k * num_groups + num_groups - 1)
        why.append(f"{tokens:,} tokens = num_blocks // {num_groups} groups x {block_size}")
    if hi is None:
        if per_request and tokens is not None and length and blocks_per_request:
            b = blocks_per_request
            lo, hi = cdiv(tokens * b, length), cdiv((tokens + 1) * b, length) - 1
            why.append(f"{tokens:,} tokens = int(num_blocks / {b} x {length:,}) (capacity's blocks per request)")
        else:
            return None
    if lo > hi:
        return BlockEvidence(lo, hi, (), "; ".join(why) + ": these lines contradict each other", consistent=False)
    if conc is None or hi - lo > 4096:
        return BlockEvidence(lo, hi, (), "; ".join(why))
    c_lo, c_hi = max(_exact(conc) - _HALF_CENT, Fraction(1, 10**6)), _exact(conc) + _HALF_CENT
    pairs: list[tuple[int, int]] = []
    for n in range(lo, hi + 1):
        first, last = math.ceil(n / c_hi), math.floor(n / c_lo)
        for b in range(max(first, 1), min(last, first + 10_000) + 1):
            if per_request and tokens is not None and length and not (tokens * b <= n * length < (tokens + 1) * b):
                continue
            pairs.append((n, b))
    why.append(
        f"{conc}x = num_blocks / blocks per request"
        + (f" and int(that x {length:,}) = {tokens:,}" if per_request and tokens is not None else "")
    )
    if not pairs:
        return BlockEvidence(lo, hi, (), "; ".join(why) + ": no whole number of blocks per request fits them all", consistent=False)
    ns = [n for n, _ in pairs]
    return BlockEvidence(min(ns), max(ns), tuple(sorted({b for _, b in pairs})), "; ".join(why))


# --- rows ------------------------------------------------------------------------------------------------------


def _gib(n: int | float) -> str:
    return f"{n / GiB:,.2f} GiB"


def _gib_row(
    key: str, term: str, vllm_gib: float, cap_bytes: int, explanation: str, decimals: int = 2, interval: tuple[int, int] | None = None
) -> ReconcileRow:
    """A memory row: vLLM printed `vllm_gib` (rounded to `decimals`), capacity has `cap_bytes`.
    `interval`: the bytes vLLM's figure stands for, when it is derived from other rounded figures."""
    lo, hi = interval if interval is not None else _printed_gib_bytes(vllm_gib, decimals)
    agrees = lo <= cap_bytes <= hi
    diff = cap_bytes / GiB - vllm_gib
    if agrees:
        explanation += " Same figure within the log's rounding."
    else:
        off = lo - cap_bytes if cap_bytes < lo else cap_bytes - hi
        explanation += (
            f" Capacity is {'below' if cap_bytes < lo else 'above'} every value that prints as {vllm_gib:.{decimals}f} by at least {off / MiB:,.2f} MiB."
        )
    shown = f"{diff:+.{decimals}f}"
    if float(shown) == 0:
        shown = f"{0:.{decimals}f}"
    return ReconcileRow(
        key,
        term,
        f"{vllm_gib:.{decimals}f} GiB",
        f"{cap_bytes / GiB:,.{decimals}f} GiB",
        f"{shown} GiB",
        agrees,
        explanation,
        "GiB",
        vllm_gib,
        cap_bytes / GiB,
        capacity_exact=f"{cap_bytes:,} B",
    )


def _count_row(key: str, term: str, vllm: int, cap: int, unit: str, explanation: str, agrees: bool | None = None) -> ReconcileRow:
    same = vllm == cap if agrees is None else agrees
    return ReconcileRow(key, term, f"{vllm:,} {unit}".strip(), f"{cap:,} {unit}".strip(), f"{cap - vllm:+,}", same, explanation, unit, vllm, cap)


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


def _model_rows(facts: VllmLogFacts, plan: Plan) -> list[ReconcileRow]:
    rows: list[ReconcileRow] = []
    if facts.model is not None:
        names = {plan.source.name, plan.source.requested}
        same = facts.model in names or facts.model.rstrip("/").rsplit("/", 1)[-1] == plan.source.name.rsplit("/", 1)[-1]
        rows.append(
            ReconcileRow(
                "model",
                "model",
                facts.model,
                plan.source.name,
                "" if same else "different",
                same,
                "the engine's config line (model='...')"
                + ("" if same else f": the log serves another model; run capacity reconcile with --model {facts.model}"),
                "",
                facts.model,
                plan.source.name,
            )
        )
    length = facts.concurrency_max_model_len or facts.max_seq_len
    if length is not None:
        cap = plan.serving.max_model_len
        why = "the request length of vLLM's KV capacity line (max_model_len)"
        if length != cap:
            why += f": the run used --max-model-len {length}; plan with the same value, or the KV rows below compare different requests"
        rows.append(_count_row("max_model_len", "max_model_len", length, cap, "tokens", why))
    return rows


def _budget_rows(facts: VllmLogFacts, plan: Plan) -> list[ReconcileRow]:
    rows: list[ReconcileRow] = []
    fm = facts.free_memory
    s = plan.serving
    total = plan.gpu.total_memory_bytes
    if fm is not None:
        rows.append(
            _gib_row(
                "gpu_total_memory",
                "GPU total memory",
                fm.total_gib,
                total,
                f"cudaMemGetInfo's total at vLLM's startup; capacity: {plan.gpu.name} ({plan.gpu.provenance or plan.gpu.source}).",
            )
        )
    if fm is not None and fm.gpu_memory_utilization is not None:
        same_u = math.isclose(fm.gpu_memory_utilization, s.gpu_memory_utilization)
        rows.append(
            ReconcileRow(
                "gpu_memory_utilization",
                "gpu_memory_utilization",
                f"{fm.gpu_memory_utilization}",
                f"{s.gpu_memory_utilization}",
                "" if same_u else f"{s.gpu_memory_utilization - fm.gpu_memory_utilization:+.4g}",
                same_u,
                "vLLM's default was 0.9 up to 0.19 and is 0.92 from 0.20 (capacity.vllm.versions)"
                + ("" if same_u else f"; plan with --gpu-memory-utilization {fm.gpu_memory_utilization} to compare the memory rows like with like"),
                "",
                fm.gpu_memory_utilization,
                s.gpu_memory_utilization,
            )
        )
    if facts.requested_gib is not None:
        rows.append(
            _gib_row(
                "requested_memory",
                "requested memory",
                facts.requested_gib,
                plan.requested_memory_bytes,
                f"ceil(total x gpu_memory_utilization); capacity: ceil({total:,} x {s.gpu_memory_utilization}).",
            )
        )
    free_gib = fm.free_gib if fm is not None else facts.initial_free_gib
    if free_gib is not None:
        others = plan.gpu.used_by_others_bytes
        rows.append(
            _gib_row(
                "free_at_startup",
                "free memory at startup",
                free_gib,
                plan.free_at_startup_bytes,
                f"free memory at vLLM's baseline snapshot (after the CUDA context, cuBLAS and NCCL); capacity: total - {plan.memory['cuda_context'].bytes:,} B of CUDA context "
                f"({plan.memory['cuda_context'].kind}) - {others:,} B held by other processes.",
            )
        )
    if fm is not None and fm.free_minus_requested_bytes is not None:
        cap = plan.free_at_startup_bytes - plan.requested_memory_bytes
        why = (
            "exact: vLLM's two --kv-cache-memory suggestions subtract the same non-KV memory + 150 MiB from the free and from the requested memory, "
            "so they differ by free - requested"
        )
        if cap != fm.free_minus_requested_bytes:
            ctx = plan.memory["cuda_context"].bytes
            if fm.gpu_memory_utilization is not None and math.isclose(fm.gpu_memory_utilization, s.gpu_memory_utilization):
                why += f"; with the same requested memory, the CUDA context at vLLM's start was {ctx - (cap - fm.free_minus_requested_bytes):,} B, capacity's constant {ctx:,} B"
                if ctx == CUDA_CONTEXT_BYTES:
                    why += " (measured on an H200)"
            else:
                why += f"; the requested memories differ (utilization {fm.gpu_memory_utilization} in the log, {s.gpu_memory_utilization} in the plan)"
        rows.append(_count_row("free_minus_requested", "free - requested at startup", fm.free_minus_requested_bytes, cap, "B", why))
    return rows


def _term_rows(facts: VllmLogFacts, plan: Plan, sem: VllmSemantics | None) -> list[ReconcileRow]:
    rows: list[ReconcileRow] = []
    mem = plan.memory
    w = mem["weights"]
    loads = mem.get("load_buffers")
    if facts.model_loading_gib is not None:
        rows.append(
            _gib_row(
                "model_loading",
                "model loading (weights + load buffers)",
                facts.model_loading_gib,
                loaded_bytes(plan),
                f"vLLM: growth of torch's allocated memory across the load ('Model loading took', model_memory_usage); capacity: {w.method} ({w.kind})"
                + (f" + {loads.method} ({loads.kind})" if loads is not None else "")
                + ". A difference is memory the model allocates besides its parameters that capacity does not model, or parameters the two builds do not share.",
                decimals=facts.model_loading_gib_decimals,
            )
        )
    fm = facts.free_memory
    if fm is not None and not fm.startup_error:
        nt = mem["non_torch"]
        if fm.consumed_gib is not None:
            rows.append(
                _gib_row(
                    "consumed",
                    "consumed (weights + non-torch)",
                    fm.consumed_gib,
                    w.bytes + nt.bytes,
                    "vLLM 0.33: the drop in free memory (mem_get_info) from the startup snapshot to the end of profile_run, i.e. weights, "
                    f"non-torch allocations and the allocator's reserve; capacity: weights {w.bytes:,} B ({w.kind}) + non-torch {nt.bytes:,} B ({nt.kind}).",
                )
            )
        if fm.non_torch_gib is not None:
            why = f"vLLM 0.8-0.20: growth of (used - torch reserved) since the startup snapshot; capacity: {nt.method} ({nt.kind})."
            rows.append(_gib_row("non_torch", "non-torch memory", fm.non_torch_gib, nt.bytes, why))
        if fm.peak_activation_gib is not None:
            act, enc, cg = mem["activation_peak"], mem["encoder_cache"], mem["cuda_graphs"]
            if fm.consumed_gib is not None:
                cap = act.bytes + enc.bytes + cg.bytes
                why = (
                    "vLLM 0.33: profile_run's torch peak above what stays allocated (the encoder outputs held during the decoder pass included) "
                    f"+ the CUDA-graph estimate it subtracts; capacity: activation peak {act.bytes:,} B ({act.kind}) + encoder cache {enc.bytes:,} B ({enc.kind}) "
                    f"+ CUDA graphs {cg.bytes:,} B ({cg.kind})."
                )
            else:
                cap = act.bytes + enc.bytes
                why = (
                    "vLLM 0.11-0.20: growth of torch's peak allocation during profile_run (encoder outputs included); "
                    f"capacity: activation peak {act.bytes:,} B ({act.kind}) + encoder cache {enc.bytes:,} B ({enc.kind})."
                )
            rows.append(_gib_row("peak_activation", "peak activation", fm.peak_activation_gib, cap, why))
    b = plan.budget
    if facts.encoder_cache_budget_tokens is not None:
        largest = max(b.max_tokens_per_item.values(), default=0)
        mnbt = plan.serving.max_num_batched_tokens
        why = f"min(encoder compute budget, encoder cache size) = max(max_num_batched_tokens {mnbt:,}, the largest item {largest:,}) in vLLM 0.15+ and capacity"
        if facts.encoder_cache_budget_tokens != b.encoder_budget and facts.encoder_cache_budget_tokens == largest and plan.spec.is_encoder_decoder:
            why += f"; vLLM 0.11 set max_num_encoder_input_tokens to the encoder length ({largest:,}) for encoder-decoder models, so its budget held one item"
        elif facts.encoder_cache_budget_tokens != b.encoder_budget:
            why += "; a different budget means different knobs (max_num_batched_tokens, --limit-mm-per-prompt) or another model"
        rows.append(_count_row("encoder_cache_budget", "encoder cache budget", facts.encoder_cache_budget_tokens, b.encoder_budget, "tokens", why))
    if facts.encoder_profile_items is not None:
        modality = b.modality_with_max_tokens or "-"
        t = b.profile_tokens_per_item
        same = facts.encoder_profile_items == b.profile_items and facts.encoder_profile_modality == modality
        why = (
            f"items profile_run encodes and holds during the decoder pass: min(budget // {t:,} tokens per item, max_num_seqs"
            + (f" capped at max_num_batched_tokens // {t:,}" if not plan.serving.enable_chunked_prefill else "")
            + f" x items per prompt); capacity's encoder-cache term holds {b.profile_items} x {t:,} tokens"
        )
        rows.append(
            ReconcileRow(
                "encoder_profile_items",
                "encoder profile items",
                f"{facts.encoder_profile_items} {facts.encoder_profile_modality}",
                f"{b.profile_items} {modality}",
                f"{b.profile_items - facts.encoder_profile_items:+}",
                same,
                why,
                "items",
                facts.encoder_profile_items,
                b.profile_items,
            )
        )
    cg = mem["cuda_graphs"]
    estimate = facts.cudagraph_estimate_gib(plan.gpu.total_memory_bytes / GiB)
    if estimate is not None:
        interval = facts.cudagraph_estimate_interval_bytes(plan.gpu.total_memory_bytes)
        source = (
            "printed ('Estimated CUDA graph memory')"
            if interval is None
            else "from its utilization line: (current - equivalent utilization) x the GPU total, +-0.00005 x total"
        )
        taken = "subtracted from the KV budget" if facts.cudagraph_estimate_subtracted is not False else "printed but not subtracted (the estimate was off)"
        rows.append(
            _gib_row(
                "cuda_graphs_estimate",
                "CUDA graphs (estimate)",
                estimate,
                cg.bytes,
                f"vLLM 0.19+: graphs captured before the KV cache is sized, {taken}; vLLM's figure {source}; "
                f"capacity: {cg.method} ({cg.kind}).",
                decimals=3 if interval is not None else 2,
                interval=interval,
            )
        )
    actual = facts.cudagraph_actual_gib if facts.cudagraph_actual_gib is not None else facts.graph_capture_gib
    if actual is not None:
        why = (
            "vLLM: free memory taken by the real capture, after the KV cache is allocated; vLLM subtracts the estimate, not this, "
            "so an actual above the estimate comes out of the (1 - gpu_memory_utilization) headroom"
        )
        if sem is not None and not sem.subtracts_cudagraph_estimate:
            why = f"vLLM {sem.name} set no memory aside for CUDA graphs: the capture came out of the (1 - gpu_memory_utilization) headroom"
        rows.append(_gib_row("cuda_graphs_actual", "CUDA graphs (actual capture)", actual, cg.bytes, why + f"; capacity: {cg.method} ({cg.kind})."))
    return rows


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


def _kv_rows(facts: VllmLogFacts, plan: Plan, sem: VllmSemantics | None, blocks: BlockEvidence | None) -> list[ReconcileRow]:
    rows: list[ReconcileRow] = []
    kv, s, mem = plan.kv, plan.serving, plan.memory
    log_u = facts.gpu_memory_utilization
    same_u = log_u is None or math.isclose(log_u, s.gpu_memory_utilization)
    # vLLM's non-KV memory = requested - available; without the log's requested memory, capacity's stands in (it is
    # planned with the log's version semantics, so with that version's utilization default).
    if facts.available_kv_cache_gib is not None and (facts.requested_gib is not None or same_requested(facts, plan, sem)):
        if facts.requested_gib is not None:
            r_lo, r_hi = _printed_gib_bytes(facts.requested_gib)
            req_from = "the log's requested memory"
            requested = facts.requested_gib * GiB
        else:
            r_lo = r_hi = plan.requested_memory_bytes
            req_from = "capacity's requested memory (the log does not print it)"
            requested = plan.requested_memory_bytes
        a_lo, a_hi = _printed_gib_bytes(facts.available_kv_cache_gib)
        vllm_non_kv = requested - facts.available_kv_cache_gib * GiB
        terms = " + ".join(f"{label} {mem[k].bytes / GiB:.2f} ({mem[k].kind})" for k, label in _NON_KV_LABELS.items())
        formula = f"vLLM {sem.name}: {sem.non_kv_formula}" if sem is not None else "vLLM (version unknown)"
        rows.append(
            _gib_row(
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
        rows.append(_gib_row("available_kv_cache", "available KV cache memory", kv_gib, kv.available_bytes, why))
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
        rows.append(
            ReconcileRow(
                "blocks_per_request",
                "blocks per request (vLLM's count)",
                " or ".join(str(b) for b in implied),
                f"{cap}",
                "" if vllm_b is None else f"{cap - vllm_b:+,}",
                agrees,
                why,
                "blocks",
                vllm_b if vllm_b is not None else " or ".join(str(b) for b in implied),
                cap,
            )
        )
    if facts.max_concurrency is not None:
        cap_c = round(plan.concurrency.vllm_reported, 2)
        c = facts.max_concurrency
        agrees = _exact(c) - _HALF_CENT <= Fraction(kv.num_blocks, kv.blocks_per_request_vllm) <= _exact(c) + _HALF_CENT
        parts = [f"num_blocks / blocks per request; capacity: {kv.num_blocks:,} / {kv.blocks_per_request_vllm} = {plan.concurrency.vllm_reported:.2f}x"]
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
        cap_t = plan.concurrency.tokens_vllm_reported
        groups = len(kv.groups)
        if not tokens_are_per_request(facts, bs):
            old = kv.num_blocks // groups * bs
            why = (
                f"vLLM 0.11-0.20 printed num_blocks // {groups} groups x block_size {bs}: the tokens one group's share of blocks holds, not tokens of requests; "
                f"capacity prints vLLM 0.33's int(concurrency x max_model_len) = {cap_t:,} (its {kv.num_blocks:,} blocks under the old formula: {old:,})"
            )
            rows.append(_count_row("kv_cache_tokens", "KV cache size (tokens)", t, cap_t, "tokens", why))
        else:
            why = f"int(concurrency x max_model_len) in both: capacity int({kv.num_blocks:,} / {kv.blocks_per_request_vllm} x {s.max_model_len:,})"
            if t != cap_t:
                why += "; the difference follows num_blocks"
            rows.append(_count_row("kv_cache_tokens", "KV cache size (tokens)", t, cap_t, "tokens", why))
    return rows


def _notes(facts: VllmLogFacts, plan: Plan, sem: VllmSemantics | None) -> tuple[str, ...]:
    notes = [f"log: vLLM {facts.version_guess} ({facts.version_basis})"]
    if sem is None:
        notes.append(f"vLLM {facts.version_guess}: the version is not known, so capacity compares with vLLM 0.33's rules")
    elif sem is not LATEST:
        diffs = [f"non-KV = {sem.non_kv_formula} (0.33: {LATEST.non_kv_formula})"]
        if sem.default_gpu_memory_utilization != LATEST.default_gpu_memory_utilization:
            diffs.append(f"gpu_memory_utilization defaulted to {sem.default_gpu_memory_utilization}")
        if not sem.subtracts_cudagraph_estimate:
            diffs.append("no CUDA-graph memory was subtracted from the KV budget")
        if facts.capacity_format == "two-line":
            diffs.append("the KV cache size and the concurrency on two lines (0.33: one line)")
        if sem.cross_attention_per_request == ENCODER_LENGTH and plan.spec.is_encoder_decoder:
            diffs.append("cross-attention counted by the encoder length, not max_num_batched_tokens")
        notes.append(f"the plan uses vLLM {sem.name}'s rules (capacity.vllm.versions); that version differs from 0.33: " + "; ".join(diffs))
    if sem is not None and not sem.plannable:
        notes.append(f"capacity does not model {sem.why_not_plannable}: its figures are shown, the comparison is indicative")
    fm = facts.free_memory
    if fm is not None and fm.startup_error:
        notes.append(
            f"vLLM refused to start: free memory {fm.free_gib} GiB < requested {fm.requested_gib} GiB (total {fm.total_gib} GiB x {fm.gpu_memory_utilization}); "
            f"capacity: free {_gib(plan.free_at_startup_bytes)}, requested {_gib(plan.requested_memory_bytes)}"
        )
    cache_note = log_note(facts.compile_cache, plan.serving.enforce_eager)
    if cache_note is not None:
        notes.append(cache_note)
    no_graph_lines = sem is not None and not sem.subtracts_cudagraph_estimate
    missing = [m for m in facts.missing if not (m == "CUDA graph pool memory" and no_graph_lines)]
    if missing:
        notes.append("not in the log: " + ", ".join(f"'{m}'" for m in missing) + " (a DEBUG-only line, a later version's line, or a log that stops early)")
    notes.extend(facts.notes)
    notes.extend(f"warning: {w}" for w in facts.warnings)
    return tuple(notes)


def reconcile_facts(facts: VllmLogFacts, plan: Plan) -> ReconcileResult:
    """Set a parsed vLLM log beside a plan, term by term."""
    sem = log_semantics(facts)
    kv = plan.kv
    block_size = min((g.group.spec.block_size for g in kv.groups), default=plan.serving.block_size)
    blocks = blocks_from_log(
        facts, bytes_per_block=kv.bytes_per_block, num_groups=len(kv.groups), block_size=block_size, blocks_per_request=kv.blocks_per_request_vllm
    )
    rows = [*_model_rows(facts, plan), *_budget_rows(facts, plan), *_term_rows(facts, plan, sem), *_kv_rows(facts, plan, sem, blocks)]
    return ReconcileResult(
        log=facts.source,
        model=plan.source.name,
        gpu=plan.gpu.name,
        vllm_version=facts.version_guess,
        vllm_version_basis=facts.version_basis,
        rows=tuple(rows),
        notes=_notes(facts, plan, sem),
        blocks=blocks,
        facts=facts,
        semantics=sem.name if sem is not None else LATEST.name,
    )


def reconcile(log_path: Path, plan: Plan) -> ReconcileResult:
    """Read a vLLM startup log (BadInput: unreadable, empty, binary, malformed, not a vLLM log) and reconcile it with `plan`."""
    return reconcile_facts(load_vllm_log(Path(log_path)), plan)
