"""The CUDA context a process holds before vLLM's baseline snapshot, and the cuBLAS handles vLLM 0.33 adds to it
(estimated: constants measured on the H200, documented in docs/figures/cuda-context.md)."""

from __future__ import annotations

from capacity.memory.term import ESTIMATED, MEASURED, MemoryTerm

# Measured on the H200 (torch 2.11.0+cu130, CUDA 13.0, driver 580.159.04; bench/results/cublas-baseline-2026-12-02,
# as bench/results/calibration-h200-2026-11-30.json): the context alone (`torch.zeros(1)`), and what vLLM 0.33's
# Worker.init_device sequence (torch.mm and linear with a bias on a 16 x 16 tensor, then empty_cache) adds: the
# cuBLAS / cuBLASLt handles and their workspace.
CUDA_CONTEXT_BYTES = 650_969_088
CUBLAS_HANDLES_BYTES = 102_760_448


def cuda_context_term(handles_before_snapshot: bool) -> MemoryTerm:
    """The context before the snapshot; with the cuBLAS handles where the version creates them there (0.33:
    VllmSemantics.cublas_handles_before_snapshot), else they come at the profile's first matmul (non-torch growth)."""
    if handles_before_snapshot:
        return MemoryTerm(
            CUDA_CONTEXT_BYTES + CUBLAS_HANDLES_BYTES,
            ESTIMATED,
            "constant measured on an H200: CUDA context + the cuBLAS handles vLLM creates before its baseline snapshot",
        )
    return MemoryTerm(CUDA_CONTEXT_BYTES, ESTIMATED, "constant measured on an H200: the CUDA context before vLLM's baseline snapshot (its cuBLAS handles come later)")


def handles_moved(non_torch: MemoryTerm, context: MemoryTerm, handles_before_snapshot: bool) -> tuple[MemoryTerm, MemoryTerm]:
    """(non_torch, context) with the cuBLAS handles on the side of the snapshot the version puts them. The log-derived
    non-torch constants come from versions that create them in the profile (before 0.33); a GPU profile creates them
    before its baseline, as 0.33 (profilers/probes.py). Either is moved when the planned version does the other."""
    h = CUBLAS_HANDLES_BYTES
    if non_torch.kind != MEASURED and handles_before_snapshot:
        return MemoryTerm(max(non_torch.bytes - h, 0), non_torch.kind, f"{non_torch.method}; less the cuBLAS handles ({h:,} B, H200) vLLM 0.33 creates before its snapshot"), context
    if non_torch.kind == MEASURED and not handles_before_snapshot:
        grown = MemoryTerm(non_torch.bytes + h, ESTIMATED, f"{non_torch.method}; + the cuBLAS handles ({h:,} B, H200) this version creates in its profile run")
        shrunk = MemoryTerm(max(context.bytes - h, 0), context.kind, f"{context.method}; less the cuBLAS handles, created after this version's snapshot")
        return grown, shrunk
    return non_torch, context
