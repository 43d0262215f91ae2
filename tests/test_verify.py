"""`capacity verify` on the CPU probe: the pool the plan promises, its requests, the encoder and decode steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from capacity.cli import main
from tests.test_profiler import TINY_WHISPER


def test_verify_allocates_the_planned_pool_and_runs_the_requests(tmp_path: Path, capsys):
    folder = tmp_path / "tiny-whisper"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_WHISPER))
    argv = ["verify", "--model", str(folder), "--cpu-probe", "--gpu", "L4", "--max-num-batched-tokens", "2048", "--max-num-seqs", "16"]
    code = main([*argv, "--kv-cache-memory-bytes", "4M", "--dtype", "float32", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(out.out)["verify"]
    # page 2 x 16 x 4 heads x 16 x 4 B = 8,192 per layer, 2 layer slots: 16,384 B per block; 4 MiB -> 256 blocks
    assert result["kv_pool_bytes"] == 256 * 16_384 == 4 * 2**20
    # real blocks per request: cdiv(448, 16) = 28 self + cdiv(1500, 16) = 94 cross; (256 - 1) // 122 = 2 requests
    assert (result["requests"], result["context_len"], result["encoder_len"]) == (2, 448, 1500)
    assert [p["name"] for p in result["phases"]] == ["weights", "kv_pool", "encoder", "decode_0", "decode_1", "decode_2"]
    assert result["peak_allocated_bytes"] >= result["kv_pool_bytes"]
    assert result["passed"] and result["oom"] is None
    assert result["reproducer"].startswith("capacity verify --model ")


def test_verify_refuses_models_it_cannot_run(capsys):
    code = main(["verify", "--model", "google/gemma-3-4b-it", "--cpu-probe", "--gpu", "H200"])
    err = capsys.readouterr().err
    assert code == 2 and "verify runs encoder-decoder models" in err and err.count("\n") == 1


def test_verify_needs_a_gpu_or_the_cpu_probe(capsys):
    code = main(["verify", "--model", "openai/whisper-tiny"])
    err = capsys.readouterr().err
    assert code == 2 and "no usable NVIDIA GPU" in err
