"""Target GPUs: a catalog with total memory as the driver reports it, or the local GPU through NVML."""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import asdict, dataclass, replace
from typing import Any

from capacity.errors import BadInput
from capacity.units import MiB


@dataclass(frozen=True)
class Gpu:
    name: str
    total_memory_bytes: int  # cudaMemGetInfo / NVML total, what vLLM's gpu_memory_utilization multiplies
    source: str  # "catalog" | "nvml"
    provenance: str
    sm100: bool = False  # data-centre Blackwell: vLLM caps CUDA-graph sizes at 1024 instead of 512
    used_by_others_bytes: int = 0  # NVML: memory other processes hold on this GPU (local GPU only)
    compute_capability_major: int = 9  # picks vLLM's attention backends (MLA block size, GDN prefill kernel)
    defaulted: bool = False  # no --gpu and no local GPU: the plan assumed DEFAULT_GPU

    @property
    def label(self) -> str:
        """The name as reports print it: a defaulted GPU says so."""
        return f"{self.name} (default; pass --gpu)" if self.defaulted else self.name

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT_GPU = "H200"


# Total memory as CUDA reports it (cudaMemGetInfo total, which vLLM multiplies by
# gpu_memory_utilization). H200: measured on the project's H200 (bench/results/calibration-h200-*.json):
# NVML/nvidia-smi say 143,771 MiB, CUDA reports 615 MiB less. The other GPUs use nvidia-smi's
# published totals, so CUDA's total is likely a few hundred MiB lower there (not measured).
_MEASURED = "cudaMemGetInfo total measured on an H200 (driver 580.159.04); nvidia-smi shows 143,771 MiB"
# CUDA compute capability (major) of each catalog GPU: 9 Hopper, 10 data-centre Blackwell, 8 Ampere / Ada, 7 Turing.
_COMPUTE_CAPABILITY = {"H200": 9, "H100-80GB": 9, "H100-NVL": 9, "B200": 10, "T4": 7}
_CATALOG: dict[str, tuple[int, str, tuple[str, ...], bool]] = {
    "H200": (150_109_880_320, _MEASURED, ("H200-141GB", "H200-SXM", "NVIDIA H200"), False),
    "H100-80GB": (81_559 * MiB, "", ("H100", "H100-SXM", "H100-PCIE", "NVIDIA H100 80GB HBM3"), False),
    "H100-NVL": (95_830 * MiB, "", ("H100-94GB",), False),
    "A100-80GB": (81_920 * MiB, "", ("A100", "A100-SXM4-80GB", "A100-80G"), False),
    "A100-40GB": (40_960 * MiB, "", ("A100-SXM4-40GB", "A100-40G"), False),
    "L40S": (46_068 * MiB, "", ("NVIDIA L40S",), False),
    "L40": (46_068 * MiB, "", (), False),
    "L4": (23_034 * MiB, "", ("NVIDIA L4",), False),
    "A10G": (23_028 * MiB, "", ("NVIDIA A10G",), False),
    "A10": (23_028 * MiB, "", (), False),
    "T4": (15_360 * MiB, "", ("Tesla T4",), False),
    "RTX-4090": (24_564 * MiB, "", ("4090", "RTX4090", "GeForce RTX 4090"), False),
    "RTX-6000-Ada": (49_140 * MiB, "", ("RTX6000-ADA",), False),
    "B200": (183_359 * MiB, "", ("NVIDIA B200",), True),
}


def catalog_gpus() -> list[Gpu]:
    return [
        Gpu(
            name,
            total,
            "catalog",
            how or f"{total // MiB:,} MiB as nvidia-smi reports it (CUDA's total not measured)",
            sm100,
            compute_capability_major=_COMPUTE_CAPABILITY.get(name, 8),
        )
        for name, (total, how, _aliases, sm100) in _CATALOG.items()
    ]


def _norm(text: str) -> str:
    return text.lower().replace("nvidia", "").replace("_", "-").replace(" ", "-").strip("-")


def gpu_by_name(name: str) -> Gpu:
    """A catalog GPU by name or alias (case and spacing insensitive); BadInput lists the closest names."""
    key = _norm(name)
    for gpu in catalog_gpus():
        aliases = _CATALOG[gpu.name][2]
        if key == _norm(gpu.name) or any(key == _norm(a) for a in aliases):
            return gpu
    names = [g.name for g in catalog_gpus()]
    close = difflib.get_close_matches(name.upper(), names, n=3, cutoff=0.3)
    hint = f"closest: {', '.join(close)}" if close else f"known: {', '.join(names)}"
    raise BadInput(f"unknown GPU '{name}'; {hint} (or omit --gpu on a machine with an NVIDIA GPU to use it)")


def detect_local_gpu(index: int = 0) -> Gpu | None:
    """The local GPU through NVML (nvidia-ml-py), or None when there is no driver or no GPU."""
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


def resolve_gpu(name: str | None) -> tuple[Gpu, str | None]:
    """`--gpu NAME`, else the local GPU, else the H200 with a note saying so."""
    if name:
        return gpu_by_name(name), None
    local = detect_local_gpu()
    if local is not None:
        return local, None
    return replace(gpu_by_name(DEFAULT_GPU), defaulted=True), f"no local NVIDIA GPU found: planning for an {DEFAULT_GPU} (pass --gpu to choose)"
