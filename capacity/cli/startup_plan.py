"""The plan a vLLM startup is set beside: one path for `capacity reconcile` and `bench/predict_logs.py`.

Both take the model, knobs, GPU and version rules from the log (capacity/reconcile/log_inputs.py) and what the
caller adds (flags, a benchmark's sidecar), then plan the way `capacity plan` does by default: the fake-tensor trace
of the real model on the knobs that version resolves, re-planned with its rules; the formulas where the trace cannot
run (the plan's notes say why) or where `--estimate formula` asks for them; a saved GPU profile where one is given.
The figures both tools print then come from `capacity.reconcile.compare.capacity_figures` of that one plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from capacity.cli.estimate import chosen_estimate, trace_or_reason
from capacity.gpu.catalog import Gpu
from capacity.planning import planner
from capacity.planning.plan import Plan
from capacity.reconcile.compare import ReconcileResult, VersionInference, VersionOutcome, reconcile_facts, version_outcome
from capacity.reconcile.log_inputs import LogPlanInputs, log_plan_inputs
from capacity.serving.config import ServingArgs
from capacity.vllm.log_facts import VllmLogFacts
from capacity.vllm.log_startups import with_stated_version
from capacity.vllm.version_evidence import fitting_semantics
from capacity.vllm.versions import VllmSemantics, semantics_for


@dataclass(frozen=True)
class StartupComparison:
    """A startup of a log, the inputs read for it, the plan made from them, and the two side by side."""

    inputs: LogPlanInputs
    plan: Plan
    estimate: str  # "trace" | "formula" (the trace could not run, or was not asked for) | "profile"
    result: ReconcileResult
    fallback: str = ""  # why the trace could not run, when the default path fell back to the formulas


@dataclass(frozen=True)
class StartupRequest:
    """What the caller gives beside the log: the model, the knobs (ServingArgs fields: command-line flags, or a
    benchmark's sidecar), the GPU, the estimate, the environment vLLM ran in, and a saved GPU profile."""

    model: str | None = None
    flags: dict[str, Any] = field(default_factory=dict)
    gpu: str | None = None
    estimate: str | None = None
    env: dict[str, str] | None = None
    measured: Any = None


def traced_plan(model: str, args: ServingArgs, gpu: Gpu, semantics: VllmSemantics) -> tuple[Plan, str, str]:
    """`capacity plan`'s default path under a vLLM version's rules: the formula plan resolves the version's knobs
    (utilization, batch defaults), the fake-tensor trace runs on those knobs, and the plan is made again from the
    trace with the version's rules. (plan, "trace", "") or, where the trace cannot run, (formula plan, "formula", why)."""
    base = planner.plan_for(model, args, gpu=gpu, semantics=semantics)
    s = base.serving
    explicit = replace(
        args,
        gpu_memory_utilization=s.gpu_memory_utilization,
        max_num_batched_tokens=s.max_num_batched_tokens,
        max_num_seqs=s.max_num_seqs,
        max_model_len=s.max_model_len,
    )
    # the trace sized by the CUDA total only, as bench/predict_logs.py has traced its logs since 2026-11-30
    traced = trace_or_reason(model, explicit, f"{gpu.total_memory_bytes}B")
    if isinstance(traced, str):
        return base, "formula", traced
    profile = traced[1]
    return planner.plan_for(model, explicit, profile=profile, gpu=gpu, semantics=semantics), "trace", ""


def compare_startup(facts: VllmLogFacts, request: StartupRequest) -> StartupComparison:
    """Plan one startup of a log (see the module docstring) and set it beside the log. BadInput as log_plan_inputs."""
    inputs = log_plan_inputs(facts, model=request.model, flags=request.flags, gpu=request.gpu, env=request.env)
    notes = list(inputs.notes)
    why = ""
    if request.measured is not None:
        plan, how = planner.plan_for(inputs.model, inputs.args, profile=request.measured, gpu=inputs.gpu, semantics=inputs.semantics), "profile"
    elif chosen_estimate(request.estimate) == "formula":
        plan, how = planner.plan_for(inputs.model, inputs.args, gpu=inputs.gpu, semantics=inputs.semantics), "formula"
        notes.append("planned with the formulas (--estimate formula); capacity's default is the fake-tensor trace")
    else:
        plan, how, why = traced_plan(inputs.model, inputs.args, inputs.gpu, inputs.semantics)
        if why:
            notes.append(why)
    result = reconcile_facts(facts, plan, semantics=inputs.log_semantics)
    result = replace(result, estimate=how, notes=(*notes, *result.notes))
    return StartupComparison(inputs, plan, how, result, why)


def compare_versions(compared: StartupComparison, request: StartupRequest) -> tuple[StartupComparison | None, ReconcileResult]:
    """`compared`'s result, with the versions it may come from when the startup does not state its own: the lines
    that tell, each range of rules they allow, and the comparison under each; and the comparison whose plan the
    result shows. When the ranges change the verdict (capacity.reconcile.compare.VERDICT_KEYS, the available KV
    memory within CLOSE_PERCENT, whether the plan fits), none is picked: the result has no rows of its own, its
    `by_version` holds each comparison, and no comparison is returned. A stated version (the log, --vllm-version) or a
    V0 log is returned as it is."""
    result = compared.result
    facts = result.facts
    if facts.version is not None or facts.engine == "V0":
        return compared, result
    fitting, evidence = fitting_semantics(facts)
    if not evidence or len(fitting) < 2:
        return compared, result
    guess = semantics_for(facts.version_guess)
    basis = f"one of the versions its lines fit ({', '.join(s.name for s in fitting)})"
    groups: list[tuple[VersionOutcome, StartupComparison]] = []
    for sem in fitting:
        if guess is sem:
            one = compared
        else:
            stated = with_stated_version(facts, f"{sem.first[0]}.{sem.first[1]}", basis)
            one = compare_startup(stated, request)
        outcome = version_outcome(one.result, one.plan)
        same = next((i for i, (o, _) in enumerate(groups) if o.figures == outcome.figures), None)
        if same is None:
            groups.append((outcome, one))
        else:  # ranges whose rules plan this startup alike are shown as one
            kept, kept_one = groups[same]
            groups[same] = (replace(kept, semantics=f"{kept.semantics}, {sem.name}"), kept_one if kept_one is compared else one if one is compared else kept_one)
    outcomes = tuple(o for o, _ in groups)
    shown = [replace(one.result, vllm_version=o.semantics, vllm_version_basis=basis, semantics=o.semantics) for o, one in groups]
    decides = len({o.verdict for o in outcomes}) > 1
    lines = tuple(e.text() for e in evidence)
    names = ", ".join(s.name for s in fitting)
    if decides:
        note = f"the paste does not state its vLLM version; its lines fit {names}, and the comparison changes with it: each is shown; pass --vllm-version to pick one"
        head = replace(
            shown[-1], vllm_version="not stated", vllm_version_basis=basis, semantics="", rows=(), figures=(), blocks=None,
            inference=VersionInference(lines, outcomes, True, ""), by_version=tuple(shown), notes=(note,),
        )  # fmt: skip
        return None, head
    index = next((i for i, (_, one) in enumerate(groups) if one is compared), len(groups) - 1)
    used = outcomes[index].semantics
    note = f"the paste does not state its vLLM version; its lines fit {names}: the verdict is the same under each, vLLM {used}'s rules are shown (--vllm-version picks another)"
    chosen = shown[index]
    return groups[index][1], replace(chosen, inference=VersionInference(lines, outcomes, False, used), notes=(*chosen.notes, note))


def reconcile_startup(facts: VllmLogFacts, request: StartupRequest) -> tuple[StartupComparison | None, ReconcileResult]:
    """`capacity reconcile` of one startup: compare_startup, then compare_versions where the version is inferred."""
    return compare_versions(compare_startup(facts, request), request)
