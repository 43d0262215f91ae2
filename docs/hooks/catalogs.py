"""The GPU and model catalog pages, written from the catalogs the program reads (capacity/gpu/gpus.json, the model
catalog under capacity/source/catalog/), through the same functions as `capacity gpus` and `capacity models --json`."""

from __future__ import annotations

from collections import defaultdict

GIB = 2**30


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def gpu_catalog_page() -> str:
    from capacity.gpu.catalog import load_catalog

    records = load_catalog()
    by_source: dict[str, int] = defaultdict(int)
    for record in records:
        by_source[record.source] += 1
    lines = [
        "# GPU catalog",
        "",
        f"The {len(records)} GPUs `--gpu NAME` knows, written from `capacity/gpu/gpus.json` when this site is built (`capacity gpus`",
        "prints the same list, and the local GPU). The total is the figure vLLM multiplies by `--gpu-memory-utilization`:",
        "CUDA's own total (cudaMemGetInfo) where one was read, which is a few hundred MiB below what nvidia-smi shows.",
        "[Choosing the GPU](../guides/gpus.md) says what each source means and what to do when your GPU is not here.",
        "",
        "Sources: " + ", ".join(f"{source} ({count})" for source, count in sorted(by_source.items())) + ".",
        "",
        "| name | aliases | total (bytes) | GiB | source | platform | CC | NVLink | where the total was read |",
        "|---|---|---:|---:|---|---|---|---|---|",
    ]
    for r in records:
        platform = r.platform + (", unified memory" if r.unified_memory else "")
        lines.append(
            f"| {r.name} | {_cell(', '.join(r.aliases))} | {r.total_memory_bytes:,} | {r.total_memory_bytes / GIB:.2f} | {r.source} | "
            f"{platform} | {r.compute_capability_major}.x | {'yes' if r.nvlink else ''} | {_cell(r.reference)} |"
        )
    return "\n".join(lines) + "\n"


def nvidia_smi_count() -> str:
    """'N of the M', the catalog GPUs whose total is an nvidia-smi figure (CUDA's own total is lower)."""
    from capacity.gpu.catalog import load_catalog

    records = load_catalog()
    return f"{sum(r.source == 'nvidia-smi' for r in records)} of the {len(records)}"


def model_entries() -> list[dict]:
    """`capacity models --json`'s objects (plannable entries), computed the way that command computes them."""
    from capacity.model.registry import spec_from_files
    from capacity.source.resolve import catalog, catalog_config, catalog_planning_files, catalog_preprocessor
    from reports.catalogs import models_json

    entries = [
        (entry, spec_from_files(catalog_config(entry), entry.name, catalog_preprocessor(entry), catalog_planning_files(entry).get("processor_config.json")))
        for entry in catalog().values()
    ]
    return models_json(entries)


def not_plannable_entries() -> list[tuple[str, str]]:
    from capacity.source.resolve import catalog

    return [(e.name, e.not_plannable) for e in catalog(include_unplannable=True).values() if not e.plannable]


def model_catalog_page() -> str:
    entries = model_entries()
    refused = not_plannable_entries()
    lines = [
        "# Model catalog",
        "",
        f"The {len(entries)} models `--model` plans offline, written from the catalog shipped in the package",
        "(`capacity/source/catalog/`) when this site is built, through the code of `capacity models --json`. Sources and",
        "sha256 of every file are in `capacity/source/catalog/README.md`. Any other model is read from a folder, the",
        "Hugging Face cache or the Hub ([Models, knobs and config files](inputs.md)).",
        "",
        "| id | aliases | family | architecture | encoder-decoder tokens per request | max tokens per item | max_model_len | vLLM 0.33 |",
        "|---|---|---|---|---:|---|---:|---|",
    ]
    for e in entries:
        items = ", ".join(f"{k} {v:,}" for k, v in e["max_tokens_per_item"].items()) or "text only"
        cross = f"{e['cross_attention_tokens_per_request']:,}" if e["is_encoder_decoder"] else ""
        lines.append(
            f"| {e['id']} | {_cell(', '.join(e['aliases']))} | [{e['family']}](../families/{e['family']}.md) | {e['architecture']} | "
            f"{cross} | {items} | {e['derived_max_model_len']:,} | {e['vllm_support']} |"
        )
    if refused:
        lines += ["", "Stored but not planned (`--model` refuses them in one line, exit 2, with the reason):", ""]
        lines += [f"- **{name}**: {_cell(why)}" for name, why in refused]
    return "\n".join(lines) + "\n"


def models_by_family() -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for e in model_entries():
        out[e["family"]].append(e["id"])
    return out
