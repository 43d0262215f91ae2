"""One row of `capacity reconcile`: a figure vLLM printed beside capacity's, with the difference and why.

Differences are capacity - vLLM. A GiB row `agrees` when capacity's bytes lie in the interval vLLM's rounded figure
stands for (capacity/reconcile/num_blocks.py: printed_gib_bytes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from capacity.reconcile.num_blocks import printed_gib_bytes
from capacity.units import GiB, MiB

NEEDS_GPU = "needs --gpu"  # capacity's column of a row planned from the GPU's total when the log does not print it


@dataclass(frozen=True)
class ReconcileRow:
    """A figure of the log beside capacity's."""

    key: str  # stable id (JSON, tests)
    term: str  # label
    vllm: str  # vLLM's figure as printed, with its unit
    capacity: str  # capacity's figure, same unit
    difference: str  # capacity - vLLM ("" when not comparable)
    agrees: bool | None  # capacity's figure within the log's printing precision; None: not comparable
    explanation: str
    unit: str
    vllm_value: float | int | str | None
    capacity_value: float | int | str | None
    capacity_exact: str = ""  # capacity's figure in bytes, for the GiB rows
    needs_gpu: bool = False  # capacity's figure needs the GPU's total, which the log does not print (capacity/reconcile/log_only.py)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gib_text(n: int | float) -> str:
    """Bytes as GiB, 2 decimals."""
    return f"{n / GiB:,.2f} GiB"


def gib_row(
    key: str, term: str, vllm_gib: float, cap_bytes: int, explanation: str, decimals: int = 2, interval: tuple[int, int] | None = None
) -> ReconcileRow:
    """A memory row: vLLM printed `vllm_gib` (rounded to `decimals`), capacity has `cap_bytes`.
    `interval`: the bytes vLLM's figure stands for, when it is derived from other rounded figures."""
    lo, hi = interval if interval is not None else printed_gib_bytes(vllm_gib, decimals)
    agrees = lo <= cap_bytes <= hi
    diff = cap_bytes / GiB - vllm_gib
    if agrees:
        explanation += " Same figure within the log's rounding."
    else:
        off = lo - cap_bytes if cap_bytes < lo else cap_bytes - hi
        explanation += (
            f" Capacity is {'below' if cap_bytes < lo else 'above'} every value that prints as {vllm_gib:.{decimals}f} by at least {off / MiB:,.2f} MiB."
        )
    shown = f"{diff:+.{decimals}f}"
    if float(shown) == 0:
        shown = f"{0:.{decimals}f}"
    return ReconcileRow(
        key,
        term,
        f"{vllm_gib:.{decimals}f} GiB",
        f"{cap_bytes / GiB:,.{decimals}f} GiB",
        f"{shown} GiB",
        agrees,
        explanation,
        "GiB",
        vllm_gib,
        cap_bytes / GiB,
        capacity_exact=f"{cap_bytes:,} B",
    )


def count_row(key: str, term: str, vllm: int, cap: int, unit: str, explanation: str, agrees: bool | None = None) -> ReconcileRow:
    """A count row (tokens, blocks, bytes): it agrees when the counts are equal, unless `agrees` says otherwise."""
    same = vllm == cap if agrees is None else agrees
    return ReconcileRow(key, term, f"{vllm:,} {unit}".strip(), f"{cap:,} {unit}".strip(), f"{cap - vllm:+,}", same, explanation, unit, vllm, cap)

