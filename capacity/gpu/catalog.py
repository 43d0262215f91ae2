"""Target GPUs: a catalog with total memory as CUDA / the driver reports it, a plain memory size, or the local GPU (NVML).

Each catalog total states its source:

- `measured`: cudaMemGetInfo's total, read on the GPU itself (the project's H200).
- `vllm log`: the total vLLM printed in `Free memory on device (free/TOTAL GiB)` of a public startup log; that is
  cudaMemGetInfo's total rounded to 0.01 GiB (so +-5 MiB), the figure `gpu_memory_utilization` multiplies.
- `cuda oom`: the total a CUDA out-of-memory error printed (`GPU 0 has a total capacity of T GiB`), which is
  torch's total_memory, the same figure as cudaMemGetInfo's total, to 0.01 GiB.
- `cuda properties`: cudaDeviceProp.totalGlobalMem, floored to MiB, as printed by llama.cpp's ggml_cuda_init
  (`Device 0: NAME, compute capability X.Y, VMM: yes, VRAM: N MiB`) or torch's device properties
  (`_CudaDeviceProperties(name=..., total_memory=NMB)`, MiB); the same figure as cudaMemGetInfo's total (a GB10's
  llama.cpp `VRAM: 124610 MiB` is its vLLM log's 121.69 GiB; an RTX 3060's 11,906-11,907 MiB its vLLM log's 11.63 GiB).
- `nvidia-smi`: the `Memory-Usage` total (MiB) of an nvidia-smi table pasted in a public repository. CUDA reports
  less than nvidia-smi: 615 MiB less on the H200 (measured), about 590 MiB less on an L40S (vLLM log 44.42 GiB vs
  46,068 MiB). A plan on an nvidia-smi total therefore over-states the requested memory by ~0.5 GiB x utilization.
- `published`: the vendor's marketing size (decimal GB or GiB as the vendor counts), used only where no real log or
  table was found; estimated.

Consumer (GeForce) cards report less to CUDA on native Linux than on Windows: an 8 GB RTX 4060 Laptop is 7,815 MiB on
Linux and 8,187 MiB under Windows, whose total WSL2's CUDA shares (an RTX 5090 under WSL2 prints 31.84 GiB, nvidia-smi's
32,607 MiB). A laptop part therefore has a `-Linux` and a `-WSL` entry where both were found, and its bare name is
ambiguous.

The marketing size is not what vLLM multiplies: an "80 GB" H100 reports 81,559 MiB in nvidia-smi and ~79.1 GiB to
CUDA; a "141 GB" H200 150,109,880,320 B (139.80 GiB) to CUDA.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from capacity.errors import BadInput
from capacity.units import GiB, MiB


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
    nvlink: bool = False  # GPUs of one node talk over NVLink (SXM / HGX boards, NVL bridges), see _NVLINK
    l2_cache_bytes: int = 0  # the L2 size CUDA reports (device properties), 0 when not known; see _L2_CACHE_MIB

    @property
    def label(self) -> str:
        """The name as reports print it: a defaulted GPU says so."""
        return f"{self.name} (default; pass --gpu)" if self.defaulted else self.name

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    total_memory_bytes: int
    source: str  # measured | vllm log | cuda oom | cuda properties | nvidia-smi | published
    reference: str  # where the figure was read
    aliases: tuple[str, ...] = ()
    sm100: bool = False
    platform: str = "cuda"
    unified_memory: bool = False
    note: str = ""

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
            compute_capability_major=_COMPUTE_CAPABILITY.get(self.name, 8),
            nvlink=self.name in _NVLINK,
            l2_cache_bytes=_L2_CACHE_MIB.get(self.name, 0) * MiB,
        )


# CUDA compute capability (major) where it is not 8 (Ampere / Ada): picks vLLM's attention backends (MLA block size,
# GDN prefill kernel). 7 Volta / Turing, 9 Hopper (torch on ROCm reports MI300's gfx942 as 9.4), 10 data-centre
# Blackwell, 12 RTX 50xx / RTX PRO Blackwell / GB10.
_COMPUTE_CAPABILITY = {
    **dict.fromkeys(("H200", "H100-SXM", "H100-PCIe", "H100-NVL", "H800", "H20", "GH200", "MI300X", "MI325X"), 9),
    **dict.fromkeys(("B200", "B300"), 10),
    **dict.fromkeys(("RTX-5060-Ti-16GB", "RTX-5070-Ti", "RTX-5080", "RTX-5090", "RTX-PRO-6000", "GB10"), 12),
    **dict.fromkeys(("T4", "V100-32GB", "V100-16GB", "RTX-2080-Ti"), 7),
    # Jetson Thor: 11.0 since CUDA 13.0 (JetPack 7), which renamed its sm_101 to sm_110 (the GCC nvptx patch 'CUDA 13's
    # renaming of Jetson Thor's compute capability from 101 to 110'; ollama PR #11999 'AGX Thor is CC 11.0, which requires
    # CUDA v13'; llama.cpp and ollama logs print 'NVIDIA Thor, compute capability 11.0'). A CUDA 12.8/12.9 build calls it 10.1.
    "Jetson-Thor": 11,
    # ROCm: torch reports gfx90a (MI250X) as 9.0 and gfx950 (MI355X) as 9.5, like gfx942 (MI300X) as 9.4.
    **dict.fromkeys(("MI250X", "MI355X"), 9),
}

# Form factors whose GPUs of one node are linked by NVLink: SXM modules on HGX boards (H100 SXM, H200, H800, H20, B200,
# B300) and the H100 NVL's bridged pairs. Where a name covers both an SXM and a PCIe part (A100-40GB, A100-80GB) or
# the link is not NVLink (AMD Instinct: xGMI and RCCL; PCIe cards), it is False. It only decides whether NCCL's
# communicator is charged where a version counts it in the non-KV memory (memory.communicators_in_profile).
_NVLINK = frozenset(("H200", "H100-SXM", "H100-NVL", "H800", "H20", "B200", "B300"))

# L2 cache sizes (MiB), as cudaGetDeviceProperties reports them: Inductor sizes its benchmark's cache-flush buffer by
# it (capacity/memory/compile_cache.py). H200 measured (its 62,914,560 B buffer, bench/results/h200-compile-cold-warm-*);
# the others published by NVIDIA per chip (architecture whitepapers): GH100 50 MiB as H100 / H800 parts, GA100 40,
# AD102 96 as L40 / L40S / RTX 6000 Ada (72 on the RTX 4090), AD103 64, AD104 48 as the L4, GA102 6, TU104 4,
# GV100 6, GB202 96 as the RTX 5090 (128 on the RTX PRO 6000), GB203 64. GPUs not listed are not known (0).
_L2_CACHE_MIB = {
    "H200": 60,
    **dict.fromkeys(("H100-SXM", "H100-PCIe", "H100-NVL", "H800"), 50),
    **dict.fromkeys(("A100-80GB", "A100-40GB", "A800-80GB"), 40),
    **dict.fromkeys(("L40S", "L40", "RTX-6000-Ada"), 96),
    "L4": 48,
    "RTX-4090": 72,
    **dict.fromkeys(("RTX-4080", "RTX-4080-Super", "RTX-5080"), 64),
    "RTX-5090": 96,
    "RTX-PRO-6000": 128,
    **dict.fromkeys(("A10", "A10G", "A40", "RTX-A6000", "RTX-A5000", "RTX-3090", "RTX-3090-Ti", "V100-32GB", "V100-16GB"), 6),
    "T4": 4,
}


def _mib(mib: int) -> int:
    """A total printed in MiB: nvidia-smi's Memory-Usage total, or cudaDeviceProp.totalGlobalMem as llama.cpp
    (`VRAM: N MiB`) or torch (`total_memory=NMB`) print it, floored to MiB (the true total up to 1 MiB more)."""
    return mib * MiB


def _log_gib(gib: str) -> int:
    """A total vLLM printed with 2 decimals, as bytes (the middle of its +-0.005 GiB interval)."""
    whole, frac = gib.split(".")
    return (int(whole) * 100 + int(frac.ljust(2, "0"))) * GiB // 100


_ROCM = (
    "ROCm: vLLM's ROCm platform runs the same determine_available_memory (torch.cuda.mem_get_info is HIP's), but with "
    "ROCm attention backends (AITER / Triton) instead of FlashAttention, HIP graphs instead of CUDA graphs and no CUDA "
    "context constant measured: activation, graph and context terms are less certain; at >= 160 GiB it takes vLLM's "
    "largest batch defaults (16384 tokens, 1024 seqs)"
)
_GB10 = (
    "unified memory: cudaMemGetInfo reports the shared LPDDR5X pool as the OS sees it (121.69 GiB total), and its free "
    "figure drops with the page cache and every host process, so vLLM's startup check (free >= total x utilization) "
    "fails at the 0.92 default unless the page cache is dropped; vLLM gives GB10 the small batch defaults (2048 tokens, "
    "256 seqs) like an A100"
)

_JETSON = (
    "unified memory (Jetson): CUDA's total is the LPDDR5X the OS sees, and its free figure drops with the page cache and "
    "every host process, like a GB10's; vLLM's startup check (free >= total x utilization) can fail until the page cache "
    "is dropped"
)
_WSL = (
    "under WSL2 CUDA's total is the Windows driver's (nvidia-smi's MiB, no native-Linux reservation); the same card on native "
    "Linux reports ~0.37 GiB less"
)

# What an MI300X's driver keeps of its 192 GiB (vLLM logs print 191.98 GiB): taken off the other Instinct parts'
# published sizes, which no log here prints.
_INSTINCT_DRIVER_BYTES = 192 * GiB - _log_gib("191.98")


def _instinct_published(name: str, gib: int, reference: str, aliases: tuple[str, ...]) -> CatalogEntry:
    """An AMD Instinct part known by its published size (AMD counts GiB), less what the MI300X's driver keeps."""
    return CatalogEntry(name, gib * GiB - _INSTINCT_DRIVER_BYTES, "published", reference, aliases, platform="rocm", note=_ROCM)


CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        "H200",
        150_109_880_320,
        "measured",
        "cudaMemGetInfo total on the project's H200 (driver 580.159.04); nvidia-smi shows 143,771 MiB",
        ("H200-141GB", "H200-SXM", "NVIDIA H200"),
    ),
    CatalogEntry(
        "H100-SXM",
        _mib(81_559),
        "nvidia-smi",
        "81,559 MiB, NVIDIA H100 80GB HBM3 (index id 59132971245)",
        ("H100-80GB", "H100-80GB-HBM3", "NVIDIA H100 80GB HBM3"),
    ),
    CatalogEntry("H100-PCIe", _mib(81_559), "nvidia-smi", "81,559 MiB, NVIDIA H100 PCIe (index id 31353373741)", ("NVIDIA H100 PCIe",)),
    CatalogEntry("H100-NVL", _mib(95_830), "nvidia-smi", "95,830 MiB, NVIDIA H100 NVL (index id 14249706504)", ("H100-94GB", "NVIDIA H100 NVL")),
    CatalogEntry("H800", _mib(81_559), "nvidia-smi", "81,559 MiB, NVIDIA H800 (index id 40223502532)", ("H800-80GB", "NVIDIA H800")),
    CatalogEntry("H20", _mib(97_871), "nvidia-smi", "97,871 MiB, NVIDIA H20 (index id 69782509629)", ("H20-96GB", "NVIDIA H20")),
    CatalogEntry(
        "GH200",
        _mib(97_871),
        "nvidia-smi",
        "97,871 MiB of HBM3, NVIDIA GH200 480GB (index id 11944879968)",
        ("GH200-96GB", "GH200-480GB", "NVIDIA GH200 480GB"),
    ),
    CatalogEntry(
        "GB10",
        _log_gib("121.69"),
        "vllm log",
        "'Free memory on device (.../121.69 GiB)' on a DGX Spark, github.com/MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks/issues/47",
        ("DGX-Spark", "NVIDIA GB10"),
        unified_memory=True,
        note=_GB10,
    ),
    CatalogEntry(
        "Jetson-Thor",
        _mib(125_748),
        "cuda properties",
        "llama.cpp's 'NVIDIA Thor, compute capability 11.0, VMM: yes, VRAM: 125748 MiB' on a Jetson AGX Thor (index ids 68871145596, "
        "69031658908); a CUDA test harness there prints '131.9 GB total' (index id 60815229375: 125,748 MiB = 131.86 GB)",
        ("Jetson Thor", "Jetson-AGX-Thor", "Thor", "NVIDIA Thor"),
        unified_memory=True,
        note=_JETSON,
    ),
    CatalogEntry(
        "Jetson-AGX-Orin-64GB",
        _mib(62_827),
        "cuda properties",
        "llama.cpp's 'Orin, compute capability 8.7, VMM: yes, VRAM: 62827 MiB' (built for Linux aarch64, index ids 57965154363, 58111358145)",
        ("AGX-Orin-64GB", "Jetson AGX Orin 64GB"),
        unified_memory=True,
        note=_JETSON,
    ),
    CatalogEntry(
        "A100-80GB",
        _log_gib("79.15"),
        "cuda oom",
        "'GPU 0 has a total capacity of 79.15 GiB' on an 80GB A100 (index id 55333476420); vLLM's 'Free memory on device (78.68/79.15 GiB)' "
        "(index id 60004023718); nvidia-smi shows 81,920 MiB",
        ("A100-SXM4-80GB", "A100-80G", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
    ),
    CatalogEntry(
        "A100-40GB",
        _log_gib("39.39"),
        "cuda oom",
        "'GPU N has a total capacity of 39.39 GiB' in CUDA OOMs of 40 GB A100 clusters (e.g. index ids 12114857455, 54998945712; the lines do not "
        "name the GPU): 625 MiB below nvidia-smi's 40,960 MiB, the gap the H200 shows (615 MiB)",
        ("A100-SXM4-40GB", "A100-40G", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
    ),
    CatalogEntry(
        "L40S",
        _log_gib("44.42"),
        "vllm log",
        "'Free memory on device (43.93/44.42 GiB)' on an L40S (index id 38962983769); nvidia-smi shows 46,068 MiB",
        ("NVIDIA L40S",),
    ),
    CatalogEntry(
        "L40",
        _log_gib("44.40"),
        "cuda oom",
        "'GPU 0 has a total capacity of 44.40 GiB' on a single L40 (github.com/QwenLM/Qwen3-VL/issues/2097, the same report in "
        "github.com/NVlabs/Eagle/issues/68); nvidia-smi shows 46,068 MiB",
        ("NVIDIA L40",),
    ),
    CatalogEntry("L20", _mib(46_068), "nvidia-smi", "46,068 MiB, NVIDIA L20 (index id 67533193225)", ("NVIDIA L20",)),
    CatalogEntry(
        "L4",
        _log_gib("22.03"),
        "cuda oom",
        "'NVIDIA L4 (22.03 GiB visible to PyTorch)' and its OOM 'total capacity of 22.03 GiB' (index id 55497994311); nvidia-smi shows 23,034 MiB",
        ("NVIDIA L4",),
    ),
    CatalogEntry(
        "A40",
        _mib(45_416),
        "cuda properties",
        "torch's _CudaDeviceProperties(name='NVIDIA A40', ..., total_memory=45416MB) (index ids 31224020222, 31219571458)",
        ("NVIDIA A40",),
    ),
    CatalogEntry(
        "RTX-A5000",
        _log_gib("23.68"),
        "cuda oom",
        "'GPU 0 has a total capacity of 23.68 GiB' beside an nvidia-smi table of four NVIDIA RTX A5000 at 24,564 MiB "
        "(github.com/zai-org/GLM-4/issues/730); torch prints total_memory=24138MB (23.57 GiB) on a cloud pod (index id 29664974753)",
        ("A5000", "NVIDIA RTX A5000"),
    ),
    CatalogEntry(
        "RTX-A4000",
        _log_gib("15.61"),
        "cuda oom",
        "'GPU 0 has a total capacity of 15.61 GiB' on an NVIDIA RTX A4000 16GB (github.com/DengKaiCQ/VGGT-Long/issues/6)",
        ("A4000", "NVIDIA RTX A4000"),
    ),
    CatalogEntry(
        "A800-80GB",
        _log_gib("79.33"),
        "cuda oom",
        "'GPU 3 has a total capacity of 79.33 GiB' on 4x A800 (github.com/sgl-project/sglang/issues/21730; the form factor is not "
        "stated)",
        ("A800-SXM4-80GB", "NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB PCIe"),
    ),
    CatalogEntry(
        "A10G",
        _log_gib("22.06"),
        "cuda oom",
        "g5.2xlarge (A10G) OOM 'total capacity of 22.06 GiB' (index id 57952782693); nvidia-smi shows 23,028 MiB",
        ("NVIDIA A10G",),
    ),
    CatalogEntry(
        "A10",
        _log_gib("22.06"),
        "cuda oom",
        "'A10 ... total capacity of 22.06 GiB' (index id 71609078484); nvidia-smi shows 23,028 MiB (index id 37027574609)",
        ("NVIDIA A10",),
    ),
    CatalogEntry(
        "T4",
        _log_gib("14.74"),
        "vllm log",
        "V0 'total_gpu_memory (14.74GiB)' on a Colab T4 (index id 7884883735, bench/vllm_logs/llama-3.2-3b-t4-*); a CUDA OOM elsewhere "
        "reads 'total capacity of 14.57 GiB' (index id 71609078484: ECC or driver differ); nvidia-smi shows 15,360 MiB",
        ("Tesla T4",),
    ),
    CatalogEntry(
        "V100-32GB",
        _log_gib("31.74"),
        "vllm log",
        "V0 'total_gpu_memory (31.74GiB)' on a V100 (index id 33435952071)",
        ("Tesla V100-SXM2-32GB", "Tesla V100-PCIE-32GB", "V100S"),
    ),
    CatalogEntry(
        "V100-16GB",
        _mib(16_160),
        "cuda properties",
        "torch's _CudaDeviceProperties(name='Tesla V100-SXM2-16GB', major=7, minor=0, total_memory=16160MB) (index ids 3651776778, "
        "18215037660, 3846184127); the same for a Tesla V100-PCIE-16GB (index id 21232746912)",
        ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB", "Tesla V100-PCIE-16GB"),
    ),
    CatalogEntry(
        "RTX-3090",
        _mib(24_576),
        "nvidia-smi",
        "24,576 MiB, NVIDIA GeForce RTX 3090 (index id 49287497547)",
        ("3090", "RTX3090", "GeForce RTX 3090", "NVIDIA GeForce RTX 3090"),
    ),
    CatalogEntry(
        "RTX-3090-Ti",
        _mib(24_564),
        "nvidia-smi",
        "24,564 MiB, NVIDIA GeForce RTX 3090 Ti (index id 69133493032)",
        ("3090-Ti", "RTX3090Ti", "GeForce RTX 3090 Ti", "NVIDIA GeForce RTX 3090 Ti"),
    ),
    CatalogEntry(
        "RTX-2080-Ti",
        _mib(11_019),
        "cuda properties",
        "torch's _CudaDeviceProperties(name='GeForce RTX 2080 Ti', major=7, minor=5, total_memory=11019MB) on Linux servers (index "
        "ids 24144733103, 21232746912, 29283747073); the 22 GB modded cards need --gpu with their size",
        ("2080-Ti", "RTX2080Ti", "GeForce RTX 2080 Ti", "NVIDIA GeForce RTX 2080 Ti"),
    ),
    CatalogEntry(
        "RTX-3080-10GB",
        _log_gib("9.78"),
        "cuda oom",
        "'GPU 0; 9.78 GiB total capacity' on an RTX 3080 under Linux (github.com/zai-org/CogVideo/issues/34); Windows reads 10239 MiB "
        "(index id 55044591858). A 12 GB RTX 3080 exists under the same name: give its size",
        ("RTX3080-10GB", "3080-10GB"),
    ),
    CatalogEntry(
        "RTX-3060-12GB",
        _log_gib("11.63"),
        "vllm log",
        "'Free memory on device cuda:0 (9.02/11.63 GiB)' on an RTX 3060 12GB (index id 62571909065, bench/vllm_logs/qwen3-0.6b-rtx3060-*); "
        "llama.cpp prints 'VRAM: 11906 MiB' / '11907 MiB' for others on Linux (index ids 69765842106, 61698967414)",
        ("RTX3060-12GB", "3060-12GB"),
    ),
    CatalogEntry(
        "RTX-4060-Ti-16GB",
        _mib(15_944),
        "cuda properties",
        "llama.cpp's 'NVIDIA GeForce RTX 4060 Ti, compute capability 8.9, VMM: yes, VRAM: 15944 MiB' in a Linux container (index id 57745939478)",
        ("RTX4060Ti-16GB", "4060-Ti-16GB"),
    ),
    CatalogEntry(
        "RTX-4080",
        _mib(16_049),
        "cuda properties",
        "torch's _CudaDeviceProperties(name='NVIDIA GeForce RTX 4080', major=8, minor=9, total_memory=16049MB) (index id 22567041692); "
        "under WSL2 vLLM prints 'Free memory on device (14.66/15.99 GiB)' (github.com/mrpid12org/imageworks, bench/vllm_logs/llava-1.5-7b-rtx4080-wsl-*)",
        ("4080", "RTX4080", "GeForce RTX 4080", "NVIDIA GeForce RTX 4080"),
    ),
    CatalogEntry(
        "RTX-4080-Super",
        _mib(15_937),
        "cuda properties",
        "llama.cpp's 'NVIDIA GeForce RTX 4080 SUPER, compute capability 8.9, VMM: yes, VRAM: 15937 MiB' on NixOS (index id "
        "70844013997); Windows / WSL2 read 16375 MiB (index ids 54798121264, 57480453617)",
        ("4080-Super", "RTX4080Super", "GeForce RTX 4080 SUPER", "NVIDIA GeForce RTX 4080 SUPER"),
    ),
    CatalogEntry(
        "RTX-5060-Ti-16GB",
        _mib(15_850),
        "cuda properties",
        "llama.cpp's 'NVIDIA GeForce RTX 5060 Ti, compute capability 12.0, VMM: yes, VRAM: 15850 MiB' in a Linux container (index id "
        "53499544829); other Linux cards read 15825-15888 MiB (index ids 56630343702, 56711454996), Windows 16310 MiB",
        ("RTX5060Ti-16GB", "5060-Ti-16GB"),
    ),
    CatalogEntry(
        "RTX-5070-Ti",
        _mib(15_842),
        "cuda properties",
        "llama.cpp's 'NVIDIA GeForce RTX 5070 Ti, compute capability 12.0, VMM: yes, VRAM: 15842 MiB' in a Linux container (index id "
        "53499544829; 15808 MiB in index id 53250428215); Windows reads 16302 MiB (index id 52509346253)",
        ("5070-Ti", "RTX5070Ti", "GeForce RTX 5070 Ti", "NVIDIA GeForce RTX 5070 Ti"),
    ),
    CatalogEntry(
        "RTX-4050-Laptop-WSL",
        _log_gib("6.0"),
        "vllm log",
        "'Free memory on device (4.95/6.0 GiB)' on an RTX 4050 Laptop 6 GB under WSL2 (index id 68573043236, "
        "bench/vllm_logs/qwen2.5-3b-awq-rtx4050-laptop-wsl-*); nvidia-smi shows 6141 MiB",
        ("RTX4050-Laptop-WSL",),
        note=_WSL,
    ),
    CatalogEntry(
        "RTX-4060-Laptop-Linux",
        _mib(7_815),
        "cuda properties",
        "llama.cpp's 'RTX 4060 Laptop GPU, compute capability 8.9, VMM: yes, VRAM: 7815 MiB' on native Linux (Ubuntu 24.04, driver "
        "570.211.01, 'no WSL2'; nvidia-smi 8188 MiB; index id 57488598479)",
        ("NVIDIA GeForce RTX 4060 Laptop GPU", "GeForce RTX 4060 Laptop GPU"),
    ),
    CatalogEntry(
        "RTX-4060-Laptop-WSL",
        _mib(8_187),
        "cuda properties",
        "llama.cpp's 'NVIDIA GeForce RTX 4060 Laptop GPU, compute capability 8.9, VMM: yes, VRAM: 8187 MiB' built with MSVC on Windows "
        "(index ids 69082520931, 68952056531)",
        note=_WSL,
    ),
    CatalogEntry(
        "RTX-4070-Laptop-Linux",
        _log_gib("7.63"),
        "cuda oom",
        "'GPU 0 has a total capacity of 7.63 GiB' on an RTX 4070 Laptop ('8188 MiB totais, 7.63 GiB utilizáveis', Linux driver "
        "590.48.01; index ids 54536269902, 54513273754)",
        ("NVIDIA GeForce RTX 4070 Laptop GPU", "GeForce RTX 4070 Laptop GPU"),
    ),
    CatalogEntry(
        "RTX-4070-Laptop-WSL",
        _mib(8_187),
        "cuda properties",
        "llama.cpp's 'NVIDIA GeForce RTX 4070 Laptop GPU, compute capability 8.9, VMM: yes, VRAM: 8187 MiB' run from PowerShell "
        "(Windows, index ids 68739863494, 68711858341); nvidia-smi shows 8188 MiB (WSL2 and Windows, index ids 59589865832, 71577517085)",
        note=_WSL,
    ),
    CatalogEntry(
        "RTX-4090",
        _mib(24_564),
        "nvidia-smi",
        "24,564 MiB, NVIDIA GeForce RTX 4090 (index id 69527282841)",
        ("4090", "RTX4090", "GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ),
    CatalogEntry(
        "RTX-5080",
        _mib(16_303),
        "nvidia-smi",
        "16,303 MiB, NVIDIA GeForce RTX 5080 (index id 60637830712)",
        ("5080", "RTX5080", "GeForce RTX 5080", "NVIDIA GeForce RTX 5080"),
    ),
    CatalogEntry(
        "RTX-5090",
        _mib(32_607),
        "nvidia-smi",
        "32,607 MiB, NVIDIA GeForce RTX 5090 (index id 34759949062)",
        ("5090", "RTX5090", "GeForce RTX 5090", "NVIDIA GeForce RTX 5090"),
    ),
    CatalogEntry(
        "RTX-A6000",
        _mib(49_140),
        "nvidia-smi",
        "49,140 MiB with ECC off (46,068 MiB with ECC on), NVIDIA RTX A6000 (index ids 47845772123, 9641821283)",
        ("A6000", "NVIDIA RTX A6000"),
    ),
    CatalogEntry("RTX-6000-Ada", _mib(49_140), "nvidia-smi", "49,140 MiB", ("RTX6000-ADA", "NVIDIA RTX 6000 Ada Generation")),
    CatalogEntry(
        "RTX-PRO-6000",
        _mib(97_887),
        "nvidia-smi",
        "97,887 MiB, RTX PRO 6000 Blackwell Workstation / Server Edition (index ids 60416527314, 69814199154)",
        ("RTX-PRO-6000-Blackwell", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
    ),
    CatalogEntry("B200", _mib(183_359), "nvidia-smi", "183,359 MiB", ("NVIDIA B200",), sm100=True),
    CatalogEntry(
        "B300", _mib(275_040), "nvidia-smi", "275,040 MiB, NVIDIA B300 SXM6 AC (index id 65926719034)", ("B300-SXM6", "NVIDIA B300 SXM6 AC"), sm100=True
    ),
    CatalogEntry(
        "MI300X",
        _log_gib("191.98"),
        "vllm log",
        "device memory 191.98 GiB quoted from vLLM on an MI300X, github.com/vllm-project/vllm/issues/53961",
        ("AMD Instinct MI300X",),
        platform="rocm",
        note=_ROCM,
    ),
    _instinct_published(
        "MI325X",
        256,
        "256 GB HBM3E (AMD counts GiB), less the 0.02 GiB an MI300X's 192 GB loses to the driver (estimated)",
        ("AMD Instinct MI325X",),
    ),
    _instinct_published(
        "MI355X",
        288,
        "288 GB HBM3E (AMD counts GiB; e.g. index id 67108253158 '8x AMD Instinct MI355X, 288GB VRAM each'), less the 0.02 GiB an "
        "MI300X's 192 GB loses to the driver (estimated)",
        ("AMD Instinct MI355X",),
    ),
    _instinct_published(
        "MI250X",
        64,
        "64 GB HBM2e per GCD (an MI250X is two GCDs of 64 GB, each one device to HIP and vLLM), less the 0.02 GiB an MI300X loses "
        "(estimated); HIP out-of-memory errors of unnamed 64 GB ROCm devices print 'total capacity of 63.98 GiB' (index ids "
        "26211555743, 57038549763)",
        ("AMD Instinct MI250X", "AMD Instinct MI250X / MI250"),
    ),
)

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


def _norm(text: str) -> str:
    return re.sub(r"[\s_]+", "-", text.lower().replace("nvidia", "").replace("geforce", "")).strip("-")


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


def catalog_entry(name: str) -> CatalogEntry | None:
    """The catalog entry a name or alias names (case and spacing insensitive), if any."""
    key = _norm(name)
    return next((e for e in CATALOG if key == _norm(e.name) or any(key == _norm(a) for a in e.aliases)), None)


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
    key = _norm(name)
    for short, choices in AMBIGUOUS.items():
        if key == _norm(short):
            listed = ", ".join(f"{c} ({next(e for e in CATALOG if e.name == c).total_memory_bytes / GiB:.2f} GiB)" for c in choices)
            raise BadInput(f"GPU '{name}' is ambiguous: pick one of {listed}, or give the memory size (--gpu 79GiB)")
    names = [e.name for e in CATALOG]
    close = difflib.get_close_matches(name.upper(), [n.upper() for n in names], n=3, cutoff=0.3)
    close = [n for n in names if n.upper() in close]
    hint = f"closest: {', '.join(close)}" if close else f"known: {', '.join(names)}"
    raise BadInput(f"unknown GPU '{name}'; {hint}; or give its memory size (--gpu 24GiB) (or omit --gpu on a machine with an NVIDIA GPU to use it)")


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


# (GPU kind, nvidia-smi's total in MiB, CUDA's total in B) where both were read for one kind: the references of the
# catalog entries above (the H200 measured, the others from vLLM logs and CUDA OOMs). Under WSL2 the two agree (RTX 4090
# logs print 23.99 GiB for nvidia-smi's 24,564 MiB).
SMI_AND_CUDA_TOTALS: tuple[tuple[str, int, int], ...] = (
    ("H200", 143_771, 150_109_880_320),
    ("A100-80GB", 81_920, _log_gib("79.15")),
    ("A100-40GB", 40_960, _log_gib("39.39")),
    ("L40S", 46_068, _log_gib("44.42")),
    ("L4", 23_034, _log_gib("22.03")),
    ("A10G", 23_028, _log_gib("22.06")),
    ("T4", 15_360, _log_gib("14.74")),
    ("RTX-3090", 24_576, _log_gib("23.58")),
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
