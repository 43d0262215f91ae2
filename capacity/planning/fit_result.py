"""`capacity fit`'s results: the target, each configuration that meets it, and why a GPU type does not (frozen,
serialised by to_dict; capacity/planning/fit.py finds them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from capacity.errors import BadInput
from capacity.model.spec import ModelSpec
from capacity.source.resolve import ModelSource
from capacity.units import plural
from capacity.vllm.versions import LATEST

DEFAULT_MAX_GPUS = 8


@dataclass(frozen=True)
class FitTarget:
    min_concurrency: int = 1
    max_model_len: int | None = None  # None: the longest context that meets min_concurrency
    max_gpus: int = DEFAULT_MAX_GPUS
    utilization_ceiling: float | None = None  # the most gpu_memory_utilization the search may set; None: the base's

    def __post_init__(self) -> None:
        for flag, value, least in (("--min-concurrency", self.min_concurrency, 1), ("--max-gpus", self.max_gpus, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise BadInput(f"{flag} must be an integer >= {least}, got {value!r}")
        if self.max_model_len is not None and (isinstance(self.max_model_len, bool) or self.max_model_len <= 0):
            raise BadInput(f"--max-model-len must be a positive number of tokens or 'max', got {self.max_model_len!r}")
        ceiling = self.utilization_ceiling
        if ceiling is not None and not 0 < ceiling <= 1:
            raise BadInput(f"--max-gpu-memory-utilization must be in (0, 1], got {ceiling}")

    def per_engine(self, engines: int) -> FitTarget:
        """What each of `engines` DP engines must run at once for their total to meet the target: ceil(target / engines)."""
        return self if engines == 1 else replace(self, min_concurrency=-(-self.min_concurrency // engines))

    def describe(self) -> str:
        length = "the longest max_model_len" if self.max_model_len is None else f"max_model_len {self.max_model_len:,}"
        return f">= {plural(self.min_concurrency, 'request')} at once at {length}, on at most {plural(self.max_gpus, 'GPU')}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class KnobChange:
    knob: str  # the ServingConfig field
    before: Any  # its value with the user's knobs and vLLM's defaults
    after: Any

    def describe(self) -> str:
        return f"{self.knob} {_shown(self.before)} -> {_shown(self.after)}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FitConfig:
    """One configuration that meets the target: the figures of its plan (`estimate` says which estimate)."""

    gpu: str
    gpu_count: int  # the world size: tensor x pipeline x data parallel
    command: str  # the `vllm serve` line
    plan_command: str  # the `capacity plan` line that re-plans it to these figures
    changes: tuple[KnobChange, ...]  # from the base knobs (the user's, vLLM's defaults), TP aside
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    limit_mm_per_prompt: dict[str, int]
    requests_at_once: int  # what the server runs at once: Plan.total_max_concurrent_requests (DP x one engine's)
    kv_requests: int  # concurrency.actual_requests: whole requests at max_model_len one engine's KV cache holds
    margin_requests: int  # requests_at_once - the target
    spare_kv_bytes: int  # (usable blocks - target x blocks per request) x bytes per block
    available_kv_bytes: int
    non_kv_bytes: int
    num_blocks: int
    estimate: str  # "formula" or "trace" (the default estimate of `capacity plan`)
    rung: int  # how far up the ladder (0: no change beyond max_model_len, max_num_seqs and the layout)
    warnings: tuple[str, ...] = ()  # the plan's warning hazards no rung clears: "id: message (fix: ...)"
    # the layout (capacity/planning/fit_layouts.py); kv_requests, spare_kv_bytes and the KV figures above are one
    # engine's (one DP rank's), requests_at_once the engines' total
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    nodes: int = 1
    node: str | None = None  # the node type (or "N-GPU nodes" given by --gpus-per-node); None: one host
    layout: str = ""  # "TP 8 x DP 2 on 2 x 8x H200"
    requests_per_engine: int = 0  # Plan.max_concurrent_requests: one engine's (at least ceil(target / DP))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["changes"] = [c.to_dict() for c in self.changes]
        return out


@dataclass(frozen=True)
class Refusal:
    gpu: str
    gpu_count: int  # the largest world size tried
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FitResult:
    source: ModelSource
    spec: ModelSpec
    target: FitTarget
    held: tuple[str, ...]  # knobs the user gave: never changed
    configs: tuple[FitConfig, ...]  # fewest GPUs first
    refusals: tuple[Refusal, ...]  # per GPU type, why its largest count tried does not meet the target
    planned: int  # plans the search built
    notes: tuple[str, ...] = field(default=())
    vllm_version: str = LATEST.release  # the release planned for (--vllm-version)

    @property
    def fits(self) -> bool:
        return bool(self.configs)

    def to_dict(self) -> dict[str, Any]:
        import capacity

        return {
            "capacity_fit_version": 1,
            "model": {**self.source.to_dict(), "architecture": self.spec.architecture, "family": self.spec.family.name},
            "capacity_version": capacity.__version__,
            "vllm_semantics_version": capacity.VLLM_VERSION,  # the default; vllm_version says which release was planned
            "vllm_version": self.vllm_version,
            "target": self.target.to_dict(),
            "held_knobs": list(self.held),
            "fits": self.fits,
            "configs": [c.to_dict() for c in self.configs],
            "refusals": [r.to_dict() for r in self.refusals],
            "plans_built": self.planned,
            "notes": list(self.notes),
        }


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "{}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


# --- what meets the target ---------------------------------------------------------------------------------
