"""The tensors each vLLM 0.33 text-generation architecture sends between pipeline stages, read from vLLM's source.

A non-first stage allocates `make_empty_intermediate_tensors(batch_size=max_num_tokens)`: one [tokens, hidden] tensor
per key of the model's `make_empty_intermediate_tensors_factory([...], hidden_size)` (vllm/model_executor/models/
utils.py). This reads `_TEXT_GENERATION_MODELS` (vllm/model_executor/models/registry.py) and, per architecture, the
key lists in its module file; an architecture is listed only where its file has exactly one key list, or, for a file
with none (it wraps another module's model: qwen3.py around qwen2.py's Qwen2Model), where the model modules it imports
agree on one (files with several lists, or none found either way, are left out: capacity refuses PP for them).

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


SIBLING_IMPORT = re.compile(r"^from (?:\.|vllm\.model_executor\.models\.)(\w+) import", re.M)


def imported_siblings(models: Path, path: Path) -> list[Path]:
    """The model modules `path` imports from (`from .qwen2 import Qwen2Model`): where a module that builds no model of
    its own (Qwen3ForCausalLM around qwen2.py's Qwen2Model) gets its key list."""
    names = dict.fromkeys(SIBLING_IMPORT.findall(path.read_text()))
    return [models / f"{name}.py" for name in names if (models / f"{name}.py").exists() and name not in ("utils", "interfaces", "interfaces_base", "module_mapping")]


def module_key_list(models: Path, path: Path) -> tuple[str, ...] | None:
    """The one key list of the module, else (it has none) the one list its imported model modules agree on; None
    when there are several or none."""
    lists = key_lists(path) if path.exists() else set()
    if not lists and path.exists():
        for sibling in imported_siblings(models, path):
            lists |= key_lists(sibling)
    if len(lists) == 1 and "<not a literal>" not in next(iter(lists)):
        return next(iter(lists))
    return None


def main(root: str) -> None:
    models = Path(root) / "model_executor" / "models"
    version = (Path(root) / "_version.py").read_text()
    found = re.search(r"__version__\s*=\s*version\s*=\s*['\"]([^'\"]+)", version) or re.search(r"['\"](\d+\.\d+\.\d+)['\"]", version)
    keys: dict[str, list[str]] = {}
    for arch, module in sorted(registry_models(models).items()):
        found_keys = module_key_list(models, models / f"{module}.py")
        if found_keys is not None:
            keys[arch] = list(found_keys)
    print(json.dumps({
        "vllm_version": found.group(1) if found else "unknown",
        "reference": "vllm/model_executor/models/registry.py _TEXT_GENERATION_MODELS; each module's make_empty_intermediate_tensors_factory keys, or those of the model modules it imports (bench/vllm_pp_intermediate_keys.py)",
        "intermediate_tensor_keys": keys,
    }, indent=1, sort_keys=False))


if __name__ == "__main__":
    main(sys.argv[1])
