"""V0-engine startups (vLLM 0.6.x): which rank's profile the engine used at TP > 1, a start dated from its own lines
when it prints no version, and an encoder-decoder's blocks counted as V0 counts them.

The two logs are CONSTRUCTED (tests/fixtures/vllm_logs/CONSTRUCTED-*.log, see its README): no public log with these
lines was found (bench/vllm_logs/SEARCH-2026-12-01-v0-logs.md). Each line is vLLM 0.6.x's own format string; the
figures are chosen and worked by hand from vLLM 0.6.3's code:
- distributed_gpu_executor.determine_num_available_blocks: num_gpu_blocks = min over the workers;
- CacheEngine.get_cache_block_size: block_size x KV heads x head_size x 2 x dtype bytes x num_hidden_layers;
- initialize_cache: 'Maximum concurrency' = num_gpu_blocks x block_size / max_model_len.
"""

from __future__ import annotations

import json

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_FITS
from capacity.vllm.log_startups import load_vllm_log
from capacity.vllm.version_evidence import format_evidence
from capacity.vllm.versions import log_semantics
from tests.support.paths import REPO_ROOT

LOGS = REPO_ROOT / "tests" / "fixtures" / "vllm_logs"
TP2 = LOGS / "CONSTRUCTED-llama-3.1-8b-v0-tp2-driver-worker.log"
MLLAMA = LOGS / "CONSTRUCTED-llama-3.2-11b-vision-v0-engine-oct2024.log"


def test_v0_tp2_takes_the_rank_with_the_least_kv_memory_not_the_first_line() -> None:
    f = load_vllm_log(TP2)
    # line 4: the worker (31.68 GiB), line 5: the driver (30.55 GiB); the engine takes min over the workers
    assert f.available_kv_cache_gib == 30.55 and f.profiled_non_torch_gib == 1.43
    assert f.lines["Memory profiling results"] == 5
    # the engine's '# GPU blocks' agrees with the smaller rank: Llama-3.1-8B at TP 2, a block = 16 x 4 KV heads x 128
    # x 2 x 2 B x 32 layers = 1,048,576 B, and 30.55 GiB (+-0.005) holds 31,278-31,288 such blocks; 31.68 GiB would be 32,434-32,445
    assert f.num_gpu_blocks == 31283 and int(30.545 * 1024) <= 31283 <= int(30.555 * 1024)
    assert round(31283 * 16 / 8192, 2) == f.max_concurrency == 61.10
    assert any("the rank with the least KV memory" in n for n in f.notes)


def test_v0_start_without_a_version_is_dated_v0_from_its_own_lines_not_0_11() -> None:
    f = load_vllm_log(MLLAMA)
    assert (f.engine, f.version_guess) == ("V0", "V0 engine")
    assert "'Loading model weights took X GB'" in f.version_basis and "'# GPU blocks: N, # CPU blocks: M'" in f.version_basis
    # V0's '# GPU blocks: N, # CPU blocks: M' is not 0.9-0.11's 'num_gpu_blocks is: N'
    assert not any(e.first == (0, 9) for e in format_evidence(f))
    assert log_semantics(f).engine == "V0"


@pytest.mark.parametrize("cut", ["INFO 10-15 09:13:10 gpu_executor.py:122] # GPU blocks: 18017\n"])
def test_a_blocks_line_without_cpu_blocks_is_not_v0_evidence(cut: str) -> None:
    from capacity.vllm.log_startups import parse_vllm_log

    f = parse_vllm_log(cut)
    assert f.engine is None and f.num_gpu_blocks == 18017


def test_v0_mllama_blocks_and_concurrency_are_counted_over_one_pool_of_all_layers(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["reconcile", str(MLLAMA), "--model", "meta-llama/Llama-3.2-11B-Vision-Instruct", "--gpu", "A100-80GB", "--json"])
    out, err = capsys.readouterr()
    assert code == EXIT_FITS, err
    doc = json.loads(out)
    rows = {r["key"]: r for r in doc["rows"]}
    # V0 prints neither a token count nor a per-request block count: capacity's V1 per-group rows are not shown
    assert "blocks_per_request" not in rows and "kv_cache_tokens" not in rows
    # a V0 block of Llama-3.2-11B-Vision: 16 tokens x 8 KV heads x 128 x 2 (K, V) x 2 B x 40 layers (32 self + 8 cross)
    bpb = 16 * 8 * 128 * 2 * 2 * 40
    assert bpb == 2_621_440 and f"{bpb:,} B" in rows["num_blocks"]["explanation"]
    assert rows["num_blocks"]["vllm_value"] == 18017
    n = rows["num_blocks"]["capacity_value"]
    assert isinstance(n, int) and f"{n:,} x 16 / 4,096" in rows["max_concurrency"]["explanation"]
    # the log's own figure under V0's formula: 18,017 x 16 / 4,096 = 70.38x (no cross-attention term)
    assert rows["max_concurrency"]["vllm_value"] == round(18017 * 16 / 4096, 2) == 70.38
    assert rows["max_concurrency"]["capacity_value"] == round(n * 16 / 4096, 2)
    assert doc["vllm_version"] == "V0 engine"
