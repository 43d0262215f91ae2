"""Read the figures of a vLLM startup log line by line: one reader per message vLLM prints (V0 and 0.8 to 0.33).

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

The GPU's total comes from `Free memory on device (F/T GiB)`, V0's `total_gpu_memory`, a CUDA out-of-memory error
(`total capacity of T GiB`) or an nvidia-smi table / query (`gpu_evidence`).

Each format is searched anywhere in the line and ends where vLLM's figure ends: what follows (a cut line's rest, the
user's comment) is not read. A line claimed by a reader that no format reads is a warning (capacity/vllm/log_startups.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from capacity.vllm.log_facts import GpuEvidence

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_N = r"(-?\d+(?:\.\d+)?)"  # a decimal as vLLM prints it
_I = r"(\d{1,3}(?:,\d{3})+|\d+)"  # an integer, with or without thousands separators


def split_lines(text: str) -> list[str]:
    """The text's lines, without ANSI colours or carriage returns."""
    return [_ANSI.sub("", raw).replace("\r", "") for raw in re.split(r"\r\n|\n|\r", text)]


def _num(text: str) -> float:
    return float(text)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def shown(line: str) -> str:
    """The line as a warning quotes it (90 characters at most)."""
    line = line.strip()
    return line if len(line) <= 90 else line[:87] + "..."


# --- one reader per message: does the line carry it, the formats it is read with, what they set -------------


@dataclass(frozen=True)
class LineReader:
    """How one message vLLM prints is read: whether a line carries it, and the formats that read its figures."""

    key: str  # the message (for warnings and `lines`)
    claims: Callable[[str], bool]
    formats: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], dict[str, Any]]], ...]
    expected: str  # the format, for the warning
    stage: str = "other"  # "load" starts a startup; "kv" closes one


def _h_model_loading(m: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"model_loading_gib": _num(m[1]), "model_loading_gib_decimals": max(_decimals(m[1]), 2), "_ml_memory_word": bool(m[3])}
    if m[0].startswith("Loading model weights took"):  # V0's model_runner.load_model (0.4-0.10); 0.8+ V1 prints 'Model loading took'
        out["_v0_marker"] = "'Loading model weights took X GB' (the V0 engine's model runner)"
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
    out: dict[str, Any] = {"num_gpu_blocks": int(m[1])}
    if m[2] is not None:  # V0's executors (gpu_executor / distributed_gpu_executor / executor_base, 0.4-0.10)
        out["_v0_marker"] = "'# GPU blocks: N, # CPU blocks: M' (the V0 engine's executor)"
    return out


READERS = (
    LineReader(
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
    LineReader(
        "Model loading took",
        lambda s: "Model loading took" in s or "Loading model weights took" in s,
        ((re.compile(rf"(?:Model loading took|Loading model weights took) {_N} ?(GiB|GB)\b( memory)?(?: and {_N} ?seconds)?"), _h_model_loading),),
        "Model loading took <GiB> GiB [memory and <seconds> seconds]",
        "load",
    ),
    LineReader(
        "Available KV cache memory",
        lambda s: "Available KV cache memory:" in s,
        ((re.compile(rf"Available KV cache memory: {_N} ?GiB"), _h_available),),
        "Available KV cache memory: <GiB> GiB",
        "kv",
    ),
    LineReader(
        "GPU KV cache size",
        lambda s: " KV cache size:" in s or s.lstrip(" `>").startswith("KV cache size:"),
        ((re.compile(rf"(\S+(?: \+ host)?) KV cache size: {_I} tokens(, Maximum concurrency for (?:{_I} tokens per request: {_N}x)?)?"), _h_capacity),),
        "GPU KV cache size: <tokens> tokens[, Maximum concurrency for <len> tokens per request: <x>x]",
        "kv",
    ),
    LineReader(
        "Maximum concurrency",
        lambda s: "Maximum concurrency for" in s and "tokens, Maximum concurrency" not in s,
        ((re.compile(rf"Maximum concurrency for {_I} tokens per request: {_N}x"), _h_concurrency),),
        "Maximum concurrency for <len> tokens per request: <x>x",
        "kv",
    ),
    LineReader(
        "Encoder cache will be initialized",
        lambda s: "Encoder cache will be initialized with a budget" in s,
        ((re.compile(r"Encoder cache will be initialized with a budget of (\d+) tokens, and profiled with (\d+) (\S+) items"), _h_encoder),),
        "Encoder cache will be initialized with a budget of <N> tokens, and profiled with <N> <modality> items of the maximum feature size.",
    ),
    LineReader(
        "CUDA graph pool memory",
        lambda s: "CUDA graph pool memory:" in s,
        ((re.compile(rf"CUDA graph pool memory: {_N} GiB \(actual\), {_N} GiB \(estimated\)(?:, difference: -?\d+(?:\.\d+)? GiB \({_N}%\))?"), _h_pool),),
        "CUDA graph pool memory: <GiB> GiB (actual), <GiB> GiB (estimated)[, difference: ...]",
    ),
    LineReader(
        "Estimated CUDA graph memory",
        lambda s: re.search(r"Estimated (?:MRV2 )?CUDA graph memory:", s) is not None,
        ((re.compile(rf"Estimated (?:MRV2 )?CUDA graph memory: {_N} GiB total"), lambda m: {"cudagraph_estimated_gib": _num(m[1])}),),
        "Estimated CUDA graph memory: <GiB> GiB total",
    ),
    LineReader(
        "Profiling CUDA graph memory",
        lambda s: "Profiling CUDA graph memory:" in s,
        ((re.compile(r"Profiling CUDA graph memory: (?:(?:PIECEWISE|FULL|ENCODER)=\d+ \(largest=\d+\)(?:, )?)+"), _h_profile_counts),),
        "Profiling CUDA graph memory: PIECEWISE=<n> (largest=<tokens>), FULL=<n> (largest=<tokens>)",
    ),
    LineReader(
        "CUDA graph memory profiling is enabled",
        lambda s: "without CUDA graph memory profiling" in s or ("CUDA graph memory" in s and "--gpu-memory-utilization from" in s),
        (
            (re.compile(rf"--gpu-memory-utilization={_N} is equivalent to --gpu-memory-utilization={_N} without CUDA graph memory profiling"), _h_equivalent),
            (re.compile(rf"--gpu-memory-utilization from {_N} to {_N}"), _h_from_to),
        ),
        "The current --gpu-memory-utilization=<u> is equivalent to --gpu-memory-utilization=<u> without CUDA graph memory profiling",
    ),
    LineReader(
        "Graph capturing finished",
        lambda s: "Graph capturing finished in" in s,
        ((re.compile(rf"Graph capturing finished in (\d+) secs?, took {_N} GiB"), lambda m: {"graph_capture_seconds": int(m[1]), "graph_capture_gib": _num(m[2])}),),
        "Graph capturing finished in <secs> secs, took <GiB> GiB",
    ),
    LineReader(
        "reserved ... for KV Cache",
        lambda s: "as specified by kv_cache_memory_bytes" in s,
        ((re.compile(rf"Initial free memory {_N} GiB, reserved {_N} ?GiB memory for KV Cache"), _h_reserved),),
        "Initial free memory <GiB> GiB, reserved <GiB> GiB memory for KV Cache as specified by kv_cache_memory_bytes config ...",
        "kv",
    ),
    LineReader(
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
    LineReader(
        "total_gpu_memory x gpu_memory_utilization",
        lambda s: "the current vLLM instance can use total_gpu_memory" in s,
        ((re.compile(rf"total_gpu_memory \({_N} ?GiB\) x gpu_memory_utilization \({_N}\) = {_N} ?GiB"), _h_v0_budget),),
        "the current vLLM instance can use total_gpu_memory (<GiB>GiB) x gpu_memory_utilization (<u>) = <GiB>GiB",
    ),
    LineReader(
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
    LineReader(
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
    LineReader(
        "GPU blocks",
        lambda s: bool(re.search(r"# (?:GPU|cuda) blocks:|num_gpu_blocks is:", s)),
        ((re.compile(r"(?:# (?:GPU|cuda) blocks:|num_gpu_blocks is:) (\d+)(,? # CPU blocks: \d+)?"), _h_blocks),),
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


def free_pieces(line: str) -> dict[str, Any]:
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


