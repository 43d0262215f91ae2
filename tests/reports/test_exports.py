"""Exports of a plan: CSV sections, HTML, JSON file / stdout, atomic writes, and the suggested serve line.

The figures are worked out by hand from vLLM 0.33's formulas (see test_planner.py's worked example):
whisper-large-v3, --kv-cache-memory-bytes 10G on an H200 (defaults there: max_num_batched_tokens 8192,
max_num_seqs 1024): page 2 x 16 x 20 heads x 64 x 2 B = 81,920 B per layer, 32 layers -> 2,621,440 B
per block, 10 GiB / 2,621,440 = 4096 blocks; blocks per request vLLM 28 + 512 = 540, actual 28 + 94 = 122;
4095 // 122 = 33 requests; 4096 / 540 = 7.59x; int(4096 / 540 x 448) = 3398 tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_FITS, EXIT_RUNTIME_FAILURE
from capacity.memory.term import MemoryTerm
from capacity.planning.suggest import command_for, suggested_kv_cache_memory_bytes
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

GiB = 2**30
MiB = 2**20
WHISPER_10G = ["plan", "--model", "openai/whisper-large-v3", "--gpu", "H200", "--kv-cache-memory-bytes", "10G"]
CATALOG = REPO_ROOT / "capacity" / "source" / "catalog" / "models"


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(code: int, out: str, err: str, *needles: str) -> str:
    assert code == EXIT_BAD_INPUT, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("capacity: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def kv(df: pd.DataFrame, key: str, column: str = "key") -> object:
    rows = df[df[column] == key]
    assert len(rows) == 1, f"{key}: {len(rows)} rows"
    return rows.iloc[0]["value"]


# --- CSV ----------------------------------------------------------------------------------------------------


@pytest.fixture
def whisper_csv(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Path:
    code, out, err = run(capsys, [*WHISPER_10G, "--csv", "out"])
    assert code == EXIT_FITS, err
    assert "FITS: the KV cache holds 33 requests" in out  # the terminal report still prints
    assert err.strip() == "capacity: wrote out/ (9 CSV files)"
    return tmp_path / "out"


def test_csv_is_a_folder_with_one_file_per_section(whisper_csv: Path):
    names = sorted(p.name for p in whisper_csv.iterdir())
    assert names == sorted(f"{s}.csv" for s in ("summary", "memory", "budget", "kv_groups", "block_tables", "warmup", "hazards", "knobs", "fingerprint"))


def test_csv_memory_terms(whisper_csv: Path):
    df = pd.read_csv(whisper_csv / "memory.csv").set_index("term")
    assert list(df.columns) == ["label", "bytes", "gib", "share_of_gpu", "kind", "method"]
    assert df.loc["weights", "bytes"] == (1_543_490_560 + 96 * 1280) * 2 and df.loc["weights", "kind"] == "exact"  # + vLLM's K biases
    assert df.loc["encoder_cache", "bytes"] == 5 * 1500 * 1280 * 2  # 5 audio items x 1500 tokens x 1280 hidden x 2 B
    assert df.loc["kv_cache", "bytes"] == 10 * GiB and df.loc["kv_cache", "kind"] == "exact"
    # block tables: 2 groups x 2 tables x 1024 reqs x 512 blocks x 4 B + 2 x 8192 slots x 8 B
    assert df.loc["block_tables", "bytes"] == 2 * 2 * 1024 * 512 * 4 + 2 * 8192 * 8 == 8_519_680
    # the formulas' 256 MiB less the cuBLAS handles vLLM 0.33 creates before its snapshot (tests/memory/test_cuda_context.py)
    assert df.loc["non_torch", "bytes"] == 256 * MiB - 102_760_448 and df.loc["non_torch", "kind"] == "estimated"
    assert df.loc["kv_cache", "gib"] == 10.0
    assert df.loc["kv_cache", "share_of_gpu"] == round(10 * GiB / 150_109_880_320, 4) == 0.0715


def test_csv_kv_groups(whisper_csv: Path):
    df = pd.read_csv(whisper_csv / "kv_groups.csv")
    got = df[["kind", "num_layers", "page_size_bytes", "group_bytes_per_block", "blocks_per_request_vllm", "blocks_per_request_actual"]]
    assert got.values.tolist() == [["full", 32, 81_920, 2_621_440, 28, 28], ["cross", 32, 81_920, 2_621_440, 512, 94]]
    assert df["sliding_window"].isna().all()


def test_csv_budget(whisper_csv: Path):
    df = pd.read_csv(whisper_csv / "budget.csv")
    assert list(df.columns) == ["scope", "quantity", "modality", "value", "unit"]

    def q(name: str, modality: str | None = None) -> float:
        rows = df[(df.quantity == name) & ((df.modality == modality) if modality else df.modality.isna())]
        assert len(rows) == 1, name
        return rows.iloc[0]["value"]

    assert q("gpu_total") == 150_109_880_320
    assert q("requested") == 138_101_089_895  # ceil(150,109,880,320 x 0.92)
    assert q("available_kv_cache") == 10 * GiB
    assert q("bytes_per_block") == 2_621_440
    assert q("num_blocks") == 4096
    assert (q("blocks_per_request_vllm"), q("blocks_per_request_actual")) == (540, 122)
    assert q("needed_for_one_request") == 540 * 2_621_440
    assert q("actual_requests") == 33
    assert q("max_concurrent_requests") == 33  # min(33, max_num_seqs 1024)
    assert q("concurrency_actual") == 33.57  # 4095 / 122
    assert q("concurrency_vllm_reported") == 7.59  # 4096 / 540
    assert q("tokens_vllm_reported") == 3398
    assert (q("encoder_compute_budget"), q("encoder_cache_size")) == (8192, 8192)
    assert q("max_tokens_per_item", "audio") == 1500
    assert q("max_items_per_batch", "audio") == 5  # min(8192 // 1500, 8192 // 1500 requests x 1 item)


def test_csv_block_tables_sum_to_the_memory_term(whisper_csv: Path):
    df = pd.read_csv(whisper_csv / "block_tables.csv")
    # width: max(448, 8192, 1500) = 8192 tokens -> 512 blocks; before #46753: max(448, 1500) -> cdiv(1500, 16) = 94 -> 96 (x8)
    assert df["width_blocks"].tolist() == [512, 512] and df["width_tokens"].tolist() == [8192, 8192]
    assert df["width_blocks_pre_fix"].tolist() == [96, 96] and df["width_tokens_pre_fix"].tolist() == [1536, 1536]
    assert df["table_bytes"].tolist() == [2 * 1024 * 512 * 4] * 2
    assert df["slot_mapping_bytes"].tolist() == [8192 * 8] * 2
    memory = pd.read_csv(whisper_csv / "memory.csv").set_index("term")
    assert int(df["table_bytes"].sum() + df["slot_mapping_bytes"].sum()) == memory.loc["block_tables", "bytes"]


def test_csv_warmup(whisper_csv: Path):
    df = pd.read_csv(whisper_csv / "warmup.csv")
    scalar = df[df.group.isna()].set_index("key")["value"]
    assert (scalar["prompt_len"], scalar["decode_len"], scalar["num_reqs"]) == ("2", "5", "43")  # mixed column reads as text
    assert scalar["max_encoder_len_source"] == "max_source_positions"
    per_group = df[df.key == "blocks_per_request"].set_index("group")["value"].astype(int)
    assert per_group.to_dict() == {0: 1, 1: 94}  # cdiv(5, 16) = 1 self block; cdiv(1500, 16) = 94 cross blocks


def test_csv_hazards_knobs_summary_fingerprint(whisper_csv: Path):
    hazards = pd.read_csv(whisper_csv / "hazards.csv")
    assert list(hazards.columns) == ["id", "severity", "message", "fix"]
    row = hazards.set_index("id").loc["vllm_concurrency_pessimistic"]
    assert row["severity"] == "info" and "7.59x" in row["message"] and "33.57x" in row["message"]

    knobs = pd.read_csv(whisper_csv / "knobs.csv").set_index("knob")
    assert knobs.loc["kv_cache_memory_bytes", "value"] == str(10 * GiB) and not knobs.loc["kv_cache_memory_bytes", "vllm_default"]
    assert knobs.loc["max_num_seqs", "value"] == "1024" and knobs.loc["max_num_seqs", "vllm_default"]
    assert knobs.loc["limit_mm_per_prompt", "value"] == "audio=999"

    summary = pd.read_csv(whisper_csv / "summary.csv")
    assert kv(summary, "verdict") == "fits" and kv(summary, "actual_requests") == "33"
    assert kv(summary, "max_concurrent_requests") == "33" and kv(summary, "concurrency_limited_by") == "kv_cache"
    assert "--kv-cache-memory-bytes 10737418240" in str(kv(summary, "suggested_command"))

    fp = pd.read_csv(whisper_csv / "fingerprint.csv")
    config = json.loads((CATALOG / "openai--whisper-large-v3.json").read_text())
    sha = hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert kv(fp, "config_sha256") == sha
    assert kv(fp, "vllm_semantics_version") == "0.33.0"
    assert kv(fp, "capacity_version") == "0.1.0"
    assert kv(fp, "gpu") == "H200" and kv(fp, "gpu_total_memory_bytes") == "150109880320"


# --- JSON ---------------------------------------------------------------------------------------------------


def test_json_file_equals_json_on_stdout(capsys, tmp_path):
    code, out, err = run(capsys, [*WHISPER_10G, "--json"])
    assert code == EXIT_FITS and err == ""
    printed = json.loads(out)
    code, out, err = run(capsys, [*WHISPER_10G, "--json", "plan.json"])
    assert code == EXIT_FITS, err
    assert "FITS" in out  # --json PATH keeps the terminal report on stdout
    written = json.loads((tmp_path / "plan.json").read_text())
    assert written == printed
    assert written["concurrency"] == {"vllm_reported": 7.59, "actual": 33.57, "actual_requests": 33, "max_concurrent_requests": 33, "limited_by": "kv_cache"}
    assert written["kv_cache"]["num_blocks"] == 4096 and written["kv_cache"]["tokens_vllm_reported"] == 3398
    assert written["fingerprint"]["vllm_semantics_version"] == "0.33.0"


@pytest.mark.parametrize(
    "argv",
    [
        ["--json", "--gpu", "H200"],  # bare --json followed by another option
        ["--gpu", "H200", "--json"],  # bare --json last
        ["--gpu", "H200", "--json", "-"],
        ["--gpu", "H200", "--json=-"],
    ],
    ids=["bare-then-option", "bare-last", "dash", "equals-dash"],
)
def test_bare_json_prints_to_stdout(capsys, tmp_path, argv):
    code, out, err = run(capsys, ["plan", "--model", "openai/whisper-large-v3", "--kv-cache-memory-bytes", "10G", *argv])
    assert code == EXIT_FITS, err
    assert json.loads(out)["kv_cache"]["num_blocks"] == 4096
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_json_equals_path(capsys, tmp_path):
    code, out, err = run(capsys, [*WHISPER_10G, "--json=p.json"])
    assert code == EXIT_FITS, err
    assert json.loads((tmp_path / "p.json").read_text())["concurrency"]["actual_requests"] == 33


# --- HTML ---------------------------------------------------------------------------------------------------


def test_html_report_sections_and_figures(capsys, tmp_path):
    code, out, err = run(capsys, [*WHISPER_10G, "--html", "report.html"])
    assert code == EXIT_FITS, err
    page = (tmp_path / "report.html").read_text()
    for section in ("verdict", "memory", "kv", "budget", "warmup", "hazards", "knobs", "provenance", "fingerprint"):
        assert f'id="{section}"' in page, section
    assert "FITS: the KV cache holds 33 requests at max_model_len 448; the server runs 33 at once (the smaller of that and max_num_seqs 1024)" in page
    assert "limited by kv_cache" in page
    assert "7.59x" in page and "33.57x = 33 requests" in page and "3,398" in page
    assert "4,096" in page and "2,621,440" in page and "540 / 122" in page
    # the serve line's text, each flag with its value in an unbreakable span
    serve = page[page.index('<pre class="serve">') : page.index("</pre>", page.index('<pre class="serve">'))]
    assert re.sub("<[^>]+>", "", serve) == (
        "vllm serve openai/whisper-large-v3 --max-model-len 448 --max-num-seqs 1024 --max-num-batched-tokens 8192 --kv-cache-memory-bytes 10737418240"
    )
    assert '<span class="arg">--max-num-seqs 1024</span>' in serve
    # the stacked bar: one rect per non-empty term and the unused rest, each with a tooltip
    for term in ("weights", "activation_peak", "encoder_cache", "non_torch", "cuda_graphs", "kv_cache", "cuda_context", "block_tables", "unused"):
        assert f'class="seg seg-{term}"' in page, term
    assert "KV cache: 10,737,418,240 B (10.00 GiB" in page
    # provenance and fingerprint
    config = json.loads((CATALOG / "openai--whisper-large-v3.json").read_text())
    assert hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest() in page
    assert "vllm_semantics_version" in page and "0.33.0" in page
    assert 'class="kind kind-exact"' in page and 'class="kind kind-estimated"' in page


def test_html_is_self_contained(capsys, tmp_path):
    code, out, err = run(capsys, [*WHISPER_10G, "--html", "report.html"])
    assert code == EXIT_FITS, err
    page = (tmp_path / "report.html").read_text().lower()
    for forbidden in ("<script", "<link", "src=", "href=", "@import", "url(http", "http://", "https://"):
        assert forbidden not in page, forbidden
    assert page.count("<style>") == 1 and "<svg" in page


SCRIPT = "<script>alert(1)</script>"


def script_named_model(tmp_path: Path) -> Path:
    """A whisper-tiny folder whose path contains <script>alert(1)</script> (the '/' makes it two folder levels)."""
    folder = tmp_path / "<script>alert(1)<" / "script>" / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text((CATALOG / "openai--whisper-tiny.json").read_text())
    assert SCRIPT in str(folder)
    return folder


def test_html_escapes_text_from_inputs(capsys, tmp_path):
    folder = script_named_model(tmp_path)
    code, out, err = run(capsys, ["plan", "--model", str(folder), "--gpu", "H200", "--html", "report.html", "--csv", "out"])
    assert code == EXIT_FITS, err
    page = (tmp_path / "report.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page.lower()
    assert "alert(1)</script>" not in page
    # the CSV keeps the name as it is
    fp = pd.read_csv(tmp_path / "out" / "fingerprint.csv")
    assert SCRIPT in str(kv(fp, "model"))


def test_sweep_html_escapes_the_model_name(capsys, tmp_path):
    folder = script_named_model(tmp_path)
    code, out, err = run(capsys, ["sweep", "--model", str(folder), "--gpu", "L4", "--max-num-seqs", "16,64", "--html", "s.html"])
    assert code == EXIT_FITS, err
    page = (tmp_path / "s.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script" not in page.lower()


# --- atomic writes and bad destinations -----------------------------------------------------------------------


def test_missing_folder_is_bad_input_and_nothing_is_written(capsys, tmp_path):
    line = one_error_line(*run(capsys, [*WHISPER_10G, "--csv", "out", "--json", "p.json", "--html", "nope/r.html"]), "--html", "nope/r.html", "does not exist")
    assert "cannot write" in line
    assert list(tmp_path.iterdir()) == []  # the CSV folder made for this run was removed again, no JSON, no temp files


def test_csv_onto_a_file_is_bad_input(capsys, tmp_path):
    (tmp_path / "out").write_text("keep me")
    one_error_line(*run(capsys, [*WHISPER_10G, "--csv", "out"]), "--csv", "is a file")
    assert (tmp_path / "out").read_text() == "keep me"


def test_same_path_for_two_exports_is_bad_input(capsys, tmp_path):
    one_error_line(*run(capsys, [*WHISPER_10G, "--html", "x", "--json", "x"]), "--json x", "--html")
    assert list(tmp_path.iterdir()) == []


def test_failed_write_leaves_the_old_file_and_no_temp_file(capsys, tmp_path, monkeypatch):
    (tmp_path / "report.html").write_text("old report")
    (tmp_path / "plan.json").write_text("old json")
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            if data.lstrip().startswith(b"{"):
                self.fh.write(data[:100])  # half of the JSON reaches the temporary file, then the disk is full
                raise OSError(28, "No space left on device")
            return self.fh.write(data)

        def __getattr__(self, name):
            return getattr(self.fh, name)

    monkeypatch.setattr(os, "fdopen", lambda fd, mode="r": FullDisk(real_fdopen(fd, mode)))
    one_error_line(*run(capsys, [*WHISPER_10G, "--html", "report.html", "--json", "plan.json"]), "--json", "No space left on device")
    assert (tmp_path / "report.html").read_text() == "old report"  # all or nothing: the HTML was staged but not moved
    assert (tmp_path / "plan.json").read_text() == "old json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "report.html"]


def test_rewrite_replaces_whole_files(capsys, tmp_path):
    (tmp_path / "report.html").write_text("x" * 500_000)
    code, out, err = run(capsys, [*WHISPER_10G, "--html", "report.html"])
    assert code == EXIT_FITS, err
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>") and "x" * 100 not in page
    assert oct((tmp_path / "report.html").stat().st_mode & 0o777) != oct(0o600)  # not the temp file's private mode


def test_exports_are_written_when_the_plan_does_not_fit(capsys, tmp_path):
    code, out, err = run(capsys, ["plan", "--model", "openai/whisper-large-v3", "--gpu", "L4", "--max-model-len", "1000", "--json", "p.json"])
    assert code == EXIT_DOES_NOT_FIT, err
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["verdict"] == "does_not_fit"
    assert "max_model_len_above_model_limit" in {h["id"] for h in plan["hazards"]}


def test_internal_error_is_one_line_and_exit_3(capsys, monkeypatch):
    import capacity.planning.planner

    def boom(*args, **kwargs):
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(capacity.planning.planner, "plan_for", boom)
    code, out, err = run(capsys, WHISPER_10G)
    assert code == EXIT_RUNTIME_FAILURE and out == ""
    assert err.strip().splitlines() == [
        "capacity: error: internal error: ZeroDivisionError: division by zero second line (set CAPACITY_TRACEBACK=1 for the traceback)"
    ]


# --- flags out: the vllm serve line ----------------------------------------------------------------------------


def test_kv_cache_memory_bytes_from_a_measured_plan(make_plan):
    """vLLM 0.33 suggests requested - non-KV - 150 MiB. On an L4 (22.03 GiB = 2203 x 2^30 // 100 = 23,654,532,382 B):
    requested = ceil(23,654,532,382 x 0.92) = ceil(21,762,169,791.44) = 21,762,169,792; with measured non-KV terms of
    3 GiB + 1 GiB + 0 + 256 MiB + 256 MiB = 4,831,838,208 B the suggestion is
    21,762,169,792 - 4,831,838,208 - 157,286,400 = 16,773,045,184."""
    p = make_plan("openai/whisper-large-v3", gpu="L4")
    assert p.memory["kv_cache"].kind == "estimated"
    assert "--kv-cache-memory-bytes" not in command_for(p)
    measured = dict(p.memory)
    measured.update(
        weights=MemoryTerm(3 * GiB, "measured", "test"),
        activation_peak=MemoryTerm(1 * GiB, "measured", "test"),
        encoder_cache=MemoryTerm(0, "measured", "test"),
        non_torch=MemoryTerm(256 * MiB, "measured", "test"),
        cuda_graphs=MemoryTerm(256 * MiB, "measured", "test"),
        kv_cache=MemoryTerm(0, "measured", "test"),
    )
    q = replace(p, memory=measured)
    assert q.requested_memory_bytes == 21_762_169_792
    assert q.non_kv_bytes == 4_831_838_208
    assert suggested_kv_cache_memory_bytes(q) == 16_773_045_184
    line = command_for(q)
    assert "--kv-cache-memory-bytes 16773045184" in line and "--gpu-memory-utilization 0.92" in line
    assert line.startswith("vllm serve openai/whisper-large-v3 --max-model-len 448 --max-num-seqs 256 --max-num-batched-tokens 2048")


def test_user_kv_cache_memory_bytes_is_kept(make_plan):
    p = make_plan("openai/whisper-large-v3", kv_cache_memory_bytes=10 * GiB)
    line = command_for(p)
    assert "--kv-cache-memory-bytes 10737418240" in line and "--gpu-memory-utilization" not in line


# --- every catalog model renders -----------------------------------------------------------------------------


def _catalog_names() -> list[str]:
    from capacity.source.resolve import catalog

    return list(catalog())


@pytest.mark.parametrize("model", _catalog_names())
def test_every_catalog_model_exports(model):
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs
    from reports.export import json_document
    from reports.frames import frames
    from reports.html import render_html

    plan = plan_for(model, ServingArgs(), "H200")
    page = render_html(plan)
    assert "<script" not in page.lower() and 'id="provenance"' in page and ("FITS:" in page or "DOES NOT FIT:" in page)
    sections = frames(plan)
    assert len(sections["kv_groups"]) == len(sections["block_tables"]) == len(plan.kv.groups)
    assert len(sections["memory"]) == len(plan.memory) and len(sections["hazards"]) == len(plan.hazards)
    assert sections["memory"]["bytes"].sum() == sum(t.bytes for t in plan.memory.values())
    assert json.loads(json.dumps(json_document(plan)))["fingerprint"]["model"] == plan.source.name


def test_html_shows_an_over_committed_gpu(capsys, tmp_path):
    # 30 GiB of KV cache on an L4 (22.03 GiB = 23,654,532,382 B to CUDA): vLLM would allocate past the GPU's memory
    code, out, err = run(
        capsys, ["plan", "--model", "openai/whisper-large-v3", "--gpu", "L4", "--kv-cache-memory-bytes", "30G", "--html", "r.html", "--csv", "t"]
    )
    assert code == EXIT_DOES_NOT_FIT, err
    page = (tmp_path / "r.html").read_text()
    assert "DOES NOT FIT: kv_cache_memory_bytes_oom" in page
    assert "The plan over-commits the GPU by" in page and "over-committed by" in page
    budget = pd.read_csv(tmp_path / "t" / "budget.csv").set_index("quantity")
    memory = pd.read_csv(tmp_path / "t" / "memory.csv")
    assert int(budget.loc["unused", "value"]) == 23_654_532_382 - int(memory["bytes"].sum()) < 0


def test_kv_cache_memory_bytes_from_a_real_profile():
    """A plan from the committed H200 profile of whisper-large-v3 has a measured KV term. vLLM's non-KV memory is
    total_consumed + transient peak headroom + CUDA graphs (the profile's fields); requested on the H200 is
    ceil(150,109,880,320 x 0.92) = 138,101,089,895."""
    from capacity.memory.measured_profile import load_profile
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    path = REPO_ROOT / "bench" / "results" / "h200-profiles-2026-11-30" / "profile-openai--whisper-large-v3.json"
    raw = json.loads(path.read_text())
    non_kv = raw["total_consumed_bytes"] + raw["transient_peak_headroom_bytes"] + raw["cuda_graphs"]["estimate_bytes"]
    plan = plan_for("openai/whisper-large-v3", ServingArgs(), "H200", load_profile(path))
    assert plan.memory["kv_cache"].kind == "measured"
    assert plan.requested_memory_bytes == 138_101_089_895 and plan.non_kv_bytes == non_kv
    expected = 138_101_089_895 - non_kv - 150 * MiB
    assert suggested_kv_cache_memory_bytes(plan) == expected
    assert f"--kv-cache-memory-bytes {expected} --gpu-memory-utilization 0.92" in plan.suggested_command()


def test_terminal_and_csv_say_what_the_kv_cache_holds_and_what_the_server_runs(capsys, tmp_path):
    """What the server runs, not what the cache holds: with --max-num-seqs 8 the KV cache (10 GiB: 4,096 blocks, 4,095 usable // 122 per
    request) still holds 33 requests at max_model_len 448, and the server runs min(33, 8) = 8 of them."""
    code, out, err = run(capsys, [*WHISPER_10G, "--max-num-seqs", "8", "--csv", "tables"])
    assert code == EXIT_FITS, err
    assert "FITS: the KV cache holds 33 requests at max_model_len 448; the server runs 8 at once (the smaller of that and max_num_seqs 8)" in " ".join(out.split())
    summary = pd.read_csv(tmp_path / "tables" / "summary.csv")
    assert kv(summary, "actual_requests") == "33" and kv(summary, "max_concurrent_requests") == "8"
    assert kv(summary, "concurrency_limited_by") == "max_num_seqs"
