"""`VllmLogFacts`: the figures one vLLM startup printed about its memory budget, as `log_startups` reads them.

Pure Python, no torch. What each field is read from: the format table of capacity/vllm/log_lines.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from capacity.vllm.compile_lines import CompileCacheEvidence
from capacity.vllm.log_workers import WorkerFigure

KEY_LINES = (
    "Model loading took",
    "Available KV cache memory",
    "GPU KV cache size",
    "Maximum concurrency",
    "Encoder cache will be initialized",
    "CUDA graph pool memory",
    "Free memory on device",
)


@dataclass(frozen=True)
class FreeMemoryReport:
    """vLLM's `Free memory on device (F/T GiB) on startup ...` line: the usage report after CUDA-graph capture
    (INFO in 0.33, DEBUG in 0.11-0.20), or the startup error when free memory is below the requested memory.
    Users often paste it cut into pieces; the pieces missing are None."""

    free_gib: float  # free memory at vLLM's startup snapshot
    total_gib: float
    gpu_memory_utilization: float | None
    requested_gib: float | None  # ceil(total x utilization); for the external-weights error, what is left for the engine
    startup_error: bool  # "... is less than desired GPU memory utilization": vLLM refused to start
    device: str | None = None  # "cuda:0" in the startup error of 0.15+
    consumed_gib: float | None = None  # 0.27+: weights + non-torch (mem_get_info drop since the snapshot)
    weights_gib: float | None = None  # 0.11-0.2x
    non_torch_gib: float | None = None  # 0.11-0.2x
    peak_activation_gib: float | None = None
    cudagraph_gib: float | None = None  # the actual capture
    kv_cache_memory_to_requested_bytes: int | None = None  # the suggested --kv-cache-memory (fits the requested memory)
    kv_cache_memory_to_gpu_bytes: int | None = None  # the suggested --kv-cache-memory (uses the whole free memory)
    kv_cache_in_use_gib: float | None = None  # 0.11 prints bytes: converted

    @property
    def free_minus_requested_bytes(self) -> int | None:
        """Exact: the two suggestions differ by init free - requested (both subtract the same non-KV + 150 MiB)."""
        if self.kv_cache_memory_to_gpu_bytes is None or self.kv_cache_memory_to_requested_bytes is None:
            return None
        return self.kv_cache_memory_to_gpu_bytes - self.kv_cache_memory_to_requested_bytes


@dataclass(frozen=True)
class GpuEvidence:
    """What the pasted text says about the GPU: CUDA's total (vLLM's own lines, an OOM) or an nvidia-smi table."""

    cuda_total_gib: float | None = None  # what gpu_memory_utilization multiplies, 2 decimals as printed
    cuda_total_basis: str = ""
    smi_name: str | None = None  # "NVIDIA L4"
    smi_total_mib: int | None = None
    smi_basis: str = ""

    @property
    def found(self) -> bool:
        return self.cuda_total_gib is not None or self.smi_name is not None or self.smi_total_mib is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class VllmLogFacts:
    """The figures one vLLM startup printed about its memory budget (None: not in the text)."""

    source: str
    version: str | None = None  # as the log states it (engine banner, server version, logo)
    version_guess: str = "unknown"  # the stated version; else "0.11", "0.15-0.20", "0.20", "0.33", "V0 engine" from the formats
    version_basis: str = ""
    engine: str | None = None  # "V0" when the V0 engine's worker lines are there
    v0_results_format: bool = False  # V0's 'Memory profiling results:' line (0.6.4's worker; 0.6.5 prints 'model weights take')
    model: str | None = None  # model='...' of the engine config line (or the non-default args)
    max_seq_len: int | None = None  # max_seq_len= of the engine config line, or 'Using max model len N'
    model_loading_gib: float | None = None
    model_loading_gib_decimals: int = 2  # 4 in 0.8-0.11 (%.4f), else format_gib's 2
    model_loading_seconds: float | None = None
    model_loading_memory_word: bool | None = None  # 'GiB memory and' (0.12+ V1 runner) / 'GiB and' (older, and MRV2 to 0.28)
    encoder_cache_budget_tokens: int | None = None
    encoder_profile_items: int | None = None
    encoder_profile_modality: str | None = None
    available_kv_cache_gib: float | None = None
    available_kv_cache_decimals_fixed: bool = False  # printed with %.2f (0.11: "121.50"), not format_gib ("125.0")
    kv_cache_memory_reserved_gib: float | None = None  # --kv-cache-memory-bytes: "reserved K GiB memory for KV Cache"
    initial_free_gib: float | None = None  # from that same line
    kv_cache_pool: str | None = None  # "GPU" ("XPU", "GPU + host", ...)
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_max_model_len: int | None = None
    capacity_format: str | None = None  # "one-line" (0.33) | "two-line" (0.8-0.28)
    cudagraph_actual_gib: float | None = None  # CUDA graph pool memory ... (actual)
    cudagraph_estimated_gib: float | None = None  # ... (estimated), or "Estimated CUDA graph memory: X GiB total"
    cudagraph_difference_percent: float | None = None
    graph_capture_gib: float | None = None  # Graph capturing finished in S secs, took X GiB
    # (current, without the estimate) from "is equivalent to ... without CUDA graph memory profiling", or (current,
    # current + estimate) from "increase --gpu-memory-utilization from U to V" when the estimate was off
    cudagraph_estimate_utilization: tuple[float, float] | None = None
    cudagraph_estimate_subtracted: bool | None = None  # True: "profiling is enabled", False: the estimate was off
    cudagraph_profile_counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # mode -> (graphs, largest tokens)
    graph_capture_seconds: int | None = None
    free_memory: FreeMemoryReport | None = None
    profiled_non_kv_gib: float | None = None  # 0.8-0.10 "Total non KV cache memory", V0 weights + peak + non-torch
    profiled_peak_gib: float | None = None  # torch peak increase (0.8-0.10) / PyTorch activation peak (V0)
    profiled_non_torch_gib: float | None = None
    v0_requested_gib: float | None = None  # V0: total_gpu_memory x gpu_memory_utilization
    v0_gpu_memory_utilization: float | None = None
    num_gpu_blocks: int | None = None  # printed by V0 ('# GPU blocks') and 0.9-0.11 ('num_gpu_blocks is')
    # TopKTopPSampler's line: True "Using FlashInfer for top-p & top-k sampling", False a fallback to forward_native
    flashinfer_sampler: bool | None = None
    log_knobs: dict[str, Any] = field(default_factory=dict)  # knobs the user gave (vLLM's 'non-default args: {...}')
    engine_config: dict[str, Any] = field(default_factory=dict)  # what the engine ran with (its config line: dtype, enforce_eager, TP, ...)
    effective_max_num_batched_tokens: int | None = None  # 'Chunked prefill is enabled with max_num_batched_tokens=N'
    model_runner_v2: bool | None = None  # the 'Model loading took' line's tag: [model_runner.py] (V2) or [gpu_model_runner.py]
    compile_cache: CompileCacheEvidence | None = None  # what the torch.compile lines say of the cache (cold / warm)
    gpu: GpuEvidence = field(default_factory=GpuEvidence)
    index: int = 1  # 1-based position of this startup in the pasted text
    first_line: int = 1
    last_line: int = 1
    lines: dict[str, int] = field(default_factory=dict)  # key -> 1-based line number of its first occurrence
    # every 'Model loading took' / 'Available KV cache memory' with the worker that printed it (capacity/vllm/log_workers.py)
    workers: tuple[WorkerFigure, ...] = ()
    pipeline_ranks: tuple[int, ...] = ()  # the PP ranks the log's process names or rank lines show
    kv_cache_tokens_printed: tuple[int, ...] = ()  # every 'GPU KV cache size' line's tokens, in order
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # lines that carry a key message but could not be read

    @property
    def kv_cache_gib(self) -> float | None:
        """The KV cache budget vLLM printed: Available KV cache memory, or the --kv-cache-memory-bytes reservation."""
        return self.available_kv_cache_gib if self.available_kv_cache_gib is not None else self.kv_cache_memory_reserved_gib

    @property
    def startup_error(self) -> bool:
        return self.free_memory is not None and self.free_memory.startup_error

    @property
    def requested_gib(self) -> float | None:
        """ceil(total x utilization) as the log printed it (Free memory report, or V0's profiling line)."""
        if self.free_memory is not None and self.free_memory.requested_gib is not None:
            return self.free_memory.requested_gib
        return self.v0_requested_gib

    def cudagraph_estimate_gib(self, total_gib: float | None) -> float | None:
        """The CUDA-graph estimate vLLM printed, else the one its utilization line implies: (current - without) x the GPU
        total, to the line's 4 decimals (+-0.00005 x total). None when neither is in the log, or no total is known."""
        if self.cudagraph_estimated_gib is not None:
            return self.cudagraph_estimated_gib
        implied = self._implied_by_utilization(total_gib)
        return None if implied is None else round(implied, 3)

    def cudagraph_estimate_interval_bytes(self, total_bytes: int) -> tuple[int, int] | None:
        """The bytes an estimate read from the utilization line stands for: vLLM printed round(current - estimate /
        total, 4), so the estimate lies within +-0.00005 x total of (current - without) x total. None when vLLM printed
        the estimate itself (its 2 decimals are the interval) or the line is not there."""
        if self.cudagraph_estimated_gib is not None:
            return None
        implied = self._implied_by_utilization(total_bytes)
        if implied is None:
            return None
        center, half_step = round(implied), total_bytes // 20_000
        return max(center - half_step, 0), center + half_step

    def _implied_by_utilization(self, total: float | None) -> float | None:
        """(current - without) x `total`, in total's unit."""
        if self.cudagraph_estimate_utilization is None or total is None:
            return None
        current, without = self.cudagraph_estimate_utilization
        return (current - without) * total

    @property
    def gpu_memory_utilization(self) -> float | None:
        if self.free_memory is not None and self.free_memory.gpu_memory_utilization is not None:
            return self.free_memory.gpu_memory_utilization
        return self.v0_gpu_memory_utilization

    @property
    def missing(self) -> tuple[str, ...]:
        """Key lines the log does not have (DEBUG-only lines, lines of later versions, or a log that stops early)."""
        have = {
            "Model loading took": self.model_loading_gib is not None,
            "Available KV cache memory": self.kv_cache_gib is not None,
            "GPU KV cache size": self.kv_cache_tokens is not None,
            "Maximum concurrency": self.max_concurrency is not None,
            "Encoder cache will be initialized": self.encoder_cache_budget_tokens is not None,
            "CUDA graph pool memory": self.cudagraph_actual_gib is not None,
            "Free memory on device": self.free_memory is not None,
        }
        return tuple(k for k in KEY_LINES if not have[k])

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["missing"] = list(self.missing)
        if self.free_memory is not None:
            out["free_memory"]["free_minus_requested_bytes"] = self.free_memory.free_minus_requested_bytes
        return out
