"""`capacity models` and `capacity gpus`: the catalogs as tables, and `models --json` (rich and the spec only: a
listing imports no planner)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from capacity.gpu.catalog import AMBIGUOUS, Gpu, GpuRecord, normalized_name
from capacity.model.spec import ModelSpec
from capacity.serving.encoder_budget import tokens_per_item
from capacity.source.resolve import CatalogEntry
from capacity.units import GiB, plural


def item_tokens(spec: ModelSpec) -> dict[str, int]:
    """The tokens of each modality's max-size item as a plan with the default knobs counts them (tokens_per_item at the
    model's own max_model_len, every modelled modality's item in the dummy inputs); unmodelled modalities left out."""
    return tokens_per_item([m for m in spec.modalities if not m.unmodelled], spec.derived_max_model_len)


def tokens_text(spec: ModelSpec) -> tuple[str, str]:
    """(cross-attention keys per request, tokens per max-size item) as `capacity models` prints them.

    Encoder-decoder models hold their encoder's tokens per request in cross-attention; decoder-only multimodal
    models (Qwen2.5-VL, Gemma-3) put each item's tokens into the prompt, so they have no cross-attention keys and
    are described by their items (a video's tokens at the model's own max_model_len, as vLLM's profiling sizes it).
    A modality capacity cannot count is named with the flag that plans without it.
    """
    cross = f"{spec.encoder_tokens_per_request:,} per request" if spec.is_encoder_decoder else "none (decoder-only: items are prompt tokens)"
    items = [f"{n:,} per {m}" for m, n in item_tokens(spec).items()]
    items += [f"{m.name} not counted (plan with --limit-mm-per-prompt {m.name}=0)" for m in spec.modalities if m.unmodelled]
    return cross, ", ".join(items) or "text only"


def render_models(entries: list[tuple[CatalogEntry, ModelSpec]], unplannable: list[CatalogEntry], console: Console) -> None:
    """The catalog: a table when every id fits whole beside the other columns, else one block per model; then the
    ids the catalog holds but cannot plan offline, each with the reason."""
    header = Text("capacity model catalog", style="bold")
    id_width = max(len(e.name) for e, _ in entries)
    alias_width = max((len(a) for e, _ in entries for a in e.aliases), default=0)
    if console.width >= id_width + alias_width + 100:
        t = Table(title=header, title_justify="left")
        t.add_column("id", no_wrap=True, min_width=id_width)
        t.add_column("aliases", no_wrap=True, min_width=alias_width)
        for col in ("family", "cross-attention tokens", "tokens per item", "provenance"):
            t.add_column(col, overflow="fold")
        for entry, spec in entries:
            t.add_row(entry.name, "\n".join(entry.aliases), spec.family.name, *tokens_text(spec), entry.provenance)
        console.print(t)
    else:
        console.print(header)
        for entry, spec in entries:
            cross, items = tokens_text(spec)
            _block(console, entry.name, (("aliases", ", ".join(entry.aliases)), ("family", spec.family.name), ("cross-attention", cross), ("per item", items), ("provenance", entry.provenance)))
    if unplannable:
        console.print(Text(f"not plannable from the catalog alone ({plural(len(unplannable), 'id')}; the HF cache or the Hub may hold what is missing)", style="bold"))
        for entry in unplannable:
            _block(console, entry.name, (("aliases", ", ".join(entry.aliases)), ("why", entry.not_plannable)))


def _block(console: Console, name: str, fields: tuple[tuple[str, str], ...]) -> None:
    console.print(Text(name, style="bold", no_wrap=True))
    t = Table.grid(padding=(0, 1))
    t.add_column(no_wrap=True, style="dim")
    t.add_column(overflow="fold")
    for key, value in fields:
        t.add_row(f"  {key}", Text(value))
    console.print(t)


WIDE_TABLE_MIN = 140  # `gpus --wide` prints a table from this width, blocks below


def short_aliases(record: GpuRecord) -> list[str]:
    """The aliases `capacity gpus` prints at 80 columns: the short names one types, not the device names NVML reports
    (those hold spaces and are matched too), and no two that --gpu reads as the same name."""
    seen = {normalized_name(record.name)}
    shown = []
    for alias in record.aliases:
        key = normalized_name(alias)
        if " " in alias or key in seen:
            continue
        seen.add(key)
        shown.append(alias)
    return shown


def render_gpus(local: Gpu | None, records: tuple[GpuRecord, ...], console: Console, wide: bool = False) -> None:
    """The local GPU (NVML) or a line saying none was found, then the catalog: one line per GPU (name, the other names
    --gpu takes, the total CUDA reports in GiB, the kind of source); `wide` adds the bytes, every alias and where the
    total was read."""
    if local is None:
        console.print(Text("local GPU: none found (NVML sees no NVIDIA driver or GPU); without --gpu, plans assume an H200", style="yellow"))
    else:
        console.print(Text(f"local GPU: {local.name}, {local.total_memory_bytes:,} B ({local.provenance}); plans use it unless --gpu is given", style="green"))
    if wide and console.width < WIDE_TABLE_MIN:
        _gpu_blocks(local, records, console)
        return
    # no vertical rules: at 80 columns each GPU stays on one line, its name and source whole
    t = Table(title="GPU catalog (--gpu NAME or alias)", title_justify="left", caption_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("name", no_wrap=True)
    t.add_column("aliases", overflow="fold")
    t.add_column("GiB", justify="right", no_wrap=True)
    if wide:
        t.add_column("bytes", justify="right", no_wrap=True)
    t.add_column("source", no_wrap=not wide, overflow="fold")
    rows: list[tuple[str, str, int, str, str]] = []
    if local is not None:
        rows.append((local.name, "", local.total_memory_bytes, local.source, local.provenance))
    for r in records:
        aliases = ", ".join(r.aliases) if wide else ", ".join(short_aliases(r))
        rows.append((r.name, aliases, r.total_memory_bytes, r.source, r.gpu().provenance))
    for name, aliases, total, source, provenance in rows:
        cells = [name, aliases, f"{total / GiB:.2f}"]
        t.add_row(*cells, f"{total:,}", provenance) if wide else t.add_row(*cells, source)
    ambiguous = "; ".join(f"{short} ({', '.join(choices)})" for short, choices in AMBIGUOUS.items())
    t.caption = f"GiB: the total CUDA reports, which vLLM multiplies by gpu_memory_utilization. Refused as ambiguous: {ambiguous}." + (
        "" if wide else " Every alias and where each total was read: --wide or --json."
    )
    console.print(t)


def _gpu_blocks(local: Gpu | None, records: tuple[GpuRecord, ...], console: Console) -> None:
    """`gpus --wide` on a narrow terminal: one block per GPU, its name alone on a line and each field below."""
    console.print(Text("GPU catalog (--gpu NAME or alias)", style="bold"))
    gpus = ([(local, ())] if local is not None else []) + [(r.gpu(), r.aliases) for r in records]
    for gpu, aliases in gpus:
        console.print(Text(gpu.name, style="bold", no_wrap=True))
        t = Table.grid(padding=(0, 1))
        t.add_column(no_wrap=True, style="dim")
        t.add_column(overflow="fold")
        t.add_row("  aliases", Text(", ".join(aliases)))
        t.add_row("  total", f"{gpu.total_memory_bytes / GiB:.2f} GiB ({gpu.total_memory_bytes:,} B)")
        t.add_row("  source", Text(gpu.provenance))
        console.print(t)


def gpus_json(local: Gpu | None, records: tuple[GpuRecord, ...]) -> dict[str, Any]:
    """`capacity gpus --json`: the local GPU (or null) and every catalog record, with its aliases and sources."""
    return {
        "local": None if local is None else local.to_dict(),
        "catalog": [{**asdict(r), "aliases": list(r.aliases), "provenance": r.gpu().provenance} for r in records],
        "ambiguous": {short: list(choices) for short, choices in AMBIGUOUS.items()},
    }


def models_json(entries: list[tuple[CatalogEntry, ModelSpec]], unplannable: list[CatalogEntry] = ()) -> list[dict[str, Any]]:  # type: ignore[assignment]
    """The catalog as `capacity models --json` prints it: one object per entry, `plannable` false (with the reason in
    `not_plannable`) for the ids it cannot plan offline."""
    planned = [
        {
            "id": entry.name,
            "aliases": list(entry.aliases),
            "provenance": entry.provenance,
            "plannable": True,
            "family": spec.family.name,
            "architecture": spec.architecture,
            "is_encoder_decoder": spec.is_encoder_decoder,
            "cross_attention_tokens_per_request": spec.encoder_tokens_per_request if spec.is_encoder_decoder else 0,
            "max_tokens_per_item": item_tokens(spec),
            "modalities_not_counted": {m.name: m.unmodelled for m in spec.modalities if m.unmodelled},
            "derived_max_model_len": spec.derived_max_model_len,
            "vllm_support": spec.vllm_support.status,
        }
        for entry, spec in entries
    ]
    refused = [
        {"id": entry.name, "aliases": list(entry.aliases), "provenance": entry.provenance, "plannable": False, "not_plannable": entry.not_plannable}
        for entry in unplannable
    ]
    return planned + refused
