"""The charts of the HTML pages: a plan's GPU memory as one stacked bar (inline SVG), a sweep's max-concurrency
heatmap (a table of coloured cells)."""

from __future__ import annotations

import math

from capacity.planning.plan import TERM_LABELS, Plan
from capacity.planning.sweep import SweepPoint, SweepResult
from capacity.units import GiB, plural
from reports.frames import unused_bytes
from reports.html_markup import Html, el, fmt_gib

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


def segments(plan: Plan) -> list[tuple[str, str, int, str]]:
    """(key, label, bytes, kind) in bar order, ending with unused (0 when the plan over-commits)."""
    segs = [(k, TERM_LABELS[k], plan.memory[k].bytes, plan.memory[k].kind) for k in BAR_ORDER if k in plan.memory]
    segs.append(("unused", "unused", max(unused_bytes(plan), 0), ""))
    return segs


SEG_CHAR = 8.2  # the widest a character of .seglabel (13 px, bold) takes in the bar's user units: labels are sized by it
MARKER_ROW = 16.0  # one row per marker label above the bar: two markers' labels never share a row


def _segment_label(label: str, size: int, w: float) -> str | None:
    """The longest of "term 1.23 GiB" and "1.23 GiB" that fits the segment's width with a margin, or None (the term
    table and the tooltip carry it)."""
    for text in (f"{label.split(' (')[0]} {size / GiB:.2f} GiB", f"{size / GiB:.2f} GiB"):
        if len(text) * SEG_CHAR + 12 <= w:
            return text
    return None


def memory_bar(plan: Plan) -> Html:
    """The GPU's memory as one stacked horizontal bar (inline SVG); hatched segments are estimates. A segment's
    label is drawn only where it fits inside the segment; each marker (requested memory, the GPU's total when the
    plan over-commits it) labels its own row above the bar, so no two labels overlap."""
    total = plan.gpu.total_memory_bytes
    segs = segments(plan)
    scale = max(total, sum(b for _, _, b, _ in segs))
    s = plan.serving
    markers: list[tuple[int, str, str]] = []  # top row first: the GPU's total (rightmost), then the requested memory left of it,
    if scale > total:  # whose label (anchored at its end, leftwards) then never crosses the total's line
        markers.append((total, f"GPU total {fmt_gib(total)}: over-committed by {fmt_gib(scale - total)}", "over"))
    if s.kv_cache_memory_bytes is None:
        markers.append((plan.requested_memory_bytes, f"requested: {s.gpu_memory_utilization} x total = {fmt_gib(plan.requested_memory_bytes)}", "req"))
    width, height = 1000.0, 44.0
    top = 10.0 + MARKER_ROW * max(len(markers), 1)
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
        tip = f"{label}: {size:,} B ({fmt_gib(size)}, {size / total:.1%} of the GPU)" + (f", {kind}" if kind else "")
        shapes.append(el("rect", el("title", tip), x=f"{x:.2f}", y=top, width=f"{w:.2f}", height=height, fill=TERM_COLOR[key], class_=f"seg seg-{key}"))
        if kind == "estimated":
            shapes.append(el("rect", x=f"{x:.2f}", y=top, width=f"{w:.2f}", height=height, fill="url(#hatch)"))
        text = _segment_label(label, size, w)
        if text is not None:
            cls = "seglabel dark" if key == "unused" else "seglabel"
            shapes.append(el("text", text, x=f"{x + w / 2:.2f}", y=top + height / 2 + 5, class_=cls))
        x += w

    for row, (at, text, cls) in enumerate(markers):
        mx = width * at / scale
        anchor = "end" if mx > width * 0.6 else "start"
        tx = mx - 4 if anchor == "end" else mx + 4
        ty = 8.0 + MARKER_ROW * (row + 1) - 4
        shapes += [
            el("line", x1=f"{mx:.2f}", x2=f"{mx:.2f}", y1=ty - 10, y2=top + height + 8, class_=f"marker {cls}"),
            el("text", text, x=f"{tx:.2f}", y=f"{ty:.0f}", class_=f"markerlabel {cls}", text_anchor=anchor),
        ]
    svg = el(
        "svg",
        el("title", f"GPU memory of {plan.gpu.name}: {total:,} B"),
        shapes,
        viewBox=f"0 0 {width:.0f} {top + height + 14:.0f}",
        role="img",
        class_="bar",
    )
    return svg


# --- sweep -------------------------------------------------------------------------------------------------


def _cell(p: SweepPoint, top: int) -> Html:
    tip = (
        f"{p.gpu}, {p.layout()}, max_num_seqs {p.max_num_seqs}, max_model_len {p.max_model_len}: "
        f"{p.verdict}; KV holds {plural(p.actual_requests, 'request')} (vLLM reports {p.concurrency_vllm_reported}x), {p.num_blocks:,} blocks"
        + (f"; errors: {p.errors}" if p.errors else "")
    )
    if not p.fits:
        first = p.errors.split()[0] if p.errors else "does_not_fit"
        return el("td", el("span", "✗ does not fit", class_="v"), el("span", first, class_="why"), class_="nofit", title=tip)
    # log scale: 1 request -> lightest, the grid's best -> darkest
    level = 0.0 if top <= 1 else math.log(max(p.total_max_concurrent_requests, 1)) / math.log(top)
    light = 92 - 55 * level
    color = "#ffffff" if light < 60 else "#17301b"
    style = f"background:hsl(140,45%,{light:.0f}%);color:{color}"
    capped = " (max_num_seqs)" if p.max_num_seqs < p.actual_requests else ""
    return el(
        "td",
        el("span", f"✓ {p.total_max_concurrent_requests}", class_="v"),
        el("span", (f"{p.data_parallel_size} x {p.max_concurrent_requests}; " if p.data_parallel_size > 1 else "") + f"KV {p.actual_requests}{capped}", class_="why"),
        class_="fit",
        style=style,
        title=tip,
    )


def heatmap_panels(result: SweepResult) -> list[Html]:
    top = max((p.total_max_concurrent_requests for p in result.points if p.fits), default=1)
    panels: dict[tuple[str, int | None, int | None, int | None, str], list[SweepPoint]] = {}
    for p in result.points:
        panels.setdefault((p.gpu, p.requested_tensor_parallel_size, p.requested_pipeline_parallel_size, p.requested_data_parallel_size, p.vllm_version), []).append(p)
    several = len({p.vllm_version for p in result.points}) > 1
    out = []
    for (gpu, _tp, _pp, _dp, version), points in panels.items():
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
                el("h3", f"{gpu} · {first.layout()}" + (f" · vLLM {version}" if several else ""), el("span", f" {fits} of {len(points)} fit", class_="note")),
                el("table", el("thead", head), el("tbody", body), class_="heat"),
                class_="panel",
            )
        )
    return out
