"""Model sources (folder, local HF cache, catalog), GPU detection through NVML, and the layering rule."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from capacity.gpu.detect import detect_local_gpu, resolve_gpu
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from capacity.source.resolve import resolve_model
from tests.support.safetensors_files import safetensors_bytes

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    path.write_bytes(safetensors_bytes(tensors))


@pytest.fixture
def whisper_tiny_folder(tmp_path: Path, catalog_config) -> Path:
    folder = tmp_path / "whisper-tiny-local"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(catalog_config("openai/whisper-tiny")))
    return folder


def test_folder_with_safetensors_uses_headers_for_weights(whisper_tiny_folder: Path):
    # 1000 x 384 + 384 elements: the weights term counts what the checkpoint holds, x 2 B in bf16
    write_safetensors(whisper_tiny_folder / "model.safetensors", {"a": ("F32", [1000, 384]), "b": ("F32", [384])})
    plan = plan_for(str(whisper_tiny_folder), ServingArgs(), "L4")
    assert plan.source.origin == "folder"
    assert plan.parameter_count == 1000 * 384 + 384
    assert plan.memory["weights"].bytes == (1000 * 384 + 384) * 2  # float32 checkpoint -> bfloat16 under dtype auto
    assert plan.serving.dtype == "bfloat16"
    assert "safetensors" in plan.memory["weights"].method


def test_folder_without_safetensors_builds_on_meta(whisper_tiny_folder: Path):
    plan = plan_for(str(whisper_tiny_folder), ServingArgs(), "L4")
    assert plan.parameter_count == 37_760_640  # published whisper-tiny count


def test_hf_cache_is_found_offline(tmp_path: Path, monkeypatch, catalog_config):
    repo = tmp_path / "hub" / "models--acme--tiny-asr"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (snap / "config.json").write_text(json.dumps(catalog_config("openai/whisper-tiny")))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    source = resolve_model("acme/tiny-asr")
    assert (source.origin, source.name, source.path) == ("hf-cache", "acme/tiny-asr", str(snap))


def test_catalog_alias_and_short_name():
    assert resolve_model("nvidia/Nemotron-Parse").name == "nvidia/NVIDIA-Nemotron-Parse-v1.1"
    assert resolve_model("WHISPER-LARGE-V3").name == "openai/whisper-large-v3"


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


def test_local_gpu_through_nvml(monkeypatch):
    fake = FakeNvml(150_754_820_096, [2 * 2**30])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpu = detect_local_gpu()
    assert gpu is not None and gpu.source == "nvml"
    assert (gpu.name, gpu.total_memory_bytes, gpu.used_by_others_bytes, gpu.sm100) == ("NVIDIA H200", 150_754_820_096, 2 * 2**30, False)
    assert fake.shut
    assert resolve_gpu(None)[0].source == "nvml"


def test_local_gpu_is_planned_on_cudas_total_not_nvmls(monkeypatch):
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


def test_other_processes_memory_can_block_startup(monkeypatch):
    # 100 GiB held by another process: 0.92 x total cannot be free at startup
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(150_754_820_096, [100 * 2**30]))
    plan = plan_for("openai/whisper-tiny", ServingArgs(), None)
    assert "requested_exceeds_free" in {h.id for h in plan.hazards}
    assert plan.verdict == "does_not_fit"


def test_no_gpu_defaults_to_h200_with_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    gpu, note = resolve_gpu(None)
    assert gpu.name == "H200" and note and "H200" in note


def test_capacity_core_does_not_import_torch():
    code = (
        "import sys, capacity.cli.app, capacity.planning.planner, capacity.model.families, capacity.memory.weights, capacity.model.arch, reports.terminal\n"
        "from capacity.model.registry import supported_model_types; supported_model_types()\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
