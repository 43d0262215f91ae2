"""What the Windows desktop holds on a GPU that vLLM runs on under WSL2.

Under WSL2 the GPU is the Windows driver's: the desktop compositor and Windows programs hold memory on a GPU that
drives a display, and vLLM counts it as used by others. vLLM refuses to start when less than
ceil(total x --gpu-memory-utilization) is free after its CUDA context (vllm/v1/worker/utils.py request_memory), so
the headroom left above the request is what those programs may hold.
"""

from __future__ import annotations

from capacity.gpu.catalog import Gpu
from capacity.units import MiB

# nvidia-smi on an idle RTX 4090 under WSL2 (Windows 11, Ubuntu 24.04): '22801 MiB free, 1338 MiB used, 24564 MiB'
# (study notes '실전 LLM 최적화와 서빙의 새로운 방향 — 실습 기록', search index id 61585879089, Lab 1 step 1); the
# same notes read 1,074 and 1,185 MiB with the vLLM server stopped.
DESKTOP_IDLE_BYTES = 1338 * MiB
DESKTOP_IDLE_REFERENCE = "1,338 MiB on an idle RTX 4090 under WSL2 (nvidia-smi in public study notes, search index id 61585879089)"


def under_wsl(gpu: Gpu) -> bool:
    """A catalog GPU whose total is the Windows driver's (the `-WSL` entries)."""
    return gpu.source == "catalog" and gpu.name.endswith("-WSL")
