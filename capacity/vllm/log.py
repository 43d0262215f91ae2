"""Read what users paste of a vLLM startup (V0 and 0.8 to 0.33) into `VllmLogFacts`: the figures vLLM printed.

Pure Python, no torch. The formats are vLLM's own log strings (read from the 0.11.0, 0.15.0, 0.20.0 and 0.33.0
wheels, and from public logs of 0.6 to 0.28). A line is read wherever its message sits: behind vLLM's prefixes
(`(EngineCore_DP0 pid=123) INFO 11-30 08:12:01 [gpu_worker.py:773] `), docker-compose's (`vllm-1  | `), a
timestamp, a markdown quote or nothing at all; ANSI colours and CRLF endings are ignored.

| message | versions | format |
|---|---|---|
| Model loading took | 0.8-0.11 | `Model loading took %.4f GiB and %.6f seconds` (`GB` before 0.10) |
| | 0.15-0.33 | `Model loading took %s GiB memory and %.6f seconds`; users often cut `and N seconds` |
| Loading model weights took | V0 | `Loading model weights took %.4f GB` |
| Available KV cache memory | 0.8-0.33 | `Available KV cache memory: %s GiB` (`%.2f` in 0.11, `format_gib` later) |
| KV cache size | 0.8-0.28 | `GPU KV cache size: %s tokens` and, on its own line, `Maximum concurrency for %s tokens per request: %.2fx` |
| | 0.33 | `GPU KV cache size: {tokens:,} tokens, Maximum concurrency for {max_model_len:,} tokens per request: %.2fx` |
| Encoder cache | 0.9-0.33 | `Encoder cache will be initialized with a budget of %s tokens, and profiled with %s %s items of the maximum feature size.` |
| CUDA graphs | 0.19-0.33 | `Estimated CUDA graph memory: %.2f GiB total`, `CUDA graph pool memory: A GiB (actual), E GiB (estimated), ...`, `Graph capturing finished in %.0f secs, took %.2f GiB` |
| | 0.19-0.33 (V1 runner) | `Profiling CUDA graph memory: PIECEWISE=N (largest=L), FULL=M (largest=K)` |
| | 0.19-0.33 | the estimate as utilizations (gpu_worker.py, the only trace of MRV2's estimate): `The current --gpu-memory-utilization=%.4f is equivalent to --gpu-memory-utilization=%.4f without CUDA graph memory profiling`; with the estimate off, `increase --gpu-memory-utilization from %.4f to %.4f` |
| Free memory on device | 0.11-0.33 | `Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB). Actual usage is ...`, or the startup error `... is less than desired GPU memory utilization (U, R GiB)` |
| kv_cache_memory_bytes | 0.11-0.33 | `Initial free memory F GiB, reserved K GiB memory for KV Cache as specified by kv_cache_memory_bytes config` |
| profiling | 0.8-0.10 | `Memory profiling takes S seconds. Total non KV cache memory: N GiB; torch peak memory increase: P GiB; non-torch forward increase memory: T GiB; weights memory: W GiB.` |
| | V0 | `the current vLLM instance can use total_gpu_memory (T GiB) x gpu_memory_utilization (U) = R GiB`, `model weights take W GiB; non_torch_memory takes T GiB; PyTorch activation peak memory takes P GiB; the rest of the memory reserved for KV Cache is K GiB.`, `Memory profiling results: total_gpu_memory=... kv_cache_size=... gpu_memory_utilization=...`, `# GPU blocks: N` |
| num_gpu_blocks | 0.9-0.11 | `vllm cache_config_info with initialization after num_gpu_blocks is: N` |

Knobs are read from `non-default args: {...}` (0.6-0.8: `args: Namespace(...)`, values other than the defaults), a pasted
`vllm serve MODEL --flag value ...` command (the flags capacity plans with; `non-default args` wins), the engine's config line, `Using max model len N` and `Chunked
prefill is enabled with max_num_batched_tokens=N`. The GPU's total from `Free memory on device (F/T GiB)`, V0's
`total_gpu_memory`, a CUDA out-of-memory error (`total capacity of T GiB`) or an nvidia-smi table / query.

A line that carries one of these messages but cannot be read (a word where a number should be, a line cut before
its unit) is a **warning**; a part cut off the end of a line (`and N seconds`, the concurrency after the token
count) is simply not read. Only a text with no startup figure at all is refused (BadInput). Several startups in
one paste (restarts, a fixed and a failed run) are split where an engine banner, or a second model load, follows
the KV figures of the startup before: `parse_vllm_startups` returns each.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from capacity.errors import BadInput
from capacity.vllm.compile_lines import CompileCacheEvidence, compile_cache_evidence, is_compile_line

KEY_LINES = (
    "Model loading took",
    "Available KV cache memory",
    "GPU KV cache size",
    "Maximum concurrency",
    "Encoder cache will be initialized",
    "CUDA graph pool memory",
    "Free memory on device",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_N = r"(-?\d+(?:\.\d+)?)"  # a decimal as vLLM prints it
_I = r"(\d{1,3}(?:,\d{3})+|\d+)"  # an integer, with or without thousands separators


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
    model: str | None = None  # model='...' of the engine config line (or the non-default args)
    max_seq_len: int | None = None  # max_seq_len= of the engine config line, or 'Using max model len N'
    model_loading_gib: float | None = None
    model_loading_gib_decimals: int = 2  # 4 in 0.8-0.11 (%.4f), else format_gib's 2
    model_loading_seconds: float | None = None
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
    compile_cache: CompileCacheEvidence | None = None  # what the torch.compile lines say of the cache (cold / warm)
    gpu: GpuEvidence = field(default_factory=GpuEvidence)
    index: int = 1  # 1-based position of this startup in the pasted text
    first_line: int = 1
    last_line: int = 1
    lines: dict[str, int] = field(default_factory=dict)  # key -> 1-based line number of its first occurrence
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


def _num(text: str) -> float:
    return float(text)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def _show(line: str) -> str:
    line = line.strip()
    return line if len(line) <= 90 else line[:87] + "..."


# --- one reader per message: does the line carry it, the formats it is read with, what they set -------------
# Each format is searched anywhere in the line and ends where vLLM's figure ends: what follows (a cut line's
# rest, the user's comment) is not read. A line claimed by a reader that no format reads is a warning.


@dataclass(frozen=True)
class _Reader:
    key: str  # the message (for warnings and `lines`)
    claims: Callable[[str], bool]
    formats: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], dict[str, Any]]], ...]
    expected: str  # the format, for the warning
    stage: str = "other"  # "load" starts a startup; "kv" closes one


def _h_model_loading(m: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"model_loading_gib": _num(m[1]), "model_loading_gib_decimals": max(_decimals(m[1]), 2), "_ml_memory_word": bool(m[3])}
    if m[4] is not None:
        out["model_loading_seconds"] = _num(m[4])
    return out


def _h_available(m: re.Match[str]) -> dict[str, Any]:
    return {"available_kv_cache_gib": _num(m[1]), "available_kv_cache_decimals_fixed": _decimals(m[1]) == 2 and m[1].endswith("0")}


def _h_capacity(m: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"kv_cache_pool": m[1], "kv_cache_tokens": _int(m[2]), "capacity_format": "one-line" if m[3] else "two-line"}
    if m[4] is not None:
        out.update(concurrency_max_model_len=_int(m[4]), max_concurrency=_num(m[5]))
    elif m[3]:
        out["_cut"] = "its 'Maximum concurrency for ...' part is cut off: the token count is read, the concurrency is not"
    return out


def _h_concurrency(m: re.Match[str]) -> dict[str, Any]:
    return {"concurrency_max_model_len": _int(m[1]), "max_concurrency": _num(m[2])}


def _h_encoder(m: re.Match[str]) -> dict[str, Any]:
    return {"encoder_cache_budget_tokens": int(m[1]), "encoder_profile_items": int(m[2]), "encoder_profile_modality": m[3]}


def _h_pool(m: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"cudagraph_actual_gib": _num(m[1]), "cudagraph_estimated_gib": _num(m[2])}
    if m[3] is not None:
        out["cudagraph_difference_percent"] = _num(m[3])
    return out


def _h_equivalent(m: re.Match[str]) -> dict[str, Any]:
    # vLLM gpu_worker.determine_available_memory: equiv = round(current - estimate / total, 4)
    return {"cudagraph_estimate_utilization": (_num(m[1]), _num(m[2])), "cudagraph_estimate_subtracted": True}


def _h_from_to(m: re.Match[str]) -> dict[str, Any]:
    # the estimate off (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0, or 0.19's opt-in): suggested = round(current + estimate / total, 4)
    current, suggested = _num(m[1]), _num(m[2])
    return {"cudagraph_estimate_utilization": (current, round(2 * current - suggested, 4)), "cudagraph_estimate_subtracted": False}


_GRAPH_GROUP = re.compile(r"(PIECEWISE|FULL|ENCODER)=(\d+) \(largest=(\d+)\)")


def _h_profile_counts(m: re.Match[str]) -> dict[str, Any]:
    return {"cudagraph_profile_counts": {g[0]: (int(g[1]), int(g[2])) for g in _GRAPH_GROUP.findall(m[0])}}


def _h_reserved(m: re.Match[str]) -> dict[str, Any]:
    return {"initial_free_gib": _num(m[1]), "kv_cache_memory_reserved_gib": _num(m[2])}


def _h_profiling_v1(m: re.Match[str]) -> dict[str, Any]:
    return {"profiled_non_kv_gib": _num(m[1]), "profiled_peak_gib": _num(m[2]), "profiled_non_torch_gib": _num(m[3]), "model_loading_gib_from_profile": _num(m[4])}


def _h_v0_budget(m: re.Match[str]) -> dict[str, Any]:
    return {"_gpu_cuda_total": (_num(m[1]), "V0 'total_gpu_memory'"), "v0_gpu_memory_utilization": _num(m[2]), "v0_requested_gib": _num(m[3]), "_v0": True}


def _h_v0_take(m: re.Match[str]) -> dict[str, Any]:
    weights, non_torch, peak, kv = (_num(m[i]) for i in range(1, 5))
    return {
        "profiled_non_kv_gib": round(weights + non_torch + peak, 2),
        "profiled_peak_gib": peak,
        "profiled_non_torch_gib": non_torch,
        "available_kv_cache_gib": kv,
        "available_kv_cache_decimals_fixed": True,
        "_v0": True,
    }


def _h_v0_results(m: re.Match[str]) -> dict[str, Any]:
    total, peak, non_torch, kv, util = _num(m[1]), _num(m[2]), _num(m[3]), _num(m[4]), _num(m[5])
    return {
        "_gpu_cuda_total": (total, "V0 'Memory profiling results: total_gpu_memory'"),
        "profiled_non_torch_gib": non_torch,
        "available_kv_cache_gib": kv,
        "available_kv_cache_decimals_fixed": True,
        "v0_gpu_memory_utilization": util,
        "_v0_peak_total": peak,
        "_v0": True,
    }


def _h_blocks(m: re.Match[str]) -> dict[str, Any]:
    return {"num_gpu_blocks": int(m[1])}


_READERS = (
    _Reader(
        "top-p & top-k sampling",
        lambda s: "top-p & top-k sampling" in s or "FlashInfer top-p/top-k sampling" in s,
        (
            (re.compile(r"Using FlashInfer for top-p & top-k sampling"), lambda m: {"flashinfer_sampler": True}),
            (
                re.compile(
                    r"Falling back to the PyTorch-native implementation of top-p & top-k sampling"
                    r"|FlashInfer top-p/top-k sampling (?:unavailable|disabled|is available but disabled)"
                ),
                lambda m: {"flashinfer_sampler": False},
            ),
        ),
        "Using FlashInfer for top-p & top-k sampling. | ... Falling back to the PyTorch-native implementation of top-p & top-k sampling ...",
    ),
    _Reader(
        "Model loading took",
        lambda s: "Model loading took" in s or "Loading model weights took" in s,
        ((re.compile(rf"(?:Model loading took|Loading model weights took) {_N} ?(GiB|GB)\b( memory)?(?: and {_N} ?seconds)?"), _h_model_loading),),
        "Model loading took <GiB> GiB [memory and <seconds> seconds]",
        "load",
    ),
    _Reader(
        "Available KV cache memory",
        lambda s: "Available KV cache memory:" in s,
        ((re.compile(rf"Available KV cache memory: {_N} ?GiB"), _h_available),),
        "Available KV cache memory: <GiB> GiB",
        "kv",
    ),
    _Reader(
        "GPU KV cache size",
        lambda s: " KV cache size:" in s or s.lstrip(" `>").startswith("KV cache size:"),
        ((re.compile(rf"(\S+(?: \+ host)?) KV cache size: {_I} tokens(, Maximum concurrency for (?:{_I} tokens per request: {_N}x)?)?"), _h_capacity),),
        "GPU KV cache size: <tokens> tokens[, Maximum concurrency for <len> tokens per request: <x>x]",
        "kv",
    ),
    _Reader(
        "Maximum concurrency",
        lambda s: "Maximum concurrency for" in s and "tokens, Maximum concurrency" not in s,
        ((re.compile(rf"Maximum concurrency for {_I} tokens per request: {_N}x"), _h_concurrency),),
        "Maximum concurrency for <len> tokens per request: <x>x",
        "kv",
    ),
    _Reader(
        "Encoder cache will be initialized",
        lambda s: "Encoder cache will be initialized with a budget" in s,
        ((re.compile(r"Encoder cache will be initialized with a budget of (\d+) tokens, and profiled with (\d+) (\S+) items"), _h_encoder),),
        "Encoder cache will be initialized with a budget of <N> tokens, and profiled with <N> <modality> items of the maximum feature size.",
    ),
    _Reader(
        "CUDA graph pool memory",
        lambda s: "CUDA graph pool memory:" in s,
        ((re.compile(rf"CUDA graph pool memory: {_N} GiB \(actual\), {_N} GiB \(estimated\)(?:, difference: -?\d+(?:\.\d+)? GiB \({_N}%\))?"), _h_pool),),
        "CUDA graph pool memory: <GiB> GiB (actual), <GiB> GiB (estimated)[, difference: ...]",
    ),
    _Reader(
        "Estimated CUDA graph memory",
        lambda s: re.search(r"Estimated (?:MRV2 )?CUDA graph memory:", s) is not None,
        ((re.compile(rf"Estimated (?:MRV2 )?CUDA graph memory: {_N} GiB total"), lambda m: {"cudagraph_estimated_gib": _num(m[1])}),),
        "Estimated CUDA graph memory: <GiB> GiB total",
    ),
    _Reader(
        "Profiling CUDA graph memory",
        lambda s: "Profiling CUDA graph memory:" in s,
        ((re.compile(r"Profiling CUDA graph memory: (?:(?:PIECEWISE|FULL|ENCODER)=\d+ \(largest=\d+\)(?:, )?)+"), _h_profile_counts),),
        "Profiling CUDA graph memory: PIECEWISE=<n> (largest=<tokens>), FULL=<n> (largest=<tokens>)",
    ),
    _Reader(
        "CUDA graph memory profiling is enabled",
        lambda s: "without CUDA graph memory profiling" in s or ("CUDA graph memory" in s and "--gpu-memory-utilization from" in s),
        (
            (re.compile(rf"--gpu-memory-utilization={_N} is equivalent to --gpu-memory-utilization={_N} without CUDA graph memory profiling"), _h_equivalent),
            (re.compile(rf"--gpu-memory-utilization from {_N} to {_N}"), _h_from_to),
        ),
        "The current --gpu-memory-utilization=<u> is equivalent to --gpu-memory-utilization=<u> without CUDA graph memory profiling",
    ),
    _Reader(
        "Graph capturing finished",
        lambda s: "Graph capturing finished in" in s,
        ((re.compile(rf"Graph capturing finished in (\d+) secs?, took {_N} GiB"), lambda m: {"graph_capture_seconds": int(m[1]), "graph_capture_gib": _num(m[2])}),),
        "Graph capturing finished in <secs> secs, took <GiB> GiB",
    ),
    _Reader(
        "reserved ... for KV Cache",
        lambda s: "as specified by kv_cache_memory_bytes" in s,
        ((re.compile(rf"Initial free memory {_N} GiB, reserved {_N} ?GiB memory for KV Cache"), _h_reserved),),
        "Initial free memory <GiB> GiB, reserved <GiB> GiB memory for KV Cache as specified by kv_cache_memory_bytes config ...",
        "kv",
    ),
    _Reader(
        "Memory profiling takes",
        lambda s: "Total non KV cache memory:" in s,
        (
            (
                re.compile(
                    rf"Total non KV cache memory: {_N} ?GiB; torch peak memory increase: {_N} ?GiB; non-torch forward increase memory: {_N} ?GiB; weights memory: {_N} ?GiB"
                ),
                _h_profiling_v1,
            ),
        ),
        "Memory profiling takes <s> seconds. Total non KV cache memory: <GiB>GiB; torch peak memory increase: ...; weights memory: <GiB>GiB.",
    ),
    _Reader(
        "total_gpu_memory x gpu_memory_utilization",
        lambda s: "the current vLLM instance can use total_gpu_memory" in s,
        ((re.compile(rf"total_gpu_memory \({_N} ?GiB\) x gpu_memory_utilization \({_N}\) = {_N} ?GiB"), _h_v0_budget),),
        "the current vLLM instance can use total_gpu_memory (<GiB>GiB) x gpu_memory_utilization (<u>) = <GiB>GiB",
    ),
    _Reader(
        "the rest of the memory reserved for KV Cache",
        lambda s: "the rest of the memory reserved for KV Cache" in s,
        (
            (
                re.compile(
                    rf"model weights take {_N} ?GiB; non_torch_memory takes {_N} ?GiB; PyTorch activation peak memory takes {_N} ?GiB; "
                    rf"the rest of the memory reserved for KV Cache is {_N} ?GiB"
                ),
                _h_v0_take,
            ),
        ),
        "model weights take <GiB>GiB; non_torch_memory takes <GiB>GiB; PyTorch activation peak memory takes <GiB>GiB; the rest ... is <GiB>GiB.",
        "kv",
    ),
    _Reader(
        "Memory profiling results",
        lambda s: "Memory profiling results:" in s,
        (
            (
                re.compile(
                    rf"total_gpu_memory={_N} ?GiB .*?peak_torch_memory={_N} ?GiB .*?non_torch_memory={_N} ?GiB kv_cache_size={_N} ?GiB gpu_memory_utilization={_N}"
                ),
                _h_v0_results,
            ),
        ),
        "Memory profiling results: total_gpu_memory=<GiB>GiB ... kv_cache_size=<GiB>GiB gpu_memory_utilization=<u>",
        "kv",
    ),
    _Reader(
        "GPU blocks",
        lambda s: bool(re.search(r"# (?:GPU|cuda) blocks:|num_gpu_blocks is:", s)),
        ((re.compile(r"(?:# (?:GPU|cuda) blocks:|num_gpu_blocks is:) (\d+)"), _h_blocks),),
        "# GPU blocks: <N>",
        "kv",
    ),
)

# --- the Free memory line, read in the pieces users paste ----------------------------------------------------

_FREE_HEAD = re.compile(rf"Free memory on device (?:(\S+) )?\({_N}/{_N} GiB\) on startup")
_FREE_DESIRED = re.compile(rf"(is less than )?(?:desired GPU memory utilization|Desired GPU memory utilization is|the engine's budget after excluding external process's weights) \({_N}, {_N} GiB\)")
_USAGE = {
    "consumed_gib": re.compile(rf"{_N} GiB for consumed memory"),
    "weights_gib": re.compile(rf"{_N} GiB for weight\b"),
    "peak_activation_gib": re.compile(rf"{_N} GiB for peak activation"),
    "non_torch_gib": re.compile(rf"{_N} GiB for non-torch memory"),
    "cudagraph_gib": re.compile(rf"{_N} GiB for CUDAGraph memory"),
}
_SUGGEST_REQUESTED = re.compile(r"`--kv-cache-memory=(-?\d+)`(?: \([^)]*\))? to fit into requested memory")
_SUGGEST_GPU = re.compile(r"`--kv-cache-memory=(-?\d+)`(?: \([^)]*\))? to fully utilize gpu memory")
_IN_USE = re.compile(rf"Current kv cache memory in use is {_N} ?(GiB|bytes)")


def _free_pieces(line: str) -> dict[str, Any]:
    """The pieces of a `Free memory on device ...` report this line carries ({} when none)."""
    out: dict[str, Any] = {}
    if (m := _FREE_HEAD.search(line)) is not None:
        out.update(device=m[1], free_gib=_num(m[2]), total_gib=_num(m[3]))
    if (m := _FREE_DESIRED.search(line)) is not None and ("Free memory" in line or "Desired GPU memory utilization" in line):
        out.update(gpu_memory_utilization=_num(m[2]), requested_gib=_num(m[3]), startup_error=bool(m[1]))
    for key, pattern in _USAGE.items():
        if (m := pattern.search(line)) is not None:
            out[key] = _num(m[1])
    if (m := _SUGGEST_REQUESTED.search(line)) is not None:
        out["kv_cache_memory_to_requested_bytes"] = int(m[1])
    if (m := _SUGGEST_GPU.search(line)) is not None:
        out["kv_cache_memory_to_gpu_bytes"] = int(m[1])
    if (m := _IN_USE.search(line)) is not None:
        out["kv_cache_in_use_gib"] = _num(m[1]) if m[2] == "GiB" else round(_num(m[1]) / 2**30, 2)
    return out


# --- knobs, version and model ------------------------------------------------------------------------------

_ENGINE = re.compile(r"Initializing an? (?:V1 |V0 )?LLM engine \(v([^)\s]+)\) with config: (.*)$")
_SERVER_VERSION = re.compile(r"vLLM (?:API )?server version (\S+?),?(?: serving model (\S+))?\s*$")
_LOGO_VERSION = re.compile(r"[█▀▄]\s+version\s+(\d+\.\d+\S*)\s*$")
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})")
_MAX_MODEL_LEN = re.compile(r"Using max model len (\d+)")
_CHUNKED = re.compile(r"max_num_batched_tokens=(\d+)")
_CONFIG_FIELDS = {
    "model": re.compile(r"(?:^|, )model='([^']*)'"),
    "max_seq_len": re.compile(r"(?:^|, )max_seq_len=(\d+)"),
    "dtype": re.compile(r"(?:^|, )dtype=torch\.(\w+)"),
    "tensor_parallel_size": re.compile(r"(?:^|, )tensor_parallel_size=(\d+)"),
    "enforce_eager": re.compile(r"(?:^|, )enforce_eager=(True|False)"),
    "kv_cache_dtype": re.compile(r"(?:^|, )kv_cache_dtype=(\w+)"),
    "quantization": re.compile(r"(?:^|, )quantization=(\w+)"),
    # what the engine ran with: vLLM turns it off where unsupported (hybrid models before 0.11: "Disabling prefix caching")
    "enable_prefix_caching": re.compile(r"(?:^|, )enable_prefix_caching=(True|False)"),
}
# non-default args keys capacity plans with (vLLM's names are capacity's)
_KNOB_KEYS = (
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enforce_eager",
    "dtype",
    "tensor_parallel_size",
    "kv_cache_dtype",
    "block_size",
    "limit_mm_per_prompt",
    "mm_processor_kwargs",
    "kv_cache_memory_bytes",
    "num_speculative_tokens",
    "quantization",
    "enable_prefix_caching",
    "language_model_only",
)


# the args Namespace of 0.6-0.8's api_server (every argument, defaults included): knobs read when they differ from
# the defaults of those versions (None for the length and batch knobs, 0.9, 'auto', 1, False)
_NAMESPACE = re.compile(r"args: Namespace\((.*)\)\s*$")
_NAMESPACE_DEFAULTS: dict[str, Any] = {
    "gpu_memory_utilization": 0.9,
    "enforce_eager": False,
    "dtype": "auto",
    "tensor_parallel_size": 1,
    "kv_cache_dtype": "auto",
}


def _namespace_args(text: str) -> dict[str, Any]:
    """The knobs of an `args: Namespace(...)` line that differ from the defaults (unreadable values skipped)."""
    out: dict[str, Any] = {}
    for key in (*_KNOB_KEYS, "model"):
        m = re.search(rf"(?:^|, ){key}=('[^']*'|[^,()]*)", text)
        if m is None:
            continue
        try:
            value = ast.literal_eval(m[1])
        except (ValueError, SyntaxError):
            continue
        if value is None or value == _NAMESPACE_DEFAULTS.get(key, object()):
            continue
        out[key] = value
    return out


def _non_default_args(text: str) -> dict[str, Any]:
    """The knobs of vLLM's `non-default args: {...}` line (a Python dict repr; enum reprs made strings first)."""
    cleaned = re.sub(r"<[^<>]*>", "None", text)
    try:
        data = ast.literal_eval(cleaned)
    except (ValueError, SyntaxError):
        return {}
    if not isinstance(data, dict):
        return {}
    out = {k: data[k] for k in _KNOB_KEYS if k in data}
    if "model" in data:
        out["model"] = data["model"]
    return out


# a `vllm serve MODEL --flag value ...` command pasted above its log (study notes keep only a few log lines under it)
_SERVE_COMMAND = re.compile(r"(?:^|[\s$>#])vllm serve\s+(\S.*)$")
_SERVE_FLAGS = {"--" + key.replace("_", "-"): key for key in _KNOB_KEYS}
_SERVE_SWITCHES = {"--enforce-eager": ("enforce_eager", True), "--enable-prefix-caching": ("enable_prefix_caching", True),
                   "--language-model-only": ("language_model_only", True),
                   "--no-enable-prefix-caching": ("enable_prefix_caching", False)}


def _serve_value(key: str, text: str) -> Any:
    """A flag's value as vLLM's argparse would read it (numbers, JSON for --limit-mm-per-prompt, else the string)."""
    if key in ("limit_mm_per_prompt", "mm_processor_kwargs"):
        return json.loads(text)
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _serve_command_args(text: str) -> dict[str, Any]:
    """The model and knobs of a pasted `vllm serve` command (flags capacity plans with; others and unreadable ones skipped)."""
    try:
        words = shlex.split(text)
    except ValueError:
        return {}
    out: dict[str, Any] = {}
    if words and not words[0].startswith("-"):
        out["model"] = words[0]
    for i, word in enumerate(words):
        flag, _, inline = word.partition("=")
        if flag in _SERVE_SWITCHES:
            key, value = _SERVE_SWITCHES[flag]
            out[key] = value
        elif flag in _SERVE_FLAGS and (inline or i + 1 < len(words)):
            try:
                out[_SERVE_FLAGS[flag]] = _serve_value(_SERVE_FLAGS[flag], inline or words[i + 1])
            except ValueError:
                continue
    return out


# --- the GPU -------------------------------------------------------------------------------------------------

_OOM_TOTAL = re.compile(rf"(?:total capacity of {_N} GiB|{_N} GiB total capacity)")
_SMI_NAME = re.compile(r"\|\s*\d+\s+((?:NVIDIA|Tesla|Quadro|AMD)[^|]*?)\s+(?:On|Off)\s*\|")
_SMI_MEMORY = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_SMI_QUERY = re.compile(r"((?:NVIDIA|Tesla)[^,]+),\s*[\d.]+,\s*\d+ MiB,\s*\d+ MiB,\s*(\d+) MiB")


def gpu_evidence(lines: list[str]) -> GpuEvidence:
    """What the text says about the GPU (first occurrence of each kind)."""
    cuda_total = smi_name = smi_total = None
    cuda_basis = smi_basis = ""
    for lineno, line in enumerate(lines, start=1):
        if cuda_total is None:
            if (m := _FREE_HEAD.search(line)) is not None:
                cuda_total, cuda_basis = _num(m[3]), f"line {lineno}: 'Free memory on device (.../{m[3]} GiB)'"
            elif (m := re.search(rf"total_gpu_memory[ =(]+{_N} ?GiB", line)) is not None:
                cuda_total, cuda_basis = _num(m[1]), f"line {lineno}: V0 'total_gpu_memory {m[1]} GiB'"
            elif (m := _OOM_TOTAL.search(line)) is not None:
                value = m[1] or m[2]
                cuda_total, cuda_basis = _num(value), f"line {lineno}: CUDA out of memory, 'total capacity of {value} GiB'"
        if smi_name is None:
            if (m := _SMI_QUERY.search(line)) is not None:
                smi_name, smi_total, smi_basis = m[1].strip(), int(m[2]), f"line {lineno}: nvidia-smi --query-gpu ({m[1].strip()}, {m[2]} MiB)"
            elif (m := _SMI_NAME.search(line)) is not None:
                smi_name, smi_basis = m[1].strip(), f"line {lineno}: nvidia-smi table row '{m[1].strip()}'"
                for j in range(lineno, min(lineno + 2, len(lines))):
                    if (mm := _SMI_MEMORY.search(lines[j])) is not None:
                        smi_total = int(mm[2])
                        smi_basis += f", {mm[2]}MiB total"
                        break
    return GpuEvidence(cuda_total, cuda_basis, smi_name, smi_total, smi_basis)


# --- the version -------------------------------------------------------------------------------------------


def _guess_version(facts: VllmLogFacts, values: dict[str, Any]) -> tuple[str, str]:
    if facts.version is not None:
        return facts.version, "stated in the log"
    if facts.engine == "V0":
        return "V0 engine", "the V0 engine's worker lines ('Memory profiling results' / 'the rest of the memory reserved for KV Cache')"
    if facts.capacity_format == "one-line":
        return "0.33", "one-line 'GPU KV cache size: N tokens, Maximum concurrency for ...' (0.33's format; 0.11-0.28 print two lines)"
    if facts.model_loading_gib_decimals == 4 or facts.available_kv_cache_decimals_fixed:
        return "0.11", "GiB printed with %.4f / %.2f ('Model loading took 2.8758 GiB and', 'Available KV cache memory: 121.50 GiB'), as 0.11 does"
    if facts.capacity_format == "two-line":
        if facts.cudagraph_estimated_gib is not None:
            return "0.20", "two-line KV cache size with a CUDA-graph memory estimate (0.20; 0.15 had no estimate)"
        return "0.15-0.20", "two-line KV cache size, GiB printed by format_gib (0.15 to 0.20)"
    if values.get("_ml_memory_word") is False:
        return "0.15-0.20", "'Model loading took X GiB and' of Model Runner V2 in 0.15-0.20"
    return "unknown", "no line whose format tells the version"


def with_stated_version(facts: VllmLogFacts, version: str, basis: str) -> VllmLogFacts:
    """The startup with its vLLM version given from outside the text (`--vllm-version`, a benchmark sidecar), so that
    every reading of the version's rules (capacity.vllm.versions.log_semantics) takes it. BadInput when it is not a
    version, or when the log states another release line."""
    from capacity.vllm.versions import version_tuple

    given = version_tuple(version)
    if given is None:
        raise BadInput(f"{basis} {version!r}: not a vLLM version; give one such as 0.28.0")
    if facts.version is not None and version_tuple(facts.version) not in (None, given):
        raise BadInput(f"{basis} {version}: {facts.source} states vLLM {facts.version}; drop {basis} or check which log this is")
    return replace(facts, version=version, version_guess=version, version_basis=basis)


def cross_attention_rule(facts: VllmLogFacts) -> str | None:
    """'encoder length' (0.11 and before sized cross-attention by the encoder's length), 'max_num_batched_tokens'
    (0.15+), or None when the version is not known."""
    from capacity.vllm.versions import log_semantics

    sem = log_semantics(facts)
    return None if sem is None else sem.cross_attention_per_request


# --- the parser ------------------------------------------------------------------------------------------------


@dataclass
class _Startup:
    """What one startup has read so far (mutable while parsing)."""

    first_line: int
    values: dict[str, Any] = field(default_factory=dict)
    first: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    repeats: dict[str, list[str]] = field(default_factory=dict)
    free: dict[str, Any] = field(default_factory=dict)
    free_line: int | None = None
    version: str | None = None
    model: str | None = None
    max_seq_len: int | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    engine_cfg: dict[str, Any] = field(default_factory=dict)
    mnbt: int | None = None
    compile_lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    last_line: int = 0
    has_kv: bool = False
    has_load: bool = False

    @property
    def empty(self) -> bool:
        return not self.first and not self.free


def _figures(found: dict[str, Any]) -> dict[str, Any]:
    """What must agree when a key line repeats (ranks, restarts): the figures, not the timings."""
    return {k: v for k, v in found.items() if not k.endswith("seconds")}


def _read_banner(cur: _Startup, line: str) -> bool:
    """Version, model and knobs of the engine's banner lines; True when the line is one (a startup begins)."""
    if (m := _ENGINE.search(line)) is not None:
        cur.version = cur.version or m[1]
        config = m[2]
        for key, pattern in _CONFIG_FIELDS.items():
            if (cm := pattern.search(config)) is not None:
                value: Any = cm[1]
                if key in ("max_seq_len", "tensor_parallel_size"):
                    value = int(value)
                elif key in ("enforce_eager", "enable_prefix_caching"):
                    value = value == "True"
                if key == "model":
                    cur.model = cur.model or value
                elif key == "max_seq_len":
                    cur.max_seq_len = cur.max_seq_len or value
                else:
                    cur.engine_cfg.setdefault(key, value)
        return True
    if (m := _SERVER_VERSION.search(line)) is not None:
        cur.version = cur.version or m[1]
        cur.model = cur.model or m[2]
        return True
    if (m := _LOGO_VERSION.search(line)) is not None:
        cur.version = cur.version or m[1]
        return True
    if (m := _NON_DEFAULT.search(line)) is not None or (m := _NAMESPACE.search(line)) is not None or (m := _SERVE_COMMAND.search(line)) is not None:
        args = _non_default_args(m[1]) if m.re is _NON_DEFAULT else _namespace_args(m[1]) if m.re is _NAMESPACE else _serve_command_args(m[1])
        model = args.pop("model", None)
        cur.model = cur.model or (str(model) if model else None)
        for key, value in args.items():
            cur.knobs[key] = value
        return True
    return False


def _finish(cur: _Startup, source: str, index: int, gpu: GpuEvidence, inherited_version: str | None) -> VllmLogFacts:
    values = cur.values
    notes = [
        f"'{key}' appears again with other figures (lines {', '.join(lines)}; several ranks or restarts in one log): line {cur.first[key][0]} is used"
        for key, lines in cur.repeats.items()
    ]
    free = None
    if "free_gib" in cur.free:
        f = cur.free
        free = FreeMemoryReport(
            free_gib=f["free_gib"],
            total_gib=f["total_gib"],
            gpu_memory_utilization=f.get("gpu_memory_utilization"),
            requested_gib=f.get("requested_gib"),
            startup_error=bool(f.get("startup_error", False)),
            device=f.get("device"),
            consumed_gib=f.get("consumed_gib"),
            weights_gib=f.get("weights_gib"),
            non_torch_gib=f.get("non_torch_gib"),
            peak_activation_gib=f.get("peak_activation_gib"),
            cudagraph_gib=f.get("cudagraph_gib"),
            kv_cache_memory_to_requested_bytes=f.get("kv_cache_memory_to_requested_bytes"),
            kv_cache_memory_to_gpu_bytes=f.get("kv_cache_memory_to_gpu_bytes"),
            kv_cache_in_use_gib=f.get("kv_cache_in_use_gib"),
        )
    elif cur.free:
        notes.append("pieces of a 'Free memory on device' report without its head '(free/total GiB)': not used")
    if "model_loading_gib" not in values and "model_loading_gib_from_profile" in values:
        values["model_loading_gib"] = values["model_loading_gib_from_profile"]
    if values.get("_v0_peak_total") is not None and values.get("model_loading_gib") is not None:
        values["profiled_peak_gib"] = values["_v0_peak_total"] - values["model_loading_gib"]
    fields = {k: v for k, v in values.items() if not k.startswith("_") and k != "model_loading_gib_from_profile"}
    version = cur.version or inherited_version
    if cur.version is None and inherited_version is not None:
        notes.append(f"version {inherited_version} taken from an earlier startup in the same text")
    facts = VllmLogFacts(
        source=source,
        version=version,
        engine="V0" if values.get("_v0") else None,
        model=cur.model,
        max_seq_len=cur.max_seq_len or cur.knobs.get("max_model_len"),
        free_memory=free,
        log_knobs=dict(cur.knobs),
        engine_config=dict(cur.engine_cfg),
        effective_max_num_batched_tokens=cur.mnbt,
        compile_cache=compile_cache_evidence(cur.compile_lines),
        gpu=gpu,
        index=index,
        first_line=cur.first_line,
        last_line=cur.last_line,
        lines={key: lineno for key, (lineno, _) in cur.first.items()} | ({"Free memory on device": cur.free_line} if cur.free_line else {}),
        notes=tuple(notes),
        warnings=tuple(cur.warnings),
        **fields,
    )
    guess, basis = _guess_version(facts, values)
    return replace(facts, version_guess=guess, version_basis=basis)


def _split_lines(text: str) -> list[str]:
    return [_ANSI.sub("", raw).replace("\r", "") for raw in re.split(r"\r\n|\n|\r", text)]


def parse_vllm_startups(text: str, source: str = "log") -> tuple[VllmLogFacts, ...]:
    """Every vLLM startup in a pasted text, in order. BadInput only when no startup figure can be read at all."""
    lines = _split_lines(text)
    if lines and lines[-1] == "":
        lines.pop()
    gpu = gpu_evidence(lines)
    done: list[_Startup] = []
    cur = _Startup(first_line=1)
    all_warnings: list[str] = []
    for lineno, line in enumerate(lines, start=1):
        found_any = False
        # a model load or an engine banner after the KV figures of the current startup begins the next one
        reader_hits = [r for r in _READERS if r.claims(line)]
        reloads = any(r.stage == "load" for r in reader_hits) and cur.has_load
        banner = bool(
            _ENGINE.search(line) or _NON_DEFAULT.search(line) or _LOGO_VERSION.search(line) or _SERVER_VERSION.search(line) or _SERVE_COMMAND.search(line)
        )
        if cur.has_kv and (reloads or banner):
            done.append(cur)
            cur = _Startup(first_line=lineno)
        if _read_banner(cur, line):
            found_any = True
        if (m := _MAX_MODEL_LEN.search(line)) is not None:
            cur.max_seq_len = cur.max_seq_len or int(m[1])
        if "Chunked prefill is enabled" in line and (m := _CHUNKED.search(line)) is not None:
            cur.mnbt = int(m[1])
        if is_compile_line(line):
            cur.compile_lines.append(line)
        for reader in reader_hits:
            found = None
            for pattern, handler in reader.formats:
                if (m := pattern.search(line)) is not None:
                    found = handler(m)
                    break
            if found is None:
                warning = f"{source}:{lineno}: malformed vLLM log line: expected '{reader.expected}', got '{_show(line)}'"
                cur.warnings.append(warning)
                all_warnings.append(warning)
                continue
            found_any = True
            cut = found.pop("_cut", None)
            if cut is not None:
                warning = f"{source}:{lineno}: line cut short: {cut}"
                cur.warnings.append(warning)
                all_warnings.append(warning)
            if reader.stage == "kv":
                cur.has_kv = True
            if reader.stage == "load":
                cur.has_load = True
            gpu_total = found.pop("_gpu_cuda_total", None)
            if gpu_total is not None and gpu.cuda_total_gib is None:
                gpu = replace(gpu, cuda_total_gib=gpu_total[0], cuda_total_basis=f"line {lineno}: {gpu_total[1]}")
            if reader.key not in cur.first:
                cur.first[reader.key] = (lineno, found)
                cur.values.update({k: v for k, v in found.items() if not (k in cur.values and k.startswith("profiled_"))})
            elif _figures(found) != _figures(cur.first[reader.key][1]):
                cur.repeats.setdefault(reader.key, []).append(str(lineno))
        pieces = _free_pieces(line)
        if pieces:
            found_any = True
            if "free_gib" in pieces and cur.free_line is None:
                cur.free_line = lineno
            for key, value in pieces.items():
                cur.free.setdefault(key, value)
            if "free_gib" in pieces:
                cur.has_kv = True
        elif "Free memory on device" in line:
            warning = f"{source}:{lineno}: malformed vLLM log line: expected 'Free memory on device (<GiB>/<GiB> GiB) on startup ...', got '{_show(line)}'"
            cur.warnings.append(warning)
            all_warnings.append(warning)
        if found_any:
            cur.last_line = lineno
    done.append(cur)
    startups = [s for s in done if s.first or s.free]
    if not startups:
        if all_warnings:
            raise BadInput(f"{all_warnings[0]} (no other vLLM startup figure in {source})")
        names = ", ".join(f"'{k}'" for k in KEY_LINES)
        raise BadInput(f"{source} is not a vLLM startup log: none of its lines is one capacity reads ({names})")
    # warnings of lines before the first startup's figures belong to it
    stray = [w for s in done if not (s.first or s.free) for w in s.warnings]
    if stray:
        startups[0].warnings[:0] = stray
    out: list[VllmLogFacts] = []
    inherited: str | None = None
    for i, s in enumerate(startups, start=1):
        facts = _finish(s, source, i, gpu, inherited)
        inherited = facts.version or inherited
        out.append(facts)
    return tuple(out)


def parse_vllm_log(text: str, source: str = "log") -> VllmLogFacts:
    """The first vLLM startup of a text (see `parse_vllm_startups` for all); a note says when there are more."""
    startups = parse_vllm_startups(text, source)
    first = startups[0]
    if len(startups) > 1:
        first = replace(first, notes=(*first.notes, f"{len(startups)} startups in this text (lines {', '.join(str(s.first_line) for s in startups)}): the first is read"))
    return first


def read_log_text(path: Path) -> str:
    """The text of a log file; BadInput (one line) for a missing, unreadable, empty or binary file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file (give the vLLM log to reconcile)") from None
    except IsADirectoryError:
        raise BadInput(f"{path} is a directory, not a vLLM log file") from None
    except PermissionError:
        raise BadInput(f"{path}: permission denied") from None
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror or exc}") from None
    if not data.strip():
        raise BadInput(f"{path} is empty: give the log vLLM printed while starting (vllm serve ... 2>&1 | tee vllm.log)")
    text = data.decode("utf-8", errors="replace")
    if b"\x00" in data or text.count("\ufffd") > max(len(text) // 100, 0):
        raise BadInput(f"{path} is a binary file, not a vLLM text log (decompress it first if it is an archive)")
    return text


def load_vllm_log(path: Path) -> VllmLogFacts:
    """Read and parse a vLLM startup log file (its first startup)."""
    return parse_vllm_log(read_log_text(path), source=str(path))


def load_vllm_startups(path: Path) -> tuple[VllmLogFacts, ...]:
    """Read a vLLM log file and parse every startup in it."""
    return parse_vllm_startups(read_log_text(path), source=str(path))
