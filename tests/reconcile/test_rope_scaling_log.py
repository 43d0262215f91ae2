"""A vLLM 0.10.0 start served with `--rope-scaling` (bench/vllm_logs/qwen3-32b-4xh100-tp4-yarn4-len131072-util0.95-v0.10.0.log,
DaisukeTakai/eval_dataset): its non-default args line holds 'rope_scaling': {'rope_type': 'yarn', 'factor': 4.0,
'original_max_position_embeddings': 32768} and 'max_model_len': 131072, which 0.10.0 accepts (32,768 x 4 = 131,072)
over the config's 40,960; every rank printed 'Model loading took 15.4115 GiB'."""

from __future__ import annotations

import json

from capacity.cli.app import main
from capacity.reconcile.log_inputs import knobs_from_log
from capacity.vllm.log_startups import load_vllm_startups
from tests.support.paths import REPO_ROOT

LOG = REPO_ROOT / "bench" / "vllm_logs" / "qwen3-32b-4xh100-tp4-yarn4-len131072-util0.95-v0.10.0.log"
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


def test_the_logged_rope_scaling_is_planned_as_hf_overrides() -> None:
    facts = load_vllm_startups(LOG)[0]
    assert knobs_from_log(facts, effective=False)["hf_overrides"] == {"rope_scaling": YARN}


def test_reconcile_plans_the_yarn_start_without_refusing_its_length(capsys) -> None:
    code = main(["reconcile", str(LOG), "--gpu", "H100-SXM", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    rows = {r["key"]: r for r in report["rows"]}
    assert rows["max_model_len"]["capacity_value"] == 131072
    weights = report["capacity_figures"]["weights"]
    assert abs(weights - 15.4115) / 15.4115 < 0.001  # YaRN's rotary cache at 131,072 positions counted
