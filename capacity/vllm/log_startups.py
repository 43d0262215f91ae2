"""Read what users paste of a vLLM startup (V0 and 0.8 to 0.33) into `VllmLogFacts`, one per engine startup.

Pure Python, no torch. Each line goes through the per-message readers (capacity/vllm/log_lines.py) and the banner
and argument readers (capacity/vllm/log_args.py). A line that carries one of these messages but cannot be read (a
word where a number should be, a line cut before its unit) is a **warning**; a part cut off the end of a line (`and N
seconds`, the concurrency after the token count) is simply not read. Only a text with no startup figure at all is
refused (BadInput). Several startups in one paste (restarts, a fixed and a failed run) are split where an engine
banner, or a second model load, follows the KV figures of the startup before: `parse_vllm_startups` returns each.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from capacity.errors import BadInput
from capacity.vllm.compile_lines import compile_cache_evidence, is_compile_line
from capacity.vllm.log_args import (
    chunked_batched_tokens,
    engine_config_line,
    is_banner,
    logged_args,
    logged_max_model_len,
    logged_model_runner,
    logo_version,
    server_version_line,
)
from capacity.vllm.log_facts import KEY_LINES, FreeMemoryReport, GpuEvidence, VllmLogFacts
from capacity.vllm.log_lines import READERS, free_pieces, gpu_evidence, shown, split_lines
from capacity.vllm.log_workers import WorkerReader


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
    mrv2: bool | None = None  # the runner the loading line's file tag names
    compile_lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    last_line: int = 0
    has_kv: bool = False
    has_load: bool = False
    rank_choices: list[str] = field(default_factory=list)  # V0 ranks' profiles: which line the engine's minimum is
    workers: WorkerReader = field(default_factory=WorkerReader.new)
    kv_tokens: list[tuple[int, float | None]] = field(default_factory=list)  # every KV size line: (tokens, its concurrency)

    @property
    def empty(self) -> bool:
        return not self.first and not self.free


# V0 worker lines each rank prints with its own KV memory (worker.py determine_num_available_blocks)
V0_RANK_LINES = ("Memory profiling results", "the rest of the memory reserved for KV Cache")


def _figures(found: dict[str, Any]) -> dict[str, Any]:
    """What must agree when a key line repeats (ranks, restarts): the figures, not the timings."""
    return {k: v for k, v in found.items() if not k.endswith("seconds")}


def _read_banner(cur: _Startup, line: str) -> bool:
    """Version, model and knobs of the engine's banner lines; True when the line is one (a startup begins)."""
    if (engine := engine_config_line(line)) is not None:
        version, config = engine
        cur.version = cur.version or version
        for key, value in config.items():
            if key == "model":
                cur.model = cur.model or value
            elif key == "max_seq_len":
                cur.max_seq_len = cur.max_seq_len or value
            else:
                cur.engine_cfg.setdefault(key, value)
        return True
    if (server := server_version_line(line)) is not None:
        cur.version = cur.version or server[0]
        cur.model = cur.model or server[1]
        return True
    if (logo := logo_version(line)) is not None:
        cur.version = cur.version or logo
        return True
    if (args := logged_args(line)) is not None:
        model = args.pop("model", None)
        cur.model = cur.model or (str(model) if model else None)
        for key, value in args.items():
            cur.knobs[key] = value
        return True
    return False


def _guess_version(facts: VllmLogFacts, values: dict[str, Any]) -> tuple[str, str]:
    """The version the log states, else the release line its formats tell, and why."""
    if facts.version is not None:
        return facts.version, "stated in the log"
    if facts.engine == "V0":
        markers = [m for m in (values.get("_v0_marker_lines") or ()) if m]
        if values.get("_v0"):
            markers.insert(0, "the V0 engine's worker lines ('Memory profiling results' / 'the rest of the memory reserved for KV Cache')")
        return "V0 engine", "; ".join(markers)
    if facts.capacity_format == "one-line":
        return "0.33", "one-line 'GPU KV cache size: N tokens, Maximum concurrency for ...' (0.28's format and later; 0.8-0.27 print two lines)"
    if facts.model_loading_gib_decimals == 4 or facts.available_kv_cache_decimals_fixed:
        return "0.11", "GiB printed with %.4f / %.2f ('Model loading took 2.8758 GiB and', 'Available KV cache memory: 121.50 GiB'), as 0.11 does"
    if facts.capacity_format == "two-line":
        if facts.cudagraph_estimated_gib is not None:
            return "0.20", "two-line KV cache size with a CUDA-graph memory estimate (0.20; 0.15 had no estimate)"
        return "0.15-0.20", "two-line KV cache size, GiB printed by format_gib (0.15 to 0.20)"
    if values.get("_ml_memory_word") is False:
        return "0.15-0.20", "'Model loading took X GiB and' of Model Runner V2 in 0.15-0.20"
    return "unknown", "no line whose format tells the version"


def _finish(cur: _Startup, source: str, index: int, gpu: GpuEvidence, inherited_version: str | None) -> VllmLogFacts:
    values = cur.values
    notes = [
        f"'{key}' appears again with other figures (lines {', '.join(lines)}; several ranks or restarts in one log): line {cur.first[key][0]} is used"
        + (" (V0: the rank with the least KV memory, as the engine takes the fewest blocks over its workers)" if key in V0_RANK_LINES and cur.rank_choices else "")
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
    if "_ml_memory_word" in values:
        fields["model_loading_memory_word"] = values["_ml_memory_word"]
    pipeline = tuple(sorted(cur.workers.pipeline_ranks))
    printed = tuple(t for t, _ in cur.kv_tokens)
    if len(set(printed)) > 1 and any(pp > 0 for pp in pipeline):
        # vLLM 0.8-0.10 print one KV size line per worker (kv_cache_utils.get_kv_cache_config), each on its own memory,
        # before unify_kv_cache_configs gives every worker the smallest count: the engine's pool is the smallest line
        tokens, conc = min(cur.kv_tokens, key=lambda tc: tc[0])
        fields["kv_cache_tokens"] = tokens
        if conc is not None:
            fields["max_concurrency"] = conc
        notes.append(
            f"{len(printed)} 'GPU KV cache size' lines ({', '.join(f'{t:,}' for t in sorted(set(printed)))} tokens), one per worker as vLLM 0.8-0.10 print them "
            f"before the engine takes the smallest: the engine's pool is {tokens:,} tokens"
        )
    version = cur.version or inherited_version
    if cur.version is None and inherited_version is not None:
        notes.append(f"version {inherited_version} taken from an earlier startup in the same text")
    facts = VllmLogFacts(
        source=source,
        version=version,
        engine="V0" if values.get("_v0") or values.get("_v0_marker_lines") else None,
        v0_results_format=values.get("_v0_peak_total") is not None,
        model=cur.model,
        max_seq_len=cur.max_seq_len or cur.knobs.get("max_model_len"),
        free_memory=free,
        log_knobs=dict(cur.knobs),
        engine_config=dict(cur.engine_cfg),
        effective_max_num_batched_tokens=cur.mnbt,
        model_runner_v2=cur.mrv2,
        compile_cache=compile_cache_evidence(cur.compile_lines),
        gpu=gpu,
        index=index,
        first_line=cur.first_line,
        last_line=cur.last_line,
        lines={key: lineno for key, (lineno, _) in cur.first.items()} | ({"Free memory on device": cur.free_line} if cur.free_line else {}),
        workers=cur.workers.figures(),
        pipeline_ranks=pipeline,
        kv_cache_tokens_printed=printed,
        notes=tuple(notes),
        warnings=tuple(cur.warnings),
        **fields,
    )
    guess, basis = _guess_version(facts, values)
    return replace(facts, version_guess=guess, version_basis=basis)


def parse_vllm_startups(text: str, source: str = "log") -> tuple[VllmLogFacts, ...]:
    """Every vLLM startup in a pasted text, in order. BadInput only when no startup figure can be read at all."""
    lines = split_lines(text)
    if lines and lines[-1] == "":
        lines.pop()
    gpu = gpu_evidence(lines)
    done: list[_Startup] = []
    cur = _Startup(first_line=1)
    all_warnings: list[str] = []
    continued = ""
    for lineno, line in enumerate(lines, start=1):
        found_any = False
        # a model load or an engine banner after the KV figures of the current startup begins the next one
        reader_hits = [r for r in READERS if r.claims(line)]
        reloads = any(r.stage == "load" for r in reader_hits) and cur.has_load
        command = continued + line  # a command continued over lines with backslashes is read joined
        continued = command.rstrip()[:-1] + " " if command.rstrip().endswith("\\") else ""
        command = "" if continued else command
        banner = is_banner(command) if command else False
        if cur.has_kv and (reloads or banner):
            done.append(cur)
            cur = _Startup(first_line=lineno)
        if command and _read_banner(cur, command):
            found_any = True
        if (length := logged_max_model_len(line)) is not None:
            cur.max_seq_len = cur.max_seq_len or length
        if (tokens := chunked_batched_tokens(line)) is not None:
            cur.mnbt = tokens
        if (runner := logged_model_runner(line)) is not None:
            cur.mrv2 = runner
        if is_compile_line(line):
            cur.compile_lines.append(line)
        on_line: dict[str, Any] = {}
        for reader in reader_hits:
            found = None
            for pattern, handler in reader.formats:
                if (m := pattern.search(line)) is not None:
                    found = handler(m)
                    break
            if found is None:
                warning = f"{source}:{lineno}: malformed vLLM log line: expected '{reader.expected}', got '{shown(line)}'"
                cur.warnings.append(warning)
                all_warnings.append(warning)
                continue
            found_any = True
            on_line.update(found)
            if "kv_cache_tokens" in found:
                cur.kv_tokens.append((found["kv_cache_tokens"], found.get("max_concurrency")))
            elif "max_concurrency" in found and cur.kv_tokens and cur.kv_tokens[-1][1] is None:
                cur.kv_tokens[-1] = (cur.kv_tokens[-1][0], found["max_concurrency"])
            cut = found.pop("_cut", None)
            if cut is not None:
                warning = f"{source}:{lineno}: line cut short: {cut}"
                cur.warnings.append(warning)
                all_warnings.append(warning)
            if reader.stage == "kv":
                cur.has_kv = True
            if reader.stage == "load":
                cur.has_load = True
            if (marker := found.pop("_v0_marker", None)) is not None:
                markers = cur.values.setdefault("_v0_marker_lines", [])
                if not any(marker in m for m in markers):
                    markers.append(f"line {lineno}: {marker}")
            gpu_total = found.pop("_gpu_cuda_total", None)
            if gpu_total is not None and gpu.cuda_total_gib is None:
                gpu = replace(gpu, cuda_total_gib=gpu_total[0], cuda_total_basis=f"line {lineno}: {gpu_total[1]}")
            if reader.key not in cur.first:
                cur.first[reader.key] = (lineno, found)
                cur.values.update({k: v for k, v in found.items() if not (k in cur.values and k.startswith("profiled_"))})
            elif reader.key in V0_RANK_LINES and found["available_kv_cache_gib"] < cur.first[reader.key][1]["available_kv_cache_gib"]:
                # V0 at TP/PP > 1: every rank prints its own profile; the engine takes the fewest blocks over the ranks
                # (DistributedGPUExecutor.determine_num_available_blocks: min over workers), i.e. the smallest KV memory
                was = cur.first[reader.key]
                cur.rank_choices.append(f"line {lineno} ({found['available_kv_cache_gib']} GiB) over line {was[0]} ({was[1]['available_kv_cache_gib']} GiB)")
                cur.repeats.setdefault(reader.key, []).append(str(was[0]))
                cur.first[reader.key] = (lineno, found)
                cur.values.update(found)
            elif _figures(found) != _figures(cur.first[reader.key][1]):
                cur.repeats.setdefault(reader.key, []).append(str(lineno))
        cur.workers.read(line, lineno, on_line)
        pieces = free_pieces(line)
        if pieces:
            found_any = True
            if "free_gib" in pieces and cur.free_line is None:
                cur.free_line = lineno
            for key, value in pieces.items():
                cur.free.setdefault(key, value)
            if "free_gib" in pieces:
                cur.has_kv = True
        elif "Free memory on device" in line:
            warning = f"{source}:{lineno}: malformed vLLM log line: expected 'Free memory on device (<GiB>/<GiB> GiB) on startup ...', got '{shown(line)}'"
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


def checked_text(data: bytes, source: str) -> str:
    """Bytes of a log as text; BadInput (one line) when they are empty or binary."""
    if not data.strip():
        raise BadInput(f"{source} is empty: give the log vLLM printed while starting (vllm serve ... 2>&1 | tee vllm.log)")
    text = data.decode("utf-8", errors="replace")
    if b"\x00" in data or text.count("\ufffd") > max(len(text) // 100, 0):
        raise BadInput(f"{source} is a binary file, not a vLLM text log (decompress it first if it is an archive)")
    return text


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
    return checked_text(data, str(path))


def load_vllm_log(path: Path) -> VllmLogFacts:
    """Read and parse a vLLM startup log file (its first startup)."""
    return parse_vllm_log(read_log_text(path), source=str(path))


def load_vllm_startups(path: Path) -> tuple[VllmLogFacts, ...]:
    """Read a vLLM log file and parse every startup in it."""
    return parse_vllm_startups(read_log_text(path), source=str(path))
