"""bench/log_groups.py: the log benchmark grouped by vLLM rules, GPU family and model kind (issue 28's table)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from bench.log_groups import GPU_FAMILIES, NOT_NAMED, gpu_family, group_summary, group_tables
from tests.support.paths import REPO_ROOT


def row(group: str, split: str, kv: float | None, plan: float | None, tokens: float | None, plannable: bool = True) -> SimpleNamespace:
    return SimpleNamespace(
        gpu_family=group, split=split, plannable=plannable, plan_error_percent=plan, error_percent={"available_kv": kv, "kv_tokens": tokens}
    )


def test_each_group_gives_the_median_absolute_error_of_its_logs():
    rows = [
        row("Ada", "held-out", 1.0, 1.5, None),
        row("Ada", "calibration", -3.0, None, -2.0),
        row("Ada", "calibration", 5.0, -4.5, 4.0),
        row("Hopper", "held-out", 0.5, 0.5, 0.5),
        row("Hopper", "held-out", 99.0, 99.0, 99.0, plannable=False),  # not planned: in no group
    ]
    got = group_summary(rows, "gpu_family")
    assert list(got) == ["Ada", "Hopper"]
    # |1|, |-3|, |5| -> 3; plan |1.5|, |-4.5| -> 3; tokens |-2|, |4| -> 3
    assert got["Ada"] == {
        "logs": 3, "held_out": 1,
        "available_kv_n": 3, "available_kv_median_abs_percent": 3.0,
        "plan_n": 2, "plan_median_abs_percent": 3.0,
        "kv_tokens_n": 2, "kv_tokens_median_abs_percent": 3.0,
    }  # fmt: skip
    assert got["Hopper"]["logs"] == 1 and got["Hopper"]["available_kv_median_abs_percent"] == 0.5


def test_the_tables_name_each_grouping_and_say_how_many_logs_a_median_has():
    by_group = {key: group_summary([], key) for key in ("semantics", "gpu_family", "model_kind")}
    by_group["gpu_family"] = group_summary([row("Ada", "held-out", -2.5, None, 1.0)], "gpu_family")
    text = "\n".join(group_tables(by_group))
    assert "### By vLLM rules" in text and "### By GPU family" in text and "### By model kind" in text
    assert "| Ada | 1 | 1 | 2.50 % (1) | - | 1.00 % (1) |" in text


def test_a_gpu_given_only_by_its_size_or_total_has_no_family():
    plan = SimpleNamespace(gpu=SimpleNamespace(name="11.63GiB GPU", source="size"))
    assert gpu_family(plan, named=True) == NOT_NAMED
    assert gpu_family(SimpleNamespace(gpu=SimpleNamespace(name="H200", source="log")), named=False) == NOT_NAMED
    assert gpu_family(SimpleNamespace(gpu=SimpleNamespace(name="H200", source="log")), named=True) == "Hopper"


def test_every_catalog_gpu_has_a_family():
    names = [g["name"] for g in json.loads((REPO_ROOT / "capacity" / "gpu" / "gpus.json").read_text())]
    assert sorted(GPU_FAMILIES) == sorted(names)


def test_the_rules_are_listed_oldest_first():
    rows = [
        SimpleNamespace(semantics=name, vllm_version=version, split="calibration", plannable=True, plan_error_percent=None, error_percent={})
        for name, version in (("0.29-0.32", "0.30.0"), ("0.8-0.10", "0.10.2"), ("0.11", "0.11.0"), ("0.8-0.10", "0.9.0.1"))
    ]
    assert list(group_summary(rows, "semantics")) == ["0.8-0.10", "0.11", "0.29-0.32"]
