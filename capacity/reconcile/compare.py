"""`capacity reconcile`: a vLLM startup log side by side with capacity's plan, term by term, each difference explained.

Pure Python. The log's figures are rounded as vLLM printed them (GiB to 2 decimals, concurrency to 2 decimals),
so a log figure stands for an interval: a row `agrees` when capacity's figure lies inside it. vLLM never prints
num_blocks; it is recovered from the lines that depend on it (capacity/reconcile/num_blocks.py). The rows:
capacity/reconcile/term_rows.py (model, budget, non-KV terms) and kv_rows.py (the KV cache). Differences are
capacity - vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from capacity.planning.plan import Plan, loaded_bytes
from capacity.reconcile.kv_rows import concurrency_under_log_rule, kv_rows, tokens_under_log_formula
from capacity.reconcile.log_only import log_only_rows
from capacity.reconcile.num_blocks import BlockEvidence, blocks_from_log
from capacity.reconcile.rows import ReconcileRow, gib_text
from capacity.reconcile.stage_rows import AVAILABLE, LOAD, printed_by_stage, stage_loaded_bytes, stage_rows
from capacity.reconcile.term_rows import budget_rows, model_rows, term_rows
from capacity.reconcile.v0_blocks import v0_encoder_decoder_rows
from capacity.units import GiB
from capacity.vllm.compile_lines import log_note
from capacity.vllm.log_facts import VllmLogFacts
from capacity.vllm.log_startups import load_vllm_log
from capacity.vllm.versions import ENCODER_LENGTH, LATEST, VllmSemantics, log_semantics

# The rows whose = / != marks are reconcile's verdict on the KV budget: a version that changes one of them (or whether
# the plan fits) changes the verdict.
VERDICT_KEYS = ("non_kv", "available_kv_cache", "num_blocks", "max_concurrency", "kv_cache_tokens")
# The available KV memory is "close" within this share of vLLM's figure: the tolerance above which bench/predict_logs.py
# counts a miss (MISS_PERCENT), part of the verdict so that a version moving the KV budget past it changes the verdict.
CLOSE_PERCENT = 3.0


@dataclass(frozen=True)
class VersionOutcome:
    """A startup compared under one range of vLLM rules it may come from."""

    semantics: str
    available_kv_bytes: int
    available_kv_difference_gib: float | None  # capacity - vLLM, when the log prints its KV memory
    num_blocks: int
    marks: tuple[tuple[str, bool | None], ...]  # VERDICT_KEYS rows present: (key, agrees)
    fits: bool
    close: bool | None  # available KV within CLOSE_PERCENT of the log's (None: the log prints none)

    @property
    def verdict(self) -> tuple[object, ...]:
        return (*self.marks, self.close, self.fits)

    @property
    def figures(self) -> tuple[object, ...]:
        return (self.available_kv_bytes, self.num_blocks, self.verdict)

    def text(self) -> str:
        diff = "" if self.available_kv_difference_gib is None else f" ({self.available_kv_difference_gib:+.2f} GiB against the log)"
        marks = ", ".join(f"{k} {'=' if a else '-' if a is None else '!='}" for k, a in self.marks)
        close = "" if self.close is None else f"; {'within' if self.close else 'beyond'} {CLOSE_PERCENT:g} % of the log's KV memory"
        return f"vLLM {self.semantics}: available KV {self.available_kv_bytes / GiB:.2f} GiB{diff}, {self.num_blocks:,} blocks{close}; {marks or 'no KV row'}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "semantics": self.semantics,
            "available_kv_bytes": self.available_kv_bytes,
            "available_kv_difference_gib": self.available_kv_difference_gib,
            "num_blocks": self.num_blocks,
            "agrees": dict(self.marks),
            "fits": self.fits,
            "available_kv_within_percent": None if self.close is None else {"percent": CLOSE_PERCENT, "within": self.close},
        }


@dataclass(frozen=True)
class VersionInference:
    """A startup that does not state its version: the lines its version was inferred from, the ranges of rules they
    allow and the comparison under each; `decides`: the verdict changes with the version (no one range is picked)."""

    evidence: tuple[str, ...]
    outcomes: tuple[VersionOutcome, ...]
    decides: bool
    used: str  # the range the single comparison uses ("" when `decides`)

    def to_dict(self) -> dict[str, Any]:
        return {"evidence": list(self.evidence), "candidates": [o.to_dict() for o in self.outcomes], "verdict_changes": self.decides, "used": self.used}


@dataclass(frozen=True)
class ReconcileResult:
    """A log beside a plan: the rows, the notes, and num_blocks as the log's lines allow it."""

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
    figures: tuple[tuple[str, float | int], ...] = ()  # capacity_figures of the plan, as (term, value)
    gpu_total_known: bool = True  # False: the log prints no GPU total and none was given; rows planned from it "need --gpu"
    estimate: str = ""  # how the plan was made: "trace", "formula" or "profile" ("" when the caller did not say)
    inference: VersionInference | None = None  # the version was inferred from the formats, and fits more than one range
    by_version: tuple[ReconcileResult, ...] = ()  # when the verdict changes with the version: the comparison under each

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
            "plan_estimate": self.estimate,
            "capacity_figures": dict(self.figures),
            "gpu_total_known": self.gpu_total_known,
            "needs_gpu": [r.key for r in self.rows if r.needs_gpu],
            "version_inference": None if self.inference is None else self.inference.to_dict(),
            "by_version": [r.to_dict() for r in self.by_version],
            "difference_sign": "capacity - vLLM",
            "rows": [r.to_dict() for r in self.rows],
            "num_blocks_from_log": None if self.blocks is None else self.blocks.to_dict(),
            "notes": list(self.notes),
            "log_facts": self.facts.to_dict(),
        }


def version_outcome(result: ReconcileResult, plan: Plan) -> VersionOutcome:
    """The verdict of one comparison, for setting the ranges of rules a startup may come from side by side."""
    marks = tuple((k, result.row(k).agrees) for k in VERDICT_KEYS if k in result.keys)
    kv = result.facts.kv_cache_gib
    diff = None if kv is None else round(plan.kv.available_bytes / GiB - kv, 2)
    close = None if not kv or plan.gpu.defaulted else abs(plan.kv.available_bytes / GiB - kv) <= abs(kv) * CLOSE_PERCENT / 100
    return VersionOutcome(result.semantics, plan.kv.available_bytes, diff, plan.kv.num_blocks, marks, plan.fits, close)


def capacity_figures(facts: VllmLogFacts, plan: Plan, sem: VllmSemantics | None) -> dict[str, float | int]:
    """capacity's figure for each term a vLLM startup prints, counted as the log's version counts it (GiB as floats):
    what `capacity reconcile`'s rows show and `bench/predict_logs.py` scores. Without the GPU's total (the log prints
    none and --gpu is not given) only the weights, which do not depend on it."""
    if plan.stages:  # the stage whose lines the log prints first (capacity/reconcile/stage_rows.py); tokens are the engine's
        return stage_figures(facts, plan, sem)
    if plan.gpu.defaulted:
        return {"weights": loaded_bytes(plan) / GiB}
    return {
        "weights": loaded_bytes(plan) / GiB,  # 'Model loading took': parameters + load buffers
        "non_kv": plan.non_kv_bytes / GiB,
        "available_kv": plan.kv.available_bytes / GiB,
        "kv_tokens": tokens_under_log_formula(facts, plan),
        "concurrency": concurrency_under_log_rule(plan, sem),
        "requested": plan.requested_memory_bytes / GiB,
        "num_blocks": plan.kv.num_blocks,
    }


def stage_figures(facts: VllmLogFacts, plan: Plan, sem: VllmSemantics | None) -> dict[str, float | int]:
    """capacity_figures of a pipeline-parallel plan: the weights of the first stage whose 'Model loading took' the log
    prints, the available KV and non-KV memory of the first stage whose 'Available KV cache memory' it prints (each
    stage's own), and the engine's tokens, concurrency and blocks (the smallest stage's pool)."""
    stages = {st.rank: st for st in plan.stages}
    loads, availables = printed_by_stage(facts, LOAD), printed_by_stage(facts, AVAILABLE)
    out: dict[str, float | int] = {}
    if loads:
        out["weights"] = stage_loaded_bytes(stages[min(loads)]) / GiB
    if plan.gpu.defaulted:
        return out
    if availables:
        st = stages[min(availables)]
        out["non_kv"] = st.non_kv_bytes / GiB
        out["available_kv"] = st.kv.available_bytes / GiB
    out.update(
        kv_tokens=tokens_under_log_formula(facts, plan),
        concurrency=concurrency_under_log_rule(plan, sem),
        requested=plan.requested_memory_bytes / GiB,
        num_blocks=plan.kv.num_blocks,
    )
    return out


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
            f"capacity: free {gib_text(plan.free_at_startup_bytes)}, requested {gib_text(plan.requested_memory_bytes)}"
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


def reconcile_facts(facts: VllmLogFacts, plan: Plan, *, semantics: VllmSemantics | None) -> ReconcileResult:
    """Set a parsed vLLM log beside a plan, term by term, under `semantics`: the rules of the log's vLLM version as its
    caller derived them (capacity.vllm.versions.log_semantics; None when the log does not tell its version)."""
    kv = plan.kv
    block_size = min((g.group.spec.block_size for g in kv.groups), default=plan.serving.block_size)
    engine, per_stage, stage_notes = facts, [], []
    if plan.stages:
        # the log's first load / KV lines are one stage's: the stage rows compare each; the engine rows keep the KV
        # memory only where it is the limiting stage's (whose blocks are the pool), so that blocks follow the pool
        per_stage, stage_notes = stage_rows(facts, plan)
        limiting = next(st for st in plan.stages if st.limiting)
        printed = printed_by_stage(facts, AVAILABLE).get(limiting.rank)
        engine = replace(facts, model_loading_gib=None, available_kv_cache_gib=None if printed is None else printed.value)
    blocks = blocks_from_log(
        engine, bytes_per_block=kv.bytes_per_block, num_groups=len(kv.groups), block_size=block_size, blocks_per_request=kv.blocks_per_request_vllm
    )
    rows = [*model_rows(facts, plan), *budget_rows(facts, plan), *term_rows(engine, plan, semantics), *kv_rows(engine, plan, semantics, blocks)]
    if plan.gpu.defaulted:  # no total in the log and no --gpu: what the log alone determines (capacity/reconcile/log_only.py)
        rows = log_only_rows(rows, engine, plan, semantics, blocks)
    if plan.stages:
        rows = [r for r in rows if r.key not in ("available_kv_cache", "non_kv")]
        at = next((i for i, r in enumerate(rows) if r.key not in ("model", "max_model_len")), len(rows))
        rows[at:at] = per_stage
    notes = (*_notes(facts, plan, semantics), *stage_notes)
    if semantics is not None and semantics.engine == "V0" and plan.spec.is_encoder_decoder:  # one pool, no per-group layout
        rows, v0_note = v0_encoder_decoder_rows(rows, facts, plan)
        notes = (*notes, v0_note)
    return ReconcileResult(
        log=facts.source,
        model=plan.source.name,
        gpu=f"GPU not stated (pass --gpu; {plan.gpu.name}'s batch defaults stand in)" if plan.gpu.defaulted else plan.gpu.name,
        vllm_version=facts.version_guess,
        vllm_version_basis=facts.version_basis,
        rows=tuple(rows),
        notes=notes,
        blocks=blocks,
        facts=facts,
        semantics=semantics.name if semantics is not None else LATEST.name,
        figures=tuple(capacity_figures(facts, plan, semantics).items()),
        gpu_total_known=not plan.gpu.defaulted,
    )


def reconcile(log_path: Path, plan: Plan) -> ReconcileResult:
    """Read a vLLM startup log (BadInput: unreadable, empty, binary, malformed, not a vLLM log) and reconcile it with `plan`."""
    facts = load_vllm_log(Path(log_path))
    return reconcile_facts(facts, plan, semantics=log_semantics(facts))
