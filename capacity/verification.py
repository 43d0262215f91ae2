"""`VerifyResult`: a plan put to the test on the GPU (`capacity verify`), as a frozen dataclass."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from capacity.profile import OomResult, PhaseMeasurement


@dataclass(frozen=True)
class VerifyResult:
    model: str
    gpu_name: str
    device: str
    requested_bytes: int  # ceil(total x gpu_memory_utilization): the memory the plan promised to stay within
    baseline_device_used_bytes: int  # CUDA context + cuBLAS before the model (outside vLLM's budget)
    kv_pool_bytes: int  # num_blocks x bytes_per_block, allocated as the plan says
    block_tables_bytes: int
    requests: int  # concurrent requests run: min(actual max concurrency, max_num_seqs)
    context_len: int  # self-attention keys per request
    encoder_len: int  # cross-attention keys per request
    decode_steps: int
    peak_allocated_bytes: int  # torch allocator peak over the whole run
    peak_used_bytes: int  # device memory used at the peak above the baseline (cudaMemGetInfo), or the allocator peak on the CPU probe
    wall_s: float
    phases: tuple[PhaseMeasurement, ...]
    oom: OomResult | None
    reproducer: str
    rank: int = 0  # the tensor-parallel rank this ran on
    ranks: tuple[VerifyResult, ...] = field(default=())  # tensor parallelism: every rank; this one fared worst
    notes: tuple[str, ...] = field(default=())

    @property
    def unused_bytes(self) -> int:
        """The plan's waste: requested memory the worst steady state left unused (negative: over budget)."""
        return self.requested_bytes - self.peak_used_bytes

    @property
    def unused_fraction(self) -> float:
        return self.unused_bytes / self.requested_bytes if self.requested_bytes else 0.0

    @property
    def passed(self) -> bool:
        return self.oom is None and self.unused_bytes >= 0 and self.requests > 0 and all(r.passed for r in self.ranks)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(unused_bytes=self.unused_bytes, unused_fraction=round(self.unused_fraction, 5), passed=self.passed)
        return out


def combine_verify_ranks(ranks: tuple[VerifyResult, ...], notes: tuple[str, ...] = ()) -> VerifyResult:
    """A tensor-parallel verify: the rank that failed, else the one with the least memory left, every rank listed."""
    ordered = tuple(sorted(ranks, key=lambda r: r.rank))
    worst = min(ordered, key=lambda r: (r.oom is None, r.unused_bytes, r.rank))
    return replace(worst, ranks=ordered, notes=worst.notes + notes)
