"""--html, --csv, --json PATH and -o are checked before the plan, not after it (a plan takes seconds).

The planning functions are replaced by ones that fail the test if called: a bad path must be refused first,
in one line (exit 2), with nothing written.
"""

from __future__ import annotations

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT, BadInput
from reports.targets import Target, check_targets

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

PLAN = ["--model", "openai/whisper-tiny", "--gpu", "H200"]
LONG = "r" * 300 + ".html"  # longer than the 255 bytes a file name may have (ext4, tmpfs, xfs)


@pytest.fixture(autouse=True)
def no_planning(monkeypatch, tmp_path):
    """Any planning or profiling is a test failure; the commands run in an empty folder."""

    def planned(*args, **kwargs):
        raise AssertionError("planned before the output paths were checked")

    monkeypatch.setattr("capacity.cli.plan.plan_with_estimate", planned)
    monkeypatch.setattr("capacity.cli.check.plan_with_estimate", planned)
    monkeypatch.setattr("capacity.cli.profile.profile_with_progress", planned)
    monkeypatch.setattr("capacity.planning.sweep.run_sweep", planned)
    monkeypatch.chdir(tmp_path)


def refused(capsys, argv: list[str], *needles: str) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT, err
    assert out == "" and err.count("\n") == 1 and err.startswith("capacity: error: cannot write "), err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize("command", ["plan", "check"])
def test_missing_html_folder(capsys, tmp_path, command):
    refused(capsys, [command, *PLAN, "--html", "nope/r.html"], "--html nope/r.html", "folder nope does not exist")
    assert list(tmp_path.iterdir()) == []


def test_json_path_that_is_a_folder(capsys, tmp_path):
    (tmp_path / "out").mkdir()
    refused(capsys, ["plan", *PLAN, "--json", "out"], "--json out", "it is a folder")


def test_plan_csv_onto_a_file(capsys, tmp_path):
    (tmp_path / "tables").write_text("keep me")
    refused(capsys, ["plan", *PLAN, "--csv", "tables"], "--csv tables", "is a file")
    assert (tmp_path / "tables").read_text() == "keep me"


def test_name_too_long(capsys, tmp_path):
    refused(capsys, ["plan", *PLAN, "--html", LONG], "--html", "File name too long")
    assert list(tmp_path.iterdir()) == []


def test_sweep_csv_file_in_a_missing_folder(capsys):
    refused(capsys, ["sweep", *PLAN, "--max-num-seqs", "16,64", "--csv", "nope/grid.csv"], "--csv nope/grid.csv", "does not exist")


def test_sweep_csv_onto_a_folder(capsys, tmp_path):
    (tmp_path / "grid").mkdir()
    refused(capsys, ["sweep", *PLAN, "--max-num-seqs", "16,64", "--csv", "grid"], "--csv grid", "it is a folder")


def test_profile_output_folder(capsys):
    refused(capsys, ["profile", *PLAN, "--cpu-probe", "-o", "nope/p.json"], "--output nope/p.json", "does not exist")


def test_verify_json_path(capsys):
    refused(capsys, ["verify", *PLAN, "--cpu-probe", "--json", "nope/v.json"], "--json nope/v.json", "does not exist")


def test_same_path_twice(capsys):
    code = main(["plan", *PLAN, "--html", "x", "--json", "x"])
    _, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT and "--json x is also the path of --html" in err


def test_a_good_path_is_checked_and_left_alone(tmp_path):
    (tmp_path / "tables").mkdir()
    (tmp_path / "old.html").write_text("old")
    check_targets(Target("--html", tmp_path / "old.html"), Target("--csv", tmp_path / "tables", is_folder=True), Target("--json", tmp_path / "new.json"))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["old.html", "tables"]  # no probe file left, nothing created
    assert (tmp_path / "old.html").read_text() == "old"


def test_a_csv_folder_that_will_be_created_is_checked_in_its_parent(tmp_path):
    check_targets(Target("--csv", tmp_path / "new-tables", is_folder=True))
    assert not (tmp_path / "new-tables").exists()
    with pytest.raises(BadInput, match="folder .*missing does not exist"):
        check_targets(Target("--csv", tmp_path / "missing" / "tables", is_folder=True))

