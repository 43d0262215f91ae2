"""A memory term: its bytes, how they were obtained (exact / estimated / measured) and by which method.

Terms are exact where the architecture fixes them and documented estimates elsewhere; the estimates are rough
formulas, replaced by measurements once a GPU profile is given.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

EXACT = "exact"
ESTIMATED = "estimated"
MEASURED = "measured"


@dataclass(frozen=True)
class MemoryTerm:
    bytes: int
    kind: str
    method: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
