"""capacity.units.plural: every count the reports print takes the noun in the right number."""

from __future__ import annotations

import pytest

from capacity.cli.app import main
from capacity.units import plural


@pytest.mark.parametrize(
    ("n", "noun", "form", "text"),
    [(1, "request", "", "1 request"), (2, "request", "", "2 requests"), (0, "group", "", "0 groups"), (1, "group", "", "1 group"),
     (1_024, "entry", "entries", "1,024 entries"), (1, "entry", "entries", "1 entry")],
)
def test_plural(n, noun, form, text):
    assert plural(n, noun, form) == text


def test_a_plan_holding_one_request_says_request(capsys, monkeypatch):
    # whisper-large-v3 on an H200: 2,621,440 B per block (test_gate.py); 123 blocks leave 122 usable, one request's 28 + 94
    monkeypatch.setenv("COLUMNS", "200")
    main(["plan", "--model", "openai/whisper-large-v3", "--gpu", "H200", "--kv-cache-memory-bytes", str(123 * 2_621_440)])
    out = " ".join(capsys.readouterr().out.split())
    assert "= 1 request at max_model_len" in out and "1 requests" not in out
