"""`capacity cache info|clear`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity import disk_cache
from capacity.cli.app import main

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")


def test_info_shows_the_folder_and_entries_per_kind_and_clear_empties_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CAPACITY_CACHE_DIR", str(tmp_path))
    disk_cache.write("trace", {"a": 1}, {"x": 1})
    disk_cache.write("trace", {"a": 2}, {"x": 2})
    disk_cache.write("item-tokens", {"a": 1}, 3)
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["folder"] == str(tmp_path)
    assert {k["kind"]: k["entries"] for k in info["kinds"]} == {"item-tokens": 1, "trace": 2}
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out and "trace" in out
    assert main(["cache", "clear"]) == 0
    assert "removed 3 entries" in capsys.readouterr().out
    assert disk_cache.usage()[1] == ()


def test_info_says_when_the_cache_is_off(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CAPACITY_NO_CACHE", "1")
    assert main(["cache", "info"]) == 0
    assert "off" in capsys.readouterr().out
