"""The GPU catalog and `--gpu` sizes: totals from their sources, ambiguous names refused with the choices."""

from __future__ import annotations

import pytest

from capacity.errors import BadInput
from capacity.gpu.catalog import CATALOG, gpu_by_name
from capacity.units import GiB, MiB


@pytest.mark.parametrize(
    ("text", "total"),
    [
        ("24GiB", 24 * 2**30),
        ("16000MiB", 16_000 * 2**20),
        ("80GB", 80 * 10**9),  # decimal, as vendors count
        ("23.5GiB", int(23.5 * 2**30)),
        (" 49140 MiB ", 49_140 * 2**20),
    ],
)
def test_gpu_size_is_a_total(text: str, total: int) -> None:
    gpu = gpu_by_name(text)
    assert gpu.total_memory_bytes == total
    assert gpu.source == "size"
    assert "cudaMemGetInfo" in gpu.provenance


def test_tiny_size_is_refused() -> None:
    with pytest.raises(BadInput, match="too small"):
        gpu_by_name("12MiB")


@pytest.mark.parametrize(
    ("name", "catalog_name", "total"),
    [
        # nvidia-smi Memory-Usage totals read in public nvidia-smi tables (catalog references give the index ids)
        ("NVIDIA GeForce RTX 3090 Ti", "RTX-3090-Ti", 24_564 * MiB),
        ("RTX 5080", "RTX-5080", 16_303 * MiB),
        ("NVIDIA GeForce RTX 5090", "RTX-5090", 32_607 * MiB),
        ("A6000", "RTX-A6000", 49_140 * MiB),
        ("NVIDIA A10", "A10", 2_206 * GiB // 100),
        ("L20", "L20", 46_068 * MiB),
        ("H20", "H20", 97_871 * MiB),
        ("H100 NVL", "H100-NVL", 95_830 * MiB),
        ("H800", "H800", 81_559 * MiB),
        ("GH200", "GH200", 97_871 * MiB),
        # totals vLLM printed in 'Free memory on device (free/TOTAL GiB)' (2 decimals)
        ("GB10", "GB10", 12_169 * GiB // 100),
        ("B300", "B300", 26_769 * GiB // 100),  # bench/vllm_logs/gemma-4-31b-b300-* (nvidia-smi: 275,040 MiB)
        ("DGX Spark", "GB10", 12_169 * GiB // 100),
        ("L40S", "L40S", 4_442 * GiB // 100),
        ("4090", "RTX-4090", 2_352 * GiB // 100),  # 2 x RTX 4090 under Linux (bench/vllm_logs/qwen3-32b-awq-2xrtx4090-*)
        ("H100-80GB", "H100-SXM", 7_919 * GiB // 100),  # bench/vllm_logs/llava-v1.6-mistral-7b-h100-*
        ("H100 PCIe", "H100-PCIe", 7_919 * GiB // 100),  # the same 80 GB GH100 (nvidia-smi 81,559 MiB on both)
        ("MI300X", "MI300X", 19_198 * GiB // 100),
        # torch's total printed to 2 decimals (bench/vllm_logs/qwen3-32b-2xrtxpro6000-pp2-*: 95.01 GiB)
        ("RTX PRO 6000 Blackwell", "RTX-PRO-6000", 9_501 * GiB // 100),
        # V0's 'total_gpu_memory (T GiB)' (2 decimals)
        ("T4", "T4", 1_474 * GiB // 100),
        ("RTX 3090", "RTX-3090", 2_358 * GiB // 100),  # bench/vllm_logs/llama-3.1-8b-rtx3090-v0-engine-three-starts.log
        ("Tesla V100-SXM2-32GB", "V100-32GB", 3_174 * GiB // 100),
        # totals CUDA out-of-memory errors printed ('total capacity of T GiB')
        ("A100-80GB", "A100-80GB", 7_915 * GiB // 100),
        ("A100-SXM4-40GB", "A100-40GB", 3_939 * GiB // 100),
        ("NVIDIA L4", "L4", 2_203 * GiB // 100),
        ("A10G", "A10G", 2_206 * GiB // 100),
        ("RTX 3060 12GB", "RTX-3060-12GB", 1_163 * GiB // 100),
        ("RTX-4050-Laptop-WSL", "RTX-4050-Laptop-WSL", 600 * GiB // 100),  # printed as '6.0 GiB'
        # totals CUDA out-of-memory errors printed on a named GPU
        ("NVIDIA GeForce RTX 4070 Laptop GPU", "RTX-4070-Laptop-Linux", 763 * GiB // 100),
        ("NVIDIA RTX A5000", "RTX-A5000", 2_368 * GiB // 100),
        ("RTX A4000", "RTX-A4000", 1_561 * GiB // 100),
        ("A800-SXM4-80GB", "A800-80GB", 7_933 * GiB // 100),
        ("NVIDIA L40", "L40", 4_440 * GiB // 100),
        ("RTX 3080 10GB", "RTX-3080-10GB", 978 * GiB // 100),
        # cudaDeviceProp.totalGlobalMem in MiB as llama.cpp's 'VRAM: N MiB' or torch's 'total_memory=NMB' printed it
        ("Jetson Thor", "Jetson-Thor", 125_748 * MiB),
        ("NVIDIA Thor", "Jetson-Thor", 125_748 * MiB),
        ("Jetson AGX Orin 64GB", "Jetson-AGX-Orin-64GB", 62_827 * MiB),
        ("NVIDIA GeForce RTX 4060 Laptop GPU", "RTX-4060-Laptop-Linux", 7_815 * MiB),
        ("RTX-4060-Laptop-WSL", "RTX-4060-Laptop-WSL", 8_187 * MiB),
        ("RTX-4070-Laptop-WSL", "RTX-4070-Laptop-WSL", 8_187 * MiB),
        ("RTX-4060-Ti-16GB", "RTX-4060-Ti-16GB", 15_944 * MiB),
        ("NVIDIA GeForce RTX 4080", "RTX-4080", 16_049 * MiB),
        ("RTX 5060 Ti 16GB", "RTX-5060-Ti-16GB", 15_850 * MiB),
        ("NVIDIA GeForce RTX 5070 Ti", "RTX-5070-Ti", 15_842 * MiB),
        ("NVIDIA A40", "A40", 45_416 * MiB),
        ("GeForce RTX 2080 Ti", "RTX-2080-Ti", 11_019 * MiB),
        ("NVIDIA GeForce RTX 4080 SUPER", "RTX-4080-Super", 15_937 * MiB),
        ("Tesla V100-PCIE-16GB", "V100-16GB", 16_160 * MiB),
        ("Tesla V100-SXM2-16GB", "V100-16GB", 16_160 * MiB),
        # published sizes (AMD counts GiB) less the 0.02 GiB an MI300X's 192 GiB loses (191.98 GiB in its vLLM log)
        ("AMD Instinct MI355X", "MI355X", 288 * GiB - (192 * GiB - 19_198 * GiB // 100)),
        ("MI250X", "MI250X", 64 * GiB - (192 * GiB - 19_198 * GiB // 100)),
        # measured on the project's H200
        ("H200", "H200", 150_109_880_320),
    ],
)
def test_catalog_totals(name: str, catalog_name: str, total: int) -> None:
    gpu = gpu_by_name(name)
    assert (gpu.name, gpu.total_memory_bytes) == (catalog_name, total)


def test_every_entry_states_its_source() -> None:
    for entry in CATALOG:
        assert entry.source in ("measured", "vllm log", "cuda oom", "cuda properties", "nvidia-smi", "published"), entry.name
        assert entry.reference, entry.name
        assert entry.gpu().provenance.startswith(entry.source)


def test_platform_notes() -> None:
    assert gpu_by_name("MI325X").platform == "rocm"
    assert "ROCm" in gpu_by_name("MI300X").provenance
    gb10 = gpu_by_name("GB10")
    assert gb10.unified_memory and "unified memory" in gb10.provenance
    assert gpu_by_name("B300").sm100 and not gpu_by_name("RTX-5090").sm100


@pytest.mark.parametrize(
    ("name", "choices"),
    [
        ("A100", ("A100-40GB", "A100-80GB")),
        ("H100", ("H100-SXM", "H100-PCIe", "H100-NVL")),
        ("V100", ("V100-16GB", "V100-32GB")),
        # a laptop part reports ~0.37 GiB more to CUDA under WSL2 than on native Linux
        ("RTX-4070-Laptop", ("RTX-4070-Laptop-Linux (7.63 GiB)", "RTX-4070-Laptop-WSL (8.00 GiB)")),
        ("RTX 4060 Laptop", ("RTX-4060-Laptop-Linux (7.63 GiB)", "RTX-4060-Laptop-WSL (8.00 GiB)")),
    ],
)
def test_ambiguous_names_are_refused_with_the_choices(name: str, choices: tuple[str, ...]) -> None:
    with pytest.raises(BadInput) as err:
        gpu_by_name(name)
    text = str(err.value)
    assert "ambiguous" in text and all(c in text for c in choices)
    assert "\n" not in text


def test_unknown_name_suggests_a_size() -> None:
    with pytest.raises(BadInput, match=r"--gpu 24GiB"):
        gpu_by_name("Voodoo5")


def test_a_plan_on_an_nvidia_smi_total_says_how_far_cudas_may_be_below() -> None:
    """nvidia-smi less CUDA's total, by hand from the catalog references: H200 143,771 MiB - 150,109,880,320 B = 615 MiB;
    A100-80GB 81,920 MiB - 79.15 GiB = 912,680,551 B (870 MiB), the largest; T4 15,360 MiB - 14.74 GiB = 279,172,875 B
    (266 MiB), the smallest; RTX-4090 (479 MiB) and H100-SXM (468 MiB) in between. At utilization 0.92 the largest is
    0.78 GiB of KV cache."""
    from capacity.gpu.catalog import gpu_by_name, nvidia_smi_total_caveat

    note = nvidia_smi_total_caveat(gpu_by_name("H100-NVL"), 0.92)
    assert note is not None and "266-870 MiB lower on the 10 GPU kinds" in note and "up to 0.78 GiB smaller" in note
    assert nvidia_smi_total_caveat(gpu_by_name("H200"), 0.92) is None  # measured with cudaMemGetInfo
    assert nvidia_smi_total_caveat(gpu_by_name("L40S"), 0.92) is None  # a vLLM log's CUDA total
    assert nvidia_smi_total_caveat(gpu_by_name("H100-SXM"), 0.92) is None  # now a vLLM log's CUDA total too
    assert nvidia_smi_total_caveat(gpu_by_name("79.19GiB"), 0.92) is None  # a size the user gave


@pytest.mark.parametrize(
    ("name", "nvlink"),
    [("H200", True), ("H100-SXM", True), ("H100-NVL", True), ("B200", True), ("H100-PCIe", False), ("A100-80GB", False), ("L40S", False), ("MI300X", False)],
)
def test_nvlink_by_form_factor(name: str, nvlink: bool) -> None:
    """SXM / HGX boards and NVL bridges link GPUs by NVLink; PCIe cards, names covering both (A100) and AMD's xGMI do not."""
    assert gpu_by_name(name).nvlink is nvlink


def test_device_properties_total_is_cudas_total() -> None:
    """llama.cpp's 'VRAM: N MiB' (totalGlobalMem floored to MiB) rounds to the total vLLM printed on the same GPU kind:
    GB10 124,610 MiB / 1024 = 121.689 -> 121.69 GiB (its vLLM log); RTX 3060 12GB 11,906 MiB / 1024 = 11.627 -> 11.63 GiB."""
    assert round(124_610 / 1024, 2) == gpu_by_name("GB10").total_memory_bytes // (GiB // 100) / 100
    assert round(11_906 / 1024, 2) == gpu_by_name("RTX-3060-12GB").total_memory_bytes // (GiB // 100) / 100


def test_wsl_total_is_the_windows_drivers() -> None:
    """Under WSL2 CUDA's total is within 1 MiB of nvidia-smi's (RTX 4070 Laptop: 8,187 MiB floored vs 8,188 MiB), and
    above native Linux's (7.63 GiB = 7,813 MiB) by ~374 MiB."""
    wsl, linux = gpu_by_name("RTX-4070-Laptop-WSL"), gpu_by_name("RTX-4070-Laptop-Linux")
    assert 0 <= 8_188 * MiB - wsl.total_memory_bytes <= MiB
    assert 370 * MiB < wsl.total_memory_bytes - linux.total_memory_bytes < 380 * MiB
    assert "WSL2" in wsl.provenance


@pytest.mark.parametrize(
    ("name", "major"),
    [("Jetson-Thor", 11), ("Jetson-AGX-Orin-64GB", 8), ("V100-16GB", 7), ("RTX-2080-Ti", 7), ("RTX-5070-Ti", 12), ("RTX-5060-Ti-16GB", 12), ("RTX-4080", 8), ("MI355X", 9)],
)
def test_compute_capability_major(name: str, major: int) -> None:
    """Thor is sm_110 since CUDA 13.0 (renamed from sm_101); Orin 8.7; V100 7.0; RTX 50xx 12.0; Ada 8.9; gfx950 9.5."""
    assert gpu_by_name(name).compute_capability_major == major


def test_jetsons_have_unified_memory() -> None:
    for name in ("Jetson-Thor", "Jetson-AGX-Orin-64GB"):
        gpu = gpu_by_name(name)
        assert gpu.unified_memory and "unified memory" in gpu.provenance and not gpu.nvlink
