"""The CI gate: thresholds a plan must meet (`capacity check`).

Every check compares one figure of the plan with a threshold the user gave; a plan that does not fit
(an `error` hazard) always fails, and `fail_on_hazard` can make warnings or infos fail it too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from capacity.errors import BadInput
from capacity.planning.plan import ERROR, SEVERITIES, Plan


@dataclass(frozen=True)
class Thresholds:
    min_concurrency: int | None = None  # against concurrency.max_concurrent_requests = min(KV-held, max_num_seqs)
    min_vllm_concurrency: float | None = None  # against concurrency.vllm_reported (2 decimals, as in the JSON)
    min_kv_tokens: int | None = None  # against kv_cache.tokens_vllm_reported
    require_max_model_len: int | None = None  # against min(max_model_len, max_model_len_that_fits)
    fail_on_hazard: str = ERROR  # the lowest hazard severity that fails the gate

    def __post_init__(self) -> None:
        for flag, value in (
            ("--min-concurrency", self.min_concurrency),
            ("--min-kv-tokens", self.min_kv_tokens),
            ("--require-max-model-len", self.require_max_model_len),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise BadInput(f"{flag} must be an integer >= 0, got {value!r}")
        if self.min_vllm_concurrency is not None and not self.min_vllm_concurrency >= 0:
            raise BadInput(f"--min-vllm-concurrency must be a number >= 0, got {self.min_vllm_concurrency!r}")
        if self.fail_on_hazard not in SEVERITIES:
            raise BadInput(f"--fail-on-hazard {self.fail_on_hazard!r} is not one of {', '.join(SEVERITIES)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GateCheck:
    name: str  # the option: min_concurrency, ..., fail_on_hazard
    metric: str  # the JSON path of the figure compared
    required: Any
    actual: Any
    passed: bool
    detail: str  # one clause of the verdict line

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GateResult:
    thresholds: Thresholds
    checks: tuple[GateCheck, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> tuple[GateCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    def verdict_line(self, plan: Plan) -> str:
        """One line: PASS or FAIL, the model and GPU, and every failed check with its numbers (all checks on PASS)."""
        shown = self.checks if self.passed else self.failures
        where = f"{plan.source.name} on {plan.gpu.name}"
        return f"{'PASS' if self.passed else 'FAIL'} ({where}): " + "; ".join(c.detail for c in shown)

    def check_lines(self, plan: Plan) -> list[str]:
        """`capacity check` on stdout without --json: the verdict, then one line per check, passed or not."""
        head = f"{'PASS' if self.passed else 'FAIL'}: {plan.source.name} on {plan.gpu.name}"
        return [head, *(f"  {'pass' if c.passed else 'FAIL'}  {c.detail}" for c in self.checks)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "thresholds": self.thresholds.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
            "failed": [c.name for c in self.failures],
        }


def _at_least(name: str, metric: str, label: str, actual: int | float, required: int | float, flag: str, why: str = "") -> GateCheck:
    ok = actual >= required
    clause = f"{label} {actual} {'>=' if ok else '<'} {required}" + (f" ({why})" if why else "") + ("" if ok else f" ({flag})")
    return GateCheck(name, metric, required, actual, ok, clause)


def evaluate(plan: Plan, thresholds: Thresholds) -> GateResult:
    order = {s: i for i, s in enumerate(SEVERITIES)}
    floor = order[thresholds.fail_on_hazard]
    failing = [h for h in plan.hazards if order[h.severity] >= floor]
    counted = "/".join(SEVERITIES[floor:])
    found = ", ".join(f"{h.id} ({h.severity})" for h in failing)
    checks = [
        GateCheck(
            "fail_on_hazard",
            "hazards[].severity",
            thresholds.fail_on_hazard,
            [h.id for h in failing],
            not failing,
            f"no {counted} hazard" if not failing else f"{counted} {'hazard' if len(failing) == 1 else 'hazards'}: {found} (--fail-on-hazard {thresholds.fail_on_hazard})",
        )
    ]
    c = plan.concurrency
    if thresholds.min_concurrency is not None:
        why = f"min(KV cache holds {c.actual_requests}, max_num_seqs {plan.serving.max_num_seqs})"
        dp = plan.data_parallel_size
        if dp > 1:  # the DP engines together (capacity/serving/data_parallel.py)
            why = f"{dp} DP engines x {why}"
        checks.append(
            _at_least(
                "min_concurrency",
                "concurrency.max_concurrent_requests" if dp == 1 else "data_parallel.total_max_concurrent_requests",
                "requests run at once",
                plan.total_max_concurrent_requests,
                thresholds.min_concurrency,
                "--min-concurrency",
                why,
            )
        )
    if thresholds.min_vllm_concurrency is not None:
        checks.append(
            _at_least(
                "min_vllm_concurrency",
                "concurrency.vllm_reported",
                "vLLM concurrency",
                round(c.vllm_reported, 2),
                thresholds.min_vllm_concurrency,
                "--min-vllm-concurrency",
            )
        )
    if thresholds.min_kv_tokens is not None:
        checks.append(
            _at_least("min_kv_tokens", "kv_cache.tokens_vllm_reported", "KV tokens (vLLM)", c.tokens_vllm_reported, thresholds.min_kv_tokens, "--min-kv-tokens")
        )
    if thresholds.require_max_model_len is not None:
        served = plan.max_model_len_served
        checks.append(
            _at_least(
                "require_max_model_len",
                "min(serving.max_model_len, max_model_len_that_fits)",
                "max_model_len served",
                served,
                thresholds.require_max_model_len,
                "--require-max-model-len",
            )
        )
    return GateResult(thresholds, tuple(checks))
