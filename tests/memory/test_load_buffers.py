"""capacity.memory.load_buffers: what vLLM's "Model loading took" holds besides the parameters.

Rotary caches are checked against vLLM 0.33.0's own get_rope (bench/vllm_rope_reference.py, output committed in
bench/results/vllm-rope-reference-2026-12-01) and by hand; the allocator rounding by hand from torch's
CUDACachingAllocator constants; both together against calibration-half logs' "Model loading took" lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.memory.load_buffers import allocated_block_bytes, allocator_rounding, load_allocations
from capacity.memory.weights import weight_layout
from capacity.model.registry import spec_from_files
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from capacity.units import GiB, MiB
from capacity.vllm.versions import semantics_for
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
REFERENCE = json.loads((ROOT / "bench" / "results" / "vllm-rope-reference-2026-12-01" / "reference.json").read_text())
DTYPE_BYTES = {"bfloat16": 2, "float16": 2}


def _loads(folder: Path, dtype_bytes: int = 2, tp: int = 1, vision: bool = True):
    config = json.loads((folder / "config.json").read_text())
    spec = spec_from_files(config, folder.name)
    return load_allocations(spec, config, weight_layout(spec, config), tp, dtype_bytes, vision)


@pytest.mark.parametrize("case", sorted(REFERENCE["cases"]))
def test_rotary_caches_equal_vllm_get_rope(case: str) -> None:
    ref = REFERENCE["cases"][case]
    loads = _loads(ROOT / ref["config"], DTYPE_BYTES[ref["dtype"]])
    assert [(c.owner, [c.rows, c.rotary_dim]) for c in loads.caches] == [(c["owner"], c["shape"]) for c in ref["caches"]]
    assert loads.cache_bytes == ref["total_bytes"]
    assert all(c.exact for c in loads.caches)


def test_rotary_caches_by_hand() -> None:
    llama = _loads(ROOT / "capacity/source/catalog/models/meta-llama--Llama-3.1-8B-Instruct")
    assert llama.cache_bytes == 131_072 * 128 * 2 == 33_554_432  # llama3 scaling: max_position rows
    vl = _loads(ROOT / "capacity/source/catalog/models/Qwen--Qwen2.5-VL-7B-Instruct")
    assert vl.cache_bytes == 128_000 * 4 * 128 * 2 + 8_192 * (1280 // 16 // 2) * 2 == 131_072_000 + 655_360
    old = _loads(ROOT / "capacity/source/catalog/models/Qwen--Qwen2.5-VL-7B-Instruct", vision=False)  # 0.9.0.1: inv_freq only
    assert old.cache_bytes == 131_072_000
    deepseek = _loads(ROOT / "capacity/source/catalog/models/deepseek-ai--DeepSeek-V3")
    assert deepseek.cache_bytes == 4_096 * 40 * 64 * 2  # YaRN: original_max_position x factor rows of qk_rope_head_dim
    whisper = _loads(ROOT / "capacity/source/catalog/models/openai--whisper-base")
    assert whisper.caches == ()  # learned positions, no get_rope


def test_allocator_rounding_by_hand() -> None:
    # under 10 MiB: a 2 MiB or 20 MiB segment that splits; only the 512 B rounding
    assert allocated_block_bytes(513) == 1024
    assert allocated_block_bytes(5 * MiB + 1) == 5 * MiB + 512
    # 10 MiB and above: segment rounded to 2 MiB, split only when more than 1 MiB remains
    assert allocated_block_bytes(4608 * 3584 * 2) == 32 * MiB  # 31.5 MiB fused qkv_proj of Qwen2.5-7B: 0.5 MiB kept
    assert allocated_block_bytes(3584 * 3584 * 2) == 3584 * 3584 * 2  # 24.5 MiB o_proj: 1.5 MiB split off
    assert allocated_block_bytes(2 * 18944 * 3584 * 2) == 260 * MiB  # 259 MiB gate_up_proj: exactly 1 MiB kept
    assert allocated_block_bytes(12 * MiB) == 12 * MiB
    assert allocator_rounding([(4608 * 3584 * 2, 28), (3584 * 3584 * 2, 28)]) == (28 * MiB // 2, 28)


def test_qwen2_5_7b_load_buffers_by_hand() -> None:
    loads = _loads(ROOT / "capacity/source/catalog/models/Qwen--Qwen2.5-7B-Instruct")
    # per layer qkv +0.5, gate_up +1, down +0.5 MiB (o_proj splits); embed_tokens and lm_head 1039.5 MiB +0.5 each
    assert loads.rounding_bytes == 28 * 2 * MiB + 2 * MiB // 2
    assert loads.total_bytes == 8 * MiB + 57 * MiB and not loads.exact


def test_llama_load_buffers_exact() -> None:
    loads = _loads(ROOT / "capacity/source/catalog/models/meta-llama--Llama-3.1-8B-Instruct")
    assert loads.rounding_bytes == 0 and loads.exact  # every Llama-3.1-8B tensor is a multiple of 2 MiB


def _plan(folder: str, gpu: str, version: str):
    return plan_for(str(ROOT / folder), ServingArgs(max_model_len=2048), gpu, semantics=semantics_for(version))


@pytest.mark.parametrize(
    ("folder", "gpu", "version", "printed", "decimals"),
    [
        # calibration-half logs (bench/vllm_logs): "Model loading took" as printed
        ("bench/vllm_logs/configs/meta-llama--Llama-3.2-3B-Instruct", "T4", "0.8.2", 6.0160, 4),  # V0 'GB' = GiB
        ("bench/vllm_logs/configs/meta-llama--Llama-3.1-8B-Instruct", "A100-40GB", "0.15.1", 14.99, 2),
        ("bench/vllm_logs/configs/Qwen--Qwen3-8B", "A100-40GB", "0.19.1", 15.27, 2),
        ("bench/vllm_logs/configs/meta-llama--Llama-3.1-8B-Instruct", "RTX-3090", "0.6.0", 14.9888, 4),  # V0 worker
        # not here: Qwen2.5-0.5B (0.27.1) prints 0.93, capacity 0.9245: its 1-10 MiB tensors' packing into 20 MiB
        # segments is not modelled (capacity.memory.load_buffers)
    ],
)
def test_model_loading_matches_calibration_logs(folder: str, gpu: str, version: str, printed: float, decimals: int) -> None:
    plan = _plan(folder, gpu, version)
    loaded = (plan.memory["weights"].bytes + plan.memory["load_buffers"].bytes) / GiB
    assert abs(loaded - printed) <= 0.5 * 10**-decimals  # prints as the log's figure
    assert abs(plan.memory["weights"].bytes / GiB - printed) > 0.5 * 10**-decimals  # the parameters alone do not
