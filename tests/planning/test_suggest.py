"""The suggested `vllm serve` line starts vLLM: the error hazards' fixes are applied, and the warnings' fixes a knob
makes (the first start on a cold compile cache), or there is no line and the reason says why.

Defaults worked by hand (vLLM 0.33 EngineArgs.get_batch_defaults and the encoder-decoder rules): an L4 (22.49 GiB,
below 70 GiB) gets max_num_batched_tokens 2048 and max_num_seqs 256 for `vllm serve`; an encoder-decoder model
raises max_num_batched_tokens to max_model_len when that is larger; max_num_seqs = min(256, max_num_batched_tokens).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_DOES_NOT_FIT, EXIT_FITS
from capacity.planning.plan import ERROR, WARNING
from capacity.source.resolve import catalog

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)


def plan_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict]:
    code = main(["plan", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out)


def starts(capsys: pytest.CaptureFixture[str], command: str, gpu: str, warnings_left: list[str] | tuple[str, ...] = ()) -> dict:
    """Plan the suggested command's own flags (vllm serve's names are capacity's): vLLM starts on them, and the plan
    raises no error and no warning but those the suggestion names as left (no knob clears them)."""
    words = shlex.split(command)
    assert words[:2] == ["vllm", "serve"]
    code, doc = plan_json(capsys, ["--model", words[2], "--gpu", gpu, *words[3:]])
    assert code == EXIT_FITS, [h["id"] for h in doc["hazards"] if h["severity"] == ERROR]
    left = {w.split(":")[0] for w in warnings_left}
    raised = [h for h in doc["hazards"] if h["severity"] in (ERROR, WARNING)]
    assert [h["id"] for h in raised if h["id"] not in left] == [], command
    assert all(not h["fix_knobs"] for h in raised), command
    return doc


def test_max_model_len_above_the_model_is_replaced_by_the_models(capsys):
    """whisper-tiny's max_target_positions is 448: --max-model-len 100000 is refused by vLLM; the line says 448, and
    max_num_batched_tokens, left to vLLM, is re-derived for 448: max(448, 2048) = 2048."""
    code, doc = plan_json(capsys, ["--model", "openai/whisper-tiny", "--gpu", "L4", "--max-model-len", "100000"])
    assert code == EXIT_DOES_NOT_FIT
    hazard = next(h for h in doc["hazards"] if h["id"] == "max_model_len_above_model_limit")
    assert hazard["fix_knobs"] == {"max_model_len": 448}
    command = "vllm serve openai/whisper-tiny --max-model-len 448 --max-num-seqs 256 --max-num-batched-tokens 2048 --gpu-memory-utilization 0.92"
    assert doc["suggested_command"] == command
    assert doc["suggestion"] == {"command": command, "applied": ["max_model_len_above_model_limit"], "reason": "", "warnings": []}
    starts(capsys, command, "L4")


def test_fixes_chain_until_vllm_starts(capsys):
    """--max-num-batched-tokens 100 with chunked prefill off (encoder-decoder): below max_model_len 448 (fix: 448),
    then below one 1,500-token audio item (fix: max(1500, 448) = 1500); max_num_seqs, left to vLLM, is
    min(256, 1500) = 256."""
    code, doc = plan_json(capsys, ["--model", "openai/whisper-tiny", "--gpu", "L4", "--max-num-batched-tokens", "100"])
    assert code == EXIT_DOES_NOT_FIT
    command = "vllm serve openai/whisper-tiny --max-model-len 448 --max-num-seqs 256 --max-num-batched-tokens 1500 --gpu-memory-utilization 0.92"
    assert doc["suggestion"] == {"command": command, "applied": ["batched_tokens_below_max_model_len", "encoder_item_exceeds_batched_tokens"], "reason": "", "warnings": []}
    starts(capsys, command, "L4")


def test_utilization_above_free_memory_is_lowered_to_what_is_free(capsys):
    """H200: 150,109,880,320 B total, 753,729,536 B of CUDA context: 149,356,150,784 B free = 0.99497 of the total;
    floored to 0.99 so that ceil(total x 0.99) = 148,608,781,517 stays within the free bytes."""
    code, doc = plan_json(capsys, ["--model", "openai/whisper-tiny", "--gpu", "H200", "--gpu-memory-utilization", "1.0"])
    assert code == EXIT_DOES_NOT_FIT
    hazard = next(h for h in doc["hazards"] if h["id"] == "requested_exceeds_free")
    assert hazard["fix"] == "lower --gpu-memory-utilization to 0.99 or less" and hazard["fix_knobs"] == {"gpu_memory_utilization": 0.99}
    assert "--gpu-memory-utilization 0.99" in doc["suggested_command"]
    assert starts(capsys, doc["suggested_command"], "H200")["memory"]["requested_bytes"] == 148_608_781_517


def test_a_block_size_no_backend_takes_is_replaced(capsys):
    code, doc = plan_json(capsys, ["--model", "openai/whisper-tiny", "--gpu", "L4", "--block-size", "24"])
    assert code == EXIT_DOES_NOT_FIT
    assert doc["suggestion"]["applied"] == ["block_size_unsupported"] and "--block-size 32" in doc["suggested_command"]
    starts(capsys, doc["suggested_command"], "L4")


def test_a_model_vllm_does_not_serve_gets_no_line_and_the_reason(capsys):
    code, doc = plan_json(capsys, ["--model", "meta-llama/Llama-3.2-11B-Vision-Instruct", "--gpu", "H200"])
    assert code == EXIT_DOES_NOT_FIT
    assert doc["suggested_command"] is None
    assert doc["suggestion"]["command"] is None and doc["suggestion"]["reason"].startswith("model_not_served_by_vllm: MllamaForConditionalGeneration")
    main(["plan", "--model", "meta-llama/Llama-3.2-11B-Vision-Instruct", "--gpu", "H200"])
    out = " ".join(capsys.readouterr().out.split())
    assert "suggested: none: model_not_served_by_vllm: MllamaForConditionalGeneration" in out
    assert "vllm serve" not in out


def test_an_error_without_a_knob_fix_gets_no_line(capsys):
    """whisper-tiny has 6 heads: TP 4 does not divide them and vLLM raises; which TP size to run instead is the
    user's choice (it changes every per-rank figure), so there is no line."""
    code, doc = plan_json(capsys, ["--model", "openai/whisper-tiny", "--gpu", "L4", "--tensor-parallel-size", "4"])
    assert code == EXIT_DOES_NOT_FIT
    assert doc["suggested_command"] is None and doc["suggestion"]["reason"].startswith("tp_does_not_divide_heads: 6 attention heads")


def test_a_plan_that_fits_suggests_its_own_knobs(capsys):
    code, doc = plan_json(capsys, ["--model", "openai/whisper-tiny", "--gpu", "L4", "--max-num-seqs", "64", "--block-size", "32"])
    assert code == EXIT_FITS
    # max_num_batched_tokens: max(448, 2048) = 2048, then min(64 x 448 = 28,672, 2048) = 2048
    assert doc["suggestion"] == {
        "command": "vllm serve openai/whisper-tiny --max-model-len 448 --max-num-seqs 64 --max-num-batched-tokens 2048 --gpu-memory-utilization 0.92 --block-size 32",
        "applied": [],
        "reason": "",
        "warnings": [],
    }


def test_csv_and_html_carry_the_suggestion(capsys, tmp_path):
    main(["plan", "--model", "openai/whisper-tiny", "--gpu", "L4", "--max-model-len", "100000", "--csv", "t", "--html", "r.html"])
    capsys.readouterr()
    summary = dict(line.split(",", 1) for line in (tmp_path / "t" / "summary.csv").read_text().splitlines()[1:])
    assert summary["suggested_fixes"] == "max_model_len_above_model_limit" and "--max-model-len 448" in summary["suggested_command"]
    page = (tmp_path / "r.html").read_text()
    assert "--max-model-len 448" in page and "With the fixes of max_model_len_above_model_limit applied" in page


# A 24 GB consumer card, an L40S, an H100 and an H200 (capacity/gpu/gpus.json).
SUGGESTION_GPUS = ("RTX-4090", "L40S", "H100-SXM", "H200")


@pytest.mark.parametrize("gpu", SUGGESTION_GPUS)
def test_every_catalog_suggestion_starts_and_raises_no_warning_a_knob_clears(capsys, gpu):
    """Every catalog id's default plan on each GPU: its suggested line, planned again as written, fits and raises no
    error and no warning but one the suggestion names (a plugin to install: no knob clears it). The suggestion logic
    reads only the plan's hazards and re-plans with the same estimate, so the formulas (this module's marker) test it
    for the whole catalog in seconds; the default path's cases follow."""
    checked = 0
    for name in catalog():
        code, doc = plan_json(capsys, ["--model", name, "--gpu", gpu])
        suggestion = doc["suggestion"]
        if suggestion["command"] is None:  # no knob makes vLLM start: the reason is an error with no knob fix
            errors = {h["id"]: h for h in doc["hazards"] if h["severity"] == ERROR}
            assert suggestion["reason"].split(":")[0] in errors, (name, suggestion["reason"])
            continue
        starts(capsys, suggestion["command"], gpu, suggestion["warnings"])
        checked += 1
    assert checked >= len(catalog()) // 2


@pytest.mark.parametrize(
    ("model", "gpu"),
    [("meta-llama/Llama-3.1-8B-Instruct", "RTX-4090"), ("Qwen/Qwen3-VL-4B-Instruct", "L40S")],
)
def test_the_default_path_suggests_what_a_cold_first_start_fits(capsys, monkeypatch, model, gpu):
    """Issue 24: on the default estimate (the fake-tensor trace) the default 131,072 / 262,144 tokens leave no room for
    one request; the length that fits a restart still does not fit the first start on an empty compile cache, whose
    warning names a shorter one. The line carries that one, and planned again it raises neither."""
    pytest.importorskip("torch")
    monkeypatch.delenv("CAPACITY_ESTIMATE", raising=False)
    code, doc = plan_json(capsys, ["--model", model, "--gpu", gpu])
    assert code == EXIT_DOES_NOT_FIT
    assert doc["suggestion"]["applied"] == ["no_room_for_one_request", "cold_compile_cache"]
    fixed = starts(capsys, doc["suggestion"]["command"], gpu)
    cold = next(h for h in fixed["hazards"] if h["id"] == "cold_compile_cache") if any(h["id"] == "cold_compile_cache" for h in fixed["hazards"]) else None
    assert cold is None or cold["severity"] == "info"
    # the default path: the trace, or (Qwen3-VL: a data-dependent op) its documented fallback to the formulas, noted
    assert fixed["profile"] is not None or any("fake-tensor trace stopped" in note for note in fixed["notes"])
