"""MkDocs hook (mkdocs.yml `hooks:`): the pages and figures that are generated from the program and the committed
data each time the site is built, so they cannot drift from what they describe.

- reference/cli.md: every command and option, from the typer app (`cli_reference.py`);
- reference/gpu-catalog.md, reference/model-catalog.md: from the GPU and model catalogs (`catalogs.py`);
- families/index.md and families/<name>.md: from each family module's docstring and FAMILY object (`families.py`);
- a generated page's hand-written part, where there is one, comes from docs/notes/<the page's path>;
- accuracy/*.svg and the `<!-- capacity:NAME -->` markers of the hand-written pages: from bench/results (`accuracy.py`)
  and the files of examples/ci/;
- the architecture page's layers: from pyproject.toml's import-linter contract (`architecture.py`).

Nothing generated is committed; `tests/docs/test_site.py` runs the same functions.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (str(ROOT), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

import accuracy  # noqa: E402
import architecture  # noqa: E402
import catalogs  # noqa: E402
import cli_reference  # noqa: E402
import families  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402

MARKER = re.compile(r"<!-- capacity:([a-z0-9-]+) -->")
_markers: dict[str, str] = {}


def generated_files() -> tuple[dict[str, str], dict[str, str]]:
    """(site path -> content, marker name -> Markdown)."""
    by_family = catalogs.models_by_family()
    pages = {
        "reference/cli.md": cli_reference.cli_reference_page(),
        "reference/gpu-catalog.md": catalogs.gpu_catalog_page(),
        "reference/model-catalog.md": catalogs.model_catalog_page(),
        "families/index.md": families.family_index_page(by_family),
    }
    for family in families.families():
        pages[f"families/{family.name}.md"] = families.family_page(family, by_family.get(family.name, []))
    for path in pages:
        notes = HERE.parent / "notes" / path
        if notes.is_file():  # the hand-written part of a generated page
            pages[path] = pages[path].rstrip("\n") + "\n\n" + notes.read_text()
    figures, markers = accuracy.generated()
    markers["command-list"] = "\n".join(f"- [`capacity {name}`](reference/cli.md#capacity-{name.replace(' ', '-')})" for name in cli_reference.command_names())
    markers["layers"] = architecture.layers_block()
    markers["gpu-nvidia-smi-count"] = catalogs.nvidia_smi_count()
    for name, path in (("ci-workflow", "examples/ci/capacity-gate.yml"), ("ci-serve-yaml", "examples/ci/serve.yaml")):
        markers[name] = f"`{path}`:\n\n```yaml\n{(ROOT / path).read_text().rstrip()}\n```"
    return {**pages, **figures}, markers


def on_files(files: Files, config) -> Files:
    contents, markers = generated_files()
    _markers.clear()
    _markers.update(markers)
    for path, content in contents.items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            raise RuntimeError(f"docs/{path} is generated at build time: remove the committed copy")
        files.append(File.generated(config, path, content=content))
    return files


def on_config(config):
    """The family pages go under the nav's 'Families' section, after its index, in name order."""
    section = next((item for item in config["nav"] if isinstance(item, dict) and "Families" in item), None)
    if section is None:
        raise RuntimeError("mkdocs.yml's nav has no 'Families' section")
    section["Families"] = [entry for entry in section["Families"] if entry == "families/index.md"]
    section["Families"] += [{family.name: f"families/{family.name}.md"} for family in families.families()]
    return config


def on_page_markdown(markdown: str, page, config, files) -> str:
    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in _markers:
            raise RuntimeError(f"{page.file.src_path}: unknown generated block <!-- capacity:{name} -->")
        return _markers[name]

    return MARKER.sub(replace, markdown)
