"""A plan (or a sweep) as tidy pandas DataFrames: one per section, one row per observation.

`frames(subject)` dispatches on the subject's type; a new subject (a GPU profile) registers its own
function with `@frames.register`. Section names are the CSV file names (`--csv DIR/<section>.csv`).
"""

from __future__ import annotations

from functools import singledispatch
from typing import Any

import pandas as pd

from capacity.planning.plan import MEMORY_TERMS, TERM_LABELS, Plan
from capacity.planning.sweep import SweepResult
from capacity.units import GiB
from reports.fingerprint import fingerprint

PLAN_SECTIONS = ("summary", "memory", "budget", "kv_groups", "block_tables", "warmup", "hazards", "knobs", "fingerprint")

@singledispatch
def frames(subject: Any) -> dict[str, pd.DataFrame]:
    """The tidy DataFrames of a subject, keyed by section name."""
    raise TypeError(f"no DataFrames for {type(subject).__name__}")


def _kv(rows: list[tuple[Any, ...]], columns: list[str]) -> pd.DataFrame:
    """A key/value frame whose `value` column keeps ints as ints (a mixed column would turn them into floats)."""
    df = pd.DataFrame(rows, columns=columns, dtype=object)
    return df


# --- pieces shared with the HTML report ---------------------------------------------------------------


def unused_bytes(plan: Plan) -> int:
    """GPU memory nothing in the plan takes: total - every term (negative when the plan over-commits)."""
    used = sum(t.bytes for t in plan.memory.values())
    return plan.gpu.total_memory_bytes - used


# --- the plan's sections -----------------------------------------------------------------------------


def summary_frame(plan: Plan) -> pd.DataFrame:
    c = plan.concurrency
    rows = [
        ("verdict", plan.verdict),
        ("fits", plan.fits),
        ("actual_requests", c.actual_requests),
        ("max_concurrent_requests", plan.max_concurrent_requests),
        ("concurrency_limited_by", plan.concurrency_limited_by),
        ("concurrency_actual", round(c.actual, 2)),
        ("concurrency_vllm_reported", round(c.vllm_reported, 2)),
        ("tokens_vllm_reported", c.tokens_vllm_reported),
        ("max_model_len", plan.serving.max_model_len),
        ("max_model_len_that_fits", plan.max_model_len_that_fits),
        ("errors", " ".join(h.id for h in plan.hazards if h.severity == "error")),
        ("suggested_command", plan.suggestion.command or ""),
        ("suggested_fixes", " ".join(plan.suggestion.applied)),
        ("no_suggestion_reason", plan.suggestion.reason),
    ]
    return _kv(rows, ["key", "value"])


def memory_frame(plan: Plan) -> pd.DataFrame:
    total = plan.gpu.total_memory_bytes
    rows = []
    for key in (*MEMORY_TERMS, "block_tables"):
        term = plan.memory.get(key)
        if term is None:
            continue
        rows.append(
            {
                "term": key,
                "label": TERM_LABELS.get(key, key),
                "bytes": term.bytes,
                "gib": round(term.bytes / GiB, 3),
                "share_of_gpu": round(term.bytes / total, 4),
                "kind": term.kind,
                "method": term.method,
            }
        )
    return pd.DataFrame(rows, columns=["term", "label", "bytes", "gib", "share_of_gpu", "kind", "method"])


def budget_frame(plan: Plan) -> pd.DataFrame:
    """GPU memory budget, KV-cache arithmetic and the encoder budget as (scope, quantity, modality, value, unit)."""
    s, kv, c, b = plan.serving, plan.kv, plan.concurrency, plan.budget
    rows: list[tuple[Any, ...]] = [
        ("memory", "gpu_total", None, plan.gpu.total_memory_bytes, "B"),
        ("memory", "gpu_memory_utilization", None, s.gpu_memory_utilization, "ratio"),
        ("memory", "requested", None, plan.requested_memory_bytes, "B"),
        ("memory", "free_at_startup", None, plan.free_at_startup_bytes, "B"),
        ("memory", "non_kv", None, plan.non_kv_bytes, "B"),
        ("memory", "available_kv_cache", None, kv.available_bytes, "B"),
        ("memory", "kv_cache_allocated", None, plan.memory["kv_cache"].bytes, "B"),
        ("memory", "unused", None, unused_bytes(plan), "B"),
        ("kv_cache", "bytes_per_block", None, kv.bytes_per_block, "B"),
        ("kv_cache", "num_blocks", None, kv.num_blocks, "blocks"),
        ("kv_cache", "blocks_per_request_vllm", None, kv.blocks_per_request_vllm, "blocks"),
        ("kv_cache", "blocks_per_request_actual", None, kv.blocks_per_request_actual, "blocks"),
        ("kv_cache", "needed_for_one_request", None, kv.needed_for_one_request_bytes, "B"),
        ("kv_cache", "tokens_vllm_reported", None, c.tokens_vllm_reported, "tokens"),
        ("kv_cache", "concurrency_vllm_reported", None, round(c.vllm_reported, 2), "requests"),
        ("kv_cache", "concurrency_actual", None, round(c.actual, 2), "requests"),
        ("kv_cache", "actual_requests", None, c.actual_requests, "requests"),
        ("kv_cache", "max_concurrent_requests", None, plan.max_concurrent_requests, "requests"),
        ("kv_cache", "max_model_len_that_fits", None, plan.max_model_len_that_fits, "tokens"),
        ("encoder", "encoder_compute_budget", None, b.encoder_compute_budget, "tokens"),
        ("encoder", "encoder_cache_size", None, b.encoder_cache_size, "tokens"),
        ("encoder", "encoder_budget", None, b.encoder_budget, "tokens"),
        ("encoder", "profile_items", b.modality_with_max_tokens, b.profile_items, "items"),
        ("encoder", "profile_tokens_per_item", b.modality_with_max_tokens, b.profile_tokens_per_item, "tokens"),
    ]
    for modality, tokens in b.max_tokens_per_item.items():
        rows += [
            ("encoder", "allowed_limit_per_prompt", modality, b.allowed_limits[modality], "items"),
            ("encoder", "max_tokens_per_item", modality, tokens, "tokens"),
            ("encoder", "max_items_per_prompt", modality, b.max_items_per_prompt[modality], "items"),
            ("encoder", "max_items_per_batch", modality, b.max_items_per_batch[modality], "items"),
        ]
    return _kv(rows, ["scope", "quantity", "modality", "value", "unit"])


def kv_groups_frame(plan: Plan) -> pd.DataFrame:
    rows = []
    for i, g in enumerate(plan.kv.groups):
        spec = g.group.spec
        fields = spec.describe()
        rows.append(
            {
                "group": i,
                "kind": g.group.kind,
                "num_layers": g.group.num_layers,
                "num_padding_layers": g.group.num_padding_layers,
                "block_size": spec.block_size,
                "num_kv_heads_per_rank": fields["num_kv_heads_per_rank"],
                "head_size": fields["head_size"],
                "sliding_window": fields["sliding_window"],
                "page_size_bytes": g.group.page_size_bytes,
                "group_bytes_per_block": g.group.bytes_per_block,
                "blocks_per_request_vllm": g.blocks_per_request_vllm,
                "blocks_per_request_actual": g.blocks_per_request_actual,
            }
        )
    df = pd.DataFrame(rows)
    for column in ("sliding_window", "num_kv_heads_per_rank", "head_size"):  # empty for Mamba state groups
        df[column] = df[column].astype("Int64")
    return df


def block_tables_frame(plan: Plan) -> pd.DataFrame:
    """MRV2 BlockTables per group: width, the pre-#46753 width, and bytes (two int32 tables + an int64 slot mapping)."""
    s, kv = plan.serving, plan.kv
    rows = []
    for i, g in enumerate(kv.groups):
        bs = g.group.spec.block_size
        rows.append(
            {
                "group": i,
                "kind": g.group.kind,
                "block_size": bs,
                "max_len_tokens": kv.block_table_max_len,
                "width_blocks": g.block_table_width_blocks,
                "width_tokens": g.block_table_width_blocks * bs,
                "max_len_tokens_pre_fix": kv.block_table_max_len_pre_fix,
                "width_blocks_pre_fix": g.block_table_width_blocks_pre_fix,
                "width_tokens_pre_fix": g.block_table_width_blocks_pre_fix * bs,
                "max_num_seqs": s.max_num_seqs,
                "table_bytes": 2 * s.max_num_seqs * g.block_table_width_blocks * 4,
                "slot_mapping_bytes": s.max_num_batched_tokens * 8,
            }
        )
    return pd.DataFrame(rows)


def warmup_frame(plan: Plan) -> pd.DataFrame:
    w = plan.warmup
    rows: list[tuple[Any, ...]] = [
        ("decode_query_len", None, w.decode_query_len),
        ("prompt_len", None, w.prompt_len),
        ("num_decode_steps", None, w.num_decode_steps),
        ("decode_len", None, w.decode_len),
        ("max_encoder_len", None, w.max_encoder_len),
        ("max_encoder_len_source", None, w.max_encoder_len_source),
        ("max_blocks_per_req", None, w.max_blocks_per_req),
        ("num_reqs_before_kv_cap", None, w.num_reqs_before_kv_cap),
        ("num_reqs", None, w.num_reqs),
    ]
    rows += [("blocks_per_request", i, n) for i, n in enumerate(w.blocks_per_request)]
    df = _kv(rows, ["key", "group", "value"])
    df["group"] = df["group"].astype("Int64")
    return df


def hazards_frame(plan: Plan) -> pd.DataFrame:
    return pd.DataFrame([h.to_dict() for h in plan.hazards], columns=["id", "severity", "message", "fix"])


def knobs_frame(plan: Plan) -> pd.DataFrame:
    rows = []
    for key, value, defaulted in plan.serving.knob_items():
        if isinstance(value, dict):
            value = ",".join(f"{k}={v}" for k, v in value.items())
        rows.append((key, value, defaulted))
    return _kv(rows, ["knob", "value", "vllm_default"])


def fingerprint_frame(plan: Plan) -> pd.DataFrame:
    return _kv(list(fingerprint(plan).items()), ["key", "value"])


def phases_frame(plan: Plan) -> pd.DataFrame:
    """A GPU profile's phases: allocator and device counters per phase, bytes and seconds."""
    assert plan.profile is not None
    rows = [
        {
            "phase": ph.name,
            "detail": ph.detail,
            "peak_above_start_bytes": ph.peak_above_start_bytes,
            "allocated_before_bytes": ph.allocated_before_bytes,
            "allocated_after_bytes": ph.allocated_after_bytes,
            "peak_allocated_bytes": ph.peak_allocated_bytes,
            "reserved_bytes": ph.reserved_bytes,
            "device_used_bytes": ph.device_used_bytes,
            "nvml_process_bytes": ph.nvml_process_bytes,
            "nvml_device_bytes": ph.nvml_device_bytes,
            "wall_s": ph.wall_s,
        }
        for ph in plan.profile.phases
    ]
    return pd.DataFrame(rows).astype({"device_used_bytes": "Int64", "nvml_process_bytes": "Int64", "nvml_device_bytes": "Int64"})


@frames.register
def _plan_frames(plan: Plan) -> dict[str, pd.DataFrame]:
    sections = _plan_sections(plan)
    if plan.profile is not None and plan.profile.phases:
        sections["phases"] = phases_frame(plan)
    if plan.ranks:
        sections["ranks"] = ranks_frame(plan)
    return sections


def ranks_frame(plan: Plan) -> pd.DataFrame:
    """A tensor-parallel profile's ranks: one row each, its measured terms and the KV budget it leaves."""
    return pd.DataFrame([r.to_dict() for r in plan.ranks])


def _plan_sections(plan: Plan) -> dict[str, pd.DataFrame]:
    return {
        "summary": summary_frame(plan),
        "memory": memory_frame(plan),
        "budget": budget_frame(plan),
        "kv_groups": kv_groups_frame(plan),
        "block_tables": block_tables_frame(plan),
        "warmup": warmup_frame(plan),
        "hazards": hazards_frame(plan),
        "knobs": knobs_frame(plan),
        "fingerprint": fingerprint_frame(plan),
    }


# --- sweeps ---------------------------------------------------------------------------------------------


def sweep_frame(result: SweepResult) -> pd.DataFrame:
    """One row per grid point (SweepPoint fields); hazard ids joined by spaces."""
    records = [p.to_dict() for p in result.points]
    df = pd.DataFrame.from_records(records)
    for col in ("requested_max_num_seqs", "requested_max_model_len", "requested_tensor_parallel_size", "requested_pipeline_parallel_size", "requested_data_parallel_size"):
        if col in df:
            df[col] = df[col].astype("Int64")
    return df


@frames.register
def _sweep_frames(result: SweepResult) -> dict[str, pd.DataFrame]:
    return {"sweep": sweep_frame(result)}
