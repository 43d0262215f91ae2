"""Predict the public vLLM startup logs of bench/vllm_logs/ with capacity, term by term.

    python bench/predict_logs.py [--out bench/results/predict-logs-2026-12-01] [--formula] [--only NAME]
    python bench/predict_logs.py --check-totals     # only the GPU totals: every one a log or a profile records

Every GPU total a log prints (`Free memory on device (F/T GiB)`, V0's `total_gpu_memory`) on a GPU its sidecar names,
and every `gpu_total_memory_bytes` a bench/results profile measured, is checked against capacity's catalog
(capacity/gpu/gpus.json) within TOTAL_TOLERANCE_PERCENT (`gpu_total_checks`); a total on a GPU no sidecar names is
listed, not checked. A run exits 1 when one is off.

For every log with a sidecar `<name>.json` (provenance, vLLM version, model, GPU, knobs), plan the model through
`capacity reconcile`'s own path (capacity.cli.startup_plan.reconcile_startup, with the sidecar's inputs as reconcile's
flags: tests/reconcile/test_predict_logs_agree.py checks both give the same figures), which is `capacity plan`'s
default path (the fake-tensor trace where the family has one, else the formulas; the table says which) with the log's
knobs and the semantics of the logged vLLM version (capacity.vllm.versions: utilization
default, batch defaults per GPU and usage context, CUDA-graph estimate in the KV budget, cross-attention rule, the V1
runner's top-k/top-p path: the log's TopKTopPSampler line, then a sidecar's `"env": {"VLLM_USE_FLASHINFER_SAMPLER": "0"}`).
Compare with what vLLM printed: weights, non-KV memory, available KV memory, KV tokens and the reported concurrency.

A log is "not plannable" (listed with the reason, never failed) when its GPU is not stated, its weights are
quantized and the config at hand is the unquantized checkpoint's (capacity plans GPTQ/AWQ/FP8/... from the
checkpoint's own quantization_config), it is a V0-engine log, its sidecar states no version and the versions its
lines fit change reconcile's verdict (reconcile then picks none), or capacity refuses the model (an architecture other helpers are adding:
re-running after their merge fills those rows in).

Split (decided before any error was looked at, recorded in the results README): a log is in the held-out half
when the first byte of sha256(file name) is odd, else in the calibration half. Calibration uses only the
calibration half.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.log_causes import CAUSES  # noqa: E402
from bench.log_groups import GROUPINGS, gpu_family, group_summary, group_tables, model_kind  # noqa: E402
from bench.log_tables import graph_table, start_table  # noqa: E402
from capacity.cli.startup_plan import StartupRequest, reconcile_startup  # noqa: E402
from capacity.errors import CapacityError  # noqa: E402
from capacity.gpu.catalog import catalog_entry, gpu_by_name  # noqa: E402
from capacity.planning.plan import loaded_bytes  # noqa: E402
from capacity.reconcile.log_inputs import quantization  # noqa: E402
from capacity.source.resolve import catalog, catalog_config  # noqa: E402
from capacity.units import GiB  # noqa: E402
from capacity.vllm.log_facts import VllmLogFacts  # noqa: E402
from capacity.vllm.log_startups import load_vllm_startups, with_stated_version  # noqa: E402
from capacity.vllm.versions import log_semantics  # noqa: E402

LOGS = ROOT / "bench" / "vllm_logs"
TERMS = ("weights", "non_kv", "available_kv", "kv_tokens", "concurrency")
MISS_PERCENT = 3.0
RUN_DATE = "2026-12-02"  # the results folder and the README title


TOTAL_TOLERANCE_PERCENT = 0.1  # a logged total (2 decimals of GiB) against the catalog's cudaMemGetInfo total
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class TotalCheck:
    """A GPU total a log printed or a profile measured, beside the catalog's for the GPU it was read on."""

    where: str  # log file name (#startup) or profile path
    gpu: str | None  # the catalog GPU (None: the source names none capacity knows)
    recorded_bytes: int
    catalog_bytes: int | None
    how: str  # the line or field it was read from

    @property
    def percent(self) -> float | None:
        return None if self.catalog_bytes is None else (self.catalog_bytes - self.recorded_bytes) / self.recorded_bytes * 100

    @property
    def ok(self) -> bool | None:
        """Within TOTAL_TOLERANCE_PERCENT; None when no catalog GPU is named (not checked)."""
        return None if self.percent is None else abs(self.percent) <= TOTAL_TOLERANCE_PERCENT

    def text(self) -> str:
        got = f"{self.recorded_bytes / GiB:.2f} GiB"
        if self.catalog_bytes is None:
            return f"{self.where}: {got} ({self.how}); no catalog GPU named: not checked"
        mark = "ok" if self.ok else "OFF"
        return f"{self.where}: {got} ({self.how}) vs {self.gpu} {self.catalog_bytes / GiB:.2f} GiB: {self.percent:+.3f} % {mark}"


def gpu_total_checks(logs: Path = LOGS, results: Path = RESULTS) -> list[TotalCheck]:
    """Every GPU total the benchmark's logs print and its profiles measured, beside the catalog's (see the docstring)."""
    out: list[TotalCheck] = []
    for log in sorted(logs.glob("*.log")):
        sidecar = log.with_suffix(".json")
        meta = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        entry = catalog_entry(meta["gpu"]) if meta.get("gpu") else None
        for facts in load_vllm_startups(log):
            if facts.gpu.cuda_total_gib is None:
                continue
            recorded = round(facts.gpu.cuda_total_gib * GiB)
            where = log.name + (f" #{facts.index}" if facts.index > 1 else "")
            out.append(TotalCheck(where, entry.name if entry else None, recorded, entry.total_memory_bytes if entry else None, facts.gpu.cuda_total_basis))
    for profile in sorted(results.glob("**/profile-*.json")):
        fingerprint = json.loads(profile.read_text()).get("fingerprint", {})  # capacity.memory.measured_profile's format
        total, name = fingerprint.get("gpu_total_memory_bytes"), fingerprint.get("gpu_name")
        if total is None:
            continue
        entry = catalog_entry(name) if name else None
        where = str(profile.relative_to(ROOT))
        out.append(TotalCheck(where, entry.name if entry else None, int(total), entry.total_memory_bytes if entry else None, f"gpu_total_memory_bytes measured on {name}, driver {fingerprint.get('driver', '?')}"))
    return out


def split_of(name: str) -> str:
    """held-out when the first byte of sha256(file name) is odd (fixed before looking at errors)."""
    return "held-out" if hashlib.sha256(name.encode()).digest()[0] % 2 else "calibration"


@dataclass
class Row:
    log: str
    split: str
    model: str | None
    gpu: str | None
    vllm_version: str | None
    semantics: str | None
    path: str = ""  # "trace" | "formula" | ""
    compile_cache: str = ""  # what the log shows of its torch.compile cache: cold | warm | mixed | eager | not shown
    plannable: bool = True
    reason: str = ""
    vllm: dict[str, float | None] = field(default_factory=dict)
    capacity: dict[str, float | None] = field(default_factory=dict)
    error_percent: dict[str, float | None] = field(default_factory=dict)
    breakdown: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # `capacity plan --vllm-version <the log's version>` with the knobs the user gave vLLM and the catalog's GPU:
    # its available KV memory (GiB), its error against vLLM's, and why there is none
    plan_available_kv: float | None = None
    plan_error_percent: float | None = None
    plan_reason: str = ""
    plan_rules: str = ""
    gpu_family: str = ""  # bench/log_groups.py
    model_kind: str = ""
    # Will it start: the error hazards of the reconcile plan (vLLM refuses, or runs out of memory starting), and the
    # sidecar's `outcome` where the log's start did not complete ("" where it did, or the excerpt does not say)
    start_errors: list[str] = field(default_factory=list)
    outcome: str = ""


def gpu_argument(meta: dict[str, Any], facts: VllmLogFacts) -> tuple[str | None, str]:
    """What `capacity reconcile --gpu` gets for this log: the sidecar's GPU when capacity's catalog knows it (the log's
    CUDA total, when it prints one, is kept: capacity.reconcile.log_inputs.log_gpu), else nothing when the log prints
    CUDA's total; (None, why) when neither gives a GPU (the log is then not plannable)."""
    stated = meta.get("gpu")
    refused = ""
    if stated:
        try:
            gpu_by_name(stated)
            return stated, ""
        except CapacityError as exc:  # unknown, or ambiguous (a laptop part's Linux and WSL2 totals): the catalog says which
            refused = str(exc)
    if facts.gpu.cuda_total_gib is not None:
        return None, ""
    if stated:
        return None, f"the log prints no CUDA total and capacity's catalog refuses the stated GPU: {refused}"
    return None, "the GPU is not stated"


def reconcile_arguments(meta: dict[str, Any], facts: VllmLogFacts) -> dict[str, Any]:
    """The `capacity reconcile` inputs this benchmark plans a log with (capacity.cli.startup_plan.StartupRequest's
    fields): the sidecar's model, GPU, knobs (as flags), environment and, where the log shows no compile line, the
    compile-cache state its source states. tests/reconcile/test_predict_logs_agree.py passes the same as CLI flags."""
    model = meta["capacity_model"]
    flags = {k: v for k, v in meta.get("knobs", {}).items() if k != "quantization"}
    if meta.get("compile_cache") and facts.compile_cache is None:
        flags["compile_cache"] = meta["compile_cache"]
    return {
        "model": str(ROOT / model) if (ROOT / model).exists() else model,
        "flags": flags,
        "gpu": gpu_argument(meta, facts)[0],
        "env": dict(meta.get("env", {})),
    }


def startup_of(log: Path, meta: dict[str, Any]) -> VllmLogFacts:
    """The startup of the log the sidecar names, with the sidecar's version (as `--engine N --vllm-version V`)."""
    facts = load_vllm_startups(log)[meta.get("engine", 1) - 1]
    if meta.get("vllm_version"):
        facts = with_stated_version(facts, meta["vllm_version"], f"the sidecar's vllm_version ({meta.get('version_basis', 'stated')})")
    return facts


def _config_is_quantized(model: str) -> bool:
    """Whether the config the log is planned with carries a quantization_config (capacity.weights.quant_schemes.quant_scheme reads it)."""
    local = ROOT / model / "config.json"
    if local.exists():
        config = json.loads(local.read_text())
    else:
        entry = catalog(include_unplannable=True).get(model)
        if entry is None:
            return False
        config = catalog_config(entry)
    text = config.get("text_config")
    return "quantization_config" in config or (isinstance(text, dict) and "quantization_config" in text)


def _err(cap: float | None, vllm: float | None) -> float | None:
    if cap is None or vllm is None or vllm == 0:
        return None
    return (cap - vllm) / abs(vllm) * 100


def predict(log: Path, *, formula: bool) -> Row:
    """One log planned through `capacity reconcile`'s own path (capacity.cli.startup_plan.compare_startup) with the
    sidecar's inputs, and scored term by term."""
    meta = json.loads(log.with_suffix(".json").read_text())
    facts = startup_of(log, meta)
    version = facts.version
    sem = log_semantics(facts)  # its name and whether it plans; the sidecar's env reaches the plan through reconcile_arguments
    row = Row(log.name, split_of(log.name), meta.get("model"), meta.get("gpu"), version, sem.name if sem else None)
    row.outcome = meta.get("outcome", "")
    eager = bool(meta.get("knobs", {}).get("enforce_eager") or facts.engine_config.get("enforce_eager") or facts.log_knobs.get("enforce_eager"))
    row.compile_cache = "eager" if eager else facts.compile_cache.state if facts.compile_cache is not None else "not shown"
    stated_cache = meta.get("compile_cache")  # what the log's source says of the cache where its lines show none
    if row.compile_cache == "not shown" and stated_cache:
        row.compile_cache = stated_cache
        row.notes.append(f"compile cache {stated_cache}, from the sidecar: {meta.get('compile_cache_basis', 'stated')}")
    in_use = facts.free_memory.kv_cache_in_use_gib if facts.free_memory is not None else None
    row.vllm = {
        "weights": facts.model_loading_gib,
        # 'Current kv cache memory in use' (the KV tensors allocated) stands in when the log has no Available line
        "available_kv": facts.kv_cache_gib if facts.kv_cache_gib is not None else in_use,
        "kv_tokens": facts.kv_cache_tokens,
        "concurrency": facts.max_concurrency,
        "requested": facts.requested_gib,
    }
    reasons = []
    _, why = gpu_argument(meta, facts)
    if why:
        reasons.append(why)
    q = meta.get("knobs", {}).get("quantization") or quantization(facts)
    model = meta.get("capacity_model")
    if q and model and not _config_is_quantized(model):
        reasons.append(
            f"quantized weights ({q}): capacity plans a quantized checkpoint from its own config's quantization_config, "
            f"and the config here ({model}) is the unquantized checkpoint's"
        )
    if sem is not None and not sem.plannable:
        reasons.append(sem.why_not_plannable)
    if not model:
        reasons.append(meta.get("not_plannable") or "no config.json for this model")
    if reasons:
        row.plannable, row.reason = False, "; ".join(reasons)
        return row
    started = time.perf_counter()
    try:
        compared, result = reconcile_startup(facts, StartupRequest(estimate="formula" if formula else "trace", **reconcile_arguments(meta, facts)))
    except CapacityError as exc:
        row.plannable, row.reason = False, f"capacity refuses it: {' '.join(str(exc).split())[:200]}"
        return row
    if compared is None:  # reconcile picks no version: the ones the lines fit plan it differently
        row.plannable, row.reason = False, "the sidecar states no vLLM version, and " + result.notes[0]
        return row
    if result.inference is not None:
        row.notes.append(result.notes[-1])
    plan, row.path = compared.plan, compared.estimate
    if formula:
        row.notes.append("--formula")
    elif compared.fallback:
        row.notes.append(compared.fallback)
    row.seconds = round(time.perf_counter() - started, 1)
    gpu = plan.gpu
    row.gpu = f"{gpu.name} ({gpu.total_memory_bytes / GiB:.2f} GiB, {gpu.source})"
    row.gpu_family = gpu_family(plan, named=gpu_argument(meta, facts)[0] is not None)
    row.model_kind = model_kind(plan)
    row.start_errors = [h.id for h in plan.hazards if h.severity == "error"]
    requested_log = facts.requested_gib
    requested = requested_log * GiB if requested_log is not None else plan.requested_memory_bytes
    kv_printed = row.vllm["available_kv"] if facts.kv_cache_memory_reserved_gib is None else None
    vllm_non_kv = None if kv_printed is None else requested / GiB - kv_printed
    row.vllm["non_kv"] = vllm_non_kv
    row.capacity = {t: v for t, v in result.figures if t != "num_blocks"}  # the figures reconcile's rows show
    if facts.kv_cache_gib is None and in_use is not None:
        row.notes.append("vLLM's KV memory is the log's 'Current kv cache memory in use' (no 'Available KV cache memory' line)")
    if facts.kv_cache_memory_reserved_gib is not None and facts.available_kv_cache_gib is None:
        row.notes.append("vLLM ran with --kv-cache-memory-bytes: the KV memory is an input, not a prediction")
    row.error_percent = {t: _err(row.capacity.get(t), row.vllm.get(t)) for t in TERMS}
    version_plan, row.plan_reason = plan_with_version(meta, facts, formula=formula)
    if version_plan is not None:
        row.plan_rules = version_plan.semantics.name
        row.plan_available_kv = round(version_plan.kv.available_bytes / GiB, 3)
        row.plan_error_percent = _err(row.plan_available_kv, row.vllm.get("available_kv"))
    m = plan.memory
    row.breakdown = {
        "requested_from": "log" if requested_log is not None else "capacity (the log does not print it)",
        "max_num_batched_tokens": plan.serving.max_num_batched_tokens,
        "max_num_seqs": plan.serving.max_num_seqs,
        "max_model_len": plan.serving.max_model_len,
        "gpu_memory_utilization": plan.serving.gpu_memory_utilization,
        "log_max_num_batched_tokens": facts.effective_max_num_batched_tokens,
        "capacity_terms_gib": {k: round(m[k].bytes / GiB, 3) for k in ("weights", "load_buffers", "activation_peak", "encoder_cache", "non_torch", "cuda_graphs")},
        "log_cuda_graph_estimate_gib": facts.cudagraph_estimate_gib(plan.gpu.total_memory_bytes / GiB),
        "log_graph_capture_gib": facts.graph_capture_gib if facts.graph_capture_gib is not None else facts.cudagraph_actual_gib,
        # capacity's estimate of the graphs, set aside or captured after the KV cache (then 0 in cuda_graphs)
        "capacity_graph_estimate_gib": round(max(m["cuda_graphs"].bytes, plan.graphs_after_budget_bytes) / GiB, 3),
        "requested_gib": {"log": requested_log, "capacity": round(plan.requested_memory_bytes / GiB, 3)},
        "vllm_non_weights_gib": None if vllm_non_kv is None or facts.model_loading_gib is None else round(vllm_non_kv - facts.model_loading_gib, 3),
        "capacity_non_weights_gib": round((plan.non_kv_bytes - loaded_bytes(plan)) / GiB, 3),
    }
    return row


def plan_with_version(meta: dict[str, Any], facts: VllmLogFacts, *, formula: bool) -> tuple[Any | None, str]:
    """What `capacity plan --model M --gpu G --vllm-version V <the log's non-default args>` gives a user who knows what
    they ran: the model and knobs reconcile is given (the sidecar's and the log's own non-default args, not the
    engine's effective config), the GPU by its catalog name (the catalog's total, not the one the log prints), the
    version the log or its sidecar states, and none of what only the log shows (its sampler line, environment).
    (plan, "") or (None, why not)."""
    from capacity.cli.estimate import plan_with_estimate
    from capacity.reconcile.log_inputs import knobs_from_log
    from capacity.serving.config import ServingArgs
    from capacity.vllm.versions import planned_semantics

    gpu = meta.get("gpu")
    if not gpu:
        return None, "the sidecar names no GPU"
    try:
        gpu_by_name(gpu)
    except CapacityError as exc:
        return None, f"the catalog refuses the GPU: {exc}"
    if not facts.version:
        return None, "no vLLM version stated"
    inputs = reconcile_arguments(meta, facts)
    knobs = {**knobs_from_log(facts, effective=False), **inputs["flags"]}
    try:
        # its user ran VLLM_USE_V1=0 (a V0 log) or 1 (a V1 log: the default, and 0.8's LoRA needs it set)
        semantics = planned_semantics(facts.version, use_v1="0" if facts.engine == "V0" else "1")
        semantics = semantics.with_model_runner_env(meta.get("env", {}).get("VLLM_USE_V2_MODEL_RUNNER"))
        plan = plan_with_estimate(inputs["model"], ServingArgs(**knobs), gpu, None, offline=True, estimate="formula" if formula else "trace", semantics=semantics)
    except CapacityError as exc:
        return None, f"capacity plan refuses it: {' '.join(str(exc).split())[:160]}"
    return plan, ""


def _fmt(x: float | None, pct: bool = True) -> str:
    if x is None:
        return "-"
    return f"{x:+.1f} %" if pct else f"{x:,.2f}"


def summary(rows: list[Row], split: str, cache: str | None = None) -> dict[str, dict[str, float | int | None]]:
    out: dict[str, dict[str, float | int | None]] = {}
    for t in TERMS:
        errs = [
            abs(r.error_percent[t])
            for r in rows
            if r.plannable and r.split == split and r.error_percent.get(t) is not None and cache in (None, r.compile_cache)
        ]
        out[t] = {
            "n": len(errs),
            "median_abs_percent": round(statistics.median(errs), 2) if errs else None,
            "worst_abs_percent": round(max(errs), 2) if errs else None,
        }
    return out


def plan_summary(rows: list[Row], split: str | None) -> dict[str, float | int | None]:
    """`plan --vllm-version` beside reconcile on the logs where both give an available KV memory: the median |error| of
    each against vLLM's, and the median and worst |plan error - reconcile error| (percentage points)."""
    both = [
        r for r in rows
        if r.plannable and split in (None, r.split) and r.plan_error_percent is not None and r.error_percent.get("available_kv") is not None
    ]  # fmt: skip
    gaps = [abs(r.plan_error_percent - r.error_percent["available_kv"]) for r in both]  # type: ignore[operator]
    return {
        "n": len(both),
        "plan_median_abs_percent": round(statistics.median(abs(r.plan_error_percent) for r in both), 2) if both else None,  # type: ignore[arg-type]
        "reconcile_median_abs_percent": round(statistics.median(abs(r.error_percent["available_kv"]) for r in both), 2) if both else None,  # type: ignore[arg-type]
        "gap_median_points": round(statistics.median(gaps), 2) if gaps else None,
        "gap_worst_points": round(max(gaps), 2) if gaps else None,
        "within_3_points": sum(g <= 3 for g in gaps),
    }


CACHE_STATES = ("warm", "cold", "mixed", "eager", "not shown")


def _percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} %"


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    """A markdown table: text columns (the first two) left, figures right."""
    align = ["---" if i < 2 else "---:" for i in range(len(header))]
    return ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|", *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]


def _cell(row: Row, term: str) -> str:
    v = row.error_percent.get(term)
    return "-" if v is None else f"{v:+.1f}"


def write_readme(rows: list[Row], doc: dict[str, Any], out: Path, before: dict[str, Any] | None = None) -> None:
    plannable = [r for r in rows if r.plannable]
    traced = sum(r.path == "trace" for r in plannable)
    lines = [
        f"# capacity's plan against public vLLM startup logs ({RUN_DATE})",
        "",
        "`python bench/predict_logs.py` (this folder's `results.json` is its output; the logs, their provenance and knobs are in",
        "`bench/vllm_logs/`). Each log is planned with the knobs it states and the rules of its vLLM version",
        "(`capacity/vllm/versions.py`); the GPU total is CUDA's total when the log prints it, else the catalog's. Errors are",
        "(capacity - vLLM) / |vLLM|. Non-KV memory is vLLM's requested memory minus its KV memory (the requested memory from the",
        "log when it prints it, else capacity's: same GPU total and utilization). Path: `trace` = the fake-tensor trace of the",
        "real model (`capacity plan`'s default path) re-planned with the version's rules, `formula` = the formulas where the",
        f"trace could not run (the reason is in results.json's `notes`); {traced} of {len(plannable)} plannable logs traced on this 2-core",
        "machine (`seconds` in results.json).",
        "",
        "Split (fixed before any error was computed, `SPLIT.md`): held-out when the first byte of sha256(file name) is odd.",
        "Calibration (`capacity/memory/non_torch.py`: `VLLM_NON_TORCH_BYTES`, `V0_NON_TORCH_BYTES` (2026-12-02, from the one V0 log of",
        "the calibration half that prints it; chosen after the held-out V0 logs' causes named the 0.27 GiB V1 figure),",
        "`Family.trace_encoder_to_vllm` (qwen2_5_vl.py: 0.694 since 2026-12-01)) used the calibration half only. The weights column compares vLLM's 'Model loading took' with capacity's",
        "weights + load buffers (`capacity/memory/load_buffers.py`: rotary caches, exact; CUDA caching-allocator rounding, estimated).",
        "Measured, not fitted to any log: the CUDA-graph capture costs (`capacity/memory/cuda_graphs.py`, bench/cuda_graph_memory.py)",
        "and the sort path's 36 B per logit (bench/sampler_sort_gpu.py), both on the H200. The sort was measured after the",
        "held-out Qwen3-Next log showed a 1.5 GiB activation gap; the constant is the H200's, and that log is named in its cause.",
        "",
        f"{len(rows)} logs; {len(plannable)} plannable (model, GPU and knobs known, a model capacity plans).",
        "",
        "## Summary: median and worst |error| per term",
        "",
    ]
    lines += _table(
        ("half", "term", "n", "median", "worst"),
        [
            (half, t, doc["summary"][half][t]["n"], _percent(doc["summary"][half][t]["median_abs_percent"]), _percent(doc["summary"][half][t]["worst_abs_percent"]))
            for half in ("calibration", "held-out")
            for t in TERMS
        ],
    )
    lines += ["", "## `plan --vllm-version` beside reconcile (available KV, logs where both plan)", ""]
    lines += _table(
        ("half", "n", "plan median |error|", "reconcile median |error|", "median |plan - reconcile|", "worst", "within 3 points"),
        [
            (half, d["n"], _percent(d["plan_median_abs_percent"]), _percent(d["reconcile_median_abs_percent"]), _percent(d["gap_median_points"]), _percent(d["gap_worst_points"]), d["within_3_points"])
            for half, d in doc["summary_plan_vs_reconcile"].items()
        ],
    )
    lines += ["", *group_tables(doc["summary_by_group"])]
    lines += [
        "",
        "## By the torch.compile cache the log shows",
        "",
        "vLLM compiles inside the memory profile, so a start that compiled (cold: 'Compiling a graph for ...', 'saved AOT",
        "compiled function') gets less KV cache than a restart (capacity/memory/compile_cache.py, bench/compile_cache/EVIDENCE.md).",
        "Each log is planned in the state its lines show, or its sidecar states from its source; 'not shown' (often an",
        "excerpt without a compile line) is planned warm; 'eager' compiles nothing. Median |error| of available KV / KV tokens (n):",
        "",
    ]
    by_cache = doc["summary_by_compile_cache"]
    lines += _table(
        ("half", "cache", "available KV", "KV tokens"),
        [
            (half, c, *(f"{_percent(by_cache[half][c][t]['median_abs_percent'])} ({by_cache[half][c][t]['n']})" for t in ("available_kv", "kv_tokens")))
            for half in ("calibration", "held-out")
            for c in CACHE_STATES
        ],
    )
    lines += [
        "",
        "## Per log (error in %)",
        "",
        "`plan --vllm-version`: the available KV memory of `capacity plan --vllm-version <the log's version>` with the",
        "knobs the user gave vLLM and the catalog's GPU (bench/predict_logs.py plan_with_version), beside reconcile's.",
        "",
        "| log | half | vLLM rules | GPU | path | compile cache | weights | non-KV | available KV | plan --vllm-version, available KV | KV tokens | concurrency |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in plannable:
        plan_cell = _fmt(r.plan_error_percent) if r.plan_error_percent is not None else f"- ({r.plan_reason})" if r.plan_reason else "-"
        lines.append(
            f"| {r.log} | {r.split} | {r.semantics} | {r.gpu} | {r.path} | {r.compile_cache} | {_cell(r, 'weights')} | {_cell(r, 'non_kv')} | "
            f"{_cell(r, 'available_kv')} | {plan_cell} | {_cell(r, 'kv_tokens')} | {_cell(r, 'concurrency')} |"
        )
    if before is not None:
        prev = {r["log"]: r for r in before["doc"]["rows"] if r.get("plannable")}
        lines += [
            "",
            f"## Change from the previous run ({before['name']}): error in %, before -> after",
            "",
            "| log | half | weights | non-KV | available KV | KV tokens | concurrency |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in plannable:
            old = prev.get(r.log, {}).get("error_percent", {})
            cells = [f"{_fmt(old.get(t))} -> {_fmt(r.error_percent.get(t))}".replace(" %", "") for t in TERMS]
            lines.append(f"| {r.log} | {r.split} | " + " | ".join(cells) + " |")
        lines += ["", "Summary before -> after (median / worst |error|, %):", ""]
        for half in ("calibration", "held-out"):
            for t in TERMS:
                a_, b_ = before["doc"]["summary"][half][t], doc["summary"][half][t]
                lines.append(
                    f"- {half} {t}: {a_['median_abs_percent']} / {a_['worst_abs_percent']} -> {b_['median_abs_percent']} / {b_['worst_abs_percent']}"
                )
    dicts = [asdict(r) for r in rows]
    lines += ["", "## Will it start: capacity's error hazards against the start the log shows", "", *start_table(dicts)]
    lines += [
        "",
        "## CUDA graphs: capacity's estimate against what vLLM logged",
        "",
        "Where a log prints vLLM's own estimate ('Estimated CUDA graph memory', or the utilization it is equivalent to) or the",
        "capture itself ('Graph capturing finished ... took X GiB'); capacity's figure is its estimate whether the version sets",
        "it aside or captures the graphs after the KV cache (`graphs_after_budget_bytes`).",
        "",
        *graph_table(dicts),
    ]
    lines += ["", "## Cause of every miss above 3 %", ""]
    for r in plannable:
        misses = [t for t in TERMS if r.error_percent.get(t) is not None and abs(r.error_percent[t]) > MISS_PERCENT]
        if misses:
            lines.append(f"- **{r.log}** ({', '.join(misses)}): {CAUSES.get(r.log, 'not analysed')}")
    lines += ["", "## Not plannable (listed, not failed; what still blocks each)", ""]
    for r in rows:
        if not r.plannable:
            lines.append(f"- {r.log}: {r.reason}")
    (out / "README.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"predict-logs-{RUN_DATE}")
    ap.add_argument("--formula", action="store_true", help="skip the fake-tensor trace (formulas only)")
    ap.add_argument("--only", default=None, help="only logs whose name contains this")
    ap.add_argument("--check-totals", action="store_true", help="only check the GPU totals the logs and profiles record against the catalog")
    ap.add_argument("--before", type=Path, default=ROOT / "bench" / "results" / "predict-logs-2026-11-30" / "results.json", help="a previous results.json to compare with")
    a = ap.parse_args()
    totals = gpu_total_checks()
    for check in totals:
        if check.ok is not True:
            print(check.text(), flush=True)
    off = [c for c in totals if c.ok is False]
    print(f"GPU totals: {sum(c.ok is True for c in totals)} within {TOTAL_TOLERANCE_PERCENT} % of the catalog, {len(off)} off, {sum(c.ok is None for c in totals)} on no named GPU", flush=True)
    if a.check_totals:
        sys.exit(1 if off else 0)
    rows = []
    for log in sorted(LOGS.glob("*.log")):
        if a.only and a.only not in log.name:
            continue
        if not log.with_suffix(".json").exists():
            continue
        row = predict(log, formula=a.formula)
        rows.append(row)
        errs = " ".join(f"{t}={_fmt(row.error_percent.get(t))}" for t in TERMS) if row.plannable else f"not plannable: {row.reason}"
        plan_err = f" plan={_fmt(row.plan_error_percent)}" if row.plannable else ""
        print(f"{row.split:11} {log.name:58} {row.path:7} {errs}{plan_err}", flush=True)
    doc = {
        "split_rule": "held-out when sha256(file name)[0] is odd, else calibration (fixed before looking at errors)",
        "summary": {s: summary(rows, s) for s in ("calibration", "held-out")},
        "summary_by_compile_cache": {s: {c: summary(rows, s, c) for c in CACHE_STATES} for s in ("calibration", "held-out")},
        "summary_plan_vs_reconcile": {"all": plan_summary(rows, None), "calibration": plan_summary(rows, "calibration"), "held-out": plan_summary(rows, "held-out")},
        "summary_by_group": {key: group_summary(rows, key) for key, _ in GROUPINGS},
        "rows": [r.__dict__ for r in rows],
        "gpu_totals": [{**c.__dict__, "percent": c.percent, "ok": c.ok} for c in totals],
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    if a.only is None:
        before = {"name": a.before.parent.name, "doc": json.loads(a.before.read_text())} if a.before and a.before.is_file() else None
        write_readme(rows, doc, a.out, before)
    print(json.dumps(doc["summary"], indent=2))
    if off:
        sys.exit(1)


if __name__ == "__main__":
    main()
