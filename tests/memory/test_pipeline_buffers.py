"""Pipeline parallelism's own buffers (capacity/memory/pipeline_buffers.py), worked out by hand from vLLM 0.33's
VllmConfig.max_concurrent_batches and GPUModelRunner's intermediate tensors."""

from __future__ import annotations

import pytest

from capacity.memory.pipeline_buffers import intermediate_tensors_bytes, max_concurrent_batches


@pytest.mark.parametrize(
    ("pp", "async_scheduling", "v2", "batches"),
    [
        (1, True, True, 2),  # the default at PP 1: async scheduling, V2 runner -> PP + 1 = 2
        (2, True, True, 3),  # PP 2 on the V2 runner (async stays on): PP + 1
        (4, True, True, 5),
        (1, True, False, 2),  # V1 runner, async at PP 1
        (2, False, False, 2),  # V1 runner at PP 2: vLLM turns async off -> PP
        (1, False, True, 1),  # --no-async-scheduling
        (3, False, True, 3),
    ],
)
def test_max_concurrent_batches(pp: int, async_scheduling: bool, v2: bool, batches: int) -> None:
    assert max_concurrent_batches(pp, async_scheduling, v2) == batches


def test_intermediate_tensors_of_llama_3_1_70b() -> None:
    # hidden_states + residual, 8,192 tokens x 8,192 hidden x 2 B (bf16) each = 2 x 134,217,728 = 268,435,456 B (256 MiB)
    assert intermediate_tensors_bytes(False, 2, 8_192, 8_192, 2) == 268_435_456
    assert intermediate_tensors_bytes(True, 2, 8_192, 8_192, 2) == 0  # the first stage receives nothing
