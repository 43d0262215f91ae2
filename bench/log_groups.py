"""The log benchmark grouped the three ways issue 28 asks for: by the vLLM rules a log was planned with, by GPU family
and by model kind, with `plan --vllm-version`'s error beside reconcile's in each group (bench/predict_logs.py).

A log's GPU family is its catalog GPU's (`GPU_FAMILIES`, by the catalog's name; a GPU the log names only by its total
is "not named"); its model kind is read off the plan: encoder-decoder, multimodal, hybrid (a KV group of state
layers: Mamba, linear attention, short convolutions), MoE, else dense.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only: the docs hook imports group_tables without capacity's planner
    from capacity.planning.plan import Plan

# The architecture of each GPU in capacity's catalog (capacity/gpu/gpus.json), from NVIDIA's and AMD's product pages.
GPU_FAMILIES: dict[str, str] = {
    **dict.fromkeys(("V100-32GB", "V100-16GB"), "Volta"),
    **dict.fromkeys(("T4", "RTX-2080-Ti"), "Turing"),
    **dict.fromkeys(("A100-80GB", "A100-40GB", "A800-80GB", "A40", "A10", "A10G", "RTX-A6000", "RTX-A5000", "RTX-A4000", "RTX-3090", "RTX-3090-Ti", "RTX-3080-10GB", "RTX-3060-12GB"), "Ampere"),
    **dict.fromkeys(("Jetson-AGX-Orin-64GB",), "Ampere, unified memory"),
    **dict.fromkeys(("L40S", "L40", "L20", "L4", "RTX-6000-Ada", "RTX-4090", "RTX-4090-WSL", "RTX-4080", "RTX-4080-Super", "RTX-4060-Ti-16GB", "RTX-4050-Laptop-WSL", "RTX-4060-Laptop-Linux", "RTX-4060-Laptop-WSL", "RTX-4070-Laptop-Linux", "RTX-4070-Laptop-WSL"), "Ada"),
    **dict.fromkeys(("H200", "H100-SXM", "H100-PCIe", "H100-NVL", "H800", "H20", "GH200"), "Hopper"),
    **dict.fromkeys(("B200", "B300", "RTX-PRO-6000", "RTX-5090", "RTX-5080", "RTX-5070-Ti", "RTX-5060-Ti-16GB"), "Blackwell"),
    **dict.fromkeys(("GB10", "Jetson-Thor"), "Blackwell, unified memory"),
    **dict.fromkeys(("MI250X",), "AMD CDNA 2"),
    **dict.fromkeys(("MI300X", "MI325X"), "AMD CDNA 3"),
    **dict.fromkeys(("MI355X",), "AMD CDNA 4"),
}
NOT_NAMED = "not named (a size or CUDA's total only)"
GROUPINGS = (("semantics", "vLLM rules"), ("gpu_family", "GPU family"), ("model_kind", "model kind"))


def gpu_family(plan: Plan, named: bool) -> str:
    """The family of the catalog GPU a log was planned on. `named`: the sidecar names a GPU the catalog knows (not a
    bare size such as "11.63GiB GPU", and not only CUDA's total from the log)."""
    if not named or plan.gpu.source == "size":
        return NOT_NAMED
    return GPU_FAMILIES.get(plan.gpu.name, f"{plan.gpu.name} (no family listed)")


def model_kind(plan: Plan) -> str:
    from capacity.planning.data_parallel import is_moe

    if plan.spec.is_encoder_decoder:
        return "encoder-decoder"
    if plan.spec.modalities:
        return "multimodal"
    if any(g.group.kind == "mamba" for g in plan.kv.groups):
        return "hybrid"
    return "MoE" if is_moe(plan.spec, plan.source) else "dense"


def _release(version: str | None) -> tuple[int, ...]:
    from capacity.vllm.versions import release_tuple

    return release_tuple(version or "") or ()


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def group_summary(rows: list[Any], key: str) -> dict[str, dict[str, float | int | None]]:
    """Per group of plannable logs: how many (and how many held-out), the median |error| of reconcile's available KV,
    of `plan --vllm-version`'s available KV and of the KV tokens."""
    groups: dict[str, list[Any]] = {}
    for r in rows:
        if r.plannable:
            groups.setdefault(getattr(r, key) or "-", []).append(r)
    out: dict[str, dict[str, float | int | None]] = {}
    order = (lambda name: min(_release(r.vllm_version) for r in groups[name])) if key == "semantics" else (lambda name: name)
    for name in sorted(groups, key=order):
        members = groups[name]
        kv = [abs(r.error_percent["available_kv"]) for r in members if r.error_percent.get("available_kv") is not None]
        planned = [abs(r.plan_error_percent) for r in members if r.plan_error_percent is not None]
        tokens = [abs(r.error_percent["kv_tokens"]) for r in members if r.error_percent.get("kv_tokens") is not None]
        out[name] = {
            "logs": len(members),
            "held_out": sum(r.split == "held-out" for r in members),
            "available_kv_n": len(kv),
            "available_kv_median_abs_percent": _median(kv),
            "plan_n": len(planned),
            "plan_median_abs_percent": _median(planned),
            "kv_tokens_n": len(tokens),
            "kv_tokens_median_abs_percent": _median(tokens),
        }
    return out


def group_tables(by_group: dict[str, dict[str, dict[str, float | int | None]]]) -> list[str]:
    """The README section: one table per grouping, both halves together (the held-out count says how many)."""

    def cell(value: float | int | None, n: float | int | None) -> str:
        return "-" if value is None else f"{value:.2f} % ({n})"

    lines = [
        "## By vLLM rules, GPU family and model kind",
        "",
        "Both halves together (the held-out column counts that half's logs). Median |error| (n): reconcile's available KV,",
        "`capacity plan --vllm-version <the log's version>`'s available KV (the catalog's GPU, the knobs the user gave),",
        "and the KV tokens.",
    ]
    for key, title in GROUPINGS:
        lines += ["", f"### By {title}", "", f"| {title} | logs | held-out | available KV | plan --vllm-version | KV tokens |", "|---|---:|---:|---:|---:|---:|"]
        for name, g in by_group[key].items():
            lines.append(
                f"| {name} | {g['logs']} | {g['held_out']} | {cell(g['available_kv_median_abs_percent'], g['available_kv_n'])} | "
                f"{cell(g['plan_median_abs_percent'], g['plan_n'])} | {cell(g['kv_tokens_median_abs_percent'], g['kv_tokens_n'])} |"
            )
    return lines
