"""The local GPU through NVML, planned on the total vLLM reads there (cudaMemGetInfo's, below NVML's), and the
target GPU of a plan: `--gpu`, else the local GPU, else the catalog's default."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import replace

from capacity.gpu.catalog import DEFAULT_GPU, Gpu, catalog_entry, gpu_by_name
from capacity.units import GiB


def detect_local_gpu(index: int = 0) -> Gpu | None:
    """The local GPU through NVML (nvidia-ml-py), or None when there is no driver or no GPU."""
    if not nvml_library_loads():
        return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        if pynvml.nvmlDeviceGetCount() <= index:
            return None
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else name
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        others = 0
        try:
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                others += proc.usedGpuMemory or 0
        except pynvml.NVMLError:
            others = 0
        try:
            major, _minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        except pynvml.NVMLError:
            major = 0
        return Gpu(
            name=name,
            total_memory_bytes=int(memory.total),
            source="nvml",
            provenance=f"NVML on this machine (GPU {index})",
            sm100=major == 10,
            used_by_others_bytes=int(others),
            compute_capability_major=major,
        )
    except pynvml.NVMLError:
        return None
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def nvml_library_loads() -> bool:
    """Whether the driver's NVML library loads, asked as pynvml's nvmlInit asks off Windows (dlopen of
    libnvidia-ml.so.1), before pynvml is imported: on a machine with no NVIDIA driver (a CI runner) importing pynvml
    only to hear that is 20-25 ms of a config-only plan's 0.25 s. On Windows pynvml searches two folders itself."""
    if sys.platform.startswith("win"):
        return True
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# NVML's total minus cudaMemGetInfo's, measured on the project's H200 (150,754,820,096 - 150,109,880,320 B); an
# L40S shows about 590 MiB (vLLM log 44.42 GiB vs nvidia-smi 46,068 MiB). The larger gap is the safe estimate.
NVML_OVER_CUDA_BYTES = 644_939_776
_CUDA_SIDE_SOURCES = ("measured", "vllm log", "cuda oom", "cuda properties")  # catalog totals that are cudaMemGetInfo's


def with_cuda_total(local: Gpu) -> Gpu:
    """The local GPU with the total vLLM multiplies: cudaMemGetInfo's, 600+ MiB below the NVML total it was found by.

    The catalog's CUDA-side total of the GPU NVML names, when one is recorded and fits under NVML's total by less
    than 1 GiB (the same memory size); else NVML's total less NVML_OVER_CUDA_BYTES, estimated.
    """
    entry = catalog_entry(local.name)
    if entry is not None and entry.source in _CUDA_SIDE_SOURCES and local.total_memory_bytes - GiB < entry.total_memory_bytes <= local.total_memory_bytes:
        how = (
            f"{entry.source} cudaMemGetInfo total of the {entry.name} ({entry.reference}), the total vLLM reads; "
            f"NVML on this machine reports {local.total_memory_bytes:,} B"
        )
        return replace(local, total_memory_bytes=entry.total_memory_bytes, provenance=how)
    how = (
        f"estimated: NVML's total on this machine ({local.total_memory_bytes:,} B) less {NVML_OVER_CUDA_BYTES:,} B, "
        "the gap to cudaMemGetInfo's total (which vLLM reads) measured on an H200; pass --gpu or a profile for an exact total"
    )
    return replace(local, total_memory_bytes=local.total_memory_bytes - NVML_OVER_CUDA_BYTES, provenance=how)


def resolve_gpu(name: str | None) -> tuple[Gpu, str | None]:
    """`--gpu NAME`, else the local GPU (with the CUDA-side total), else the H200 with a note saying so."""
    if name:
        return gpu_by_name(name), None
    local = detect_local_gpu()
    if local is not None:
        return with_cuda_total(local), None
    return replace(gpu_by_name(DEFAULT_GPU), defaulted=True), f"no local NVIDIA GPU found: planning for an {DEFAULT_GPU} (pass --gpu to choose)"
