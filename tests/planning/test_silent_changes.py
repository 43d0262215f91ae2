"""Warnings for what vLLM 0.33 does without a word: an `auto` knob's value, a per-prompt item limit its budget lowers,
an item longer than a decoder prompt may be. Planned in-process (the planner without a profile: the formulas; none of
these depends on the estimate).

Qwen2.5-VL-7B's largest image: max_pixels 12,845,056 / (28 x 28) = 16,384 tokens (Qwen2VLProcessingInfo). At
--max-model-len 8192, vLLM's MultiModalBudget._get_max_items budgets max(1, min(2, 8192 // 16384 = 0)) = 1 image per
prompt, and its input processor refuses a prompt whose placeholders alone are 16,384 tokens.
"""

from __future__ import annotations

from capacity.planning.plan import INFO, WARNING


def hazards(plan):
    return {h.id: h for h in plan.hazards}


def test_a_per_prompt_limit_the_budget_lowers_and_an_item_longer_than_max_model_len_warn(make_plan):
    plan = make_plan("Qwen/Qwen2.5-VL-7B-Instruct", "RTX-4090", max_model_len=8192, limit_mm_per_prompt={"image": 2})
    found = hazards(plan)
    lowered = found["items_per_prompt_lowered"]
    assert lowered.severity == WARNING and "image=2, but vLLM budgets 1 image" in lowered.message
    assert "8,192 // 16,384 tokens per image = 0, at least 1" in lowered.message
    assert dict(lowered.knobs) == {"limit_mm_per_prompt": {"image": 1}}
    longer = found["item_longer_than_max_model_len"]
    assert longer.severity == WARNING and "image 16,384" in longer.message and "--max-model-len 16384" in longer.fix
    assert plan.suggestion.command is not None and "--limit-mm-per-prompt '{\"image\":1}'" in plan.suggestion.command  # 0.33 parses it as JSON
    assert any(w.startswith("item_longer_than_max_model_len") for w in plan.suggestion.warnings)


def test_a_limit_within_the_budget_and_the_default_limit_say_nothing(make_plan):
    for knobs in ({"limit_mm_per_prompt": {"image": 1}}, {}):
        assert "items_per_prompt_lowered" not in hazards(make_plan("Qwen/Qwen2.5-VL-7B-Instruct", "H200", max_model_len=32768, **knobs))


def test_an_encoder_decoders_audio_is_not_in_the_decoders_prompt(make_plan):
    """whisper-tiny: 1,500 encoder tokens per audio against max_model_len 448, but they are the encoder's, not the prompt's."""
    plan = make_plan("openai/whisper-tiny", "L4")
    assert plan.budget.max_tokens_per_item["audio"] == 1500 and plan.serving.max_model_len == 448
    assert "item_longer_than_max_model_len" not in hazards(plan)


def test_max_model_len_auto_says_what_it_became(make_plan):
    """Llama-3.1-8B's 131,072 tokens do not fit an RTX 4090: auto fits a shorter length (a warning, and the suggestion
    pins it); on an H200 they fit (an info)."""
    small = make_plan("meta-llama/Llama-3.1-8B-Instruct", "RTX-4090", max_model_len=-1)
    auto = hazards(small)["max_model_len_auto"]
    assert auto.severity == WARNING and small.serving.max_model_len < 131_072
    assert f"became {small.serving.max_model_len:,}" in auto.message and dict(auto.knobs) == {"max_model_len": small.serving.max_model_len}
    # the suggestion pins it, then the first start on a cold compile cache asks for less (its own warning's fix)
    assert small.suggestion.applied == ("max_model_len_auto", "cold_compile_cache")
    large = hazards(make_plan("meta-llama/Llama-3.1-8B-Instruct", "H200", max_model_len=-1))["max_model_len_auto"]
    assert large.severity == INFO and "became 131,072" in large.message


def test_memory_fixes_name_only_knobs_that_can_move(make_plan):
    """whisper-tiny with chunked prefill off: --max-num-batched-tokens cannot go below max_model_len 448 nor the
    1,500-token audio item; at 1500 (and --kv-cache-memory-bytes too small) the fix does not name it."""
    plan = make_plan("openai/whisper-tiny", "L4", max_num_batched_tokens=1500, max_num_seqs=16, kv_cache_memory_bytes=2**20)
    hazard = hazards(plan)["no_room_for_one_request"]
    assert "--max-num-batched-tokens" not in hazard.fix and "--gpu-memory-utilization" not in hazard.fix
