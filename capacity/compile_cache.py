"""The torch.compile cache a vLLM start finds: a cold one takes memory from the first start's KV cache.

vLLM compiles the decoder during the profile run that sizes the KV cache: `Worker.determine_available_memory` runs
`profile_run()` inside `memory_profiling()` in every version read (0.9.2 to 0.33.0, bench/compile_cache/EVIDENCE.md
section 3a), and nothing runs the model before it. On a cold cache, Inductor's autotuning, the AOT export and
JIT-compiled kernels allocate inside that window: vLLM counts the freed part as peak activation and the code that stays
as consumed (non-torch) memory, so the first start gets a smaller KV cache than a restart with the same flags (vLLM
issues #54383, #54122; PR #54479 is open, 0.33.0 unchanged). capacity plans a warm start, the steady state.

The cache key holds the vLLM version, dtype, quantization, tensor parallelism, `max_num_batched_tokens` and
`max_model_len` (and, from 0.29, `max_num_seqs` through the graph sizes), not `gpu_memory_utilization`
(EVIDENCE.md section 3c): a new version or any of those flags starts cold, and so does every start of a container
whose cache directory (VLLM_CACHE_ROOT, ~/.cache/vllm) is not kept. `--enforce-eager` compiles nothing
(VllmConfig sets CompilationMode.NONE) and `--kv-cache-memory` skips the measurement.

How much a cold start costs is not predictable from the model, GPU and flags with the public data (EVIDENCE.md
section 4): eight cold/warm observations on consumer GPUs (RTX 3090, 4090, 4050 Laptop; vLLM 0.28-0.29) lost 0.47 to
0.97 GiB per GPU; a V100 and one RTX 3090 on 0.28.0 lost nothing; an RTX 8000 (a fork) lost 2.50 GiB and RTX PRO 6000
Blackwell GPUs (a nightly) "tens of GiB". capacity gives that range, estimated, not a figure.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from capacity.units import GiB

# The observed range of the eight consumer-GPU pairs (bench/compile_cache/evidence.json): D3, "0.47 GiB/GPU"
# (2 x RTX 4090, Qwen3-32B-AWQ, 0.28.0, vllm PR #54479), to D4, 1,044,393,984 B (RTX 4050 Laptop, Qwen2.5-3B-AWQ,
# 0.29.0: this benchmark's cold/warm pair, the difference of vLLM's two --kv-cache-memory suggestions).
COLD_START_LOW_BYTES = round(0.47 * GiB)
COLD_START_HIGH_BYTES = 1_044_393_984
COLD_START_SOURCES = (
    "0.47-0.97 GiB per GPU in 8 public cold/warm pairs on RTX 3090 / 4090 / 4050 Laptop (vLLM 0.28-0.29); "
    "none on a V100; 2.5 GiB on an RTX 8000 and more on RTX PRO 6000 Blackwell (bench/compile_cache/EVIDENCE.md)"
)

COLD = "cold"
WARM = "warm"
MIXED = "mixed"

# Lines that show the decoder was compiled at this start (EVIDENCE.md section 3d, with file:line per version).
_COLD_LINES = re.compile(
    r"Compiling a graph for (?:general shape|dynamic shape|compile range)"
    r"|saved AOT compiled function"
    r"|Compiling model again due to a load failure"
)
# Lines that show it was loaded from the cache.
_WARM_LINES = re.compile(r"Directly load the compiled graph\(s\)|Directly load AOT compilation from path")


@dataclass(frozen=True)
class CompileCacheEvidence:
    """What a log's compile lines say of the cache: cold (it compiled), warm (it loaded), or mixed (both)."""

    state: str  # COLD | WARM | MIXED
    line: str  # the first line that decided it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_compile_line(line: str) -> bool:
    return bool(_COLD_LINES.search(line) or _WARM_LINES.search(line))


def compile_cache_evidence(lines: list[str]) -> CompileCacheEvidence | None:
    """The cache state one engine's lines show, or None when they show no compile line."""
    cold = next((ln for ln in lines if _COLD_LINES.search(ln)), None)
    warm = next((ln for ln in lines if _WARM_LINES.search(ln)), None)
    if cold is not None and warm is not None:
        return CompileCacheEvidence(MIXED, cold.strip())
    if cold is not None:
        return CompileCacheEvidence(COLD, cold.strip())
    if warm is not None:
        return CompileCacheEvidence(WARM, warm.strip())
    return None


def log_note(evidence: CompileCacheEvidence | None, enforce_eager: bool) -> str | None:
    """What reconcile says of a log's compile cache against capacity's warm-start plan."""
    if enforce_eager:
        return None
    if evidence is None:
        return "the log shows no torch.compile line, so whether its start found a cold or a warm compile cache is not known (capacity plans a warm one)"
    if evidence.state == WARM:
        return f"this start loaded the compiled model from the cache ('{evidence.line}'): a warm start, as capacity plans"
    head = "this start compiled the model" if evidence.state == COLD else "this start both loaded and compiled graphs (a draft head or an encoder can be cold while the decoder is warm)"
    return (
        f"{head} ('{evidence.line}'): vLLM charged the compile's scratch to the profile run, so its KV cache is smaller than a "
        f"restart with the same flags gets; capacity plans the warm start ({COLD_START_SOURCES})"
    )
