"""`capacity fit`'s result on the terminal, as JSON and as CSV (one row per configuration), and the nearest fit a
plan that does not fit shows in its verdict."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from capacity.planning.fit import ESTIMATE_DEFAULT, FitConfig, FitResult
from capacity.units import GiB, plural
from reports.serve_line import wrapped

CSV_COLUMNS = (
    "gpu", "gpu_count", "requests_at_once", "margin_requests", "kv_requests", "spare_kv_bytes", "max_model_len", "max_num_seqs",
    "max_num_batched_tokens", "gpu_memory_utilization", "kv_cache_dtype", "limit_mm_per_prompt", "changes", "estimate",
    "available_kv_bytes", "non_kv_bytes", "num_blocks", "command", "plan_command", "warnings",
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "nodes", "node", "layout", "requests_per_engine",
)  # fmt: skip

ESTIMATE_WORDS = {
    "formula": "estimated by formula (config only, `capacity plan --estimate formula`)",
    ESTIMATE_DEFAULT: "checked with the default estimate (`capacity plan`: a fake-tensor trace)",
}


def fit_json(result: FitResult) -> str:
    return json.dumps(result.to_dict(), indent=2) + "\n"


def _cell(config: FitConfig, column: str) -> Any:
    if column == "changes":
        return "; ".join(c.describe() for c in config.changes)
    if column == "warnings":
        return " | ".join(config.warnings)
    if column == "limit_mm_per_prompt":
        return ",".join(f"{m}={n}" for m, n in config.limit_mm_per_prompt.items())
    return getattr(config, column)


def fit_csv(result: FitResult) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for config in result.configs:
        writer.writerow([_cell(config, c) for c in CSV_COLUMNS])
    return out.getvalue()


def gpus_text(config: FitConfig) -> str:
    """'2 x H200' (TP alone on one host), or '16 x H200 (TP 8 x DP 2 on 2 x 8x H200)'."""
    plain = config.layout in ("", f"TP {config.gpu_count}")
    return f"{config.gpu_count} x {config.gpu}" + ("" if plain else f" ({config.layout})")


def at_once_text(config: FitConfig) -> str:
    """The requests the server runs at once: one engine's, or with DP the engines' total and its parts."""
    if config.data_parallel_size == 1:
        return f"{config.requests_at_once:,}"
    return f"{config.requests_at_once:,} ({config.data_parallel_size} x {config.requests_per_engine:,})"


def changes_text(config: FitConfig) -> str:
    return "; ".join(c.describe() for c in config.changes) or "none"


def render_fit(result: FitResult, console: Console, estimate: str) -> None:
    src, target = result.source, result.target
    console.print(Text(f"fit  {src.name}  ({result.spec.architecture}, {src.origin})", style="bold"))
    console.print(Text(f"target  {target.describe()}" + (f"; held: {', '.join(result.held)}" if result.held else "")))
    for note in result.notes:
        console.print(Text(f"note  {note}", style="italic"))
    if not result.configs:
        console.print(Text("NO CONFIGURATION FITS", style="bold red"))
    else:
        t = Table(
            title=f"{plural(len(result.configs), 'configuration')}: fewest GPUs first, then fewest changes, the smaller GPU, the most spare KV", title_justify="left"
        )
        for col, justify in (
            ("#", "right"),
            ("GPUs", "left"),
            ("at once", "right"),
            ("margin", "right"),
            ("spare KV", "right"),
            ("max_model_len", "right"),
            ("changes", "left"),
            ("estimate", "left"),
        ):
            t.add_column(col, justify=justify)  # type: ignore[arg-type]
        for i, c in enumerate(result.configs, 1):
            t.add_row(
                str(i),
                gpus_text(c),
                at_once_text(c),
                f"+{c.margin_requests:,}",
                f"{c.spare_kv_bytes / GiB:.2f} GiB",
                f"{c.max_model_len:,}",
                changes_text(c),
                c.estimate,
                style="green" if c.estimate == ESTIMATE_DEFAULT else None,
            )
        console.print(t)
        for i, c in enumerate(result.configs, 1):
            console.print(Text(f"[{i}] {c.command}", style="bold"), soft_wrap=True)
            console.print(Text(f"    re-plan: {c.plan_command}", style="dim"), soft_wrap=True)
            for warning in c.warnings:
                console.print(Text(f"    warning: {warning}", style="yellow"))
    for r in result.refusals:
        console.print(Text(f"no configuration on {r.gpu} up to {plural(r.gpu_count, 'GPU')}: {r.reason}", style="red"))
    checked = (
        "; the first was then checked with the default estimate"
        if estimate == ESTIMATE_DEFAULT and any(c.estimate == ESTIMATE_DEFAULT for c in result.configs)
        else ""
    )
    console.print(
        Text(
            f"Searched by formula (config only, {result.planned} plans){checked}. at once = min(requests at max_model_len the KV cache holds, max_num_seqs); "
            "with DP, the engines' total (DP x one engine's, each engine planned at its share of the target); "
            "margin = at once - target; spare KV (one engine's) = (usable KV blocks - target x blocks per request) x bytes per block, how far the non-KV "
            "estimate may be low before the target is missed. Changes are from your knobs and vLLM's defaults. "
            "A configuration marked formula: re-plan it with `capacity plan` (no --estimate) for the default trace estimate.",
            style="dim",
        )
    )


def nearest_lines(result: FitResult, plan_gpus: int, width: int) -> list[str] | None:
    """The verdict's lines for a plan that does not fit and that no knob fix makes start: the nearest configuration
    that does (capacity/planning/fit.py nearest_fit), its serve line broken only between flags, what it changes and
    how it was estimated."""
    if not result.configs:
        return None
    c = result.configs[0]
    more = f"; tensor_parallel_size {plan_gpus} -> {c.gpu_count}" if c.gpu_count != plan_gpus else ""
    return [
        *wrapped(c.command, width, first_prefix=f"suggested (nearest fit on {c.gpu}):"),
        f"(changes: {changes_text(c)}{more}; {plural(c.requests_at_once, 'request')} at once at "
        f"max_model_len {c.max_model_len:,}, {ESTIMATE_WORDS[c.estimate]})" + "".join(f"\nwarning: {w}" for w in c.warnings),
    ]
