"""Device memory of the tensor-parallel collectives, allocated before vLLM's baseline snapshot.

vLLM 0.33 builds its communicators in `init_worker_distributed_environment`, before `Worker.init_device` takes the
baseline snapshot: they lower the free memory a GPU starts with, not the KV budget (which is measured from the
snapshot on). Two parts:

- NCCL's communicator (buffers, channels, proxies): NCCL sizes it itself (NCCL_BUFFSIZE, channel count, the
  topology), so it is measured by a profile (`capacity profile --tensor-parallel-size N`) and otherwise a constant;
- vLLM's own all-reduce buffers, sized by constants in its source (below), estimated here.

The sizes of vLLM's buffers, read from vLLM 0.33 (`vllm/distributed/device_communicators/`):

- `custom_all_reduce.py` `CustomAllreduce.__init__` (one node, P2P capable, world size in 2, 4, 6, 8, 16):
  `max_size = min(CUSTOM_ALL_REDUCE_MAX_SIZES[capability][world], 8 MiB)` when symmetric memory is enabled
  (`all_reduce_utils.py`; 9.0: 2 -> 64 MiB, 4 -> 32 MiB, 6 -> 512 KiB, 8 -> 256 KiB);
  a signal buffer of `meta_size() + max_size` (`create_shared_buffer(..., uncached=True)`; meta_size is the C++
  `sizeof(Signal)`, a few KiB, not counted); an IPC buffer of `max(max_size, 2 MiB all-gather, 16 MiB
  reduce-scatter)`; `rank_data = torch.empty(8 MiB)`; the MNNVL Lamport buffer is freed again when the GPUs
  have no NVLink multicast (`_init_mnnvl_buffer` returns on `multicast_ptr == 0`), not counted;
- `symm_mem.py` `SymmMemCommunicator` (VLLM_ALLREDUCE_USE_SYMM_MEM=1 by default): one buffer of
  `SYMM_MEM_ALL_REDUCE_MAX_SIZES[capability][world]` (9.0: 2 -> 64 MiB, 4 -> 32 MiB, 6 and 8 -> 64 MiB;
  10.0: 2 -> 8 MiB, 4 -> 32 MiB, 6 and 8 -> 128 MiB).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from capacity.gpu.catalog import Gpu
from capacity.memory.term import ESTIMATED, EXACT, MemoryTerm
from capacity.serving.config import ServingConfig
from capacity.units import MiB

if TYPE_CHECKING:  # pragma: no cover - typing only (a formula plan has no measured profile)
    from capacity.memory.measured_profile import MemoryProfile

# vllm/distributed/device_communicators/all_reduce_utils.py
CUSTOM_ALL_REDUCE_MAX_SIZES = {
    "9.0": {2: 64 * MiB, 4: 32 * MiB, 6: MiB // 2, 8: MiB // 4},
    "10.0": {2: 2 * MiB, 4: 2 * MiB, 6: 1 * MiB, 8: 1 * MiB},
}
SYMM_MEM_ALL_REDUCE_MAX_SIZES = {
    "9.0": {2: 64 * MiB, 4: 32 * MiB, 6: 64 * MiB, 8: 64 * MiB},
    "10.0": {2: 8 * MiB, 4: 32 * MiB, 6: 128 * MiB, 8: 128 * MiB},
}
CUSTOM_ALL_REDUCE_WORLD_SIZES = (2, 4, 6, 8, 16)  # CustomAllreduce._SUPPORTED_WORLD_SIZES
CUSTOM_ALL_REDUCE_DEFAULT_MAX_SIZE = 8 * MiB  # CustomAllreduce.__init__(max_size=8192 * 1024)
ALL_GATHER_MAX_SIZE = 2 * MiB  # CustomAllreduce._DEFAULT_ALL_GATHER_MAX_SIZE
REDUCE_SCATTER_MAX_SIZE = 16 * MiB  # CustomAllreduce._DEFAULT_REDUCE_SCATTER_MAX_SIZE
RANK_DATA_BYTES = 8 * MiB  # CustomAllreduce.rank_data = torch.empty(8 * 1024 * 1024, uint8)

# NCCL's communicator when no profile measured it (estimated): device memory growth across init_process_group
# (eager, device_id) + one all-reduce + one all-gather + a barrier, measured on every rank of an H200 x2 (NVLink NV18,
# torch 2.11.0+cu130 with its NCCL 2.28.9, NVLS off; bench/results/h200x2-tp-2026-11-30): 975,175,680 B on every rank of
# whisper-large-v3, Nemotron-Parse and Qwen2.5-VL-7B at TP 2 (975,241,216 B on one rank of two runs).
# The planner's earlier constant, 256 MiB, was 3.6x too small. vLLM's PyNcclCommunicator is a second
# communicator on the same ranks; its share is not measured here.
NCCL_COMMUNICATOR_BYTES = 975_175_680


@dataclass(frozen=True)
class VllmAllReduceBuffers:
    """vLLM 0.33's all-reduce buffers on one rank (estimated from its source; see the module docstring)."""

    symm_mem_bytes: int
    custom_signal_bytes: int
    custom_ipc_bytes: int
    custom_rank_data_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.symm_mem_bytes + self.custom_signal_bytes + self.custom_ipc_bytes + self.custom_rank_data_bytes

    def describe(self) -> str:
        if not self.total_bytes:
            return "no vLLM all-reduce buffers (TP 1, or a world size they do not support)"
        return (
            f"vLLM all-reduce buffers: symmetric memory {self.symm_mem_bytes:,} B + custom all-reduce signal {self.custom_signal_bytes:,} B"
            f" + IPC {self.custom_ipc_bytes:,} B + rank_data {self.custom_rank_data_bytes:,} B"
            " (vllm/distributed/device_communicators/custom_all_reduce.py, symm_mem.py)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_bytes": self.total_bytes}


def vllm_all_reduce_buffers(world_size: int, compute_capability: str = "9.0") -> VllmAllReduceBuffers:
    """The buffers CudaCommunicator builds on one rank of a single-node TP group (CUDA, defaults)."""
    if world_size < 2:
        return VllmAllReduceBuffers(0, 0, 0, 0)
    symm = SYMM_MEM_ALL_REDUCE_MAX_SIZES.get(compute_capability, {}).get(world_size, 0)
    if world_size not in CUSTOM_ALL_REDUCE_WORLD_SIZES:
        return VllmAllReduceBuffers(symm, 0, 0, 0)
    max_size = CUSTOM_ALL_REDUCE_DEFAULT_MAX_SIZE
    capped = CUSTOM_ALL_REDUCE_MAX_SIZES.get(compute_capability, {}).get(world_size)
    if symm and capped is not None:  # symm_mem_enabled: max_size = min(table, max_size)
        max_size = min(capped, max_size)
    ipc = max(max_size, ALL_GATHER_MAX_SIZE, REDUCE_SCATTER_MAX_SIZE)
    return VllmAllReduceBuffers(symm, max_size, ipc, RANK_DATA_BYTES)


# --- the collectives term ----------------------------------------------------------------------------


def compute_capability(gpu: Gpu) -> str:
    """The capability vLLM's all-reduce size tables are keyed by (Hopper "9.0", data-centre Blackwell "10.0")."""
    return f"{gpu.compute_capability_major}.0"


def collectives_term(serving: ServingConfig, gpu: Gpu, profile: MemoryProfile | None = None) -> MemoryTerm:
    """NCCL's communicator (measured by a tensor-parallel profile, else a constant) + vLLM's all-reduce buffers
    (from its source, `vllm_all_reduce_buffers`); allocated before the baseline snapshot, like the CUDA context."""
    tp = serving.tensor_parallel_size
    if tp == 1:
        return MemoryTerm(0, EXACT, "TP 1: no communicators")
    buffers = vllm_all_reduce_buffers(tp, compute_capability(gpu))
    measured = profile is not None and profile.communicator_bytes is not None and profile.measured_tensor_parallel_size == tp
    if measured:
        assert profile is not None and profile.communicator_bytes is not None
        nccl, how = profile.communicator_bytes, f"NCCL communicator {profile.communicator_bytes:,} B measured (init_process_group + first collectives, rank {profile.rank})"
    else:
        nccl, how = NCCL_COMMUNICATOR_BYTES, f"NCCL communicator {NCCL_COMMUNICATOR_BYTES:,} B (constant)"
    return MemoryTerm(nccl + buffers.total_bytes, ESTIMATED, f"{how} + {buffers.describe()}; before the baseline snapshot")
