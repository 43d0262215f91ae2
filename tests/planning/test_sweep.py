"""Sweeps: axis parsing, every grid point equal to a plan of its own, hand-worked points, exports, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_FITS, BadInput
from capacity.planning.planner import plan_for
from capacity.planning.sweep import AUTO, SweepAxes, parse_int_list, parse_name_list, point_from_plan, run_sweep
from capacity.serving.config import ServingArgs
from reports.frames import sweep_frame
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

GiB = 2**30


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# --- axes ------------------------------------------------------------------------------------------------


def test_parse_int_list():
    assert parse_int_list("16,64,256", "--max-num-seqs") == (16, 64, 256)
    assert parse_int_list(" 2k, 4K ", "--max-model-len") == (2000, 4096)  # vLLM's human-readable integers
    assert parse_int_list("2048,auto", "--max-model-len", allow_auto=True) == (2048, AUTO)
    assert parse_name_list("L4, H200", "--gpu") == ("L4", "H200")


@pytest.mark.parametrize(
    ("text", "needle"),
    [("", "comma-separated"), ("16,,64", "comma-separated"), ("0,16", "positive"), ("16,abc", "'abc'"), ("16,16", "twice"), ("auto", "'auto'")],
)
def test_parse_int_list_rejects(text, needle):
    with pytest.raises(BadInput, match=needle):
        parse_int_list(text, "--max-num-seqs")


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        (["--max-num-seqs", "16,abc"], ["--max-num-seqs", "'abc'"]),
        (["--gpu", "L4,H300"], ["unknown GPU 'H300'"]),
        (["--gpu", "L4,NVIDIA L4"], ["L4 twice"]),
        (["--tensor-parallel-size", "1,0"], ["--tensor-parallel-size", "positive"]),
    ],
)
def test_bad_axis_is_one_line_exit_2(capsys, flags, needles):
    code, out, err = run(capsys, ["sweep", "--model", "openai/whisper-tiny", *flags])
    assert code == EXIT_BAD_INPUT and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("capacity: error: ")
    for needle in needles:
        assert needle in lines[0]


# --- every point is a plan -----------------------------------------------------------------------------------


def test_every_point_equals_its_own_plan():
    axes = SweepAxes(gpus=("L4", "H200"), tensor_parallel_sizes=(1, 2), max_num_seqs=(16, 256), max_model_lens=(2048, 4096, 9000))
    result = run_sweep("nvidia/Nemotron-Parse", ServingArgs(), axes)
    assert len(result.points) == axes.size == 24
    # order: GPU, TP, max_num_seqs, max_model_len
    assert [(p.gpu, p.tensor_parallel_size, p.max_num_seqs, p.max_model_len) for p in result.points[:4]] == [
        ("L4", 1, 16, 2048),
        ("L4", 1, 16, 4096),
        ("L4", 1, 16, 9000),
        ("L4", 1, 256, 2048),
    ]
    by_knobs = {(p.gpu, p.requested_tensor_parallel_size, p.requested_max_num_seqs, p.requested_max_model_len): p for p in result.points}
    for gpu, tp, seqs, mml in [("L4", 1, 16, 2048), ("L4", 2, 256, 4096), ("H200", 1, 256, 9000), ("H200", 2, 16, 4096), ("L4", 1, 256, 9000)]:
        plan = plan_for("nvidia/Nemotron-Parse", ServingArgs(tensor_parallel_size=tp, max_num_seqs=seqs, max_model_len=mml), gpu)
        point = by_knobs[(gpu, tp, seqs, mml)]
        assert point == point_from_plan(plan, tp, seqs, mml)
        assert (point.num_blocks, point.actual_requests, point.verdict) == (plan.kv.num_blocks, plan.concurrency.actual_requests, plan.verdict)
        assert point.errors == " ".join(h.id for h in plan.hazards if h.severity == "error")


def test_defaults_and_auto_follow_plan():
    axes = SweepAxes(gpus=("L4",), max_model_lens=(None, AUTO))
    result = run_sweep("openai/whisper-large-v3", ServingArgs(), axes)
    default = plan_for("openai/whisper-large-v3", ServingArgs(), "L4")
    auto = plan_for("openai/whisper-large-v3", ServingArgs(max_model_len=-1), "L4")
    assert result.points[0] == point_from_plan(default, None, None, None)
    assert result.points[1] == point_from_plan(auto, None, None, AUTO)
    assert result.points[0].max_num_seqs == 256  # vLLM's default on a 24 GB GPU


def test_hand_worked_points_with_fixed_kv_bytes():
    """whisper-large-v3, 10 GiB of KV on an H200 (max_num_batched_tokens 8192 by default, so 512 cross blocks in vLLM's count).

    TP 1: 81,920 B pages x 32 layers = 2,621,440 B/block -> 4096 blocks.
      max_model_len 448: 28 + 94 = 122 real blocks -> 4095 // 122 = 33; vLLM 4096 / (28 + 512) = 7.59
      max_model_len 128:  8 + 94 = 102 -> 4095 // 102 = 40; vLLM 4096 / 520 = 7.88, int(4096 / 520 x 128) = 1008 tokens
    TP 2: 10 KV heads per rank -> 40,960 B pages -> 1,310,720 B/block -> 8192 blocks.
      max_model_len 448: 8191 // 122 = 67; vLLM 8192 / 540 = 15.17, int(8192 x 448 / 540) = 6796 tokens
    """
    axes = SweepAxes(gpus=("H200",), tensor_parallel_sizes=(1, 2), max_model_lens=(128, 448))
    result = run_sweep("openai/whisper-large-v3", ServingArgs(kv_cache_memory_bytes=10 * GiB), axes)
    got = {
        (p.tensor_parallel_size, p.max_model_len): (p.num_blocks, p.actual_requests, p.concurrency_vllm_reported, p.tokens_vllm_reported) for p in result.points
    }
    assert got == {
        (1, 128): (4096, 40, 7.88, 1008),
        (1, 448): (4096, 33, 7.59, 3398),
        (2, 128): (8192, 80, 15.75, 2016),  # 8191 // 102 = 80; 8192 / 520 = 15.75; int(8192 x 128 / 520) = 2016
        (2, 448): (8192, 67, 15.17, 6796),
    }
    assert all(p.max_concurrent_requests == min(1024, p.actual_requests) for p in result.points)


def test_sweep_frame():
    axes = SweepAxes(gpus=("L4", "H200"), max_num_seqs=(16, 64), max_model_lens=(448, 9000))
    result = run_sweep("openai/whisper-large-v3", ServingArgs(), axes)
    df = sweep_frame(result)
    assert len(df) == 8
    assert df["requested_tensor_parallel_size"].isna().all()
    above = df[df.max_model_len == 9000]
    assert (~above.fits).all() and above.errors.str.contains("max_model_len_above_model_limit").all()
    assert df[df.max_model_len == 448].fits.all()


# --- from a GPU profile ---------------------------------------------------------------------------------------

PROFILE = REPO_ROOT / "bench" / "results" / "h200-profiles-2026-11-30" / "profile-openai--whisper-large-v3.json"


def test_sweep_from_a_profile_equals_plans_from_it():
    from capacity.memory.measured_profile import load_profile

    profile = load_profile(PROFILE)
    axes = SweepAxes(gpus=("H200", "L40S"), max_num_seqs=(256, 1024))
    result = run_sweep("openai/whisper-large-v3", ServingArgs(), axes, profile)
    assert result.profile == profile
    for point in result.points:
        plan = plan_for("openai/whisper-large-v3", ServingArgs(max_num_seqs=point.requested_max_num_seqs), point.gpu, profile)
        assert plan.memory["weights"].kind == "measured"
        assert point == point_from_plan(plan, None, point.requested_max_num_seqs, None)
        assert point.weights_bytes == profile.weights_bytes  # the measured weights, on every GPU


def test_sweep_profile_of_another_model_is_bad_input(capsys):
    code, out, err = run(capsys, ["sweep", "--model", "openai/whisper-tiny", "--profile", str(PROFILE), "--gpu", "L4"])
    assert code == EXIT_BAD_INPUT and out == ""
    assert err.strip().startswith("capacity: error: the profile was taken of openai/whisper-large-v3") and len(err.strip().splitlines()) == 1


def test_sweep_cli_with_a_profile(capsys):
    from capacity.memory.measured_profile import load_profile

    code, out, err = run(
        capsys, ["sweep", "--model", "openai/whisper-large-v3", "--profile", str(PROFILE), "--gpu", "H200", "--max-num-seqs", "1024", "--json"]
    )
    assert code == EXIT_FITS, err
    doc = json.loads(out)
    assert doc["profile"]["gpu_name"] == "NVIDIA H200" and doc["points"][0]["weights_bytes"] == load_profile(PROFILE).weights_bytes


# --- CLI: table, exports, exit codes ----------------------------------------------------------------------------


SWEEP = [
    "sweep",
    "--model",
    "openai/whisper-large-v3",
    "--gpu",
    "L4,H200",
    "--max-num-seqs",
    "16,256",
    "--max-model-len",
    "448,9000",
    "--kv-cache-memory-bytes",
    "10G",
]


def test_sweep_terminal_table(capsys):
    code, out, err = run(capsys, SWEEP)
    assert code == EXIT_FITS, err
    assert "L4  TP 1" in out and "H200  TP 1" in out
    assert "16 (KV 33)" in out and "33 (KV 33)" in out  # min(max_num_seqs, 33) at max_model_len 448
    assert "x max_model_len_above_model_limit" in out
    assert "4 of 8 points fit" in out


def test_sweep_csv_html_json(capsys, tmp_path):
    code, out, err = run(capsys, [*SWEEP, "--csv", "grid.csv", "--html", "grid.html", "--json", "grid.json"])
    assert code == EXIT_FITS, err
    assert err.strip() == "capacity: wrote grid.csv, grid.html, grid.json"
    df = pd.read_csv(tmp_path / "grid.csv")
    assert len(df) == 8
    row = df[(df.gpu == "H200") & (df.max_num_seqs == 256) & (df.max_model_len == 448)].iloc[0]
    assert (row.num_blocks, row.actual_requests, row.max_concurrent_requests, row.concurrency_vllm_reported, row.tokens_vllm_reported) == (
        4096,
        33,
        33,
        7.59,
        3398,
    )
    assert row.fits and row.verdict == "fits"
    doc = json.loads((tmp_path / "grid.json").read_text())
    assert len(doc["points"]) == 8 and doc["fitting_points"] == 4
    assert doc["axes"]["max_model_lens"] == [448, 9000] and doc["vllm_semantics_version"] == "0.33.0"
    page = (tmp_path / "grid.html").read_text()
    assert page.count('class="nofit"') == 4 and page.count('class="fit"') == 4
    assert "✓ 33" in page and "✓ 16" in page and "max_model_len_above_model_limit" in page
    assert "<script" not in page.lower() and "http" not in page


def test_sweep_json_on_stdout(capsys):
    code, out, err = run(capsys, [*SWEEP, "--json"])
    assert code == EXIT_FITS, err
    assert len(json.loads(out)["points"]) == 8


def test_sweep_where_nothing_fits_exits_1(capsys):
    code, out, err = run(capsys, ["sweep", "--model", "openai/whisper-large-v3", "--gpu", "L4", "--max-model-len", "1000,9000"])
    assert code == EXIT_DOES_NOT_FIT, err
    assert "0 of 2 points fit" in out


# --- layering -------------------------------------------------------------------------------------------------


def test_sweep_and_gate_import_neither_torch_nor_pandas_and_reports_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, capacity.planning.sweep, capacity.planning.gate\n"
        "before = ('torch' in sys.modules, 'pandas' in sys.modules)\n"
        "import reports.frames, reports.html, reports.export\n"
        "print(*before, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "False"]


def test_capacity_core_never_imports_reports():
    root = REPO_ROOT / "capacity"
    offenders = []
    for path in root.rglob("*.py"):
        if "cli" in path.relative_to(root).parts:
            continue
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(("import reports", "from reports")):
                offenders.append(f"{path.name}: {stripped}")
    assert offenders == []


# --- large grids: a documented limit, and progress on stderr ------------------------------------------------


def test_a_grid_above_the_limit_is_refused_before_any_work(capsys):
    """400 max_num_seqs x 251 max_model_len = 100,400 points > 100,000: one line with the size and the limit."""
    seqs = ",".join(str(n) for n in range(1, 401))
    lens = ",".join(str(n) for n in range(1, 252))
    code = main(["sweep", "--model", "no/such-model", "--max-num-seqs", seqs, "--max-model-len", lens])
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT and out == ""
    assert err.strip() == (
        "capacity: error: the sweep grid has 100,400 points (1 GPU x 1 TP size x 400 max_num_seqs x 251 max_model_len), "
        "above the limit of 100,000: give fewer values per axis, or split the grid"
    )  # refused before the (unknown) model is even looked up


def test_the_limit_is_inclusive():
    axes = SweepAxes(gpus=("L4", "H200"), max_num_seqs=(8, 16, 32))
    axes.require_within_limit(6)
    with pytest.raises(BadInput, match="6 points .* above the limit of 5"):
        axes.require_within_limit(5)


def test_a_one_million_value_axis_is_parsed_quickly():
    """Duplicates are found with a set: a 1,000,000-value axis parses in linear time, then the limit refuses it."""
    values = parse_int_list(",".join(str(n) for n in range(1, 1_000_001)), "--max-num-seqs")
    assert len(values) == 1_000_000
    with pytest.raises(BadInput, match="1,000,000 points"):
        SweepAxes(max_num_seqs=values).require_within_limit()


def test_large_grids_show_progress_on_stderr(capsys, monkeypatch):
    import capacity.cli.sweep

    monkeypatch.setattr(capacity.cli.sweep, "SWEEP_PROGRESS_MIN_POINTS", 4)  # the CLI's threshold is 1,000 points
    code = main(["sweep", "--model", "openai/whisper-tiny", "--gpu", "L4,H200", "--max-num-seqs", "8,16", "--json"])
    out, err = capsys.readouterr()
    assert code == EXIT_FITS and len(json.loads(out)["points"]) == 4
    lines = [line.split(" (")[0] for line in err.strip().splitlines()]
    assert lines == ["capacity: sweep: planning 4 points"] + [f"capacity: sweep: {n} of 4 points planned" for n in (1, 2, 3, 4)]


def test_small_grids_print_no_progress(capsys):
    code = main(["sweep", "--model", "openai/whisper-tiny", "--gpu", "L4,H200", "--max-num-seqs", "8,16", "--json"])
    assert code == EXIT_FITS and capsys.readouterr().err == ""
