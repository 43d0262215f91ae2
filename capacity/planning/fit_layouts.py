"""The parallel layouts `capacity fit` tries: TP x PP x DP over GPU counts and nodes, fewest GPUs first.

A layout is vLLM's `--tensor-parallel-size`, `--pipeline-parallel-size` and `--data-parallel-size`, and the nodes the
ranks sit on (capacity/serving/data_parallel.py: TP innermost, a node holding `gpus_per_node` consecutive ranks). Its
GPU count is the world size tp x pp x dp. Where the nodes come from:

- `--node TYPE` (or `--gpus-per-node N`) given: every layout on nodes of that type, up to --max-gpus;
- neither: the GPU's own counts on one host up to its catalog node's size (capacity/gpu/nodes.json; every count up to
  --max-gpus on one host when no node type holds that GPU, as `capacity plan` assumes), and above that size layouts
  across nodes of that node type.

Across nodes a TP group stays inside a node (tp divides the GPUs per node), as vLLM asks (its warning and its custom
all-reduce being off across nodes), unless --allow-tp-across-nodes is given. PP with DP is left out: the planner does
not plan the stages of several engines (capacity/planning/data_parallel.py placement_of refuses it).

Order within one GPU count: one engine of TP alone (the fewest ranks that talk), then DP engines (independent
engines, their requests add up), then TP x PP (one engine whose layers are split: the layout for weights that one
node's TP group cannot hold); larger TP first within each.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import groupby

from capacity.gpu.catalog import Gpu
from capacity.gpu.nodes import NODES, NodeType, node_by_name
from capacity.serving.config import ServingArgs

KIND_ORDER = ("tp", "dp", "pp")  # within one GPU count (module docstring)


@dataclass(frozen=True)
class Layout:
    """TP x PP x DP ranks, and the nodes they sit on (None, None: one host, as `capacity plan` assumes)."""

    tensor_parallel_size: int
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    node: str | None = None  # a nodes.json type: its GPUs per node and links
    gpus_per_node: int | None = None  # nodes of this many GPUs (no node type)

    @property
    def gpus(self) -> int:
        """The world size: tp x pp x dp (vLLM's world_size_across_dp)."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    @property
    def per_node(self) -> int | None:
        if self.node is not None:
            return node_by_name(self.node).gpus_per_node
        return self.gpus_per_node

    @property
    def nodes(self) -> int:
        """Nodes the ranks take: ceil(world size / GPUs per node); 1 on one host."""
        per_node = self.per_node
        return 1 if per_node is None else math.ceil(self.gpus / per_node)

    @property
    def kind(self) -> str:
        return "dp" if self.data_parallel_size > 1 else "pp" if self.pipeline_parallel_size > 1 else "tp"

    def applied(self, args: ServingArgs) -> ServingArgs:
        return replace(
            args,
            tensor_parallel_size=self.tensor_parallel_size,
            pipeline_parallel_size=self.pipeline_parallel_size,
            data_parallel_size=self.data_parallel_size,
            node=self.node,
            gpus_per_node=None if self.node is not None else self.gpus_per_node,
        )

    def describe(self) -> str:
        """'TP 8 x DP 2 on 2 x 8x H200 nodes', 'TP 4' (one host)."""
        parts = [f"TP {self.tensor_parallel_size}"]
        parts += [f"PP {self.pipeline_parallel_size}"] if self.pipeline_parallel_size > 1 else []
        parts += [f"DP {self.data_parallel_size}"] if self.data_parallel_size > 1 else []
        text = " x ".join(parts)
        if self.node is not None:
            return f"{text} on {self.nodes} x {self.node}"
        if self.gpus_per_node is not None:
            return f"{text} on {self.nodes} x {self.gpus_per_node}-GPU nodes"
        return text


def node_of_gpu(gpu: Gpu) -> NodeType | None:
    """The catalog's node type that holds `gpu` (the first listed), None when none does."""
    return next((n for n in NODES if n.gpu == gpu.name), None)


def _divisors(n: int) -> list[int]:
    return [d for d in range(n, 0, -1) if n % d == 0]


def layouts_of_count(
    count: int, base: ServingArgs, held: frozenset[str], node: str | None, gpus_per_node: int | None, per_node: int | None
) -> list[Layout]:
    """The layouts of `count` GPUs, in the module's order: TP alone, then DP, then PP, larger TP first; the knobs the
    user gave (TP, PP, DP) held; a TP group inside a node when the ranks span nodes (unless allowed)."""
    fixed_pp = "pipeline_parallel_size" in held or "pp_layer_partition" in held
    out: list[Layout] = []
    for tp in _divisors(count):
        if "tensor_parallel_size" in held and tp != base.tensor_parallel_size:
            continue
        if per_node is not None and count > per_node and not base.allow_tp_across_nodes and (tp > per_node or per_node % tp):
            continue  # a TP group spanning nodes
        rest = count // tp
        options = [(1, 1)] if rest == 1 else [(1, rest), (rest, 1)]  # (pp, dp): PP with DP is not planned
        for pp, dp in options:
            if fixed_pp and pp != base.pipeline_parallel_size or "data_parallel_size" in held and dp != base.data_parallel_size:
                continue
            out.append(Layout(tp, pp, dp, node, gpus_per_node))
    return sorted(out, key=lambda lay: KIND_ORDER.index(lay.kind))  # stable: larger TP first within a kind


def layouts(gpu: Gpu, base: ServingArgs, held: frozenset[str], max_gpus: int) -> list[Layout]:
    """Every layout fit tries on `gpu`, fewest GPUs first (module docstring)."""
    out: list[Layout] = []
    given = base.node is not None or base.gpus_per_node is not None
    home = node_of_gpu(gpu)
    for count in range(1, max_gpus + 1):
        if given:
            per_node = node_by_name(base.node).gpus_per_node if base.node is not None else base.gpus_per_node
            out += layouts_of_count(count, base, held, base.node, None if base.node is not None else base.gpus_per_node, per_node)
        elif home is None or count <= home.gpus_per_node:
            out += layouts_of_count(count, base, held, None, None, None)  # one host
        else:
            out += layouts_of_count(count, base, held, home.name, None, home.gpus_per_node)
    return out


def by_count(items: Iterable[Layout]) -> Iterator[tuple[int, list[Layout]]]:
    """The layouts grouped by GPU count, in their order."""
    for count, group in groupby(items, key=lambda lay: lay.gpus):
        yield count, list(group)
