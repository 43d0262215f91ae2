"""`capacity sweep` with -dp and -pp lists as typed, on the default path: each point is the `capacity plan` of its
knobs, and a DP point's total is DP x one engine's requests at once."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT, EXIT_FITS


def run_json(argv: list[str], capsys) -> tuple[int, dict]:  # type: ignore[no-untyped-def]
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_dp_points_are_one_engines_plan_and_the_engines_total(capsys, tmp_path: Path):
    knobs = ["--model", "qwen3-30b-a3b", "--gpu", "H200", "--max-model-len", "32768"]
    code, doc = run_json(["sweep", *knobs, "-dp", "1,2"], capsys)
    assert code == EXIT_FITS
    points = doc["points"]
    assert [(p["requested_data_parallel_size"], p["data_parallel_size"]) for p in points] == [(1, 1), (2, 2)]
    for p in points:
        code, plan = run_json(["plan", *knobs, "-dp", str(p["data_parallel_size"])], capsys)
        assert code == EXIT_FITS
        one_engine = plan["concurrency"]["max_concurrent_requests"]
        assert p["max_concurrent_requests"] == one_engine and p["available_kv_bytes"] == plan["kv_cache"]["available_bytes"]
        assert p["total_max_concurrent_requests"] == p["data_parallel_size"] * one_engine
    # DP 2 splits the experts over tp x dp = 2 ranks: one engine holds fewer weights, so at least as many requests
    assert points[1]["weights_bytes"] < points[0]["weights_bytes"] and points[1]["max_concurrent_requests"] >= points[0]["max_concurrent_requests"]
    table = tmp_path / "sweep.csv"
    assert main(["sweep", *knobs, "-dp", "1,2", "--csv", str(table)]) == EXIT_FITS
    rows = list(csv.DictReader(table.open()))
    assert [int(r["total_max_concurrent_requests"]) for r in rows] == [p["total_max_concurrent_requests"] for p in points]
    capsys.readouterr()
    assert main(["sweep", *knobs, "-dp", "1,2"]) == EXIT_FITS
    out = capsys.readouterr().out
    total, per = points[1]["total_max_concurrent_requests"], points[1]["max_concurrent_requests"]
    assert "H200  TP 1 x DP 2" in out and f"{total} = 2 x {per}" in out


def test_pp_points_are_the_plans_of_their_stages(capsys):
    knobs = ["--model", "llama-3.1-8b-instruct", "--gpu", "L4", "--max-model-len", "32768"]
    code, doc = run_json(["sweep", *knobs, "-pp", "1,2"], capsys)
    assert code == EXIT_FITS
    for p in doc["points"]:
        code, plan = run_json(["plan", *knobs, "-pp", str(p["pipeline_parallel_size"])], capsys)
        assert p["max_concurrent_requests"] == plan["concurrency"]["max_concurrent_requests"]
        assert p["num_blocks"] == plan["kv_cache"]["num_blocks"] and p["total_max_concurrent_requests"] == p["max_concurrent_requests"]
    assert [p["pipeline_parallel_size"] for p in doc["points"]] == [1, 2]


def test_pp_with_dp_in_one_grid_is_refused_in_one_line(capsys):
    code = main(["sweep", "--model", "llama-3.1-8b-instruct", "--gpu", "L4", "-pp", "1,2", "-dp", "1,2"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and err.count("\n") == 1 and "PP with DP is not planned" in err
