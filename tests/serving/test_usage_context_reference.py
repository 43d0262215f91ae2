"""capacity's batch defaults for an engine built directly and for `vllm run-batch` against vLLM 0.33.0's own
EngineArgs.create_engine_config (bench/vllm_usage_context_reference.py; the committed numbers in
bench/results/vllm-usage-context-reference-2026-12-02/reference.json)."""

from __future__ import annotations

import json

import pytest

from capacity.serving.config import ServingArgs
from tests.support.paths import REPO_ROOT

REFERENCE = json.loads((REPO_ROOT / "bench" / "results" / "vllm-usage-context-reference-2026-12-02" / "reference.json").read_text())
CASES = [c for c in REFERENCE["cases"] if c["usage_context"] is not None]


def test_the_reference_is_vllm_0_33():
    assert REFERENCE["vllm"].startswith("0.33.") and len(CASES) == 10


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['model']}-{c['max_model_len_given']}-{c['usage_context']}")
def test_batch_defaults_equal_vllms(case):
    from capacity.gpu.catalog import gpu_by_name
    from capacity.model.registry import model_spec
    from capacity.planning.planner import serving_under
    from capacity.source.resolve import resolve_model
    from capacity.vllm.versions import LATEST

    spec = model_spec(resolve_model(case["model"]))
    args = ServingArgs(max_model_len=case["max_model_len_given"], usage_context=case["usage_context"].lower())
    for gpu in ("H200", "L4"):  # no GPU table applies to these contexts
        serving = serving_under(LATEST, args, spec, gpu_by_name(gpu))
        assert (serving.max_model_len, serving.max_num_batched_tokens, serving.max_num_seqs) == (
            case["max_model_len"],
            case["max_num_batched_tokens"],
            case["max_num_seqs"],
        )
