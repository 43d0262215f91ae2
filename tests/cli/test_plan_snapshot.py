"""Moving code moves no number: `capacity plan --json` gives today what it gave before the layering move.

tests/fixtures/snapshot/plans.jsonl.gz holds 416 runs made on the code before the move (every catalog id, on an H200
and an L4, at TP 1 and 2, on both estimates; tests/support/plan_snapshot.py says how). The default run re-plans a
sample spread over them; `-m slow` re-plans every one.
"""

from __future__ import annotations

import json

import pytest

from tests.support import plan_snapshot

SAMPLE = 8
EXPECTED = {json.dumps(case["argv"]): case for case in plan_snapshot.read()}


def _case_id(argv: list[str]) -> str:
    tp = argv[argv.index("--tensor-parallel-size") + 1] if "--tensor-parallel-size" in argv else "1"
    return f"{argv[2]}-{argv[4]}-tp{tp}-{argv[6]}"


@pytest.mark.parametrize("argv", plan_snapshot.sample(plan_snapshot.cases(), SAMPLE), ids=_case_id)
def test_a_sample_of_plans_is_unchanged(argv: list[str]):
    assert plan_snapshot.differences(EXPECTED[json.dumps(argv)], plan_snapshot.run_case(argv)) == []


@pytest.mark.slow
@pytest.mark.parametrize("argv", plan_snapshot.cases(), ids=_case_id)
def test_every_plan_is_unchanged(argv: list[str]):
    assert plan_snapshot.differences(EXPECTED[json.dumps(argv)], plan_snapshot.run_case(argv)) == []


def test_the_snapshot_covers_every_catalog_id():
    assert {argv[2] for argv in plan_snapshot.cases()} <= {json.loads(k)[2] for k in EXPECTED}
    assert len(EXPECTED) == len(plan_snapshot.cases())


def test_a_changed_number_is_caught():
    """The comparison can fail: one byte of the KV figure changed is a difference in stdout."""
    case = next(c for c in EXPECTED.values() if "\"num_blocks\":" in c["stdout"])
    changed = {**case, "stdout": case["stdout"].replace('"num_blocks":', '"num_blocks":1', 1)}
    assert changed["stdout"] != case["stdout"]
    assert plan_snapshot.differences(case, changed) == ["stdout"]


def test_a_changed_error_line_is_caught_but_a_once_per_process_warning_is_not():
    case = next(iter(EXPECTED.values()))
    assert plan_snapshot.differences(case, {**case, "stderr": case["stderr"] + "capacity: error: something else\n"}) == ["stderr"]
    warned = {**case, "stderr": "[transformers] `causal_conv1d_fn` is falling back to its reference PyTorch implementation\n" + case["stderr"]}
    assert plan_snapshot.differences(case, warned) == []
