"""The README's example outputs are what the program prints now, on the default path (the default estimate, as a user
runs it). Each block is re-run from the command the README names, in a fresh process
without a GPU at the README's width, cut as the README cuts it, and compared line by line.

When the figures change on purpose, regenerate the blocks: `python tests/support/readme_examples.py`.
"""

from __future__ import annotations

import pytest

from tests.support.readme_examples import EXAMPLES, README, find_block, run_example


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.command_prefix.split()[1] for e in EXAMPLES])
def test_readme_example_is_current(example):
    block = find_block(README.read_text().splitlines(), example)
    assert block.lines, "empty example block"
    fresh = run_example(block)
    assert fresh == block.lines, f"the README's example of `{example.command_prefix}` is stale: run `python tests/support/readme_examples.py`"


def test_the_plan_example_uses_the_default_estimate():
    block = find_block(README.read_text().splitlines(), EXAMPLES[0])
    assert block.argv == ["plan", "--model", "openai/whisper-large-v3", "--gpu", "L4"] and block.columns == 110
    assert "--estimate" not in block.argv
