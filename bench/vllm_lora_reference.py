"""What vLLM 0.33.0 itself allocates for LoRA: the stacked lora_a / lora_b buffers of every module it wraps, built by
its own LoRAModelManager on the model its own loader builds, on vLLM's CPU platform with the meta device (no GPU, no
weights).

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_lora_reference.py \
        bench/results/vllm-lora-reference-2026-12-01/reference.json

For each case the script starts `tp` processes (gloo), builds the case's model with vLLM's initialize_model under a
VllmConfig holding the case's LoRAConfig, wraps it with create_lora_manager (as the GPU model runner's load_model
does), and sums, per wrapped module kind, the bytes of the tensors each wrapper holds besides its base layer (the
stacked lora_a / lora_b and, at TP > 1, the LM head's sharded_to_full mapping) on rank 0. Bytes are numel x element
size, without the allocator's 512 B rounding. The punica wrapper's metadata is not counted here (its tensors depend
on the platform's wrapper: the CPU one differs from PunicaWrapperGPU).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "capacity" / "source" / "catalog" / "models"
LOG_CONFIGS = ROOT / "bench" / "vllm_logs" / "configs"

CASES: list[dict] = [
    {"name": "qwen3-8b tp1 4x r16", "config": CATALOG / "Qwen--Qwen3-8B", "tp": 1, "max_loras": 4, "max_lora_rank": 16},
    {"name": "qwen3-8b tp1 2x r64", "config": CATALOG / "Qwen--Qwen3-8B", "tp": 1, "max_loras": 2, "max_lora_rank": 64},
    {"name": "qwen3-8b tp2 4x r16", "config": CATALOG / "Qwen--Qwen3-8B", "tp": 2, "max_loras": 4, "max_lora_rank": 16},
    {"name": "qwen3-8b tp2 4x r16 fully sharded", "config": CATALOG / "Qwen--Qwen3-8B", "tp": 2, "max_loras": 4, "max_lora_rank": 16, "fully_sharded": True},
    {"name": "llama-3.1-8b tp1 2x r32", "config": CATALOG / "meta-llama--Llama-3.1-8B-Instruct", "tp": 1, "max_loras": 2, "max_lora_rank": 32},
    {"name": "llama-3.1-8b tp2 8x r8", "config": CATALOG / "meta-llama--Llama-3.1-8B-Instruct", "tp": 2, "max_loras": 8, "max_lora_rank": 8},
    {"name": "qwen2.5-7b tp1 4x r16", "config": LOG_CONFIGS / "Qwen--Qwen2.5-7B-Instruct", "tp": 1, "max_loras": 4, "max_lora_rank": 16},
    {"name": "qwen2.5-7b tp2 2x r64 fp16", "config": LOG_CONFIGS / "Qwen--Qwen2.5-7B-Instruct", "tp": 2, "max_loras": 2, "max_lora_rank": 64, "lora_dtype": "float16"},
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def held_bytes(wrapper) -> int:
    """The tensors a LoRA wrapper holds as plain attributes (its base layer's parameters are not among them), views left out."""
    import torch

    total = 0
    for value in vars(wrapper).values():
        for t in value if isinstance(value, tuple | list) else (value,):
            if isinstance(t, torch.Tensor) and t._base is None:  # a view (the embedding's lora_a_stacked_2d) holds no bytes of its own
                total += t.numel() * t.element_size()
    return total


def rank_main(rank: int, case: dict, port: int, model_dir: str, out: str) -> None:
    import torch
    from vllm.config import LoRAConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.lora.model_manager import create_lora_manager
    from vllm.model_executor.model_loader.utils import initialize_model

    tp = case["tp"]
    model_config = ModelConfig(model=model_dir, skip_tokenizer_init=True, max_model_len=4096, dtype="auto")
    lora = LoRAConfig(max_loras=case["max_loras"], max_lora_rank=case["max_lora_rank"], fully_sharded_loras=case.get("fully_sharded", False), lora_dtype=case.get("lora_dtype", "auto"))
    vc = VllmConfig(
        model_config=model_config,
        lora_config=lora,
        parallel_config=ParallelConfig(tensor_parallel_size=tp),
        scheduler_config=SchedulerConfig(max_model_len=4096, max_num_batched_tokens=8192, max_num_seqs=256, is_encoder_decoder=False),
    )
    with set_current_vllm_config(vc):
        init_distributed_environment(world_size=tp, rank=rank, local_rank=rank, distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo")
        initialize_model_parallel(tp, 1)
        with torch.device("meta"):
            model = initialize_model(vllm_config=vc)
            manager = create_lora_manager(
                model, max_num_seqs=256, max_num_batched_tokens=8192, vocab_size=model_config.get_vocab_size(), lora_config=lora, vllm_config=vc, device=torch.device("meta")
            )
    by_kind: dict[str, int] = {}
    counts: dict[str, int] = {}
    for name, wrapper in manager.modules.items():
        kind = name.rsplit(".", 1)[-1]
        by_kind[kind] = by_kind.get(kind, 0) + held_bytes(wrapper)
        counts[kind] = counts.get(kind, 0) + 1
    if rank == 0:
        Path(out).write_text(json.dumps({"bytes_by_module": by_kind, "modules_by_kind": counts, "lora_dtype": str(lora.lora_dtype)}))


def main(out_path: str) -> None:
    import torch
    import torch.multiprocessing as mp
    import vllm

    results = []
    tmp = Path(tempfile.mkdtemp(prefix="vllm-lora-ref-"))
    for case in CASES:
        started = time.time()
        folder = tmp / case["name"].replace(" ", "_")
        folder.mkdir()
        (folder / "config.json").write_text((Path(case["config"]) / "config.json").read_text())
        out = tmp / (folder.name + ".json")
        mp.spawn(rank_main, args=(case, free_port(), str(folder), str(out)), nprocs=case["tp"], join=True)
        got = json.loads(out.read_text())
        results.append(
            {
                **{k: v for k, v in case.items() if k != "config"},
                "config": str(Path(case["config"]).relative_to(ROOT)),
                **got,
                "total_bytes": sum(got["bytes_by_module"].values()),
                "seconds": round(time.time() - started, 1),
            }
        )
        print(f"{case['name']}: {got['bytes_by_module']}", flush=True)
    document = {
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "platform": "vLLM CPU platform (VLLM_TARGET_DEVICE=cpu), the meta device, gloo for TP > 1; rank 0's bytes",
        "cases": results,
    }
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "bench" / "results" / "vllm-lora-reference-2026-12-01" / "reference.json"))
