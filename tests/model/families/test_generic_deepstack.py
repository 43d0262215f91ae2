"""Qwen3-VL's deepstack buffers in "Model loading took": vLLM's Qwen3VLForConditionalGeneration.__init__ allocates
`deepstack_input_embeds`, one zeros(max_num_batched_tokens, text hidden_size) per deepstack level, in the model dtype
on the GPU, whole on every rank, where its visual tower is built (0.33: not on a later pipeline stage, not with every
modality the tower serves at --limit-mm-per-prompt 0); Qwen3.5 allocates none.

Worked by hand from the catalog's Qwen/Qwen3-VL-8B-Instruct config: deepstack_visual_indexes [8, 16, 24] (3 levels),
text hidden_size 4096, bfloat16: 3 x max_num_batched_tokens x 4096 x 2 B.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from capacity.cli.app import main
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures are worked by hand on the formula path; the load-buffers term is the same on the trace path")

DEEPSTACK = [f"deepstack_input_embeds[{level}] 8,192 x 4,096 x 2 B" for level in range(3)]


def plan_json(capsys: pytest.CaptureFixture[str], model: str, *argv: str) -> dict[str, Any]:
    code = main(["plan", "--model", model, "--gpu", "H200", "--estimate", "formula", "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_each_deepstack_level_is_a_load_buffer(capsys: pytest.CaptureFixture[str]):
    at_8192 = plan_json(capsys, "Qwen/Qwen3-VL-8B-Instruct", "--max-num-batched-tokens", "8192")
    at_4096 = plan_json(capsys, "Qwen/Qwen3-VL-8B-Instruct", "--max-num-batched-tokens", "4096")
    method = at_8192["memory"]["load_buffers"]["method"]
    assert all(buffer in method for buffer in DEEPSTACK)
    assert at_8192["memory"]["load_buffers"]["bytes"] - at_4096["memory"]["load_buffers"]["bytes"] == 3 * 4096 * 4096 * 2 == 100_663_296


def test_whole_on_every_tensor_parallel_rank(capsys: pytest.CaptureFixture[str]):
    one = plan_json(capsys, "Qwen/Qwen3-VL-8B-Instruct", "--max-num-batched-tokens", "8192")["memory"]["load_buffers"]
    two = plan_json(capsys, "Qwen/Qwen3-VL-8B-Instruct", "--max-num-batched-tokens", "8192", "-tp", "2")["memory"]["load_buffers"]
    assert all(buffer in two["method"] for buffer in DEEPSTACK)
    assert one["method"].count("deepstack") == two["method"].count("deepstack") == 3


def test_none_where_the_visual_tower_is_not_built(capsys: pytest.CaptureFixture[str]):
    with_tower = plan_json(capsys, "Qwen/Qwen3-VL-8B-Instruct", "--max-num-batched-tokens", "8192")
    text_only = plan_json(capsys, "Qwen/Qwen3-VL-8B-Instruct", "--max-num-batched-tokens", "8192", "--limit-mm-per-prompt", '{"image": 0, "video": 0}')
    assert "deepstack" not in text_only["memory"]["load_buffers"]["method"]
    assert with_tower["memory"]["load_buffers"]["bytes"] - text_only["memory"]["load_buffers"]["bytes"] == 3 * 8192 * 4096 * 2
    # one modality still served: the tower is built
    images_only = plan_json(capsys, "Qwen/Qwen3-VL-8B-Instruct", "--max-num-batched-tokens", "8192", "--limit-mm-per-prompt", '{"video": 0}')
    assert all(buffer in images_only["memory"]["load_buffers"]["method"] for buffer in DEEPSTACK)


def test_first_pipeline_stage_only(capsys: pytest.CaptureFixture[str]):
    stages = plan_json(capsys, "Qwen/Qwen3-VL-8B-Instruct", "--max-num-batched-tokens", "8192", "-pp", "2")["stages"]
    first, second = (stage["memory"]["load_buffers"]["method"] for stage in stages)
    assert all(buffer in first for buffer in DEEPSTACK)
    assert "deepstack" not in second


def test_qwen3_5_allocates_none_even_with_deepstack_levels(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    """qwen3_5.py sets use_deepstack from the config but allocates no buffer. The published Qwen3.5 configs list no
    level; a copy of Qwen3.5-27B's given three still plans none."""
    folder = tmp_path / "qwen3.5-27b-with-levels"
    shutil.copytree(REPO_ROOT / "capacity" / "source" / "catalog" / "models" / "Qwen--Qwen3.5-27B", folder)
    config = json.loads((folder / "config.json").read_text())
    config["vision_config"]["deepstack_visual_indexes"] = [8, 16, 24]
    (folder / "config.json").write_text(json.dumps(config))
    plan = plan_json(capsys, str(folder), "--max-num-batched-tokens", "8192")
    assert "deepstack" not in plan["memory"]["load_buffers"]["method"]


def test_a_public_qwen3_vl_load_counts_the_deepstack_buffers(capsys: pytest.CaptureFixture[str]):
    """A public Qwen3-VL-8B start (tests/fixtures/vllm_logs/README.md: a source build of April 2026, GPU not named)
    printed `Model loading took 16.78 GiB` at max_num_batched_tokens 8192. capacity's weights + load buffers with the
    log's knobs: 16.77 GiB; the log prints two decimals and the allocator's rounding is estimated, so within 0.015 GiB.
    Without the three deepstack buffers (0.1875 GiB) the load would be 0.2 GiB short."""
    log = (REPO_ROOT / "tests" / "fixtures" / "vllm_logs" / "qwen3-vl-8b-p2p-nccl-prefill-dev15312-excerpt.log").read_text()
    logged_gib = float(re.search(r"Model loading took ([0-9.]+) GiB", log).group(1))
    batched = re.search(r"max_num_batched_tokens=(\d+)", log).group(1)
    plan = plan_json(capsys, "Qwen/Qwen3-VL-8B-Instruct", "--max-num-batched-tokens", batched, "--max-model-len", "4096", "--max-num-seqs", "5")
    load_gib = (plan["memory"]["weights"]["bytes"] + plan["memory"]["load_buffers"]["bytes"]) / 2**30
    deepstack_gib = 3 * int(batched) * 4096 * 2 / 2**30
    assert logged_gib == 16.78 and deepstack_gib == 0.1875
    assert abs(load_gib - logged_gib) <= 0.015
    assert logged_gib - (load_gib - deepstack_gib) > 0.15
