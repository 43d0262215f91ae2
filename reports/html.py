"""A plan (or a sweep) as one self-contained HTML page: inline CSS and SVG, no script, no network.

Every text is escaped: pages are built with `el()`, which escapes each `str` child and attribute
value; only `Html` values (markup built by `el()` itself) pass through unescaped.
`render_html(subject)` dispatches on the subject's type; a GPU profile can register its own page.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from dataclasses import asdict
from functools import singledispatch
from typing import Any

import capacity
from capacity.planning.plan import ERROR, INFO, TERM_LABELS, WARNING, Plan
from capacity.planning.sweep import SweepPoint, SweepResult
from capacity.serving.config import ServingArgs
from capacity.units import GiB
from reports.frames import fingerprint, unused_bytes


class Html(str):
    """Markup that is already safe: built by `el()` or from constants of this module.

    Html + Html stays Html; Html + str escapes the str.
    """

    def __add__(self, other: str) -> Html:
        return Html(str.__add__(self, other if isinstance(other, Html) else esc(other)))


def esc(value: object) -> Html:
    return Html(html.escape(str(value), quote=True))


def _children(items: Iterable[Any]) -> str:
    out = []
    for item in items:
        if item is None:
            continue
        if isinstance(item, Html):
            out.append(item)
        elif isinstance(item, (str, int, float)):
            out.append(esc(item))
        else:
            out.append(_children(item))
    return "".join(out)


def el(tag: str, *children: Any, **attrs: object) -> Html:
    """<tag attrs>children</tag>; `class_` is `class`, `data_x` is `data-x`; None/False attributes are left out."""
    parts = [tag]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        name = key.rstrip("_").replace("_", "-")
        parts.append(name if value is True else f'{name}="{esc(value)}"')
    return Html(f"<{' '.join(parts)}>{_children(children)}</{tag}>")


def _num(n: int | float) -> str:
    return f"{n:,}" if isinstance(n, int) else f"{n:,.2f}"


def _gib(n: int | float) -> str:
    return f"{n / GiB:,.2f} GiB"


def _table(headers: list[str], rows: Iterable[list[Any]], *, cls: str = "", numeric: Iterable[int] = ()) -> Html:
    right = set(numeric)
    head = el("thead", el("tr", [el("th", h, class_="num" if i in right else None) for i, h in enumerate(headers)]))
    body = el(
        "tbody",
        [
            el(
                "tr",
                [
                    cell if isinstance(cell, Html) and cell.startswith("<td") else el("td", cell, class_="num" if i in right else None)
                    for i, cell in enumerate(row)
                ],
            )
            for row in rows
        ],
    )
    return el("table", head, body, class_=cls or None)


def _page(title: str, subtitle: Html, *sections: Html) -> str:
    head = (
        Html('<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">') + el("title", title) + Html(f"<style>{CSS}</style>")
    )
    body = el(
        "body",
        el("header", el("h1", title), el("p", subtitle, class_="sub")),
        el("main", *sections),
        el(
            "footer",
            f"capacity {capacity.__version__} · vLLM {capacity.VLLM_VERSION} semantics (Model Runner V2) · self-contained page: no scripts, no network",
        ),
    )
    return "<!DOCTYPE html>\n" + el("html", el("head", head), body, lang="en") + "\n"


@singledispatch
def render_html(subject: Any) -> str:
    """The self-contained HTML page of a subject."""
    raise TypeError(f"no HTML report for {type(subject).__name__}")


# --- plan ------------------------------------------------------------------------------------------------

TERM_COLOR = {
    "weights": "#4e79a7",
    "load_buffers": "#a0cbe8",
    "activation_peak": "#f28e2b",
    "encoder_cache": "#e15759",
    "non_torch": "#76b7b2",
    "cuda_graphs": "#59a14f",
    "kv_cache": "#edc948",
    "cuda_context": "#b07aa1",
    "collectives": "#9c755f",
    "block_tables": "#ff9da7",
    "unused": "#e4e4e4",
}
BAR_ORDER = ("weights", "load_buffers", "activation_peak", "encoder_cache", "non_torch", "cuda_graphs", "kv_cache", "cuda_context", "collectives", "block_tables")
KIND_NOTE = {
    "exact": "fixed by the architecture and the knobs",
    "estimated": "a documented formula or constant",
    "measured": "from a GPU profile",
}


def _kind(kind: str) -> Html:
    return el("span", kind, class_=f"kind kind-{kind}", title=KIND_NOTE.get(kind, ""))


def _segments(plan: Plan) -> list[tuple[str, str, int, str]]:
    """(key, label, bytes, kind) in bar order, ending with unused (0 when the plan over-commits)."""
    segs = [(k, TERM_LABELS[k], plan.memory[k].bytes, plan.memory[k].kind) for k in BAR_ORDER if k in plan.memory]
    segs.append(("unused", "unused", max(unused_bytes(plan), 0), ""))
    return segs


def memory_bar(plan: Plan) -> Html:
    """The GPU's memory as one stacked horizontal bar (inline SVG); hatched segments are estimates."""
    total = plan.gpu.total_memory_bytes
    segs = _segments(plan)
    scale = max(total, sum(b for _, _, b, _ in segs))
    width, top, height = 1000.0, 26.0, 44.0
    shapes: list[Html] = [
        Html(
            '<defs><pattern id="hatch" width="7" height="7" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
            '<rect width="2.5" height="7" fill="#ffffff" fill-opacity="0.45"></rect></pattern></defs>'
        )
    ]
    x = 0.0
    for key, label, size, kind in segs:
        w = width * size / scale
        if w <= 0:
            continue
        tip = f"{label}: {size:,} B ({_gib(size)}, {size / total:.1%} of the GPU)" + (f", {kind}" if kind else "")
        shapes.append(el("rect", el("title", tip), x=f"{x:.2f}", y=top, width=f"{w:.2f}", height=height, fill=TERM_COLOR[key], class_=f"seg seg-{key}"))
        if kind == "estimated":
            shapes.append(el("rect", x=f"{x:.2f}", y=top, width=f"{w:.2f}", height=height, fill="url(#hatch)"))
        if w >= 90:
            cls = "seglabel dark" if key == "unused" else "seglabel"
            shapes.append(el("text", f"{label.split(' (')[0]} {size / GiB:.1f}G", x=f"{x + w / 2:.2f}", y=top + height / 2 + 5, class_=cls))
        x += w

    def marker(at: int, text: str, cls: str) -> list[Html]:
        mx = width * at / scale
        anchor = "end" if mx > width * 0.6 else "start"
        tx = mx - 4 if anchor == "end" else mx + 4
        return [
            el("line", x1=f"{mx:.2f}", x2=f"{mx:.2f}", y1=8, y2=top + height + 8, class_=f"marker {cls}"),
            el("text", text, x=f"{tx:.2f}", y=18, class_=f"markerlabel {cls}", text_anchor=anchor),
        ]

    s = plan.serving
    if s.kv_cache_memory_bytes is None:
        shapes += marker(plan.requested_memory_bytes, f"requested: {s.gpu_memory_utilization} x total = {_gib(plan.requested_memory_bytes)}", "req")
    if scale > total:
        shapes += marker(total, f"GPU total {_gib(total)}: over-committed by {_gib(scale - total)}", "over")
    svg = el(
        "svg",
        el("title", f"GPU memory of {plan.gpu.name}: {total:,} B"),
        shapes,
        viewBox=f"0 0 {width:.0f} {top + height + 14:.0f}",
        role="img",
        class_="bar",
    )
    return svg


def _memory_section(plan: Plan) -> Html:
    total = plan.gpu.total_memory_bytes
    rows = []
    for key, label, size, kind in _segments(plan):
        method = plan.memory[key].method if key in plan.memory else "total - every term above"
        rows.append(
            [
                Html(el("td", el("span", class_="swatch", style=f"background:{TERM_COLOR[key]}"), label)),
                _num(size),
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
            _num(plan.requested_memory_bytes),
            f"{plan.requested_memory_bytes / GiB:,.2f}",
            f"{plan.requested_memory_bytes / total:.1%}",
            "",
            "ceil(total x gpu_memory_utilization)",
        ],
        [
            "non-KV (vLLM subtracts)",
            _num(plan.non_kv_bytes),
            f"{plan.non_kv_bytes / GiB:,.2f}",
            f"{plan.non_kv_bytes / total:.1%}",
            "",
            "weights + activation peak + encoder cache + non-torch + CUDA graphs",
        ],
        [
            "available KV cache memory",
            _num(plan.kv.available_bytes),
            f"{plan.kv.available_bytes / GiB:,.2f}",
            f"{plan.kv.available_bytes / total:.1%}",
            "",
            "vLLM log: Available KV cache memory",
        ],
    ]
    over = [] if unused >= 0 else [el("p", f"The plan over-commits the GPU by {-unused:,} B ({_gib(-unused)}).", class_="bad")]
    return el(
        "section",
        el("h2", "GPU memory (per rank)"),
        el("p", f"{plan.gpu.label}: {total:,} B ({_gib(total)}) — {plan.gpu.provenance}", class_="note"),
        memory_bar(plan),
        over,
        _table(["term", "bytes", "GiB", "of GPU", "kind", "how"], rows, cls="terms", numeric=(1, 2, 3)),
        _table(["budget", "bytes", "GiB", "of GPU", "", "how"], totals, cls="terms totals", numeric=(1, 2, 3)),
        el("p", "Hatched bar segments are estimates; solid ones are exact or measured.", class_="note"),
        id="memory",
    )


def _verdict_section(plan: Plan) -> Html:
    c, s = plan.concurrency, plan.serving
    if plan.fits:
        head = el("p", f"FITS: {plan.concurrency_sentence()}", class_="big")
    else:
        head = el("p", "DOES NOT FIT: " + ", ".join(h.id for h in plan.hazards if h.severity == ERROR), class_="big")
    figures = _table(
        ["figure", "value", "meaning"],
        [
            ["actual concurrency", f"{c.actual:.2f}x = {c.actual_requests} requests", "usable blocks (null block excluded) / blocks a request really holds"],
            ["vLLM-reported concurrency", f"{c.vllm_reported:.2f}x", "vLLM's log line: num_blocks / blocks per request it charges"],
            ["KV cache tokens (vLLM log)", _num(c.tokens_vllm_reported), "int(vLLM concurrency x max_model_len)"],
            ["longest request served", f"{plan.max_model_len_served:,} tokens", "max_model_len, or the longest one request's KV fits in"],
            ["max_num_seqs", _num(s.max_num_seqs), "the scheduler's cap on concurrent requests"],
            [
                "requests run at once",
                _num(plan.max_concurrent_requests),
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
    out = [el("pre", el("code", s.command))]
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
                _num(g.group.page_size_bytes),
                g.blocks_per_request_vllm,
                g.blocks_per_request_actual,
                f"{g.block_table_width_blocks} ({g.block_table_width_blocks * g.group.spec.block_size:,} tokens)",
                f"{g.block_table_width_blocks_pre_fix} ({g.block_table_width_blocks_pre_fix * g.group.spec.block_size:,} tokens)",
            ]
        )
    table = _table(
        ["group", "kind", "layers", "KV heads/rank", "head size", "page B", "blocks/req vLLM", "blocks/req actual", "block table width", "width before #46753"],
        rows,
        numeric=(0, 3, 4, 5, 6, 7),
    )
    facts = _table(
        ["quantity", "value"],
        [
            ["bytes per block (largest group's summed page)", _num(kv.bytes_per_block)],
            ["num_blocks (incl. the null block)", _num(kv.num_blocks)],
            ["blocks per request: vLLM / actual", f"{kv.blocks_per_request_vllm} / {kv.blocks_per_request_actual}"],
            ["bytes one request needs (vLLM's startup check)", _num(kv.needed_for_one_request_bytes)],
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
        rows = [[m, b.allowed_limits[m], _num(t), b.max_items_per_prompt[m], b.max_items_per_batch[m]] for m, t in b.max_tokens_per_item.items()]
        note = el(
            "p",
            f"encoder compute budget {b.encoder_compute_budget:,} tokens, encoder cache {b.encoder_cache_size:,} tokens; "
            f"profiled with {b.profile_items} x {b.modality_with_max_tokens} items of {b.profile_tokens_per_item:,} tokens",
            class_="note",
        )
        body = _table(["modality", "limit per prompt", "tokens per item", "items per prompt", "items per batch"], rows, numeric=(1, 2, 3, 4)) + note
    return el("section", el("h2", "Encoder budget (MultiModalBudget)"), body, id="budget")


def _warmup_section(plan: Plan) -> Html:
    w = plan.warmup
    rows = [
        ["prompt_len", w.prompt_len, "2 + k (PR #40746)"],
        ["decode query", w.decode_query_len, "1 + k"],
        ["decode steps", w.num_decode_steps, "3, or 5 with speculation"],
        ["decode_len", w.decode_len, "prompt_len + steps x (1 + k)"],
        ["encoder length per request", _num(w.max_encoder_len), w.max_encoder_len_source],
        ["blocks per request (per group)", ", ".join(str(n) for n in w.blocks_per_request), "cross-attention reserves the encoder length (PR #47308)"],
        [
            "requests",
            f"{w.num_reqs} (before the KV cap {w.num_reqs_before_kv_cap})",
            "min(max_num_seqs, max_num_batched_tokens // prompt_len, (num_blocks - 1) // blocks per request)",
        ],
    ]
    return el("section", el("h2", "Warmup plan"), _table(["step", "value", "rule"], rows), id="warmup")


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
    return el("section", el("h2", "Knobs"), _table(["knob", "value", ""], rows), id="knobs")


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
        _table(["figure", "kind", "how"], rows),
        el("h3", "Fingerprint", id="fingerprint"),
        _table(["key", "value"], fp_rows, cls="fingerprint"),
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
            *(_num(v) for v in (r.weights_bytes, r.activation_peak_bytes, r.encoder_cache_bytes, r.non_torch_bytes, r.cuda_graphs_bytes)),
            "" if r.communicator_bytes is None else _num(r.communicator_bytes),
            _num(r.available_kv_bytes),
        ]
        for r in plan.ranks
    ]
    headers = ["rank", "weights B", "activation peak B", "encoder cache B", "non-torch B", "CUDA graphs B", "NCCL B (measured)", "available KV B"]
    note = el("p", f"vLLM 0.33 gives every rank the least KV budget; spread between the ranks {plan.kv_spread_bytes:,} B", class_="note")
    return el("section", el("h2", "Tensor-parallel ranks"), _table(headers, rows, numeric=range(1, 8)) + note, id="ranks")


@render_html.register
def _plan_html(plan: Plan) -> str:
    spec = plan.spec
    subtitle = el(
        "span",
        el("strong", plan.source.name, class_="model"),
        f" ({spec.architecture}, {plan.source.origin}) on {plan.gpu.name} · {plan.parameter_count:,} parameters, {plan.serving.dtype}",
    )
    return _page(
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


def _cell(p: SweepPoint, top: int) -> Html:
    tip = (
        f"{p.gpu}, TP {p.tensor_parallel_size}, max_num_seqs {p.max_num_seqs}, max_model_len {p.max_model_len}: "
        f"{p.verdict}; KV holds {p.actual_requests} requests (vLLM reports {p.concurrency_vllm_reported}x), {p.num_blocks:,} blocks"
        + (f"; errors: {p.errors}" if p.errors else "")
    )
    if not p.fits:
        first = p.errors.split()[0] if p.errors else "does_not_fit"
        return el("td", el("span", "✗ does not fit", class_="v"), el("span", first, class_="why"), class_="nofit", title=tip)
    # log scale: 1 request -> lightest, the grid's best -> darkest
    level = 0.0 if top <= 1 else math.log(max(p.max_concurrent_requests, 1)) / math.log(top)
    light = 92 - 55 * level
    color = "#ffffff" if light < 60 else "#17301b"
    style = f"background:hsl(140,45%,{light:.0f}%);color:{color}"
    capped = " (max_num_seqs)" if p.max_num_seqs < p.actual_requests else ""
    return el(
        "td",
        el("span", f"✓ {p.max_concurrent_requests}", class_="v"),
        el("span", f"KV {p.actual_requests}{capped}", class_="why"),
        class_="fit",
        style=style,
        title=tip,
    )


def _panels(result: SweepResult) -> list[Html]:
    top = max((p.max_concurrent_requests for p in result.points if p.fits), default=1)
    panels: dict[tuple[str, int | None], list[SweepPoint]] = {}
    for p in result.points:
        panels.setdefault((p.gpu, p.requested_tensor_parallel_size), []).append(p)
    out = []
    for (gpu, _tp), points in panels.items():
        lens: list[int | None] = []
        seqs: list[int | None] = []
        for p in points:
            if p.requested_max_model_len not in lens:
                lens.append(p.requested_max_model_len)
            if p.requested_max_num_seqs not in seqs:
                seqs.append(p.requested_max_num_seqs)
        grid = {(p.requested_max_num_seqs, p.requested_max_model_len): p for p in points}

        def axis(value: int | None, effective: int) -> str:
            if value is None:
                return f"{effective:,} (default)"
            return "auto" if value == -1 else f"{value:,}"

        first = points[0]
        head = el(
            "tr",
            el("th", "seqs \\ len", class_="corner", title="rows: max_num_seqs, columns: max_model_len"),
            [el("th", axis(v, grid[(seqs[0], v)].max_model_len)) for v in lens],
        )
        body = [el("tr", el("th", axis(s, grid[(s, lens[0])].max_num_seqs)), [_cell(grid[(s, v)], top) for v in lens]) for s in seqs]
        fits = sum(p.fits for p in points)
        out.append(
            el(
                "section",
                el("h3", f"{gpu} · TP {first.tensor_parallel_size}", el("span", f" {fits} of {len(points)} fit", class_="note")),
                el("table", el("thead", head), el("tbody", body), class_="heat"),
                class_="panel",
            )
        )
    return out


@render_html.register
def _sweep_html(result: SweepResult) -> str:
    src = result.source
    defaults = asdict(ServingArgs())
    base = {k: v for k, v in asdict(result.base).items() if v != defaults[k]}
    summary = _table(
        ["", ""],
        [
            ["grid points", f"{len(result.points):,} ({result.fitting:,} fit)"],
            ["model config sha256", src.config_sha256],
            ["architecture", result.spec.architecture],
            ["fixed knobs", ", ".join(f"{k}={v}" for k, v in base.items()) or "vLLM defaults"],
            ["capacity / vLLM semantics", f"{capacity.__version__} / {capacity.VLLM_VERSION}"],
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
    return _page(
        "capacity sweep",
        el("span", el("strong", src.name, class_="model"), f" ({result.spec.architecture}, {src.origin})"),
        el("section", el("h2", "Sweep"), summary, id="sweep-summary"),
        el("section", el("h2", "Max concurrency heatmap"), legend, _panels(result), id="heatmap"),
    )


CSS = """
:root{--fg:#1d232b;--muted:#5d6875;--line:#d9dee4;--bg:#f6f7f9;--ok:#1f7a3a;--bad:#b3261e;--warn:#a15c00}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{padding:18px 28px 10px;background:#fff;border-bottom:1px solid var(--line)}
h1{margin:0;font-size:22px}
.sub{margin:4px 0 0;color:var(--muted)}
.model{color:var(--fg);word-break:break-all}
main{padding:14px 28px;display:grid;gap:14px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;padding:12px 16px}
h2{margin:0 0 8px;font-size:17px}
h3{margin:12px 0 6px;font-size:14px}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:var(--muted);font-size:12.5px}
.big{font-size:19px;font-weight:700;margin:4px 0 8px}
.verdict.fits{border-left:6px solid var(--ok)}
.verdict.fits .big{color:var(--ok)}
.verdict.nofit{border-left:6px solid var(--bad)}
.verdict.nofit .big,.bad{color:var(--bad)}
.good{color:var(--ok)}
pre{background:#111820;color:#e8edf2;padding:10px 12px;border-radius:6px;white-space:pre-wrap;word-break:break-all;margin:4px 0}
svg.bar{width:100%;height:auto;display:block;margin:6px 0}
.seglabel{font-size:13px;fill:#fff;text-anchor:middle;font-weight:600;paint-order:stroke;stroke:rgba(0,0,0,.35);stroke-width:2px}
.seglabel.dark{fill:#4a535e;stroke:none}
.marker{stroke:#1d232b;stroke-width:2;stroke-dasharray:5 3}
.marker.over{stroke:var(--bad)}
.markerlabel{font-size:12px;fill:#1d232b}
.markerlabel.over{fill:var(--bad)}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.kind{display:inline-block;padding:0 6px;border-radius:9px;font-size:12px;border:1px solid}
.kind-exact{color:var(--ok);border-color:var(--ok)}
.kind-estimated{color:var(--warn);border-color:var(--warn)}
.kind-measured{color:#0b6aa2;border-color:#0b6aa2}
.totals td{color:var(--muted)}
ul.hazards{list-style:none;padding:0;margin:0}
li.hazard{border:1px solid var(--line);border-left-width:5px;border-radius:6px;padding:6px 10px;margin:6px 0}
li.hazard p{margin:4px 0}
li.hazard-error{border-left-color:var(--bad)}
li.hazard-warning{border-left-color:var(--warn)}
li.hazard-info{border-left-color:#8a94a0}
.sev{display:inline-block;font-size:11px;text-transform:uppercase;font-weight:700;margin-right:8px;padding:0 6px;border-radius:4px;color:#fff}
.sev-error{background:var(--bad)}
.sev-warning{background:var(--warn)}
.sev-info{background:#8a94a0}
.fix{color:var(--muted)}
table.heat{width:auto}
table.heat td{min-width:96px;text-align:center;border:2px solid #fff}
table.heat .v{display:block;font-weight:700;font-size:15px}
table.heat .why{display:block;font-size:11px;opacity:.85}
td.nofit{background:repeating-linear-gradient(45deg,#f6d5d2,#f6d5d2 6px,#fbe9e7 6px,#fbe9e7 12px);color:var(--bad)}
.panel{display:inline-block;margin:0 10px 10px 0;vertical-align:top}
footer{padding:8px 28px 20px;color:var(--muted);font-size:12px}
"""
