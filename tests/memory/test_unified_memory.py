"""Unified-memory GPUs: the free figure vLLM reads per version, and the host memory a cold start's compile puts into
vLLM's non-torch term there (capacity/memory/unified_memory.py).

The figures come from the GB10 vLLM 0.13.0 log (bench/vllm_logs/qwen3-30b-a3b-fp8-gb10-util0.3-kvfp8-v0.13.0.log):
'gpu_memory_utilization': 0.3, 'Available KV cache memory: 4.04 GiB', 'GPU KV cache size: 88,176 tokens', a cold
compile ('Compiling a graph for compile range (1, 2048) takes 86.12 s'). By hand: requested = 0.3 x 121.69 GiB =
36.507 GiB, so vLLM's non-KV memory is 36.507 - 4.04 = 32.467 GiB; before this module capacity planned 30.83 GiB of it
(available KV +40.5 %).
"""

from __future__ import annotations

import json

from capacity.cli.app import main
from capacity.gpu.catalog import gpu_by_name
from capacity.memory.unified_memory import (
    COLD_COMPILE_HOST_BYTES,
    FREE_FROM_MEM_AVAILABLE,
    FREE_FROM_MEM_GET_INFO,
    free_memory_reading,
    host_memory_term,
)
from capacity.vllm.versions import LATEST, semantics_for
from tests.support.paths import REPO_ROOT

LOG = REPO_ROOT / "bench" / "vllm_logs" / "qwen3-30b-a3b-fp8-gb10-util0.3-kvfp8-v0.13.0.log"


def row(report: dict, key: str) -> dict:
    return next(r for r in report["rows"] if r["key"] == key)


def test_gb10_cold_start_non_kv_and_kv_match_the_0_13_log(capsys):
    code = main(["reconcile", str(LOG), "--model", "Qwen/Qwen3-30B-A3B-FP8", "--gpu", "GB10", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    non_kv = row(report, "non_kv")["capacity_value"]
    available = row(report, "available_kv_cache")["capacity_value"]
    tokens = row(report, "kv_cache_tokens")["capacity_value"]
    # the log's figures in GiB (available to the printed 0.01 GiB, non-KV by hand), within 1 %
    assert abs(non_kv - 32.467) / 32.467 < 0.01
    assert abs(available - 4.04) / 4.04 < 0.01
    assert abs(tokens - 88_176) / 88_176 < 0.01


def test_the_host_term_is_a_cold_start_on_unified_memory_only():
    gb10, h200 = gpu_by_name("GB10"), gpu_by_name("H200")

    class Knobs:  # the two fields host_memory_term reads
        def __init__(self, compile_cache: str, enforce_eager: bool = False):
            self.compile_cache, self.enforce_eager = compile_cache, enforce_eager

    assert host_memory_term(h200, Knobs("cold")) is None
    assert host_memory_term(gb10, Knobs("cold")).bytes == COLD_COMPILE_HOST_BYTES
    assert host_memory_term(gb10, Knobs("warm")).bytes == 0
    assert host_memory_term(gb10, Knobs("cold", enforce_eager=True)).bytes == 0


def test_free_figure_per_version():
    gb10, thor, h200 = gpu_by_name("GB10"), gpu_by_name("Jetson-Thor"), gpu_by_name("H200")
    # 0.11.0 MemorySnapshot.measure: torch.cuda.mem_get_info alone
    assert free_memory_reading(gb10, semantics_for("0.11.0")) == FREE_FROM_MEM_GET_INFO
    assert free_memory_reading(thor, semantics_for("0.10.2")) == FREE_FROM_MEM_GET_INFO
    # 0.12.0-0.19.0: psutil available for capabilities (8, 7), (11, 0), (12, 1); 0.20.0+: is_integrated
    assert free_memory_reading(gb10, semantics_for("0.13.0")) == FREE_FROM_MEM_AVAILABLE
    assert free_memory_reading(thor, LATEST) == FREE_FROM_MEM_AVAILABLE
    assert free_memory_reading(h200, LATEST) == FREE_FROM_MEM_GET_INFO
