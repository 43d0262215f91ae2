"""One page per model family, written from the family's module docstring and its `FAMILY` object
(capacity/model/families/<name>.py); the hook appends the hand-written notes of docs/notes/families/<name>.md."""

from __future__ import annotations

import importlib
import inspect


def families():
    from capacity.model.family import all_families

    return all_families()


def _docstring_markdown(text: str) -> str:
    """A family docstring as Markdown: its '- ' lists get the blank line Markdown needs before a list."""
    out: list[str] = []
    for line in inspect.cleandoc(text).splitlines():
        if line.startswith("- ") and out and out[-1] and not out[-1].lstrip().startswith("- ") and not out[-1].startswith("  "):
            out.append("")
        out.append(line)
    return "\n".join(out)


def family_page(family, models: list[str]) -> str:
    module = importlib.import_module(type(family).__module__)
    path = f"capacity/model/families/{module.__name__.rsplit('.', 1)[1]}.py"
    title = (inspect.cleandoc(module.__doc__ or family.name).splitlines()[0]).rstrip(".")
    lines = [f"# {family.name}", "", f"*{path}*", ""]
    claims = ", ".join(f"`{t}`" for t in family.model_types) or "none by name (a fallback family: it claims the configs no other family does)"
    lines += [f"- **config.json `model_type`s claimed**: {claims}"]
    if getattr(family, "hf_class", None):
        lines.append(f"- **architecture built on the meta device**: `{family.hf_class}`")
    lines.append("- **catalog models**: " + (", ".join(f"`{m}`" for m in models) if models else "none (plans any model it claims, from a folder or the Hub)"))
    lines += ["", "## What the family reads (from its source)", "", _docstring_markdown(module.__doc__ or title), ""]
    return "\n".join(lines) + "\n"


def family_index_page(models_by_family: dict[str, list[str]]) -> str:
    lines = [
        "# Model families",
        "",
        "capacity knows a model through its **family**: one file in `capacity/model/families/` that reads the config and",
        "says how vLLM 0.33 builds the model (KV layers, tokens per multimodal item, weights per rank, the hooks the",
        "profiler and the fake-tensor trace run). A config no family claims is refused in one line (exit 2). The pages",
        "below are written from each family's source when this site is built.",
        "",
        "| family | claims `model_type` | catalog models | what it is |",
        "|---|---|---:|---|",
    ]
    for family in families():
        module = importlib.import_module(type(family).__module__)
        first = " ".join(inspect.cleandoc(module.__doc__ or "").split("\n\n")[0].split())  # the docstring's first paragraph
        first = first.replace("|", "/").replace("*", "\\*")
        types = ", ".join(f"`{t}`" for t in family.model_types) or "(fallback)"
        lines.append(f"| [{family.name}]({family.name}.md) | {types} | {len(models_by_family.get(family.name, []))} | {first} |")
    return "\n".join(lines) + "\n"
