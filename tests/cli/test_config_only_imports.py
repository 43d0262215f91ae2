"""`--estimate formula` plans of every catalog entry import neither torch nor transformers (issue 23's config-only
path: parameter tables and shipped values instead of meta builds and processor classes). Timings are benchmarks
(bench/speed), not tests."""

from __future__ import annotations

import subprocess
import sys

from capacity.source.resolve import catalog
from tests.support.paths import REPO_ROOT

PROGRAM = """
import contextlib, io, sys
from capacity.cli.app import main
failed = []
for argv in [a.split("|") for a in sys.argv[1:]]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(argv)
    if code not in (0, 1):
        failed.append((argv, code, err.getvalue()))
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print(repr((heavy, failed)))
"""


def fresh_env(tmp_path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """A process with nothing of this machine's: an empty disk cache and HF home under `tmp_path`, offline."""
    return {"CAPACITY_CACHE_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin"}


def test_formula_plans_of_every_catalog_entry_import_neither_torch_nor_transformers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """In one fresh process with an empty disk cache: plan, check and sweep of every plannable catalog entry."""
    ids = list(catalog())
    runs = [f"plan|--model|{m}|--gpu|L4|--estimate|formula|--json" for m in ids]
    runs += [f"plan|--model|{m}|--gpu|H200|--tensor-parallel-size|2|--estimate|formula" for m in ids]
    runs += ["plan|--model|LiquidAI/LFM2.5-VL-1.6B|--limit-mm-per-prompt|image=0|--estimate|formula"]
    runs += [f"check|--model|{m}|--gpu|H200|--estimate|formula|--min-concurrency|1" for m in ids[:5]]
    runs += ["sweep|--model|Qwen/Qwen2.5-VL-7B-Instruct|--gpu|L4,H200|--max-num-seqs|8,64|--estimate|formula"]
    env = fresh_env(tmp_path)
    done = subprocess.run([sys.executable, "-c", PROGRAM, *runs], cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    heavy, failed = eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr
    assert failed == []
    assert heavy == []


COMMAND_MODULES = {
    "capacity.cli.plan",
    "capacity.cli.profile",
    "capacity.cli.reconcile",
    "capacity.cli.check",
    "capacity.cli.sweep",
    "capacity.cli.fit",
    "capacity.cli.catalogs",
    "capacity.cli.cache",
}


def command_modules_after(argv: list[str], tmp_path) -> set[str]:  # type: ignore[no-untyped-def]
    code = (
        "import contextlib, io, sys\n"
        "from capacity.cli.app import main\n"
        "with contextlib.redirect_stdout(io.StringIO()): code = main(sys.argv[1:])\n"
        f"print(code, *sorted(m for m in sys.modules if m in {sorted(COMMAND_MODULES)!r}))"
    )
    env = fresh_env(tmp_path)
    done = subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=120, check=True)
    code, *modules = done.stdout.split()
    assert code in ("0", "1"), done.stderr
    return set(modules)


def test_a_command_imports_its_own_module_and_not_the_other_commands(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert command_modules_after(["gpus", "--json"], tmp_path) == {"capacity.cli.catalogs"}
    assert command_modules_after(["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--estimate", "formula", "--json"], tmp_path) == {
        "capacity.cli.plan"
    }
    assert command_modules_after(["cache", "info"], tmp_path) == {"capacity.cli.cache"}


def test_the_top_level_help_lists_every_command(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert command_modules_after(["--help"], tmp_path) == COMMAND_MODULES
