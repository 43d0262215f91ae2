"""profilers/startup.py: the profile's step timings and the start-up costs kept out of a run (no GPU, no torch)."""

from __future__ import annotations

import gc
import py_compile
import sys
import time
import types
from pathlib import Path

import pytest

import profilers.startup as startup
from profilers.startup import (
    CANDIDATE_GENERATOR,
    UNUSED_IMPORTS,
    Timings,
    bytecode_note,
    cache_bytecode,
    freeze_heap,
    process_age_s,
    thaw_heap,
    without_unused_optional_imports,
)


def test_laps_tile_the_run_in_order():
    t = Timings(start=time.perf_counter())
    time.sleep(0.01)
    t.lap("first")
    t.lap("second")
    time.sleep(0.01)
    t.lap("first")  # a step timed twice adds up
    assert list(t.seconds) == ["first", "second"]
    assert t.seconds["first"] >= 0.02 and t.seconds["second"] >= 0
    assert t.total() == pytest.approx(sum(t.seconds.values()), abs=1e-3)


def test_process_age_is_the_time_since_this_process_started():
    age = process_age_s()
    if sys.platform != "linux":
        assert age is None or age >= 0
        return
    assert age is not None and 0 < age < 24 * 3600


def fake_transformers(monkeypatch) -> types.ModuleType:
    utils = types.ModuleType("transformers.utils")
    utils.is_sklearn_available = lambda: True  # type: ignore[attr-defined]
    utils.is_scipy_available = lambda: True  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformers.utils", utils)
    return utils


def module_level(name: str, flag: str, utils: types.ModuleType) -> tuple[bool, dict]:
    """What a module called `name` sees when its top level does `if <flag>(): ...`, as transformers' modules do,
    with the function it bound (`from ..utils import <flag>`) kept in its globals."""
    namespace = {"__name__": name, flag: getattr(utils, flag)}
    exec(f"answer = {flag}()", namespace)
    return namespace["answer"], namespace


def test_unused_packages_read_as_absent_only_to_the_modules_that_import_them_for_nothing(monkeypatch):
    utils = fake_transformers(monkeypatch)
    originals = (utils.is_sklearn_available, utils.is_scipy_available)
    with without_unused_optional_imports():
        assert module_level(CANDIDATE_GENERATOR, "is_sklearn_available", utils)[0] is False
        assert module_level("transformers.loss.loss_for_object_detection", "is_scipy_available", utils)[0] is False
        assert module_level("transformers.loss.loss_rt_detr", "is_scipy_available", utils)[0] is False
        _, detr_loss = module_level("transformers.loss.loss_deformable_detr", "is_scipy_available", utils)
        # a model's own use of the package sees it as it is
        assert module_level("transformers.models.fnet.modeling_fnet", "is_scipy_available", utils)[0] is True
        assert module_level("transformers.lossy", "is_scipy_available", utils)[0] is True
        assert module_level("transformers.modeling_utils", "is_sklearn_available", utils)[0] is True
        assert utils.is_scipy_available() is True  # this test's own module
    assert (utils.is_sklearn_available, utils.is_scipy_available) == originals
    exec("later = is_scipy_available()", detr_loss)
    assert detr_loss["later"] is False  # the module keeps the answer it saw


def test_the_packages_spared_are_the_ones_measured():
    assert {(u.flag, u.importers) for u in UNUSED_IMPORTS} == {
        ("is_sklearn_available", "transformers.generation.candidate_generator"),
        ("is_scipy_available", "transformers.loss"),
    }


def test_nothing_is_patched_without_transformers(monkeypatch):
    monkeypatch.delitem(sys.modules, "transformers.utils", raising=False)
    with without_unused_optional_imports():
        pass


def test_the_patch_is_undone_on_an_error(monkeypatch):
    utils = fake_transformers(monkeypatch)
    originals = (utils.is_sklearn_available, utils.is_scipy_available)
    with pytest.raises(RuntimeError), without_unused_optional_imports():
        raise RuntimeError("the build failed")
    assert (utils.is_sklearn_available, utils.is_scipy_available) == originals


def test_freeze_and_thaw_the_heap():
    if gc.get_freeze_count():
        pytest.skip("this process froze its heap already")
    frozen = freeze_heap()
    try:
        assert frozen and gc.get_freeze_count() > 0
        made_since = [[i] for i in range(1000)]  # 1,001 lists, tracked by the collector
        before = gc.get_freeze_count()
        assert freeze_heap() is False  # frozen already (by the caller): its first caller thaws...
        assert gc.get_freeze_count() >= before + len(made_since)  # ...what was made since too
        thaw_heap(False)  # nothing begun by us: nothing thawed
        assert gc.get_freeze_count() >= before + len(made_since)
    finally:
        thaw_heap(frozen)
    assert gc.get_freeze_count() == 0


def test_the_collector_is_paused_inside_and_back_as_it_was():
    assert gc.isenabled()
    with startup.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), startup.collector_paused():
        raise RuntimeError("an import failed")
    assert gc.isenabled()
    gc.disable()  # a caller that runs without the collector keeps it off
    try:
        with startup.collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_modules_are_imported_without_unused_optional_imports(monkeypatch):
    utils = fake_transformers(monkeypatch)
    seen = []

    def import_module(name: str) -> None:
        seen.append((name, module_level("transformers.loss.loss_utils", "is_scipy_available", utils)[0]))

    monkeypatch.setattr(startup.importlib, "import_module", import_module)
    startup.import_modules(["json", "transformers.modeling_utils"])
    assert seen == [("json", False), ("transformers.modeling_utils", False)]
    assert utils.is_scipy_available() is True


def test_the_heap_is_frozen_at_exit_once(monkeypatch):
    registered = []
    monkeypatch.setattr(startup.atexit, "register", registered.append)
    monkeypatch.setattr(startup, "_AT_EXIT", False)
    startup.freeze_heap_at_exit()
    startup.freeze_heap_at_exit()
    assert registered == [gc.freeze]


def a_package(tmp_path: Path, monkeypatch, compiled: bool) -> str:
    name = f"capacity_fake_pkg_for_bytecode_{tmp_path.name}"
    folder = tmp_path / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("x = 1\n")
    if compiled:
        py_compile.compile(str(folder / "__init__.py"), doraise=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_bytecode_note_when_python_compiles_the_package_in_every_run(tmp_path: Path, monkeypatch):
    name = a_package(tmp_path, monkeypatch, compiled=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    note = bytecode_note(name)
    assert note is not None and f"compiled {name} from source" in note and "PYTHONDONTWRITEBYTECODE is set" in note
    assert name not in sys.modules  # found, not imported


def test_no_bytecode_note_when_python_writes_the_cache(tmp_path: Path, monkeypatch):
    name = a_package(tmp_path, monkeypatch, compiled=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert bytecode_note(name) is None  # compiled once, this run


def test_no_bytecode_note_when_the_install_holds_valid_bytecode(tmp_path: Path, monkeypatch):
    name = a_package(tmp_path, monkeypatch, compiled=True)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert bytecode_note(name) is None


def test_stale_bytecode_counts_as_none(tmp_path: Path, monkeypatch):
    name = a_package(tmp_path, monkeypatch, compiled=True)
    (tmp_path / name / "__init__.py").write_text("x = 22\n")  # the source changed size: the .pyc is stale
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert bytecode_note(name) is not None


def test_no_bytecode_note_for_what_is_not_installed():
    assert bytecode_note("capacity_no_such_package_anywhere") is None


def a_fresh_process(monkeypatch, name: str, dont_write: bool = True) -> None:
    """This process as a new one would start: `name` not imported, no bytecode prefix, PYTHONDONTWRITEBYTECODE as given."""
    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(sys, "dont_write_bytecode", dont_write)


def test_a_package_compiled_in_every_run_is_cached_in_capacitys_folder_and_loaded_from_there_next_run(tmp_path: Path, monkeypatch):
    name = a_package(tmp_path / "site", monkeypatch, compiled=False)
    folder = tmp_path / "cache" / "bytecode"
    a_fresh_process(monkeypatch, name)
    first = cache_bytecode(folder, name)
    assert first is not None and not first.had_torch and "PYTHONDONTWRITEBYTECODE is set" in first.why
    assert sys.pycache_prefix == str(folder) and sys.dont_write_bytecode is False
    __import__(name)
    written = list(folder.rglob("*.pyc"))
    assert [p.name.split(".")[0] for p in written] == ["__init__"]
    assert not (tmp_path / "site" / name / "__pycache__").exists()  # nothing beside the source
    a_fresh_process(monkeypatch, name)  # the next run
    second = cache_bytecode(folder, name)
    assert second is not None and second.had_torch
    assert "loaded" in second.note() and str(folder) in second.note() and "compiled them" in first.note()


def test_no_bytecode_cache_when_the_cache_is_off_or_python_needs_none(tmp_path: Path, monkeypatch):
    name = a_package(tmp_path / "site", monkeypatch, compiled=False)
    a_fresh_process(monkeypatch, name)
    assert cache_bytecode(None, name) is None  # --no-cache / CAPACITY_NO_CACHE=1
    a_fresh_process(monkeypatch, name, dont_write=False)
    assert cache_bytecode(tmp_path / "bytecode", name) is None  # Python writes it beside the source itself
    assert sys.pycache_prefix is None and not (tmp_path / "bytecode").exists()
    compiled = a_package(tmp_path / "other", monkeypatch, compiled=True)
    a_fresh_process(monkeypatch, compiled)
    assert cache_bytecode(tmp_path / "bytecode", compiled) is None  # the install holds it
    assert sys.pycache_prefix is None


def test_no_bytecode_cache_once_the_package_is_imported(tmp_path: Path, monkeypatch):
    name = a_package(tmp_path / "site", monkeypatch, compiled=False)
    a_fresh_process(monkeypatch, name)
    __import__(name)
    assert cache_bytecode(tmp_path / "bytecode", name) is None and sys.pycache_prefix is None
