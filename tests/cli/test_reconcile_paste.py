"""`capacity reconcile -` on what users paste: stdin, any line prefixes, a few lines, a version the paste does not
state, a local model folder, and the labels of estimated figures.

The 5-line paste is bench/vllm_logs/qwen3-8b-a100-40gb-v0.19.1.log's Model loading, Estimated CUDA graph memory,
Available KV cache memory and two-line KV capacity lines (issue 24: read as 0.20, it moved the result from +0.07 GiB
with the full log to +0.39 GiB). Plans use the formulas (the tests' CAPACITY_ESTIMATE=formula): what is tested is
what reaches the planner and how the answer is told; reconcile's default path, the trace, is compared with
bench/predict_logs.py in tests/reconcile/test_predict_logs_agree.py.
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from capacity.cli.app import main
from tests.support.paths import REPO_ROOT

LOG = REPO_ROOT / "bench" / "vllm_logs" / "qwen3-8b-a100-40gb-v0.19.1.log"
QWEN3_8B = str(REPO_ROOT / "bench" / "vllm_logs" / "configs" / "Qwen--Qwen3-8B")
KEYS = ("Model loading took", "Estimated CUDA graph memory", "Available KV cache memory", "GPU KV cache size", "Maximum concurrency")
FIVE = [line for line in LOG.read_text().splitlines() if any(k in line for k in KEYS)]
# the same paste without the loading line's file tag, which names the model runner ([gpu_model_runner.py:N]: V1)
UNTAGGED = [re.sub(r"\[gpu_model_runner\.py:\d+\] ", "", line) for line in FIVE]
PREFIXES = {
    "none": "",
    "k8s": "2026-06-25T17:21:58.123456789Z stdout F ",
    "docker compose": "vllm-1  | ",
    "kubectl --prefix": "[pod/vllm-7d9f6/vllm] ",
    "journald": "Jun 25 17:21:58 gpu-4 vllm[3380462]: ",
    "markdown quote": "> ",
    "nested quote": ">> ",
}


def reconcile_stdin(text: str, *argv: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code = main(["reconcile", "-", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def as_json(text: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = reconcile_stdin(text, "--model", QWEN3_8B, "--gpu", "A100-40GB", "--json", *argv, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    return json.loads(out)


def test_the_paste_has_five_lines():
    assert len(FIVE) == 5


@pytest.mark.parametrize("prefix", list(PREFIXES.values()), ids=list(PREFIXES))
def test_reconcile_reads_a_paste_from_stdin_whatever_its_line_prefixes(prefix: str, monkeypatch, capsys):
    """Every prefix gives the comparison the file itself gives (the log's own `(EngineCore pid=...) INFO ...` kept)."""
    pasted = as_json("\n".join(prefix + line for line in FIVE), monkeypatch, capsys, "--vllm-version", "0.19.1")
    assert pasted["log"] == "stdin"
    plain = as_json("\n".join(FIVE), monkeypatch, capsys, "--vllm-version", "0.19.1")
    assert pasted["capacity_figures"] == plain["capacity_figures"]
    assert [(r["key"], r["vllm_value"]) for r in pasted["rows"]] == [(r["key"], r["vllm_value"]) for r in plain["rows"]]
    logged = {r["key"]: r["vllm_value"] for r in pasted["rows"]}
    assert (logged["model_loading"], logged["available_kv_cache"], logged["kv_cache_tokens"], logged["max_concurrency"]) == (15.27, 19.36, 140_960, 3.44)


def test_an_empty_stdin_is_refused_in_one_line(monkeypatch, capsys):
    code, out, err = reconcile_stdin("\n  \n", "--model", QWEN3_8B, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "stdin is empty" in err


def test_a_paste_of_the_full_log_and_of_five_lines_agree_under_the_version_they_share(monkeypatch, capsys):
    """The full log states 0.19.1; under 0.16-0.19's rules the 5-line paste is planned exactly as the full log."""
    full = as_json(LOG.read_text(), monkeypatch, capsys)
    five = as_json("\n".join(FIVE), monkeypatch, capsys, "--vllm-version", "0.19.1")
    assert full["plan_semantics"] == five["plan_semantics"] == "0.16-0.19"
    assert full["capacity_figures"] == five["capacity_figures"]


def test_an_inferred_version_names_its_lines_and_the_versions_that_fit(monkeypatch, capsys):
    doc = as_json("\n".join(FIVE), monkeypatch, capsys)
    inferred = doc["version_inference"]
    # 'GiB memory' with format_gib's 2 decimals: 0.13+; the estimate line: 0.19+; two KV lines: up to 0.28
    assert inferred["evidence"] == [
        "line 1: 'Model loading took X GiB memory' with format_gib's figure (vLLM 0.13+)",
        "line 2: 'Estimated CUDA graph memory' (vLLM 0.19+)",
        "line 5: the KV cache size and the concurrency on two lines (vLLM 0.8-0.28)",
    ]
    fitted = [name for c in inferred["candidates"] for name in c["semantics"].split(", ")]
    assert fitted == ["0.16-0.19", "0.20-0.22", "0.23", "0.24", "0.25", "0.26", "0.27-0.28"]


def test_candidate_versions_that_change_the_verdict_are_all_shown_and_none_picked(monkeypatch, capsys):
    """Without the runner's file tag, 0.16-0.19 (utilization 0.9, estimate not subtracted) and 0.23+ (0.92, MRV2 for
    Qwen3ForCausalLM with no estimate) put the KV budget on either side of 3 % of the log's 19.36 GiB: reconcile shows
    both, picks neither."""
    doc = as_json("\n".join(UNTAGGED), monkeypatch, capsys)
    inferred = doc["version_inference"]
    assert inferred["verdict_changes"] is True and inferred["used"] == "" and doc["rows"] == [] and doc["capacity_figures"] == {}
    within = {c["semantics"]: c["available_kv_within_percent"]["within"] for c in inferred["candidates"]}
    assert within["0.16-0.19"] is True and within["0.23, 0.24, 0.25, 0.26, 0.27-0.28"] is False
    # each candidate's comparison is the one --vllm-version gives
    for shown in doc["by_version"]:
        first = shown["plan_semantics"].split(", ")[0]
        stated = as_json("\n".join(UNTAGGED), monkeypatch, capsys, "--vllm-version", first.split("-")[0])
        assert shown["capacity_figures"] == stated["capacity_figures"], first
        candidate = next(c for c in inferred["candidates"] if c["semantics"] == shown["plan_semantics"])
        assert math.isclose(candidate["available_kv_bytes"] / 2**30, stated["capacity_figures"]["available_kv"])
    code, out, _ = reconcile_stdin("\n".join(UNTAGGED), "--model", QWEN3_8B, "--gpu", "A100-40GB", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "the verdict changes with the version" in out and "if vLLM 0.16-0.19 printed it" in out


def test_the_runner_tag_rules_out_model_runner_v2_and_the_verdict_holds(monkeypatch, capsys):
    """The paste's loading line comes from gpu_model_runner.py: the V1 runner, whose CUDA-graph estimate 0.20+
    subtract. Every candidate then plans within 3 % of the log's 19.36 GiB, so reconcile picks one and says which
    runner it planned."""
    doc = as_json("\n".join(FIVE), monkeypatch, capsys)
    inferred = doc["version_inference"]
    assert inferred["verdict_changes"] is False and inferred["used"] != ""
    assert all(c["available_kv_within_percent"]["within"] for c in inferred["candidates"])
    assert any("model runner: the V1 model runner ([gpu_model_runner.py])" in n for n in doc["notes"])


def test_a_local_model_folder_in_the_log_is_replaced_by_model_silently(tmp_path: Path, monkeypatch, capsys):
    """The log serves /mnt/models (a KServe volume); --model names what it holds: the model row agrees and no advice
    names the folder."""
    text = "\n".join(
        [
            "INFO 08-31 08:01:29 [cli_args.py:325] non-default args: {'model': '/mnt/models', 'max_model_len': 40960}",
            *FIVE,
        ]
    )
    doc = as_json(text, monkeypatch, capsys, "--vllm-version", "0.19.1")
    model = {r["key"]: r for r in doc["rows"]}["model"]
    assert (model["vllm_value"], model["agrees"], model["difference"]) == ("/mnt/models", True, "")
    assert "--model /mnt/models" not in json.dumps(doc)


def test_a_local_model_folder_without_model_asks_for_it_once(monkeypatch, capsys):
    text = "INFO 08-31 08:01:29 [cli_args.py:325] non-default args: {'model': '/mnt/models'}\n" + "\n".join(FIVE)
    code, out, err = reconcile_stdin(text, "--gpu", "A100-40GB", "--vllm-version", "0.19.1", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "local folder, /mnt/models, which is not on this machine" in err and "pass --model" in err and "--model /mnt/models" not in err


def test_an_estimated_cuda_graph_figure_is_never_labelled_exact(monkeypatch, capsys):
    """0.19 prints its CUDA-graph estimate but sets nothing aside: capacity's term is 0 B (exact) and its own estimate,
    named beside it, is estimated."""
    doc = as_json("\n".join(FIVE), monkeypatch, capsys, "--vllm-version", "0.19.1")
    rows = {r["key"]: r for r in doc["rows"]}
    graphs = rows["cuda_graphs_estimate"]["explanation"]
    assert "capacity: 0 B (exact)" in graphs and "capacity's estimate would be" in graphs
    would_be = graphs.split("capacity's estimate would be ", 1)[1]
    assert would_be.split(")", 1)[0].endswith("(estimated")
