"""`--vllm-version` on plan, sweep and check, on the default (trace) path. The expected figures are worked from
capacity/vllm/versions.py's rules (vLLM's own defaults, read from the wheels: bench/vllm_versions/SOURCES.md) and the
catalog's totals, not from the program's output:

- A100-80GB, CUDA total 84,986,665,369 B: 0.10.2 (rules 0.8-0.10) requests ceil(total x 0.9) = 76,487,998,833 B
  (total x 9 = 764,879,988,321, / 10 = ...832.1), 0.33 ceil(total x 0.92) = 78,187,732,140 B (total x 92 =
  7,818,773,213,948, / 100 = ...139.48). Both batch 2048 tokens / 256 sequences: EngineArgs.get_batch_defaults leaves
  A100s out of the >= 70 GiB tier. 0.10.2 sets no memory aside for CUDA graphs (they are captured after the KV budget);
  0.33 subtracts its estimate.
- Qwen3-8B: 36 layers x 8 KV heads x 128 head dim x 2 (K, V) x 2 B x 16 tokens = 2,359,296 B per block.
- B200, 192,265,846,784 B = 179.06 GiB: 0.33's >= 160 GiB tier gives 16,384 tokens / 1,024 sequences; 0.10.2 has no
  such tier: >= 70 GiB, not an A100, `vllm serve` (openai_api_server) gives 8,192 / 1,024.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT

A100_TOTAL = 84_986_665_369
BYTES_PER_BLOCK = 36 * 8 * 128 * 2 * 2 * 16


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code = main(["plan", "--model", "Qwen/Qwen3-8B", "--gpu", "A100-80GB", "--offline", *argv, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_qwen3_8b_on_an_a100_with_0_10_2_and_0_33(capsys: pytest.CaptureFixture[str]) -> None:
    old, new = plan_json(capsys, "--vllm-version", "0.10.2"), plan_json(capsys, "--vllm-version", "0.33")
    assert math.ceil(A100_TOTAL * 9 / 10) == 76_487_998_833 and math.ceil(A100_TOTAL * 92 / 100) == 78_187_732_140  # the hand arithmetic
    assert old["memory"]["requested_bytes"] == 76_487_998_833 and new["memory"]["requested_bytes"] == 78_187_732_140
    assert (old["serving"]["gpu_memory_utilization"], new["serving"]["gpu_memory_utilization"]) == (0.9, 0.92)
    for doc in (old, new):
        assert (doc["serving"]["max_num_batched_tokens"], doc["serving"]["max_num_seqs"]) == (2048, 256)
        kv = doc["kv_cache"]
        assert kv["bytes_per_block"] == BYTES_PER_BLOCK and kv["num_blocks"] == kv["available_bytes"] // BYTES_PER_BLOCK
        assert kv["available_bytes"] == doc["memory"]["requested_bytes"] - doc["memory"]["non_kv_bytes"]
    assert old["memory"]["cuda_graphs"]["bytes"] == 0 and new["memory"]["cuda_graphs"]["bytes"] > 0
    assert (old["fingerprint"]["vllm_version"], old["fingerprint"]["vllm_rules"]) == ("0.10.2", "0.8-0.10")
    assert (new["fingerprint"]["vllm_version"], new["fingerprint"]["vllm_rules"]) == ("0.33.0", "0.33")
    assert "--gpu-memory-utilization 0.9" in old["suggested_command"] and old["suggested_command"].endswith("0.9")
    assert new["suggested_command"].endswith("--gpu-memory-utilization 0.92")
    assert any(n.startswith("planned with vLLM 0.10.2 (0.8-0.10 rules)") for n in old["notes"])


def test_a_sweep_over_two_releases_takes_each_ones_batch_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "sweep.csv"
    code = main(["sweep", "--model", "Qwen/Qwen3-8B", "--gpu", "B200", "--max-model-len", "8192", "--vllm-version", "0.10.2,0.33", "--json", "--csv", str(csv)])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    points = {p["vllm_version"]: p for p in doc["points"]}
    assert set(points) == {"0.10.2", "0.33.0"} and doc["vllm_versions"] == ["0.10.2", "0.33.0"]
    assert (points["0.10.2"]["max_num_batched_tokens"], points["0.10.2"]["max_num_seqs"], points["0.10.2"]["gpu_memory_utilization"]) == (8192, 1024, 0.9)
    assert (points["0.33.0"]["max_num_batched_tokens"], points["0.33.0"]["max_num_seqs"], points["0.33.0"]["gpu_memory_utilization"]) == (16384, 1024, 0.92)
    assert points["0.10.2"]["vllm_rules"] == "0.8-0.10" and points["0.33.0"]["vllm_rules"] == "0.33"
    header = csv.read_text().splitlines()[0].split(",")
    assert "vllm_version" in header and "vllm_rules" in header


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["plan", "--model", "Qwen/Qwen3-8B", "--vllm-version", "0.34.0"], "the nearest it plans is 0.33.0"),
        (["check", "--model", "Qwen/Qwen3-8B", "--vllm-version", "0.4.3"], "the nearest it plans is 0.6.0"),
        (["sweep", "--model", "Qwen/Qwen3-8B", "--vllm-version", "0.10.2,1.0"], "the nearest it plans is 0.33.0"),
        (["fit", "--model", "Qwen/Qwen3-8B", "--vllm-version", "latest"], "not a vLLM release"),
        (["plan", "--model", "Qwen/Qwen3-8B", "-tp", "2", "-dcp", "2", "--vllm-version", "0.10.1"], "--decode-context-parallel-size: vLLM 0.10.1 has no such flag"),
    ],
)
def test_a_release_capacity_does_not_model_is_refused_in_one_line(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and err.startswith("capacity: error:") and err.count("\n") == 1 and needle in err


def test_vllm_use_v1_0_plans_the_v0_engine_of_0_8_to_0_10(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.8-0.10 run V0 under VLLM_USE_V1=0 (envs.py: bool(int(os.getenv("VLLM_USE_V1", "1")))); V0 has no
    chunked prefill by default below 32K tokens, so its batch is a whole max_model_len prompt (8,192 here)."""
    monkeypatch.setenv("VLLM_USE_V1", "0")
    plan = plan_json(capsys, "--vllm-version", "0.8.5", "--max-model-len", "8192")
    assert plan["fingerprint"]["vllm_rules"] == "V0 engine"
    assert plan["serving"]["max_num_batched_tokens"] == 8192
    monkeypatch.setenv("VLLM_USE_V1", "1")
    assert plan_json(capsys, "--vllm-version", "0.8.5", "--max-model-len", "8192")["fingerprint"]["vllm_rules"] == "0.8-0.10"


@pytest.mark.parametrize(("value", "version", "needle"), [("0", "0.11.0", "removed the V0 engine"), ("1", "0.7.3", "before 0.8"), ("yes", "0.9.2", "as an integer")])
def test_vllm_use_v1_a_release_has_no_such_engine_is_refused(value: str, version: str, needle: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_USE_V1", value)
    code = main(["plan", "--model", "Qwen/Qwen3-8B", "--gpu", "A100-80GB", "--offline", "--vllm-version", version])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and needle in err and err.count("\n") == 1


def test_vllm_use_v2_model_runner_0_plans_the_v1_runners_graph_estimate(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """0.26.0 runs a dense model on Model Runner V2, whose profile_cudagraph_memory returns 0 there (read in the wheel):
    nothing is set aside for graphs. VLLM_USE_V2_MODEL_RUNNER=0 (read first by VllmConfig.use_v2_model_runner) keeps
    the V1 runner, whose estimate 0.20+ subtract from the KV budget."""
    default = plan_json(capsys, "--vllm-version", "0.26.0")
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    v1 = plan_json(capsys, "--vllm-version", "0.26.0")
    assert default["memory"]["cuda_graphs"]["bytes"] == 0 and v1["memory"]["cuda_graphs"]["bytes"] > 0
    assert v1["kv_cache"]["available_bytes"] == default["kv_cache"]["available_bytes"] - v1["memory"]["cuda_graphs"]["bytes"] - (
        v1["memory"]["activation_peak"]["bytes"] - default["memory"]["activation_peak"]["bytes"]
    )
