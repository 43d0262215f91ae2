"""The architecture page's layer diagram, written from the import-linter contract in pyproject.toml (the one
`lint-imports` checks in CI), so the page lists exactly the layers the code is held to. Each package needs a line in
WHAT; a layer the contract gains without one, or a line for a package the contract lost, stops the build."""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: the docs extra brings tomli
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
WHAT = {
    "capacity.__main__": "`python -m capacity` (and `torchrun ... -m capacity`): the command",
    "capacity.cli": "the command: typer app, options, exit codes, one module per command group",
    "reports": "terminal (rich), pandas CSV, HTML, JSON",
    "capacity.reconcile": "a vLLM log beside a plan",
    "profilers": "measuring on a GPU (or the CPU probe, the fake-tensor trace)",
    "capacity.planning": "Plan, planner, KV groups, warmup, hazards, suggestion, sweep, CI gate",
    "capacity.memory": "one module per memory term (MemoryTerm: exact / estimated / measured, and how)",
    "capacity.vllm": "per-version semantics; the startup-log reader",
    "capacity.serving": "vllm serve knobs and vLLM's defaults, the serve YAML, the encoder budget",
    "capacity.model": "ModelSpec, Family, families/ (one file each), items/ (tokens per item), arch/ (builders)",
    "capacity.weights": "per-rank weights, parallel layers, quantisation",
    "capacity.kv": "KV layer kinds, specs, page sizes",
    "capacity.source": "resolving --model: folder, catalog, HF cache, Hub, safetensors headers",
    "capacity.gpu": "the GPU catalog and the local GPU",
    "capacity.units": "bytes, parsing sizes",
    "capacity.user_files": "reading the user's files",
    "capacity.disk_cache": "the on-disk cache of traces, parameter tables and processor counts",
    "capacity.errors": "one-line errors and the documented exit codes",
}


def layers() -> list[list[str]]:
    """The contract's layers, top first, each a list of sibling packages."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(c for c in data["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [[name.strip() for name in layer.split("|")] for layer in contract["layers"]]


def layers_block() -> str:
    found = [name for layer in layers() for name in layer]
    missing = [name for name in found if name not in WHAT]
    stale = [name for name in WHAT if name not in found]
    if missing or stale:
        raise RuntimeError(f"docs/hooks/architecture.py: describe the layers {missing} and drop {stale} (pyproject's contract)")
    lines = []
    for layer in layers():
        paths = " | ".join(name.replace(".", "/") for name in layer)
        lines.append(f"{paths:<34}{'  |  '.join(WHAT[name] for name in layer)}")
    return "```\n" + "\n".join(lines) + "\n```"
