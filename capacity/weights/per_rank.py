"""Weights per rank, as vLLM 0.33's parallel layers lay them out (pure Python, no torch).

Every stored tensor of a model (from safetensors headers, or from the parameter list of the real architecture built
on the meta device) is classified into the parallel layer vLLM loads it into (capacity/weights/parallel_layers.py),
whose rule gives the bytes one tensor-parallel rank holds; `weights_per_rank` sums them per kind. Quantized tensors
keep their stored bytes, or are worked out from `quantization_config` (capacity/weights/quant_schemes.py); gpt-oss's
MXFP4 experts are what vLLM's MoE method allocates for the GPU's backend (capacity/weights/mxfp4.py:
`gpt_oss_expert_tensors` puts them in place of the stored ones).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from capacity.weights.parallel_layers import TIED, UNCLASSIFIED, Parallelism, WeightLayout, classifications, classified, with_added_biases
from capacity.weights.stored_tensor import StoredTensor


@dataclass(frozen=True)
class KindBytes:
    """The bytes of one parallel kind: the whole model's and one rank's."""

    kind: str
    tensors: int
    full_bytes: int
    rank_bytes: int


@dataclass(frozen=True)
class WeightsBreakdown:
    """Weights of one rank (rank 0, the largest, unless asked), by parallel kind, as vLLM 0.33 lays them out."""

    tensor_parallel_size: int
    enable_expert_parallel: bool
    kinds: tuple[KindBytes, ...]
    source: str  # where the tensor list came from
    quantization: str  # "none", or the scheme and how its bytes were obtained
    unclassified: tuple[str, ...] = field(default=())  # tensor names no rule named (counted replicated)
    rank: int = 0
    # A checkpoint's stored bytes known without tensor names (a header summary): the kinds' rank/full share of it.
    checkpoint_bytes: int = 0
    # The quantized tensors are what vLLM's quantization method allocates and its kernel leaves for the planned GPU
    # (AWQ: capacity/weights/awq.py), not only the checkpoint's format.
    quantized_layout_modelled: bool = False

    @property
    def total_bytes(self) -> int:
        """Bytes on one rank."""
        rank = sum(k.rank_bytes for k in self.kinds)
        if self.checkpoint_bytes and self.full_bytes:
            return self.checkpoint_bytes * rank // self.full_bytes
        return rank

    @property
    def full_bytes(self) -> int:
        """Bytes of the whole model (TP 1)."""
        return sum(k.full_bytes for k in self.kinds)

    def bytes_of(self, kind: str) -> int:
        return sum(k.rank_bytes for k in self.kinds if k.kind == kind)

    def describe(self) -> str:
        parts = ", ".join(f"{k.kind} {k.rank_bytes:,} B" for k in self.kinds if k.full_bytes or k.rank_bytes)
        ep = " + expert parallel" if self.enable_expert_parallel else ""
        return f"per rank at TP {self.tensor_parallel_size}{ep} as vLLM's parallel layers lay them out: {parts}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(total_bytes=self.total_bytes, full_bytes=self.full_bytes)
        return out


def weights_per_rank(tensors: Iterable[StoredTensor], layout: WeightLayout, par: Parallelism, *, source: str = "", quantization: str = "none") -> WeightsBreakdown:
    """Bytes one rank holds, per parallel kind (vLLM 0.33 parallel layers; rank 0 when ranks differ)."""
    tensors = with_added_biases(tensors, layout)
    sums: dict[str, list[int]] = {}
    order: list[str] = []
    unclassified: list[str] = []
    memo = classifications(layout)
    for t in tensors:
        kind = classified(t, layout, memo)
        full = kind.loaded_bytes(t, par)
        rank = kind.rank_bytes(t, full, layout, par)  # at TP 1 too: vocab padding, tied heads
        if kind.name not in sums:
            sums[kind.name] = [0, 0, 0]
            order.append(kind.name)
        entry = sums[kind.name]
        entry[0] += 1
        entry[1] += 0 if kind is TIED else full
        entry[2] += rank
        if kind is UNCLASSIFIED:
            unclassified.append(t.name)
    kinds = tuple(KindBytes(k, sums[k][0], sums[k][1], sums[k][2]) for k in order)
    return WeightsBreakdown(par.tensor_parallel_size, par.enable_expert_parallel, kinds, source, quantization, tuple(unclassified), par.rank)
