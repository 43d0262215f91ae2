"""The tensors each vLLM 0.33 text-generation architecture sends between pipeline stages, read from vLLM's source.

A non-first stage allocates `make_empty_intermediate_tensors(batch_size=max_num_tokens)`: one [tokens, hidden] tensor
per key of the model's `make_empty_intermediate_tensors_factory([...], hidden_size)` (vllm/model_executor/models/
utils.py). This reads `_TEXT_GENERATION_MODELS` (vllm/model_executor/models/registry.py) and, per architecture, the
key lists in its module file; an architecture is listed only where its file has exactly one key list (files with
several model classes and different lists, or none, are left out: capacity refuses PP for them).

    python bench/vllm_pp_intermediate_keys.py /tmp/vllmwheel/full/vllm > capacity/memory/vllm_intermediate_keys.json

(vLLM's wheel unpacked: `pip download vllm==0.33.0 --no-deps`, then unzip.)
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

FACTORY = re.compile(r"make_empty_intermediate_tensors_factory\(\s*(\[[^\]]*\])", re.S)


def registry_models(models: Path) -> dict[str, str]:
    tree = ast.parse((models / "registry.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_TEXT_GENERATION_MODELS" for t in node.targets):
            table = ast.literal_eval(node.value)
            return {arch: module for arch, (module, _cls) in table.items()}
    raise SystemExit("no _TEXT_GENERATION_MODELS in registry.py")


def key_lists(path: Path) -> set[tuple[str, ...]]:
    out = set()
    for match in FACTORY.finditer(path.read_text()):
        try:
            out.add(tuple(ast.literal_eval(match.group(1))))
        except ValueError:
            out.add(("<not a literal>",))
    return out


def main(root: str) -> None:
    models = Path(root) / "model_executor" / "models"
    version = (Path(root) / "_version.py").read_text()
    found = re.search(r"__version__\s*=\s*version\s*=\s*['\"]([^'\"]+)", version) or re.search(r"['\"](\d+\.\d+\.\d+)['\"]", version)
    keys: dict[str, list[str]] = {}
    for arch, module in sorted(registry_models(models).items()):
        path = models / f"{module}.py"
        lists = key_lists(path) if path.exists() else set()
        if len(lists) == 1 and "<not a literal>" not in next(iter(lists)):
            keys[arch] = list(next(iter(lists)))
    print(json.dumps({
        "vllm_version": found.group(1) if found else "unknown",
        "reference": "vllm/model_executor/models/registry.py _TEXT_GENERATION_MODELS; each module's make_empty_intermediate_tensors_factory keys (bench/vllm_pp_intermediate_keys.py)",
        "intermediate_tensor_keys": keys,
    }, indent=1, sort_keys=False))


if __name__ == "__main__":
    main(sys.argv[1])
