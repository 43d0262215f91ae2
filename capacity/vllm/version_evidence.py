"""Which vLLM versions a startup that does not state its version can come from: each line whose format only some
releases print, and the ranges of rules (capacity.vllm.versions) every such line allows.

Pure Python. The formats and the releases printing them were read from vLLM's wheels and the public logs of
bench/vllm_logs/ (the versions their sidecars state):
- 'Model loading took %.4f GiB and' (V1 runner, 0.8-0.11: 0.9.0.1, 0.10.2, 0.11.0 logs); '%.4f GiB memory and' in
  0.12 (0.12.0 log); '... GiB memory and' with format_gib's figure later (0.15.1 to 0.30.0 logs; 0.13, 0.14 not read,
  taken as from 0.13); '... GiB and' with format_gib's figure, Model Runner V2 (0.27.1, 0.28.0 logs; 0.15+);
- 'Available KV cache memory: %.2f GiB' with a fixed second decimal ('121.50'), 0.8-0.11; format_gib later;
- the KV cache size and the concurrency on two lines, 0.8-0.28 (0.27.1 logs; a 0.28.0 Model Runner V2 excerpt); on one
  line from 0.28 (0.28.0 logs);
- the CUDA-graph estimate ('Estimated CUDA graph memory', 'CUDA graph pool memory', 'Profiling CUDA graph memory',
  the utilization it equals), 0.19+ (0.19.0, 0.19.1 logs: printed but not subtracted unless enabled);
- 'Free memory on device (F/T GiB) on startup', 0.10+ (0.10.2 logs); 'num_gpu_blocks is: N', 0.9-0.11; 0.8-0.10's 'Memory profiling
  takes ... Total non KV cache memory'.
"""

from __future__ import annotations

from dataclasses import dataclass

from capacity.vllm.log_facts import VllmLogFacts
from capacity.vllm.versions import VllmSemantics, all_semantics

Version = tuple[int, int]
LAST: Version = (0, 99)  # open end: the latest release capacity knows and after


@dataclass(frozen=True)
class FormatEvidence:
    """One line whose format only some releases print."""

    line: int  # 1-based line of the paste
    what: str  # the format, in words
    first: Version
    last: Version

    def text(self) -> str:
        upto = "" if self.last == LAST else f"-{self.last[0]}.{self.last[1]}"
        return f"line {self.line}: {self.what} (vLLM {self.first[0]}.{self.first[1]}{upto}{'' if upto else '+'})"


def format_evidence(facts: VllmLogFacts) -> tuple[FormatEvidence, ...]:
    """The version-telling lines of a startup (see the module docstring), in line order."""
    at = facts.lines
    out: list[FormatEvidence] = []

    def add(key: str, what: str, first: Version, last: Version = LAST) -> None:
        if key in at:
            out.append(FormatEvidence(at[key], what, first, last))

    if facts.model_loading_gib is not None:
        four = facts.model_loading_gib_decimals == 4
        if four and facts.model_loading_memory_word is True:
            add("Model loading took", "'Model loading took %.4f GiB memory and'", (0, 12), (0, 12))
        elif four:
            add("Model loading took", "'Model loading took %.4f GiB and'", (0, 8), (0, 11))
        elif facts.model_loading_memory_word is True:
            add("Model loading took", "'Model loading took X GiB memory' with format_gib's figure", (0, 13))
        elif facts.model_loading_memory_word is False:
            add("Model loading took", "'Model loading took X GiB and' with format_gib's figure (Model Runner V2)", (0, 15), (0, 28))
    if facts.available_kv_cache_gib is not None and facts.available_kv_cache_decimals_fixed:
        add("Available KV cache memory", "'Available KV cache memory: %.2f GiB'", (0, 8), (0, 11))
    if facts.capacity_format == "two-line":
        add("Maximum concurrency", "the KV cache size and the concurrency on two lines", (0, 8), (0, 28))
    elif facts.capacity_format == "one-line":
        add("GPU KV cache size", "the KV cache size and the concurrency on one line", (0, 28))
    for key in ("Estimated CUDA graph memory", "CUDA graph pool memory", "Profiling CUDA graph memory", "CUDA graph memory profiling is enabled"):
        add(key, f"'{key}'", (0, 19))
    add("Free memory on device", "'Free memory on device (F/T GiB) on startup'", (0, 10))
    if facts.engine != "V0":  # V0's executor prints '# GPU blocks: N, # CPU blocks: M' (the V0 engine, not 0.9-0.11)
        add("GPU blocks", "'num_gpu_blocks is: N'", (0, 9), (0, 11))
    add("Memory profiling takes", "'Memory profiling takes ... Total non KV cache memory'", (0, 8), (0, 10))
    return tuple(sorted(out, key=lambda e: e.line))


def _span(sem: VllmSemantics, ranges: tuple[VllmSemantics, ...]) -> tuple[Version, Version]:
    later = [r.first for r in ranges if r.first > sem.first]
    end = min(later) if later else LAST
    return sem.first, (end[0], end[1] - 1) if later else LAST


def fitting_semantics(facts: VllmLogFacts) -> tuple[tuple[VllmSemantics, ...], tuple[FormatEvidence, ...]]:
    """The V1 ranges of rules every version-telling line allows, oldest first, and those lines. No such line: every
    V1 range (the caller decides what to do with a startup that tells nothing)."""
    evidence = format_evidence(facts)
    ranges = tuple(s for s in all_semantics() if s.engine != "V0")
    fitting = []
    for sem in ranges:
        lo, hi = _span(sem, ranges)
        if all(e.first <= hi and lo <= e.last for e in evidence):
            fitting.append(sem)
    return tuple(fitting), evidence
