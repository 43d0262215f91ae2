"""A plan (or a sweep) as one self-contained HTML page: inline CSS and SVG, no script, no network.

`render_html(subject)` dispatches on the subject's type; a GPU profile can register its own page. The page's
sections are here; the escaping markup, the page shell and its CSS in reports/html_markup.py, the memory bar and
the sweep heatmap in reports/html_charts.py.
"""

from __future__ import annotations

from dataclasses import asdict
from functools import singledispatch
from typing import Any

import capacity
from capacity.planning.plan import ERROR, INFO, TERM_LABELS, WARNING, Plan
from capacity.planning.sweep import SweepResult
from capacity.serving.config import ServingArgs
from capacity.units import GiB, plural
from reports.frames import fingerprint, unused_bytes
from reports.html_charts import TERM_COLOR, heatmap_panels, memory_bar, segments
from reports.html_markup import Html, data_table, el, fmt_gib, fmt_num, html_page
from reports.serve_line import flag_groups


@singledispatch
def render_html(subject: Any) -> str:
    """The self-contained HTML page of a subject."""
    raise TypeError(f"no HTML report for {type(subject).__name__}")


# --- plan ------------------------------------------------------------------------------------------------

KIND_NOTE = {
    "exact": "fixed by the architecture and the knobs",
    "estimated": "a documented formula or constant",
    "measured": "from a GPU profile",
}


def _kind(kind: str) -> Html:
    return el("span", kind, class_=f"kind kind-{kind}", title=KIND_NOTE.get(kind, ""))


def _memory_section(plan: Plan) -> Html:
    total = plan.gpu.total_memory_bytes
    rows = []
    for key, label, size, kind in segments(plan):
        method = plan.memory[key].method if key in plan.memory else "total - every term above"
        rows.append(
            [
                Html(el("td", el("span", class_="swatch", style=f"background:{TERM_COLOR[key]}"), label)),
                fmt_num(size),
                f"{size / GiB:,.2f}",
                f"{size / total:.1%}",
                _kind(kind) if kind else "",
                method,
            ]
        )
    unused = unused_bytes(plan)
    totals = [
        [
            "requested (total x gpu_memory_utilization)",
            fmt_num(plan.requested_memory_bytes),
            f"{plan.requested_memory_bytes / GiB:,.2f}",
            f"{plan.requested_memory_bytes / total:.1%}",
            "",
            "ceil(total x gpu_memory_utilization)",
        ],
        [
            "non-KV (vLLM subtracts)",
            fmt_num(plan.non_kv_bytes),
            f"{plan.non_kv_bytes / GiB:,.2f}",
            f"{plan.non_kv_bytes / total:.1%}",
            "",
            "weights + activation peak + encoder cache + non-torch + CUDA graphs",
        ],
        [
            "available KV cache memory",
            fmt_num(plan.kv.available_bytes),
            f"{plan.kv.available_bytes / GiB:,.2f}",
            f"{plan.kv.available_bytes / total:.1%}",
            "",
            "vLLM log: Available KV cache memory",
        ],
    ]
    over = [] if unused >= 0 else [el("p", f"The plan over-commits the GPU by {-unused:,} B ({fmt_gib(-unused)}).", class_="bad")]
    return el(
        "section",
        el("h2", "GPU memory (per rank)"),
        el("p", f"{plan.gpu.label}: {total:,} B ({fmt_gib(total)}) — {plan.gpu.provenance}", class_="note"),
        memory_bar(plan),
        over,
        data_table(["term", "bytes", "GiB", "of GPU", "kind", "how"], rows, cls="terms", numeric=(1, 2, 3)),
        data_table(["budget", "bytes", "GiB", "of GPU", "", "how"], totals, cls="terms totals", numeric=(1, 2, 3)),
        el("p", "Hatched bar segments are estimates; solid ones are exact or measured.", class_="note"),
        id="memory",
    )


def _verdict_section(plan: Plan) -> Html:
    c, s = plan.concurrency, plan.serving
    if plan.fits:
        head = el("p", f"FITS: {plan.concurrency_sentence()}", class_="big")
    else:
        head = el("p", "DOES NOT FIT: " + ", ".join(h.id for h in plan.hazards if h.severity == ERROR), class_="big")
    figures = data_table(
        ["figure", "value", "meaning"],
        [
            ["actual concurrency", f"{c.actual:.2f}x = {plural(c.actual_requests, 'request')}", "usable blocks (null block excluded) / blocks a request really holds"],
            ["vLLM-reported concurrency", f"{c.vllm_reported:.2f}x", "vLLM's log line: num_blocks / blocks per request it charges"],
            ["KV cache tokens (vLLM log)", fmt_num(c.tokens_vllm_reported), "int(vLLM concurrency x max_model_len)"],
            ["longest request served", f"{plan.max_model_len_served:,} tokens", "max_model_len, or the longest one request's KV fits in"],
            ["max_num_seqs", fmt_num(s.max_num_seqs), "the scheduler's cap on concurrent requests"],
            [
                "requests run at once",
                fmt_num(plan.max_concurrent_requests),
                f"min(requests the KV cache holds, max_num_seqs): limited by {plan.concurrency_limited_by}",
            ],
        ],
        cls="figures",
    )
    return el(
        "section",
        el("h2", "Verdict"),
        head,
        figures,
        el("h3", "Suggested vllm serve"),
        *_suggestion(plan),
        id="verdict",
        class_="verdict " + ("fits" if plan.fits else "nofit"),
    )


def _suggestion(plan: Plan) -> list[Html]:
    """The suggested command (and the hazards whose fixes it applies), or why there is none."""
    s = plan.suggestion
    if s.command is None:
        return [el("p", f"No suggestion: {s.reason}", class_="bad")]
    # each flag with its value unbreakable, the spaces between them the only places the line wraps
    groups = flag_groups(s.command)
    parts: list[Html | str] = []
    for i, group in enumerate(groups):
        parts += [" "] if i else []
        parts.append(el("span", group, class_="arg"))
    out = [el("pre", el("code", parts), class_="serve")]
    if s.applied:
        out.append(el("p", f"With the fixes of {', '.join(s.applied)} applied (see Hazards)."))
    return out


def _kv_section(plan: Plan) -> Html:
    kv = plan.kv
    rows = []
    for i, g in enumerate(kv.groups):
        fields = g.group.spec.describe()
        rows.append(
            [
                i,
                g.group.kind + (f" (window {fields['sliding_window']})" if fields["sliding_window"] else ""),
                f"{g.group.num_layers}" + (f" + {g.group.num_padding_layers} pad" if g.group.num_padding_layers else ""),
                "" if fields["num_kv_heads_per_rank"] is None else fields["num_kv_heads_per_rank"],
                "" if fields["head_size"] is None else fields["head_size"],
                fmt_num(g.group.page_size_bytes),
                g.blocks_per_request_vllm,
                g.blocks_per_request_actual,
                f"{g.block_table_width_blocks} ({g.block_table_width_blocks * g.group.spec.block_size:,} tokens)",
                f"{g.block_table_width_blocks_pre_fix} ({g.block_table_width_blocks_pre_fix * g.group.spec.block_size:,} tokens)",
            ]
        )
    table = data_table(
        ["group", "kind", "layers", "KV heads/rank", "head size", "page B", "blocks/req vLLM", "blocks/req actual", "block table width", "width before #46753"],
        rows,
        numeric=(0, 3, 4, 5, 6, 7),
    )
    facts = data_table(
        ["quantity", "value"],
        [
            ["bytes per block (largest group's summed page)", fmt_num(kv.bytes_per_block)],
            ["num_blocks (incl. the null block)", fmt_num(kv.num_blocks)],
            ["blocks per request: vLLM / actual", f"{kv.blocks_per_request_vllm} / {kv.blocks_per_request_actual}"],
            ["bytes one request needs (vLLM's startup check)", fmt_num(kv.needed_for_one_request_bytes)],
            ["block tables cover (after / before #46753)", f"{kv.block_table_max_len:,} / {kv.block_table_max_len_pre_fix:,} tokens"],
            ["block-table memory (after the KV budget)", f"{plan.memory['block_tables'].bytes:,} B"],
        ],
        cls="facts",
    )
    return el("section", el("h2", "KV cache groups and block tables"), table, facts, id="kv")


def _budget_section(plan: Plan) -> Html:
    b = plan.budget
    if not b.max_tokens_per_item:
        body: Html = el("p", "No multimodal inputs: no encoder budget.")
    else:
        rows = [[m, b.allowed_limits[m], fmt_num(t), b.max_items_per_prompt[m], b.max_items_per_batch[m]] for m, t in b.max_tokens_per_item.items()]
        note = el(
            "p",
            f"encoder compute budget {b.encoder_compute_budget:,} tokens, encoder cache {b.encoder_cache_size:,} tokens; "
            f"profiled with {b.profile_items} x {b.modality_with_max_tokens} items of {b.profile_tokens_per_item:,} tokens",
            class_="note",
        )
        body = data_table(["modality", "limit per prompt", "tokens per item", "items per prompt", "items per batch"], rows, numeric=(1, 2, 3, 4)) + note
    return el("section", el("h2", "Encoder budget (MultiModalBudget)"), body, id="budget")


def _warmup_section(plan: Plan) -> Html:
    w = plan.warmup
    rows = [
        ["prompt_len", w.prompt_len, "2 + k (PR #40746)"],
        ["decode query", w.decode_query_len, "1 + k"],
        ["decode steps", w.num_decode_steps, "3, or 5 with speculation"],
        ["decode_len", w.decode_len, "prompt_len + steps x (1 + k)"],
        ["encoder length per request", fmt_num(w.max_encoder_len), w.max_encoder_len_source],
        ["blocks per request (per group)", ", ".join(str(n) for n in w.blocks_per_request), "cross-attention reserves the encoder length (PR #47308)"],
        [
            "requests",
            f"{w.num_reqs} (before the KV cap {w.num_reqs_before_kv_cap})",
            "min(max_num_seqs, max_num_batched_tokens // prompt_len, (num_blocks - 1) // blocks per request)",
        ],
    ]
    return el("section", el("h2", "Warmup plan"), data_table(["step", "value", "rule"], rows), id="warmup")


def _hazards_section(plan: Plan) -> Html:
    if not plan.hazards:
        return el("section", el("h2", "Hazards"), el("p", "No hazards found.", class_="good"), id="hazards")
    items = [
        el(
            "li",
            el("span", h.severity, class_=f"sev sev-{h.severity}"),
            el("code", h.id),
            el("p", h.message),
            el("p", el("strong", "fix: "), h.fix, class_="fix"),
            class_=f"hazard hazard-{h.severity}",
        )
        for h in plan.hazards
    ]
    counts = ", ".join(f"{sum(h.severity == s for h in plan.hazards)} {s}" for s in (ERROR, WARNING, INFO))
    return el("section", el("h2", "Hazards"), el("p", counts, class_="note"), el("ul", items, class_="hazards"), id="hazards")


def _knobs_section(plan: Plan) -> Html:
    rows = []
    for key, value, defaulted in plan.serving.knob_items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        rows.append([key, "-" if value is None else str(value), "vLLM default" if defaulted else ""])
    return el("section", el("h2", "Knobs"), data_table(["knob", "value", ""], rows), id="knobs")


def _provenance_section(plan: Plan) -> Html:
    rows = [[TERM_LABELS.get(k, k), _kind(t.kind), t.method] for k, t in plan.memory.items()]
    rows += [
        [
            "GPU total memory",
            _kind("measured" if plan.gpu.source == "nvml" else "exact" if "measured" in plan.gpu.provenance else "estimated"),
            plan.gpu.provenance,
        ],
        ["KV blocks, concurrency, block tables, warmup", _kind("exact"), "vLLM 0.33's arithmetic on the available KV bytes and the knobs"],
    ]
    fp = fingerprint(plan)
    fp_rows = [[k, "-" if v is None else (f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v))] for k, v in fp.items()]
    return el(
        "section",
        el("h2", "Provenance"),
        el(
            "p",
            "Each figure is ",
            el("strong", "exact"),
            " (fixed by the architecture and knobs), ",
            el("strong", "estimated"),
            " (a documented formula or constant) or ",
            el("strong", "measured"),
            " (from a GPU profile).",
        ),
        data_table(["figure", "kind", "how"], rows),
        el("h3", "Fingerprint", id="fingerprint"),
        data_table(["key", "value"], fp_rows, cls="fingerprint"),
        [el("h3", "Notes"), el("ul", [el("li", n) for n in plan.notes])] if plan.notes else None,
        id="provenance",
    )


def _ranks_section(plan: Plan) -> Html:
    """A tensor-parallel profile's ranks and the KV budget each leaves; vLLM sizes the cache by the least."""
    if not plan.ranks:
        return Html("")
    rows = [
        [
            f"{r.rank}{' (decides)' if r.deciding else ''}",
            *(fmt_num(v) for v in (r.weights_bytes, r.activation_peak_bytes, r.encoder_cache_bytes, r.non_torch_bytes, r.cuda_graphs_bytes)),
            "" if r.communicator_bytes is None else fmt_num(r.communicator_bytes),
            fmt_num(r.available_kv_bytes),
        ]
        for r in plan.ranks
    ]
    headers = ["rank", "weights B", "activation peak B", "encoder cache B", "non-torch B", "CUDA graphs B", "NCCL B (measured)", "available KV B"]
    note = el("p", f"vLLM 0.33 gives every rank the least KV budget; spread between the ranks {plan.kv_spread_bytes:,} B", class_="note")
    return el("section", el("h2", "Tensor-parallel ranks"), data_table(headers, rows, numeric=range(1, 8)) + note, id="ranks")


@render_html.register
def _plan_html(plan: Plan) -> str:
    spec = plan.spec
    subtitle = el(
        "span",
        el("strong", plan.source.name, class_="model"),
        f" ({spec.architecture}, {plan.source.origin}) on {plan.gpu.name} · {plan.parameter_count:,} parameters, {plan.serving.dtype}",
    )
    return html_page(
        "capacity plan",
        subtitle,
        _verdict_section(plan),
        _memory_section(plan),
        _ranks_section(plan),
        _kv_section(plan),
        _budget_section(plan),
        _warmup_section(plan),
        _hazards_section(plan),
        _knobs_section(plan),
        _provenance_section(plan),
    )


# --- sweep -------------------------------------------------------------------------------------------------


@render_html.register
def _sweep_html(result: SweepResult) -> str:
    src = result.source
    defaults = asdict(ServingArgs())
    base = {k: v for k, v in asdict(result.base).items() if v != defaults[k]}
    summary = data_table(
        ["", ""],
        [
            ["grid points", f"{len(result.points):,} ({result.fitting:,} fit)"],
            ["model config sha256", src.config_sha256],
            ["architecture", result.spec.architecture],
            ["fixed knobs", ", ".join(f"{k}={v}" for k, v in base.items()) or "vLLM defaults"],
            ["capacity / vLLM semantics", f"{capacity.__version__} / " + ", ".join(dict.fromkeys(f"{p.vllm_version} ({p.vllm_rules} rules)" for p in result.points))],
            [
                "memory terms",
                "estimated offline"
                if result.profile is None
                else f"measured: profile of {result.profile.fingerprint.gpu_name} ({result.profile.fingerprint.device}), {result.profile.fingerprint.created}",
            ],
            *([["note", n] for n in result.notes]),
        ],
        cls="facts",
    )
    legend = el(
        "p",
        "Each cell: the requests the server really runs at once at max_model_len = min(max_num_seqs, requests the KV cache holds); "
        "below it, the requests the KV cache holds (concurrency.actual_requests). Darker green = more; ✗ = vLLM would not start or "
        "one request does not fit (the first error hazard is named). Every cell is a full re-plan with `capacity plan`'s semantics.",
        class_="note",
    )
    return html_page(
        "capacity sweep",
        el("span", el("strong", src.name, class_="model"), f" ({result.spec.architecture}, {src.origin})"),
        el("section", el("h2", "Sweep"), summary, id="sweep-summary"),
        el("section", el("h2", "Max concurrency heatmap"), legend, heatmap_panels(result), id="heatmap"),
    )
