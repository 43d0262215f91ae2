"""`VerifyResult`: a plan put to the test on the GPU (`capacity verify`), as a frozen dataclass.

The plan promises what vLLM 0.33 promises: the *allocated* peak (weights, KV pool, activations) stays within
`gpu_memory_utilization x total`. vLLM sizes the KV cache from the allocated peak (`transient_peak_headroom`),
so the CUDA caching allocator's memory reserved but not allocated at that peak is outside its formula too.
Verify measures that reserve as a term of its own (`allocator_slack_bytes`) and reads the run accordingly:

- peak device use within the requested memory: verified;
- above it by no more than the allocator's slack: the plan is faithful to vLLM, and vLLM would show the same
  overshoot; it runs as long as the slack fits in the headroom gpu_memory_utilization leaves (a warning), and
  runs out of memory under this load when it does not (an error: vLLM would fail the same way);
- above it by more than the slack: the planned allocations themselves exceed the budget, a bug in the plan.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from capacity.memory.measured_profile import OomResult, PhaseMeasurement
from capacity.planning.plan import ERROR, WARNING, Hazard

VERIFIED = "verified"
WITHIN_ALLOCATOR_SLACK = "over_requested_by_allocator_slack"  # faithful to vLLM: vLLM's formula leaves the slack out too
SLACK_EXCEEDS_HEADROOM = "allocator_slack_exceeds_headroom"  # faithful to vLLM, and vLLM would run out of memory too
OVER_BUDGET = "over_budget"  # the planned allocations exceed the requested memory: a bug in the plan
OUT_OF_MEMORY = "out_of_memory"
NO_REQUESTS = "no_requests"


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
    peak_reserved_bytes: int = 0  # the caching allocator's reserved peak over the run (the CPU probe reserves what is live)
    gpu_total_bytes: int = 0  # the device's total (cudaMemGetInfo), or the plan's GPU on the CPU probe
    headroom_bytes: int = 0  # total - baseline - requested: what gpu_memory_utilization leaves free beside the budget
    gpu_memory_utilization: float = 0.0
    rank: int = 0  # the tensor-parallel rank this ran on
    ranks: tuple[VerifyResult, ...] = field(default=())  # tensor parallelism: every rank; this one fared worst
    notes: tuple[str, ...] = field(default=())
    tower_excess_bytes: int = 0  # what transformers' encoder tower holds beyond the plan's vLLM-kernel activation
    pool_held_back_bytes: int = 0  # pool blocks not allocated to make room for that excess (whole blocks: >= it)

    @property
    def unused_bytes(self) -> int:
        """The plan's waste: requested memory the worst steady state left unused (negative: over budget). The run's
        encoder is transformers' tower; where the plan charges vLLM's smaller one (the family's factor), the run held
        back whole pool blocks for the difference: the pool vLLM would have is the run's plus those blocks, its encoder
        the run's less the excess."""
        return self.requested_bytes - (self.peak_used_bytes + self.pool_held_back_bytes - self.tower_excess_bytes)

    @property
    def unused_fraction(self) -> float:
        return self.unused_bytes / self.requested_bytes if self.requested_bytes else 0.0

    @property
    def over_requested_bytes(self) -> int:
        return max(-self.unused_bytes, 0)

    @property
    def allocator_slack_bytes(self) -> int:
        """Reserved but unallocated at the peak: max reserved - max allocated (vLLM's formula counts the latter)."""
        return max(self.peak_reserved_bytes - self.peak_allocated_bytes, 0)

    @property
    def outcome(self) -> str:
        if self.oom is not None:
            return OUT_OF_MEMORY
        if self.requests <= 0:
            return NO_REQUESTS
        if self.over_requested_bytes > self.allocator_slack_bytes:
            return OVER_BUDGET
        if self.allocator_slack_bytes > self.headroom_bytes:
            return SLACK_EXCEEDS_HEADROOM
        return VERIFIED if self.over_requested_bytes == 0 else WITHIN_ALLOCATOR_SLACK

    @property
    def passed(self) -> bool:
        return self.outcome in (VERIFIED, WITHIN_ALLOCATOR_SLACK) and all(r.passed for r in self.ranks)

    @property
    def faithful_to_vllm(self) -> bool:
        """The planned allocations stayed within the requested memory (what vLLM's own formula promises)."""
        return self.outcome in (VERIFIED, WITHIN_ALLOCATOR_SLACK, SLACK_EXCEEDS_HEADROOM)

    @property
    def hazards(self) -> tuple[Hazard, ...]:
        slack, over, headroom = self.allocator_slack_bytes, self.over_requested_bytes, self.headroom_bytes
        if self.outcome == SLACK_EXCEEDS_HEADROOM:
            # requested + slack must fit in what is free beside the baseline: utilization <= (free - slack) / total
            free = self.requested_bytes + headroom
            fitting = math.floor((free - slack) / self.gpu_total_bytes * 100) / 100 if free > slack and self.gpu_total_bytes else 0.0
            return (
                Hazard(
                    SLACK_EXCEEDS_HEADROOM,
                    ERROR,
                    f"the CUDA caching allocator held {slack:,} B reserved but unallocated beside the allocated peak, more than the "
                    f"{headroom:,} B that gpu_memory_utilization {self.gpu_memory_utilization} leaves free: vLLM 0.33 sizes its KV cache "
                    "from the allocated peak (transient_peak_headroom), so it would start on this plan and then run out of memory "
                    "(CUDA out of memory, 'reserved by PyTorch but unallocated') under this load",
                    f"lower --gpu-memory-utilization to {fitting:.2f} or less, or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                    (("gpu_memory_utilization", fitting),) if fitting > 0 else (),
                ),
            )
        if self.outcome == WITHIN_ALLOCATOR_SLACK:
            return (
                Hazard(
                    WITHIN_ALLOCATOR_SLACK,
                    WARNING,
                    f"peak device memory is {over:,} B ({over / self.requested_bytes:.2%}) above the requested {self.requested_bytes:,} B, "
                    f"within the {slack:,} B the CUDA caching allocator held reserved but unallocated; vLLM 0.33's formula leaves that "
                    f"reserve out too, so a vLLM server on these knobs shows the same: it starts and runs, using {over:,} B of the "
                    f"{headroom:,} B gpu_memory_utilization {self.gpu_memory_utilization} leaves free (nvidia-smi shows more than "
                    "gpu_memory_utilization x total)",
                    "expected; to stay within gpu_memory_utilization x total, lower it by the overshoot",
                ),
            )
        return ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            unused_bytes=self.unused_bytes,
            unused_fraction=round(self.unused_fraction, 5),
            over_requested_bytes=self.over_requested_bytes,
            allocator_slack_bytes=self.allocator_slack_bytes,
            outcome=self.outcome,
            faithful_to_vllm=self.faithful_to_vllm,
            passed=self.passed,
            hazards=[h.to_dict() for h in self.hazards],
        )
        return out


def combine_verify_ranks(ranks: tuple[VerifyResult, ...], notes: tuple[str, ...] = ()) -> VerifyResult:
    """A tensor-parallel verify: the rank that failed, else the one with the least memory left, every rank listed."""
    ordered = tuple(sorted(ranks, key=lambda r: r.rank))
    worst = min(ordered, key=lambda r: (r.passed, r.oom is None, r.unused_bytes, r.rank))
    return replace(worst, ranks=ordered, notes=worst.notes + notes)
