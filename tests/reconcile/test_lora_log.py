"""A LoRA start's log: its LoRA knobs are read, and a bare reconcile plans the buffers it loaded."""

from __future__ import annotations

import json
import subprocess
import sys

from capacity.vllm.log_startups import parse_vllm_log
from tests.support.paths import REPO_ROOT


def test_lora_knobs_from_an_args_namespace_and_a_bare_reconcile_of_the_public_lora_start() -> None:
    """0.8's Namespace holds the LoRA arguments with their defaults (max_loras 1, rank 16, 256 extra vocabulary rows):
    the ones that differ are knobs, so a bare reconcile plans the LoRA buffers the start loaded."""
    text = (
        "INFO 04-05 05:51:44 [api_server.py:982] args: Namespace(model_tag='m', model='meta-llama/Llama-3.1-8B-Instruct', "
        "enable_lora=True, enable_lora_bias=False, max_loras=2, max_lora_rank=16, lora_extra_vocab_size=256, lora_dtype='auto', "
        "long_lora_scaling_factors=None, max_cpu_loras=12, fully_sharded_loras=False, max_num_seqs=None)\n"
        "INFO 04-05 05:52:54 [gpu_model_runner.py:1186] Model loading took 15.1749 GB and 59.268527 seconds\n"
    )
    assert parse_vllm_log(text).log_knobs == {"enable_lora": True, "max_loras": 2, "max_cpu_loras": 12}
    log = REPO_ROOT / "bench" / "vllm_logs" / "llama-3.1-8b-a100-40gb-lora-k8s-v0.8.2.log"
    result = subprocess.run([sys.executable, "-m", "capacity.cli", "reconcile", str(log), "--estimate", "formula", "--json"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    loading = next(row for row in json.loads(result.stdout)["rows"] if row["key"] == "model_loading")
    # 'Model loading took 15.1749 GB' (GiB): weights, rotary caches, LoRA buffers and the extra vocabulary's rows
    assert abs(loading["capacity_value"] - 15.1749) < 0.001, loading
    assert "LoRA buffers" in loading["explanation"] and "LoRA extra vocabulary rows" in loading["explanation"]
