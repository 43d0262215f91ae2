"""Catalog parameter tables: what the meta build gives, recorded beside each config, and used only for that config."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from capacity.gpu.catalog import gpu_by_name
from capacity.memory import weights
from capacity.model.registry import model_spec
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.source.parameter_table import ParameterTable, read_parameter_table
from capacity.source.resolve import resolve_model
from scripts.make_parameter_tables import built_table, planned_entries
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")


def test_every_planned_catalog_entry_has_the_table_of_its_own_config() -> None:
    for entry in planned_entries():
        source = resolve_model(entry.name)
        table = read_parameter_table(source.parameter_table, entry.name)
        assert table is not None, f"{entry.name}: no parameter table (run scripts/make_parameter_tables.py)"
        assert table.config_sha256 == source.config_sha256, entry.name
        assert table.family == model_spec(source).family.name, entry.name
        assert table.parameters and len({name for name, _ in table.parameters}) == len(table.parameters), entry.name


@pytest.mark.parametrize("name", ["openai/whisper-tiny", "google-t5/t5-small", "Qwen/Qwen3.5-0.8B", "OpenGVLab/InternVL3-8B"])
def test_a_table_is_what_this_install_builds(name: str) -> None:
    """Regenerated with the installed torch and transformers, a sample of tables (four families, one listed from its
    config) is unchanged; `python scripts/make_parameter_tables.py --check` does every entry (-m slow below)."""
    entry = next(e for e in planned_entries() if e.name == name)
    built, path = built_table(entry)
    recorded = read_parameter_table(path, str(path))
    assert recorded is not None
    assert (recorded.config_sha256, recorded.family, recorded.parameters) == (built.config_sha256, built.family, built.parameters)


@pytest.mark.slow
def test_every_table_is_what_this_install_builds() -> None:
    done = subprocess.run([sys.executable, "scripts/make_parameter_tables.py", "--check"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_table_round_trips_through_its_file_format(tmp_path) -> None:  # type: ignore[no-untyped-def]
    table = ParameterTable("c" * 64, "whisper", "built on the meta device", {"torch": "2.13.0"}, (("a.weight", (4, 2)), ("a.bias", (4,)), ("s", ())))
    path = tmp_path / "capacity.parameters.json"
    path.write_text(table.to_json())
    assert read_parameter_table(path, "t") == table
    assert json.loads(path.read_text())["format"] == "capacity.parameters/1"


def test_the_weights_term_reads_the_table_and_says_so() -> None:
    source = resolve_model("openai/whisper-tiny")
    spec = model_spec(source)
    tensors, how = weights.model_tensors(spec, source)
    table = read_parameter_table(source.parameter_table, "whisper-tiny")
    assert table is not None
    assert [(t.name, t.shape) for t in tensors] == list(table.parameters)
    assert how.endswith("built on the meta device, recorded in the catalog")


def test_a_table_made_from_another_config_is_not_used() -> None:
    """An edited config (here one more decoder layer) is built on the meta device, never read from the stale table."""
    source = resolve_model("openai/whisper-tiny")
    config = {**source.config, "decoder_layers": source.config["decoder_layers"] + 1}
    edited = replace(source, config=config)
    spec = model_spec(edited)
    tensors, how = weights.model_tensors(spec, edited)
    assert "recorded" not in how
    per_layer = [n for n, _ in read_parameter_table(source.parameter_table, "t").parameters if n.startswith("model.decoder.layers.0.")]  # type: ignore[union-attr]
    assert len(tensors) == len(read_parameter_table(source.parameter_table, "t").parameters) + len(per_layer)  # type: ignore[union-attr]


def test_the_table_and_the_meta_build_plan_the_same_weights() -> None:
    """At TP 2 (the per-rank layout reads every tensor's name), the table gives the bytes the meta build gives."""
    source = resolve_model("Qwen/Qwen3.5-0.8B")
    spec = model_spec(source)
    serving = resolve_serving(ServingArgs(tensor_parallel_size=2), spec, gpu_by_name("H200"))
    weights._WEIGHTS.clear()
    from_table = weights.weights_term(spec, source, serving)[0].bytes
    weights._WEIGHTS.clear()
    from_build = weights.weights_term(spec, replace(source, parameter_table=None), serving)[0].bytes
    assert from_table == from_build
