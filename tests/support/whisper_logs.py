"""The whisper-large-v3 H200 logs of tests/fixtures/vllm_logs/ (derivations in its README.md) and the hand arithmetic
tests/reconcile's tests check them with: page per layer 2 x 16 x 20 KV heads x 64 x 2 B = 81,920 B; 32 layers per
group -> bytes_per_block 2,621,440 B (2.5 MiB, so 1 GiB = 409.6 blocks); H200 total 150,109,880,320 B, free at
startup 149,356,150,784 B."""

from __future__ import annotations

from tests.support.paths import REPO_ROOT

GiB = 2**30
MiB = 2**20
ROOT = REPO_ROOT
LOGS = ROOT / "tests" / "fixtures" / "vllm_logs"
V033 = LOGS / "whisper-large-v3-h200-v0.33.0.log"
V033_KV = LOGS / "whisper-large-v3-h200-v0.33.0-kv-cache-memory-bytes.log"
V020 = LOGS / "whisper-large-v3-h200-v0.20.0.log"
V015 = LOGS / "whisper-large-v3-h200-v0.15.0.log"
V011 = LOGS / "whisper-large-v3-h200-v0.11.0.log"
WHISPER = "openai/whisper-large-v3"
BPB = 2 * 16 * 20 * 64 * 2 * 32  # 2,621,440 B per block
TOTAL = 150_109_880_320
FREE = TOTAL - 753_729_536  # 149,356,150,784
REQUESTED_092 = 138_101_089_895  # ceil(150,109,880,320 x 0.92) = ceil(138,101,089,894.4)
REQUESTED_090 = 135_098_892_288  # 150,109,880,320 x 9 / 10, a whole number
