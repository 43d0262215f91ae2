"""`capacity models` and `capacity gpus`: the catalogs as tables, and `models --json` (rich and the spec only: a
listing imports no planner)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from capacity.gpu.catalog import Gpu
from capacity.model.spec import ModelSpec
from capacity.serving.encoder_budget import max_tokens_per_item
from capacity.source.resolve import CatalogEntry


def tokens_text(spec: ModelSpec) -> tuple[str, str]:
    """(cross-attention keys per request, tokens per max-size item) as `capacity models` prints them.

    Encoder-decoder models hold their encoder's tokens per request in cross-attention; decoder-only multimodal
    models (Qwen2.5-VL, Gemma-3) put each item's tokens into the prompt, so they have no cross-attention keys and
    are described by their items (a video's tokens at the model's own max_model_len, as vLLM's profiling sizes it).
    """
    cross = f"{spec.encoder_tokens_per_request:,} per request" if spec.is_encoder_decoder else "none (decoder-only: items are prompt tokens)"
    items = ", ".join(f"{max_tokens_per_item(m, spec.derived_max_model_len):,} per {m.name}" for m in spec.modalities)
    return cross, items or "text only"


def render_models(entries: list[tuple[CatalogEntry, ModelSpec]], console: Console) -> None:
    """The catalog: a table when every id fits whole beside the other columns, else one block per model."""
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
        return
    console.print(header)
    for entry, spec in entries:
        cross, items = tokens_text(spec)
        console.print(Text(entry.name, style="bold", no_wrap=True))
        t = Table.grid(padding=(0, 1))
        t.add_column(no_wrap=True, style="dim")
        t.add_column(overflow="fold")
        for key, value in (
            ("aliases", ", ".join(entry.aliases)),
            ("family", spec.family.name),
            ("cross-attention", cross),
            ("per item", items),
            ("provenance", entry.provenance),
        ):
            t.add_row(f"  {key}", Text(value))
        console.print(t)


def render_gpus(local: Gpu | None, catalog: list[Gpu], console: Console) -> None:
    """The local GPU (NVML) or a line saying none was found, then the catalog."""
    if local is None:
        console.print(Text("local GPU: none found (NVML sees no NVIDIA driver or GPU); without --gpu, plans assume an H200", style="yellow"))
    else:
        console.print(Text(f"local GPU: {local.name}, {local.total_memory_bytes:,} B ({local.provenance}); plans use it unless --gpu is given", style="green"))
    t = Table(title="GPU catalog (--gpu NAME)", title_justify="left")
    t.add_column("name", no_wrap=True)
    for col in ("total memory (B)", "GiB"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("source", overflow="fold")
    for g in ([local] if local else []) + catalog:
        t.add_row(g.name, f"{g.total_memory_bytes:,}", f"{g.total_memory_bytes / 2**30:.2f}", g.provenance)
    console.print(t)


def models_json(entries: list[tuple[CatalogEntry, ModelSpec]]) -> list[dict[str, Any]]:
    """The catalog as `capacity models --json` prints it: one object per plannable entry."""
    return [
        {
            "id": entry.name,
            "aliases": list(entry.aliases),
            "provenance": entry.provenance,
            "family": spec.family.name,
            "architecture": spec.architecture,
            "is_encoder_decoder": spec.is_encoder_decoder,
            "cross_attention_tokens_per_request": spec.encoder_tokens_per_request if spec.is_encoder_decoder else 0,
            "max_tokens_per_item": {m.name: max_tokens_per_item(m, spec.derived_max_model_len) for m in spec.modalities},
            "derived_max_model_len": spec.derived_max_model_len,
            "vllm_support": spec.vllm_support.status,
        }
        for entry, spec in entries
    ]
