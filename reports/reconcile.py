"""`capacity reconcile` as a rich terminal report: vLLM's log beside capacity's plan, term by term."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from capacity.reconcile.compare import ReconcileResult
from capacity.reconcile.rows import ReconcileRow

WIDE = 140  # below this, explanations are listed under the table instead of in a column


def _style(row: ReconcileRow) -> str:
    if row.agrees is None:
        return "dim"
    return "green" if row.agrees else "yellow"


def _mark(row: ReconcileRow) -> str:
    if row.agrees is None:
        return "-"
    return "=" if row.agrees else "≠"


def render_version_inference(result: ReconcileResult, console: Console) -> None:
    """The lines a startup's version was inferred from, and the comparison under each range of rules they allow."""
    inference = result.inference
    if inference is None:
        return
    console.print(Text("vLLM version not stated; inferred from:", style="bold"))
    for line in inference.evidence:
        console.print(Text(f"  {line}"))
    console.print(Text("under each range of rules these lines fit:", style="bold"))
    for outcome in inference.outcomes:
        console.print(Text(f"  {outcome.text()}"))
    if inference.decides:
        console.print(Text("the verdict changes with the version: each comparison follows; pass --vllm-version to pick one", style="bold yellow"))
    else:
        console.print(Text(f"the verdict is the same under each: vLLM {inference.used}'s comparison follows", style="italic"))


def render_reconcile(result: ReconcileResult, console: Console) -> None:
    """The header (log, vLLM version, plan), one row per term, the explanations and the notes; for a startup whose
    version is inferred, the versions it fits first, and each comparison where they change the verdict."""
    render_version_inference(result, console)
    if result.by_version:
        for one in result.by_version:
            console.rule(f"if vLLM {one.semantics} printed it")
            render_comparison(one, console)
        for note in result.notes:
            console.print(Text(f"note  {note}", style="italic"))
        return
    render_comparison(result, console)


def render_comparison(result: ReconcileResult, console: Console) -> None:
    """One comparison: the header, one row per term, the explanations and the notes."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("log", Text(f"{result.log}  (vLLM {result.vllm_version}: {result.vllm_version_basis})"))
    how = f", {result.estimate}" if result.estimate else ""
    head.add_row("plan", Text(f"{result.model} on {result.gpu}  (vLLM {result.semantics} semantics{how})"))
    console.print(head)
    wide = console.width >= WIDE
    t = Table(title="vLLM's log vs capacity's plan (difference = capacity - vLLM; = within the log's rounding)", title_justify="left")
    if not wide:
        t.add_column("#", justify="right", style="dim")
    t.add_column("term", overflow="fold")
    t.add_column("vLLM", justify="right", overflow="fold")
    t.add_column("capacity", justify="right", overflow="fold")
    t.add_column("difference", justify="right")
    t.add_column("", justify="center")
    if wide:
        t.add_column("why", overflow="fold", ratio=1)
    for i, row in enumerate(result.rows, start=1):
        capacity = f"{row.capacity} ({row.capacity_exact})" if wide and row.capacity_exact else row.capacity
        cells: list[str | Text] = [row.term, row.vllm, capacity, row.difference, Text(_mark(row), style=_style(row))]
        if wide:
            cells.append(Text(row.explanation, style="dim"))
        else:
            cells.insert(0, str(i))
        t.add_row(*cells, style=None if row.agrees is not False else "yellow")
    console.print(t)
    if not wide:
        for i, row in enumerate(result.rows, start=1):
            line = Text(f"{i:>2}. ", style="dim")
            line.append(f"{row.term}: ", style="bold")
            line.append(row.explanation)
            console.print(line)
    for note in result.notes:
        console.print(Text(f"note  {note}", style="italic"))
