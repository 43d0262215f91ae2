"""The documentation site (mkdocs.yml, docs/): its generated pages cover the program and the data they are written
from, and the hand-written pages name only files that exist. `.ci/run` builds the site with `mkdocs build --strict`;
these tests run the same generators (docs/hooks/) without MkDocs, so they also run where it is not installed."""

from __future__ import annotations

import re
import sys

import pytest

from tests.support.paths import REPO_ROOT

HOOKS = REPO_ROOT / "docs" / "hooks"
sys.path.insert(0, str(HOOKS))

import accuracy  # noqa: E402
import architecture  # noqa: E402
import catalogs  # noqa: E402
import cli_reference  # noqa: E402
import families  # noqa: E402


def test_the_command_reference_has_every_command_and_option_of_the_cli():
    page = cli_reference.cli_reference_page()
    group = cli_reference.cli_group()
    for name in cli_reference.command_names():
        assert f"`capacity {name}`" in page, name
        command = group
        for part in name.split():
            command = command.commands[part]  # type: ignore[attr-defined]
        for param in cli_reference.options(command):
            assert f"`{param.get_help_record(cli_reference.context(command, name))[0]}`" in page, (name, param.opts)
    plan = group.commands["plan"]  # type: ignore[attr-defined]
    assert len(cli_reference.options(plan)) > 20 and page.count("| `--gpu ") >= 5  # plan, check, sweep, profile, reconcile...


def test_the_gpu_catalog_page_lists_every_gpu_with_its_total():
    from capacity.gpu.catalog import load_catalog

    page = catalogs.gpu_catalog_page()
    for record in load_catalog():
        assert f"| {record.name} |" in page and f"{record.total_memory_bytes:,}" in page


def test_the_model_catalog_page_lists_every_plannable_model_and_says_why_the_others_are_not():
    from capacity.source.resolve import catalog

    page = catalogs.model_catalog_page()
    for entry in catalog(include_unplannable=True).values():
        assert f"{entry.name}" in page


def test_the_count_of_nvidia_smi_totals_is_the_catalogs():
    from capacity.gpu.catalog import load_catalog

    records = load_catalog()
    smi = [r for r in records if r.source == "nvidia-smi"]
    assert 0 < len(smi) < len(records)
    assert catalogs.nvidia_smi_count() == f"{len(smi)} of the {len(records)}"


def test_every_family_has_a_page_written_from_its_source():
    by_family = catalogs.models_by_family()
    index = families.family_index_page(by_family)
    for family in families.families():
        page = families.family_page(family, by_family.get(family.name, []))
        assert f"# {family.name}" in page and f"]({family.name}.md)" in index
        assert all(f"`{t}`" in page for t in family.model_types)


def test_the_accuracy_tables_come_from_the_newest_log_benchmark():
    folder, data = accuracy.predict_logs()
    markers = accuracy.markers()
    plannable = [r for r in data["rows"] if r["plannable"]]
    assert markers["predict-logs-rows"].count("\n") == len(plannable) + 1  # header, rule, one row per plannable log
    assert folder.name in markers["predict-logs-source"]
    held_out = data["summary"]["held-out"]["available_kv"]
    assert f"| held-out | available_kv | {held_out['n']} | {held_out['median_abs_percent']:.2f} % |" in markers["predict-logs-summary"]
    page = (REPO_ROOT / "docs" / "accuracy" / "index.md").read_text()
    assert all(f"<!-- capacity:{name} -->" in page for name in markers)


def test_the_accuracy_plots_are_drawn_from_the_same_data():
    pytest.importorskip("matplotlib", reason="the docs extra draws the plots; .ci/run builds the site after the tests")
    files = accuracy.figures()
    assert {f"accuracy/{term}.svg" for term in accuracy.TERMS} <= set(files)
    assert all(content.lstrip().startswith("<?xml") for content in files.values())
    _, data = accuracy.predict_logs()
    held_out = sum(1 for r in data["rows"] if r["plannable"] and r["split"] == "held-out" and (r["vllm"].get("weights") or 0) > 0)
    assert f"held-out ({held_out} logs)" in files["accuracy/weights.svg"]


def test_the_architecture_layers_are_the_import_contracts():
    block = architecture.layers_block()
    for layer in architecture.layers():
        assert " | ".join(name.replace(".", "/") for name in layer) in block


def test_the_pages_are_all_in_the_nav_or_generated():
    yml = (REPO_ROOT / "mkdocs.yml").read_text()
    pages = [p.relative_to(REPO_ROOT / "docs").as_posix() for p in (REPO_ROOT / "docs").rglob("*.md")]
    written = [p for p in pages if not p.startswith(("notes/", "hooks/"))]
    assert written and all(p in yml for p in written), [p for p in written if p not in yml]


PATH = re.compile(r"`((?:capacity|reports|profilers|bench|tests|examples|scripts|docs)/[\w./<>*{}-]+)`")


@pytest.mark.parametrize("page", sorted([*(REPO_ROOT / "docs").rglob("*.md"), REPO_ROOT / "README.md"]), ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_the_files_a_page_names_exist(page):
    missing = []
    for match in PATH.finditer(page.read_text()):
        path = match.group(1).split(":")[0].rstrip(".")
        if any(c in path for c in "<>*{}") or path.endswith("-"):
            continue  # a pattern (`capacity/model/families/<name>.py`), not a file
        if not (REPO_ROOT / path).exists() and not (REPO_ROOT / path.rstrip("/")).exists():
            missing.append(path)
    assert missing == []


def test_the_path_check_finds_paths():
    text = (REPO_ROOT / "docs" / "architecture.md").read_text()
    assert len(PATH.findall(text)) > 20


def test_the_readme_stays_short_and_points_to_the_site():
    readme = (REPO_ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert "](docs/index.md)" in readme and "mkdocs" in readme


@pytest.fixture(scope="module")
def plan_files(tmp_path_factory):
    """A plan's JSON and CSV files, written by the command as a user runs it (the formula estimate, which the
    conftest sets: these tests check the files' shape, not the figures)."""
    from capacity.cli.app import main

    out = tmp_path_factory.mktemp("plan-files")
    code = main(["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--json", str(out / "plan.json"), "--csv", str(out / "tables")])
    assert code == 0
    return out


def test_every_json_field_the_contract_names_is_in_a_plan(plan_files):
    import json

    document = json.loads((plan_files / "plan.json").read_text())
    page = (REPO_ROOT / "docs" / "reference" / "json.md").read_text()
    named = sorted({m for m in re.findall(r"`([a-z_]+(?:\.[a-z_]+|\[\])+)`", page) if m.split(".")[0].rstrip("[]") in document})
    assert len(named) > 20
    missing = []
    for path in named:
        node = document
        for part in path.split("."):
            key = part.removesuffix("[]")
            if not isinstance(node, dict) or key not in node:
                missing.append(path)
                break
            node = node[key]
            if part.endswith("[]"):
                assert isinstance(node, list), path
                node = node[0] if node else {}
    assert missing == []


def test_every_csv_file_the_exports_page_names_has_its_columns(plan_files):
    page = (REPO_ROOT / "docs" / "reference" / "exports.md").read_text()
    rows = re.findall(r"^\| `(\w+\.csv)` \| [^\n]* \| `([\w, ]+)` \|$", page, re.MULTILINE)
    assert len(rows) >= 8
    for name, columns in rows:
        path = plan_files / "tables" / name
        if name == "ranks.csv":  # written for a plan from a tensor-parallel profile only
            assert not path.exists()
            continue
        assert path.read_text().splitlines()[0] == ",".join(c.strip() for c in columns.split(",")), name
