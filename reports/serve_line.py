"""The suggested `vllm serve` line cut into its flag groups ("vllm serve MODEL", "--flag value", ...), so that a
report wraps it only between flags: the HTML keeps each group whole, the terminal breaks its lines between them."""

from __future__ import annotations

import shlex


def flag_groups(command: str) -> list[str]:
    """`vllm serve m --a 1 --b` -> ["vllm serve m", "--a 1", "--b"]; quoting as shlex.quote writes it (the suggestion
    quotes its values the same way, so the groups joined by spaces are the command)."""
    groups: list[list[str]] = []
    for token in shlex.split(command):
        if token.startswith("--") or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return [shlex.join(group) for group in groups]


def wrapped(command: str, width: int, first_prefix: str = "", indent: str = "  ") -> list[str]:
    """The command in lines of at most `width` characters where the groups allow, broken only between flag groups,
    each broken line ending in a shell continuation (` \\`) so the lines paste as one command."""
    lines: list[str] = []
    line = first_prefix
    for group in flag_groups(command):
        candidate = f"{line} {group}" if line.strip() else f"{line}{group}"
        if line.strip() and len(candidate) + 2 > width:
            lines.append(line + " \\")
            line = indent + group
        else:
            line = candidate
    lines.append(line)
    return lines
