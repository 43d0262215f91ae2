"""The CUDA context a process holds before vLLM's baseline snapshot (estimated: a constant, documented in
docs/figures/cuda-context.md)."""

from __future__ import annotations

from capacity.memory.term import ESTIMATED, MemoryTerm
from capacity.serving.config import ServingConfig

# CUDA context + cuBLAS/cuBLASLt handles before vLLM's baseline snapshot: measured on the H200
# (torch 2.11, CUDA 13.0, driver 580.159.04; bench/results/calibration-h200-2026-11-30.json).
CUDA_CONTEXT_BYTES = 753_729_536


def cuda_context_term(serving: ServingConfig) -> MemoryTerm:
    return MemoryTerm(CUDA_CONTEXT_BYTES, ESTIMATED, "constant measured on an H200: CUDA context and cuBLAS handles (before vLLM's baseline snapshot)")
