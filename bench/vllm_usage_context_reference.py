"""vLLM 0.33.0's own batch defaults for the usage contexts its get_batch_defaults tables do not list: an engine built
directly (UsageContext.ENGINE_CONTEXT: LLMEngine / AsyncLLMEngine.from_engine_args, as Ray Data and Triton's vLLM
backend build it), `vllm run-batch` (OPENAI_BATCH_RUNNER) and no context at all (create_engine_config's default).
EngineArgs.create_engine_config runs on vLLM's CPU platform from catalog config folders (no GPU, no weights, no
tokenizer); for these contexts the CPU platform's own tables do not apply, so the figures are the GPU's too.

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_usage_context_reference.py \\
        bench/results/vllm-usage-context-reference-2026-12-02/reference.json

tests/serving/test_usage_context_reference.py compares capacity's defaults with the committed file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "capacity" / "source" / "catalog" / "models"

CASES = [  # (catalog folder, --max-model-len or None for the config's)
    ("Qwen--Qwen3-8B", 8192),
    ("Qwen--Qwen3-8B", 40960),
    ("Qwen--Qwen2.5-VL-3B-Instruct", 8192),
    ("google--gemma-3-4b-it", 8192),
    ("openai--whisper-base", None),
]


def main() -> None:
    import vllm
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    cases = []
    for folder, max_model_len in CASES:
        for context in (UsageContext.ENGINE_CONTEXT, UsageContext.OPENAI_BATCH_RUNNER, None):
            args = EngineArgs(model=str(CATALOG / folder), max_model_len=max_model_len, skip_tokenizer_init=True)
            config = args.create_engine_config(context) if context is not None else args.create_engine_config()
            cases.append(
                {
                    "model": folder.replace("--", "/", 1),
                    "max_model_len_given": max_model_len,
                    "usage_context": context.value if context is not None else None,
                    "max_model_len": config.model_config.max_model_len,
                    "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
                    "max_num_seqs": config.scheduler_config.max_num_seqs,
                }
            )
            print(cases[-1], flush=True)
    Path(sys.argv[1]).parent.mkdir(parents=True, exist_ok=True)
    Path(sys.argv[1]).write_text(json.dumps({"vllm": vllm.__version__, "platform": "cpu (VLLM_TARGET_DEVICE=cpu)", "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
