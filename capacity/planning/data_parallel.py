"""Data parallelism in the plan: where the ranks sit, what DP adds to one rank's terms, and the engines' totals.

Each DP rank is an engine planned as today (its own weights, activation peak and KV cache, the experts split or divided
over tp x dp ranks: capacity/weights/parallel_layers.py); this module places the ranks on nodes
(capacity/serving/data_parallel.py) and adds DP's own memory (capacity/memory/data_parallel.py).
"""

from __future__ import annotations

from typing import Any

from capacity.errors import BadInput
from capacity.gpu.catalog import Gpu
from capacity.memory.data_parallel import data_parallel_collectives, moe_top_k, with_dispatch
from capacity.memory.term import MemoryTerm
from capacity.memory.weights import weight_layout
from capacity.model.spec import ModelSpec
from capacity.serving.config import ServingConfig
from capacity.serving.data_parallel import Placement, moe_parallel_size, placement
from capacity.source.resolve import ModelSource


def placement_of(serving: ServingConfig, gpu: Gpu) -> Placement | None:
    """The ranks on nodes, or None at DP 1 with no node option (the single-engine plans stay as they were)."""
    if serving.data_parallel_size == 1 and serving.node is None and serving.gpus_per_node is None:
        return None
    pp, dp = serving.pipeline_parallel_size, serving.data_parallel_size
    if pp > 1 and dp > 1:
        raise BadInput(f"--pipeline-parallel-size {pp} with --data-parallel-size {dp}: stages of several engines are not planned yet; plan one of them at a time")
    return placement(gpu, serving.tensor_parallel_size, pp, dp, serving.node, serving.gpus_per_node, serving.allow_tp_across_nodes)


def is_moe(spec: ModelSpec, source: ModelSource) -> bool:
    return weight_layout(spec, source.config, class_default_tie=False).num_experts > 0


def with_data_parallel_terms(
    memory: dict[str, MemoryTerm], spec: ModelSpec, source: ModelSource, serving: ServingConfig, gpu: Gpu, where: Placement
) -> dict[str, MemoryTerm]:
    """The terms with the DP / EP communicators added, and at DP > 1 on an MoE model the all-gather dispatch's tokens."""
    moe = is_moe(spec, source)
    out = dict(memory)
    out["collectives"] = data_parallel_collectives(memory["collectives"], where, gpu, moe)
    if moe and serving.data_parallel_size > 1:
        out["activation_peak"] = with_dispatch(memory["activation_peak"], serving, spec.decoder.hidden_size, moe_top_k(source.config, spec.name))
    return out


def data_parallel_summary(where: Placement, serving: ServingConfig, per_engine_requests: int, per_engine_tokens: int, moe: bool) -> dict[str, Any]:
    """The JSON section: placement, the MoE layers' ranks, and the engines' totals (dp x one engine)."""
    dp = serving.data_parallel_size
    return {
        **where.to_dict(),
        "data_parallel_size": dp,
        "engines": dp,
        "moe_ranks": moe_parallel_size(serving.tensor_parallel_size, dp) if moe else None,
        "expert_parallel_size": moe_parallel_size(serving.tensor_parallel_size, dp) if moe and serving.enable_expert_parallel else None,
        "per_engine_max_concurrent_requests": per_engine_requests,
        "total_max_concurrent_requests": dp * per_engine_requests,
        "per_engine_kv_tokens_vllm_reported": per_engine_tokens,
        "total_kv_tokens_vllm_reported": dp * per_engine_tokens,
    }
