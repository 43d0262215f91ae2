"""The local GPU through NVML (capacity/gpu/detect.py): its name and CUDA-side total, other processes' memory, and
no driver meaning the catalog's default, without importing nvidia-ml-py to hear it."""

from __future__ import annotations

import ctypes
import sys
import types

import pytest

import capacity.gpu.detect as detect
from capacity.gpu.detect import detect_local_gpu, nvml_library_loads, resolve_gpu
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs

pytestmark = pytest.mark.formula("it tests GPU detection, which no estimate changes; the formulas keep each plan under a second")


@pytest.fixture
def driver(monkeypatch):
    """The NVIDIA driver's NVML library loads (this machine may have none); pynvml is whatever the test puts in."""
    monkeypatch.setattr(detect, "nvml_library_loads", lambda: True)


class FakeNvml(types.ModuleType):
    """Enough of nvidia-ml-py's pynvml for detect_local_gpu."""

    class NVMLError(Exception):
        pass

    def __init__(self, total: int, others: list[int], name: str = "NVIDIA H200") -> None:
        super().__init__("pynvml")
        self.total, self.others, self.name, self.shut = total, others, name, False

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return self.name

    def nvmlDeviceGetMemoryInfo(self, h: int):
        return types.SimpleNamespace(total=self.total, used=sum(self.others), free=self.total - sum(self.others))

    def nvmlDeviceGetComputeRunningProcesses(self, h: int):
        return [types.SimpleNamespace(usedGpuMemory=b) for b in self.others]

    def nvmlDeviceGetCudaComputeCapability(self, h: int):
        return (9, 0)


def test_local_gpu_through_nvml(monkeypatch, driver):
    fake = FakeNvml(150_754_820_096, [2 * 2**30])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpu = detect_local_gpu()
    assert gpu is not None and gpu.source == "nvml"
    assert (gpu.name, gpu.total_memory_bytes, gpu.used_by_others_bytes, gpu.sm100) == ("NVIDIA H200", 150_754_820_096, 2 * 2**30, False)
    assert fake.shut
    assert resolve_gpu(None)[0].source == "nvml"


def test_local_gpu_is_planned_on_cudas_total_not_nvmls(monkeypatch, driver):
    # vLLM multiplies cudaMemGetInfo's total. On the project's H200 NVML reports 150,754,820,096 B and CUDA
    # 150,109,880,320 B (both read on the device): the plan takes CUDA's.
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(150_754_820_096, []))
    gpu = resolve_gpu(None)[0]
    assert (gpu.name, gpu.total_memory_bytes, gpu.source) == ("NVIDIA H200", 150_109_880_320, "nvml")
    assert "150,754,820,096" in gpu.provenance
    # a GPU the catalog has no CUDA-side total for: NVML's total less the H200's measured gap, said to be estimated
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(25_757_220_864, [], name="NVIDIA RTX 9999"))
    gpu = resolve_gpu(None)[0]
    assert gpu.total_memory_bytes == 25_757_220_864 - (150_754_820_096 - 150_109_880_320)
    assert gpu.provenance.startswith("estimated")
    # same name, another memory size (a catalog total above NVML's cannot be this GPU's): not taken from the catalog
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(100 * 2**30, []))
    assert resolve_gpu(None)[0].total_memory_bytes == 100 * 2**30 - 644_939_776


def test_other_processes_memory_can_block_startup(monkeypatch, driver):
    # 100 GiB held by another process: 0.92 x total cannot be free at startup
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(150_754_820_096, [100 * 2**30]))
    plan = plan_for("openai/whisper-tiny", ServingArgs(), None)
    assert "requested_exceeds_free" in {h.id for h in plan.hazards}
    assert plan.verdict == "does_not_fit"


def test_no_pynvml_defaults_to_h200_with_a_note(monkeypatch, driver):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    gpu, note = resolve_gpu(None)
    assert gpu.name == "H200" and note and "H200" in note


class Untouchable(types.ModuleType):
    """A pynvml that fails the test if anything of it is used."""

    def __getattr__(self, name: str):
        raise AssertionError(f"pynvml.{name} was used")


def refuse_to_load(name: str) -> None:
    raise OSError(f"{name}: cannot open shared object file: No such file or directory")


def test_no_driver_library_is_no_local_gpu_without_importing_pynvml(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(ctypes, "CDLL", refuse_to_load)
    monkeypatch.setitem(sys.modules, "pynvml", Untouchable("pynvml"))
    assert nvml_library_loads() is False
    assert detect_local_gpu() is None
    gpu, note = resolve_gpu(None)
    assert gpu.name == "H200" and note and "H200" in note


def test_the_driver_library_is_asked_for_by_the_name_pynvml_loads(monkeypatch):
    asked = []
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(ctypes, "CDLL", asked.append)
    assert nvml_library_loads() is True
    assert asked == ["libnvidia-ml.so.1"]  # pynvml._LoadNvmlLibrary off Windows


def test_with_the_driver_library_nvml_decides(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(ctypes, "CDLL", lambda name: None)
    fake = FakeNvml(150_754_820_096, [])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert detect_local_gpu().name == "NVIDIA H200"


def test_on_windows_pynvml_finds_the_library_itself(monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(ctypes, "CDLL", refuse_to_load)
    assert nvml_library_loads() is True
