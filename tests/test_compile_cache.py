"""The torch.compile cache a start found (cold: it compiled, warm: it loaded), read from real bench logs' own lines, and
what capacity says of it: a hazard on every compiled plan (vLLM compiles inside the memory profile, issue #54383) and a
reconcile note."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.cli import main
from capacity.compile_cache import COLD, COLD_START_HIGH_BYTES, MIXED, WARM, compile_cache_evidence
from capacity.errors import EXIT_FITS
from capacity.vllm_log import load_vllm_startups

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "bench" / "vllm_logs"


@pytest.mark.parametrize(
    ("log", "state", "marker"),
    [
        ("llama-3.1-8b-l4-len32000-util0.92-v0.11.0.log", COLD, "[backends.py:218] Compiling a graph for dynamic shape"),
        ("llama-3.2-3b-t4-v0-engine-v0.8.2-unsloth.log", COLD, "[backends.py:144] Compiling a graph for general shape"),
        ("llama-3.1-8b-ft-rtx6000ada-len128000-fp16-v0.15.1.log", COLD, "[backends.py:319] Compiling a graph for compile range"),
        ("llama-3.1-8b-ft-rtx6000ada-len8192-v0.15.1.log", WARM, "[backends.py:267] Directly load the compiled graph(s)"),
        ("qwen3-8b-a100-40gb-v0.19.1.log", WARM, "[backends.py:285] Directly load the compiled graph(s)"),
        ("qwen3-8b-a100-40gb-v0.9.2.log", WARM, "[backends.py:155] Directly load the compiled graph(s)"),
    ],
)
def test_state_from_the_logs_lines(log: str, state: str, marker: str) -> None:
    evidence = load_vllm_startups(LOGS / log)[0].compile_cache
    assert evidence is not None and evidence.state == state and marker in evidence.line


def test_excerpts_without_compile_lines_say_nothing() -> None:
    assert load_vllm_startups(LOGS / "qwen3-14b-l40s-v0.28.0-excerpt.log")[0].compile_cache is None


def test_mixed_and_aot_lines() -> None:
    warm = "INFO [decorators.py:327] Directly load AOT compilation from path /root/.cache/vllm/torch_compile_cache/x/rank_0_0/model"
    again = "WARNING [decorators.py:341] Compiling model again due to a load failure from /root/.cache/vllm/x, reason: Source code has changed"
    saved = "INFO [decorators.py:753] saved AOT compiled function to /root/.cache/vllm/torch_compile_cache/x"
    assert compile_cache_evidence([warm]).state == WARM
    assert compile_cache_evidence([saved]).state == COLD
    assert compile_cache_evidence([warm, again]).state == MIXED
    assert compile_cache_evidence(["INFO [gpu_worker.py:1] Available KV cache memory: 5.0 GiB"]) is None


def _cold_hazard(**knobs: object):
    from capacity.hazards import find_hazards
    from capacity.planner import plan_for
    from capacity.serving import ServingArgs

    plan = plan_for("Qwen/Qwen3-8B", ServingArgs(**knobs), "RTX-4090")
    found = [h for h in find_hazards(plan) if h.id == "cold_compile_cache"]
    return plan, (found[0] if found else None)


def test_hazard_warns_when_a_cold_start_can_refuse() -> None:
    """Qwen3-8B on a 24 GiB RTX 4090: 144 KiB of KV per token (36 layers x 8 KV heads x 128 x 2 x 2 B), so one
    40,960-token request needs 5.625 GiB and leaves less than the 0.97 GiB a cold start can lose; at 16,384 tokens
    (2.25 GiB) it does not."""
    tight, hazard = _cold_hazard(max_model_len=40_960)
    assert tight.kv.needed_for_one_request_bytes == 40_960 * 144 * 1024
    room = tight.kv.available_bytes - tight.kv.bytes_per_block - tight.kv.needed_for_one_request_bytes
    assert 0 < room < COLD_START_HIGH_BYTES
    assert hazard is not None and hazard.severity == "warning" and "refusal to start" in hazard.message
    # the fix: the longest max_model_len whose blocks (16 tokens of 144 KiB each) fit 0.97 GiB less KV memory,
    # less the null block (vLLM's _estimate_max_model_len_from_groups)
    block = 16 * 144 * 1024
    assert tight.kv.bytes_per_block == block
    cold_blocks = (tight.kv.available_bytes - COLD_START_HIGH_BYTES - block) // block
    assert dict(hazard.knobs) == {"max_model_len": cold_blocks * 16}
    roomy, hazard = _cold_hazard(max_model_len=16_384)
    assert roomy.kv.available_bytes - roomy.kv.needed_for_one_request_bytes > COLD_START_HIGH_BYTES
    assert hazard is not None and hazard.severity == "info"


@pytest.mark.parametrize("knobs", [{"enforce_eager": True}, {"kv_cache_memory_bytes": 4 * 2**30}])
def test_no_hazard_without_a_measured_compile(knobs: dict[str, object]) -> None:
    """--enforce-eager compiles nothing (VllmConfig: CompilationMode.NONE); --kv-cache-memory skips the profile's figure."""
    _, hazard = _cold_hazard(max_model_len=16_384, **knobs)
    assert hazard is None


@pytest.mark.parametrize(
    ("log", "gpu", "version", "says"),
    [
        ("llama-3.1-8b-l4-len32000-util0.92-v0.11.0.log", "L4", "0.11.0", "this start compiled the model"),
        ("qwen3-8b-a100-40gb-v0.19.1.log", "A100-40GB", "0.19.1", "a warm start, as capacity plans"),
    ],
)
def test_reconcile_says_what_cache_the_start_found(log: str, gpu: str, version: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    meta = json.loads((LOGS / log).with_suffix(".json").read_text())
    flags = [str(LOGS / log), "--model", str(ROOT / meta["capacity_model"]), "--gpu", gpu, "--vllm-version", version, "--json"]
    for key, value in meta.get("knobs", {}).items():
        flags += [f"--{key.replace('_', '-')}", str(value)]
    assert main(["reconcile", *flags]) == EXIT_FITS
    doc = json.loads(capsys.readouterr().out)
    notes = [n for e in doc.get("engines", [doc]) for n in e["notes"]]
    assert any(says in n for n in notes)
