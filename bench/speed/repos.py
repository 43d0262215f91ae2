"""Write the speed benchmark's Hub repos: one per catalog id, with the catalog's published files and header-only
safetensors shards whose tensors are the model's parameters as capacity lists them (`Family.parameter_shapes`:
the architecture built on the meta device, or listed from the config for a remote-code family), in the config's
dtype, sharded as `save_pretrained` does (at most 5 GB a shard, with `model.safetensors.index.json`; one
`model.safetensors` below that).

    PYTHONPATH=CAPACITY_ROOT:REPO_ROOT python bench/speed/repos.py OUT_DIR ID [ID ...]

Runs with the capacity tree being benchmarked (the harness starts it); prints one JSON line per repo.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from capacity.model.registry import family_for
from capacity.source.catalog import model_files
from capacity.source.resolve import resolve_model
from tests.support.hub_server import add_repo
from tests.support.safetensors_files import DTYPE_BYTES, safetensors_bytes

SHARD_BYTES = 5_000_000_000
DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
SKIP = {"model.safetensors.index.json"}  # rewritten to name the shards written here


def checkpoint_dtype(config: dict) -> str:
    for c in (config, config.get("text_config") or {}, config.get("decoder") or {}):
        for key in ("torch_dtype", "dtype"):
            if isinstance(c.get(key), str) and c[key] in DTYPES:
                return DTYPES[c[key]]
    return "BF16"


def max_len(config: dict) -> int | None:
    """The longest sequence the config allows (what capacity and vLLM take as max_model_len by default)."""
    for c in (config.get("text_config") or {}, config, config.get("decoder") or {}):
        for key in ("max_position_embeddings", "max_target_positions"):
            if isinstance(c.get(key), int):
                return int(c[key])
    return None


def weight_files(shapes: tuple[tuple[str, tuple[int, ...]], ...], dtype: str) -> dict[str, bytes]:
    shards: list[dict[str, tuple[str, list[int]]]] = [{}]
    size = 0
    for name, shape in shapes:
        n = math.prod(shape) * DTYPE_BYTES[dtype]
        if shards[-1] and size + n > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = (dtype, list(shape))
        size += n
    if len(shards) == 1:
        return {"model.safetensors": safetensors_bytes(shards[0], metadata={"format": "pt"}, with_data=False)}
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    total = 0
    for i, tensors in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        files[file] = safetensors_bytes(tensors, metadata={"format": "pt"}, with_data=False)
        for name, (dt, shape) in tensors.items():
            weight_map[name] = file
            total += math.prod(shape) * DTYPE_BYTES[dt]
    files["model.safetensors.index.json"] = json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2).encode()
    return files


def main(out: Path, ids: list[str]) -> None:
    for model_id in ids:
        source = resolve_model(model_id)
        if source.origin != "catalog":
            raise SystemExit(f"{model_id} is not a catalog id (origin {source.origin})")
        files = {name: f.read_bytes() for name, f in model_files(model_id).items() if name not in SKIP}  # the published bytes
        dtype = checkpoint_dtype(source.config)
        shapes = family_for(source.config).parameter_shapes(source.config)
        files.update(weight_files(shapes, dtype))
        refs = add_repo(out, model_id, {"main": files})
        params = sum(math.prod(s) for _, s in shapes)
        print(json.dumps({"id": model_id, "commit": refs["main"], "files": sorted(files), "max_len": max_len(source.config), "dtype": dtype, "tensors": len(shapes), "parameters": params}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
