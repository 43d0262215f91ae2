"""Device memory outside torch's allocator that grows after vLLM's baseline snapshot (estimated: constants, documented
in docs/figures/non-torch.md)."""

from __future__ import annotations

from dataclasses import replace

from capacity.gpu.catalog import Gpu
from capacity.memory.term import ESTIMATED, MemoryTerm
from capacity.units import MiB

NON_TORCH_INCREASE_BYTES = 256 * MiB  # kernel modules loaded during profile_run (non-torch growth)
# total_consumed - weights on the H200 (bench/results/h200-profiles-2026-11-30), what a fake-tensor trace cannot
# see: models that run convolutions initialise cuDNN (whisper-tiny, -large-v3, -turbo, Nemotron-Parse, Gemma-3,
# Qwen2.5-VL: 105.9 to 252.9 MB, median 134.9 MB); those that do not (BART, T5: 5.2 and 14.6 MB) stay small.
NON_TORCH_WITH_CONVOLUTIONS_BYTES = 134_862_848
NON_TORCH_WITHOUT_CONVOLUTIONS_BYTES = 9_925_888
# vLLM's own non-torch memory (consumed - weights), which a trace of transformers' modules cannot see (vLLM's
# attention and sampler kernels, cuBLAS and NCCL state): the median of the calibration half of bench/vllm_logs
# where a log prints it, 0.26 GiB (Llama-3.1-8B, H100, MRV2: consumed 15.26 - loaded 15.0), 0.27 GiB (Qwen2.5-1.5B,
# 0.28.1 MRV2: 3.25 - 2.98) and 0.56 GiB (Qwen2.5-0.5B, 0.27.1 under WSL2: 1.49 - 0.93). A fake trace's plan
# uses it, plus the cuDNN difference the H200 measured for models that run convolutions.
VLLM_NON_TORCH_BYTES = round(0.27 * 2**30)
# The V0 engine's non-torch increase from 0.6.5 (its memory_profiling: device memory used - the baseline taken after
# the CUDA context - weights - torch's growth): the calibration half's only figure, 'non_torch_memory takes 0.05GiB'
# (Llama-3.2-3B on a T4, V0 of 0.8.2, bench/vllm_logs/llama-3.2-3b-t4-v0-engine-v0.8.2-unsloth.log). V0 runs no
# torch.compile or Triton kernels in its profile, whose modules V1's 0.27 GiB holds. 0.6.4 and older count all
# non-torch device memory, the CUDA context too (worker.py: mem_get_info's used - torch's allocated): not this figure.
V0_NON_TORCH_BYTES = round(0.05 * 2**30)


def non_torch_term() -> MemoryTerm:
    return MemoryTerm(
        NON_TORCH_INCREASE_BYTES,
        ESTIMATED,
        "constant: non-torch growth during profile_run (kernel modules); the default fake-tensor trace takes vLLM's logged non-torch "
        "memory instead (0.27 GiB, + cuDNN for models with convolutions)",
    )


def v0_non_torch_term(convolutions: bool) -> MemoryTerm:
    """The V0 engine's non-torch increase (0.6.5 to 0.10.2), + cuDNN for a model that runs convolutions."""
    cudnn = NON_TORCH_WITH_CONVOLUTIONS_BYTES - NON_TORCH_WITHOUT_CONVOLUTIONS_BYTES if convolutions else 0
    return MemoryTerm(
        V0_NON_TORCH_BYTES + cudnn,
        ESTIMATED,
        "the V0 engine's non-torch increase, 0.05 GiB as a V0 log of the calibration half prints it (its profile loads no "
        "compiled or Triton kernels)" + (" + cuDNN, the H200's difference between models with and without convolutions" if cudnn else ""),
    )


# The only non-torch figure a PCIe log at TP > 1 of a version that counts the communicators prints: 0.21 GiB on an
# L40S at TP 4, vLLM 0.10.2 (bench/vllm_logs/qwen3-235b-fp8-l40s-tp4.log, calibration half), where NVLinked H200s
# at TP 2 print 1.38 GiB (qwen3-next-80b-instruct-2xh200-tp2-v0.10.2.log). Over PCIe NCCL's device buffers are
# not measured; they are left out there.
def communicators_in_profile(non_torch: MemoryTerm, collectives: MemoryTerm, gpu: Gpu, version: str) -> MemoryTerm:
    """The non-torch growth of a version whose startup snapshot precedes NCCL's initialisation (vLLM 0.8-0.10's
    Worker.init_device): it holds the communicators and all-reduce buffers too, measured over NVLink."""
    if not gpu.nvlink:
        return replace(
            non_torch,
            method=f"{non_torch.method}; vLLM {version} also counts NCCL's communicator here, not added: {gpu.name} is not "
            "known to be NVLinked and NCCL's buffers over PCIe are not measured",
        )
    return MemoryTerm(
        non_torch.bytes + collectives.bytes,
        ESTIMATED,
        f"{non_torch.method} + the communicators ({collectives.bytes:,} B: {collectives.method}); vLLM {version} takes its "
        "startup snapshot before init_worker_distributed_environment",
    )
