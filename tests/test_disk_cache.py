"""capacity's disk cache: a value is worked out once per key, and nothing found on disk is trusted blindly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity import disk_cache


def counting(value: object) -> tuple[list[int], object]:
    calls: list[int] = []

    def compute() -> object:
        calls.append(1)
        return value

    return calls, compute


def remember(key: dict, compute, shipped=None):  # type: ignore[no-untyped-def]
    return disk_cache.remembered("test-kind", key, compute, lambda v: v, lambda v: v, shipped=shipped)


def entry_files(root: str) -> list[Path]:
    return sorted(Path(root, "test-kind").glob("*.json"))


def test_a_value_is_worked_out_once_then_read_from_disk(session_cache_dir: str) -> None:
    calls, compute = counting({"tokens": 750})
    key = {"config_sha256": "a" * 64, "case": "once"}
    assert remember(key, compute) == {"tokens": 750}
    assert remember(key, compute) == {"tokens": 750}
    assert len(calls) == 1


def test_another_key_is_another_entry() -> None:
    calls, compute = counting([1, 2])
    remember({"case": "first"}, compute)
    remember({"case": "second"}, compute)
    assert len(calls) == 2


def test_a_corrupt_entry_is_ignored_and_rewritten(session_cache_dir: str) -> None:
    key = {"case": "corrupt"}
    path = Path(session_cache_dir, "test-kind", f"{disk_cache.key_digest('test-kind', key)}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"format": "capacity.cache/1", "val')
    calls, compute = counting(42)
    assert remember(key, compute) == 42
    assert len(calls) == 1
    assert json.loads(path.read_text())["value"] == 42


def test_a_foreign_entry_under_the_digest_is_not_trusted(session_cache_dir: str) -> None:
    """A file whose stored key is not the one asked for (copied, or a hash collision) is worked out again."""
    key = {"case": "foreign"}
    path = Path(session_cache_dir, "test-kind", f"{disk_cache.key_digest('test-kind', key)}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": disk_cache.FORMAT, "kind": "test-kind", "key": {"case": "other"}, "versions": disk_cache.versions(), "value": -1}))
    calls, compute = counting(7)
    assert remember(key, compute) == 7 and len(calls) == 1


def test_a_value_decode_rejects_is_worked_out_again() -> None:
    key = {"case": "undecodable"}
    disk_cache.write("test-kind", key, {"no": "tokens"})
    calls: list[int] = []

    def compute() -> dict:
        calls.append(1)
        return {"tokens": 3}

    got = disk_cache.remembered("test-kind", key, compute, lambda v: v, lambda stored: {"tokens": int(stored["tokens"])})
    assert got == {"tokens": 3} and calls == [1]


def test_a_new_version_of_the_code_is_a_new_key(monkeypatch: pytest.MonkeyPatch) -> None:
    key = {"case": "versions"}
    before = disk_cache.key_digest("test-kind", key)
    monkeypatch.setattr(disk_cache, "versions", lambda: {**disk_cache.code_versions(), "code": "edited"})
    assert disk_cache.key_digest("test-kind", key) != before


@pytest.mark.parametrize("how", ["env", "bypassed"])
def test_the_cache_can_be_left_out(how: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CAPACITY_CACHE_DIR", str(tmp_path))
    calls, compute = counting("x")
    if how == "env":
        monkeypatch.setenv("CAPACITY_NO_CACHE", "1")
        remember({"case": how}, compute)
        remember({"case": how}, compute)
    else:
        with disk_cache.bypassed():
            remember({"case": how}, compute)
            remember({"case": how}, compute)
    assert len(calls) == 2
    assert not list(tmp_path.iterdir())


def test_a_shipped_value_is_used_before_the_cache_and_without_computing() -> None:
    key = {"case": "shipped"}
    shipped = {disk_cache.shipped_digest("test-kind", key): "from the package"}
    calls, compute = counting("computed")
    assert remember(key, compute, shipped=shipped) == "from the package"
    assert not calls


def test_recording_computes_and_collects_every_value() -> None:
    key = {"case": "recording"}
    shipped = {disk_cache.shipped_digest("test-kind", key): "stale"}
    disk_cache.recording = {}
    try:
        calls, compute = counting("fresh")
        assert remember(key, compute, shipped=shipped) == "fresh"
        assert disk_cache.recording[disk_cache.shipped_digest("test-kind", key)] == {"kind": "test-kind", "key": key, "value": "fresh"}
        assert calls == [1]
    finally:
        disk_cache.recording = None


def test_usage_counts_entries_and_clear_removes_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CAPACITY_CACHE_DIR", str(tmp_path))
    for i in range(3):
        disk_cache.write("test-kind", {"i": i}, "v" * 10)
    root, kinds = disk_cache.usage()
    assert root == tmp_path
    assert [(k.kind, k.entries) for k in kinds] == [("test-kind", 3)]
    assert kinds[0].bytes == sum(f.stat().st_size for f in entry_files(str(tmp_path)))
    files, _ = disk_cache.clear()
    assert files == 3 and disk_cache.usage()[1] == ()


def test_the_bytecode_folder_counts_its_pyc_tree_and_clear_empties_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CAPACITY_CACHE_DIR", str(tmp_path))
    folder = disk_cache.bytecode_folder()
    assert folder == tmp_path / "bytecode"
    mirrored = folder / "usr" / "lib" / "site-packages" / "torch" / "__pycache__"
    mirrored.mkdir(parents=True)
    (mirrored / "__init__.cpython-312.pyc").write_bytes(b"x" * 7)
    (mirrored / "nn.cpython-312.pyc").write_bytes(b"x" * 5)
    (mirrored / "nn.cpython-312.pyc.140213").write_bytes(b"x")  # importlib's write, cut short
    assert [(k.kind, k.entries, k.bytes) for k in disk_cache.usage()[1]] == [("bytecode", 2, 12)]
    files, size = disk_cache.clear()
    assert (files, size) == (3, 13) and not folder.exists()


def test_no_bytecode_folder_when_the_cache_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPACITY_NO_CACHE", "1")
    assert disk_cache.bytecode_folder() is None


def test_an_unwritable_root_costs_only_the_next_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("CAPACITY_CACHE_DIR", str(blocker))
    calls, compute = counting(5)
    assert remember({"case": "unwritable"}, compute) == 5
    assert remember({"case": "unwritable"}, compute) == 5
    assert len(calls) == 2


def test_without_platformdirs_the_cache_is_the_xdg_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    monkeypatch.delenv("CAPACITY_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setitem(sys.modules, "platformdirs", None)  # import platformdirs raises ImportError
    assert disk_cache.root() == tmp_path / "capacity"
