"""Data parallelism and the nodes the ranks sit on, as vLLM 0.33 lays them out.

`--data-parallel-size N` runs N engines, each a full copy of the model's attention and dense layers split by its own
TP (x PP) ranks, each with its own KV cache and scheduler: the server runs N x one engine's requests. The MoE layers
are the exception (vllm/model_executor/layers/fused_moe/config.py `FusedMoEParallelConfig.make`): their "TP" is
flattened across DP (`flatten_tp_across_dp_and_pcp`: tp x dp ranks), so without --enable-expert-parallel each expert
is split over tp x dp ranks, and with it the experts are divided over ep_size = tp x dp ranks (`ep_size = tp_size`
after flattening), none split. MLA models (DeepSeek-V2/V3, Kimi-K2) have no separate "DP attention" switch in 0.33:
data-parallel attention is DP itself, each rank holding the whole (replicated per TP rank) latent cache of its engine.

Ranks are numbered as vLLM's `initialize_model_parallel` numbers them (vllm/distributed/parallel_state.py:
`all_ranks = arange(world).reshape(-1, dp, pp, pcp, tp)`): TP innermost, then PP, then DP; a node holds
`gpus_per_node` consecutive ranks. A TP group that spans nodes is refused unless asked (`--allow-tp-across-nodes`),
as vLLM warns ("tensor_parallel_size=%d is bigger than a reserved number of GPUs in a node", v1/executor/ray_utils.py)
and disables its custom all-reduce across nodes (custom_all_reduce.py: "Custom collectives are disabled because this
multi-node process group spans ...").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from capacity.errors import BadInput
from capacity.gpu.catalog import Gpu
from capacity.gpu.nodes import NodeType, node_by_name

# ParallelConfig.all2all_backend's default (vllm/config/parallel.py): MoE dispatch is an all-gather of every DP rank's
# tokens and combine a reduce-scatter (AgRsAll2AllManager, vllm/distributed/device_communicators/all2all.py), through
# the DP (or EP) group's NCCL communicator: no buffers of its own.
DEFAULT_ALL2ALL_BACKEND = "allgather_reducescatter"
# Architectures whose shared experts vLLM 0.33 builds replicated (disable_tp=is_sequence_parallel) under
# sequence-parallel MoE: deepseek_v2.py DeepseekV2MLP(shared_experts, is_sequence_parallel=...).
SEQUENCE_PARALLEL_REPLICATED_SHARED = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")


def moe_parallel_size(tp: int, dp: int) -> int:
    """FusedMoEParallelConfig.flatten_tp_across_dp_and_pcp: the MoE layer's ranks, tp x dp (pcp 1)."""
    return tp * dp


def use_sequence_parallel_moe(tp: int, dp: int, enable_expert_parallel: bool) -> bool:
    """ParallelConfig.use_sequence_parallel_moe under the default all2all backend: EP, TP > 1 and DP > 1."""
    return enable_expert_parallel and tp > 1 and dp > 1


@dataclass(frozen=True)
class Group:
    """One process group of a rank: its name, size, and the link its ranks talk over."""

    name: str  # tp | pp | dp | ep
    size: int
    spans_nodes: bool
    transport: str  # NVLink | PCIe | InfiniBand | Ethernet | "network" (not named)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "spans_nodes": self.spans_nodes, "transport": self.transport}


@dataclass(frozen=True)
class Placement:
    """The ranks of a TP x PP x DP deployment on nodes of `gpus_per_node` GPUs."""

    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    gpus_per_node: int
    intra_node: str
    inter_node: str
    node_type: str | None  # the catalog node's name, None when given as --gpus-per-node (or assumed)
    assumed: bool  # no --node / --gpus-per-node: every rank on one host
    reference: str

    @property
    def world_size(self) -> int:
        """GPUs in all: tp x pp x dp (vLLM's world_size_across_dp)."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    @property
    def engine_gpus(self) -> int:
        """GPUs one engine (one DP rank) holds: tp x pp."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def nodes(self) -> int:
        return math.ceil(self.world_size / self.gpus_per_node)

    def group_ranks(self, name: str) -> list[list[int]]:
        """vLLM's group_ranks for `name` over all_ranks = arange(world).reshape(dp, pp, tp) (pcp 1)."""
        tp, pp, dp = self.tensor_parallel_size, self.pipeline_parallel_size, self.data_parallel_size

        def rank(d: int, p: int, t: int) -> int:
            return (d * pp + p) * tp + t

        if name == "tp":
            return [[rank(d, p, t) for t in range(tp)] for d in range(dp) for p in range(pp)]
        if name == "pp":
            return [[rank(d, p, t) for p in range(pp)] for d in range(dp) for t in range(tp)]
        if name == "dp":
            return [[rank(d, p, t) for d in range(dp)] for p in range(pp) for t in range(tp)]
        if name == "ep":  # all_ranks.transpose(1, 2).reshape(-1, dp x pcp x tp): one group per PP stage
            return [[rank(d, p, t) for d in range(dp) for t in range(tp)] for p in range(pp)]
        raise ValueError(name)

    def group(self, name: str) -> Group:
        """The group `name` of rank 0's kind: its size and whether any such group spans nodes (then its transport is
        the network between nodes, else the link inside one)."""
        groups = self.group_ranks(name)
        spans = any(len({r // self.gpus_per_node for r in g}) > 1 for g in groups)
        return Group(name, len(groups[0]), spans, self.inter_node if spans else self.intra_node)

    def describe(self) -> str:
        where = f"{self.node_type} nodes" if self.node_type else f"nodes of {self.gpus_per_node} GPUs"
        if self.assumed:
            where = "one host (assumed: pass --node or --gpus-per-node to place the ranks on nodes)"
        return (
            f"{self.world_size} GPUs = TP {self.tensor_parallel_size} x PP {self.pipeline_parallel_size} x DP {self.data_parallel_size} "
            f"on {self.nodes if not self.assumed else 1} x {where}"
        )

    def to_dict(self) -> dict[str, Any]:
        names = ("tp", "pp", "dp", "ep")
        return {
            "world_size": self.world_size,
            "engine_gpus": self.engine_gpus,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "node_type": self.node_type,
            "intra_node": self.intra_node,
            "inter_node": self.inter_node,
            "assumed": self.assumed,
            "reference": self.reference,
            "groups": [self.group(n).to_dict() for n in names if self.group(n).size > 1],
        }


def node_gpu_name(node: str | None, gpu_name: str | None) -> str | None:
    """The GPU a plan is for: --gpu, else the --node type's GPU; both given and naming different kinds is refused."""
    if node is None:
        return gpu_name
    from capacity.gpu.catalog import catalog_entry

    kind = node_by_name(node)
    if gpu_name is not None:
        entry = catalog_entry(gpu_name)
        if entry is None or entry.name != kind.gpu:
            raise BadInput(f"--node {node!r} holds {kind.gpu} GPUs but --gpu is {gpu_name!r}: give one of them")
    return kind.gpu


def placement(gpu: Gpu, tp: int, pp: int, dp: int, node: str | None, gpus_per_node: int | None, allow_tp_across_nodes: bool = False) -> Placement:
    """Where the ranks sit: on --node's type, on nodes of --gpus-per-node GPUs of --gpu, else one host (assumed).

    BadInput: --node with a different --gpus-per-node, a node count below 1, or a TP group spanning nodes unless allowed."""
    kind: NodeType | None = node_by_name(node) if node is not None else None
    if gpus_per_node is not None and gpus_per_node < 1:
        raise BadInput(f"--gpus-per-node must be >= 1, got {gpus_per_node}")
    if kind is not None and gpus_per_node is not None and gpus_per_node != kind.gpus_per_node:
        raise BadInput(f"--node {kind.name!r} has {kind.gpus_per_node} GPUs per node but --gpus-per-node is {gpus_per_node}: give one of them")
    if kind is not None and gpu.name != kind.gpu:
        raise BadInput(f"--node {kind.name!r} holds {kind.gpu} GPUs but the plan is for {gpu.name}: give --gpu {kind.gpu} or drop --gpu")
    link = "NVLink" if gpu.nvlink else "PCIe"
    if kind is not None:
        out = Placement(tp, pp, dp, kind.gpus_per_node, kind.intra_node, kind.inter_node, kind.name, False, kind.reference)
    elif gpus_per_node is not None:
        out = Placement(tp, pp, dp, gpus_per_node, link, "network", None, False, f"--gpus-per-node {gpus_per_node}; the GPU catalog's link ({link})")
    else:
        world = tp * pp * dp
        out = Placement(tp, pp, dp, world, link, "network", None, True, f"no node given: every rank on one host; the GPU catalog's link ({link})")
    tp_group = out.group("tp")
    if tp_group.spans_nodes and not allow_tp_across_nodes:
        raise BadInput(
            f"--tensor-parallel-size {tp}: a TP group spans nodes of {out.gpus_per_node} GPUs (vLLM warns, and its custom all-reduce "
            "is off across nodes); use TP <= GPUs per node dividing it, with PP or DP across nodes, or pass --allow-tp-across-nodes"
        )
    return out
