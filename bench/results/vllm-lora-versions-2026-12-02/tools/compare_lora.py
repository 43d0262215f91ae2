"""Which of vLLM's LoRA allocating functions differ between releases (the mechanical part of REPORT.md).

    python compare_lora.py extract TREE OUT.json     # the functions of one unpacked wheel (TREE/vllm/lora/...)
    python compare_lora.py table OUT_DIR V1 V2 ...   # per function: = (as 0.33.0's), D (different), - (absent)
    python compare_lora.py show OUT_DIR A B [KEY...] # the differing functions of releases A and B, as a diff

Each function is normalised (docstrings and annotations dropped, `ast.unparse`), so only a change of what it does
shows. The JSON files hold vLLM's own source: they stay outside the repository.
"""

from __future__ import annotations

import ast
import difflib
import json
import sys
from pathlib import Path

WRAPPERS = {
    "PunicaWrapperBase",
    "PunicaWrapperGPU",
    "LogitsProcessorWithLoRA",
    "BaseLinearLayerWithLoRA",
    "MergedColumnParallelLinearWithLoRA",
    "MergedQKVParallelLinearWithLoRA",
    "QKVParallelLinearWithLoRA",
    "RowParallelLinearWithLoRA",
    "ColumnParallelLinearWithLoRA",
    "VocabParallelEmbeddingWithLoRA",
}
APPLYING = {
    "BaseLinearLayerWithLoRA",
    "RowParallelLinearWithLoRA",
    "RowParallelLinearWithShardedLoRA",
    "MergedColumnParallelLinearWithShardedLoRA",
    "MergedQKVParallelLinearWithShardedLoRA",
    "ColumnParallelLinearWithShardedLoRA",
    "QKVParallelLinearWithShardedLoRA",
}
# function name -> the classes whose function is kept (None: every class)
WANTED: dict[str, set[str] | None] = {
    "create_lora_weights": None,
    "__init__": WRAPPERS,
    "make": {"LoRAKernelMeta"},
    "add_lora_linear": {"PunicaWrapperGPU"},
    "add_lora_logits": {"PunicaWrapperGPU"},
    "add_lora_embedding": {"PunicaWrapperGPU"},
    "add_shrink": {"PunicaWrapperGPU"},
    "apply": APPLYING,
    "forward": {"VocabParallelEmbeddingWithLoRA"},
    "_get_logits": {"LogitsProcessorWithLoRA"},
    "from_layer_logits_processor": None,
    "get_supported_lora_modules": None,
}


def normalised(fn: ast.FunctionDef) -> str:
    for node in ast.walk(fn):
        if isinstance(node, ast.FunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
            node.returns = None
            for arg in ast.walk(node.args):
                if isinstance(arg, ast.arg):
                    arg.annotation = None
    return ast.unparse(fn)


def extract(tree: Path) -> dict[str, tuple[str, int, str]]:
    found: dict[str, tuple[str, int, str]] = {}
    for path in sorted((tree / "vllm" / "lora").rglob("*.py")):
        try:
            module = ast.parse(path.read_text())
        except SyntaxError:
            continue
        stack: list[tuple[ast.AST, str | None]] = [(module, None)]
        while stack:
            node, cls = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    stack.append((child, child.name))
                elif isinstance(child, ast.FunctionDef) and child.name in WANTED and (WANTED[child.name] is None or cls in WANTED[child.name]):
                    found[f"{cls}.{child.name}"] = (str(path.relative_to(tree)), child.lineno, normalised(child))
    return found


def load(folder: Path, version: str) -> dict[str, list]:
    return json.loads((folder / f"{version}.json").read_text())


def table(folder: Path, versions: list[str]) -> None:
    found = {v: load(folder, v) for v in versions}
    reference = load(folder, "0.33.0")
    for key in sorted(set().union(*found.values())):
        if any(skip in key for skip in ("FusedMoE", "Classif", "Rotary")):
            continue
        marks = ["-" if key not in found[v] else "=" if key in reference and found[v][key][2] == reference[key][2] else "D" for v in versions]
        print(f"{key:60s} " + " ".join(f"{m:>2}" for m in marks))


def show(folder: Path, a: str, b: str, keys: list[str]) -> None:
    left, right = load(folder, a), load(folder, b)
    for key in keys or sorted(set(left) | set(right)):
        x, y = left.get(key), right.get(key)
        if x and y and x[2] == y[2]:
            continue
        print(f"##### {key}: {a} {f'{x[0]}:{x[1]}' if x else '-'}  {b} {f'{y[0]}:{y[1]}' if y else '-'}")
        if x and y:
            for line in difflib.unified_diff(x[2].splitlines(), y[2].splitlines(), lineterm="", n=1):
                print(line)


def main(argv: list[str]) -> None:
    command, *rest = argv
    if command == "extract":
        Path(rest[1]).write_text(json.dumps(extract(Path(rest[0])), indent=0))
    elif command == "table":
        table(Path(rest[0]), rest[1:])
    elif command == "show":
        show(Path(rest[0]), rest[1], rest[2], rest[3:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
