"""Each stage's KV groups and blocks equal vLLM 0.33.0's own: bench/vllm_pp_kv_reference.py ran get_pp_indices,
get_global_kv_cache_groups, _project_kv_cache_groups_to_worker, _pool_bytes_per_block_from_builder and
get_kv_cache_configs on every stage's specs and memory (bench/results/vllm-pp-kv-reference-2026-12-01)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.gpu.catalog import gpu_by_name
from capacity.kv.pipeline_stages import engine_num_blocks, stage_kv
from capacity.model.registry import model_spec
from capacity.planning.stages import indexed_layer_specs
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.serving.pipeline import pipeline_stages
from capacity.source.resolve import resolve_model
from tests.support.paths import REPO_ROOT

REFERENCE = json.loads((REPO_ROOT / "bench" / "results" / "vllm-pp-kv-reference-2026-12-01" / "reference.json").read_text())
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "configs"


def _model(ref: str, tmp_path: Path) -> str:
    if ref.startswith("catalog:"):
        return ref.split(":", 1)[1].replace("--", "/", 1)
    (tmp_path / "config.json").write_text((FIXTURES / ref).read_text())
    return str(tmp_path)


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=[c["name"] for c in REFERENCE["cases"]])
def test_stage_blocks_equal_vllm_get_kv_cache_configs(case: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert REFERENCE["vllm_version"].startswith("0.33.0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    source = resolve_model(_model(case["config"], tmp_path))
    spec = model_spec(source)
    args = ServingArgs(tensor_parallel_size=case["tp"], pipeline_parallel_size=case["pp"], pp_layer_partition=case.get("partition"), max_model_len=case["max_model_len"])
    serving = resolve_serving(args, spec, gpu_by_name("H200"))
    layers = indexed_layer_specs(spec, serving, gpu_by_name("H200"))
    split = pipeline_stages(spec.decoder.num_layers, case["pp"], case.get("partition"))
    stages = [stage_kv(s.rank, layers, s.start, s.end, avail) for s, avail in zip(split, case["available"], strict=True)]
    for mine, theirs, s in zip(stages, case["stages"], split, strict=True):
        assert [s.start, s.end] == theirs["layers"]
        assert [g.num_layers for g in mine.groups] == theirs["group_layers"]
        assert mine.bytes_per_block == theirs["bytes_per_block"]
        assert mine.num_blocks == theirs["own_num_blocks"]
    assert [engine_num_blocks(stages)] == case["engine_num_blocks"]
