"""The catalog's totals are what cudaMemGetInfo reports: every GPU total a benchmark log prints on a GPU its sidecar
names, and every total a bench/results profile measured, lies within 0.1 % of the catalog's (bench/predict_logs.py's
check, run on the committed logs and profiles)."""

from __future__ import annotations

import importlib.util
import sys

from capacity.gpu.catalog import gpu_by_name
from capacity.units import GiB
from tests.support.paths import REPO_ROOT


def _predict_logs():
    spec = importlib.util.spec_from_file_location("predict_logs", REPO_ROOT / "bench" / "predict_logs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("predict_logs", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_logged_and_measured_total_agrees_with_the_catalog_within_a_tenth_of_a_percent() -> None:
    checks = _predict_logs().gpu_total_checks()
    off = [c.text() for c in checks if c.ok is False]
    assert off == []
    named = {c.gpu for c in checks if c.ok}
    # the GPUs the committed logs name with a total (RTX 3090 and 4090 were nvidia-smi's 24,576 / 24,564 MiB before)
    assert {"RTX-3090", "RTX-4090", "T4", "V100-32GB", "L40S", "GB10", "H200"} <= named
    assert sum(c.where.startswith("bench/results/") for c in checks if c.ok) >= 60  # the H200 profiles' measured totals


def test_the_totals_are_the_logged_figures() -> None:
    # V0 'total_gpu_memory=23.58GiB' (bench/vllm_logs/llama-3.1-8b-rtx3090-v0-engine-three-starts.log)
    assert round(gpu_by_name("RTX-3090").total_memory_bytes / GiB, 2) == 23.58
    # 'Free memory on device (22.92/23.52 GiB)' (bench/vllm_logs/qwen3-32b-awq-2xrtx4090-tp2-*.log)
    assert round(gpu_by_name("RTX-4090").total_memory_bytes / GiB, 2) == 23.52
    # 'Free memory on device (78.66/79.19 GiB)' (bench/vllm_logs/llava-v1.6-mistral-7b-h100-llm-class-v0.10.2.log)
    assert round(gpu_by_name("H100-80GB").total_memory_bytes / GiB, 2) == 79.19
    # the project's H200: cudaMemGetInfo's total, measured
    assert gpu_by_name("H200").total_memory_bytes == 150_109_880_320


def test_a_plan_says_which_setting_its_total_assumes() -> None:
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    plan = plan_for("meta-llama/Llama-3.1-8B-Instruct", ServingArgs(), gpu_name="RTX-4090")
    assert any("planned with CUDA's total" in n and "WSL2" in n for n in plan.notes)
    plan = plan_for("meta-llama/Llama-3.1-8B-Instruct", ServingArgs(), gpu_name="L4")
    assert not any("planned with CUDA's total" in n for n in plan.notes)
