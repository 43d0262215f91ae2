"""`capacity fit` as a user types it, and the nearest fit `capacity plan` shows when a plan does not fit."""

from __future__ import annotations

import csv
import io
import json
import shlex

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_FITS

QWEN_VL = "Qwen/Qwen2.5-VL-7B-Instruct"


def run(argv: list[str], capsys) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def flat(text: str) -> str:
    """The terminal report as one line of words: panel borders and the serve line's shell continuations removed."""
    return " ".join(word for word in text.split() if word not in ("│", "\\"))


def serve_lines(text: str) -> list[str]:
    """The `vllm serve` lines the terminal report prints, one per configuration ("[n] vllm serve ...")."""
    return [line.split("] ", 1)[1] for line in text.splitlines() if line.startswith("[") and "] vllm serve " in line]


def replan_argv(serve_line: str, gpu: str) -> list[str]:
    """`capacity plan` with a serve line's model and flags, as a user re-plans it."""
    words = shlex.split(serve_line)
    assert words[:2] == ["vllm", "serve"]
    return ["plan", "--model", words[2], "--gpu", gpu, *words[3:]]


def test_the_qwen_vl_rtx_4090_case_fits_and_its_serve_line_replans_to_exit_0(capsys):
    """Issue 24's case as typed: `capacity plan` says DOES NOT FIT on one RTX 4090; `capacity fit` answers with a
    configuration checked with the default estimate, and `capacity plan` on its serve line (default estimate) exits 0
    with the figures fit printed."""
    code, out, err = run(["fit", "--model", QWEN_VL, "--gpu", "RTX 4090"], capsys)
    assert code == EXIT_FITS, err
    lines = serve_lines(out)
    assert lines and lines[0].startswith(f"vllm serve {QWEN_VL} --max-model-len ")
    code, plan_out, err = run([*replan_argv(lines[0], "RTX 4090"), "--json"], capsys)
    assert code == EXIT_FITS, err
    plan = json.loads(plan_out)
    code, fit_out, _ = run(["fit", "--model", QWEN_VL, "--gpu", "RTX 4090", "--json"], capsys)
    top = json.loads(fit_out)["configs"][0]
    assert top["command"] == lines[0] and top["estimate"] == "trace"
    assert plan["concurrency"]["max_concurrent_requests"] == top["requests_at_once"] >= 1
    assert plan["kv_cache"]["available_bytes"] == top["available_kv_bytes"] and plan["kv_cache"]["num_blocks"] == top["num_blocks"]


def test_the_issue_target_8_requests_at_8192_on_an_rtx_4090(capsys):
    code, out, err = run(["fit", "--model", QWEN_VL, "--gpu", "RTX 4090", "--min-concurrency", "8", "--max-model-len", "8192"], capsys)
    assert code == EXIT_FITS, err
    (line, *_) = serve_lines(out)
    assert "--max-model-len 8192" in line
    # the default 16,384-token items are longer than 8,192 (item_longer_than_max_model_len): the line caps an image at
    # 8,192 merged 28 x 28 patches, max_pixels 8,192 x 784 = 6,422,528 (a 64 x 128 grid, 1,792 x 3,584 px)
    assert "--mm-processor-kwargs '{\"max_pixels\":6422528}'" in line
    code, plan_out, err = run([*replan_argv(line, "RTX 4090"), "--json"], capsys)
    assert code == EXIT_FITS, err
    plan = json.loads(plan_out)
    assert plan["concurrency"]["max_concurrent_requests"] >= 8
    assert plan["budget"]["max_tokens_per_item"] == {"image": 8192, "video": 8192}
    assert [h["id"] for h in plan["hazards"] if h["severity"] in ("error", "warning")] == []


def test_a_warning_no_change_clears_is_printed_with_its_configuration(capsys):
    """Both knobs that shrink or drop items held: the 16,384-token image stays longer than max_model_len 8,192, and the
    configuration says so (text and JSON) rather than silently."""
    argv = ["fit", "--model", QWEN_VL, "--gpu", "RTX 4090", "--min-concurrency", "8", "--max-model-len", "8192"]
    held = ["--limit-mm-per-prompt", "image=1,video=1", "--mm-processor-kwargs", '{"max_pixels": 12845056}']
    code, out, err = run([*argv, *held], capsys)
    assert code == EXIT_FITS, err
    assert "warning: item_longer_than_max_model_len: the largest item is longer than max_model_len 8,192 tokens (image 16,384, video 16,384)" in flat(out)
    code, out, err = run([*argv, *held, "--json"], capsys)
    (config,) = json.loads(out)["configs"]
    assert [w.split(":")[0] for w in config["warnings"]] == ["item_longer_than_max_model_len"]


def test_plan_that_does_not_fit_shows_the_nearest_fit_instead_of_none(capsys):
    code, out, err = run(["plan", "--model", QWEN_VL, "--gpu", "RTX 4090"], capsys)
    assert code == EXIT_DOES_NOT_FIT, err
    assert "suggested: none" not in flat(out)
    assert "suggested (nearest fit on RTX-4090): vllm serve" in flat(out) and "changes: max_model_len 128,000 ->" in flat(out)
    code, doc_out, _ = run(["plan", "--model", QWEN_VL, "--gpu", "RTX 4090", "--json"], capsys)
    nearest = json.loads(doc_out)["nearest_fit"]
    assert nearest["estimate"] == "trace"
    code, _, err = run(replan_argv(nearest["command"], "RTX 4090"), capsys)
    assert code == EXIT_FITS, err


def test_nothing_fits_exits_1_and_says_why(capsys):
    code, out, err = run(["fit", "--model", "allenai/Olmo-3.1-32B-Instruct", "--gpu", "RTX 4090", "--max-gpus", "1"], capsys)
    assert code == EXIT_DOES_NOT_FIT, err
    assert "NO CONFIGURATION FITS" in flat(out) and "no configuration on RTX-4090 up to 1 GPU: no_kv_cache_memory" in flat(out)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--gpu", "RTX 9999"], "GPU"),
        (["--gpu", "H200", "--max-gpus", "0"], "--max-gpus must be an integer >= 1"),
        (["--gpu", "H200", "--max-model-len", "lots"], "--max-model-len 'lots'"),
        (["--gpu", "H200", "--max-model-len", "0"], "--max-model-len '0'"),
        (["--gpu", "H200", "--min-concurrency", "0"], "--min-concurrency must be an integer >= 1"),
        (["--gpu", "H200,H200"], "twice"),
        (["--gpu", "H200", "--verify", "-1"], "--verify"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys):  # type: ignore[no-untyped-def]
    code, out, err = run(["fit", "--model", QWEN_VL, *argv], capsys)
    assert code == EXIT_BAD_INPUT and out == ""
    assert err.startswith("capacity: error:") and err.count("\n") == 1 and says in err


def test_json_and_csv_carry_every_configuration_with_its_serve_line(tmp_path, capsys):
    argv = ["fit", "--model", QWEN_VL, "--gpu", "RTX 4090,L40S,H200", "--min-concurrency", "64", "--max-model-len", "32768"]
    code, out, err = run([*argv, "--json"], capsys)
    assert code == EXIT_FITS, err
    doc = json.loads(out)
    assert doc["fits"] and doc["target"] == {"min_concurrency": 64, "max_model_len": 32768, "max_gpus": 8, "utilization_ceiling": None}
    counts = [c["gpu_count"] for c in doc["configs"]]
    assert counts == sorted(counts) and {c["gpu"] for c in doc["configs"]} == {"RTX-4090", "L40S", "H200"}
    assert all(c["command"].startswith(f"vllm serve {QWEN_VL} --max-model-len 32768 ") and c["requests_at_once"] >= 64 for c in doc["configs"])
    code, _, err = run([*argv, "--csv", str(tmp_path / "fit.csv")], capsys)
    assert code == EXIT_FITS, err
    rows = list(csv.DictReader(io.StringIO((tmp_path / "fit.csv").read_text())))
    assert [r["command"] for r in rows] == [c["command"] for c in doc["configs"]]
    assert [int(r["requests_at_once"]) for r in rows] == [c["requests_at_once"] for c in doc["configs"]]
    assert [r["warnings"] for r in rows] == ["; ".join(c["warnings"]) for c in doc["configs"]]
    # the one warning a configuration keeps: 8 RTX 4090s (TP 4 x DP 2) at 0.92 exceed the free memory only by capacity's
    # NVLink-measured NCCL figure, which PCIe GPUs do not hold (tests/planning/test_startup_free_memory.py)
    warned = [(c["gpu"], c["gpu_count"]) for c in doc["configs"] if c["warnings"]]
    assert warned == [("RTX-4090", 8)] and all(w.startswith("requested_exceeds_free: ") for c in doc["configs"] for w in c["warnings"])


def test_a_formula_configuration_replans_with_estimate_formula_to_the_same_figures(capsys):
    code, out, err = run(["fit", "--model", "openai/whisper-large-v3", "--gpu", "L4", "--min-concurrency", "64", "--estimate", "formula", "--json"], capsys)
    assert code == EXIT_FITS, err
    for config in json.loads(out)["configs"]:
        assert config["estimate"] == "formula" and "--estimate formula" in config["plan_command"]
        code, plan_out, err = run([*shlex.split(config["plan_command"])[1:], "--json"], capsys)
        assert code == EXIT_FITS, err
        plan = json.loads(plan_out)
        assert plan["concurrency"]["max_concurrent_requests"] == config["requests_at_once"]
        assert plan["kv_cache"]["available_bytes"] == config["available_kv_bytes"]


def test_a_knob_the_user_gives_is_kept_in_every_configuration_and_its_replan_line(capsys):
    """--enable-lora and its knobs are held like any knob given: each configuration is planned with LoRA's buffers,
    its serve line and plan line carry the flags, and the plan line gives the same figures."""
    argv = ["fit", "--model", "Qwen/Qwen3-8B", "--gpu", "L40S", "--enable-lora", "--max-loras", "4", "--max-model-len", "8192", "--min-concurrency", "4", "--max-gpus", "1"]
    code, out, err = run([*argv, "--json"], capsys)
    assert code == EXIT_FITS, err
    config = json.loads(out)["configs"][0]
    assert "--enable-lora --max-loras 4" in config["command"] and "--enable-lora --max-loras 4" in config["plan_command"]
    code, plan_out, err = run([*shlex.split(config["plan_command"])[1:], "--json"], capsys)
    assert code == EXIT_FITS, err
    plan = json.loads(plan_out)
    assert plan["memory"]["lora_buffers"]["bytes"] > 0
    assert plan["concurrency"]["max_concurrent_requests"] == config["requests_at_once"]
    assert plan["kv_cache"]["available_bytes"] == config["available_kv_bytes"]


def test_a_tp_that_does_not_divide_the_heads_gets_the_nearest_gpu_count_that_does(capsys):
    """whisper-tiny's 6 heads and TP 4: no knob fix (the suggestion stays none), so the verdict names the nearest fit,
    fewest GPUs first after the plan's own count: TP 1."""
    knobs = ["--model", "openai/whisper-tiny", "--gpu", "L4", "--tensor-parallel-size", "4", "--estimate", "formula"]
    code, out, _ = run(["plan", *knobs], capsys)
    assert code == EXIT_DOES_NOT_FIT
    assert "suggested (nearest fit on L4): vllm serve openai/whisper-tiny" in flat(out) and "tensor_parallel_size 4 -> 1" in flat(out)
    code, doc, _ = run(["plan", *knobs, "--json"], capsys)
    nearest = json.loads(doc)["nearest_fit"]
    assert nearest["gpu_count"] == 1 and nearest["estimate"] == "formula" and nearest["max_model_len"] == 448


def test_a_model_vllm_does_not_serve_fits_nowhere(capsys):
    code, out, _ = run(["fit", "--model", "meta-llama/Llama-3.2-11B-Vision-Instruct", "--gpu", "H200", "--max-gpus", "2"], capsys)
    assert code == EXIT_DOES_NOT_FIT
    assert "no configuration on H200 up to 2 GPUs: model_not_served_by_vllm" in " ".join(out.split())
