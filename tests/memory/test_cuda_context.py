"""The cuBLAS handles on the side of vLLM's baseline snapshot each release puts them (capacity/memory/cuda_context.py).

bench/results/cublas-baseline-2026-12-02 (H200): the CUDA context holds 650,969,088 B; vLLM 0.33's init_device sequence
(mm and linear with a bias, then empty_cache) adds 102,760,448 B of cuBLAS handles before its snapshot. Earlier releases
create them at the profile run's first matmul, inside the non-torch growth: capacity's non-torch constants (256 MiB for
the formulas; 0.27 GiB, the calibration logs' median, all from releases before 0.33) hold them, and lose them under 0.33.
"""

from __future__ import annotations

import json

import pytest

from capacity.cli.app import main

CONTEXT, HANDLES, MiB = 650_969_088, 102_760_448, 2**20


def memory(capsys, *args: str) -> dict:
    assert main(["plan", *args, "--json", "-"]) == 0
    return json.loads(capsys.readouterr().out)["memory"]


@pytest.mark.parametrize(("version", "context", "non_torch"), [("0.32.0", CONTEXT, 256 * MiB), ("0.33.0", CONTEXT + HANDLES, 256 * MiB - HANDLES)])
def test_the_handles_move_from_the_profile_into_the_baseline_at_0_33(capsys, version, context, non_torch):
    m = memory(capsys, "--model", "Qwen3-8B", "--gpu", "H200", "--estimate", "formula", "--vllm-version", version)
    assert (m["cuda_context"]["bytes"], m["non_torch"]["bytes"]) == (context, non_torch)


def test_the_traced_plan_takes_the_logs_figure_less_the_handles_under_0_33(capsys):
    """whisper-large-v3 runs convolutions: 0.27 GiB (289,910,292 B) + cuDNN 124,936,960 B, less the handles."""
    m = memory(capsys, "--model", "openai/whisper-large-v3", "--gpu", "L4")
    assert m["non_torch"]["bytes"] == round(0.27 * 2**30) + 124_936_960 - HANDLES == 312_086_804
