"""The ladder of changes `capacity fit` may make to meet its target, cheapest first (capacity/planning/fit.py walks
it): each rung adds one change to the rung before, and a knob the user gave is never on it.

    gpu_memory_utilization up to the user's ceiling; max_num_seqs down to the target; max_num_batched_tokens halved
    (down to 2,048); every modality to at most 1 item per prompt; an fp8 KV cache; smaller items through the
    --mm-processor-kwargs size keys the family models (Family.item_size_kwargs: items of at most max_model_len, then
    4,096, then 1,280 tokens); each modality dropped, the one with the largest items first
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from capacity.planning.plan import Plan
from capacity.serving.config import ServingArgs

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.planning.fit import FitTarget

# Tokens per item the ladder's smaller items hold, besides max_model_len (an item no longer than a prompt may be): the
# family turns each into its size keys (Family.item_size_kwargs; for Qwen-VL max_pixels = tokens x 28 x 28, 1,280 being
# the example of Qwen2.5-VL's model card); each is a rung only where it shrinks an item
SMALLER_ITEM_TOKENS = (4096, 1280)
BATCHED_TOKENS_FLOOR = 2048  # the ladder halves max_num_batched_tokens no lower (vLLM's API default on smaller GPUs)


@dataclass(frozen=True)
class Step:
    what: str
    knobs: tuple[tuple[str, Any], ...]


def ladder(base: Plan, held: frozenset[str], target: FitTarget, smaller_items: Sequence[Step] = ()) -> list[Step]:
    """The changes the search may make, cheapest first (module docstring), given the base plan's knobs;
    `smaller_items`: the --mm-processor-kwargs sizes the family models (Search.smaller_items)."""
    s, steps = base.serving, []
    ceiling = target.utilization_ceiling
    if "gpu_memory_utilization" not in held and s.kv_cache_memory_bytes is None and ceiling is not None and ceiling > s.gpu_memory_utilization:
        steps.append(Step(f"gpu_memory_utilization {ceiling}", (("gpu_memory_utilization", ceiling),)))
    if "max_num_seqs" not in held and s.max_num_seqs > target.min_concurrency:
        steps.append(Step(f"max_num_seqs {target.min_concurrency}", (("max_num_seqs", target.min_concurrency),)))
    if "max_num_batched_tokens" not in held:
        tokens = s.max_num_batched_tokens
        while tokens // 2 >= BATCHED_TOKENS_FLOOR:
            tokens //= 2
            steps.append(Step(f"max_num_batched_tokens {tokens}", (("max_num_batched_tokens", tokens),)))
    limits = dict(s.limit_mm_per_prompt)
    if "limit_mm_per_prompt" not in held and not s.language_model_only and limits and any(n > 1 for n in limits.values()):
        limits = {m: min(n, 1) for m, n in limits.items()}
        steps.append(Step("1 item per prompt per modality", (("limit_mm_per_prompt", dict(limits)),)))
    if "kv_cache_dtype" not in held and s.kv_cache_dtype == "auto" and s.kv_cache_dtype_bytes > 1:
        steps.append(Step("fp8 KV cache", (("kv_cache_dtype", "fp8"),)))
    steps += smaller_items
    if "limit_mm_per_prompt" not in held and not s.language_model_only and limits:
        sizes = base.budget.max_tokens_per_item
        for modality in sorted((m for m, n in limits.items() if n > 0), key=lambda m: -sizes.get(m, 0)):
            limits = {**limits, modality: 0}
            steps.append(Step(f"no {modality}", (("limit_mm_per_prompt", dict(limits)),)))
    return steps


def with_steps(args: ServingArgs, steps: Iterable[Step]) -> ServingArgs:
    knobs: dict[str, Any] = {}
    for step in steps:
        knobs.update(step.knobs)
    return replace(args, **knobs)
