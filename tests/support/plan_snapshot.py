"""The refactoring guard: `capacity plan --json` for every catalog id, kept so that a move of code moves no number.

    python -m tests.support.plan_snapshot                        # write tests/fixtures/snapshot/plans.jsonl.gz
    python -m tests.support.plan_snapshot --check                # regenerate every case, compare with the committed file
    python -m tests.support.plan_snapshot --check --sample 8     # only a spread sample of the cases
    python -m tests.support.plan_snapshot --check --shard 0/2    # every second case (run 0/2 and 1/2 side by side)
    python -m tests.support.plan_snapshot --update 'Qwen2.5-VL'  # re-run only the cases whose command matches, keep the rest
    python -m tests.support.plan_snapshot --merge A.gz B.gz      # one snapshot from shards written with --out and --shard

The committed file was first made on the code before the layering move (commit 46c0bbf, `bench/snapshot.py` then)
and guarded that move; it was written again on 2026-12-01 after changes that meant to move figures (issue 24's
hazards, suggestions and plurals; issue 26's traced families), each listed in the issues' closing notes; and on
2026-12-02 for vLLM 0.33's cuBLAS handles (in every JSON case non-torch 102,760,448 B less and the available KV as
much more, no other term, verdict or hazard changed) with the new key memory.graphs_after_budget_bytes. A check
compares today's plans with the committed ones: a change must be meant, and the file rewritten with it. tests/cli/test_plan_snapshot.py checks a sample in the default run and every
case under `-m slow`.

Each case is one command, run in this process through the CLI's own entry point exactly as a user types it:
`capacity plan --model ID --gpu GPU --estimate EST --json -` (plus `--tensor-parallel-size 2`), for every id in the
catalog's index (plannable or not: a refusal is a result too), on an H200 and an L4, at TP 1 and TP 2, on both
estimates. A case records its argv, exit code, stderr and stdout; stdout is the JSON with the timing fields
(`wall_s`, `created`, `profile_created`: how long a traced phase took on this machine, and when) removed and its keys sorted, so two runs of the same code
give the same bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "tests" / "fixtures" / "snapshot" / "plans.jsonl.gz"
GPUS = ("H200", "L4")
TENSOR_PARALLEL = (1, 2)
ESTIMATES = ("trace", "formula")
CITED_PATH = re.compile(r"\b(?:capacity|profilers|reports)/[\w/]+\.py\b")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?")  # a profile's date, quoted in text
TIMING_KEYS = frozenset({"wall_s", "created", "profile_created"})  # how long a traced phase took, and when: the fields that differ between runs


def catalog_ids() -> list[str]:
    """Every canonical id in the catalog's index.json, sorted (read as data: no capacity import)."""
    index = json.loads((ROOT / "capacity" / "source" / "catalog" / "index.json").read_text())
    return sorted(index["models"])


def cases() -> list[list[str]]:
    out = []
    for model in catalog_ids():
        for gpu in GPUS:
            for tp in TENSOR_PARALLEL:
                for estimate in ESTIMATES:
                    argv = ["plan", "--model", model, "--gpu", gpu, "--estimate", estimate, "--json", "-"]
                    if tp != 1:
                        argv += ["--tensor-parallel-size", str(tp)]
                    out.append(argv)
    return out


def sample(all_cases: list[list[str]], n: int) -> list[list[str]]:
    """n cases spread evenly over the list (so over models, GPUs, TP and estimates alike)."""
    if n >= len(all_cases):
        return all_cases
    step = len(all_cases) / n
    return [all_cases[int(i * step + step / 2)] for i in range(n)]


def _without_timing(value: Any) -> Any:
    if isinstance(value, str):
        return TIMESTAMP.sub("<time>", value)
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


# Keys added since the snapshot beside the plan, not in it: a plan that does not fit names the nearest configuration
# that does (capacity/planning/fit.py nearest_fit), a search of other knobs whose own figures tests/cli/test_fit.py checks.
ADDED_KEYS = frozenset({"nearest_fit"})


def normalized(stdout: str) -> str:
    """stdout as canonical JSON without timing fields (nor ADDED_KEYS); stdout that is not JSON is kept as it was."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return stdout
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k not in ADDED_KEYS}
    return json.dumps(_without_timing(data), sort_keys=True, separators=(",", ":"))


def run_case(argv: list[str]) -> dict[str, Any]:
    """One CLI run in this process, as `capacity ARGV` runs: exit code, stdout (normalized) and stderr."""
    from capacity.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return {"argv": argv, "exit": code, "stdout": normalized(out.getvalue()), "stderr": err.getvalue()}


def read(path: Path = SNAPSHOT) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        for line in f:
            yield json.loads(line)


# Words added since the snapshot that say where a figure was read, not what it is: a catalog entry's parameters are
# read from the table recorded beside its config (capacity/source/parameter_table.py) instead of a meta build.
PROVENANCE_WORDS = re.compile(r", recorded in the catalog")


# A count of one printed with a plural noun before capacity.units.plural ("1 groups x 2 x 256 reqs"): the same figure.
ONE_PLURAL = re.compile(r"\b1 (group|request)s\b")


def _cited_paths_masked(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    return ONE_PLURAL.sub(r"1 \1", PROVENANCE_WORDS.sub("", CITED_PATH.sub("<source file>", value)))


def _capacity_lines(stderr: str) -> str:
    """capacity's own lines on stderr (`capacity: error: ...`, `capacity: warning: ...`). Libraries' log lines are left
    out: transformers warns once per process, in a format that depends on how logging was set up before, so whether
    and how a case prints them depends on what ran before it in the same process."""
    return "".join(line for line in stderr.splitlines(keepends=True) if line.startswith("capacity: "))


def differences(expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """The fields of one case that differ, named (empty when the case is unchanged). The source files a method's
    text cites (`capacity/memory/cuda_graphs.py`) follow the code when it moves, so they are masked on both sides,
    as are PROVENANCE_WORDS."""
    out = [key for key in ("exit", "stdout") if _cited_paths_masked(expected[key]) != _cited_paths_masked(got[key])]
    if _capacity_lines(expected["stderr"]) != _capacity_lines(got["stderr"]):
        out.append("stderr")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=SNAPSHOT)
    ap.add_argument("--check", action="store_true", help="compare with the committed snapshot instead of writing it")
    ap.add_argument("--sample", type=int, default=None, help="only this many cases, spread over the list")
    ap.add_argument("--shard", default="0/1", help="I/N: only every N-th case from the I-th")
    ap.add_argument("--update", metavar="REGEX", help="re-run the cases whose command matches REGEX; keep the others from --out")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="SHARD", help="write --out from shards (each written with --out and --shard)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.merge or args.update:
        kept = {json.dumps(c["argv"]): c for path in (args.merge or [args.out]) for c in read(path)}
        for argv in cases():
            if args.update and re.search(args.update, " ".join(argv)):
                kept[json.dumps(argv)] = run_case(argv)
                print(f"updated: capacity {' '.join(argv)}", file=sys.stderr)
        missing = [argv for argv in cases() if json.dumps(argv) not in kept]
        if missing:
            print(f"{len(missing)} cases missing, e.g. capacity {' '.join(missing[0])}", file=sys.stderr)
            return 1
        write(args.out, [kept[json.dumps(argv)] for argv in cases()])
        return 0
    todo = cases() if args.sample is None else sample(cases(), args.sample)
    first, every = (int(x) for x in args.shard.split("/"))
    todo = todo[first::every]
    if args.check:
        expected = {json.dumps(c["argv"]): c for c in read(args.out)}
        bad = 0
        for argv in todo:
            if json.dumps(argv) not in expected:  # a catalog id added since the snapshot was written
                bad += 1
                print(f"not in the snapshot (regenerate it): capacity {' '.join(argv)}")
                continue
            got = run_case(argv)
            diff = differences(expected[json.dumps(argv)], got)
            if diff:
                bad += 1
                print(f"changed ({', '.join(diff)}): capacity {' '.join(argv)}")
        print(f"{len(todo) - bad} unchanged, {bad} changed")
        return 1 if bad else 0
    results = []
    for i, argv in enumerate(todo, 1):
        results.append(run_case(argv))
        print(f"{i}/{len(todo)} capacity {' '.join(argv)}", file=sys.stderr)
    write(args.out, results)
    return 0


def write(out: Path, results: list[dict[str, Any]]) -> None:
    """The snapshot file, written whole or not at all (gzip without a timestamp: same cases, same bytes)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with gzip.GzipFile(tmp, "wb", mtime=0) as raw, io.TextIOWrapper(raw, encoding="utf-8") as f:
        for result in results:
            f.write(json.dumps(result, sort_keys=True) + "\n")
    tmp.replace(out)


if __name__ == "__main__":
    sys.exit(main())
