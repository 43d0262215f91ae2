"""Memory probes: where the profiler reads memory from.

`CudaProbe` reads torch.cuda's allocator statistics, cudaMemGetInfo and NVML. `CpuProbe` counts the
bytes of live tensors created under it (a TorchDispatchMode that tracks storages), so the whole
profiler code path runs, and is tested, on a machine without a GPU.
"""

from __future__ import annotations

import gc
import os
import threading
import weakref
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol


class MemoryProbe(Protocol):
    device: str

    def init(self) -> None: ...
    def tracking(self) -> AbstractContextManager[Any]: ...
    def host(self) -> AbstractContextManager[Any]: ...
    def adopt(self, tensor: Any) -> Any: ...
    def sync(self) -> None: ...
    def allocated(self) -> int: ...
    def peak(self) -> int: ...
    def reset_peak(self) -> None: ...
    def reserved(self) -> int: ...
    def device_used(self) -> int | None: ...
    def nvml(self) -> tuple[int | None, int | None]: ...
    def empty_cache(self, collect: bool = True) -> None: ...
    def describe(self) -> dict[str, Any]: ...


def _returns_its_input(func: Any, args: Any) -> bool:
    """Ops that allocate nothing on a real device but get a fresh storage under fake tensors:
    dropout outside training returns its input (ATen: `if (!train || p == 0) return input`)."""
    import torch

    return func is torch.ops.aten.dropout.default and len(args) > 2 and not args[2]


class CudaProbe:
    """torch.cuda allocator counters, cudaMemGetInfo and NVML for one GPU."""

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.device = f"cuda:{index}"
        self._nvml: Any = None
        self._handle: Any = None

    def init(self) -> None:
        """CUDA context and cuBLAS/cuBLASLt handles, as vLLM's Worker.init_device before its snapshot."""
        import torch

        torch.cuda.set_device(self.index)
        a = torch.randn(16, 16, device=self.device)
        torch.nn.functional.linear(a, a, a[0])
        torch.cuda.synchronize()
        del a
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
        except Exception:  # NVML is optional: its figures are reported as missing
            self._nvml = None

    def tracking(self) -> AbstractContextManager[Any]:
        return nullcontext()

    def host(self) -> AbstractContextManager[Any]:
        """Where host-side preprocessing (feature extractors) runs: here, as it is."""
        return nullcontext()

    def adopt(self, tensor: Any) -> Any:
        return tensor

    def sync(self) -> None:
        import torch

        torch.cuda.synchronize(self.index)

    def allocated(self) -> int:
        import torch

        return int(torch.cuda.memory_allocated(self.index))

    def peak(self) -> int:
        import torch

        return int(torch.cuda.max_memory_allocated(self.index))

    def reset_peak(self) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats(self.index)

    def reserved(self) -> int:
        import torch

        return int(torch.cuda.memory_reserved(self.index))

    def device_used(self) -> int | None:
        import torch

        free, total = torch.cuda.mem_get_info(self.index)
        return int(total - free)

    def total(self) -> int:
        import torch

        return int(torch.cuda.mem_get_info(self.index)[1])

    def nvml(self) -> tuple[int | None, int | None]:
        if self._nvml is None:
            return None, None
        pynvml = self._nvml
        device = int(pynvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        process = None
        try:
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
                if proc.pid == os.getpid():
                    process = int(proc.usedGpuMemory or 0)
        except pynvml.NVMLError:
            process = None
        return process, device

    def empty_cache(self, collect: bool = True) -> None:
        """gc.collect() (unless `collect` is False: nothing garbage holds a tensor), then the cached blocks back to CUDA."""
        import torch

        if collect:
            gc.collect()
        torch.cuda.empty_cache()

    def describe(self) -> dict[str, Any]:
        import torch

        driver = ""
        if self._nvml is not None:
            driver = str(self._nvml.nvmlSystemGetDriverVersion())
        return {
            "device": "cuda",
            "gpu_name": torch.cuda.get_device_name(self.index),
            "gpu_total_memory_bytes": self.total(),
            "driver": driver,
            "cuda": str(torch.version.cuda),
        }


class CpuProbe:
    """Live bytes of tensors created under `tracking()`, on the CPU; optional limit to simulate OOM."""

    device = "cpu"

    def __init__(self, limit_bytes: int | None = None) -> None:
        self.limit_bytes = limit_bytes
        # storage key -> [bytes, recorded tensors still alive]; a weakref finalizer per tensor keeps it
        # current, so each op costs O(its outputs), not O(live storages)
        self._live: dict[int, list[int]] = {}
        self._total = 0
        self._peak = 0
        self._paused = False
        # A finalizer can run on another thread: gloo's worker drops its reference to a sent or received tensor
        # there (seen under torchrun), while this thread records. Reentrant: a collection inside _record may finalize.
        self._lock = threading.RLock()

    def init(self) -> None:
        return None

    def _release(self, key: int) -> None:
        with self._lock:
            entry = self._live.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] == 0:
                self._total -= entry[0]
                del self._live[key]

    def _purge(self) -> int:
        return self._total

    def _key_and_size(self, t: Any) -> tuple[int, int] | None:
        """A live storage's identity and its bytes; None for tensors not to count."""
        if t.device.type != "cpu":
            return None
        storage = t.untyped_storage()
        key = storage.data_ptr()
        return None if key == 0 else (key, storage.nbytes())

    def _record(self, out: Any) -> None:
        import torch

        if self._paused:
            return
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if not isinstance(t, torch.Tensor):
                continue
            found = self._key_and_size(t)
            if found is None:
                continue
            key, size = found
            with self._lock:
                entry = self._live.get(key)
                if entry is None:
                    entry = self._live[key] = [size, 0]
                    self._total += size
                elif size > entry[0]:  # a storage seen again, larger (resized in place)
                    self._total += size - entry[0]
                    entry[0] = size
                entry[1] += 1
            weakref.finalize(t, self._release, key)
        live = self._total
        self._peak = max(self._peak, live)
        if self.limit_bytes is not None and live > self.limit_bytes:
            raise torch.cuda.OutOfMemoryError(f"CpuProbe: {live} live bytes exceed the {self.limit_bytes}-byte limit")

    def _allocates_nothing_on_gpu(self, func: Any, args: Any, out: Any) -> bool:
        return _returns_its_input(func, args)

    def tracking(self) -> AbstractContextManager[Any]:
        from torch.utils._python_dispatch import TorchDispatchMode

        probe = self

        class _Track(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                out = func(*args, **(kwargs or {}))
                if not probe._allocates_nothing_on_gpu(func, args, out):
                    probe._record(out)
                return out

        return _Track()

    def host(self) -> AbstractContextManager[Any]:
        return nullcontext()

    def adopt(self, tensor: Any) -> Any:
        return tensor

    def sync(self) -> None:
        return None

    def allocated(self) -> int:
        return self._purge()

    def peak(self) -> int:
        return max(self._peak, self._purge())

    def reset_peak(self) -> None:
        self._peak = self._purge()

    def reserved(self) -> int:
        return self._purge()

    def device_used(self) -> int | None:
        return None

    def nvml(self) -> tuple[int | None, int | None]:
        return None, None

    def empty_cache(self, collect: bool = True) -> None:
        if collect:
            gc.collect()

    def describe(self) -> dict[str, Any]:
        return {"device": "cpu", "gpu_name": "cpu (CpuProbe)", "gpu_total_memory_bytes": 0, "driver": "", "cuda": ""}


class FakeProbe(CpuProbe):
    """No memory at all: the phases run under torch's FakeTensorMode (shapes and dtypes only) and the
    bytes of live storages are counted the way the CUDA caching allocator counts them (each allocation
    rounded up to a multiple of 512 bytes). Device-level memory (CUDA context, cuBLAS workspaces) is
    invisible here; the planner adds measured constants for it."""

    device = "cpu"
    ROUND = 512  # CUDA caching allocator: kMinBlockSize; block sizes are multiples of it

    def __init__(self, mode: Any = None) -> None:
        super().__init__()
        self._mode = mode  # a FakeTensorMode to run under (profilers/shared_model.py's), else a new one per run
        self._fake: Any = None
        self.convolutions = 0  # convolution ops seen: a real GPU would initialise cuDNN for them

    def _key_and_size(self, t: Any) -> tuple[int, int] | None:
        storage = t.untyped_storage()
        size = storage.nbytes()
        return storage._cdata, max(self.ROUND, -(-size // self.ROUND) * self.ROUND)

    def _allocates_nothing_on_gpu(self, func: Any, args: Any, out: Any) -> bool:

        if func.__name__.split(".")[0] in ("convolution", "conv1d", "conv2d", "conv3d", "_convolution", "cudnn_convolution"):
            self.convolutions += 1
        return super()._allocates_nothing_on_gpu(func, args, out)

    def tracking(self) -> AbstractContextManager[Any]:
        from contextlib import ExitStack

        from torch._subclasses.fake_tensor import FakeTensorMode

        stack = ExitStack()
        self._fake = self._mode or FakeTensorMode(allow_non_fake_inputs=True)
        stack.enter_context(self._fake)
        stack.enter_context(super().tracking())
        return stack

    @contextmanager
    def host(self) -> Any:
        """Real tensors for host-side preprocessing (a feature extractor's STFT), not counted."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        self._paused = True
        try:
            with unset_fake_temporarily():
                yield
        finally:
            self._paused = False

    def adopt_module(self, module: Any) -> Any:
        """A module built on the meta device, its parameters and buffers turned into counted fake tensors.

        Building under fake tensors fails where a constructor reads a value (Florence-2's DaViT computes its
        drop-path rates with `.item()`); building on meta needs no values. Shared (tied) tensors stay shared."""
        import torch

        memo: dict[int, tuple[Any, Any]] = {}  # id -> (the meta tensor, kept alive so ids stay unique; its fake twin)
        cpu = torch.device("cpu")

        def fake(t: Any, parameter: bool) -> Any:
            if id(t) not in memo:
                with self.host():  # a parameter's plain meta tensor (`.data` under the fake mode converts it first)
                    meta = t.data if parameter else t
                twin = self._fake.fake_tensor_converter.from_meta_and_device(self._fake, meta, cpu)
                self._record(twin)
                memo[id(t)] = (t, torch.nn.Parameter(twin, requires_grad=False) if parameter else twin)
            return memo[id(t)][1]

        for mod in module.modules():
            for name, param in list(mod._parameters.items()):
                if param is not None:
                    mod._parameters[name] = fake(param, True)
            for name, buf in list(mod._buffers.items()):
                if buf is not None:
                    mod._buffers[name] = fake(buf, False)
        return module

    def count_module(self, module: Any) -> Any:
        """A module adopted before (under this probe's mode, by another run): its parameters and buffers counted
        as adopt_module counts them, one storage each, as if it were adopted now."""
        seen: set[int] = set()
        for t in (*module.parameters(), *module.buffers()):
            if id(t) not in seen:
                seen.add(id(t))
                self._record(t)
        return module

    def adopt(self, tensor: Any) -> Any:
        """A host tensor handed to the device: its fake twin, counted."""
        fake = self._fake.from_tensor(tensor)
        self._record(fake)
        return fake

    def describe(self) -> dict[str, Any]:
        return {"device": "fake", "gpu_name": "fake tensors (FakeProbe)", "gpu_total_memory_bytes": 0, "driver": "", "cuda": ""}
