"""What vLLM 0.33.0's own model classes allocate for weights on one tensor-parallel rank, for the cases in CASES.

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_weights_reference.py \
        bench/results/vllm-weights-reference-2026-11-30/reference.json

For each case the script builds a real VllmConfig from the case's config.json (the catalog's) on vLLM's CPU
platform, initialises a one-process distributed group, and then has vLLM's parallel layers see a
tensor-parallel group of the case's size: `get_tensor_model_parallel_world_size` and
`get_tensor_model_parallel_rank` are replaced, in every loaded module that imported them, by the case's TP size
and rank (rank 0, the largest). The model class vLLM picks for the architecture is then built on the meta
device (no memory) in the case's dtype, and the bytes of its unique parameters are summed: the weights one rank
holds before load-time repacking. tests/test_weights.py compares capacity's `weights_breakdown` with these
numbers. Nemotron-Parse is not among the cases: its config needs the model's remote code
(hf_nemotron_parse_config.py), which is not in the catalog.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "capacity" / "catalog" / "models"

CASES: list[dict] = [
    {"model": "openai/whisper-tiny", "tp": 1},
    {"model": "openai/whisper-tiny", "tp": 2},
    {"model": "openai/whisper-large-v3", "tp": 1},
    {"model": "openai/whisper-large-v3", "tp": 2},
    {"model": "openai/whisper-large-v3", "tp": 4},
    {"model": "meta-llama/Llama-3.1-8B-Instruct", "tp": 1},
    {"model": "meta-llama/Llama-3.1-8B-Instruct", "tp": 2},
    {"model": "meta-llama/Llama-3.1-8B-Instruct", "tp": 8},  # 8 KV heads: one per rank
    {"model": "Qwen/Qwen3-30B-A3B", "tp": 2},
    {"model": "Qwen/Qwen3-30B-A3B", "tp": 4},
    {"model": "Qwen/Qwen3-30B-A3B", "tp": 4, "ep": True},
    {"model": "Qwen/Qwen3-30B-A3B", "tp": 8},  # 4 KV heads < 8: replicated
    {"model": "google/gemma-3-4b-it", "tp": 1},
    {"model": "google/gemma-3-4b-it", "tp": 2},
    {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "tp": 1},
    {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "tp": 2},
    {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "tp": 4},
    {"model": "google/gemma-4-26B-A4B", "tp": 1},
    {"model": "google/gemma-4-26B-A4B", "tp": 2},
    {"model": "google/gemma-4-26B-A4B", "tp": 4},  # 2 global KV heads < 4: one per rank
    {"model": "google/gemma-4-26B-A4B", "tp": 4, "ep": True},
]

TP = {"size": 1, "rank": 0}


def model_folder(model: str, root: Path) -> Path:
    """A folder with the catalog's files for `model` (a folder entry, or a single config file)."""
    stem = model.replace("/", "--")
    folder = root / stem
    folder.mkdir(exist_ok=True)
    src = CATALOG / stem
    if src.is_dir():
        for f in src.iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
    else:
        (folder / "config.json").write_bytes((CATALOG / f"{stem}.json").read_bytes())
    return folder


def patch_tp() -> None:
    """Every loaded module's view of the TP group: TP["size"] ranks, this one TP["rank"]."""
    for module in list(sys.modules.values()):
        if module is None:
            continue
        for name, fn in (("get_tensor_model_parallel_world_size", lambda: TP["size"]), ("get_tensor_model_parallel_rank", lambda: TP["rank"])):
            if hasattr(module, name):
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(module, name, fn)


def main() -> None:
    import torch
    import vllm
    from vllm.config import set_current_vllm_config
    from vllm.distributed import destroy_model_parallel, init_distributed_environment, initialize_model_parallel
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import get_model_architecture

    out_path = Path(sys.argv[1])
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = False
        only = os.environ.get("MODELS")  # a comma-separated subset of the cases' models
        for case in CASES:
            if only and case["model"] not in only.split(","):
                continue
            folder = model_folder(case["model"], root)
            args = EngineArgs(
                model=str(folder),
                tokenizer=str(folder),
                skip_tokenizer_init=True,
                enforce_eager=True,
                dtype="bfloat16",
                max_model_len=case.get("max_model_len", 4096 if "whisper" not in case["model"] else 448),
                enable_expert_parallel=bool(case.get("ep")),
            )
            cfg = args.create_engine_config()
            with set_current_vllm_config(cfg):
                if not started:
                    init_distributed_environment(world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{root / 'dist'}", backend="gloo")
                    started = True
                destroy_model_parallel()
                initialize_model_parallel(1, 1)  # per case: the EP group exists only for a MoE config
                cls, arch = get_model_architecture(cfg.model_config)
                TP["size"], TP["rank"] = case["tp"], 0
                patch_tp()
                torch.set_default_dtype(torch.bfloat16)
                t0 = time.perf_counter()
                try:
                    with torch.device("meta"):
                        model = cls(vllm_config=cfg, prefix="")
                except Exception as exc:  # record what vLLM refused, keep going
                    results.append({**case, "architecture": arch, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                    print(case, "error", exc, file=sys.stderr)
                    continue
                total = sum(p.numel() * p.element_size() for _, p in model.named_parameters(remove_duplicate=True))
                results.append({**case, "architecture": arch, "dtype": "bfloat16", "rank": 0, "rank0_parameter_bytes": int(total), "build_s": round(time.perf_counter() - t0, 2)})
                print(results[-1], file=sys.stderr)
                del model
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(
        json.dumps(
            {
                "vllm": vllm.__version__,
                "torch": torch.__version__,
                "platform": "vLLM CPU platform (VLLM_TARGET_DEVICE=cpu), models built on the meta device",
                "method": "bench/vllm_weights_reference.py: vLLM's model class with get_tensor_model_parallel_world_size/rank replaced by the case's TP size and rank 0",
                "cases": results,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
