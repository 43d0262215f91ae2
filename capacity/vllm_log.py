"""Read a vLLM startup log (0.11 to 0.33) into `VllmLogFacts`: the figures vLLM printed about its memory budget.

Pure Python, no torch. The formats are vLLM's own log strings (read from the 0.11.0, 0.15.0, 0.20.0 and 0.33.0
wheels); every line may carry vLLM's prefixes, which are ignored:
`(EngineCore_DP0 pid=123) INFO 11-30 08:12:01 [gpu_worker.py:773] <message>` (ANSI colours stripped).

| message (key) | versions | format |
|---|---|---|
| Model loading took | 0.11 | `Model loading took %.4f GiB and %.6f seconds` |
| | 0.15-0.33 | `Model loading took %s GiB memory and %.6f seconds` (MRV2 0.15/0.20: `... %s GiB and ...`) |
| Available KV cache memory | 0.11 | `Available KV cache memory: %.2f GiB` |
| | 0.15-0.33 | `Available KV cache memory: %s GiB` (format_gib: `round(b / 2**30, 2)`, so `125.0`) |
| KV cache size | 0.11-0.20 | `GPU KV cache size: %s tokens` and, on its own line, `Maximum concurrency for %s tokens per request: %.2fx` |
| | 0.33 | `GPU KV cache size: {tokens:,} tokens, Maximum concurrency for {max_model_len:,} tokens per request: %.2fx` |
| Encoder cache | 0.11-0.33 | `Encoder cache will be initialized with a budget of %s tokens, and profiled with %s %s items of the maximum feature size.` |
| CUDA graph pool memory | 0.20-0.33 | `CUDA graph pool memory: %s GiB (actual), %s GiB (estimated), difference: %s GiB (%.1f%%).` |
| Estimated CUDA graph memory | 0.20-0.33 (V1 runner) | `Estimated CUDA graph memory: %.2f GiB total` |
| Graph capturing finished | 0.11-0.33 | `Graph capturing finished in %.0f secs, took %.2f GiB` |
| Free memory on device | 0.11-0.20 (DEBUG) | `... Actual usage is W GiB for weight, P GiB for peak activation, N GiB for non-torch memory, and G GiB for CUDAGraph memory. ...` |
| | 0.33 (INFO) | `... Actual usage is C GiB for consumed memory (weights + non-torch), P GiB for peak activation, and G GiB for CUDAGraph memory. ...` |
| | startup error | `Free memory on device [cuda:0 ](F/T GiB) on startup is less than desired GPU memory utilization (U, R GiB). ...` |
| kv_cache_memory_bytes | 0.11-0.33 | `Initial free memory F GiB, reserved K GiB memory for KV Cache as specified by kv_cache_memory_bytes config ...` |

A line that carries one of these messages but not in its format (a number that is not one, a cut-off line) is
an error naming the line; a text with none of them is not a vLLM startup log.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from capacity.errors import BadInput

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
_NUM = r"(-?\d+(?:\.\d+)?)"
_INT = r"(\d{1,3}(?:,\d{3})+|\d+)"

_MODEL_LOADING = re.compile(rf"Model loading took {_NUM} GiB( memory)? and {_NUM} seconds\s*$")
_AVAILABLE = re.compile(rf"Available KV cache memory: {_NUM} GiB\s*$")
_CAPACITY_ONE_LINE = re.compile(rf"(\S+(?: \+ host)?) KV cache size: {_INT} tokens, Maximum concurrency for {_INT} tokens per request: {_NUM}x\s*$")
_CAPACITY_TOKENS = re.compile(rf"(\S+) KV cache size: {_INT} tokens\s*$")
_CONCURRENCY = re.compile(rf"Maximum concurrency for {_INT} tokens per request: {_NUM}x\s*$")
_ENCODER = re.compile(r"Encoder cache will be initialized with a budget of (\d+) tokens, and profiled with (\d+) (\S+) items of the maximum feature size\.\s*$")
_POOL = re.compile(rf"CUDA graph pool memory: {_NUM} GiB \(actual\), {_NUM} GiB \(estimated\), difference: {_NUM} GiB \({_NUM}%\)\.\s*$")
_ESTIMATED = re.compile(rf"Estimated CUDA graph memory: {_NUM} GiB total\s*$")
_CAPTURE = re.compile(rf"Graph capturing finished in (\d+) secs, took {_NUM} GiB\s*$")
_RESERVED = re.compile(rf"Initial free memory {_NUM} GiB, reserved {_NUM} ?GiB memory for KV Cache as specified by kv_cache_memory_bytes config")
_FREE_HEAD = rf"Free memory on device (?:(\S+) )?\({_NUM}/{_NUM} GiB\) on startup"
_FREE_ERROR = re.compile(
    _FREE_HEAD + rf" is less than (?:desired GPU memory utilization|the engine's budget after excluding external process's weights) \({_NUM}, {_NUM} GiB\)"
)
_FREE_REPORT = re.compile(
    _FREE_HEAD + rf"\. Desired GPU memory utilization is \({_NUM}, {_NUM} GiB\)\. Actual usage is "
    rf"(?:{_NUM} GiB for consumed memory \(weights \+ non-torch\), {_NUM} GiB for peak activation, "
    rf"|{_NUM} GiB for weight, {_NUM} GiB for peak activation, {_NUM} GiB for non-torch memory, )"
    rf"and {_NUM} GiB for CUDAGraph memory\. Replace gpu_memory_utilization config with `--kv-cache-memory=(-?\d+)` "
    rf"\({_NUM} GiB\) to fit into requested memory, or `--kv-cache-memory=(-?\d+)` \({_NUM} GiB\) to fully utilize gpu memory\. "
    rf"Current kv cache memory in use is {_NUM} GiB\.\s*$"
)
_ENGINE = re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\) with config: (.*)$")
_SERVER_VERSION = re.compile(r"vLLM (?:API )?server version (\S+?),?(?: serving model (\S+))?\s*$")
_LOGO_VERSION = re.compile(r"[█▀▄]\s+version\s+(\d+\.\d+\S*)\s*$")
_CONFIG_MODEL = re.compile(r"(?:^|, )model='([^']*)'")
_CONFIG_MAX_SEQ_LEN = re.compile(r"(?:^|, )max_seq_len=(\d+)")


@dataclass(frozen=True)
class FreeMemoryReport:
    """vLLM's `Free memory on device (F/T GiB) on startup ...` line: the usage report after CUDA-graph capture
    (INFO in 0.33, DEBUG in 0.11-0.20), or the startup error when free memory is below the requested memory."""

    free_gib: float  # free memory at vLLM's startup snapshot
    total_gib: float
    gpu_memory_utilization: float
    requested_gib: float  # ceil(total x utilization); for the external-weights error, what is left for the engine
    startup_error: bool  # "... is less than desired GPU memory utilization": vLLM refused to start
    device: str | None = None  # "cuda:0" in the startup error of 0.15+
    consumed_gib: float | None = None  # 0.33: weights + non-torch (mem_get_info drop since the snapshot)
    weights_gib: float | None = None  # 0.11-0.20
    non_torch_gib: float | None = None  # 0.11-0.20
    peak_activation_gib: float | None = None  # 0.33: transient peak + applied CUDA-graph estimate; 0.11-0.20: torch peak increase
    cudagraph_gib: float | None = None  # the actual capture
    kv_cache_memory_to_requested_bytes: int | None = None  # the suggested --kv-cache-memory (fits the requested memory)
    kv_cache_memory_to_gpu_bytes: int | None = None  # the suggested --kv-cache-memory (uses the whole free memory)
    kv_cache_in_use_gib: float | None = None

    @property
    def free_minus_requested_bytes(self) -> int | None:
        """Exact: the two suggestions differ by init free - requested (both subtract the same non-KV + 150 MiB)."""
        if self.kv_cache_memory_to_gpu_bytes is None or self.kv_cache_memory_to_requested_bytes is None:
            return None
        return self.kv_cache_memory_to_gpu_bytes - self.kv_cache_memory_to_requested_bytes


@dataclass(frozen=True)
class VllmLogFacts:
    """The figures one vLLM startup log printed about its memory budget (None: not in the log)."""

    source: str
    version: str | None = None  # as the log states it (engine banner, server version, logo)
    version_guess: str = "unknown"  # "0.33.0" when stated; else "0.11", "0.15-0.20", "0.20", "0.33" from the formats
    version_basis: str = ""
    model: str | None = None  # model='...' of the engine config line
    max_seq_len: int | None = None  # max_seq_len= of the engine config line
    model_loading_gib: float | None = None
    model_loading_gib_decimals: int = 2  # 4 in 0.11 (%.4f), else format_gib's 2
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
    capacity_format: str | None = None  # "one-line" (0.33) | "two-line" (0.11-0.20)
    cudagraph_actual_gib: float | None = None  # CUDA graph pool memory ... (actual)
    cudagraph_estimated_gib: float | None = None  # ... (estimated), or "Estimated CUDA graph memory: X GiB total"
    cudagraph_difference_percent: float | None = None
    graph_capture_gib: float | None = None  # Graph capturing finished in S secs, took X GiB
    graph_capture_seconds: int | None = None
    free_memory: FreeMemoryReport | None = None
    lines: dict[str, int] = field(default_factory=dict)  # key -> 1-based line number of its first occurrence
    notes: tuple[str, ...] = ()

    @property
    def kv_cache_gib(self) -> float | None:
        """The KV cache budget vLLM printed: Available KV cache memory, or the --kv-cache-memory-bytes reservation."""
        return self.available_kv_cache_gib if self.available_kv_cache_gib is not None else self.kv_cache_memory_reserved_gib

    @property
    def startup_error(self) -> bool:
        return self.free_memory is not None and self.free_memory.startup_error

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


def _opt(text: str | None) -> float | None:
    return None if text is None else float(text)


def _decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def _figures(found: dict[str, Any]) -> dict[str, Any]:
    """What must agree when a key line repeats (ranks, restarts): the figures, not the timings."""
    return {k: v for k, v in found.items() if not k.endswith("seconds")}


def _show(line: str) -> str:
    line = line.strip()
    return line if len(line) <= 90 else line[:87] + "..."


# --- one handler per key message: (key, is this line one of them?, its format, what it sets) ----------------


def _h_model_loading(m: re.Match[str]) -> dict[str, Any]:
    return {
        "model_loading_gib": _num(m[1]),
        "model_loading_gib_decimals": max(_decimals(m[1]), 2),
        "model_loading_seconds": _num(m[3]),
        "_ml_memory_word": bool(m[2]),
    }


def _h_available(m: re.Match[str]) -> dict[str, Any]:
    return {"available_kv_cache_gib": _num(m[1]), "available_kv_cache_decimals_fixed": _decimals(m[1]) == 2 and m[1].endswith("0")}


def _h_one_line(m: re.Match[str]) -> dict[str, Any]:
    return {
        "kv_cache_pool": m[1],
        "kv_cache_tokens": _int(m[2]),
        "concurrency_max_model_len": _int(m[3]),
        "max_concurrency": _num(m[4]),
        "capacity_format": "one-line",
    }


def _h_tokens(m: re.Match[str]) -> dict[str, Any]:
    return {"kv_cache_pool": m[1], "kv_cache_tokens": _int(m[2]), "capacity_format": "two-line"}


def _h_concurrency(m: re.Match[str]) -> dict[str, Any]:
    return {"concurrency_max_model_len": _int(m[1]), "max_concurrency": _num(m[2]), "capacity_format": "two-line"}


def _h_encoder(m: re.Match[str]) -> dict[str, Any]:
    return {"encoder_cache_budget_tokens": int(m[1]), "encoder_profile_items": int(m[2]), "encoder_profile_modality": m[3]}


def _h_pool(m: re.Match[str]) -> dict[str, Any]:
    return {"cudagraph_actual_gib": _num(m[1]), "cudagraph_estimated_gib": _num(m[2]), "cudagraph_difference_percent": _num(m[4])}


def _h_estimated(m: re.Match[str]) -> dict[str, Any]:
    return {"cudagraph_estimated_gib": _num(m[1])}


def _h_capture(m: re.Match[str]) -> dict[str, Any]:
    return {"graph_capture_seconds": int(m[1]), "graph_capture_gib": _num(m[2])}


def _h_reserved(m: re.Match[str]) -> dict[str, Any]:
    return {"initial_free_gib": _num(m[1]), "kv_cache_memory_reserved_gib": _num(m[2])}


def _h_free_error(m: re.Match[str]) -> dict[str, Any]:
    report = FreeMemoryReport(
        free_gib=_num(m[2]), total_gib=_num(m[3]), gpu_memory_utilization=_num(m[4]), requested_gib=_num(m[5]), startup_error=True, device=m[1]
    )
    return {"free_memory": report}


def _h_free_report(m: re.Match[str]) -> dict[str, Any]:
    report = FreeMemoryReport(
        free_gib=_num(m[2]),
        total_gib=_num(m[3]),
        gpu_memory_utilization=_num(m[4]),
        requested_gib=_num(m[5]),
        startup_error=False,
        device=m[1],
        consumed_gib=_opt(m[6]),
        peak_activation_gib=_num(m[7]) if m[7] is not None else _num(m[9]),
        weights_gib=_opt(m[8]),
        non_torch_gib=_opt(m[10]),
        cudagraph_gib=_num(m[11]),
        kv_cache_memory_to_requested_bytes=int(m[12]),
        kv_cache_memory_to_gpu_bytes=int(m[14]),
        kv_cache_in_use_gib=_num(m[16]),
    )
    return {"free_memory": report}


@dataclass(frozen=True)
class _Matcher:
    key: str  # the key message (for errors and `lines`)
    claims: Callable[[str], bool]  # does this line carry the message?
    formats: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], dict[str, Any]]], ...]
    expected: str  # the format, for the error message


_MATCHERS = (
    _Matcher(
        "Model loading took",
        lambda s: "Model loading took" in s,
        ((_MODEL_LOADING, _h_model_loading),),
        "Model loading took <GiB> GiB [memory] and <seconds> seconds",
    ),
    _Matcher("Available KV cache memory", lambda s: "Available KV cache memory:" in s, ((_AVAILABLE, _h_available),), "Available KV cache memory: <GiB> GiB"),
    _Matcher(
        "GPU KV cache size",
        lambda s: " KV cache size:" in s,
        ((_CAPACITY_ONE_LINE, _h_one_line), (_CAPACITY_TOKENS, _h_tokens)),
        "GPU KV cache size: <tokens> tokens[, Maximum concurrency for <len> tokens per request: <x>x]",
    ),
    _Matcher(
        "Maximum concurrency",
        lambda s: "Maximum concurrency for" in s and " KV cache size:" not in s,
        ((_CONCURRENCY, _h_concurrency),),
        "Maximum concurrency for <len> tokens per request: <x>x",
    ),
    _Matcher(
        "Encoder cache will be initialized",
        lambda s: "Encoder cache will be initialized with a budget" in s,
        ((_ENCODER, _h_encoder),),
        "Encoder cache will be initialized with a budget of <N> tokens, and profiled with <N> <modality> items of the maximum feature size.",
    ),
    _Matcher(
        "CUDA graph pool memory",
        lambda s: "CUDA graph pool memory:" in s,
        ((_POOL, _h_pool),),
        "CUDA graph pool memory: <GiB> GiB (actual), <GiB> GiB (estimated), difference: <GiB> GiB (<pct>%).",
    ),
    _Matcher(
        "Estimated CUDA graph memory",
        lambda s: "Estimated CUDA graph memory:" in s,
        ((_ESTIMATED, _h_estimated),),
        "Estimated CUDA graph memory: <GiB> GiB total",
    ),
    _Matcher(
        "Graph capturing finished",
        lambda s: "Graph capturing finished in" in s,
        ((_CAPTURE, _h_capture),),
        "Graph capturing finished in <secs> secs, took <GiB> GiB",
    ),
    _Matcher(
        "reserved ... for KV Cache",
        lambda s: "as specified by kv_cache_memory_bytes" in s,
        ((_RESERVED, _h_reserved),),
        "Initial free memory <GiB> GiB, reserved <GiB> GiB memory for KV Cache as specified by kv_cache_memory_bytes config ...",
    ),
    _Matcher(
        "Free memory on device",
        lambda s: "Free memory on device" in s,
        ((_FREE_ERROR, _h_free_error), (_FREE_REPORT, _h_free_report)),
        "Free memory on device (<GiB>/<GiB> GiB) on startup. Desired GPU memory utilization is (<u>, <GiB> GiB). Actual usage is ...",
    ),
)


def _version_tuple(version: str) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def _guess_version(facts: VllmLogFacts, values: dict[str, Any]) -> tuple[str, str]:
    if facts.version is not None:
        return facts.version, "stated in the log"
    if facts.capacity_format == "one-line":
        return "0.33", "one-line 'GPU KV cache size: N tokens, Maximum concurrency for ...' (0.33's format; 0.11-0.20 print two lines)"
    if facts.model_loading_gib_decimals == 4 or facts.available_kv_cache_decimals_fixed:
        return "0.11", "GiB printed with %.4f / %.2f ('Model loading took 2.8758 GiB and', 'Available KV cache memory: 121.50 GiB'), as 0.11 does"
    if facts.capacity_format == "two-line":
        if facts.cudagraph_estimated_gib is not None:
            return "0.20", "two-line KV cache size with a CUDA-graph memory estimate (0.20; 0.15 had no estimate)"
        return "0.15-0.20", "two-line KV cache size, GiB printed by format_gib (0.15 to 0.20)"
    if values.get("_ml_memory_word") is False:
        return "0.15-0.20", "'Model loading took X GiB and' of Model Runner V2 in 0.15-0.20"
    return "unknown", "no line whose format tells the version"


def _cross_rule(version: str) -> str | None:
    """How vLLM's capacity lines count cross-attention per request: 'encoder length' (0.11) or 'max_num_batched_tokens' (0.15+)."""
    if version == "0.11":
        return "encoder length"
    if version in ("0.15-0.20", "0.20", "0.33"):
        return "max_num_batched_tokens"
    v = _version_tuple(version)
    if v is None:
        return None
    if v[:2] <= (0, 11):
        return "encoder length"
    if v[:2] >= (0, 15):
        return "max_num_batched_tokens"
    return None  # 0.12-0.14: not checked


def cross_attention_rule(facts: VllmLogFacts) -> str | None:
    """'encoder length' (0.11 sized cross-attention by the encoder's length), 'max_num_batched_tokens' (0.15+), or None."""
    return _cross_rule(facts.version_guess)


def parse_vllm_log(text: str, source: str = "log") -> VllmLogFacts:
    """Parse a vLLM startup log's text. BadInput: a key line not in its format, or no key line at all."""
    values: dict[str, Any] = {}
    first: dict[str, tuple[int, dict[str, Any]]] = {}
    repeats: dict[str, list[str]] = {}
    version: str | None = None
    model: str | None = None
    max_seq_len: int | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _ANSI.sub("", raw).rstrip("\r\n")
        if version is None or model is None:
            if (m := _ENGINE.search(line)) is not None:
                version = version or m[1]
                cm, cl = _CONFIG_MODEL.search(m[2]), _CONFIG_MAX_SEQ_LEN.search(m[2])
                model = model or (cm[1] if cm else None)
                max_seq_len = max_seq_len or (int(cl[1]) if cl else None)
            elif (m := _SERVER_VERSION.search(line)) is not None:
                version = version or m[1]
                model = model or m[2]
            elif version is None and (m := _LOGO_VERSION.search(line)) is not None:
                version = m[1]
        for matcher in _MATCHERS:
            if not matcher.claims(line):
                continue
            found = None
            for pattern, handler in matcher.formats:
                if (m := pattern.search(line)) is not None:
                    found = handler(m)
                    break
            if found is None:
                raise BadInput(f"{source}:{lineno}: malformed vLLM log line: expected '{matcher.expected}', got '{_show(line)}'")
            if matcher.key not in first:
                first[matcher.key] = (lineno, found)
                values.update(found)
            elif _figures(found) != _figures(first[matcher.key][1]):
                repeats.setdefault(matcher.key, []).append(str(lineno))
            break
    if not first:
        names = ", ".join(f"'{k}'" for k in KEY_LINES)
        raise BadInput(f"{source} is not a vLLM startup log: none of its lines is one capacity reads ({names})")
    notes = tuple(
        f"'{key}' appears again with other figures (lines {', '.join(lines)}; several ranks or restarts in one log): line {first[key][0]} is used"
        for key, lines in repeats.items()
    )
    fields = {k: v for k, v in values.items() if not k.startswith("_")}
    facts = VllmLogFacts(
        source=source,
        version=version,
        model=model,
        max_seq_len=max_seq_len,
        lines={key: lineno for key, (lineno, _) in first.items()},
        notes=notes,
        **fields,
    )
    guess, basis = _guess_version(facts, values)
    return replace(facts, version_guess=guess, version_basis=basis)


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
    """Read and parse a vLLM startup log file."""
    return parse_vllm_log(read_log_text(path), source=str(path))
