"""Which worker or engine printed a vLLM log line, and the per-worker figures of a pipeline- or data-parallel start.

Pure Python, no torch. vLLM prefixes a worker's lines with its process name: `(Worker_PP1 pid=612)`,
`(Worker_TP0_PP1 pid=...)` (multiproc executor, 0.11+), `(RayWorkerWrapper pid=206149, ip=10.242.21.180)` (Ray; no
`ip=` on the driver's node), an engine's with `(EngineCore_DP1 pid=...)`, `(EngineCore_0 pid=...)` (0.10) or
`(DPEngineCoreActor pid=5439, ip=...)` (DP over Ray). Where the name carries no rank (Ray), the worker's own
`rank N in world size W is assigned as DP rank d, PP rank p, ..., TP rank t` line gives it (vllm/distributed/
parallel_state.py), matched by pid; Ray deduplicates repeated lines (`[repeated 7x across cluster]`) so a worker may
print none: its PP rank is then the one every worker of its node printed, said so (`rank_basis`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

_TAG = re.compile(r"\((Worker|VllmWorker|RayWorkerWrapper|EngineCore|DPEngineCoreActor)((?:_[A-Z]*\d+)*) pid=(\d+)(?:, ip=([\d.]+))?\)")
_PART = re.compile(r"_([A-Z]*)(\d+)")
_ASSIGNED = re.compile(r"rank (\d+) in world size (\d+) is assigned as DP rank (\d+), PP rank (\d+),(?: PCP rank \d+,)? TP rank (\d+)")
_REPEATED = re.compile(r"\[repeated (\d+)x across cluster\]")


@dataclass(frozen=True)
class WorkerFigure:
    """A per-worker figure ('Model loading took', 'Available KV cache memory') and who printed it."""

    key: str  # the message
    value: float  # GiB as printed
    line: int
    worker: str  # "Worker_PP1 pid=612", "RayWorkerWrapper pid=132250"
    pp_rank: int | None  # None: not printed and not inferable
    dp_rank: int | None
    tp_rank: int | None
    rank_basis: str  # how the ranks were read
    repeated: int = 1  # Ray's '[repeated Nx across cluster]': this figure's line stands for N more workers' lines

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Tag:
    kind: str
    parts: dict[str, int]
    pid: int
    ip: str | None

    @property
    def label(self) -> str:
        suffix = "".join(f"_{k}{v}" for k, v in self.parts.items())
        return f"{self.kind}{suffix} pid={self.pid}" + (f", ip={self.ip}" if self.ip else "")


def line_tags(line: str) -> list[_Tag]:
    """The process tags of a line, outermost first (`(EngineCore_0 pid=1) (RayWorkerWrapper pid=2)`)."""
    tags = []
    for m in _TAG.finditer(line):
        parts: dict[str, int] = {}
        for name, number in _PART.findall(m[2]):
            parts[name or "DP"] = int(number)  # EngineCore_0: the DP rank (0.10)
        tags.append(_Tag(m[1], parts, int(m[3]), m[4]))
    return tags


@dataclass
class WorkerReader:
    """Collects the rank lines and the per-worker figures of one startup (mutable while parsing)."""

    assigned: dict[int, tuple[int, int, int]]  # pid -> (dp, pp, tp)
    nodes: dict[int, str]  # pid -> ip ("" for the driver's node)
    pending: list[tuple[str, float, int, _Tag | None, int]]  # key, value, line, innermost tag, repeated
    named_pp: set[int]  # PP ranks in process names (Worker_PP2), on any line

    @classmethod
    def new(cls) -> WorkerReader:
        return cls({}, {}, [], set())

    def read(self, line: str, lineno: int, figures: dict[str, Any]) -> None:
        tags = line_tags(line)
        inner = tags[-1] if tags else None
        if inner is not None:
            self.nodes.setdefault(inner.pid, inner.ip or "")
            if "PP" in inner.parts:
                self.named_pp.add(inner.parts["PP"])
        if (m := _ASSIGNED.search(line)) is not None and inner is not None:
            self.assigned.setdefault(inner.pid, (int(m[3]), int(m[4]), int(m[5])))
        repeated = int(r[1]) if (r := _REPEATED.search(line)) is not None else 1
        if "model_loading_gib" in figures:
            self.pending.append(("Model loading took", figures["model_loading_gib"], lineno, inner, repeated))
        if "available_kv_cache_gib" in figures and "profiled_non_kv_gib" not in figures:
            self.pending.append(("Available KV cache memory", figures["available_kv_cache_gib"], lineno, inner, repeated))

    def _ranks(self, tag: _Tag | None) -> tuple[int | None, int | None, int | None, str]:
        if tag is None:
            return None, None, None, "no worker prefix"
        if tag.kind in ("Worker", "VllmWorker") and tag.parts:
            p = tag.parts
            pp = p.get("PP", 0 if "TP" in p or "DP" in p else None)
            return pp, p.get("DP"), p.get("TP"), f"the process name {tag.kind}{''.join(f'_{k}{v}' for k, v in p.items())}"
        if tag.pid in self.assigned:
            dp, pp, tp = self.assigned[tag.pid]
            return pp, dp, tp, f"pid {tag.pid}'s 'rank ... is assigned as DP rank {dp}, PP rank {pp}, TP rank {tp}' line"
        if tag.kind in ("EngineCore", "DPEngineCoreActor") and "DP" in tag.parts:
            return None, tag.parts["DP"], None, f"the process name {tag.kind}_{tag.parts['DP']}"
        node = self.nodes.get(tag.pid, tag.ip or "")
        same = {self.assigned[pid][1] for pid, ip in self.nodes.items() if ip == node and pid in self.assigned}
        if len(same) == 1:
            pp = next(iter(same))
            where = f"node {node}" if node else "the driver's node"
            return pp, None, None, f"inferred: pid {tag.pid} printed no rank line (Ray deduplicates them); every worker of {where} that did is PP rank {pp}"
        return None, None, None, f"pid {tag.pid} printed no rank line"

    def figures(self) -> tuple[WorkerFigure, ...]:
        out = []
        for key, value, lineno, tag, repeated in self.pending:
            pp, dp, tp, basis = self._ranks(tag)
            out.append(WorkerFigure(key, value, lineno, tag.label if tag else "", pp, dp, tp, basis, repeated))
        return tuple(out)

    @property
    def pipeline_ranks(self) -> set[int]:
        """The PP ranks the log's rank lines or process names show."""
        return {pp for _, pp, _ in self.assigned.values()} | self.named_pp
