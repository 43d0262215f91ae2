"""CLI wiring of reconcile and of the fake-tensor-trace estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.cli.app import main
from tests.support.paths import FIXTURES, REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

LOGS = FIXTURES / "vllm_logs"


def test_reconcile_command_matches_a_plan_with_the_logs_kv_bytes(capsys):
    log = LOGS / "whisper-large-v3-h200-v0.33.0-kv-cache-memory-bytes.log"
    # the fixture's vLLM ran with --kv-cache-memory-bytes 120G: 120 x 2^30 // 2,621,440 = 49,152 blocks
    code = main(["reconcile", str(log), "--model", "openai/whisper-large-v3", "--gpu", "H200", "--kv-cache-memory-bytes", "120G", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    rows = {r["key"]: r for r in json.loads(out.out)["rows"]}
    assert any(r["agrees"] for r in rows.values())
    blocks = [r for r in rows.values() if "num_blocks" in r["term"]]
    assert blocks and blocks[0]["agrees"]


def test_reconcile_command_refuses_a_non_vllm_log(tmp_path: Path, capsys):
    log = tmp_path / "notes.txt"
    log.write_text("hello\nthis is not a vLLM log\n")
    code = main(["reconcile", str(log), "--model", "openai/whisper-large-v3"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("capacity: error:") and err.count("\n") == 1


def test_estimate_flag_is_checked(capsys):
    code = main(["plan", "--model", "openai/whisper-tiny", "--estimate", "guess"])
    err = capsys.readouterr().err
    assert code == 2 and "--estimate 'guess'" in err


def test_fake_trace_estimate_of_whisper_tiny(capsys):
    pytest.importorskip("torch")
    code = main(["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--estimate", "trace", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    plan = json.loads(out.out)
    assert plan["memory"]["activation_peak"]["kind"] == "estimated"
    assert plan["memory"]["activation_peak"]["method"].startswith("fake-tensor trace of the real model")
    # the trace holds one 30 s item: 1 x 1500 positions x 384 wide x 2 B (bfloat16), exactly
    assert plan["memory"]["encoder_cache"]["bytes"] == 1500 * 384 * 2
    assert "estimated_by_fake_trace" in {h["id"] for h in plan["hazards"]}


def test_fake_trace_falls_back_for_families_without_an_adapter(capsys, monkeypatch, tmp_path):
    """Every family has hooks today; one without them (profilable False) plans by formula, saying why."""
    pytest.importorskip("torch")
    from capacity.model.family import family_named

    monkeypatch.setenv("CAPACITY_CACHE_DIR", str(tmp_path))  # not a trace cached with the hooks
    monkeypatch.setattr(type(family_named("minicpmv")), "profilable", False)
    code = main(["plan", "--model", "openbmb/MiniCPM-Llama3-V-2_5", "--estimate", "trace", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    plan = json.loads(out.out)
    assert any("no fake-tensor trace for this family (profiling minicpmv" in n for n in plan["notes"])
    assert plan["memory"]["activation_peak"]["method"].startswith("formula")


def test_fake_trace_falls_back_at_a_data_dependent_op(capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import DataDependentOutputException

    import profilers.api

    def stops(*args, **kwargs):
        raise DataDependentOutputException(torch.ops.aten._local_scalar_dense.default)

    monkeypatch.setattr(profilers.api, "trace_model", stops)
    code = main(["plan", "--model", "openai/whisper-tiny", "--estimate", "trace", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    plan = json.loads(out.out)
    assert any("the fake-tensor trace stopped at DataDependentOutputException" in n for n in plan["notes"])
    assert plan["memory"]["activation_peak"]["method"].startswith("formula")


def test_florence2_traces_although_its_constructor_reads_values(capsys):
    pytest.importorskip("torch")
    code = main(["plan", "--model", "microsoft/Florence-2-large", "--estimate", "trace", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    plan = json.loads(out.out)
    assert plan["memory"]["activation_peak"]["method"].startswith("fake-tensor trace")
    assert plan["model"]["parameters"] == 770_173_952  # the published Florence-2-large count


def test_trace_of_a_family_it_undercounts_warns_where_the_kv_cache_decides(capsys):
    """H200: 987.2 MiB measured against 857.0 MiB traced = +15 %. vLLM measures the workspaces at startup, so they come
    out of its KV cache: 15 % of the traced activation peak fewer bytes. With vLLM's defaults on the H200 (1,024
    sequences) the KV cache decides the concurrency, and one request fewer fits: a warning. (examples/ci, where
    max_num_seqs decides with room to spare, gets the info: tests/examples/test_ci_example.py.)"""
    pytest.importorskip("torch")
    code = main(["plan", "--model", "nvidia/Nemotron-Parse", "--estimate", "trace", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    plan = json.loads(out.out)
    hazard = {h["id"]: h for h in plan["hazards"]}["trace_misses_workspaces"]
    kv = plan["kv_cache"]
    missed = plan["memory"]["activation_peak"]["bytes"] * 15 // 100
    requests = ((kv["available_bytes"] - missed) // kv["bytes_per_block"] - 1) // kv["blocks_per_request_actual"]
    assert plan["concurrency"]["limited_by"] == "kv_cache" and requests == plan["concurrency"]["actual_requests"] - 1
    assert hazard["severity"] == "warning"
    assert "15 %" in hazard["message"] and f"the server run {requests} at once, not {requests + 1}" in hazard["message"]


REFERENCE = REPO_ROOT / "bench" / "results" / "vllm-kv-reference-2026-11-30" / "reference.json"
QWEN3_NEXT = FIXTURES / "configs" / "Qwen--Qwen3-Next-80B-A3B-Instruct.json"


@pytest.mark.parametrize(
    ("flags", "case_name"),
    [([], "qwen3-next H200 tp1"), (["--no-enable-prefix-caching"], "qwen3-next H200 tp1 no prefix caching")],
)
def test_prefix_caching_flag_sets_the_mamba_cache_mode_as_vllm_does(tmp_path: Path, capsys, flags, case_name):
    # Expected block sizes are vLLM 0.33's own, from the committed reference (bench/vllm_kv_reference.py).
    case = next(c for c in json.loads(REFERENCE.read_text())["cases"] if c["name"] == case_name)
    (tmp_path / "config.json").write_text(QWEN3_NEXT.read_text())
    knobs = ["--gpu", "H200", "--max-model-len", str(case["max_model_len"]), "--max-num-batched-tokens", str(case["mnbt"])]
    code = main(["plan", "--model", str(tmp_path), *knobs, *flags, "--estimate", "formula", "--json"])
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    plan = json.loads(out.out)
    got = sorted((g["kind"], g["block_size"]) for g in plan["kv_cache"]["groups"])
    want = sorted(("mamba" if g["spec"] == "MambaSpec" else "full", g["block_size"]) for g in case["groups"])
    assert got == want
    assert {g.get("mamba_cache_mode") for g in plan["kv_cache"]["groups"] if g["kind"] == "mamba"} == {case["mamba_cache_mode"]}


def test_a_prefix_caching_choice_is_kept_in_the_suggested_command(capsys):
    code = main(["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H200", "--no-enable-prefix-caching", "--estimate", "formula", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["suggested_command"].endswith("--no-enable-prefix-caching")


# bench/vllm_logs/qwen3-14b-l40s-v0.28.0-excerpt.log: four lines without a version (the blog post states 0.28.0)
_UNVERSIONED = """Model loading took 27.52 GiB and 6.27 seconds
Available KV cache memory: 11.57 GiB
GPU KV cache size: 75,824 tokens
Maximum concurrency for 40,960 tokens per request: 1.85x
"""
_QWEN3_14B = str(REPO_ROOT / "bench" / "vllm_logs" / "configs" / "Qwen--Qwen3-14B")


def test_reconcile_takes_the_version_the_paste_does_not_state(tmp_path: Path, capsys):
    """Without a version, Model Runner V2's 'GiB and' with format_gib's figure (0.15-0.28) and the two-line KV figures
    (0.8-0.28) fit 0.12-0.15 up to 0.27-0.28, whose utilization defaults (0.9, then 0.92) and CUDA-graph rules move the
    KV budget: no version is picked, each is compared. --vllm-version 0.28.0 gives 0.27-0.28's rules alone: utilization
    0.92, and MRV2 (Qwen3ForCausalLM, dense) with nothing set aside for CUDA graphs (0.28.0's
    GPUModelRunner.profile_cudagraph_memory returns 0)."""
    log = tmp_path / "qwen3-14b.log"
    log.write_text(_UNVERSIONED)
    base = ["reconcile", str(log), "--model", _QWEN3_14B, "--gpu", "L40S", "--json"]
    assert main(base) == 0
    guessed = json.loads(capsys.readouterr().out)
    assert main([*base, "--vllm-version", "0.28.0"]) == 0
    stated = json.loads(capsys.readouterr().out)
    inferred = guessed["version_inference"]
    assert inferred["verdict_changes"] is True and guessed["rows"] == [] and stated["version_inference"] is None
    assert inferred["evidence"] == [
        "line 1: 'Model loading took X GiB and' with format_gib's figure (Model Runner V2) (vLLM 0.15-0.28)",
        "line 4: the KV cache size and the concurrency on two lines (vLLM 0.8-0.28)",
    ]
    compared = [r["plan_semantics"] for r in guessed["by_version"]]
    assert compared[0].startswith("0.12-0.15") and compared[-1].endswith("0.27-0.28") and stated["plan_semantics"] == "0.27-0.28"
    assert stated["vllm_version"] == "0.28.0" and stated["vllm_version_basis"] == "--vllm-version"


@pytest.mark.parametrize(
    ("text", "version", "message"),
    [
        (_UNVERSIONED, "latest", "--vllm-version 'latest': not a vLLM release"),
        ("INFO 10-01 12:00:00 [api_server.py:1] vLLM API server version 0.10.2\n" + _UNVERSIONED, "0.28.0", "states vLLM 0.10.2"),
    ],
)
def test_reconcile_refuses_a_version_it_cannot_use(tmp_path: Path, capsys, text: str, version: str, message: str):
    log = tmp_path / "paste.log"
    log.write_text(text)
    code = main(["reconcile", str(log), "--model", _QWEN3_14B, "--gpu", "L40S", "--vllm-version", version])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
