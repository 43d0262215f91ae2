"""The README's example outputs, re-run from the commands the README names.

Each example is a line of the README that starts with a backticked `capacity ...` command and says its width
("(110 columns; ..."), followed by a fenced block: an excerpt of what that command prints on a machine without a
GPU (the default estimate, the fake-tensor trace, for `plan`). `tests/docs/test_readme_examples.py` checks that every
block is what the program prints now. When the program's figures change, regenerate the blocks:

    python tests/support/readme_examples.py            # rewrites the README's example blocks in place
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
README = ROOT / "README.md"
FIXTURES = ROOT / "tests" / "fixtures" / "vllm_logs"
ELLIPSIS = "..."


def _plan_excerpt(lines: list[str]) -> list[str]:
    """Header, memory and KV tables, then the verdict: the budget/warmup table and the hazards are left out."""
    cut = next(i for i, line in enumerate(lines) if line.startswith("Encoder budget"))
    verdict = next(i for i, line in enumerate(lines) if line.startswith("╭─ verdict"))
    return [*lines[:cut], ELLIPSIS, *lines[verdict:]]


def _reconcile_excerpt(lines: list[str], shown: tuple[str, ...] = ("15", "17", "19")) -> list[str]:
    """The header and the table, then the explanations numbered `shown`."""
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    out = [*lines[: end + 1], ELLIPSIS]
    keep = False
    for line in lines[end + 1 :]:
        number = re.match(r"(\d+)\. ", line)
        if number:
            keep = number.group(1) in shown
        if keep:
            out.append(line)
    return [*out, ELLIPSIS]


@dataclass(frozen=True)
class Example:
    """An example block: the README line that introduces it, how to cut the output, and the files it needs."""

    command_prefix: str  # the backticked command at the start of the README line
    excerpt: Callable[[list[str]], list[str]]
    files: tuple[tuple[str, Path], ...] = ()  # (name in the working folder, file copied there)


EXAMPLES = (
    Example("capacity plan --model openai/whisper-large-v3 --gpu L4", _plan_excerpt),
    Example(
        "capacity reconcile vllm.log --model openai/whisper-large-v3 --gpu H200",
        _reconcile_excerpt,
        (("vllm.log", FIXTURES / "whisper-large-v3-h200-v0.33.0.log"),),
    ),
)


@dataclass(frozen=True)
class Block:
    example: Example
    argv: list[str]
    columns: int
    start: int  # README line index of the first line inside the fence
    end: int  # README line index of the closing fence
    lines: list[str]


def find_block(readme: list[str], example: Example) -> Block:
    """The README's block of `example`: its command and width from the introducing line, then the fenced lines."""
    intro = next(i for i, line in enumerate(readme) if line.startswith(f"`{example.command_prefix}`"))
    columns = int(re.search(r"\((\d+) columns", " ".join(readme[intro : intro + 2])).group(1))  # type: ignore[union-attr]
    fence = next(i for i in range(intro + 1, len(readme)) if readme[i].startswith("```"))
    close = next(i for i in range(fence + 1, len(readme)) if readme[i].startswith("```"))
    argv = shlex.split(example.command_prefix)[1:]
    return Block(example, argv, columns, fence + 1, close, readme[fence + 1 : close])


def run_example(block: Block) -> list[str]:
    """The excerpt of what the command prints now, in a fresh process without a GPU, at the README's width."""
    with tempfile.TemporaryDirectory() as work:
        for name, source in block.example.files:
            shutil.copy(source, Path(work) / name)
        env = {k: v for k, v in os.environ.items() if k not in ("CAPACITY_ESTIMATE", "COLUMNS", "LINES")}
        env.update(COLUMNS=str(block.columns), CUDA_VISIBLE_DEVICES="", HF_HUB_CACHE=str(Path(work) / "empty-hub"), PYTHONPATH=str(ROOT))
        code = "import sys; from capacity.cli.app import main; sys.exit(main(sys.argv[1:]))"
        proc = subprocess.run([sys.executable, "-c", code, *block.argv], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{shlex.join(['capacity', *block.argv])} exited {proc.returncode}: {proc.stderr.strip()}")
    return block.example.excerpt([line.rstrip() for line in proc.stdout.splitlines()])


def regenerate() -> list[str]:
    """Rewrite every example block of the README from the program's output; returns the commands re-run."""
    readme = README.read_text().splitlines()
    done = []
    for example in EXAMPLES:
        block = find_block(readme, example)
        readme[block.start : block.end] = run_example(block)
        done.append(example.command_prefix)
    README.write_text("\n".join(readme) + "\n")
    return done


if __name__ == "__main__":
    for command in regenerate():
        print(f"regenerated: {command}")
