"""The remote-code families (InternVL, Ultravox, MiniCPM-V 2.5) against vLLM 0.33.0's own code.

bench/vllm_remote_code_reference.py (run with the vLLM venv; see its docstring) built vLLM's InternVLChatModel,
UltravoxModel and MiniCPMV2_5 on the meta device at TP 1 and 2 (rank 0) and ran vLLM's token methods; its output
is committed under bench/results/vllm-remote-code-reference-2026-11-30/. vLLM is not a test dependency: this reads
the committed numbers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from capacity.gpu.catalog import gpu_by_name
from capacity.memory.weights import weights_term
from capacity.model.families.ultravox import audio_tokens
from capacity.model.registry import model_spec
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.serving.encoder_budget import build_budget
from capacity.source.resolve import resolve_model
from tests.support.paths import REPO_ROOT

REFERENCE = json.loads(
    (REPO_ROOT / "bench" / "results" / "vllm-remote-code-reference-2026-11-30" / "reference.json").read_text()
)


def planned(name: str, **knobs: Any) -> tuple[Any, Any, Any]:
    source = resolve_model(name)
    spec = model_spec(source)
    return source, spec, resolve_serving(ServingArgs(dtype="bfloat16", **knobs), spec, gpu_by_name("H200"))


@pytest.mark.parametrize("case", REFERENCE["weights"], ids=lambda c: f"{c['model']}-tp{c['tp']}")
def test_weights_per_rank_equal_vllms_model_class(case):
    assert "error" not in case, case
    source, spec, serving = planned(case["model"], tensor_parallel_size=case["tp"])
    term, _, _ = weights_term(spec, source, serving)
    assert term.bytes == case["rank0_parameter_bytes"]
    assert term.kind == "exact"


def test_internvl_tokens_equal_vllms_methods():
    ref = next(t for t in REFERENCE["tokens"] if t["model"] == "OpenGVLab/InternVL3-8B")
    for seq_len, frames in ref["frames_with_most_features"].items():
        _, spec, serving = planned("OpenGVLab/InternVL3-8B", max_model_len=int(seq_len))
        budget = build_budget(spec, serving)
        assert budget.max_tokens_per_item["image"] == ref["max_image_tokens"]
        assert budget.max_tokens_per_item["video"] == frames["image_and_video"] * ref["image_seq_length"]
        assert budget.profile_tokens_per_item == frames["video_alone"] * ref["image_seq_length"]


def test_ultravox_tokens_equal_vllms_dummy_and_chunks():
    ref = next(t for t in REFERENCE["tokens"] if t["model"] == "fixie-ai/ultravox-v0_6-llama-3_1-8b")
    chunks, per_chunk, tokens = audio_tokens(resolve_model("fixie-ai/ultravox-v0_6-llama-3_1-8b").config)
    assert per_chunk == ref["max_tokens_per_chunk"]
    assert chunks == ref["mel_frames"] // 3000 == ref["max_encoder_batch_size"]  # full 3000-frame chunks of the dummy audio
    assert tokens == chunks * ref["max_tokens_per_chunk"]
