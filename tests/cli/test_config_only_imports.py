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


def test_formula_plans_of_every_catalog_entry_import_neither_torch_nor_transformers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """In one fresh process with an empty disk cache: plan, check and sweep of every plannable catalog entry."""
    ids = list(catalog())
    runs = [f"plan|--model|{m}|--gpu|L4|--estimate|formula|--json" for m in ids]
    runs += [f"plan|--model|{m}|--gpu|H200|--tensor-parallel-size|2|--estimate|formula" for m in ids]
    runs += ["plan|--model|LiquidAI/LFM2.5-VL-1.6B|--limit-mm-per-prompt|image=0|--estimate|formula"]
    runs += [f"check|--model|{m}|--gpu|H200|--estimate|formula|--min-concurrency|1" for m in ids[:5]]
    runs += ["sweep|--model|Qwen/Qwen2.5-VL-7B-Instruct|--gpu|L4,H200|--max-num-seqs|8,64|--estimate|formula"]
    env = {"CAPACITY_CACHE_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", PROGRAM, *runs], cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    heavy, failed = eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr
    assert failed == []
    assert heavy == []
