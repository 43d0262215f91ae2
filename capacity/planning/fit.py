"""`capacity fit`: the configurations of what vLLM lets a user change that serve a target, fewest GPUs first.

The target: at least `min_concurrency` requests run at once (`Plan.max_concurrent_requests`, min(requests at
max_model_len the KV cache holds, max_num_seqs)) at a `max_model_len` the user names, or at the longest one that
does (`max_model_len=None`, "max"). The search plans on the formula path (no profile: the config alone), one
candidate at a time: a GPU type and a layout of TP x PP x DP over a GPU count (capacity/planning/fit_layouts.py;
layouts vLLM refuses, e.g. heads not divisible, are skipped with the planner's reason; DP engines each meet
ceil(target / DP), their total the target). Per candidate it walks a ladder of changes, cheapest
first, each rung adding one change to the rung before (`ladder`):

    gpu_memory_utilization up to the user's ceiling; max_num_seqs down to the target; max_num_batched_tokens halved
    (down to 2,048); every modality to at most 1 item per prompt; an fp8 KV cache; smaller items through the
    --mm-processor-kwargs size keys the family models (Family.item_size_kwargs: items of at most max_model_len, then
    4,096, then 1,280 tokens); each modality dropped, the one with the largest items first

Knobs the user gave are held (never changed); error hazards whose fix names knobs are applied as the suggestion
applies them, unless the fix changes a held knob. A configuration meets the target only when its plan also carries
no warning a rung could clear (`clearable`: a warning whose fix is a knob on the candidate's ladder, or a
max_model_len the "max" search may pick; capacity/planning/suggest.py: a suggestion, planned again, raises no error
or warning hazard a knob fixes): an item longer than max_model_len climbs to smaller items or to dropping the
modality; with "max" the search starts no shorter than the largest item. A warning no rung clears stays on the
configuration (`FitConfig.warnings`), printed with it. The first rung that meets the target is pruned of the
earlier changes it does not need. With "max" the longest context is found by bisection (requests at once do not grow with
max_model_len: more KV per request, and a larger encoder budget); a context shorter than MIN_CONTEXT_TOKENS is not
offered. Every configuration is then `build_plan` on the knobs of its `vllm serve` line: an ordinary plan.

Margins (both printed): requests at once above the target, and the spare KV memory: the KV cache's usable blocks
(the null block excluded) minus the target's, in bytes; how far the non-KV estimate may be low before the target
is missed.

The formula is not the default estimate: `capacity plan` traces the model on fake tensors, and the two differ
(Qwen2.5-VL-7B on an RTX 4090 at max_model_len 8192: 9 requests by formula, 8 traced). `verify` (given by the
CLI: the default estimate) re-plans the first configurations; one that misses the target there is searched again
with a reserve of KV memory the size of the difference (the traced plan's available KV below the formula's), and
checked again, up to MAX_VERIFY_ROUNDS times.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from capacity.errors import BadInput
from capacity.gpu.catalog import Gpu
from capacity.model.registry import model_spec, with_mm_processor_kwargs
from capacity.model.spec import ModelSpec
from capacity.planning.fit_commands import ESTIMATE_FORMULA, pinned_args, plan_command
from capacity.planning.fit_ladder import SMALLER_ITEM_TOKENS, Step, ladder, with_steps
from capacity.planning.fit_layouts import Layout, by_count, layouts
from capacity.planning.fit_result import DEFAULT_MAX_GPUS, FitConfig, FitResult, FitTarget, KnobChange, Refusal
from capacity.planning.plan import ERROR, WARNING, Hazard, Plan
from capacity.planning.planner import build_plan, plan_without_suggestion, serving_under
from capacity.planning.suggest import command_for
from capacity.serving.config import DEFAULT_LIMIT_PER_PROMPT, ServingArgs, ServingConfig
from capacity.source.resolve import ModelSource
from capacity.vllm.versions import LATEST, VllmSemantics

MIN_CONTEXT_TOKENS = 2048  # "max": a shorter context is not offered (give --max-model-len N for one)
MAX_FIX_ROUNDS = 8  # as the suggestion: fixes that chain settle in a few rounds
MAX_VERIFY_ROUNDS = 3  # searches again with a larger reserve before a configuration is dropped
ESTIMATE_DEFAULT = "trace"

PlanAt = Callable[[Gpu, ServingArgs], Plan]  # a plan of these knobs on this GPU (the search's, or the default estimate's)


def requests_at_once(plan: Plan, reserve_bytes: int = 0) -> int:
    """min(requests at max_model_len the KV cache holds, max_num_seqs), `reserve_bytes` of the KV cache kept back:
    (num_blocks - 1 null block - ceil(reserve / bytes per block)) // blocks per request."""
    reserved_blocks = math.ceil(reserve_bytes / plan.kv.bytes_per_block)
    usable = max(plan.kv.num_blocks - 1 - reserved_blocks, 0)
    return min(usable // plan.kv.blocks_per_request_actual, plan.serving.max_num_seqs)


def meets(plan: Plan, target: FitTarget, reserve_bytes: int = 0) -> bool:
    return plan.fits and requests_at_once(plan, reserve_bytes) >= target.min_concurrency


# Warnings whose fix is a change the ladder or the "max" search makes although the hazard names no knob (it offers a
# choice): the knobs that clear them. A hazard's own knobs (Hazard.knobs) clear it too.
CLEARED_BY: dict[str, tuple[str, ...]] = {
    "item_longer_than_max_model_len": ("mm_processor_kwargs", "limit_mm_per_prompt", "max_model_len"),
    "items_per_prompt_lowered": ("mm_processor_kwargs",),  # smaller items: max_model_len // tokens per item reaches the limit
}


def clearable(plan: Plan, searched: frozenset[str]) -> list[Hazard]:
    """The plan's warnings a change the search makes would clear (`searched`: the knobs on the candidate's ladder,
    max_model_len too with "max"): the plan is not yet a configuration."""
    return [h for h in plan.hazards if h.severity == WARNING and ({k for k, _ in h.knobs} | set(CLEARED_BY.get(h.id, ()))) & searched]


def warnings_of(plan: Plan) -> tuple[str, ...]:
    return tuple(f"{h.id}: {h.message} (fix: {h.fix})" for h in plan.hazards if h.severity == WARNING)


def spare_kv_bytes(plan: Plan, target: FitTarget) -> int:
    """The KV memory the target does not use: (usable blocks - target x blocks per request) x bytes per block (one
    engine's, `target` being one engine's)."""
    usable = max(plan.kv.num_blocks - 1, 0)
    return (usable - target.min_concurrency * plan.kv.blocks_per_request_actual) * plan.kv.bytes_per_block


# --- the search --------------------------------------------------------------------------------------------


@dataclass
class Search:
    """One model's search: plans knobs on a GPU (`plan_at`, the formula path), counting them."""

    source: ModelSource
    spec: ModelSpec
    target: FitTarget
    held: frozenset[str]
    plan_at: PlanAt
    planned: int = 0
    semantics: VllmSemantics = LATEST  # the vLLM release's rules every plan of the search is made with (--vllm-version)

    def settle(self, gpu: Gpu, args: ServingArgs) -> Plan | None:
        """The plan of `args` with the error hazards' knob fixes applied (none that changes a held knob or the target's
        max_model_len); None when vLLM refuses the knobs outright (BadInput: e.g. a TP the weights cannot split)."""
        try:
            plan = self._plan(gpu, args)
            for _ in range(MAX_FIX_ROUNDS):
                fixable = [h for h in plan.hazards if h.severity == ERROR and h.knobs and not (self.held | {"max_model_len"}) & {k for k, _ in h.knobs}]
                if not fixable or any(h.severity == ERROR and not h.knobs for h in plan.hazards):
                    return plan
                fixed = self._plan(gpu, replace(pinned_args(plan), **dict(fixable[0].knobs)))
                if fixed.serving == plan.serving:
                    return plan
                plan = fixed
            return plan
        except BadInput:
            return None

    def smaller_items(self, gpu: Gpu, first: Plan, longest: int | None) -> list[Step]:
        """Smaller items through the --mm-processor-kwargs size keys the family models (Family.item_size_kwargs), each a
        rung: items of at most max_model_len (the target's, else `longest`: the length an item must not exceed), then
        max_model_len // n for each limit of n items per prompt the user holds (n items then fit one prompt), then
        SMALLER_ITEM_TOKENS tokens; a size is a rung only where it shrinks an item and grows none."""
        s = first.serving
        if "mm_processor_kwargs" in self.held or s.mm_processor_kwargs or s.language_model_only or not first.budget.max_tokens_per_item:
            return []
        uncapped = replace(pinned_args(first), max_model_len=None, max_num_batched_tokens=None)  # items not cut to a short context
        try:
            sizes = self._plan(gpu, uncapped).budget.max_tokens_per_item
        except BadInput:
            return []
        steps = []
        length = self.target.max_model_len or longest
        held_limits = [n for n in s.limit_mm_per_prompt.values() if 1 < n < DEFAULT_LIMIT_PER_PROMPT] if "limit_mm_per_prompt" in self.held and length else []
        for tokens in sorted({t for t in (length, *(length // n for n in held_limits), *SMALLER_ITEM_TOKENS) if t}, reverse=True):
            try:
                kwargs = self.spec.family.item_size_kwargs(self.source.config, tokens)
                if kwargs is None:
                    continue
                smaller = self._plan(gpu, replace(uncapped, mm_processor_kwargs=kwargs)).budget.max_tokens_per_item
            except BadInput:  # a size the processor refuses (e.g. max_pixels below min_pixels)
                continue
            if all(smaller.get(m, 0) <= n for m, n in sizes.items()) and any(smaller.get(m, 0) < n for m, n in sizes.items()):
                steps.append(Step(f"items of at most {tokens:,} tokens", (("mm_processor_kwargs", kwargs),)))
                sizes = smaller
        return steps

    def _plan(self, gpu: Gpu, args: ServingArgs) -> Plan:
        self.planned += 1
        return self.plan_at(gpu, args)

    def at_length(self, gpu: Gpu, args: ServingArgs, length: int, reserve: int, searched: frozenset[str]) -> Plan | None:
        plan = self.settle(gpu, replace(args, max_model_len=length))
        return plan if plan is not None and meets(plan, self.target, reserve) and not clearable(plan, searched) else None

    def best(self, gpu: Gpu, args: ServingArgs, reserve: int, longest: int, searched: frozenset[str]) -> Plan | None:
        """The plan that meets the target: at the target's max_model_len, or at the longest one up to `longest`
        (bisection: requests at once never grow with max_model_len), no shorter than the largest item."""
        if self.target.max_model_len is not None:
            return self.at_length(gpu, args, self.target.max_model_len, reserve, searched)
        lo = min(MIN_CONTEXT_TOKENS, longest)
        shortest = self.settle(gpu, replace(args, max_model_len=lo))
        if shortest is not None and any(h.id == "item_longer_than_max_model_len" for h in shortest.hazards):
            lo = max(shortest.budget.max_tokens_per_item.values())  # a prompt holds the largest item from this length on
            if lo > longest:
                return None
        good = self.at_length(gpu, args, lo, reserve, searched)
        if good is None:
            return None
        top = self.at_length(gpu, args, longest, reserve, searched)
        if top is not None:
            return top
        good_len, bad_len = lo, longest
        while bad_len - good_len > 1:
            mid = (good_len + bad_len) // 2
            found = self.at_length(gpu, args, mid, reserve, searched)
            if found is None:
                bad_len = mid
            else:
                good, good_len = found, mid
        return good

    def candidate(
        self, gpu: Gpu, base: ServingArgs, layout: Layout, reserve: int = 0, longest: int | None = None, top_rung: int | None = None
    ) -> tuple[Plan | None, int, str]:
        """(the plan that meets the target on `layout`, its rung, "") or (None, -1, why not), walking the ladder (no
        higher than `top_rung`); with DP engines each must meet its share of the target (FitTarget.per_engine)."""
        if layout.data_parallel_size == 1:
            return self._candidate(gpu, layout.applied(base), reserve, longest, top_rung)
        engine = replace(self, target=self.target.per_engine(layout.data_parallel_size))
        try:
            return engine._candidate(gpu, layout.applied(base), reserve, longest, top_rung)
        finally:
            self.planned = engine.planned

    def _candidate(self, gpu: Gpu, args: ServingArgs, reserve: int, longest: int | None, top_rung: int | None) -> tuple[Plan | None, int, str]:
        first = self.settle(gpu, replace(args, max_model_len=self.target.max_model_len or MIN_CONTEXT_TOKENS))
        if first is None:
            return None, -1, f"vLLM refuses {Layout(args.tensor_parallel_size, args.pipeline_parallel_size, args.data_parallel_size).describe()} on {gpu.name} with these knobs"
        stuck = next((h for h in first.hazards if h.severity == ERROR and not h.knobs and h.id not in MEMORY_ERRORS), None)
        if stuck is not None:
            return None, -1, f"{stuck.id}: {stuck.message}"
        if "max_num_seqs" not in self.held and first.serving.max_num_seqs < self.target.min_concurrency:
            args = replace(args, max_num_seqs=self.target.min_concurrency)  # the scheduler must admit the target
        limit = longest or self.spec.derived_max_model_len
        steps = ladder(first, self.held, self.target, self.smaller_items(gpu, first, longest))  # all of it: what a rung clears
        searched = frozenset(k for step in steps for k, _ in step.knobs) | (frozenset() if self.target.max_model_len else {"max_model_len"})
        shortest = self.settle(gpu, replace(with_steps(args, steps), max_model_len=min(self.target.max_model_len or MIN_CONTEXT_TOKENS, limit)))
        if shortest is not None and any(h.severity == ERROR and h.id in MEMORY_ERRORS for h in shortest.hazards):
            return None, -1, why_not(shortest, self.target, reserve, searched)  # every change at the shortest length: no rung meets
        for rung in range(min(len(steps), len(steps) if top_rung is None else top_rung) + 1):
            found = self.best(gpu, with_steps(args, steps[:rung]), reserve, limit, searched)
            if found is None:
                continue
            kept = list(steps[:rung])
            for step in steps[: max(rung - 1, 0)]:  # the rung's own change is needed; the ones before it may not be
                trial = [s for s in kept if s is not step]
                pruned = self.best(gpu, with_steps(args, trial), reserve, limit, searched)
                if pruned is not None and pruned.serving.max_model_len >= found.serving.max_model_len:
                    kept, found = trial, pruned
            return found, len(kept), ""
        last = self.settle(gpu, replace(with_steps(args, steps), max_model_len=self.target.max_model_len or MIN_CONTEXT_TOKENS)) or first
        return None, -1, why_not(last, self.target, reserve, searched)


MEMORY_ERRORS = frozenset({"no_kv_cache_memory", "no_room_for_one_request", "requested_exceeds_free", "kv_cache_memory_bytes_oom"})


def why_not(plan: Plan, target: FitTarget, reserve: int, searched: frozenset[str] = frozenset()) -> str:
    errors = [h for h in plan.hazards if h.severity == ERROR] or (clearable(plan, searched) if meets(plan, target, reserve) else [])
    if errors:
        return f"{errors[0].id}: {errors[0].message}"
    return f"{requests_at_once(plan, reserve)} requests at once at max_model_len {plan.serving.max_model_len:,} (with every change the search makes), below {target.min_concurrency}"


def changes_between(before: ServingConfig, after: ServingConfig) -> tuple[KnobChange, ...]:
    keys = (
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "gpu_memory_utilization",
        "kv_cache_dtype",
        "limit_mm_per_prompt",
        "mm_processor_kwargs",
        "decode_context_parallel_size",
        "block_size",
    )
    return tuple(KnobChange(k, getattr(before, k), getattr(after, k)) for k in keys if getattr(before, k) != getattr(after, k))


def layout_of(plan: Plan) -> Layout:
    s = plan.serving
    return Layout(s.tensor_parallel_size, s.pipeline_parallel_size, s.data_parallel_size, s.node, s.gpus_per_node)


def config_of(plan: Plan, base: Plan, gpu_name: str, target: FitTarget, estimate: str, rung: int) -> FitConfig:
    """The configuration's figures: one engine's, its share of the target (FitTarget.per_engine), and the engines' total."""
    s, layout = plan.serving, layout_of(plan)
    engine = target.per_engine(layout.data_parallel_size)
    return FitConfig(
        gpu=plan.gpu.name,
        gpu_count=layout.gpus,
        command=command_for(plan),
        plan_command=plan_command(plan, gpu_name, estimate),
        changes=changes_between(base.serving, s),
        max_model_len=s.max_model_len,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        gpu_memory_utilization=s.gpu_memory_utilization,
        kv_cache_dtype=s.kv_cache_dtype,
        limit_mm_per_prompt=dict(s.limit_mm_per_prompt),
        requests_at_once=plan.total_max_concurrent_requests,
        kv_requests=plan.concurrency.actual_requests,
        margin_requests=plan.total_max_concurrent_requests - target.min_concurrency,
        spare_kv_bytes=spare_kv_bytes(plan, engine),
        available_kv_bytes=plan.kv.available_bytes,
        non_kv_bytes=plan.non_kv_bytes,
        num_blocks=plan.kv.num_blocks,
        estimate=estimate,
        rung=rung,
        warnings=warnings_of(plan),
        tensor_parallel_size=s.tensor_parallel_size,
        pipeline_parallel_size=s.pipeline_parallel_size,
        data_parallel_size=s.data_parallel_size,
        nodes=layout.nodes,
        node=s.node or (f"{s.gpus_per_node}-GPU nodes" if s.gpus_per_node else None),
        layout=layout.describe(),
        requests_per_engine=plan.max_concurrent_requests,
    )


def formula_planner(source: ModelSource, spec: ModelSpec, kwargs: dict[str, Any] | None, semantics: VllmSemantics = LATEST) -> PlanAt:
    """The search's plans: the config alone (`capacity plan --estimate formula`), without the suggestion's re-plans.
    `source` and `spec` are the model's under `kwargs` (--mm-processor-kwargs); other kwargs the search tries are
    applied to `source` (without kwargs only: the search changes kwargs the user did not give)."""
    models = {_key(kwargs): (source, spec)}

    def plan_at(gpu: Gpu, args: ServingArgs) -> Plan:
        key = _key(args.mm_processor_kwargs)
        if key not in models:
            changed = with_mm_processor_kwargs(source, args.mm_processor_kwargs)
            models[key] = (changed, model_spec(changed))
        at_source, at_spec = models[key]
        return plan_without_suggestion(at_source, at_spec, gpu, serving_under(semantics, args, at_spec, gpu), semantics=semantics)

    return plan_at


def _key(kwargs: dict[str, Any] | None) -> str:
    return json.dumps(kwargs or {}, sort_keys=True)


def tp_layout(base: ServingArgs, tp: int) -> Layout:
    """A GPU count given as a TP size (`fit(counts=...)`): the base's PP, DP and nodes kept."""
    return Layout(tp, base.pipeline_parallel_size, base.data_parallel_size, base.node, base.gpus_per_node)


@dataclass(frozen=True)
class Found:
    """A configuration the search found, with what re-searching it needs."""

    config: FitConfig
    plan: Plan
    gpu: Gpu
    gpu_name: str
    base: ServingArgs
    base_plan: Plan
    longest: int | None
    layout: Layout


def fit(
    source: ModelSource,
    spec: ModelSpec,
    gpus: Sequence[tuple[Gpu, str]],
    base: ServingArgs,
    held: frozenset[str],
    target: FitTarget,
    verify: PlanAt | None = None,
    verify_top: int = 1,
    counts: Callable[[Gpu], Iterable[int | Layout]] | None = None,
    longest: int | None = None,
    plain_too: bool = True,
    semantics: VllmSemantics = LATEST,
) -> FitResult:
    """The configurations that meet `target` (module docstring): per GPU type (given as (Gpu, the name to print)) the
    fewest GPUs that do, sorted fewest GPUs first, then fewest changes, then the smaller GPU, then the most spare KV
    memory; and where the fewest GPUs need changes, the fewest that need none (`plain_too`). Per GPU count the layouts
    (capacity/planning/fit_layouts.py: TP, then DP, then TP x PP) are tried in order, the first that meets at the
    lowest rung kept. `verify` re-plans the first `verify_top` with the default estimate (their figures then are its);
    `counts` overrides the layouts tried per GPU (an int: that TP size, the base's PP, DP and nodes); `longest` caps
    the "max" search below the model's limit."""
    if target.max_model_len is not None and target.max_model_len > spec.derived_max_model_len:
        raise BadInput(
            f"--max-model-len {target.max_model_len:,} exceeds {spec.name}'s limit of {spec.derived_max_model_len:,} tokens ({spec.max_len_key}); give at most that, or 'max'"
        )
    if "max_num_seqs" in held and base.max_num_seqs is not None and base.max_num_seqs < target.min_concurrency:
        raise BadInput(f"--max-num-seqs {base.max_num_seqs} is below --min-concurrency {target.min_concurrency}: no configuration can run that many at once")
    search = Search(source, spec, target, held, formula_planner(source, spec, base.mm_processor_kwargs, semantics), semantics=semantics)
    found: list[Found] = []
    refusals: list[Refusal] = []
    for gpu, name in gpus:
        reason, tried, top_rung = "", 0, None
        tries = [tp_layout(base, c) if isinstance(c, int) else c for c in counts(gpu)] if counts is not None else layouts(gpu, base, held, target.max_gpus)
        for count, group in by_count(tries):
            best: tuple[Plan, int, Layout] | None = None
            for layout in group:
                cap = top_rung if best is None else best[1] - 1  # a later layout only where it needs fewer changes
                if cap is not None and cap < 0:
                    break
                plan, rung, why = search.candidate(gpu, base, layout, longest=longest, top_rung=cap)
                if plan is None:
                    reason, tried = (why, count) if top_rung is None and best is None and layout is group[0] else (reason, tried)
                    continue
                best = (plan, rung, layout)
            if best is None:
                continue
            plan, rung, layout = best
            final = build_plan(plan.source, plan.spec, gpu, serving_under(semantics, pinned_args(plan), plan.spec, gpu), semantics=semantics)
            base_plan = search.settle(gpu, layout.applied(base)) or final
            found.append(Found(config_of(final, base_plan, name, target, ESTIMATE_FORMULA, rung), final, gpu, name, base, base_plan, longest, layout))
            if rung == 0 or not plain_too:
                break
            top_rung = 0  # the fewest GPUs that need no change beyond max_model_len, max_num_seqs and the layout, too
        if top_rung is None and not any(f.gpu is gpu for f in found):
            refusals.append(Refusal(gpu.name, tried, reason))
    found.sort(key=lambda f: (f.config.gpu_count, f.config.rung, f.gpu.total_memory_bytes, -f.config.spare_kv_bytes))
    notes: list[str] = []
    if verify is not None and found:
        found, notes = _verified(search, found, verify, verify_top)
    return FitResult(
        source, spec, target, tuple(sorted(held)), tuple(f.config for f in found), tuple(refusals), search.planned, tuple(notes), semantics.release or semantics.name
    )


def _verified(search: Search, found: list[Found], verify: PlanAt, top: int) -> tuple[list[Found], list[str]]:
    """The first `top` configurations re-planned with the default estimate (module docstring), each replaced by
    its checked plan's figures, or dropped (with a note) when no reserve makes it meet the target there."""
    out, notes, checked = list(found), [], 0
    i = 0
    while i < len(out) and checked < top:
        result, note = _verify_one(search, out[i], verify)
        if note:
            notes.append(note)
        if result is None:
            del out[i]
            continue
        out[i] = result
        checked += 1
        i += 1
    return out, notes


def _verify_one(search: Search, f: Found, verify: PlanAt) -> tuple[Found | None, str]:
    reserve, current = 0, f
    for _ in range(MAX_VERIFY_ROUNDS):
        checked = verify(f.gpu, pinned_args(current.plan))
        search.planned += 1
        if meets(checked, search.target.per_engine(f.layout.data_parallel_size)):
            base_plan = f.base_plan
            config = config_of(checked, base_plan, f.gpu_name, search.target, ESTIMATE_DEFAULT, current.config.rung)
            return replace(current, config=config, plan=checked), ""
        shortfall = current.plan.kv.available_bytes - checked.kv.available_bytes
        if shortfall <= 0 or not checked.fits and any(h.id not in MEMORY_ERRORS for h in checked.hazards if h.severity == ERROR):
            why = why_not(checked, search.target.per_engine(f.layout.data_parallel_size), 0)
            return (
                None,
                f"{f.config.gpu_count} x {f.gpu.name} ({f.config.layout}): the formula's configuration does not meet the target on the default estimate ({why}): not offered",
            )
        reserve = max(reserve, shortfall)
        plan, rung, reason = search.candidate(f.gpu, f.base, f.layout, reserve, f.longest)
        if plan is None:
            return None, f"{f.config.gpu_count} x {f.gpu.name}: with {reserve:,} B of KV memory held back for the default estimate, {reason}: not offered"
        final = build_plan(plan.source, plan.spec, f.gpu, serving_under(search.semantics, pinned_args(plan), plan.spec, f.gpu), semantics=search.semantics)
        current = replace(f, plan=final, config=config_of(final, f.base_plan, f.gpu_name, search.target, ESTIMATE_FORMULA, rung))
    return None, f"{f.config.gpu_count} x {f.gpu.name}: still short of the target on the default estimate after {MAX_VERIFY_ROUNDS} searches: not offered"


def nearest_fit(plan: Plan, verify: PlanAt | None = None) -> FitResult:
    """When `plan` does not fit: the nearest configuration that does, on its GPU: one request at the longest
    max_model_len up to the plan's, the plan's GPU count first (then the fewest others, up to DEFAULT_MAX_GPUS),
    every knob open to the ladder's changes, cheapest first."""
    tp = plan.serving.tensor_parallel_size
    base = replace(plan.serving.as_args(), max_model_len=plan.serving.max_model_len)
    counts = [tp] + [n for n in range(1, DEFAULT_MAX_GPUS + 1) if n != tp]
    return fit(
        plan.source,
        plan.spec,
        [(plan.gpu, plan.gpu.name)],
        base,
        frozenset(),
        FitTarget(1, None, max(DEFAULT_MAX_GPUS, tp)),
        verify,
        counts=lambda _gpu: counts,
        longest=plan.serving.max_model_len,
        plain_too=False,
        semantics=plan.semantics,
    )
