"""Byte units. Sizes are integers of bytes everywhere; GiB appear only when printing."""

from __future__ import annotations

import math
import re

from capacity.errors import BadInput

KiB = 1024
MiB = 1024**2
GiB = 1024**3


def cdiv(a: int, b: int) -> int:
    """Ceiling division (vLLM: cdiv)."""
    return -(a // -b)


def gib(n: int | float) -> str:
    """Format a byte count as GiB with two decimals, as vLLM logs it."""
    return f"{n / GiB:.2f} GiB"


def mib(n: int | float) -> str:
    return f"{n / MiB:.1f} MiB"


# vLLM's human-readable integers (vllm/utils/argparse_utils: parse_human_readable_int):
# lower-case suffixes are decimal (k=1e3, m=1e6, g=1e9, t=1e12), upper-case binary
# (K=2^10, M=2^20, G=2^30, T=2^40); fractions are allowed only with decimal suffixes.
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtKMGT]?)\s*$")


def plural(n: int, noun: str, plural_form: str = "") -> str:
    """A count and its noun in the right number: `1 request`, `2 requests`, `1,024 groups` (`plural_form` where the
    plural is not noun + s)."""
    return f"{n:,} {noun if n == 1 else plural_form or noun + 's'}"


SIZE_FORMS = "use e.g. 10737418240, 10G (2^30) or 10g (1e9)"
COUNT_FORMS = "give a whole number, e.g. 8192, 8k (8,000) or 8K (8,192)"
MAX_MODEL_LEN_FORMS = "give a token count, e.g. 32768, 32k (32,000) or 32K (32,768), or auto / -1 to fit it to memory"


def parse_human_int(text: str | int, what: str, forms: str = SIZE_FORMS) -> int:
    """Parse `10G`, `1.5g`, `1024` the way `vllm serve` does; BadInput names `what` and the accepted `forms` on error."""
    if isinstance(text, bool):
        raise BadInput(f"{what}: expected an integer, got {text!r}")
    if isinstance(text, int):
        return text
    m = _HUMAN.match(str(text))
    if not m:
        raise BadInput(f"{what}: cannot read {text!r}; {forms}")
    number, suffix = m.groups()
    if suffix in _BINARY:
        if "." in number:
            raise BadInput(f"{what}: {text!r} has a fraction with a binary suffix; vLLM allows fractions only with k/m/g/t")
        return int(number) * _BINARY[suffix]
    if suffix in _DECIMAL:
        return int(math.floor(float(number) * _DECIMAL[suffix]))
    if "." in number:
        raise BadInput(f"{what}: {text!r} is not a whole number")
    return int(number)
