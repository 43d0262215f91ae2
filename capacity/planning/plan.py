"""The `Plan`: everything the planner worked out, as small frozen dataclasses that serialize to JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from capacity.gpu.catalog import Gpu
from capacity.kv.specs import KVGroup, group_to_dict
from capacity.memory.compile_cache import ColdCompileScratch
from capacity.memory.term import MemoryTerm
from capacity.model.spec import ModelSpec
from capacity.planning.data_parallel import data_parallel_summary
from capacity.planning.warmup import WarmupPlan
from capacity.serving.config import ServingConfig
from capacity.serving.data_parallel import Placement
from capacity.serving.encoder_budget import MultiModalBudget
from capacity.source.resolve import ModelSource
from capacity.units import plural
from capacity.vllm.versions import VllmSemantics
from capacity.weights.per_rank import WeightsBreakdown

if TYPE_CHECKING:  # pragma: no cover - typing only (stages.py reads NON_KV_TERMS from here)
    from capacity.memory.measured_profile import MemoryProfile
    from capacity.planning.stages import StagePlan

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (INFO, WARNING, ERROR)


@dataclass(frozen=True)
class Hazard:
    id: str
    severity: str  # error (vLLM will not start, or will OOM) | warning | info
    message: str
    fix: str
    # The fix as knob values (ServingArgs fields), when it is one the suggested `vllm serve` line can apply
    knobs: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "message": self.message, "fix": self.fix, "fix_knobs": dict(self.knobs)}


@dataclass(frozen=True)
class GroupPlan:
    group: KVGroup
    blocks_per_request_vllm: int
    blocks_per_request_actual: int
    block_table_width_blocks: int
    block_table_width_blocks_pre_fix: int

    def to_dict(self) -> dict[str, Any]:
        out = group_to_dict(self.group)
        out.update(
            blocks_per_request_vllm=self.blocks_per_request_vllm,
            blocks_per_request_actual=self.blocks_per_request_actual,
            block_table_width_blocks=self.block_table_width_blocks,
            block_table_width_blocks_pre_fix=self.block_table_width_blocks_pre_fix,
        )
        return out


@dataclass(frozen=True)
class KVCachePlan:
    available_bytes: int  # what vLLM hands the KV cache (Available KV cache memory)
    bytes_per_block: int
    num_blocks: int  # includes the null block, as vLLM reports it
    groups: tuple[GroupPlan, ...]
    block_table_max_len: int
    block_table_max_len_pre_fix: int

    @property
    def blocks_per_request_vllm(self) -> int:
        return sum(g.blocks_per_request_vllm for g in self.groups)

    @property
    def blocks_per_request_actual(self) -> int:
        return sum(g.blocks_per_request_actual for g in self.groups)

    @property
    def needed_for_one_request_bytes(self) -> int:
        """vLLM _check_enough_kv_cache_memory: bytes_per_block x sum of per-group blocks."""
        return self.bytes_per_block * self.blocks_per_request_vllm


@dataclass(frozen=True)
class Concurrency:
    vllm_reported: float  # num_blocks / blocks_per_request_vllm (vLLM's log line)
    actual: float  # usable blocks (null block excluded) / real blocks per request
    actual_requests: int  # whole requests at max_model_len that fit at once
    tokens_vllm_reported: int  # int(vllm_reported x max_model_len)


@dataclass(frozen=True)
class RankBudget:
    """One tensor-parallel rank of a profile: what it measured and the KV budget it leaves (vLLM uses the least)."""

    rank: int
    weights_bytes: int
    activation_peak_bytes: int
    encoder_cache_bytes: int
    non_torch_bytes: int
    cuda_graphs_bytes: int
    communicator_bytes: int | None
    non_kv_bytes: int
    available_kv_bytes: int
    deciding: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Suggestion:
    command: str | None  # the `vllm serve` line, or None when no knobs make vLLM 0.33 start
    applied: tuple[str, ...]  # ids of the hazards whose fixes the command applies, in order
    reason: str  # why there is no command ("" when there is one)
    # "id: fix" of each warning the command still raises: none a knob clears (a plugin to install, a trace to profile)
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line for reports: the command (and the fixes it carries, the warnings no knob clears), or why there is none."""
        if self.command is None:
            return f"none: {self.reason}"
        fixes = f" (applies the fixes of {', '.join(self.applied)})" if self.applied else ""
        left = f"; still warns: {'; '.join(self.warnings)}" if self.warnings else ""
        return f"{self.command}{fixes}{left}"


@dataclass(frozen=True)
class Plan:
    source: ModelSource
    spec: ModelSpec
    gpu: Gpu
    serving: ServingConfig
    budget: MultiModalBudget
    memory: dict[str, MemoryTerm]
    requested_memory_bytes: int
    free_at_startup_bytes: int
    kv: KVCachePlan
    concurrency: Concurrency
    warmup: WarmupPlan
    max_model_len_that_fits: int
    parameter_count: int
    cuda_graph_count: int
    # The CUDA graphs (with LoRA's second set) vLLM captures after sizing the KV cache where the version sets no memory
    # aside for them (planning/planner.py graphs_in_budget): the headroom above the KV cache must hold them; 0 otherwise
    graphs_after_budget_bytes: int
    semantics: VllmSemantics  # the vLLM version's rules it was planned with (capacity.vllm.versions; LATEST: 0.33's)
    hazards: tuple[Hazard, ...] = ()
    notes: tuple[str, ...] = field(default=())
    profile: MemoryProfile | None = None
    weights_per_rank: WeightsBreakdown | None = None  # the weights term's breakdown by parallel kind (capacity/weights/per_rank.py)
    ranks: tuple[RankBudget, ...] = ()  # a tensor-parallel profile's ranks, the spread of their KV budgets
    # What a cold torch.compile adds to the profile's peak (capacity/memory/compile_cache.py); None when nothing compiles
    # (--enforce-eager) or the profile's figure is not used (--kv-cache-memory-bytes)
    cold_compile: ColdCompileScratch | None = None
    # The `vllm serve` line with the error hazards' fixes applied (capacity/planning/suggest.py), filled in by the
    # planner once the plan is built; None only on the re-plans that search for it
    suggestion: Suggestion | None = None
    # --data-parallel-size / --node / --gpus-per-node: where the ranks sit (capacity/serving/data_parallel.py); None
    # at DP 1 without node options. Every figure above is one rank's of one engine.
    placement: Placement | None = None
    moe: bool = False  # an MoE model (its experts split or divided over tp x dp ranks)

    @property
    def data_parallel_size(self) -> int:
        return self.serving.data_parallel_size

    @property
    def total_max_concurrent_requests(self) -> int:
        """What the DP engines run at once: dp x one engine's max_concurrent_requests."""
        return self.data_parallel_size * self.max_concurrent_requests
    # --pipeline-parallel-size > 1: every stage as its own worker (capacity/planning/stages.py); the plan's memory and
    # KV budget are then the limiting stage's, its blocks the engine's pool
    stages: tuple[StagePlan, ...] = ()

    @property
    def kv_spread_bytes(self) -> int:
        """Largest minus smallest available KV memory over the profiled ranks (0 for one rank)."""
        budgets = [r.available_kv_bytes for r in self.ranks]
        return max(budgets) - min(budgets) if budgets else 0

    @property
    def fits(self) -> bool:
        return not any(h.severity == ERROR for h in self.hazards)

    @property
    def verdict(self) -> str:
        return "fits" if self.fits else "does_not_fit"

    @property
    def max_concurrent_requests(self) -> int:
        """What the server runs at once: min(requests at max_model_len the KV cache holds, max_num_seqs)."""
        return min(self.concurrency.actual_requests, self.serving.max_num_seqs)

    @property
    def max_model_len_served(self) -> int:
        """The longest request the plan serves: max_model_len, or less when one request at it does not fit."""
        return min(self.serving.max_model_len, self.max_model_len_that_fits)

    @property
    def concurrency_limited_by(self) -> str:
        """"max_num_seqs" when the scheduler's cap binds before the KV cache does, else "kv_cache"."""
        return "max_num_seqs" if self.serving.max_num_seqs < self.concurrency.actual_requests else "kv_cache"

    def concurrency_sentence(self) -> str:
        """Both figures in words: what the KV cache holds and what the server runs, as reports print them."""
        held, cap = self.concurrency.actual_requests, self.serving.max_num_seqs
        return (
            f"the KV cache holds {plural(held, 'request')} at max_model_len {self.serving.max_model_len:,}; "
            f"the server runs {self.max_concurrent_requests:,} at once (the smaller of that and max_num_seqs {cap})"
        )

    def group_block_sizes(self) -> list[int]:
        """Each KV group's block size in tokens: --block-size, unless vLLM 0.33 made the group's page larger
        (hybrid models: attention blocks sized to hold a Mamba state page; Gemma-4's full-attention groups)."""
        return [g.group.spec.block_size for g in self.kv.groups]

    def kv_tokens_explained(self) -> str:
        """Why vLLM's "GPU KV cache size: N tokens" is not num_blocks x block_size, or "" where it is.

        vLLM 0.33 logs int(concurrency x max_model_len) (get_max_concurrency_for_kv_cache_config), concurrency being
        num_blocks / the blocks one request at max_model_len takes summed over the groups."""
        reasons = []
        sizes = self.group_block_sizes()
        if any(b != self.serving.block_size for b in sizes):
            reasons.append(f"groups page in {'/'.join(str(b) for b in dict.fromkeys(sizes))}-token blocks, not --block-size {self.serving.block_size}")
        kinds = {g.group.kind for g in self.kv.groups}
        if "mamba" in kinds:
            reasons.append("a state (Mamba) group holds a fixed number of blocks per request whatever its length")
        if any(g.group.spec.reads_encoder_output for g in self.kv.groups):
            reasons.append("cross-attention groups hold the encoder's tokens, not the prompt's")
        if len(self.kv.groups) > 1 and not reasons:
            reasons.append(f"each request takes blocks in all {len(self.kv.groups)} groups")
        if not reasons and self.concurrency.tokens_vllm_reported == self.kv.num_blocks * self.serving.block_size:
            return ""
        return "; ".join(reasons)

    @property
    def non_kv_bytes(self) -> int:
        """vLLM 0.33 non_kv_cache_memory (+ the CUDA-graph estimate it subtracts too)."""
        return sum(t.bytes for k, t in self.memory.items() if k in NON_KV_TERMS)

    def suggested_command(self) -> str | None:
        return None if self.suggestion is None else self.suggestion.command

    def to_dict(self) -> dict[str, Any]:
        s = self.serving
        return {
            "capacity_plan_version": 1,
            "model": {
                **self.source.to_dict(),
                "family": self.spec.family.name,
                "architecture": self.spec.architecture,
                "is_encoder_decoder": self.spec.is_encoder_decoder,
                "parameters": self.parameter_count,
                "derived_max_model_len": self.spec.derived_max_model_len,
                "max_len_key": self.spec.max_len_key,
                "max_source_positions": self.spec.max_source_positions,
                "encoder_tokens_per_request": self.spec.encoder_tokens_per_request,
                "vllm_support": asdict(self.spec.vllm_support),
                "notes": list(self.spec.notes),
            },
            "gpu": self.gpu.to_dict(),
            "serving": {**s.to_dict(), "group_block_sizes": self.group_block_sizes()},
            "memory": {
                **{k: t.to_dict() for k, t in self.memory.items()},
                "requested_bytes": self.requested_memory_bytes,
                "free_at_startup_bytes": self.free_at_startup_bytes,
                "non_kv_bytes": self.non_kv_bytes,
                "graphs_after_budget_bytes": self.graphs_after_budget_bytes,
            },
            "kv_cache": {
                "available_bytes": self.kv.available_bytes,
                "bytes_per_block": self.kv.bytes_per_block,
                "num_blocks": self.kv.num_blocks,
                "groups": [g.to_dict() for g in self.kv.groups],
                "blocks_per_request_vllm": self.kv.blocks_per_request_vllm,
                "blocks_per_request_actual": self.kv.blocks_per_request_actual,
                "needed_for_one_request_bytes": self.kv.needed_for_one_request_bytes,
                "tokens_vllm_reported": self.concurrency.tokens_vllm_reported,
                "block_table_max_len": self.kv.block_table_max_len,
                "block_table_max_len_pre_fix": self.kv.block_table_max_len_pre_fix,
            },
            "concurrency": {
                "vllm_reported": round(self.concurrency.vllm_reported, 2),
                "actual": round(self.concurrency.actual, 2),
                "actual_requests": self.concurrency.actual_requests,
                "max_concurrent_requests": self.max_concurrent_requests,
                "limited_by": self.concurrency_limited_by,
            },
            "budget": self.budget.to_dict(),
            "warmup": self.warmup.to_dict(),
            "max_model_len_that_fits": self.max_model_len_that_fits,
            "cuda_graph_count": self.cuda_graph_count,
            "weights_per_rank": None if self.weights_per_rank is None else self.weights_per_rank.to_dict(),
            "hazards": [h.to_dict() for h in self.hazards],
            "verdict": self.verdict,
            "suggested_command": self.suggested_command(),
            "suggestion": None if self.suggestion is None else self.suggestion.to_dict(),
            "notes": list(self.notes),
            "profile": None if self.profile is None else self.profile.to_dict(),
            "ranks": [r.to_dict() for r in self.ranks],
            "kv_spread_bytes": self.kv_spread_bytes,
            "cold_compile": None if self.cold_compile is None else self.cold_compile.to_dict(),
            **self._data_parallel_dict(),
            **({"stages": [st.to_dict() for st in self.stages]} if self.stages else {}),
        }

    def _data_parallel_dict(self) -> dict[str, Any]:
        """The "data_parallel" section, only where DP or nodes were given (single-engine plans' JSON is unchanged)."""
        if self.placement is None:
            return {}
        return {"data_parallel": data_parallel_summary(self.placement, self.serving, self.max_concurrent_requests, self.concurrency.tokens_vllm_reported, self.moe)}


# Terms that vLLM 0.33 subtracts from the requested memory before the KV cache:
# non_kv_cache_memory = total_consumed (weights + non-torch) + transient peak (activations +
# encoder-cache outputs held during profiling), then the CUDA-graph estimate.
# With --enable-lora: the LoRA buffers and, before vLLM 0.12, the extra vocabulary's rows (both in the model load),
# their shrink buffer (on the activation peak) and the graphs captured with LoRA active (capacity/memory/lora.py);
# absent when LoRA is off.
NON_KV_TERMS = (
    "weights",
    "load_buffers",
    "activation_peak",
    "encoder_cache",
    "non_torch",
    "cuda_graphs",
    "lora_buffers",
    "lora_extra_vocabulary",
    "lora_activations",
    "lora_cuda_graphs",
    "pp_intermediate",
)
# The terms vLLM's "Model loading took" counts.
LOADED_TERMS = ("weights", "load_buffers", "lora_buffers", "lora_extra_vocabulary")
# How reports name each memory term.
TERM_LABELS = {
    "weights": "weights",
    "load_buffers": "load buffers (rotary caches, allocator rounding)",
    "activation_peak": "activation peak",
    "encoder_cache": "encoder cache (profiled outputs)",
    "non_torch": "non-torch growth",
    "cuda_graphs": "CUDA graphs",
    "lora_buffers": "LoRA buffers (in the model load)",
    "lora_extra_vocabulary": "LoRA extra vocabulary rows (in the model load)",
    "lora_activations": "LoRA shrink buffer (activation peak)",
    "lora_cuda_graphs": "CUDA graphs with LoRA",
    "pp_intermediate": "PP intermediate tensors (received)",
    "kv_cache": "KV cache",
    "cuda_context": "CUDA context (before snapshot)",
    "collectives": "NCCL + all-reduce buffers (before snapshot)",
    "block_tables": "block tables (after KV budget)",
}

MEMORY_TERMS = (*NON_KV_TERMS, "kv_cache", "cuda_context", "collectives")


def loaded_bytes(plan: Plan) -> int:
    """What vLLM's "Model loading took" counts: the weights plus the load buffers (rotary caches, allocator rounding),
    and with --enable-lora the LoRA buffers and (before vLLM 0.12) the extra vocabulary's rows (load_lora_model runs
    inside the load's memory profiler)."""
    return sum(plan.memory[k].bytes for k in LOADED_TERMS if k in plan.memory)
