"""Which `vllm serve` flags a vLLM release takes: the flags capacity's suggested serve line uses, each with the oldest
release read that has it and the newest release read that lacks it.

Read from each release's wheel (`pip download vllm==X --no-deps`, vllm/engine/arg_utils.py, the flag's add_argument;
a boolean field of a config dataclass gets its `--no-` form from argparse.BooleanOptionalAction in get_kwargs):
0.6.0, 0.6.6.post1, 0.7.0, 0.8.0, 0.9.0, 0.10.0, 0.10.1, 0.10.2, 0.11.0, 0.12.0, 0.13.0, 0.14.0, 0.16.0, 0.18.0, 0.20.0,
0.22.0, 0.24.0, 0.26.0, 0.28.0, 0.30.0 and 0.33.0. A release between the two read bounds is undated: a knob the user gives that needs
such a flag is refused, a flag capacity would add on its own (a measured --kv-cache-memory-bytes) is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capacity.errors import BadInput
from capacity.vllm.versions import VllmSemantics, release_tuple

Release = tuple[int, ...]
PRESENT, ABSENT, UNDATED = "present", "absent", "undated"


@dataclass(frozen=True)
class FlagDates:
    """When a flag appeared: `present` the oldest release read that has it, `absent` the newest read that lacks it."""

    flag: str
    present: Release
    absent: Release | None  # None: every release capacity plans (0.6+) has it
    source: str

    def status(self, release: Release) -> str:
        if release >= self.present:
            return PRESENT
        if self.absent is not None and release <= self.absent:
            return ABSENT
        return UNDATED

    def since(self) -> str:
        present = ".".join(map(str, self.present))
        if self.absent is None:
            return f"in every release from {present}"
        return f"first read in {present}, absent in {'.'.join(map(str, self.absent))}"


_ALL = "arg_utils.py of 0.6.0, 0.6.6.post1, 0.7.0, 0.8.0, 0.9.0, 0.10.0-0.10.2, 0.11.0, 0.13.0, 0.30.0, 0.33.0"
FLAGS: dict[str, FlagDates] = {
    f.flag: f
    for f in (
        FlagDates("--max-model-len", (0, 6, 0), None, _ALL),
        FlagDates("--max-num-seqs", (0, 6, 0), None, _ALL),
        FlagDates("--max-num-batched-tokens", (0, 6, 0), None, _ALL),
        FlagDates("--gpu-memory-utilization", (0, 6, 0), None, _ALL),
        FlagDates("--block-size", (0, 6, 0), None, _ALL),
        FlagDates("--tensor-parallel-size", (0, 6, 0), None, _ALL),
        FlagDates("--dtype", (0, 6, 0), None, _ALL),
        FlagDates("--kv-cache-dtype", (0, 6, 0), None, _ALL),
        FlagDates("--enforce-eager", (0, 6, 0), None, _ALL),
        FlagDates("--enable-prefix-caching", (0, 6, 0), None, _ALL),
        FlagDates("--revision", (0, 6, 0), None, _ALL),
        FlagDates("--limit-mm-per-prompt", (0, 6, 0), None, _ALL),
        FlagDates(
            "--no-enable-prefix-caching",
            (0, 6, 6, 1),
            (0, 6, 0),
            "0.6.0: --enable-prefix-caching action='store_true'; 0.6.6.post1, 0.7.0, 0.8.0: argparse.BooleanOptionalAction; "
            "0.9.0+: a bool field of CacheConfig (get_kwargs: BooleanOptionalAction)",
        ),
        FlagDates("--mm-processor-kwargs", (0, 6, 6, 1), (0, 6, 0), "0.6.0 has no such argument; 0.6.6.post1+ arg_utils.py"),
        FlagDates("--hf-overrides", (0, 6, 4, 1), (0, 6, 0), "0.6.0 has no such argument; 0.6.4.post1, 0.6.6.post1, 0.10.0 and 0.33.0 arg_utils.py"),
        FlagDates("--enable-expert-parallel", (0, 8, 0), (0, 7, 0), "0.7.0 has no such argument; 0.8.0+ arg_utils.py"),
        FlagDates("--kv-cache-memory-bytes", (0, 10, 2), (0, 10, 1), "0.10.0, 0.10.1 have no such argument; 0.10.2+ (CacheConfig.kv_cache_memory_bytes)"),
        FlagDates("--decode-context-parallel-size", (0, 10, 2), (0, 10, 1), "0.10.0, 0.10.1 have no such argument; 0.10.2+ (ParallelConfig)"),
        FlagDates("--language-model-only", (0, 18, 0), (0, 16, 0), "0.10.2 to 0.16.0 have no such argument; 0.18.0 to 0.33.0 (MultiModalConfig)"),
    )
}

# --limit-mm-per-prompt's value: `image=1,video=0` (nullable_kvs) through 0.9.x, JSON from 0.9.0 (0.9.0's parse_type
# takes either, with a deprecation warning for key=value: "will be removed in v0.10.0"); 0.8.0 takes key=value only
# (type=nullable_kvs), 0.10.0+ JSON only (parse_type(json.loads); 0.33.0's limit_mm_per_prompt is a dict field too)
LIMIT_MM_JSON_FROM: Release = (0, 9, 0)

# ServingArgs fields the user sets and the flag each needs (a default value needs none)
KNOB_FLAGS: dict[str, tuple[str, Any]] = {
    # field: (flag, the value that needs no flag)
    "kv_cache_memory_bytes": ("--kv-cache-memory-bytes", None),
    "decode_context_parallel_size": ("--decode-context-parallel-size", 1),
    "enable_expert_parallel": ("--enable-expert-parallel", False),
    "language_model_only": ("--language-model-only", False),
    "mm_processor_kwargs": ("--mm-processor-kwargs", None),
    "hf_overrides": ("--hf-overrides", None),
}


def release_of(semantics: VllmSemantics) -> Release:
    """The release a plan's rules name (`--vllm-version`), else the first release of their range (0.6.0 for V0)."""
    named = release_tuple(semantics.release) if semantics.release else None
    if named is not None:
        return named
    return max((*semantics.first, 0), (0, 6, 0))


def flag_status(flag: str, release: Release) -> str:
    """PRESENT, ABSENT or UNDATED; a flag not in the table is UNDATED (capacity has not read when it appeared)."""
    dates = FLAGS.get(flag)
    return UNDATED if dates is None else dates.status(release)


def require_flags(args: Any, release: Release, version: str) -> None:
    """BadInput, one line, when a knob the user set needs a flag `version` does not have or that capacity cannot date."""
    for field, (flag, default) in KNOB_FLAGS.items():
        value = getattr(args, field, None)
        if value is None or value == default or (field in ("mm_processor_kwargs", "hf_overrides") and not value):
            continue
        status = flag_status(flag, release)
        if status == PRESENT:
            continue
        dates = FLAGS[flag]
        why = "has no such flag" if status == ABSENT else "is not dated for this flag (not read)"
        raise BadInput(f"{flag}: vLLM {version} {why} ({flag} {dates.since()}); drop it or plan a release that has it")


def limit_mm_value(limits: dict[str, int], release: Release) -> str:
    """--limit-mm-per-prompt's value in the form `release` parses: JSON from 0.9.0, `image=1,video=0` before."""
    if release >= LIMIT_MM_JSON_FROM:
        return "{" + ",".join(f'"{m}":{n}' for m, n in limits.items()) + "}"
    return ",".join(f"{m}={n}" for m, n in limits.items())


# --block-size's argparse choices (None: any positive int, the attention backends then decide): 0.6.0 choices=[8, 16,
# 32]; 0.6.6.post1 to 0.8.0 choices=[8, 16, 32, 64, 128]; 0.9.0 to 0.11.0 CacheConfig BlockSize = Literal[1, 8, 16,
# 32, 64, 128]; 0.12.0 to 0.16.0 adds 256; 0.18.0 to 0.33.0: block_size: int (0.24.0+: gt=0). Releases between two rows
# that were not read: (first release, choices) rows leave them out (BLOCK_SIZE_UNDATED).
BLOCK_SIZE_CHOICES: tuple[tuple[Release, Release, tuple[int, ...] | None], ...] = (
    ((0, 6, 0), (0, 6, 0), (8, 16, 32)),
    ((0, 6, 6, 1), (0, 8, 0), (8, 16, 32, 64, 128)),
    ((0, 9, 0), (0, 11, 0), (1, 8, 16, 32, 64, 128)),
    ((0, 12, 0), (0, 16, 0), (1, 8, 16, 32, 64, 128, 256)),
    ((0, 18, 0), (0, 33, 99), None),
)


def block_size_choices(release: Release) -> tuple[bool, tuple[int, ...] | None]:
    """(dated, choices) of --block-size in `release`: choices None means any positive int; not dated: not read."""
    for first, last, choices in BLOCK_SIZE_CHOICES:
        if first <= release[: len(last)] <= last or first <= release <= last:
            return True, choices
    return False, None
