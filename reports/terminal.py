"""A `Plan` as a rich terminal report."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from capacity.memory.measured_profile import MemoryProfile
from capacity.planning.plan import ERROR, INFO, MEMORY_TERMS, TERM_LABELS, WARNING, Plan
from capacity.planning.sweep import SweepPoint, SweepResult
from capacity.planning.verify_result import NO_REQUESTS, SLACK_EXCEEDS_HEADROOM, VERIFIED, WITHIN_ALLOCATOR_SLACK, VerifyResult
from capacity.units import GiB, MiB, plural
from reports.serve_line import wrapped

KIND_STYLE = {"exact": "green", "estimated": "yellow", "measured": "cyan"}
SEVERITY_STYLE = {ERROR: "bold red", WARNING: "yellow", INFO: "dim"}


def _gib(n: int | float) -> str:
    return f"{n / GiB:,.2f}"


def _header(plan: Plan) -> Table:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    src, spec, s = plan.source, plan.spec, plan.serving
    t.add_row("model", Text(f"{src.name}  ({spec.architecture}, {src.origin})"))
    t.add_row("parameters", f"{plan.parameter_count:,}  dtype {s.dtype}")
    t.add_row("GPU", Text(f"{plan.gpu.label}: {plan.gpu.total_memory_bytes:,} B ({_gib(plan.gpu.total_memory_bytes)} GiB, {plan.gpu.provenance})"))
    defaulted = set(s.defaulted)

    def knob(name: str, value: object) -> str:
        if name == "max_model_len" and s.auto_fit_max_model_len:
            return f"{value} (auto: " + ("fitted to memory)" if s.max_model_len < spec.derived_max_model_len else "the model's limit, which fits)")
        if name == "block_size" and (groups := plan.group_block_sizes()) != [s.block_size] * len(groups):
            return f"{value}" + (" (vLLM default)" if name in defaulted else "") + f"; groups page in {'/'.join(str(b) for b in dict.fromkeys(groups))}-token blocks"
        return f"{value}" + (" (vLLM default)" if name in defaulted else "")

    t.add_row(
        "knobs",
        Text(
            f"max_model_len {knob('max_model_len', s.max_model_len)} | max_num_seqs {knob('max_num_seqs', s.max_num_seqs)} | "
            f"max_num_batched_tokens {knob('max_num_batched_tokens', s.max_num_batched_tokens)} | "
            f"gpu_memory_utilization {knob('gpu_memory_utilization', s.gpu_memory_utilization)} | block_size {knob('block_size', s.block_size)} | "
            f"TP {s.tensor_parallel_size}"
            + (f" x PP {s.pipeline_parallel_size}" if s.pipeline_parallel_size > 1 else "")
            + f" | kv dtype {s.kv_cache_dtype} | spec tokens {s.num_speculative_tokens} | "
            f"compile cache {s.compile_cache}" + (" (first start)" if s.compile_cache == "cold" else "")
        ),
    )
    if plan.placement is not None:  # --data-parallel-size / nodes: every figure below is one rank's of one engine
        dp = plan.data_parallel_size
        engines = f"; {dp} engines x {plan.max_concurrent_requests:,} requests = {plan.total_max_concurrent_requests:,} at once" if dp > 1 else ""
        experts = ""
        if plan.moe and dp > 1:
            ranks = s.tensor_parallel_size * dp
            experts = f"; MoE experts {'divided over' if s.enable_expert_parallel else 'each split over'} TP x DP = {ranks} ranks"
        t.add_row("parallel", Text(f"{plan.placement.describe()}{engines}{experts}; figures per rank of one engine"))
    for note in plan.notes:
        t.add_row("note", Text(note, style="italic"))
    return t


def _memory(plan: Plan, wide: bool) -> Table:
    limiting = next((st for st in plan.stages if st.limiting), None)
    title = "GPU memory (per rank)" if limiting is None else f"GPU memory (per rank of pipeline stage {limiting.rank}, whose blocks set the pool)"
    t = Table(title=title, title_justify="left")
    t.add_column("term")
    t.add_column("bytes", justify="right")
    t.add_column("GiB", justify="right")
    t.add_column("kind")
    if wide:
        t.add_column("how", overflow="fold")
    else:
        t.caption = "how each term was obtained: widen the terminal to 140 columns, or --json (memory.<term>.method)"
        t.caption_justify = "left"

    def row(*cells: str | Text) -> None:
        t.add_row(*(cells if wide else cells[:4]))

    for key in (*MEMORY_TERMS, "block_tables"):
        term = plan.memory.get(key)
        if term is None:
            continue
        row(TERM_LABELS[key], f"{term.bytes:,}", _gib(term.bytes), Text(term.kind, style=KIND_STYLE[term.kind]), Text(term.method))
    t.add_section()
    row("requested (total x utilization)", f"{plan.requested_memory_bytes:,}", _gib(plan.requested_memory_bytes), "", "ceil(total x gpu_memory_utilization)")
    row("non-KV (vLLM subtracts)", f"{plan.non_kv_bytes:,}", _gib(plan.non_kv_bytes), "", "weights + activation peak + encoder cache + non-torch + CUDA graphs")
    row("available KV cache memory", f"{plan.kv.available_bytes:,}", _gib(plan.kv.available_bytes), "", "vLLM log: Available KV cache memory")
    return t


def _kv(plan: Plan) -> Table:
    # headers of short words on separate lines, numbers never wrapped, kinds spelt with spaces: at 80 columns the table
    # fits whole (the widest case, a hybrid model's mamba pages, leaves a few columns spare)
    t = Table(title="KV cache groups and block tables", title_justify="left", caption_justify="left")
    for col in ("group", "kind", "layers", "page B", "blocks/\nreq\nvLLM", "blocks/\nreq\nactual", "table\nwidth", "width\nbefore\n#46753"):
        t.add_column(col, justify="left" if col in ("kind", "layers") else "right", no_wrap=col not in ("kind", "layers"))
    for i, g in enumerate(plan.kv.groups):
        layers = f"{g.group.num_layers}" + (f"+{g.group.num_padding_layers} pad" if g.group.num_padding_layers else "")
        t.add_row(
            str(i),
            g.group.kind.replace("_", " ") + (f" ({window:,})" if (window := g.group.spec.describe()["sliding_window"]) else ""),
            layers,
            f"{g.group.page_size_bytes:,}",
            str(g.blocks_per_request_vllm),
            str(g.blocks_per_request_actual),
            str(g.block_table_width_blocks),
            str(g.block_table_width_blocks_pre_fix),
        )
    c = plan.concurrency
    t.caption = (
        f"bytes_per_block {plan.kv.bytes_per_block:,} | num_blocks {plan.kv.num_blocks:,} (incl. null block) | "
        f"vLLM: {c.tokens_vllm_reported:,} tokens, {c.vllm_reported:.2f}x | actual {c.actual:.2f}x = {plural(c.actual_requests, 'request')} at max_model_len | "
        f"block tables cover {plan.kv.block_table_max_len:,} tokens"
    )
    why = plan.kv_tokens_explained()
    if why:
        t.caption += f" | vLLM's tokens = {c.vllm_reported:.2f}x x max_model_len {plan.serving.max_model_len:,}, not blocks x block size: {why}"
    return t


def _budget_warmup(plan: Plan) -> Table:
    b, w = plan.budget, plan.warmup
    t = Table(title="Encoder budget (MultiModalBudget, enable_cache=False) and warmup", title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    if b.max_tokens_per_item:
        t.add_row("max tokens per item", ", ".join(f"{m} {n:,}" for m, n in b.max_tokens_per_item.items()))
        t.add_row("encoder compute budget / cache size", f"{b.encoder_compute_budget:,} / {b.encoder_cache_size:,} tokens")
        t.add_row("items per prompt / per batch", ", ".join(f"{m} {b.max_items_per_prompt[m]} / {b.max_items_per_batch[m]}" for m in b.max_tokens_per_item))
        t.add_row("profiled with", f"{b.profile_items} x {b.modality_with_max_tokens} items of {b.profile_tokens_per_item:,} tokens")
    else:
        t.add_row("encoder budget", "none (no multimodal inputs)")
    t.add_row("warmup", f"prompt_len {w.prompt_len}, decode query {w.decode_query_len}, decode_len {w.decode_len}, {w.num_decode_steps} decode steps")
    t.add_row("warmup requests", f"{w.num_reqs} (before the KV cap {w.num_reqs_before_kv_cap}); blocks per request {list(w.blocks_per_request)}")
    if w.max_encoder_len:
        t.add_row("warmup encoder length", f"{w.max_encoder_len:,} ({w.max_encoder_len_source})")
    return t


def _hazards(plan: Plan, width: int) -> Table | Text:
    """A table when the terminal is wide enough to give finding and fix room beside the whole id; else one block
    per hazard (severity and id on a line, finding and fix below). An id is never cut or wrapped: scripts grep it."""
    if not plan.hazards:
        return Text("no hazards found", style="green")
    id_width = max(len(h.id) for h in plan.hazards)
    if width >= id_width + 90:
        t = Table(title="Hazards", title_justify="left")
        t.add_column("severity", no_wrap=True)
        t.add_column("id", no_wrap=True, min_width=id_width)
        t.add_column("finding", overflow="fold")
        t.add_column("fix", overflow="fold")
        for h in plan.hazards:
            t.add_row(Text(h.severity, style=SEVERITY_STYLE[h.severity]), h.id, Text(h.message), Text(h.fix))
        return t
    t = Table.grid(padding=(0, 1))
    t.add_column(no_wrap=True)
    t.add_column(overflow="fold")
    t.title, t.title_justify = "Hazards", "left"
    for h in plan.hazards:
        t.add_row(Text(h.severity, style=SEVERITY_STYLE[h.severity]), Text(h.id, style="bold", no_wrap=True))
        t.add_row("", Text(h.message))
        t.add_row("", Text("fix: " + h.fix))
    return t


def _verdict(plan: Plan, width: int, nearest: list[str] | None = None) -> Panel:
    if plan.fits:
        dp = plan.data_parallel_size
        engines = f"; {dp} DP engines run {plan.total_max_concurrent_requests:,}" if dp > 1 else ""
        line = Text(f"FITS: {plan.concurrency_sentence()}{engines}", style="bold green")
    else:
        errors = [h.id for h in plan.hazards if h.severity == ERROR]
        line = Text(f"DOES NOT FIT: {', '.join(errors)}", style="bold red")
    # a plan no knob fix makes start shows the nearest configuration that fits (capacity/planning/fit.py nearest_fit)
    # its serve line's rows stay whole (broken between flags); the last row, what it changes, wraps as prose
    suggested = [*(Text(t, no_wrap=True, overflow="fold") for t in nearest[:-1]), Text(nearest[-1])] if nearest else _suggested(plan, width - 4)
    body = Group(line, *suggested)
    return Panel(body, title="verdict", title_align="left")


def _suggested(plan: Plan, width: int) -> list[Text]:
    """The suggestion, its `vllm serve` line broken only between flags (a flag and its value stay on one line)."""
    s = plan.suggestion
    if s.command is None:
        return [Text("suggested: " + s.describe())]
    lines = [Text(text, no_wrap=True, overflow="fold") for text in wrapped(s.command, width, first_prefix="suggested:")]
    if s.applied:
        lines.append(Text(f"(applies the fixes of {', '.join(s.applied)})"))
    return lines


RANK_TERMS = ("weights", "activation peak", "encoder cache", "non-torch", "CUDA graphs", "NCCL (measured)", "available KV")


def _ranks(plan: Plan, width: int) -> Table:
    """A tensor-parallel profile's ranks: each one's measured terms and the KV budget it leaves; vLLM takes the least.
    One row per rank where the terminal is wide enough; else one row per term and a column per rank, in bytes where
    the columns fit, else in MiB (one decimal), so no header or figure is cut."""
    title = f"tensor-parallel ranks (vLLM sizes the KV cache by the least; spread {plan.kv_spread_bytes:,} B)"
    values = {
        r.rank: (r.weights_bytes, r.activation_peak_bytes, r.encoder_cache_bytes, r.non_torch_bytes, r.cuda_graphs_bytes, r.communicator_bytes, r.available_kv_bytes)
        for r in plan.ranks
    }
    cells = {rank: [f"{v:,}" if v is not None else "" for v in vs] for rank, vs in values.items()}
    widest = max(len(c) for cs in cells.values() for c in cs)
    if width >= 2 + sum(max(len(h), widest) + 3 for h in ("rank", *RANK_TERMS)) + 10:
        t = Table(title=title, title_justify="left")
        for col in ("rank", *RANK_TERMS):
            t.add_column(col, justify="right")
        for r in plan.ranks:
            t.add_row(f"{r.rank}{' (decides)' if r.deciding else ''}", *cells[r.rank])
        return t
    if 1 + (16 + 3) + len(plan.ranks) * (widest + 3) > width:
        title += "; MiB"
        cells = {rank: [f"{v / MiB:,.1f}" if v is not None else "" for v in vs] for rank, vs in values.items()}
    t = Table(title=title, title_justify="left")
    t.add_column("term")
    for r in plan.ranks:
        t.add_column(f"rank {r.rank}" + ("\n(decides)" if r.deciding else ""), justify="right", no_wrap=True)
    for i, term in enumerate(RANK_TERMS):
        t.add_row(term, *(cells[r.rank][i] for r in plan.ranks))
    return t


def _stages(plan: Plan) -> Table:
    """Each pipeline stage as its own worker (GiB per rank), its blocks on its own memory; the smallest sets the pool."""
    limiting = next(st for st in plan.stages if st.limiting)
    t = Table(
        title=f"pipeline stages (each its own worker; stage {limiting.rank}'s {limiting.kv.num_blocks:,} blocks set the engine's pool)",
        title_justify="left",
        caption="GiB per rank; * sets the pool; bytes and bytes per block in --json (stages[].memory, stages[].kv)",
        caption_justify="left",
    )
    for col in ("stage", "layers", "weights", "act.\npeak", "PP\nrecv", "non-KV", "KV\navail", "blocks\n(own)"):
        t.add_column(col, justify="left" if col in ("stage", "layers") else "right", no_wrap=True)
    for st in plan.stages:
        extras = ("emb " if st.first else "") + ("head" if st.last else "")
        t.add_row(
            f"{st.rank}" + ("*" if st.limiting else ""),
            f"{st.start_layer}-{st.end_layer - 1}" + (f" {extras.strip()}" if extras else ""),
            _gib(st.memory["weights"].bytes),
            _gib(st.memory["activation_peak"].bytes),
            _gib(st.memory["pp_intermediate"].bytes),
            _gib(st.non_kv_bytes),
            _gib(st.kv.available_bytes),
            f"{st.kv.num_blocks:,}",
        )
    return t


def render(plan: Plan, console: Console, nearest: list[str] | None = None) -> None:
    console.print(_header(plan))
    console.print(_memory(plan, wide=console.width >= 140))
    if plan.stages:
        console.print(_stages(plan))
    if plan.ranks:
        console.print(_ranks(plan, console.width))
    console.print(_kv(plan))
    console.print(_budget_warmup(plan))
    console.print(_hazards(plan, console.width))
    console.print(_verdict(plan, console.width, nearest))
    console.print(
        Text("kinds: exact = fixed by the architecture and knobs; estimated = documented formula or constant; measured = from a GPU profile", style="dim")
    )


# --- a profile's wall time -----------------------------------------------------------------------------------

TIMING_STEPS = {
    "python_start": "Python's start and the CLI's imports",
    "cli": "the command's checks; torch imported (the GPU check)",
    "cpu_probe_estimate": "the --cpu-probe run's cost estimated",
    "load_model": "the model's config and spec",
    "cuda_init": "CUDA context, cuBLAS handles, NVML; the baseline snapshot",
    "import_transformers": "transformers imported",
    "weights": "phase: the model built on the device (its transformers code imported first)",
    "collect": "gc and empty_cache before profile_run, as vLLM's memory_profiling",
    "encoder": "phase (the processor's item built on the host first)",
    "decoder": "phase",
    "sampler": "phase",
    "sampler_warmup": "phase; then the encoder outputs released, total_consumed read",
    "cuda_graphs": "phase",
    "warmup_plan": "the plan that sizes the warmup batches, built mid-profile",
    "warmup_prefill": "phase",
    "warmup_decode": "phase",
    "release": "every tensor of the run released (`capacity profile` leaves the cached blocks to its exit)",
    "plan": "the plan from the profile",
}


def render_timings(profile: MemoryProfile, console: Console, note: str | None = None) -> None:
    """Where a profile's wall time went: each step of the run (time.perf_counter), in the order it ran; `note` (a
    word on this machine's Python, profilers.startup.bytecode_note) below."""
    steps = profile.timings_s
    total = sum(steps.values())
    t = Table(title="profile run: wall time per step", title_justify="left")
    t.add_column("step", no_wrap=True)
    t.add_column("s", justify="right")
    t.add_column("share", justify="right")
    t.add_column("what", overflow="fold")
    for name, seconds in steps.items():
        t.add_row(name, f"{seconds:.3f}", f"{seconds / total:.0%}" if total else "", TIMING_STEPS.get(name, ""))
    t.add_section()
    t.add_row("total", f"{total:.3f}", "", "until the plan was made; writing the files and this report follow")
    if note:
        t.caption = note
    console.print(t)


# --- sweeps ------------------------------------------------------------------------------------------------


def render_sweep(result: SweepResult, console: Console) -> None:
    """One table per GPU and TP size: rows max_num_seqs, columns max_model_len, cells the real max concurrency."""
    src = result.source
    console.print(Text(f"sweep  {src.name}  ({result.spec.architecture}, {src.origin})  config sha256 {src.config_sha256[:12]}", style="bold"))
    if result.profile is not None:
        fp = result.profile.fingerprint
        console.print(Text(f"from the profile taken on {fp.gpu_name} ({fp.device}) {fp.created}: measured terms", style="cyan"))
    for note in result.notes:
        console.print(Text(f"note  {note}", style="italic"))
    panels: dict[tuple[str, int | None, int | None, int | None, str], list[SweepPoint]] = {}
    for p in result.points:
        panels.setdefault((p.gpu, p.requested_tensor_parallel_size, p.requested_pipeline_parallel_size, p.requested_data_parallel_size, p.vllm_version), []).append(p)
    several = len({p.vllm_version for p in result.points}) > 1
    for (gpu, _tp, _pp, _dp, version), points in panels.items():
        lens = list(dict.fromkeys(p.requested_max_model_len for p in points))
        seqs = list(dict.fromkeys(p.requested_max_num_seqs for p in points))
        grid = {(p.requested_max_num_seqs, p.requested_max_model_len): p for p in points}
        first = points[0]
        t = Table(title=f"{gpu}  {first.layout()}" + (f"  vLLM {version} ({first.vllm_rules} rules)" if several else ""), title_justify="left")
        t.add_column("seqs \\ len", justify="right")
        for v in lens:
            effective = grid[(seqs[0], v)].max_model_len
            t.add_column("auto" if v == -1 else f"{effective:,}" + (" (default)" if v is None else ""), justify="right")
        cells = {key: _sweep_cell(p) for key, p in grid.items()}
        # a hazard id is never cut: when the cells do not fit the terminal, they carry a number and a legend the id
        widest = [max(len(f"{grid[(s, lens[0])].max_num_seqs:,}") + 10 for s in seqs)] + [max(len(cells[(s, v)]) for s in seqs) for v in lens]
        legend: dict[str, str] = {}
        if sum(widest) + 3 * len(widest) + 1 > console.width:
            for key, text in cells.items():
                if text.startswith("x "):
                    cells[key] = f"x [{legend.setdefault(text[2:], str(len(legend) + 1))}]"
        for s in seqs:
            row: list[str | Text] = [f"{grid[(s, lens[0])].max_num_seqs:,}" + (" (default)" if s is None else "")]
            row += [Text(cells[(s, v)], style="green" if grid[(s, v)].fits else "red") for v in lens]
            t.add_row(*row)
        console.print(t)
        for hazard, number in legend.items():
            console.print(Text(f"  x [{number}] = {hazard}", style="red", no_wrap=True))
    console.print(
        Text(
            f"{result.fitting} of {len(result.points)} points fit. Cells: requests run at once = min(max_num_seqs, requests the KV cache holds) "
            "(KV: concurrency.actual_requests; with DP: the engines' total = DP x one engine's); x: the first error hazard. Every point is a full `capacity plan`.",
            style="dim",
        )
    )


def _sweep_cell(p: SweepPoint) -> str:
    if p.fits and p.data_parallel_size > 1:  # the engines' total, then one engine's
        return f"{p.total_max_concurrent_requests} = {p.data_parallel_size} x {p.max_concurrent_requests} (KV {p.actual_requests})"
    if p.fits:
        return f"{p.max_concurrent_requests} (KV {p.actual_requests})"
    return "x " + (p.errors.split()[0] if p.errors else "does not fit")


def render_verify(result: VerifyResult, console: Console) -> None:
    """`capacity verify`: the worst steady state's peak against the requested memory."""
    t = Table(title=f"verify {result.model} on {result.gpu_name}", title_justify="left")
    for col in ("phase", "detail", "peak above start", "device used", "wall s"):
        t.add_column(col, justify="left" if col in ("phase", "detail") else "right", overflow="fold")
    for ph in result.phases:
        used = "" if ph.device_used_bytes is None else f"{ph.device_used_bytes:,}"
        t.add_row(ph.name, ph.detail, f"{ph.peak_above_start_bytes:,}", used, f"{ph.wall_s:.3f}")
    console.print(t)
    console.print(
        f"requests {result.requests} x (context {result.context_len:,} + encoder {result.encoder_len:,}) | KV pool {result.kv_pool_bytes:,} B | "
        f"peak used {result.peak_used_bytes:,} B of requested {result.requested_bytes:,} B | unused {result.unused_bytes:,} B ({result.unused_fraction:.2%})"
    )
    for r in result.ranks:
        state = "out of memory" if r.oom else f"unused {r.unused_bytes:,} B ({r.unused_fraction:.2%})"
        console.print(f"  rank {r.rank}: peak used {r.peak_used_bytes:,} B, KV pool {r.kv_pool_bytes:,} B, {state}")
    for note in result.notes:
        console.print(f"  note: {note}")
    console.print(
        f"allocator slack (reserved {result.peak_reserved_bytes:,} - allocated peak {result.peak_allocated_bytes:,}) {result.allocator_slack_bytes:,} B | "
        f"headroom gpu_memory_utilization leaves {result.headroom_bytes:,} B"
    )
    for h in result.hazards:
        console.print(Text(f"{h.severity} {h.id}: {h.message}; fix: {h.fix}", style=SEVERITY_STYLE[h.severity]))
    outcome = result.outcome
    if outcome == VERIFIED:
        console.print(Text(f"VERIFIED: no OOM; {result.unused_fraction:.2%} of the requested memory unused", style="bold green"))
    elif outcome == WITHIN_ALLOCATOR_SLACK:
        console.print(
            Text(
                f"VERIFIED (as vLLM would run it): no OOM; {result.over_requested_bytes:,} B over the requested memory, all of it the "
                "allocator's slack that vLLM's formula leaves out too",
                style="bold green",
            )
        )
    elif outcome == SLACK_EXCEEDS_HEADROOM:
        console.print(Text("FAILED as vLLM would: the plan follows vLLM's formula, and vLLM would run out of memory under this load (see the hazard)", style="bold red"))
    elif outcome == NO_REQUESTS:
        console.print(Text("FAILED: the plan holds no request at max_model_len", style="bold red"))
    else:
        why = f"out of memory in {result.oom.phase} ({result.oom.detail})" if result.oom else (
            f"{result.over_requested_bytes:,} B over the requested memory, more than the allocator's {result.allocator_slack_bytes:,} B of slack"
        )
        if result.oom and result.device != "cuda":
            console.print(Text(f"FAILED: {why} on the host (a CPU-probe dry run allocates the pool in RAM: size it with --kv-cache-memory-bytes)", style="bold red"))
        elif result.oom:  # which of the two is not known from an OOM: say both, do not call it a plan bug outright
            console.print(
                Text(
                    f"FAILED: {why}. If the memory torch reports 'reserved by PyTorch but unallocated' exceeds the {result.headroom_bytes:,} B of "
                    "headroom, vLLM would run out of memory the same way (its formula leaves that reserve out); otherwise the plan under-counts. "
                    f"Reproduce with: {result.reproducer}",
                    style="bold red",
                )
            )
        else:
            console.print(Text(f"FAILED: {why}. The plan has a bug; reproduce with: {result.reproducer}", style="bold red"))


# --- catalogs -------------------------------------------------------------------------------------------------
