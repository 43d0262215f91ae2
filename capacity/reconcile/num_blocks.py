"""vLLM's num_blocks recovered from a startup log: vLLM never prints it, so it is recounted from the lines that
depend on it (the KV memory, the token count, the concurrency), each rounded as vLLM printed it.

Pure Python. A printed figure stands for an interval (GiB and concurrency to 2 decimals): `printed_gib_bytes`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from capacity.units import GiB, cdiv
from capacity.vllm.log_facts import VllmLogFacts

HALF_CENT = Fraction(5, 1000)  # half a unit of the 2nd decimal: vLLM's GiB and concurrency figures


@dataclass(frozen=True)
class BlockEvidence:
    """num_blocks (and blocks per request) consistent with every KV line of the log."""

    num_blocks_min: int
    num_blocks_max: int
    blocks_per_request: tuple[int, ...]  # implied by num_blocks / concurrency; () when the log cannot tell
    basis: str
    consistent: bool = True  # False: the lines contradict each other under capacity's KV layout

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        if self.num_blocks_min == self.num_blocks_max:
            return f"{self.num_blocks_min:,}"
        return f"{self.num_blocks_min:,}-{self.num_blocks_max:,}"


def exact(x: float) -> Fraction:
    """The decimal a float prints as, exactly."""
    return Fraction(repr(x))


def printed_gib_bytes(gib: float, decimals: int = 2) -> tuple[int, int]:
    """Byte range whose round(b / 2**30, decimals) prints as `gib`."""
    half = Fraction(5, 10 ** (decimals + 1))
    lo = math.ceil(max(exact(gib) - half, Fraction(0)) * GiB)
    hi = math.floor((exact(gib) + half) * GiB)
    return lo, hi


def tokens_are_per_request(facts: VllmLogFacts, block_size: int) -> bool:
    """Whether the log's token count is int(concurrency x max_model_len) (0.33's one line, and the two-line logs of
    releases that already counted so) rather than num_blocks // groups x block_size (0.11-0.20): a count that is
    not a multiple of the block size can only be the former."""
    if facts.capacity_format == "one-line":
        return True
    return facts.kv_cache_tokens is not None and facts.kv_cache_tokens % block_size != 0


def blocks_from_log(facts: VllmLogFacts, *, bytes_per_block: int, num_groups: int, block_size: int, blocks_per_request: int | None) -> BlockEvidence | None:
    """The num_blocks values (and blocks per request) that reproduce every KV figure the log printed.

    - KV memory K GiB (Available / reserved): num_blocks = bytes // bytes_per_block for bytes printing as K.
    - two-line token count T (0.11-0.20): T = num_blocks // num_groups x block_size.
    - concurrency C (2 decimals): C = num_blocks / blocks_per_req.
    - one-line token count T (0.33): T = int(num_blocks / blocks_per_req x max_model_len).
    `blocks_per_request` (capacity's count under vLLM 0.33's rule) is used only when nothing else bounds num_blocks.
    """
    lo, hi = 0, None
    why: list[str] = []
    kv = facts.kv_cache_gib
    if kv is not None:
        b_lo, b_hi = printed_gib_bytes(kv)
        lo, hi = b_lo // bytes_per_block, b_hi // bytes_per_block
        why.append(f"{kv} GiB of KV cache // {bytes_per_block:,} B per block")
    tokens, length, conc = facts.kv_cache_tokens, facts.concurrency_max_model_len, facts.max_concurrency
    per_request = tokens_are_per_request(facts, block_size)
    if not per_request and tokens is not None:
        k = tokens // block_size
        lo, hi = max(lo, k * num_groups), min(hi if hi is not None else k * num_groups + num_groups - 1, k * num_groups + num_groups - 1)
        why.append(f"{tokens:,} tokens = num_blocks // {num_groups} groups x {block_size}")
    if hi is None:
        if per_request and tokens is not None and length and blocks_per_request:
            b = blocks_per_request
            lo, hi = cdiv(tokens * b, length), cdiv((tokens + 1) * b, length) - 1
            why.append(f"{tokens:,} tokens = int(num_blocks / {b} x {length:,}) (capacity's blocks per request)")
        else:
            return None
    if lo > hi:
        return BlockEvidence(lo, hi, (), "; ".join(why) + ": these lines contradict each other", consistent=False)
    if conc is None or hi - lo > 4096:
        return BlockEvidence(lo, hi, (), "; ".join(why))
    c_lo, c_hi = max(exact(conc) - HALF_CENT, Fraction(1, 10**6)), exact(conc) + HALF_CENT
    pairs: list[tuple[int, int]] = []
    for n in range(lo, hi + 1):
        first, last = math.ceil(n / c_hi), math.floor(n / c_lo)
        for b in range(max(first, 1), min(last, first + 10_000) + 1):
            if per_request and tokens is not None and length and not (tokens * b <= n * length < (tokens + 1) * b):
                continue
            pairs.append((n, b))
    why.append(
        f"{conc}x = num_blocks / blocks per request"
        + (f" and int(that x {length:,}) = {tokens:,}" if per_request and tokens is not None else "")
    )
    if not pairs:
        return BlockEvidence(lo, hi, (), "; ".join(why) + ": no whole number of blocks per request fits them all", consistent=False)
    ns = [n for n, _ in pairs]
    return BlockEvidence(min(ns), max(ns), tuple(sorted({b for _, b in pairs})), "; ".join(why))

