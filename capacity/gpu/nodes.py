"""Node types: how many GPUs of one catalog kind share a host, and the links inside and between hosts (nodes.json).

A node type places a plan's ranks (capacity/serving/data_parallel.py): tensor-parallel groups inside one node, pipeline
and data parallelism across nodes. Each record names the datasheet its figures come from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from capacity.errors import BadInput
from capacity.gpu.catalog import normalized_name

NODES_FILE = "nodes.json"
TRANSPORTS = ("NVLink", "PCIe", "InfiniBand", "Ethernet")


@dataclass(frozen=True)
class NodeType:
    """One host: `gpus_per_node` GPUs of catalog kind `gpu`, linked by `intra_node`, reaching other hosts over `inter_node`."""

    name: str
    aliases: tuple[str, ...]
    gpu: str  # a gpus.json name
    gpus_per_node: int
    intra_node: str  # NVLink | PCIe
    inter_node: str  # InfiniBand | Ethernet
    reference: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_nodes() -> tuple[NodeType, ...]:
    records = json.loads(resources.files(__package__).joinpath(NODES_FILE).read_text(encoding="utf-8"))
    return tuple(NodeType(**{**r, "aliases": tuple(r["aliases"])}) for r in records)


NODES: tuple[NodeType, ...] = load_nodes()


def node_by_name(name: str) -> NodeType:
    """The node type `name` or an alias names (case and spacing insensitive, "8x H200" = "8xH200"); BadInput otherwise."""
    key = normalized_name(name).replace("x-", "x")
    for node in NODES:
        if any(key == normalized_name(n).replace("x-", "x") for n in (node.name, *node.aliases)):
            return node
    raise BadInput(f"unknown node type '{name}'; known: {', '.join(n.name for n in NODES)}; or give --gpu and --gpus-per-node")
