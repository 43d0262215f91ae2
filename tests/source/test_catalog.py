"""The built-in catalog: every stored file is recorded (source, sha256) in the catalog README, and every index
entry resolves or is refused in one line."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from capacity.errors import BadInput
from capacity.source.catalog import MODEL_FILES, model_files, read_index
from capacity.source.parameter_table import FILE as PARAMETER_TABLE_FILE
from capacity.source.resolve import catalog, resolve_model
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

CATALOG = REPO_ROOT / "capacity" / "source" / "catalog"
README = (CATALOG / "README.md").read_text()
# Rows "| id | file | ... | `sha256` |" of the README tables.
ROW = re.compile(r"^\| (?P<id>[^|]+?) \| (?P<file>[^|]+?) \|.*`(?P<sha>[0-9a-f]{64})` \|$", re.MULTILINE)
RECORDED = {(m["id"], Path(m["file"]).name): m["sha"] for m in ROW.finditer(README)}


def _stored_files() -> list[tuple[str, str, Path]]:
    out = []
    for name in read_index()["models"]:
        for filename, path in model_files(name).items():
            out.append((name, filename, Path(str(path))))
    return out


@pytest.mark.parametrize(("name", "filename", "path"), _stored_files(), ids=lambda v: str(v) if isinstance(v, str) else "")
def test_every_stored_file_is_recorded_with_its_sha256(name: str, filename: str, path: Path) -> None:
    key = (name, filename if path.parent.name != "models" else path.name)
    assert key in RECORDED, f"{name} {filename} has no row in capacity/source/catalog/README.md"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == RECORDED[key], f"{path} changed since its source was recorded"
    json.loads(path.read_text())  # and it is JSON


def test_no_stray_files_in_model_folders() -> None:
    for folder in (CATALOG / "models").iterdir():
        if folder.is_dir():
            assert "config.json" in {p.name for p in folder.iterdir()}, folder
            assert {p.name for p in folder.iterdir()} <= {*MODEL_FILES, PARAMETER_TABLE_FILE}, folder  # Hub files, and capacity's parameter table


def test_unplannable_entries_are_refused_in_one_line() -> None:
    index = read_index()["models"]
    pending = [name for name, meta in index.items() if meta.get("plannable", True) is False]
    assert pending, "the catalog holds entries no family plans yet"
    for name in pending:
        assert name not in catalog()
        assert name in catalog(include_unplannable=True)
        assert index[name].get("not_plannable"), f"{name}: say why it cannot be planned"
        if index[name].get("plannable_with_limits"):  # resolves; the plan is refused unless the flag turns it off
            assert resolve_model(name).name == name and "--limit-mm-per-prompt" in index[name]["not_plannable"]
            continue
        with pytest.raises(BadInput, match="cannot be planned yet"):
            resolve_model(name)


def test_folder_entries_carry_their_preprocessor_config() -> None:
    source = resolve_model("openai/whisper-base")
    assert source.origin == "catalog"
    assert source.config["d_model"] == 512 and source.config["encoder_layers"] == 6
    assert source.preprocessor is not None and source.preprocessor["feature_size"] == 80


def test_models_json_lists_every_plannable_entry_with_its_tokens(capsys) -> None:  # type: ignore[no-untyped-def]
    """`capacity models --json`: one object per plannable entry (then the others, `plannable` false); Whisper's 30 s clip is 3,000 mel frames halved by
    its stride-2 convolution, 1,500 cross-attention keys per request."""
    import json

    from capacity.cli.app import main
    from capacity.source.resolve import catalog

    assert main(["models", "--json"]) == 0
    out = capsys.readouterr()
    rows = {row["id"]: row for row in json.loads(out.out)}
    assert [name for name, row in rows.items() if row["plannable"]] == list(catalog())
    assert set(rows) == set(catalog(include_unplannable=True))  # the rest with plannable false and the reason
    assert out.err == ""  # no library warnings
    whisper = rows["openai/whisper-large-v3"]
    assert whisper["family"] == "whisper" and whisper["is_encoder_decoder"]
    assert whisper["cross_attention_tokens_per_request"] == 3000 // 2 and whisper["max_tokens_per_item"] == {"audio": 3000 // 2}
    assert rows["meta-llama/Llama-3.1-8B-Instruct"]["max_tokens_per_item"] == {}
