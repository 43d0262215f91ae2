"""`capacity reconcile`'s rows of a pipeline-parallel start: each stage's lines beside that stage's plan.

Every PP rank is a worker that loads its own layers and profiles its own forward (capacity/planning/stages.py), and
prints its own 'Model loading took' and 'Available KV cache memory' behind its process name (`(Worker_PP1 pid=...)`,
or a Ray worker's rank line: capacity/vllm/log_workers.py). Each such line is set beside its stage's figures: the
stage's weights + load buffers, the stage's requested - non-KV memory. The engine's 'GPU KV cache size' and
concurrency are the pool the smallest stage sets, compared by the engine rows (capacity/reconcile/kv_rows.py) with
the plan's engine pool. A stage whose line is not in the text (vLLM 0.21 prints the first stage's only; an excerpt
may cut one) is named in a note, and what is there is compared.
"""

from __future__ import annotations

from capacity.planning.plan import LOADED_TERMS, Plan
from capacity.planning.stages import StagePlan
from capacity.reconcile.log_only import needs_gpu
from capacity.reconcile.rows import ReconcileRow, gib_row
from capacity.vllm.log_facts import VllmLogFacts
from capacity.vllm.log_workers import WorkerFigure

LOAD = "Model loading took"
AVAILABLE = "Available KV cache memory"


def stage_loaded_bytes(stage: StagePlan) -> int:
    """What the stage's 'Model loading took' counts: its weights and load buffers (and LoRA buffers)."""
    return sum(stage.memory[k].bytes for k in LOADED_TERMS if k in stage.memory)


def printed_by_stage(facts: VllmLogFacts, key: str) -> dict[int, WorkerFigure]:
    """The first line of `key` each PP rank printed (ranks the text does not tell are left out)."""
    out: dict[int, WorkerFigure] = {}
    for w in facts.workers:
        if w.key == key and w.pp_rank is not None:
            out.setdefault(w.pp_rank, w)
    return out


def _who(w: WorkerFigure) -> str:
    more = f", a line Ray printed for {w.repeated} workers" if w.repeated > 1 else ""
    return f"line {w.line}, {w.worker or 'no process name'} ({w.rank_basis}{more})"


def stage_rows(facts: VllmLogFacts, plan: Plan) -> tuple[list[ReconcileRow], list[str]]:
    """The per-stage rows and the notes naming the stages whose lines are not in the text."""
    rows: list[ReconcileRow] = []
    notes: list[str] = []
    loads, availables = printed_by_stage(facts, LOAD), printed_by_stage(facts, AVAILABLE)
    for st in plan.stages:
        label = f"PP {st.rank} (layers {st.start_layer}..{st.end_layer - 1}{', limiting' if st.limiting else ''})"
        if (w := loads.get(st.rank)) is not None:
            w_term = st.memory["weights"]
            rows.append(
                gib_row(
                    f"model_loading_pp{st.rank}",
                    f"model loading, {label}",
                    w.value,
                    stage_loaded_bytes(st),
                    f"vLLM: the stage's 'Model loading took' ({_who(w)}); capacity: the stage's weights ({w_term.kind}) + load buffers.",
                    decimals=max(len(f"{w.value}".split(".")[1]) if "." in f"{w.value}" else 0, 2),
                )
            )
        if (a := availables.get(st.rank)) is not None:
            row = gib_row(
                f"available_kv_cache_pp{st.rank}",
                f"available KV cache memory, {label}",
                a.value,
                st.kv.available_bytes,
                f"vLLM: the stage's 'Available KV cache memory' ({_who(a)}); capacity: the stage's requested - non-KV memory "
                f"({st.non_kv_bytes:,} B of non-KV terms, its own layers, phases {'/'.join(st.phases)}); the stage holds "
                f"{st.kv.num_blocks:,} blocks of {st.kv.bytes_per_block:,} B on it.",
            )
            rows.append(needs_gpu(row, "the stage's KV memory is planned from the GPU's total") if plan.gpu.defaulted else row)
    missing_load = [st.rank for st in plan.stages if st.rank not in loads]
    missing_kv = [st.rank for st in plan.stages if st.rank not in availables]
    for what, ranks in ((LOAD, missing_load), (AVAILABLE, missing_kv)):
        if ranks:
            notes.append(
                f"no '{what}' line of PP rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} in the text "
                "(vLLM 0.21 prints the first stage's only; Ray deduplicates workers' lines; an excerpt may cut it): those stages are not compared"
            )
    unplaced = [w for w in facts.workers if w.key in (LOAD, AVAILABLE) and w.pp_rank is None]
    if unplaced:
        notes.append("lines whose PP rank the text does not tell, not compared: " + "; ".join(f"{w.key} {w.value} GiB ({_who(w)})" for w in unplaced))
    return rows, notes
