"""The `vllm serve` line that realises a plan, with the fixes the hazards ask for applied."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from capacity.units import MiB

if TYPE_CHECKING:
    from capacity.plan import Plan

# vLLM 0.33 keeps this much back when it suggests --kv-cache-memory-bytes after profiling
# (gpu_worker: redundancy_buffer_memory = 150 MiB; "requested - non_kv - 150 MiB" fits the requested memory).
KV_CACHE_BUFFER_BYTES = 150 * MiB


def suggested_kv_cache_memory_bytes(plan: Plan) -> int:
    """vLLM 0.33's own suggestion for --kv-cache-memory-bytes: requested memory - non-KV memory - 150 MiB."""
    return plan.requested_memory_bytes - plan.non_kv_bytes - KV_CACHE_BUFFER_BYTES


def suggested_flags(plan: Plan) -> list[str]:
    s = plan.serving
    max_model_len = s.max_model_len
    if plan.max_model_len_that_fits and plan.max_model_len_that_fits < max_model_len:
        max_model_len = plan.max_model_len_that_fits
    mnbt = s.max_num_batched_tokens
    floor = max(plan.budget.max_tokens_per_item.values(), default=0) if s.disable_chunked_mm_input else 0
    if not s.enable_chunked_prefill:
        floor = max(floor, max_model_len)
    mnbt = max(mnbt, floor, s.max_num_seqs)
    flags = [
        f"--max-model-len {max_model_len}",
        f"--max-num-seqs {s.max_num_seqs}",
        f"--max-num-batched-tokens {mnbt}",
    ]
    if s.kv_cache_memory_bytes is not None:
        flags.append(f"--kv-cache-memory-bytes {s.kv_cache_memory_bytes}")
    else:
        # A measured KV term (the non-KV terms came from a GPU profile) is pinned the way vLLM suggests,
        # so the server skips profiling; the utilization keeps vLLM's free-memory check at startup.
        kv_bytes = suggested_kv_cache_memory_bytes(plan)
        if plan.memory["kv_cache"].kind == "measured" and kv_bytes > 0:
            flags.append(f"--kv-cache-memory-bytes {kv_bytes}")
        flags.append(f"--gpu-memory-utilization {s.gpu_memory_utilization}")
    if s.block_size != 16:
        flags.append(f"--block-size {s.block_size}")
    if s.tensor_parallel_size != 1:
        flags.append(f"--tensor-parallel-size {s.tensor_parallel_size}")
    if s.kv_cache_dtype != "auto":
        flags.append(f"--kv-cache-dtype {s.kv_cache_dtype}")
    if s.enforce_eager:
        flags.append("--enforce-eager")
    limits = {m: n for m, n in s.limit_mm_per_prompt.items() if n != 999}
    if limits:
        flags.append("--limit-mm-per-prompt " + shlex.quote(",".join(f"{m}={n}" for m, n in limits.items())))
    return flags


def suggested_command(plan: Plan) -> str:
    model = plan.source.path if plan.source.origin == "folder" else plan.source.name
    revision = ["--revision", shlex.quote(plan.source.revision)] if plan.source.revision else []
    return " ".join(["vllm serve", shlex.quote(str(model)), *revision, *suggested_flags(plan)])
