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
import contextlib
import hashlib
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.log_groups import GROUPINGS, gpu_family, group_summary, group_tables, model_kind  # noqa: E402
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
    sem = log_semantics(facts)
    if sem is not None:  # the sampler the startup used: its TopKTopPSampler line (log_semantics), then the env its sidecar states
        sem = sem.with_sampler_env(meta.get("env", {}).get("VLLM_USE_FLASHINFER_SAMPLER"))
        with contextlib.suppress(CapacityError):  # a runner capacity does not model: the plan below refuses it, in the row's reason
            sem = sem.with_model_runner_env(meta.get("env", {}).get("VLLM_USE_V2_MODEL_RUNNER"))
    row = Row(log.name, split_of(log.name), meta.get("model"), meta.get("gpu"), version, sem.name if sem else None)
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


# The cause of each miss above 3 % (found by reading the log's lines against the plan's terms; see the README). Only logs
# with a miss have an entry (write_readme looks a miss's log up here; a miss without one prints "not analysed").
# Figures are GiB; "vLLM's non-weights memory" is its requested memory - its KV memory - what it loaded.
CAUSES: dict[str, str] = {
    "qwen3-32b-2xrtxpro6000-pp2-util0.426-len32768-v0.27.1-excerpt.log":
    "available KV (PP 0) +18.5 %, KV tokens +16.3 %: not identified. vLLM kept 3.03 GiB on PP 0 besides the 30.52 GiB "
    "it loaded (0.426 x 95.01 - 6.92 - 30.52), capacity 1.75 (the decoder phase's 1.48, non-torch 0.27). The start is "
    "`docker run ... vllm/vllm-openai:latest` with only the HF cache mounted, so its compile cache was most likely "
    "cold (the excerpt has no compile line and is planned warm); but a cold compile explains little of it under "
    "capacity's scratch model: S = 151,936 x 5120 x 2 B (the embedding) + 8,192 x 5120 x 2 B + the 128 MiB L2 = 1.65 "
    "GiB, and the stage's cold peak max(1.48 + A, S) = 1.69 GiB, 0.2 GiB above the warm one, against a 1.28 GiB gap "
    "(bench/results/predict-logs-pp-dp-2026-12-02 first estimated 1.3 GiB by taking the warm peak as 0.3: wrong). The "
    "same post's TP 2 start on the same GPUs and budget kept 1.66 GiB per rank besides its weights (not in the "
    "benchmark): a PP stage runs the unsplit layers, so its activation is larger, but capacity's 1.48 GiB already "
    "holds that.",
    "qwen3-30b-a3b-thinking-2507-fp8-gb10-util0.55-len32768-v0.30.0-excerpt.log":
    "(below 3 % since the CUDA-graph estimate counts the PIECEWISE captures: KV tokens +2.0 %; it was +3.4 %.) "
    "The log's '--gpu-memory-utilization=0.5500 is equivalent to --gpu-memory-utilization=0.5410 without CUDA "
    "graph memory profiling' puts vLLM 0.30.0's estimate at (0.55 - 0.541) x 121.69 GiB = 1.095 GiB (+-0.006); "
    "capacity's (capacity/memory/cuda_graphs.py: 51 PIECEWISE sizes x 49 pieces measured in full, 35 FULL decode "
    "graphs extrapolated, H200-measured capture costs) is 0.54 GiB. The remaining 0.55 GiB is GB10's: its "
    "estimate is a difference of mem_get_info's free memory over the unified LPDDR5X pool, which the host side "
    "of each graph moves too (bench/cuda_graphs/compare.md). Stand-in config: the catalog's Qwen3-30B-A3B-FP8 "
    "(same shapes and FP8 blocks as the Thinking-2507 checkpoint served).",
    "gpt-oss-20b-gb10-util0.55-len32768-v0.30.0-excerpt.log":
    "(below 3 % since the CUDA-graph estimate counts the PIECEWISE captures: KV tokens +2.6 %; it was +3.5 %.) "
    "The excerpt prints only the load (13.8 GiB, capacity 13.69) and the KV line; capacity sets aside 0.47 GiB "
    "of graphs (0.06 before). The same report's Qwen3-30B-FP8 start on this GB10 prints an estimate of 1.10 "
    "GiB where capacity has 0.54 (unified memory; see that log), which would account for about 1 % more. "
    "Planned by formula (the gpt-oss trace is not run). Not fitted: a held-out log.",
    "qwen2.5-1.5b-rtx4070-laptop-wsl-util0.8-len4096-v0.30.0.log":
    "available KV / KV tokens / concurrency +33.2 %, non-KV -14.6 %: not identified. The excerpt prints three "
    "lines (load 2.98 GiB, KV 1.95 GiB, 72,992 tokens), no requested memory, no CUDA total and no compile "
    "line, so capacity uses 0.8 x the catalog's RTX-4070-Laptop-WSL total (8,187 MiB) and a warm compile "
    "cache: vLLM's non-weights memory is then 1.47 GiB where capacity has 0.91 (activation 0.26, non-torch "
    "0.27, graphs 0.39). A cold start would add 0.34 GiB (S = 151,936 x 1536 x 2 + 2048 x 1536 x 2 B + the L2 "
    "upper bound, 0.60 GiB, above the 0.26 GiB warm peak); WSL2's driver keeps memory besides (its RTX 4050 "
    "pair: 0.53 GiB more consumed on the cold start). The weights' -3.2 % (2.98 against 2.88 GiB) is the same "
    "0.1 GiB the Qwen2.5-1.5B sm75 log shows, not identified either.",
    "llama-3.1-8b-jetson-thor-v0.10.2.log":
    "non-KV +7.4 % (available KV / tokens / concurrency -1.6 %): vLLM's non-weights memory is 3.60 GiB, "
    "capacity's 4.98: activation 4.71, the V1 runner's dummy sampler run on 1,024 x 128,256 logits on the sort "
    "path (0.10.2 without FlashInfer) at the 36 + 2 B per logit torch's CUDA sort takes on the H200 "
    "(bench/results/h200-sampler-sort-2026-12-01). At 26 + 2 B (the later stages' peak, what the wheel's "
    "Sampler holds on CPU) it would be 3.42 GiB and the start within 0.2 %: on this Jetson Thor (its own torch "
    "build, unified memory) the sort's temporaries look smaller than on the H200, as in the A100 0.15.1 start "
    "(-1.6 %) and unlike the H200 (Qwen3-Next) and L40S (Qwen3-235B) starts whose printed breakdowns agree "
    "with 36 B. Not measured off the H200; not identified.",
    "gemma-4-e4b-rtx3090ti-len32768-v0.22.1.log":
    "available KV / KV tokens / concurrency +18.1 %, non-KV -4.3 %: capacity leaves 4.84 GiB for the KV cache "
    "where vLLM left 4.10, 0.74 GiB on a small budget. Identified: the CUDA-graph estimate, 0.79 GiB printed "
    "(PIECEWISE=51, FULL=35) where capacity's V1 estimate is 0.51 (0.29 GiB); the weights, 15.18 GiB loaded "
    "where capacity counts 15.06 (0.12); and the GPU total: the log prints none, capacity takes the catalog's "
    "RTX-3090-Ti 23.99 GiB (nvidia-smi), while the log's own utilization line ((0.9000 - 0.8667) x total = "
    "0.79 GiB) puts CUDA's total at 23.54-23.91 GiB, 0.07-0.41 GiB of requested memory at 0.9. What is left (0 "
    "to 0.3 GiB of activation or non-torch memory) is not identified. The KV layout agrees once 0.22's sliding "
    "windows reserve one batch (81 blocks per sliding group; the printed 6.85x concurrency at 4.1 GiB is that "
    "layout's, test_vllm_versions.py).",
    # --- V0 engine ---
    "llama-3.2-3b-t4-v0-engine-v0.8.2-unsloth.log": "non-KV -10.1 %, available KV +11.3 % (+7.7 % until 2026-12-02, when "
    "capacity took V0's non-torch growth from this log's own 'non_torch_memory takes 0.05GiB' in place of V1's 0.27 GiB: "
    "the non-torch term now agrees, which leaves the activation): vLLM's activation peak is 0.90 GiB, "
    "capacity's 0.19 GiB (0.17 + the cold compile's autotuning term). The V0 profile run samples max_num_seqs = 192 dummy sequences with top_k = vocab - 1 and top_p = 0.99 "
    "(V0 model_runner.profile_run, index id 1437387700): sorting and softmaxing a 192 x 128,256 float32 logits tensor peaks "
    "at about 39 B per logit, above the forward pass of only 2,048 tokens. Capacity does not model V0's sampler; in the other "
    "V0 logs the forward pass of 20,000-32,768 tokens dominates. Not fitted: one log. (The weights agree: 6.0160 GiB "
    "with the 32 MiB rotary cache and 0.5 MiB of allocator rounding of the embedding.)",
    "llama-3.1-8b-24gb-oci-aqua-v0-engine-excerpt.log": "(below 3 % since 2026-12-02: capacity plans V0's non-torch growth "
    "at the calibration half's V0 figure, 0.05 GiB; available KV -0.1 %.) Before: available KV -4.9 %, concurrency -5.8 %: the V0 worker line prints "
    "non_torch_memory 0.05 GiB where capacity adds its calibrated 0.27 GiB (a CUDA-graph-era median; this V0 profile runs "
    "before graphs are captured); the activation peak agrees (log 0.22, capacity 0.23 GiB for V0's 2048-token chunk: V0 turns "
    "chunked prefill on above 32K tokens), and so do the weights (14.9888 GiB with the 32 MiB rotary cache). 0.23 GiB "
    "on a 4.60 GiB KV budget.",
    # --- V1 engine, V1 model runner ---
    "llama-3.1-8b-l4-len32000-util0.92-v0.11.0.log":
    "available KV -8.4 %, KV tokens -8.5 %, concurrency -8.7 %: capacity sets aside 0.40 GiB more than vLLM on "
    "a 4.75 GiB KV budget. vLLM's non-weights memory is 0.53 GiB (0.92 x 22.03 - 4.75 - 14.99; the log prints "
    "neither CUDA's total nor the requested memory, so the catalog's L4 total, CUDA's 22.03 GiB from another "
    "L4 log, is used), capacity's 0.93: activation 0.66 (the V1 runner's dummy sampler run on 128 x 128,256 "
    "logits, the sort path the log's 'FlashInfer is not available. Falling back to the PyTorch-native "
    "implementation' line confirms, at the 36 + 2 B per logit torch's CUDA sort takes on the H200: 0.58 GiB; "
    "max_num_seqs = 128 from the command) and non-torch 0.27. vLLM's whole 0.53 GiB is below that sampler "
    "figure alone: this start's sort held less than the H200's (at 26 + 2 B, the later stages' peak, it would "
    "be 0.43 GiB), which the log cannot say (0.11 prints its breakdown at DEBUG only); not identified. The "
    "weights agree (14.9889). No CUDA-graph term on either side (0.8-0.11 capture after the KV budget).",
    "llama-3.1-8b-ft-rtx6000ada-len128000-fp16-v0.15.1.log":
    "(below 3 %: non-KV -0.6 %, available KV +0.4 %.) This start compiled ('Compiling a graph for compile "
    "range (1, 2048)'): S = 128,256 x 4096 x 2 + 2048 x 4096 x 2 B + 96 MiB of L2 = 1.09 GiB, below the 1.16 "
    "GiB warm peak (the dummy sampler run on 256 x 128,256 logits, 36 + 2 B per logit with 0.15.1's sort on "
    "CUDA), so the cold compile adds nothing. The rest is about the GPU total: the catalog's RTX-6000-Ada "
    "total is nvidia-smi's 49,140 MiB (47.99 GiB), while CUDA's is about 0.5 GiB lower on Linux (the "
    "transcript's 'VRAM: 47.5 GB').",
    "llama-3.1-8b-ft-rtx6000ada-len8192-v0.15.1.log":
    "(below 3 %: non-KV -1.9 %, available KV +1.2 %.) The same start as the 128000 one at max_model_len 8192 "
    "(vLLM non-KV 16.76 GiB, capacity 16.45): the sort-based dummy sampler run is counted (1.16 GiB of "
    "activation); what is left is about the catalog's nvidia-smi total against the transcript's 'VRAM: 47.4 "
    "GB' (about 0.5 GiB at 0.9), not identified beyond that (no breakdown line at INFO in 0.15.1).",
    "llava-1.5-7b-rtx4080-wsl-fp16-len2048-v0.10.2.log": "2026-12-02: available KV +58.3 % (capacity 0.41 GiB, vLLM 0.26), "
    "weights -0.01 % (13.133 against 13.134) since capacity builds LLaVA's CLIP to its feature layer as vLLM does "
    "(25 MB fewer: more KV, so the error grew); the analysis below is of the 2026-12-01 figures. "
    "Then: available KV +78.7 % of a 0.26 GiB budget (non-KV -1.4 %): "
    "a failed start, so the relative error is of a tiny figure: capacity leaves 0.47 GiB for the KV cache where vLLM left "
    "0.26, 0.21 GiB apart (0.35 before the cold compile's autotuning term for the compile the log shows: 2048 x 4096 x 2 B "
    "+ the L2 upper bound, capacity not knowing the RTX 4080's L2 of this WSL2 machine). Capacity also refuses the start: 0.60 GiB holds 1,232 tokens, below the 2,048 (1.00 GiB) one "
    "request needs, which is the log's ValueError. vLLM's non-weights memory is 1.00 GiB (0.9 x 15.99 - 0.26 - 13.13; "
    "CUDA's 15.99 GiB total is printed by the same machine's other logs of that evening), capacity's 0.63: activation 0.23 "
    "(the V1 runner's sort-based dummy sampler run on 256 x 32,064 logits; the log prints 'FlashInfer is not available'), "
    "encoder cache 0.01, non-torch 0.39 (0.27 + the cuDNN constant for CLIP's convolution). The same machine's AWQ start "
    "at 18:52 (vllm_llava_correct.log of the same repository, same vision tower and 2,048-token profile) prints 0.34 GiB "
    "for peak activation and 0.02 GiB for non-torch memory, so the 0.37 GiB is most likely this start's non-torch memory "
    "(device-wide on a WSL2 desktop GPU), not the activation: not identified from this log, which fails before 0.10.2's "
    "breakdown line. Weights +0.2 % (13.157 against 13.134).",
    "llava-1.5-7b-rtx4080-wsl-fp16-len4096-v0.10.2.log": "2026-12-02: available KV +342 % (capacity 0.41 GiB, vLLM -0.17), "
    "weights -0.01 % (LLaVA's CLIP built to its feature layer, as vLLM builds it); the analysis below is of the 2026-12-01 "
    "figures. Then: available KV +373 % of a -0.17 GiB budget, non-KV -4.4 %: a "
    "failed start ('No available memory for the cache blocks'): capacity leaves 0.47 GiB where vLLM left -0.17, 0.64 GiB "
    "apart (0.78 before the cold compile's autotuning term). Capacity refuses this start too (0.60 GiB, 1,232 tokens, against the 2.00 GiB one 4,096-token request needs). "
    "vLLM's non-weights memory is 1.43 GiB (0.9 x 15.99 + 0.17 - 13.13), capacity's 0.63 (as the len2048 start). The two "
    "fp16 starts profile the same thing (2,048 batched tokens, 3 images of 576 tokens, 256 sampler rows; max_model_len does "
    "not enter vLLM's profile), yet their non-KV memory differs by 0.43 GiB, and this start spent 494 s downloading weights "
    "between vLLM's initial snapshot (22:06:04) and the profile (22:15:00): the difference is the machine's state "
    "(non-torch memory is device-wide: mem_get_info's used minus torch's reserved), not a term capacity models. Not "
    "identified further (no breakdown line: the start fails before it).",
    "qwen3-0.6b-rtx3060-eager-util0.75-len8192-v0.19.0.log": "non-KV +174.5 %, available KV -15.1 %, KV tokens / "
    "concurrency -15.0 %: vLLM's non-KV memory is 0.69 GiB (0.75 x 11.63 = 8.72 requested - 8.03), below the 1.12 GiB it "
    "loaded. 0.19's non-KV figure is weights + torch peak increase + non-torch increase (memory_profiling); the torch peak "
    "cannot be negative, so the non-torch increase was at most -0.43 GiB. That increase is device-wide (MemorySnapshot: "
    "mem_get_info's used - torch's reserved, from the init snapshot to the end of the profile), so memory another process "
    "released in that window counts negative. The log supports it: this start spent 708.5 s downloading weights between "
    "its init snapshot (17:24:40) and its profile (17:36:41), and the same notes' first start (15:05, two hours earlier) "
    "found only 9.02 of 11.63 GiB free (2.61 GiB in use by other processes and that engine's own CUDA context). With capacity's activation (0.51 GiB: 2,048 "
    "tokens and the V1 runner's 256-row Triton top-k/top-p sampler run) and the 0.15 GiB of non-torch memory the 0.60 start "
    "implies, about 1.1 GiB was released during the window. The start then failed in the V1 sampler warm-up "
    "(_dummy_sampler_run, after the KV cache was allocated; the error line itself is cut in the notes), as a KV cache "
    "sized from an understated non-KV figure would. Capacity's 1.90 GiB non-KV is the figure for a GPU whose other "
    "users hold still; not a modelling gap. Not fitted: a held-out log.",
    "qwen3-0.6b-rtx3060-eager-util0.60-len4096-v0.19.0.log": "non-KV +9.1 % (available KV -2.1 %): 0.12 GiB on a non-KV "
    "budget of only 1.30 GiB (0.60 x 11.63 - 5.68). vLLM's non-weights memory is 0.18 GiB, capacity's 0.30: activation "
    "0.03 (1,024 batched tokens, max_num_seqs 8) and non-torch 0.27; eager, so no graph term. If capacity's activation holds, "
    "this start's non-torch memory was 0.15 GiB against the 0.27 GiB median; 0.19 prints its breakdown at DEBUG only, so "
    "not identified. Same machine as the 0.75 start, 25 minutes later, no download (11 s from init to profile), "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
    "qwen3.5-27b-4xrtx3090-tp4-eager-len32768-v0.19.0.log": "available KV / KV tokens / concurrency +5.1 %: the GPU total. "
    "The log prints neither CUDA's total nor the requested memory, so both sides use the catalog's RTX-3090 total, "
    "nvidia-smi's 24,576 MiB (24.00 GiB): vLLM's non-KV is then 0.92 x 24.00 - 7.47 = 14.61 GiB against capacity's 14.23 "
    "(weights 12.75 + load buffers 0.25, activation 0.83, encoder cache 0.16, non-torch 0.25; eager). CUDA's total on an "
    "RTX 3090 is lower: the bench's V0 RTX 3090 log prints total_gpu_memory=23.58GiB. With 23.58, vLLM's non-KV is "
    "0.92 x 23.58 - 7.47 = 14.22 GiB and capacity's KV 7.46 GiB: both within 0.1 %. The 0.39 GiB is 0.92 x (24.00 - 23.58), "
    "the catalog total, not a memory term (23.58 was printed on another RTX 3090, not this machine). Weights agree "
    "(-0.1 %). Path: formula (the fake trace stops at a DynamicOutputShapeException).",
    "qwen3-235b-a22b-fp8-8xh100-tp8-ep-kvfp8-v0.10.0.log":
    "available KV / tokens / concurrency +3.7 %, non-KV -3.7 %: per rank vLLM kept 8.28 GiB besides the 27.67 "
    "GiB it loaded (0.9 x 79.65 - 35.74 - 27.67 on rank 0; 8.37 on ranks 1-6, 7.90 on rank 7; the log prints "
    "no requested memory, so capacity's is used), capacity 6.94 GiB: activation 5.68 (the V1 runner's dummy "
    "sampler run on 1,024 x 151,936 logits on the sort path, which every rank's 'FlashInfer is not available' "
    "line confirms, at 36 + 2 B per logit: torch's CUDA sort as measured on the H200) and non-torch 1.26 (0.27 "
    "+ the communicators, which 0.10's snapshot counts: NCCL's NVLinked-H200 measurement and vLLM's buffers at "
    "TP 8); no graph term (0.10 captures after the KV budget). The weights agree (27.6656). 0.10.0 prints no "
    "breakdown line, so the remaining 1.3 GiB is not identified. What the log does show: the ranks' budgets "
    "differ by up to 0.47 GiB with identical weights and shapes, which only device-wide (non-torch) memory can "
    "do; the catalog's H100-SXM total is nvidia-smi's 81,559 MiB (79.65 GiB) where two H100 logs of the bench "
    "print CUDA's 79.19 and 79.25 GiB (0.39 GiB at 0.9). NCCL at TP 8 with expert parallelism (all-to-all "
    "buffers) is not measured. The log compiles (cold), but 0.10 predates the combo-kernel benchmark, so no "
    "scratch term applies.",
    "qwen3-235b-fp8-l40s-tp4.log":
    "(below 3 % since the sort path counts torch's CUDA sort: available KV +0.0 %; it was +3.4 %.) The log's "
    "own breakdown line (rank 2) says 27.72 GiB for weight, 1.4 GiB for peak activation, 0.21 GiB for "
    "non-torch memory; capacity has 27.66 (with load buffers), 1.38 and 0.27. The activation peak is the V1 "
    "runner's dummy sampler run (vLLM 0.10.2 sorts without FlashInfer): 256 x 151,936 logits at 36 + 2 B per "
    "logit, the CUDA sort measured on the H200 (bench/sampler_sort_gpu.py), 1.38 GiB against the log's 1.4. "
    "Weights agree within 0.3 %.",
    "qwen3-next-80b-instruct-2xh200-tp2-v0.10.2.log":
    "(below 3 % since the sort path counts torch's CUDA sort: +0.3 %; it was +3.6 %.) The log's own breakdown "
    "(per rank) says 74.28 GiB for weight, 5.58 GiB for peak activation, 1.38 GiB for non-torch memory; "
    "capacity has 74.28, 5.54 and 1.27. The activation peak is the V1 runner's dummy sampler run, 1,024 rows x "
    "151,936 logits on the sort path: the logits 2 B + 36 B per logit, what torch's CUDA sort holds on the "
    "H200 (the fp32 copy, sorted values, int64 indices and the sort's 20 B of temporaries: "
    "bench/sampler_sort_gpu.py, bench/results/h200-sampler-sort-2026-12-01) where the wheel's Sampler on CPU "
    "holds 26. This held-out log is what sent capacity to measure the CUDA sort (its 1.5 GiB gap was 1,024 x "
    "151,936 x 10 B); the constant is the H200's measurement, not fitted to the log, and the calibration "
    "half's L40S 235B breakdown (1.4 GiB printed, 1.38 capacity) agrees with it. The non-torch figure of "
    "0.10.2 holds NCCL's communicators (its snapshot precedes init_worker_distributed_environment): capacity "
    "adds its NVLinked-H200 measurement and vLLM's buffers to its 0.27 GiB, 0.11 GiB short. Stand-in config: "
    "the catalog's Qwen3-Next-80B-A3B-Thinking (the same architecture as the Instruct checkpoint served).",
    "qwen2.5-vl-7b-2xl4-tp2-len8192-excerpt.log": "available KV / tokens / concurrency +3.2 %, non-KV -3.2 %: per rank vLLM "
    "kept 9.79 GiB of non-KV memory (0.9 x 22.03 - 10.04; the excerpt prints no requested memory), capacity 9.47 GiB "
    "(weights 7.72 + load buffers 0.14, activation 1.11, non-torch 0.39, encoder cache 0.11): 0.32 GiB on a 10.04 GiB KV "
    "budget. The excerpt prints neither the weights nor a breakdown, so the term is not identified.",
    "whisper-large-v3-compose-excerpt.log":
    "non-KV +7.0 % (available KV -1.4 %): the excerpt states no version and its formats are guessed as 0.20, "
    "whose V1 model runner samples 256 dummy rows x 51,866 logits with top-k/top-p (FlashInfer, then "
    "forward_native's Triton path: 12 + 2 B per logit, 0.17 GiB of capacity's 0.18 GiB activation); capacity's "
    "non-weights memory is 0.73 GiB (non-torch 0.39, CUDA graphs 0.16 where the log prints an estimate of "
    "0.18) where vLLM kept 0.49. Which version, runner and sampler this start used is not in the six lines; "
    "not identified. Not fitted: a held-out log.",
    "qwen2.5-vl-7b-a100-80gb-util0.22-v0.23.0.log":
    "available KV +8.6 % of -14.28 GiB, non-KV -3.9 %: capacity's non-weights memory is 14.85 GiB, vLLM's "
    "16.02. vLLM 0.23.0 runs the V1 model runner for Qwen2_5_VLForConditionalGeneration (not in 0.23's "
    "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES): its CUDA-graph estimate printed 0.53 GiB (PIECEWISE=51, FULL=35) "
    "where capacity's V1 estimate is 0.43 GiB; the vision factor, calibrated to 0.694 on the image log, gives "
    "13.27 GiB of activation for the 114,688-token video where this log implies about 14.3 (vLLM / trace = "
    "0.75); and vLLM loads 15.67 GiB where capacity counts 15.62 (0.045 GiB that 0.2x Qwen2.5-VL loads beyond "
    "the rotary caches and rounding, not identified). Not fitted: a held-out log.",
    "gemma-3-4b-mi300x-rocm-len8192-v0.23.0.log": "non-KV -7.8 % (available KV / tokens / concurrency +0.7 %): ROCm, "
    "vLLM 0.23.0's V1 model runner (Gemma3ForConditionalGeneration is not in 0.23's DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES; "
    "the log's loader lines are gpu_model_runner.py's). The log prints no requested memory, so capacity's is used (0.92 x "
    "the catalog's 191.98 GiB, CUDA's total quoted from vLLM on an MI300X): vLLM's non-weights memory is 5.20 GiB "
    "(176.62 - 162.84 - 8.58), capacity's 4.13: activation 3.54 (the fake trace's profile-run peak over the encoder profile "
    "of 32 max-size 896 x 896 images, the log's 'profiled with 32 image items of the maximum feature size', and the "
    "8,192-token forward; the V1 dummy sampler run on 1,024 x 262,208 logits through the Triton top-k/top-p, 3.00 GiB, is "
    "below it; + 0.16 GiB of autotuning for the cold compile the log shows: its multimodal model takes embeddings, so no "
    "table benchmark), encoder cache 0.04, non-torch 0.39 (0.27 + the cuDNN constant for SigLIP's convolution, both "
    "measured on CUDA), CUDA graphs 0: 0.23's determine_available_memory profiles graphs only when current_platform.is_cuda(), and the "
    "log's 3.74 GiB graph capture comes after the KV lines, out of the headroom. The weights agree (8.572 against 8.58: "
    "the two rotary caches). 'Add 1 padding layers, may waste at most 3.45 % KV cache memory' is the KV grouping "
    "(29 sliding-window layers padded to 6 groups of 5 beside the 5 full-attention layers): it bears on the tokens, which "
    "agree (+0.8 %), not on the non-KV memory. 1.07 GiB not identified: 0.23 prints no breakdown at INFO; ROCm's non-torch "
    "memory is not measured (the MI300X Llama log of 0.21.1 also kept 0.34 GiB more than capacity), and the log does not "
    "print the total. (Before the cold compile's autotuning term: capacity's non-weights 3.97, 1.24 left.)",
    # --- Model Runner V2 (0.24-0.28: profile_cudagraph_memory returns 0; graphs come out of the headroom) ---
    "qwen2.5-0.5b-wsl-util0.85-v0.27.1.log": "non-KV -16.6 % (available KV +1.6 %): the log's breakdown line says 1.49 GiB "
    "for consumed memory (weights + non-torch) and 0.25 GiB for peak activation; capacity has 0.92 for the weights (0.9202 "
    "of parameters + 4 MiB rotary cache + 0.3 MiB rounding, vLLM 0.93) and 0.26 for the activation, so the gap is the "
    "non-torch memory: vLLM's 0.56 GiB (1.49 - 0.93; WSL2) against capacity's calibrated 0.27 GiB, 0.29 GiB on a non-KV "
    "budget of only 1.74 GiB. The 0.37 GiB graph capture comes after the KV budget (Model Runner V2 0.27 returns 0 from "
    "profile_cudagraph_memory). Loaded: capacity 0.9244 GiB where vLLM prints 0.93: the packing of the 1-10 MiB tensors "
    "into 20 MiB segments is not modelled.",
    "qwen2.5-1.5b-sm75-eager-llm-class-v0.28.1-mrv2.log": "weights -3.2 %: vLLM reports 2.98 GiB loaded where capacity "
    "counts 2.884 GiB (2.875 of parameters + the 8 MiB rotary cache of 32,768 x 128 float16 + 0.9 MiB allocator rounding "
    "of the tied embedding): 0.096 GiB not identified. This run replaced FlashAttention with a third-party attention backend "
    "(BRIDGE_ATTN, a plugin) whose layers are built inside the load window; nothing in vLLM's own Qwen2 path allocates it.",
    "qwen2.5-7b-rtx4090-wsl-len8192-util0.92-v0.27.1-excerpt.log": "KV tokens +32.9 %: not identified. The excerpt prints "
    "only 'GPU KV cache size: 102,544 tokens' (5.48 GiB at 56 KiB per token), so vLLM kept 0.92 x 23.99 - 5.48 = 16.59 GiB "
    "for non-KV memory: 2.34 GiB besides the 14.25 GiB capacity's load figure (parameters + 64 MiB of rotary cache and "
    "rounding) gives, where capacity has 0.54 GiB (activation 0.27, non-torch 0.27; no graph term: Model Runner V2 0.27 "
    "returns 0 from profile_cudagraph_memory) and the same author's Qwen3-8B starts on this machine and vLLM version imply "
    "0.45 GiB. The run served three models in turn, each a first start of its flags; a cold compile would add 0.9 GiB "
    "(S = 152,064 x 3584 x 2 + 2048 x 3584 x 2 B + 72 MiB = 1.1 GiB against the warm peak), leaving 1.4 GiB; the excerpt "
    "shows no compile line, so the log is planned warm. The benchmark script's other flags are not listed "
    "(VLLM_USE_FLASHINFER_SAMPLER=0 is). Not fitted: a held-out log.",
    "qwen2.5-vl-7b-rtx4090-wsl-len8192-v0.27.1-excerpt.log": "KV tokens +6.7 %, concurrency +6.6 %: vLLM's non-KV memory "
    "is 18.24 GiB (0.9 x 23.99 - 62,736 tokens x 56 KiB = 21.59 - 3.35; the excerpt prints no 'Available KV cache memory' "
    "line), capacity's 18.02, 0.22 GiB on a 3.35 GiB KV budget. Of it, 0.045 GiB is in the weights (vLLM loads 15.67 GiB, "
    "capacity counts 15.62: parameters 15.45 + rotary caches 0.12 + rounding 0.06; not identified, as in the 0.23.0 log) "
    "and 0.18 GiB in the rest: capacity has activation 1.90 (with the 0.694 vision factor), encoder cache 0.11, non-torch "
    "0.39 and no graph term (0.27 runs Qwen2.5-VL on Model Runner V2, every dense non-hybrid model being a default V2 "
    "model there, and V2 returns 0 from profile_cudagraph_memory); the excerpt has no breakdown line, so the term is not "
    "identified. Not fitted: a held-out log.",
    "qwen3-0.6b-dgx-spark-v0.27.1-excerpt.log": "non-KV -54.4 % (the KV memory, 69.4 GiB in use, within 2.8 %): GB10's "
    "unified memory. The excerpt says 3.35 GiB for consumed memory (weights + non-torch) of a 3.61 GiB non-KV figure "
    "(73.01 requested - 69.4); with capacity's 1.12 GiB of weights that leaves 2.23 GiB of non-torch memory and 0.26 of "
    "activation (capacity 0.26). On an integrated GPU vLLM 0.27's MemorySnapshot takes the free memory from "
    "psutil.virtual_memory().available, so 'non-torch' includes every host-side allocation of the process and the system "
    "between its snapshots; capacity's 0.27 GiB does not model that.",
    "qwen3-8b-rtx5090-len32768-util0.92-v0.24.0-quoted.log": "(below 3 % since this start is planned cold: +2.1 % KV "
    "tokens; it was +10.3 % planned warm.) vLLM kept 0.92 x 31.84 - 89,040 tokens x 144 KiB = 17.07 GiB for non-KV "
    "memory, 1.80 GiB besides the 15.27 GiB loaded. The same notes report another start of the same command at 95,936 "
    "tokens and put the 0.95 GiB swing down to the cache; the sidecar records this start as the cold one. capacity's cold "
    "start adds S - warm peak = 151,936 x 4096 x 2 + 2048 x 4096 x 2 B + 96 MiB of L2 - 0.27 GiB = 1.0 GiB "
    "(capacity/memory/compile_cache.py), the swing the author saw. No graph term: vLLM 0.24.0 runs Qwen3ForCausalLM on Model "
    "Runner V2, whose profile_cudagraph_memory returns 0 in 0.23-0.28.",
    "llama-3.1-8b-a100-40gb-lora-k8s-v0.8.2.log": "KV tokens / concurrency +7.9 %, weights -0.002 %: the benchmark's first planned "
    "LoRA start (vLLM 0.8.2's V1 engine, 2 adapters of rank 16, 256 extra vocabulary rows each; capacity/vllm/lora_rules.py, "
    "bench/results/vllm-lora-versions-2026-12-02). 'Model loading took 15.1749 GB' (GiB) against capacity's 15.1746 GiB: weights, "
    "rotary caches, 0.180 GiB of LoRA buffers and 0.006 GiB of extra vocabulary rows, so the LoRA layout agrees to 0.3 MiB. vLLM "
    "kept 0.9 x 39.39 - 148,096 tokens x 128 KiB = 17.37 GiB for non-KV memory, 2.20 GiB besides the load, where capacity has "
    "0.77 (activation 0.50, non-torch 0.27, the LoRA shrink buffer and logits): 1.43 GiB not identified. 0.8.2's V1 worker prints "
    "no memory profile, so the gap cannot be split; the start compiles cold (Dynamo and Inductor run inside the profile, which "
    "capacity charges before 0.12 as the warm peak + 2048 x 4096 x 2 B + the L2) with the dummy adapters active in the profile run.",
    "qwen2.5-vl-3b-l4-ray-data-len8192-mbt2048-v0.11.0.log": "available KV +11.2 % (tokens +11.3 %), non-KV -9.8 %: "
    "vLLM's non-weights memory is 3.41 GiB (0.9 x the catalog's L4 22.03 - 9.26 - 7.155; the log prints neither the "
    "requested memory nor CUDA's total, and 0.9 is vLLM's default, which Ray Data's engine kwargs leave), capacity's 2.38 "
    "(activation 1.93: the fake trace's tower peak of 2.78 GiB on the 16,384-token item x 0.694; encoder cache 0.06; "
    "non-torch 0.39); the weights agree (7.152 against 7.155 GiB). Put all 1.04 GiB in the encoder phase and vLLM 0.11.0's "
    "tower takes 1.07 x the trace, where the calibration log of Qwen2.5-VL-7B on an L4 with vLLM 0.9.0.1 (the same vision "
    "tower and the same 16,384-token image) takes 0.694. Likely cause, read in the wheels and not measured: vLLM 0.11.0's "
    "Qwen2_5_VisionAttention rotates q and k together (torch.cat([q, k]) then apply_rotary_pos_emb_vision, whose t.float() "
    "and fp32 output are each twice the bf16 concat), where 0.9.2 and 0.10.2 rotate q, then k. With S = 65,536 patches x "
    "1,280 x 2 B = 0.156 GiB, the live tensors at the rotation grow from 10 S (qkv 3 S, contiguous q, k, v 3 S, one "
    "rotated, fp32 input and output 4 S) to 16 S (concat 2 S, fp32 input and output 8 S): 6 S = 0.94 GiB more in each "
    "vision attention, above the MLP's peak. The 0.694 factor, fitted on 0.9.0.1, does not hold it; 0.12 and later rotate "
    "through other code (cos/sin given, then ApplyRotaryEmb from 0.13), not worked out. Not fitted: a held-out log.",
    "qwen3-14b-l40s-v0.28.0-excerpt.log": "available KV / tokens / concurrency +10.6 %, non-KV -4.2 %: vLLM's non-weights "
    "memory is 1.78 GiB (0.92 x 44.42 - 11.57 - 27.52; the excerpt prints no requested memory), capacity's 0.55 GiB "
    "(activation 0.28, non-torch 0.27), planned warm: the excerpt (four lines) shows no compile line and its source does "
    "not say. A cold start would account for it: S = 151,936 x 5120 x 2 + 2048 x 5120 x 2 B + the L40S's 96 MiB of L2 = "
    "1.56 GiB against the 0.28 GiB warm peak, 1.28 GiB more (capacity/memory/compile_cache.py; `--compile-cache cold` plans it), "
    "and the source is a blog's first serve of the model on a fresh AWS g6e instance. Not CUDA graphs: vLLM 0.28.0's Model "
    "Runner V2 returns 0 from profile_cudagraph_memory. Not fitted: a held-out log, planned warm as its lines give no state.",
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
