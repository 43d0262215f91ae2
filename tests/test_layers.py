"""The package keeps its shape: layers that import downwards only, no import cycle, small modules.

The order of layers is written once, as import-linter's `layers` contract in pyproject.toml (`.ci/run` runs
`lint-imports` too); these tests run the same contract and add what a contract cannot say.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter: pip install -e '.[test]'")

PACKAGES = ("capacity", "profilers", "reports")


def strongly_connected(graph) -> list[list[str]]:  # noqa: ANN001 - grimp's ImportGraph
    """The import cycles of the graph: each strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_one_that_imports_it_back():
    """Every import counts, those inside functions too, except the ones under `if TYPE_CHECKING:`: they never run,
    and two types that name each other (a ModelSpec's Family, a Family hook's ModelSpec) are no runtime cycle."""
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    assert strongly_connected(graph) == []


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    """The check above can fail: two modules that import each other inside functions are found."""
    pkg = tmp_path / "cyclic_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from cyclic_pkg import b\n")
    (pkg / "b.py").write_text("def g():\n    from cyclic_pkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyclic_pkg", cache_dir=None)
    assert strongly_connected(graph) == [["cyclic_pkg.a", "cyclic_pkg.b"]]


def test_imports_point_down_the_layers():
    """import-linter's contracts in pyproject.toml, as `lint-imports` runs them (type-only imports count here)."""
    from importlinter.cli import lint_imports

    cwd = os.getcwd()
    os.chdir(REPO_ROOT)
    try:
        assert lint_imports(config_filename=str(REPO_ROOT / "pyproject.toml"), no_cache=True, no_logo=True) == 0
    finally:
        os.chdir(cwd)


def test_every_subpackage_of_capacity_is_a_layer():
    """A new folder under capacity/ gets its place in the contract, so no folder escapes the import order."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    layers = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")["layers"]
    named = {name.strip() for layer in layers for name in layer.split("|")}
    capacity = REPO_ROOT / "capacity"
    folders = {f"capacity.{p.name}" for p in capacity.iterdir() if (p / "__init__.py").exists()}
    modules = {f"capacity.{p.stem}" for p in capacity.glob("*.py") if p.name != "__init__.py"}
    assert folders | modules <= named | {"capacity"}


def test_capacity_has_few_top_level_modules():
    """The folders carry the structure: at most ten modules sit at capacity/'s top level."""
    assert len(list((REPO_ROOT / "capacity").glob("*.py"))) <= 10


def python_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (REPO_ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_module_is_over_600_lines(path: Path):
    """One concept per module: a module that grows past 600 lines is split along its seams."""
    lines = len(path.read_text().splitlines())
    assert lines <= 600, f"{path.relative_to(REPO_ROOT)} has {lines} lines"
