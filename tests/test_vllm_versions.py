"""V0's default max_num_batched_tokens, from vLLM's own code (0.6.6.post1 SchedulerConfig.__post_init__, index id
59727640247; EngineArgs' long-context rule, index id 356895891): a whole prompt of max(max_model_len, 2048) tokens
without chunked prefill; above 32,768 tokens V0 turns chunked prefill on by itself (no sliding window, no prefix
caching) and batches 2048 tokens; multimodal models get at least 5120."""

from __future__ import annotations

import pytest

from capacity.vllm_versions import V0, semantics_for


@pytest.mark.parametrize(
    ("max_model_len", "multimodal", "sliding_window", "prefix_caching", "tokens"),
    [
        (20_000, False, False, False, 20_000),  # the RTX 3090 log's 20k start: a whole prompt
        (32_768, False, False, False, 32_768),  # 32K itself is not 'long context' (> 32K)
        (131_072, False, False, False, 2048),  # Llama-3.1-8B's default length: chunked, 2048
        (131_072, False, False, True, 131_072),  # --enable-prefix-caching keeps chunked prefill off in V0
        (131_072, False, True, False, 131_072),  # a sliding-window model too
        (1024, False, False, False, 2048),  # a short context still batches 2048
        (131_072, True, False, False, 5120),  # multimodal floor
    ],
)
def test_v0_batched_tokens(max_model_len: int, multimodal: bool, sliding_window: bool, prefix_caching: bool, tokens: int) -> None:
    got = V0.v0_batched_tokens(max_model_len, multimodal=multimodal, sliding_window=sliding_window, prefix_caching=prefix_caching)
    assert got == tokens


def test_v1_ranges_have_no_v0_long_context_rule() -> None:
    assert semantics_for("0.15.1").long_context_chunking is None
