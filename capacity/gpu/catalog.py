"""Target GPUs: a catalog with total memory as CUDA / the driver reports it, or a plain memory size (`--gpu 24GiB`).

The catalog is data, capacity/gpu/gpus.json: one record per GPU with its total, the kind of source it was read from,
and `reference`, where it was read (index ids, log quotes, measurements); `evidence` holds further readings of the
total, `compute_capability_reference` / `l2_reference` where those figures were read. The source kinds:

- `measured`: cudaMemGetInfo's total, read on the GPU itself.
- `vllm log`: the total vLLM printed in `Free memory on device (free/TOTAL GiB)` of a public startup log:
  cudaMemGetInfo's total rounded to 0.01 GiB (so +-5 MiB), the figure `gpu_memory_utilization` multiplies.
- `cuda oom`: the total a CUDA out-of-memory error printed (`GPU 0 has a total capacity of T GiB`): torch's
  total_memory, the same figure as cudaMemGetInfo's total, to 0.01 GiB.
- `cuda properties`: cudaDeviceProp.totalGlobalMem floored to MiB, as llama.cpp's ggml_cuda_init (`VRAM: N MiB`) or
  torch's device properties (`total_memory=NMB`, or a GiB figure to two decimals) print it: the same figure as
  cudaMemGetInfo's total.
- `nvidia-smi`: the `Memory-Usage` total (MiB) of an nvidia-smi table pasted in a public repository. CUDA reports
  less (SMI_AND_CUDA_TOTALS), so a plan on it over-states the requested memory by ~0.5 GiB x utilization.
- `published`: the vendor's marketing size (decimal GB or GiB as the vendor counts), used only where no real log or
  table was found; estimated.

Consumer (GeForce) cards report less to CUDA on native Linux than under Windows, whose total WSL2's CUDA shares: a
laptop part has a `-Linux` and a `-WSL` record where both were found, and its bare name is ambiguous. A marketing size
("80 GB") is not what vLLM multiplies either.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from capacity.errors import BadInput
from capacity.units import GiB, MiB

CATALOG_FILE = "gpus.json"  # in this package


@dataclass(frozen=True)
class Gpu:
    name: str
    total_memory_bytes: int  # cudaMemGetInfo / NVML total, what vLLM's gpu_memory_utilization multiplies
    source: str  # "catalog" | "nvml" | "size" (--gpu 24GiB) | "log" (read from a vLLM log) | "cuda"
    provenance: str
    sm100: bool = False  # data-centre Blackwell: vLLM caps CUDA-graph sizes at 1024 instead of 512
    used_by_others_bytes: int = 0  # NVML: memory other processes hold on this GPU (local GPU only)
    platform: str = "cuda"  # "rocm" for AMD Instinct (vLLM's ROCm platform)
    unified_memory: bool = False  # GB10: CPU and GPU share one LPDDR5X pool
    compute_capability_major: int = 9  # picks vLLM's attention backends (MLA block size, GDN prefill kernel)
    defaulted: bool = False  # no --gpu and no local GPU: the plan assumed DEFAULT_GPU
    nvlink: bool = False  # GPUs of one node talk over NVLink (SXM / HGX boards, NVL bridges), see GpuRecord
    l2_cache_bytes: int = 0  # the L2 size CUDA reports (device properties), 0 when not known

    @property
    def label(self) -> str:
        """The name as reports print it: a defaulted GPU says so."""
        return f"{self.name} (default; pass --gpu)" if self.defaulted else self.name

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuRecord:
    """One GPU of gpus.json, every field given there."""

    name: str
    aliases: tuple[str, ...]
    total_memory_bytes: int
    source: str  # measured | vllm log | cuda oom | cuda properties | nvidia-smi | published
    reference: str  # where the total was read (printed in the GPU's provenance)
    evidence: str  # further readings of the total, not printed
    note: str  # what the platform changes (ROCm, unified memory, WSL2), printed after the reference
    sm100: bool
    platform: str  # "cuda" | "rocm"
    unified_memory: bool
    # CUDA major: 7 Volta / Turing, 8 Ampere / Ada, 9 Hopper (torch on ROCm reports gfx9 parts as 9.x), 10 data-centre
    # Blackwell, 11 Jetson Thor, 12 RTX 50xx / RTX PRO Blackwell / GB10; picks vLLM's attention backends.
    compute_capability_major: int
    compute_capability_reference: str
    # SXM modules on HGX boards and the H100 NVL's bridged pairs; False where a name covers an SXM and a PCIe part
    # (A100) or the link is not NVLink (AMD's xGMI, PCIe cards). Only decides whether NCCL's communicator is charged
    # where a version counts it in the non-KV memory (memory.communicators_in_profile).
    nvlink: bool
    # cudaGetDeviceProperties' L2 size, 0 when not known: Inductor sizes its benchmark's cache-flush buffer by it
    # (capacity/memory/compile_cache.py).
    l2_cache_bytes: int
    l2_reference: str

    def gpu(self) -> Gpu:
        how = f"{self.source}: {self.reference}" + (f"; {self.note}" if self.note else "")
        return Gpu(
            self.name,
            self.total_memory_bytes,
            "catalog",
            how,
            sm100=self.sm100,
            platform=self.platform,
            unified_memory=self.unified_memory,
            compute_capability_major=self.compute_capability_major,
            nvlink=self.nvlink,
            l2_cache_bytes=self.l2_cache_bytes,
        )


def load_catalog() -> tuple[GpuRecord, ...]:
    """The records of gpus.json, in its order (a record lacking a field, or with an unknown one, fails here)."""
    records = json.loads(resources.files(__package__).joinpath(CATALOG_FILE).read_text(encoding="utf-8"))
    return tuple(GpuRecord(**{**record, "aliases": tuple(record["aliases"])}) for record in records)


CATALOG: tuple[GpuRecord, ...] = load_catalog()

# Names that stand for several catalog GPUs of different memory (or form factors): refused with the choices.
AMBIGUOUS: dict[str, tuple[str, ...]] = {
    "A100": ("A100-40GB", "A100-80GB"),
    "H100": ("H100-SXM", "H100-PCIe", "H100-NVL"),
    "RTX-6000": ("RTX-6000-Ada", "RTX-PRO-6000", "RTX-A6000"),
    "MI300": ("MI300X", "MI325X"),
    "V100": ("V100-16GB", "V100-32GB"),
    # laptop parts: native Linux and WSL2 report different totals for the same card (see the module docstring)
    "RTX-4060-Laptop": ("RTX-4060-Laptop-Linux", "RTX-4060-Laptop-WSL"),
    "RTX-4070-Laptop": ("RTX-4070-Laptop-Linux", "RTX-4070-Laptop-WSL"),
}


DEFAULT_GPU = "H200"  # planned for (and labelled 'default; pass --gpu') when there is no --gpu and no local GPU


def catalog_gpus() -> list[Gpu]:
    return [e.gpu() for e in CATALOG]


def normalized_name(text: str) -> str:
    """A GPU name as --gpu compares it: case, spaces, underscores, 'NVIDIA' and 'GeForce' ignored."""
    return re.sub(r"[\s_]+", "-", text.lower().replace("nvidia", "").replace("geforce", "")).strip("-")


def _log_gib(gib: str) -> int:
    """A total vLLM printed with 2 decimals, as bytes (the middle of its +-0.005 GiB interval)."""
    whole, frac = gib.split(".")
    return (int(whole) * 100 + int(frac.ljust(2, "0"))) * GiB // 100


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(GiB|MiB|GB|MB|TiB|B)\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "mib": MiB, "gib": GiB, "tib": 1024 * GiB, "mb": 10**6, "gb": 10**9}


def gpu_from_size(text: str) -> Gpu | None:
    """`--gpu 24GiB`, `--gpu 16000MiB`, `--gpu 80GB` (decimal): a GPU of that total, or None when `text` is no size."""
    m = _SIZE.match(text)
    if m is None:
        return None
    number, unit = m.groups()
    total = int(float(number) * _SIZE_UNITS[unit.lower()])
    if total < 256 * MiB:
        raise BadInput(f"--gpu {text}: {total:,} B is too small for a GPU; give its total memory, e.g. 24GiB or 16000MiB")
    how = (
        f"--gpu {text.strip()}: taken as cudaMemGetInfo's total (vLLM's 'Free memory on device (free/TOTAL GiB)'); "
        "nvidia-smi's MiB total is usually 0.3-0.6 GiB more, a marketing size more still"
    )
    return Gpu(f"{text.strip()} GPU", total, "size", how)


def catalog_entry(name: str) -> GpuRecord | None:
    """The catalog record a name or alias names (case and spacing insensitive), if any."""
    key = normalized_name(name)
    return next((e for e in CATALOG if key == normalized_name(e.name) or any(key == normalized_name(a) for a in e.aliases)), None)


def gpu_by_name(name: str) -> Gpu:
    """A catalog GPU by name or alias (case and spacing insensitive), or a memory size (`24GiB`).

    BadInput: an ambiguous name (`A100`) with its choices, or an unknown one with the closest names.
    """
    sized = gpu_from_size(name)
    if sized is not None:
        return sized
    entry = catalog_entry(name)
    if entry is not None:
        return entry.gpu()
    key = normalized_name(name)
    for short, choices in AMBIGUOUS.items():
        if key == normalized_name(short):
            listed = ", ".join(f"{c} ({next(e for e in CATALOG if e.name == c).total_memory_bytes / GiB:.2f} GiB)" for c in choices)
            raise BadInput(f"GPU '{name}' is ambiguous: pick one of {listed}, or give the memory size (--gpu 79GiB)")
    names = [e.name for e in CATALOG]
    close = difflib.get_close_matches(name.upper(), [n.upper() for n in names], n=3, cutoff=0.3)
    close = [n for n in names if n.upper() in close]
    hint = f"closest: {', '.join(close)}" if close else f"known: {', '.join(names)}"
    raise BadInput(f"unknown GPU '{name}'; {hint}; or give its memory size (--gpu 24GiB) (or omit --gpu on a machine with an NVIDIA GPU to use it)")


# (GPU kind, nvidia-smi's total in MiB, CUDA's total in B) where both were read for one kind: the H200 measured, the
# others from vLLM logs and CUDA OOMs (the records' references). Under WSL2 the two agree (RTX-4090's evidence).
SMI_AND_CUDA_TOTALS: tuple[tuple[str, int, int], ...] = (
    ("H200", 143_771, 150_109_880_320),
    ("A100-80GB", 81_920, _log_gib("79.15")),
    ("A100-40GB", 40_960, _log_gib("39.39")),
    ("L40S", 46_068, _log_gib("44.42")),
    ("L4", 23_034, _log_gib("22.03")),
    ("A10G", 23_028, _log_gib("22.06")),
    ("T4", 15_360, _log_gib("14.74")),
    ("RTX-3090", 24_576, _log_gib("23.58")),
    ("RTX-4090", 24_564, _log_gib("23.52")),
    ("H100-SXM", 81_559, _log_gib("79.19")),
)


def nvidia_smi_total_caveat(gpu: Gpu, utilization: float) -> str | None:
    """For a catalog GPU whose total is nvidia-smi's: how much lower CUDA's total (which vLLM multiplies) has been
    where both were read, and what that does to the KV cache; None for every other total."""
    entry = catalog_entry(gpu.name) if gpu.source == "catalog" else None
    if entry is None or entry.source != "nvidia-smi" or entry.total_memory_bytes != gpu.total_memory_bytes:
        return None
    gaps = [smi * MiB - cuda for _, smi, cuda in SMI_AND_CUDA_TOTALS]
    return (
        f"{gpu.name}: capacity's total is nvidia-smi's ({entry.reference}); CUDA's total, which vLLM multiplies by "
        f"gpu_memory_utilization, was {min(gaps) // MiB}-{max(gaps) // MiB} MiB lower on the {len(gaps)} GPU kinds where both were read "
        f"(equal to it under WSL2), so the KV cache may be up to {max(gaps) * utilization / GiB:.2f} GiB smaller than planned; "
        "pass --gpu with the total vLLM prints in 'Free memory on device (F/T GiB)' for an exact plan"
    )


def total_setting_note(gpu: Gpu) -> str | None:
    """For a catalog GPU whose CUDA total changes with a setting (the driver, WSL2, ECC, MIG: its record's note says
    which and asks for --gpu): the figure the plan assumed and the setting it stands for; None for every other GPU."""
    entry = catalog_entry(gpu.name) if gpu.source == "catalog" else None
    if entry is None or entry.total_memory_bytes != gpu.total_memory_bytes or "pass --gpu" not in entry.note:
        return None
    return f"{gpu.name}: planned with CUDA's total {gpu.total_memory_bytes:,} B ({gpu.total_memory_bytes / GiB:.2f} GiB, {entry.source}); {entry.note}"
