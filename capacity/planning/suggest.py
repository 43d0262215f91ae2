"""The `vllm serve` line that realises a plan, with the fixes the hazards ask for applied.

A plan with `error` hazards (vLLM would refuse to start, or run out of memory) or `warning` hazards whose fix is a
knob (a first start on an empty compile cache that would not fit) gets the line of a re-plan with each hazard's fix
(`Hazard.knobs`) applied, one hazard at a time, errors first, until none is left: planned again, the line fits and
raises no error, nor a warning a knob could clear. An error without a fix in knobs (a model vLLM 0.33 does not serve,
TP not dividing the heads, no memory left for the KV cache) gets no line, and the reason instead; a warning without
one (a plugin to install) stays, named in `Suggestion.warnings`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import replace

from capacity.planning.plan import ERROR, WARNING, Plan, Suggestion
from capacity.serving.config import ServingArgs, model_dtype
from capacity.units import MiB
from capacity.vllm.serve_flags import PRESENT, flag_status, limit_mm_value, release_of

# vLLM 0.33 keeps this much back when it suggests --kv-cache-memory-bytes after profiling
# (gpu_worker: redundancy_buffer_memory = 150 MiB; "requested - non_kv - 150 MiB" fits the requested memory).
KV_CACHE_BUFFER_BYTES = 150 * MiB
# Each round applies one hazard's fix; the checks that can chain (max_model_len, then max_num_batched_tokens,
# then the memory they need) settle in a few rounds.
MAX_FIX_ROUNDS = 8


def suggested_kv_cache_memory_bytes(plan: Plan) -> int:
    """vLLM 0.33's own suggestion for --kv-cache-memory-bytes: requested memory - non-KV memory - 150 MiB."""
    return plan.requested_memory_bytes - plan.non_kv_bytes - KV_CACHE_BUFFER_BYTES


def suggest(plan: Plan, replan: Callable[[Plan, ServingArgs], Plan]) -> Suggestion:
    """The `vllm serve` line for `plan`, after applying the error hazards' fixes (see the module docstring).
    `replan` plans the same model, GPU, measurements, version semantics and notes under other knobs."""
    current, applied = plan, []
    for _ in range(MAX_FIX_ROUNDS):
        errors = [h for h in current.hazards if h.severity == ERROR]
        stuck = next((h for h in errors if not h.knobs), None)
        if stuck is not None:
            return Suggestion(None, tuple(applied), f"{stuck.id}: {stuck.message} ({stuck.fix})")
        fixable = errors or [h for h in current.hazards if h.severity == WARNING and h.knobs]
        if not fixable:
            left = tuple(f"{h.id}: {h.fix}" for h in current.hazards if h.severity == WARNING)
            return Suggestion(command_for(current), tuple(applied), "", left)
        hazard = fixable[0]
        fixed = replan(current, replace(current.serving.as_args(), **dict(hazard.knobs)))
        if fixed.serving == current.serving:  # the fix changed nothing: do not loop on it
            return Suggestion(None, tuple(applied), f"{hazard.id}: {hazard.message} (its fix, {hazard.fix}, changes no knob)")
        current = fixed
        applied.append(hazard.id)
    left_ids = ", ".join(h.id for h in current.hazards if h.severity in (ERROR, WARNING) and (h.severity == ERROR or h.knobs))
    return Suggestion(None, tuple(applied), f"after {MAX_FIX_ROUNDS} rounds of fixes vLLM would still not start cleanly ({left_ids})")


def suggested_flags(plan: Plan) -> list[str]:
    """The `vllm serve` flags of the plan's own knobs (no fixes applied): what reproduces this plan, in the flags and
    value forms of the release it is planned for (capacity.vllm.serve_flags). A knob the user gave that the release
    has no flag for is refused before planning (require_flags); a flag capacity adds on its own that the release lacks
    (or that is not dated for it) is left out."""
    s = plan.serving
    release = release_of(plan.semantics)
    flags = [
        f"--max-model-len {s.max_model_len}",
        f"--max-num-seqs {s.max_num_seqs}",
        f"--max-num-batched-tokens {s.max_num_batched_tokens}",
    ]
    if s.kv_cache_memory_bytes is not None:
        flags.append(f"--kv-cache-memory-bytes {s.kv_cache_memory_bytes}")
    else:
        # A measured KV term (the non-KV terms came from a GPU profile) is pinned the way vLLM suggests,
        # so the server skips profiling; the utilization keeps vLLM's free-memory check at startup.
        kv_bytes = suggested_kv_cache_memory_bytes(plan)
        if plan.memory["kv_cache"].kind == "measured" and kv_bytes > 0 and flag_status("--kv-cache-memory-bytes", release) == PRESENT:
            flags.append(f"--kv-cache-memory-bytes {kv_bytes}")
        flags.append(f"--gpu-memory-utilization {s.gpu_memory_utilization}")
    if s.block_size != 16:
        flags.append(f"--block-size {s.block_size}")
    if s.tensor_parallel_size != 1:
        flags.append(f"--tensor-parallel-size {s.tensor_parallel_size}")
    if s.pipeline_parallel_size != 1:
        flags.append(f"--pipeline-parallel-size {s.pipeline_parallel_size}")
    if s.data_parallel_size != 1:
        flags.append(f"--data-parallel-size {s.data_parallel_size}")
    if s.enable_expert_parallel:
        flags.append("--enable-expert-parallel")
    if s.decode_context_parallel_size != 1:
        flags.append(f"--decode-context-parallel-size {s.decode_context_parallel_size}")
    if s.dtype != model_dtype(plan.spec, "auto"):
        flags.append(f"--dtype {s.dtype}")
    if s.kv_cache_dtype != "auto":
        flags.append(f"--kv-cache-dtype {s.kv_cache_dtype}")
    if s.enforce_eager:
        flags.append("--enforce-eager")
    if "enable_prefix_caching" not in s.defaulted:
        if s.enable_prefix_caching:
            flags.append("--enable-prefix-caching")
        elif flag_status("--no-enable-prefix-caching", release) == PRESENT:  # 0.6.0: off unless --enable-prefix-caching
            flags.append("--no-enable-prefix-caching")
    limits = {m: n for m, n in s.limit_mm_per_prompt.items() if n != 999}
    if s.language_model_only:
        flags.append("--language-model-only")
    elif limits:
        flags.append("--limit-mm-per-prompt " + shlex.quote(limit_mm_value(limits, release)))
    if s.mm_processor_kwargs:
        flags.append("--mm-processor-kwargs " + shlex.quote(json.dumps(s.mm_processor_kwargs, separators=(",", ":"))))
    if s.hf_overrides:
        flags.append("--hf-overrides " + shlex.quote(json.dumps(s.hf_overrides, separators=(",", ":"))))
    if s.lora is not None:  # vLLM 0.33's LoRA flags (EngineArgs: --enable-lora and its group)
        flags += ["--enable-lora", f"--max-loras {s.lora.max_loras}", f"--max-lora-rank {s.lora.max_lora_rank}"]
        if s.lora.max_cpu_loras != s.lora.max_loras:
            flags.append(f"--max-cpu-loras {s.lora.max_cpu_loras}")
        if s.lora.lora_dtype != s.dtype:
            flags.append(f"--lora-dtype {s.lora.lora_dtype}")
        if s.lora.fully_sharded_loras:
            flags.append("--fully-sharded-loras")
    return flags


def command_for(plan: Plan) -> str:
    model = plan.source.path if plan.source.origin == "folder" else plan.source.name
    revision = ["--revision", shlex.quote(plan.source.revision)] if plan.source.revision else []
    env = [f"VLLM_PP_LAYER_PARTITION={shlex.quote(plan.serving.pp_layer_partition)}"] if plan.serving.pp_layer_partition else []  # vLLM reads the split from it
    return " ".join([*env, "vllm serve", shlex.quote(str(model)), *revision, *suggested_flags(plan)])
