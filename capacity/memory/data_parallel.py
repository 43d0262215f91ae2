"""What data parallelism adds to one rank's memory under vLLM 0.33 (estimated; the sources are named below).

- Communicators (before the baseline snapshot, like the TP group's: `init_worker_distributed_environment`): every
  group of more than one rank builds a `CudaCommunicator` whose `PyNcclCommunicator` is one NCCL communicator
  (vllm/distributed/parallel_state.py `GroupCoordinator`, device_communicators/cuda_communicator.py). At DP > 1 a rank
  joins the DP group (dp ranks) and, for an MoE model, the EP group (dp x tp ranks; built whatever
  --enable-expert-parallel says, `initialize_model_parallel`: "Don't create EP group for dense models"). Only the TP
  group gets vLLM's custom / symmetric-memory all-reduce buffers (`unique_name` "tp"). Each communicator is charged
  NCCL_COMMUNICATOR_BYTES, the one measured on an H200 x2 over NVLink (capacity/memory/collectives.py); NCCL's
  network transport (InfiniBand / Ethernet, a group spanning nodes) is not measured, and is charged the same constant,
  labelled so. At DP 1 the EP group of a TP > 1 MoE model is not charged (the TP-only plans keep their figures).
- The all-to-all: the default backend, allgather_reducescatter (ParallelConfig.all2all_backend), holds no buffers
  of its own; its dispatch all-gathers every DP rank's hidden states and top-k weights / ids, and its combine
  reduce-scatters the MoE output (AgRsAll2AllManager, device_communicators/all2all.py), with no chunking in 0.33
  (DPMetadata.sp_local_sizes: "without any chunking"). In the profile run every DP rank runs max_num_batched_tokens,
  so an MoE layer holds dp x T gathered tokens where DP 1 holds T: (dp - 1) x T x (2 x hidden x dtype + top_k x 8) more
  bytes (gathered hidden states and the MoE output, fp32 weights and int32 ids). The expert kernel's own workspace over
  the gathered tokens is the traced (or formula) figure at T tokens, not re-sized: stated in the term's method.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from capacity.errors import BadInput
from capacity.gpu.catalog import Gpu
from capacity.memory.collectives import NCCL_COMMUNICATOR_BYTES, compute_capability, vllm_all_reduce_buffers
from capacity.memory.term import ESTIMATED, MemoryTerm
from capacity.serving.config import ServingConfig
from capacity.serving.data_parallel import DEFAULT_ALL2ALL_BACKEND, Placement

TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "top_k", "num_experts_per_token")
TOPK_BYTES = 4 + 4  # topk_weights float32 + topk_ids int32 per (token, k)


def communicator_groups(placement: Placement, moe: bool) -> list[tuple[str, int, str, bool]]:
    """(group, size, transport, spans nodes) of each communicator DP adds to a rank: DP, and EP for an MoE model."""
    if placement.data_parallel_size == 1:
        return []  # the TP-only plans keep their figures (their EP group, at DP 1, is not charged: module docstring)
    names = ["dp"] + (["ep"] if moe else [])
    out = []
    for name in names:
        group = placement.group(name)
        if group.size > 1:
            out.append((name, group.size, group.transport, group.spans_nodes))
    return out


def data_parallel_collectives(tp_term: MemoryTerm, placement: Placement, gpu: Gpu, moe: bool) -> MemoryTerm:
    """The collectives term with the DP (and EP) groups' NCCL communicators added; a TP group spanning nodes loses
    vLLM's custom all-reduce buffers (CustomAllreduce is off across nodes)."""
    total, parts = tp_term.bytes, [tp_term.method]
    tp_group = placement.group("tp")
    if tp_group.size > 1 and tp_group.spans_nodes:
        custom = vllm_all_reduce_buffers(tp_group.size, compute_capability(gpu))
        dropped = custom.custom_signal_bytes + custom.custom_ipc_bytes + custom.custom_rank_data_bytes
        total -= dropped
        parts.append(f"less {dropped:,} B of custom all-reduce buffers: the TP group spans nodes ({tp_group.transport}), where vLLM disables them")
    for name, size, transport, spans in communicator_groups(placement, moe):
        total += NCCL_COMMUNICATOR_BYTES
        where = (
            f"across nodes over {transport}: NCCL's network transport is not measured, the NVLink-measured constant is carried over"
            if spans
            else f"inside a node over {transport}" + ("" if transport == "NVLink" else ": measured over NVLink, carried over")
        )
        parts.append(
            f"+ {name.upper()} group ({size} ranks) NCCL communicator {NCCL_COMMUNICATOR_BYTES:,} B ({where}; H200 x2 measurement, capacity/memory/collectives.py)"
        )
    if moe and placement.data_parallel_size > 1:
        parts.append(f"all2all backend {DEFAULT_ALL2ALL_BACKEND} (vLLM 0.33 default): no buffers of its own")
    return MemoryTerm(total, ESTIMATED, "; ".join(parts))


def moe_top_k(config: dict[str, Any], name: str) -> int:
    """Experts per token from the text config (BadInput where no key gives it)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    for key in TOPK_KEYS:
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    raise BadInput(f"{name}: --data-parallel-size on an MoE model needs its experts per token ({' / '.join(TOPK_KEYS)}), which the config does not give")


def dispatch_extra_bytes(serving: ServingConfig, hidden_size: int, top_k: int) -> int:
    """(dp - 1) x T x (2 x hidden x dtype + top_k x 8): what an MoE layer's all-gather dispatch and combine input hold at
    DP > 1 beyond DP 1's T tokens (AgRsAll2AllManager.dispatch / allocate_combine_input)."""
    tokens = serving.max_num_batched_tokens
    return (serving.data_parallel_size - 1) * tokens * (2 * hidden_size * serving.dtype_bytes + top_k * TOPK_BYTES)


def with_dispatch(activation: MemoryTerm, serving: ServingConfig, hidden_size: int, top_k: int) -> MemoryTerm:
    """The activation peak plus the gathered tokens of the MoE dispatch at DP > 1 (see the module docstring)."""
    extra = dispatch_extra_bytes(serving, hidden_size, top_k)
    dp, tokens = serving.data_parallel_size, serving.max_num_batched_tokens
    how = (
        f"{activation.method} + {extra:,} B MoE all-gather dispatch at DP {dp}: ({dp} - 1) x {tokens} tokens x (2 x {hidden_size} x "
        f"{serving.dtype_bytes} B + {top_k} x {TOPK_BYTES} B) (AgRsAll2AllManager, vLLM 0.33's default all2all, unchunked); "
        f"the expert kernel's workspace over the {dp * tokens} gathered tokens is not re-sized (figure at {tokens})"
    )
    return replace(activation, bytes=activation.bytes + extra, kind=ESTIMATED, method=how)
