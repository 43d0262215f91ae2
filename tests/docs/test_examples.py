"""Every example command of README.md and of the documentation site runs as written, with the exit code the page
gives, and prints what the page shows (`tests/support/readme_examples.py` says how a page marks an example).

Each runs in a fresh process without a GPU on the default path (the fake-tensor trace), as a user runs it, with the
test session's one disk cache (tests/conftest.py `session_cache_dir`): a trace another test or example of this
session worked out is read from it, as a user's second plan reads the first's. When the figures change on purpose,
rewrite the excerpts: `python tests/support/readme_examples.py`.
"""

from __future__ import annotations

import pytest

from tests.support.readme_examples import README, all_examples, cli_commands, excerpt, parse_examples, parse_only, run_command

EXAMPLES = all_examples()


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example_runs_as_written(example):
    if example.needs and example.needs not in cli_commands():
        pytest.skip(f"`capacity {example.needs}` is not a command yet")
    for command in example.commands:
        if example.gpu:
            parse_only(command.argv)  # needs a GPU: the CLI must accept it as written
            continue
        code, fresh, stderr = run_command(example, command)
        assert code == example.exit, f"`{command.text}` exited {code}, the page says {example.exit}: {stderr.strip()}"
        if example.show:
            assert command.shown, f"{example.id}: the example shows no output yet: run `python tests/support/readme_examples.py`"
        if command.shown:
            assert fresh == command.shown, f"{example.id}: the output of `{command.text}` is stale: run `python tests/support/readme_examples.py`"


def test_the_readme_shows_the_six_commands_on_the_default_estimate():
    examples = parse_examples(README)
    commands = [c.argv[0] for e in examples for c in e.commands]
    assert {"plan", "fit", "check", "sweep", "profile", "reconcile"} <= set(commands)
    assert all("--estimate" not in c.argv for e in examples for c in e.commands)
    assert all(c.shown or e.needs or e.gpu for e in examples for c in e.commands), "every README example shows a sample of its output"


def test_an_excerpt_keeps_its_segments_in_order():
    lines = ["a", "b", "c", "d", "e", "f"]
    assert excerpt(lines, ("^b..^c", "^e..")) == ["...", "b", "c", "...", "e", "f"]
    assert excerpt(lines, ("..^b",)) == ["a", "b", "..."]
    assert excerpt(lines, ("^d..^d",)) == ["...", "d", "..."]
    assert excerpt(["x  ", "y", ""], ()) == ["x", "y"]


def test_a_command_that_needs_a_gpu_is_still_parsed():
    parse_only(["profile", "--model", "openai/whisper-large-v3", "-o", "profile.json"])
    with pytest.raises(Exception, match="no-such-option"):
        parse_only(["profile", "--model", "openai/whisper-large-v3", "--no-such-option"])


def test_an_example_waits_only_for_a_command_the_cli_lacks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        '<!-- capacity-example needs=plan show=".." -->\n```console\n$ capacity plan --model whisper-tiny\n```\n\n'
        "<!-- capacity-example needs=no-such-command -->\n```console\n$ capacity no-such-command \\\n    --flag\n```\n"
    )
    waits = [e for e in parse_examples(page) if e.needs not in cli_commands()]
    assert [e.commands[0].argv for e in waits] == [["no-such-command", "--flag"]]
    assert "plan" in cli_commands()
