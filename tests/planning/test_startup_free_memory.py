"""requested_exceeds_free: an error where vLLM would refuse to start, a warning where only capacity's NVLink-measured
NCCL figure makes the request exceed the free memory on a GPU not known to be NVLinked.

Hand figures (vLLM 0.33): a T4's total is 15,826,954,485 B; the CUDA context with the cuBLAS handles 753,729,536 B; at TP 2
the collectives are NCCL's 975,175,680 B (H200 x2, NVLink) + vLLM's custom all-reduce buffers for a compute capability
7 GPU (no symmetric memory: 8 MiB signal + 16 MiB IPC + 8 MiB rank_data) = 1,008,730,112 B. Free at startup:
15,826,954,485 - 753,729,536 - 1,008,730,112 = 14,064,494,837 B; without the collectives 15,073,224,949 B.
- utilization 0.9: ceil(15,826,954,485 x 0.9) = 14,244,259,037 B, above the first and below the second: a warning;
- utilization 0.96: 15,193,876,306 B, above both: an error.
An H100-SXM (NVLinked, so the measured figure stands) at 0.98 asks for 83,329,022,742 B of 83,200,046,530 free: an error.
"""

from __future__ import annotations

import json
import math

import pytest

from capacity.cli.app import main

T4_TP2 = ("--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "T4", "-tp", "2", "--max-model-len", "4096", "--dtype", "float16", "--estimate", "formula")


def hazard(capsys, *args: str) -> tuple[dict, str]:
    main(["plan", *args, "--json", "-"])
    plan = json.loads(capsys.readouterr().out)
    found = [h for h in plan["hazards"] if h["id"] == "requested_exceeds_free"]
    return (found[0] if found else {}), plan["verdict"]


def test_the_hand_figures() -> None:
    assert (math.ceil(15_826_954_485 * 0.9), math.ceil(15_826_954_485 * 0.96)) == (14_244_259_037, 15_193_876_306)
    assert 15_826_954_485 - 753_729_536 - 1_008_730_112 == 14_064_494_837


@pytest.mark.parametrize(("utilization", "severity", "verdict"), [("0.9", "warning", "fits"), ("0.96", "error", "does_not_fit")])
def test_two_t4s_at_tp_2_only_warn_where_the_nvlink_nccl_figure_decides(capsys, utilization, severity, verdict):
    found, got = hazard(capsys, *T4_TP2, "--gpu-memory-utilization", utilization)
    assert (found["severity"], got) == (severity, verdict)
    assert ("over PCIe it is smaller" in found["message"]) == (severity == "warning")


def test_an_nvlinked_gpu_keeps_the_error(capsys):
    found, got = hazard(capsys, "--model", "Qwen3-8B", "--gpu", "H100-SXM", "-tp", "2", "--estimate", "formula", "--gpu-memory-utilization", "0.98")
    assert (found["severity"], got) == ("error", "does_not_fit")
