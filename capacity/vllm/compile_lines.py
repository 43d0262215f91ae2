"""What a vLLM start's torch.compile lines say of its compile cache: cold (it compiled), warm (it loaded), or both."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

COLD = "cold"
WARM = "warm"
MIXED = "mixed"

# Lines that show the decoder was compiled at this start (EVIDENCE.md section 3d, with file:line per version).
_COLD_LINES = re.compile(
    r"Compiling a graph for (?:general shape|dynamic shape|compile range)"
    r"|saved AOT compiled function"
    r"|Compiling model again due to a load failure"
)
# Lines that show it was loaded from the cache.
_WARM_LINES = re.compile(r"Directly load the compiled graph\(s\)|Directly load AOT compilation from path")


@dataclass(frozen=True)
class CompileCacheEvidence:
    """What a log's compile lines say of the cache: cold (it compiled), warm (it loaded), or mixed (both)."""

    state: str  # COLD | WARM | MIXED
    line: str  # the first line that decided it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_compile_line(line: str) -> bool:
    return bool(_COLD_LINES.search(line) or _WARM_LINES.search(line))


def compile_cache_evidence(lines: list[str]) -> CompileCacheEvidence | None:
    """The cache state one engine's lines show, or None when they show no compile line."""
    cold = next((ln for ln in lines if _COLD_LINES.search(ln)), None)
    warm = next((ln for ln in lines if _WARM_LINES.search(ln)), None)
    if cold is not None and warm is not None:
        return CompileCacheEvidence(MIXED, cold.strip())
    if cold is not None:
        return CompileCacheEvidence(COLD, cold.strip())
    if warm is not None:
        return CompileCacheEvidence(WARM, warm.strip())
    return None


def log_note(evidence: CompileCacheEvidence | None, enforce_eager: bool) -> str | None:
    """What reconcile says of the compile cache a log's start found (and so how it planned it)."""
    if enforce_eager:
        return None
    if evidence is None:
        return "the log shows no torch.compile line: its start is planned with a warm compile cache (--compile-cache cold plans a first start)"
    if evidence.state == WARM:
        return f"this start loaded the compiled model from the cache ('{evidence.line}'): planned with a warm compile cache"
    if evidence.state == COLD:
        return (
            f"this start compiled the model ('{evidence.line}'): planned with --compile-cache cold, vLLM's profile peak "
            "holding the compile's scratch (capacity/memory/compile_cache.py)"
        )
    return (
        f"this start both loaded and compiled graphs ('{evidence.line}': a draft head or an encoder can be cold while the "
        "decoder is warm): planned with a warm compile cache"
    )
