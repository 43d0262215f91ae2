"""The example commands of README.md and of the documentation site (docs/**/*.md), run as written.

An example is a ```console block whose lines starting with `$ capacity ` are commands (a line ending in ` \\` goes on
on the next one); the lines after a command, up to the next command or the fence, are an excerpt of what it prints,
and `...` lines mark what the excerpt leaves out. The HTML comment on the line before the fence says how it runs
(Markdown and MkDocs show neither):

    <!-- capacity-example exit=0 columns=80 show="^model ..^knobs" show="^╭─ verdict.." -->

- `exit`: the exit code every command of the block must give (default 0);
- `columns`: the terminal width it runs at (COLUMNS; default 100);
- `stream`: `stdout` (default) or `stderr`, the stream the excerpt is cut from;
- `show` (repeatable): a segment of the output kept in the excerpt, `START..END`: regular expressions, from the first
  line matching START to the first line from there on matching END, both included (an empty START is the first line, an
  empty END the last); segments are joined by `...` lines. Without `show` the excerpt is the whole output;
- `gpu`: the command needs a GPU: it is parsed by the CLI (every option and value type must be right), not run;
- `needs=NAME`: skipped, saying why, while `capacity NAME` is not a command of the CLI (a command being built).

Commands run without a shell, in a fresh process without a GPU, on the default estimate (the fake-tensor trace), in
a temporary folder where the repository's top-level entries are linked: `examples/ci/serve.yaml` or a log under
`bench/vllm_logs/` are found as in a clone, and the files a command writes land in the temporary folder.
`tests/docs/test_examples.py` checks every example. When the program's output changes on purpose, rewrite the excerpts:

    python tests/support/readme_examples.py            # every example block of README.md and docs/, in place
    python tests/support/readme_examples.py README.md  # only these files
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
README = ROOT / "README.md"
DOCS = ROOT / "docs"
ELLIPSIS = "..."
MARKER = re.compile(r"^<!-- capacity-example(?P<attrs>.*?)-->\s*$")
PROMPT = "$ "


def example_files() -> list[Path]:
    """README.md and every Markdown page of the site (the hooks' notes included: they are shown on family pages)."""
    return [README, *sorted(DOCS.rglob("*.md"))]


@dataclass(frozen=True)
class Command:
    argv: list[str]  # after `capacity`
    shown: list[str]  # the excerpt the page shows
    start: int  # page line index of the first output line
    end: int  # page line index after the last output line

    @property
    def text(self) -> str:
        return shlex.join(["capacity", *self.argv])


@dataclass(frozen=True)
class Example:
    path: Path
    line: int  # 1-based line of the marker
    commands: list[Command]
    exit: int = 0
    columns: int = 100
    stream: str = "stdout"
    show: tuple[str, ...] = ()
    gpu: bool = False
    needs: str = ""
    attrs: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _attrs(text: str) -> tuple[dict[str, str], list[str], bool]:
    attrs: dict[str, str] = {}
    show: list[str] = []
    gpu = False
    for word in shlex.split(text):
        if word == "gpu":
            gpu = True
            continue
        key, sep, value = word.partition("=")
        if not sep or key not in ("exit", "columns", "stream", "show", "needs"):
            raise ValueError(f"unknown capacity-example attribute {word!r}")
        if key == "show":
            show.append(value)
        else:
            attrs[key] = value
    return attrs, show, gpu


def parse_examples(path: Path) -> list[Example]:
    """Every example block of one Markdown file; a console block of `$ capacity` lines without a marker is an error."""
    lines = path.read_text().splitlines()
    examples = []
    for i, line in enumerate(lines):
        if not line.startswith("```console"):
            continue
        close = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        body = list(range(i + 1, close))
        if not any(lines[j].startswith(PROMPT + "capacity") for j in body):
            continue
        marker = MARKER.match(lines[i - 1]) if i else None
        if marker is None:
            raise ValueError(f"{path.relative_to(ROOT)}:{i + 1}: a console block of capacity commands needs a <!-- capacity-example ... --> line before it")
        attrs, show, gpu = _attrs(marker.group("attrs"))
        commands: list[Command] = []
        j = i + 1
        while j < close:
            if not lines[j].startswith(PROMPT):
                raise ValueError(f"{path.relative_to(ROOT)}:{j + 1}: output before the first `$ capacity` line")
            text = lines[j][len(PROMPT) :]
            while text.endswith("\\"):
                j += 1
                text = text[:-1] + " " + lines[j].strip()
            argv = shlex.split(text)
            if argv[0] != "capacity":
                raise ValueError(f"{path.relative_to(ROOT)}:{j + 1}: an example runs `capacity`, not {argv[0]!r}")
            j += 1
            start = j
            while j < close and not lines[j].startswith(PROMPT):
                j += 1
            commands.append(Command(argv[1:], [line.rstrip() for line in lines[start:j]], start, j))
        examples.append(
            Example(
                path,
                i,
                commands,
                exit=int(attrs.get("exit", 0)),
                columns=int(attrs.get("columns", 100)),
                stream=attrs.get("stream", "stdout"),
                show=tuple(show),
                gpu=gpu,
                needs=attrs.get("needs", ""),
                attrs=attrs,
            )
        )
    return examples


def all_examples() -> list[Example]:
    return [example for path in example_files() for example in parse_examples(path)]


def excerpt(output: list[str], show: tuple[str, ...]) -> list[str]:
    """The lines of `output` the `show` segments keep, joined by `...` lines (the whole output without segments)."""
    lines = [line.rstrip() for line in output]
    while lines and not lines[-1]:
        lines.pop()
    if not show:
        return lines
    out: list[str] = []
    for n, segment in enumerate(show):
        first, sep, last = segment.partition("..")
        if not sep:
            raise ValueError(f"show={segment!r} needs START..END")
        begin = next((i for i, line in enumerate(lines) if re.search(first, line)), None) if first else 0
        if begin is None:
            raise ValueError(f"show={segment!r}: no line matches {first!r}")
        stop = next((i for i in range(begin, len(lines)) if re.search(last, lines[i])), None) if last else len(lines) - 1
        if stop is None:
            raise ValueError(f"show={segment!r}: no line from {first!r} on matches {last!r}")
        if n or begin:
            out.append(ELLIPSIS)
        out += lines[begin : stop + 1]
        if n == len(show) - 1 and stop < len(lines) - 1:
            out.append(ELLIPSIS)
    return out


@cache
def cli_commands() -> frozenset[str]:
    import typer.main

    from capacity.cli.app import app

    return frozenset(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def parse_only(argv: list[str]) -> None:
    """Parse a command as the CLI would (unknown options, bad values and missing arguments raise), without running it."""
    import typer.main

    from capacity.cli.app import app

    group = typer.main.get_command(app)
    ctx = group.make_context("capacity", list(argv))
    name, command, rest = group.resolve_command(ctx, [*ctx._protected_args, *ctx.args])  # type: ignore[attr-defined]
    assert command is not None, f"capacity has no command {name!r}"
    sub = command.make_context(name, rest, parent=ctx)
    if hasattr(command, "commands"):  # a group (`capacity cache info`): its subcommand must exist
        command.resolve_command(sub, [*sub._protected_args, *sub.args])  # type: ignore[attr-defined]


def run_command(example: Example, command: Command) -> tuple[int, list[str], str]:
    """(exit code, the excerpt of the chosen stream, stderr) of one command, in a fresh process without a GPU."""
    with tempfile.TemporaryDirectory() as work:
        for entry in ROOT.iterdir():
            if not entry.name.startswith("."):
                (Path(work) / entry.name).symlink_to(entry)
        env = {k: v for k, v in os.environ.items() if k not in ("CAPACITY_ESTIMATE", "COLUMNS", "LINES")}
        env.update(COLUMNS=str(example.columns), CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
        env.setdefault("HF_HUB_CACHE", str(Path(work) / "empty-hub"))
        env.setdefault("HF_HUB_OFFLINE", "1")
        code = "import sys; from capacity.cli.app import main; sys.exit(main(sys.argv[1:]))"
        proc = subprocess.run([sys.executable, "-c", code, *command.argv], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    stream = proc.stdout if example.stream == "stdout" else proc.stderr
    return proc.returncode, excerpt(stream.splitlines(), example.show), proc.stderr


def regenerate(paths: list[Path] | None = None) -> list[str]:
    """Rewrite the excerpts of every example (that shows output) from the program's output; returns what was re-run."""
    done = []
    for path in paths or example_files():
        examples = [e for e in parse_examples(path) if not e.gpu and not (e.needs and e.needs not in cli_commands())]
        lines = path.read_text().splitlines()
        for example in reversed(examples):  # from the bottom, so earlier line numbers stay right
            for command in reversed(example.commands):
                if not command.shown and not example.show:
                    continue
                code, fresh, stderr = run_command(example, command)
                if code != example.exit:
                    raise RuntimeError(f"{example.id}: `{command.text}` exited {code}, the page says {example.exit}: {stderr.strip()}")
                lines[command.start : command.end] = fresh
                done.append(f"{example.id}: {command.text}")
        path.write_text("\n".join(lines) + "\n")
    return done


if __name__ == "__main__":
    for line in regenerate([Path(p).resolve() for p in sys.argv[1:]] or None):
        print(f"regenerated {line}")
