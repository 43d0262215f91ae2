"""Which `vllm serve` flags a release takes (capacity/vllm/serve_flags.py), as read from the wheels: 0.10.0 and
0.10.1's arg_utils.py have no --kv-cache-memory-bytes nor --decode-context-parallel-size, 0.10.2's has both; 0.6.0's
--enable-prefix-caching is store_true (no --no- form); 0.8.0 parses --limit-mm-per-prompt with nullable_kvs
(`image=1,video=0`), 0.10.0+ with json.loads; 0.6.0's --block-size choices are [8, 16, 32]."""

from __future__ import annotations

import pytest

from capacity.errors import BadInput
from capacity.serving.config import ServingArgs
from capacity.vllm.serve_flags import ABSENT, PRESENT, UNDATED, block_size_choices, flag_status, limit_mm_value, release_of, require_flags
from capacity.vllm.versions import LATEST, V0, planned_semantics, release_tuple


@pytest.mark.parametrize(
    ("flag", "release", "status"),
    [
        ("--kv-cache-memory-bytes", "0.10.1", ABSENT),
        ("--kv-cache-memory-bytes", "0.10.1.1", UNDATED),  # a hotfix release that was not read
        ("--kv-cache-memory-bytes", "0.10.2", PRESENT),
        ("--decode-context-parallel-size", "0.9.2", ABSENT),
        ("--enable-expert-parallel", "0.7.3", UNDATED),
        ("--enable-expert-parallel", "0.7.0", ABSENT),
        ("--enable-expert-parallel", "0.8.0", PRESENT),
        ("--no-enable-prefix-caching", "0.6.0", ABSENT),
        ("--language-model-only", "0.17.0", UNDATED),  # absent in 0.16.0, present in 0.18.0: 0.17 not read
        ("--language-model-only", "0.16.0", ABSENT),
        ("--language-model-only", "0.33.0", PRESENT),
        ("--speculative-config", "0.33.0", UNDATED),  # a flag the table does not hold is never assumed
        ("--hf-overrides", "0.6.0", ABSENT),
        ("--hf-overrides", "0.10.0", PRESENT),
    ],
)
def test_flag_status_follows_the_releases_read(flag: str, release: str, status: str) -> None:
    numbers = release_tuple(release)
    assert numbers is not None and flag_status(flag, numbers) == status


def test_limit_mm_per_prompt_is_written_in_the_form_the_release_parses() -> None:
    limits = {"image": 2, "video": 0}
    assert limit_mm_value(limits, (0, 8, 0)) == "image=2,video=0"
    assert limit_mm_value(limits, (0, 10, 2)) == '{"image":2,"video":0}'
    assert limit_mm_value(limits, release_of(LATEST)) == '{"image":2,"video":0}'


def test_block_size_choices_by_release() -> None:
    assert block_size_choices((0, 6, 0)) == (True, (8, 16, 32))
    assert block_size_choices((0, 10, 2)) == (True, (1, 8, 16, 32, 64, 128))
    assert block_size_choices((0, 12, 0)) == (True, (1, 8, 16, 32, 64, 128, 256))
    assert block_size_choices((0, 17, 1)) == (False, None)  # not read
    assert block_size_choices((0, 33, 0)) == (True, None)  # any positive int; the backends decide (hazards.block_size)


def test_a_knob_the_release_has_no_flag_for_is_refused_in_one_line() -> None:
    with pytest.raises(BadInput) as refused:
        require_flags(ServingArgs(decode_context_parallel_size=2), (0, 10, 1), "0.10.1")
    assert str(refused.value).count("\n") == 0 and "--decode-context-parallel-size" in str(refused.value) and "0.10.2" in str(refused.value)
    require_flags(ServingArgs(decode_context_parallel_size=1), (0, 10, 1), "0.10.1")  # the default needs no flag


def test_release_of_a_logs_range_is_its_first_release() -> None:
    assert release_of(V0) == (0, 6, 0)
    assert release_of(planned_semantics("0.9.0.1")) == (0, 9, 0, 1)
