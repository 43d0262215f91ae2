"""The knobs and the command lines of a `capacity fit` configuration: the knobs its `vllm serve` line gives
(`pinned_args`), and the `capacity plan` line that re-plans it to the same figures (`plan_command`), with the
layout's -tp / -pp / -dp and its nodes (--node, --gpus-per-node)."""

from __future__ import annotations

import shlex
from dataclasses import replace

from capacity.planning.plan import Plan
from capacity.planning.suggest import command_for
from capacity.serving.config import DEFAULT_LIMIT_PER_PROMPT, ServingArgs, model_dtype
from capacity.vllm.versions import LATEST

ESTIMATE_FORMULA = "formula"


def pinned_args(plan: Plan) -> ServingArgs:
    """The knobs `command_for(plan)`'s flags give (capacity/planning/suggest.py suggested_flags): the knobs as given
    (ServingConfig.as_args), with max_model_len, max_num_seqs, max_num_batched_tokens and the utilization pinned, the
    default block size, per-prompt limits and dtype left to vLLM."""
    s = plan.serving
    limits = {m: n for m, n in s.limit_mm_per_prompt.items() if n != DEFAULT_LIMIT_PER_PROMPT}
    return replace(
        s.as_args(),
        gpu_memory_utilization=s.gpu_memory_utilization if s.kv_cache_memory_bytes is None else None,
        block_size=None if "block_size" in s.defaulted and s.block_size == 16 else s.block_size,
        max_model_len=s.max_model_len,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        limit_mm_per_prompt=None if s.language_model_only or not limits else limits,
        dtype="auto" if s.dtype == model_dtype(plan.spec, "auto") else s.dtype,
    )


def plan_command(plan: Plan, gpu_name: str, estimate: str) -> str:
    """`capacity plan` with the serve line's flags: it re-plans the configuration to the same figures."""
    command = command_for(plan)
    split = [f"--pp-layer-partition {plan.serving.pp_layer_partition}"] if plan.serving.pp_layer_partition else []
    command = command[command.index("vllm serve") :]  # VLLM_PP_LAYER_PARTITION=... before it: --pp-layer-partition here
    flags = command.split(" ", 3)[3:] + split  # "vllm serve MODEL" dropped (--revision stays among the flags)
    model = command.split(" ", 3)[2]
    nodes = [f"--node {shlex.quote(plan.serving.node)}"] if plan.serving.node else []
    nodes += [f"--gpus-per-node {plan.serving.gpus_per_node}"] if plan.serving.gpus_per_node else []
    nodes += ["--allow-tp-across-nodes"] if plan.serving.allow_tp_across_nodes else []
    flags += nodes
    how = " --estimate formula" if estimate == ESTIMATE_FORMULA else ""
    release = f" --vllm-version {plan.semantics.release}" if plan.semantics.release and plan.semantics is not LATEST else ""
    return f"capacity plan --model {model} --gpu {shlex.quote(gpu_name)}{release}{how} {' '.join(flags)}".rstrip()
