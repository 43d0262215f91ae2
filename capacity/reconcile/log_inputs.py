"""What to plan for a vLLM startup log: its model, GPU, knobs and version semantics, from the log and the flags.

Shared by `capacity reconcile` and `bench/predict_logs.py`. Flags win over the log; the log wins over defaults:
- knobs: vLLM's `non-default args: {...}` (what the user passed), and with `effective=True` also the engine's config
  line (dtype, enforce_eager, TP, max_seq_len: what vLLM ran with);
- GPU: `--gpu NAME` names the GPU (its platform, compute capability) and the total the log prints, if any, is
  used (what vLLM's cudaMemGetInfo saw); `--gpu SIZE` is the total; without `--gpu`, the total the log prints (`Free memory on device (F/T GiB)`, V0's `total_gpu_memory`, a CUDA
  OOM's `total capacity of T GiB`), named after the nvidia-smi table when one is pasted, else a catalog GPU whose
  vLLM-logged total it equals; else an nvidia-smi table alone (the catalog GPU of that name, or its MiB total).
  Nothing to infer: a stand-in marked `defaulted` (DEFAULT_GPU's platform and batch defaults, never its total in a
  comparison): reconcile then compares what the log alone determines and shows the rest as "needs --gpu"
  (capacity/reconcile/log_only.py); the log's `max_num_batched_tokens=N` line, where it has one, replaces the
  stand-in's batch default;
- semantics: the log's version (capacity.vllm.versions.log_semantics), planned with 0.33's rules when the log does not
  tell it; with the environment vLLM ran in where capacity models it (VLLM_USE_FLASHINFER_SAMPLER);
- model: `--model`, else the one the log names. A local folder the log names (`/mnt/models`) is what `--model`
  stands for; when it is not on this machine, BadInput asks for `--model`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from capacity.errors import BadInput
from capacity.gpu.catalog import CATALOG, DEFAULT_GPU, Gpu, gpu_by_name
from capacity.serving.config import ServingArgs
from capacity.units import GiB, MiB
from capacity.vllm.compile_lines import COLD, WARM
from capacity.vllm.log_facts import GpuEvidence, VllmLogFacts
from capacity.vllm.versions import LATEST, VllmSemantics, log_semantics

_ARG_FIELDS = {f.name for f in fields(ServingArgs)}
_DTYPES = {"float16": "float16", "half": "float16", "bfloat16": "bfloat16", "float32": "float32", "float": "float32", "auto": "auto"}


@dataclass(frozen=True)
class LogPlanInputs:
    model: str
    args: ServingArgs
    gpu: Gpu
    log_semantics: VllmSemantics | None  # the rules of the log's vLLM version; None: the log does not tell it
    notes: tuple[str, ...]

    @property
    def semantics(self) -> VllmSemantics:
        """The rules to plan with: the log's version's, else vLLM 0.33's."""
        return LATEST if self.log_semantics is None else self.log_semantics


def gpu_from_evidence(ev: GpuEvidence) -> Gpu | None:
    """The GPU a pasted log shows, or None (see the module docstring for the order)."""
    named: Gpu | None = None
    if ev.smi_name:
        try:
            named = gpu_by_name(ev.smi_name)
        except BadInput:
            named = None
    if ev.cuda_total_gib is not None:
        total = round(ev.cuda_total_gib * GiB)
        if named is None and ev.smi_name is None:
            for entry in CATALOG:
                if entry.source == "vllm log" and abs(entry.total_memory_bytes - total) <= GiB // 200:
                    named = entry.gpu()
        name = named.name if named is not None else (ev.smi_name or f"{ev.cuda_total_gib} GiB GPU")
        how = f"CUDA's total read from the log ({ev.cuda_total_basis}; printed to 0.01 GiB)" + (f", named by {ev.smi_basis}" if ev.smi_name else "")
        base = named if named is not None else Gpu(name, total, "log", how)
        return replace(base, name=name, total_memory_bytes=total, source="log", provenance=how)
    if named is not None:
        return replace(named, source="log", provenance=f"named by the log ({ev.smi_basis}); total from capacity's catalog: {named.provenance}")
    if ev.smi_total_mib is not None:
        return Gpu(
            ev.smi_name or f"{ev.smi_total_mib} MiB GPU",
            ev.smi_total_mib * MiB,
            "log",
            f"nvidia-smi's total in the log ({ev.smi_basis}); CUDA's total is a few hundred MiB lower",
        )
    return None


# Environment variables of vLLM's that capacity models (the rest are listed in a note, not used)
MODELLED_ENV = ("VLLM_USE_FLASHINFER_SAMPLER", "VLLM_USE_V2_MODEL_RUNNER")


def is_local_path(model: str) -> bool:
    """Whether a model name as vLLM logs it is a local folder (`/mnt/models`, `./ckpt`, `~/m`, `C:\\m`), not a Hub id."""
    return model.startswith(("/", "./", "../", "~", "\\")) or (len(model) > 2 and model[1] == ":" and model[2] in "\\/")


def log_gpu(facts: VllmLogFacts, gpu: str | None) -> tuple[Gpu, str]:
    """The GPU to plan a log for, and a note saying where it came from (see the module docstring)."""
    if gpu is None:
        inferred = gpu_from_evidence(facts.gpu)
        if inferred is None:
            stand_in = replace(gpu_by_name(DEFAULT_GPU), defaulted=True)
            return stand_in, (
                "the log does not print the GPU's total (no 'Free memory on device', V0 'total_gpu_memory', CUDA OOM or nvidia-smi table): "
                "the rows planned from it say 'needs --gpu'; the KV blocks, tokens and concurrency are worked from the log's own KV memory; "
                f"the knobs vLLM chose by the GPU's memory that the log does not state are an {DEFAULT_GPU}'s "
                "(pass --gpu NAME or --gpu SIZE, e.g. --gpu 24GiB, to compare the whole budget)"
            )
        return inferred, f"GPU from the log: {inferred.name}, {inferred.total_memory_bytes:,} B ({inferred.provenance})"
    named = gpu_by_name(gpu)
    logged = gpu_from_evidence(facts.gpu) if facts.gpu.cuda_total_gib is not None else None
    if logged is None or named.source == "size":
        if facts.gpu.found:
            return named, "--gpu given: the GPU the log shows is not used (" + (facts.gpu.cuda_total_basis or facts.gpu.smi_basis) + ")"
        return named, ""
    how = f"{named.name} (--gpu) with the total the log prints, {logged.total_memory_bytes:,} B ({logged.provenance})"
    return replace(named, total_memory_bytes=logged.total_memory_bytes, source="log", provenance=logged.provenance), how


def knobs_from_log(facts: VllmLogFacts, *, effective: bool) -> dict[str, Any]:
    """ServingArgs fields the log states: the user's non-default args, and the engine's config line if `effective`;
    either way a prefix caching the engine turned off (vLLM before 0.11 on hybrid models), which is the version's
    behaviour rather than a default of capacity's."""
    out: dict[str, Any] = {}
    sources: list[dict[str, Any]] = []
    if effective:
        cfg = dict(facts.engine_config)
        length = facts.max_seq_len or facts.concurrency_max_model_len  # 'Maximum concurrency for N tokens' is max_model_len
        if length is not None:
            cfg["max_model_len"] = length
        sources.append(cfg)
    elif facts.engine_config.get("enable_prefix_caching") is False:
        sources.append({"enable_prefix_caching": False})
    sources.append(facts.log_knobs)
    for knobs in sources:
        for key, value in knobs.items():
            if key == "rope_scaling" and isinstance(value, dict) and value:  # vLLM 0.10's --rope-scaling X: hf_overrides {"rope_scaling": X}
                out["hf_overrides"] = {**out.get("hf_overrides", {}), "rope_scaling": value}
                continue
            if key not in _ARG_FIELDS or value is None:
                continue
            if key == "hf_overrides":
                value = {**out.get("hf_overrides", {}), **value} if isinstance(value, dict) else None
                if not value:
                    continue
            if key == "dtype":
                value = _DTYPES.get(str(value))
                if value is None:
                    continue
            if key == "limit_mm_per_prompt" and isinstance(value, dict):
                value = {str(k): int(v["count"] if isinstance(v, dict) else v) for k, v in value.items()}
            out[key] = value
    if facts.compile_cache is not None and facts.compile_cache.state in (COLD, WARM):
        out["compile_cache"] = facts.compile_cache.state  # a fact of that start, not a default
    return out


def quantization(facts: VllmLogFacts) -> str | None:
    """The weight quantization the log names (GPTQ, AWQ, FP8, ...), which capacity's weights do not model."""
    q = facts.log_knobs.get("quantization") or facts.engine_config.get("quantization")
    return None if q in (None, "None", "none") else str(q)


def log_plan_inputs(
    facts: VllmLogFacts,
    *,
    model: str | None,
    flags: dict[str, Any],
    gpu: str | None,
    effective_knobs: bool = True,
    env: dict[str, str] | None = None,
) -> LogPlanInputs:
    """Model, ServingArgs, GPU and semantics to plan a log with: `flags` (ServingArgs fields given on the command line,
    or a benchmark's sidecar) over the log's knobs; `env`: the environment vLLM ran in.
    BadInput: no model, or no GPU to use."""
    notes: list[str] = []
    from_log = knobs_from_log(facts, effective=effective_knobs)
    values = {**from_log, **flags}
    used = sorted(k for k in from_log if k not in flags)
    if used:
        notes.append("knobs read from the log: " + ", ".join(f"{k}={from_log[k]}" for k in used))
    resolved, gpu_note = log_gpu(facts, gpu)
    if gpu_note:
        notes.append(gpu_note)
    if resolved.defaulted and values.get("max_num_batched_tokens") is None and facts.effective_max_num_batched_tokens is not None:
        # the stand-in's batch default would be an H200's: the log's own line says what vLLM chose
        values["max_num_batched_tokens"] = facts.effective_max_num_batched_tokens
        notes.append(f"max_num_batched_tokens={facts.effective_max_num_batched_tokens} from the log's 'Chunked prefill is enabled' line")
    chosen = model or facts.model
    if not chosen:
        raise BadInput(f"{facts.source}: the log does not name the model: pass --model (its Hub id, or a folder holding its config.json)")
    if model is None and is_local_path(chosen) and not Path(chosen).expanduser().is_dir():
        raise BadInput(
            f"{facts.source}: the log serves a local folder, {chosen}, which is not on this machine: "
            "pass --model with the model's Hub id, or a folder holding its config.json"
        )
    if model is None:
        notes.append(f"model from the log: {chosen}")
    q = quantization(facts)
    if q is not None:
        notes.append(f"the log's weights are quantized ({q}): capacity plans them in {values.get('dtype', 'the checkpoint dtype')}")
    sem = log_semantics(facts)
    given_env = dict(env or {})
    if sem is not None and "VLLM_USE_FLASHINFER_SAMPLER" in given_env:
        sem = sem.with_sampler_env(given_env["VLLM_USE_FLASHINFER_SAMPLER"])
    if sem is not None and sem.use_v2_model_runner is not None and facts.model_runner_v2 is not None:
        runner = "Model Runner V2 ([model_runner.py])" if facts.model_runner_v2 else "the V1 model runner ([gpu_model_runner.py])"
        notes.append(f"model runner: {runner}, from the file tag of the log's 'Model loading took' line")
    if sem is not None and "VLLM_USE_V2_MODEL_RUNNER" in given_env:
        sem = sem.with_model_runner_env(given_env["VLLM_USE_V2_MODEL_RUNNER"])
    unmodelled = sorted(k for k in given_env if k not in MODELLED_ENV)
    if unmodelled:
        notes.append("environment not modelled (the plan does not change with it): " + ", ".join(f"{k}={given_env[k]}" for k in unmodelled))
    return LogPlanInputs(chosen, ServingArgs(**values), resolved, sem, tuple(notes))
