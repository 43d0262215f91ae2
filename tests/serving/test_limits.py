"""--limit-mm-per-prompt for a modality the model does not take: vLLM reads only the model's own modalities
(0.33's BaseProcessingInfo.allowed_mm_limits iterates supported_mm_limits), so another name changes nothing."""

from __future__ import annotations

import pytest

from capacity.errors import BadInput
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs

pytestmark = pytest.mark.formula("the refusal and the budget's items, which no estimate changes")


def test_a_zero_limit_for_a_modality_the_model_lacks_is_accepted_and_changes_nothing() -> None:
    # gemma-4-26B-A4B takes images and video, no audio (its config has no audio tower): a public vLLM 0.26.0 start of
    # gemma-4-31B-it passed --limit-mm-per-prompt '{"image":0,"audio":0}' (bench/vllm_logs/gemma-4-31b-b300-*)
    with_audio = plan_for("google/gemma-4-26B-A4B", ServingArgs(limit_mm_per_prompt={"image": 0, "audio": 0}, max_model_len=16384), "H200")
    without = plan_for("google/gemma-4-26B-A4B", ServingArgs(limit_mm_per_prompt={"image": 0}, max_model_len=16384), "H200")
    assert with_audio.budget == without.budget
    assert with_audio.kv.num_blocks == without.kv.num_blocks


def test_a_count_for_a_modality_the_model_lacks_is_refused_as_a_likely_misspelling() -> None:
    with pytest.raises(BadInput) as info:
        plan_for("google/gemma-4-26B-A4B", ServingArgs(limit_mm_per_prompt={"images": 2}), "H200")
    message = str(info.value)
    assert "names 'images', which google/gemma-4-26B-A4B does not take; its modalities: image, video" in message
    assert "give it 0" in message
