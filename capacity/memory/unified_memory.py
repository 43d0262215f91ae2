"""Unified-memory GPUs (GB10 / DGX Spark, Jetson Thor and Orin): what vLLM reads as their free memory, and the host
memory that reading puts into the non-KV budget.

On these parts the GPU has no memory of its own: CUDA allocates from the LPDDR5X the OS manages, and vLLM's
MemorySnapshot.measure (vllm/utils/mem_utils.py) reads the device's free memory from a system-wide figure:

- up to 0.11 (0.10.2 and 0.11.0 read): torch.cuda.mem_get_info's free, which on an integrated GPU is the kernel's
  free memory (the page cache counts as used; the CUDA for Tegra app note, vllm-project/vllm#48140);
- 0.12 to 0.19 (0.12.0, 0.13.0, 0.16.0-0.19.0 read): psutil.virtual_memory().available
  (MemAvailable) when the compute capability is (8, 7), (11, 0) or (12, 1) (Orin, Thor, Spark; a CUDA 12 build
  reports Thor as 10.1, which is not listed);
- from 0.20 (PR #35356, merged 2026-02-26; 0.20.0, 0.21.0, 0.30.0 and 0.33.0 read) MemAvailable
  on every device whose cudaDevAttrIntegrated is set (Platform.is_integrated_gpu). The catalog's three unified GPUs
  are in the list and integrated, so both rules read MemAvailable for them. GH200 is not marked unified: its GPU has
  its own HBM, which cudaMemGetInfo reports; whether its is_integrated is set was not found in any source (the PR
  names GH200 in prose only), and vLLM uses the Grace memory only where asked to (CPU offload, KV offload).

Either figure is the whole system's: the non-torch term vLLM derives from it (cuda_memory - memory_reserved, from the
init snapshot to the end of profile_run; 0.30+: before_create.free - after_profile.free) also holds every byte of host
memory that the processes took in that window. That window holds the first torch.compile of a cold start:
Inductor's compile-worker pool (torch._inductor: min(32, CPU cores) workers, 20 on a GB10's 20 cores, quiesced only
after 60 s idle, so alive at vLLM's after-profile snapshot) and the compile's state in the engine process. A warm
start loads its compiled graphs and starts no pool. How much host memory a compile takes is not in any source: the
one constant below is measured from a GB10 log.

CUDA-graph memory (0.21+ subtracts an estimate; every version captures after the KV cache is sized) is measured with
torch.accelerator.get_memory_info's free (vllm/v1/worker/gpu/cudagraph_utils.py), the system-wide free figure here, so
it holds each graph's host side too: `UNIFIED_CAPTURE` scales the H200's per-graph costs by a factor fitted on one log.
"""

from __future__ import annotations

from dataclasses import replace

from capacity.gpu.catalog import Gpu
from capacity.memory.cuda_graphs import H200_CAPTURE, GraphCaptureCost
from capacity.memory.term import ESTIMATED, MemoryTerm
from capacity.serving.config import ServingConfig
from capacity.units import GiB
from capacity.vllm.compile_lines import COLD
from capacity.vllm.versions import VllmSemantics

FREE_FROM_MEM_GET_INFO = "cudaMemGetInfo free (the page cache counts as used)"
FREE_FROM_MEM_AVAILABLE = "psutil MemAvailable (the page cache counts as free)"

# vLLM 0.13.0 vllm/utils/mem_utils.py MemorySnapshot.measure: shared_sysmem_device_mem_sms (Orin, Thor, Spark)
SHARED_SYSMEM_MAJORS_0_13 = {8: "Orin (8.7)", 11: "Thor (11.0)", 12: "Spark (12.1)"}
FIRST_MEM_AVAILABLE = (0, 12)  # 0.11.0 and 0.10.2 read mem_get_info alone

# The host memory a cold start's compile leaves in vLLM's non-torch term on a unified-memory GPU, measured on one log
# (bench/vllm_logs/qwen3-30b-a3b-fp8-gb10-util0.3-kvfp8-v0.13.0.log, calibration half): vLLM's non-KV memory,
# requested 36.507 GiB (0.3 x 121.69) - available 4.04 GiB = 32.467 GiB, less the logged weights (29.0435 GiB) and
# capacity's device terms for that start (cold activation peak 1.517 GiB, non-torch 0.27 GiB, load buffers 0.01 GiB)
# leaves 1.63 GiB. One GB10 (20 CPU cores), one model: other models compile other kernels, and a GB10 recipe reports
# a far larger compiler heap for a NVFP4 model (eugr/spark-vllm-docker PR #286), so it is an estimate.
COLD_COMPILE_HOST_BYTES = round(1.63 * GiB)


def free_memory_reading(gpu: Gpu, semantics: VllmSemantics) -> str:
    """The figure a version's MemorySnapshot takes as this GPU's free memory (the startup check and the profile)."""
    if not gpu.unified_memory or semantics.first < FIRST_MEM_AVAILABLE:
        return FREE_FROM_MEM_GET_INFO
    if semantics.first < (0, 20):  # the capability list (0.12.0-0.19.0); is_integrated from 0.20.0
        return FREE_FROM_MEM_AVAILABLE if gpu.compute_capability_major in SHARED_SYSMEM_MAJORS_0_13 else FREE_FROM_MEM_GET_INFO
    return FREE_FROM_MEM_AVAILABLE


def host_memory_term(gpu: Gpu, serving: ServingConfig) -> MemoryTerm | None:
    """The host memory a unified-memory GPU's non-torch term holds beyond a discrete GPU's; None on a discrete GPU."""
    if not gpu.unified_memory:
        return None
    if serving.enforce_eager or serving.compile_cache != COLD:
        return MemoryTerm(
            0,
            ESTIMATED,
            "unified memory: host memory taken during profile_run counts as non-torch GPU memory; a warm or eager start "
            "compiles nothing, taken as none",
        )
    return MemoryTerm(
        COLD_COMPILE_HOST_BYTES,
        ESTIMATED,
        "unified memory: a cold compile's host memory (Inductor's compile workers and state, alive at vLLM's after-profile "
        "snapshot) counts as non-torch GPU memory; 1.63 GiB measured on one GB10 vLLM 0.13.0 start (Qwen3-30B-A3B-FP8), "
        "varies with the kernels compiled and the CPU cores",
    )


def with_host_memory(non_torch: MemoryTerm, host: MemoryTerm | None, reading: str) -> MemoryTerm:
    """The non-torch term with a unified-memory GPU's host memory in it (unchanged on a discrete GPU)."""
    if host is None:
        return non_torch
    return MemoryTerm(
        non_torch.bytes + host.bytes,
        ESTIMATED,
        f"{non_torch.method} + {host.bytes:,} B of host memory ({host.method}; vLLM reads free memory here as {reading})",
    )


# Each captured graph's cost on a unified-memory GPU: the H200's per-graph costs (measured with cudaMemGetInfo, the
# device side) x 2.402, fitted on the one calibration-half log that prints vLLM's estimate on one
# (bench/unified_graph_cost.py, bench/results/unified-graph-cost-2026-12-02/fit.json: Qwen3-30B-A3B-FP8 class, GB10,
# vLLM 0.30.0, 51 PIECEWISE sizes x 49 pieces and 35 FULL graphs; vLLM 1.095 GiB against 0.538 at the H200's costs;
# 2.371-2.432 within the printed figures' rounding). The once-per-run parts (torch's pool, the driver's first
# instantiation) are kept as measured. One GB10 and one model: an estimate.
UNIFIED_GRAPH_FACTOR = 2.402
UNIFIED_CAPTURE = replace(
    H200_CAPTURE,
    piece_graph_bytes=round(H200_CAPTURE.piece_graph_bytes * UNIFIED_GRAPH_FACTOR),
    full_graph_bytes_per_layer=round(H200_CAPTURE.full_graph_bytes_per_layer * UNIFIED_GRAPH_FACTOR),
    basis=f"unified memory: vLLM measures graphs with the system-wide free figure, so each graph's host side counts too: the H200's per-graph "
    f"costs x {UNIFIED_GRAPH_FACTOR} (fitted on one GB10 vLLM 0.30.0 log, bench/results/unified-graph-cost-2026-12-02)",
)


def capture_cost(gpu: Gpu) -> GraphCaptureCost:
    """What a CUDA-graph capture costs in the free figure vLLM reads on `gpu`."""
    return UNIFIED_CAPTURE if gpu.unified_memory else H200_CAPTURE
