"""`capacity check`: each threshold passing and failing, the verdict line, the JSON, and the exit codes.

whisper-large-v3 with --kv-cache-memory-bytes 10G on an H200 (worked by hand, see test_planner.py):
num_blocks 4096; blocks per request vLLM 28 + 512 = 540, actual 28 + 94 = 122; actual_requests
4095 // 122 = 33; vLLM concurrency 4096 / 540 = 7.59; tokens int(4096 / 540 x 448) = 3398;
max_model_len 448 (the model's max_target_positions). Its hazards are two infos.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_FITS, EXIT_RUNTIME_FAILURE, BadInput, RuntimeFailure
from capacity.planning.gate import Thresholds, evaluate

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

GiB = 2**30
CHECK = ["check", "--model", "openai/whisper-large-v3", "--gpu", "H200", "--kv-cache-memory-bytes", "10G"]
INFOS = {"kv_overallocated_without_encoder_profiling", "vllm_concurrency_pessimistic"}


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.chdir(tmp_path)


def check(capsys: pytest.CaptureFixture[str], *flags: str, base: list[str] = CHECK) -> tuple[int, dict, str]:
    """Run `capacity check --json`; returns (exit code, JSON on stdout, the one verdict line on stderr)."""
    code = main([*base, *flags, "--json"])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("capacity: check: "), err
    return code, json.loads(out), lines[0]


def test_no_thresholds_passes_a_plan_that_fits(capsys):
    code, doc, line = check(capsys)
    assert code == EXIT_FITS
    assert line == "capacity: check: PASS (openai/whisper-large-v3 on H200): no error hazard"
    assert doc["gate"]["passed"] is True and doc["gate"]["failed"] == []
    assert doc["concurrency"]["actual_requests"] == 33  # the plan's JSON is all there
    assert {h["id"] for h in doc["hazards"]} == INFOS


@pytest.mark.parametrize(
    ("flags", "code", "clause"),
    [
        (["--min-concurrency", "33"], EXIT_FITS, "requests run at once 33 >= 33 (min(KV cache holds 33, max_num_seqs 1024))"),
        (["--min-concurrency", "34"], EXIT_DOES_NOT_FIT, "requests run at once 33 < 34 (min(KV cache holds 33, max_num_seqs 1024)) (--min-concurrency)"),
        (["--min-vllm-concurrency", "7.59"], EXIT_FITS, "vLLM concurrency 7.59 >= 7.59"),
        (["--min-vllm-concurrency", "7.6"], EXIT_DOES_NOT_FIT, "vLLM concurrency 7.59 < 7.6 (--min-vllm-concurrency)"),
        (["--min-kv-tokens", "3398"], EXIT_FITS, "KV tokens (vLLM) 3398 >= 3398"),
        (["--min-kv-tokens", "3399"], EXIT_DOES_NOT_FIT, "KV tokens (vLLM) 3398 < 3399 (--min-kv-tokens)"),
        (["--require-max-model-len", "448"], EXIT_FITS, "max_model_len served 448 >= 448"),
        (["--require-max-model-len", "449"], EXIT_DOES_NOT_FIT, "max_model_len served 448 < 449 (--require-max-model-len)"),
        (["--fail-on-hazard", "error"], EXIT_FITS, "no error hazard"),
        (["--fail-on-hazard", "warning"], EXIT_FITS, "no warning/error hazard"),
        (
            ["--fail-on-hazard", "info"],
            EXIT_DOES_NOT_FIT,
            "info/warning/error hazards: kv_overallocated_without_encoder_profiling (info), vllm_concurrency_pessimistic (info) (--fail-on-hazard info)",
        ),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_each_threshold_passes_and_fails(capsys, flags, code, clause):
    got, doc, line = check(capsys, *flags)
    assert got == code
    assert line.startswith("capacity: check: " + ("PASS" if code == EXIT_FITS else "FAIL") + " (openai/whisper-large-v3 on H200): ")
    assert clause in line
    assert doc["gate"]["passed"] is (code == EXIT_FITS)


def test_several_failures_are_all_named_on_one_line(capsys):
    code, doc, line = check(capsys, "--min-concurrency", "40", "--min-kv-tokens", "3000", "--require-max-model-len", "1024")
    assert code == EXIT_DOES_NOT_FIT
    assert line == (
        "capacity: check: FAIL (openai/whisper-large-v3 on H200): requests run at once 33 < 40 (min(KV cache holds 33, max_num_seqs 1024)) (--min-concurrency); "
        "max_model_len served 448 < 1024 (--require-max-model-len)"
    )
    assert doc["gate"]["failed"] == ["min_concurrency", "require_max_model_len"]
    kv_tokens = next(c for c in doc["gate"]["checks"] if c["name"] == "min_kv_tokens")
    assert kv_tokens == {
        "name": "min_kv_tokens",
        "metric": "kv_cache.tokens_vllm_reported",
        "required": 3000,
        "actual": 3398,
        "passed": True,
        "detail": "KV tokens (vLLM) 3398 >= 3000",
    }


def test_a_warning_fails_only_with_fail_on_hazard_warning(capsys):
    # BART is served by vLLM 0.33 only through a plugin: a warning, not an error
    bart = ["check", "--model", "facebook/bart-large", "--gpu", "H200"]
    code, doc, line = check(capsys, base=bart)
    assert code == EXIT_FITS
    code, doc, line = check(capsys, "--fail-on-hazard", "warning", base=bart)
    assert code == EXIT_DOES_NOT_FIT
    assert "model_needs_plugin (warning)" in line and "(info)" not in line


def test_a_block_size_no_attention_backend_takes_fails(capsys):
    """vLLM 0.33's CUDA backends take multiples of 16 only (AttentionBackend.supports_block_size): --block-size 8
    would stop vLLM with 'No valid attention backend found', so the gate fails even at --fail-on-hazard error."""
    code, doc, line = check(capsys, "--block-size", "8")
    assert code == EXIT_DOES_NOT_FIT
    assert "block_size_unsupported (error)" in line


def test_a_plan_that_does_not_fit_always_fails(capsys):
    code, doc, line = check(capsys, "--max-model-len", "1000", "--fail-on-hazard", "error")
    assert code == EXIT_DOES_NOT_FIT
    assert "max_model_len_above_model_limit (error)" in line
    assert doc["verdict"] == "does_not_fit"


def test_require_max_model_len_limited_by_the_kv_cache(capsys):
    """149 blocks of 2,621,440 B (--kv-cache-memory-bytes 390,594,560) with --max-num-batched-tokens 2048:
    vLLM charges 128 cross blocks + cdiv(L, 16) self blocks against 149 - 1 (null) = 148, so the longest
    max_model_len is 16 x 20 = 320. At --max-model-len 448 vLLM refuses (no room for one request); at 320
    it starts with 148 // (20 + 94) = 1 request."""
    base = ["check", "--model", "openai/whisper-large-v3", "--gpu", "H200", "--kv-cache-memory-bytes", str(149 * 2_621_440), "--max-num-batched-tokens", "2048"]
    code, doc, line = check(capsys, "--require-max-model-len", "320", base=base)
    assert code == EXIT_DOES_NOT_FIT  # fails on the error hazard, while the length check itself passes
    assert doc["max_model_len_that_fits"] == 320
    assert "no_room_for_one_request (error)" in line and "max_model_len served" not in line
    assert next(c for c in doc["gate"]["checks"] if c["name"] == "require_max_model_len")["actual"] == 320

    code, doc, line = check(capsys, "--max-model-len", "320", "--require-max-model-len", "320", "--min-concurrency", "1", base=base)
    assert code == EXIT_FITS, line
    assert doc["kv_cache"]["num_blocks"] == 149 and doc["concurrency"]["actual_requests"] == 1
    code, doc, line = check(capsys, "--max-model-len", "320", "--require-max-model-len", "321", base=base)
    assert code == EXIT_DOES_NOT_FIT and "max_model_len served 320 < 321" in line


def test_without_json_stdout_has_the_verdict_and_one_line_per_check(capsys):
    code = main([*CHECK, "--min-concurrency", "34", "--min-kv-tokens", "3398"])
    out, err = capsys.readouterr()
    assert code == EXIT_DOES_NOT_FIT
    assert out.splitlines() == [
        "FAIL: openai/whisper-large-v3 on H200",
        "  pass  no error hazard",
        "  FAIL  requests run at once 33 < 34 (min(KV cache holds 33, max_num_seqs 1024)) (--min-concurrency)",
        "  pass  KV tokens (vLLM) 3398 >= 3398",
    ]
    assert err.splitlines() == [
        "capacity: check: FAIL (openai/whisper-large-v3 on H200): requests run at once 33 < 34 (min(KV cache holds 33, max_num_seqs 1024)) (--min-concurrency)"
    ]


def test_json_path_keeps_stdout_empty(capsys, tmp_path):
    code = main([*CHECK, "--min-concurrency", "34", "--json", "gate.json"])
    out, err = capsys.readouterr()
    assert code == EXIT_DOES_NOT_FIT and out == ""
    assert err.splitlines() == [
        "capacity: wrote gate.json",
        "capacity: check: FAIL (openai/whisper-large-v3 on H200): requests run at once 33 < 34 (min(KV cache holds 33, max_num_seqs 1024)) (--min-concurrency)",
    ]
    doc = json.loads((tmp_path / "gate.json").read_text())
    assert doc["gate"]["failed"] == ["min_concurrency"] and doc["kv_cache"]["tokens_vllm_reported"] == 3398


def test_check_from_a_serve_yaml(capsys, tmp_path):
    (tmp_path / "serve.yaml").write_text("model: openai/whisper-large-v3\nkv-cache-memory-bytes: 10G\nmax-num-seqs: 1024\n")
    code, doc, line = check(capsys, "--config", "serve.yaml", "--gpu", "H200", "--min-concurrency", "33", base=["check"])
    assert code == EXIT_FITS and doc["concurrency"]["actual_requests"] == 33


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--fail-on-hazard", "fatal"], "--fail-on-hazard 'fatal' is not one of info, warning, error"),
        (["--min-concurrency", "-1"], "--min-concurrency must be an integer >= 0"),
        (["--min-kv-tokens", "many"], "--min-kv-tokens"),
        (["--min-vllm-concurrency", "-0.5"], "--min-vllm-concurrency must be a number >= 0"),
        (["--gpu", "H300"], "unknown GPU 'H300'"),
    ],
)
def test_bad_input_exits_2(capsys, flags, needle):
    code = main([*CHECK, *flags])
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("capacity: error: ") and needle in lines[0], err


@pytest.mark.parametrize("error", [RuntimeFailure("building WhisperForConditionalGeneration on the meta device failed: boom"), MemoryError("boom")])
def test_runtime_failure_exits_3(capsys, monkeypatch, error):
    import capacity.planning.planner

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(capacity.planning.planner, "plan_for", fail)
    code = main([*CHECK, "--min-concurrency", "1"])
    out, err = capsys.readouterr()
    assert code == EXIT_RUNTIME_FAILURE and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("capacity: error: ") and "boom" in err


def test_evaluate_without_the_cli(make_plan):
    plan = make_plan("openai/whisper-large-v3", kv_cache_memory_bytes=10 * GiB)
    result = evaluate(plan, Thresholds(min_concurrency=33, min_vllm_concurrency=7.59, min_kv_tokens=3398, require_max_model_len=448, fail_on_hazard="warning"))
    assert result.passed and [c.actual for c in result.checks] == [[], 33, 7.59, 3398, 448]
    with pytest.raises(BadInput):
        Thresholds(min_concurrency=True)  # a bool is not a count


def test_min_concurrency_compares_what_the_server_runs(capsys):
    """The gate reads what the server runs: the KV cache holds 33 requests (4,096 blocks, 4,095 usable // 122 per request), but with
    --max-num-seqs 8 the server never runs more than 8 at once; the gate compares min(33, 8) = 8."""
    code, doc, line = check(capsys, "--max-num-seqs", "8", "--min-concurrency", "30")
    assert code == EXIT_DOES_NOT_FIT
    assert line == (
        "capacity: check: FAIL (openai/whisper-large-v3 on H200): requests run at once 8 < 30 (min(KV cache holds 33, max_num_seqs 8)) (--min-concurrency)"
    )
    assert doc["concurrency"]["actual_requests"] == 33
    assert doc["concurrency"]["max_concurrent_requests"] == 8 and doc["concurrency"]["limited_by"] == "max_num_seqs"
    gate = next(c for c in doc["gate"]["checks"] if c["name"] == "min_concurrency")
    assert (gate["metric"], gate["actual"], gate["required"]) == ("concurrency.max_concurrent_requests", 8, 30)

    code, doc, line = check(capsys, "--max-num-seqs", "8", "--min-concurrency", "8")
    assert code == EXIT_FITS and "requests run at once 8 >= 8 (min(KV cache holds 33, max_num_seqs 8))" in line
