"""What vLLM 0.33.0 itself plans for the KV cache of a pipeline-parallel engine: every stage's own KV specs (the
layers get_pp_indices gives it), its own available memory, then get_global_kv_cache_groups and get_kv_cache_configs
across the workers, on vLLM's CPU platform (no GPU). Run with the vLLM venv, outside the test suite:

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_pp_kv_reference.py \
        bench/results/vllm-pp-kv-reference-2026-12-01/reference.json

Per case and stage it records vLLM's projected groups (_project_kv_cache_groups_to_worker: layers per group), the
worker's bytes per block (_pool_bytes_per_block_from_builder), its blocks on its own memory (available // that), and
the num_blocks every worker gets back from get_kv_cache_configs (the smallest stage's). Full-attention and
sliding-window layers only (FullAttentionSpec, SlidingWindowSpec at block size 16, as on CUDA with FlashAttention);
the layer kinds come from bench/vllm_kv_reference.py's layer_plan. Async scheduling is off: the CPU platform runs the
V1 model runner, which vLLM refuses with PP and async scheduling; the blocks do not depend on it. tests/kv/test_pipeline_stages_vllm.py compares
capacity's stage plan with it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vllm_kv_reference import layer_plan, model_dir, read_config  # noqa: E402

GiB = 1 << 30
# name, config, TP, PP, partition (VLLM_PP_LAYER_PARTITION or None), max_model_len, each stage's available bytes
CASES: list[dict] = [
    {"name": "llama-3.1-70b tp4 pp2", "config": "catalog:meta-llama--Llama-3.1-70B-Instruct", "tp": 4, "pp": 2, "max_model_len": 131072, "available": [59_438_693_843, 57_917_261_579]},
    {"name": "llama-3.1-70b tp4 pp4 equal memory", "config": "catalog:meta-llama--Llama-3.1-70B-Instruct", "tp": 4, "pp": 4, "max_model_len": 131072, "available": [60 * GiB] * 4},
    {"name": "llama-3.1-70b tp2 pp3 partition 30,30,20", "config": "catalog:meta-llama--Llama-3.1-70B-Instruct", "tp": 2, "pp": 3, "partition": "30,30,20", "max_model_len": 32768, "available": [40 * GiB, 41 * GiB, 30 * GiB]},
    {"name": "gemma-3-27b tp1 pp2", "config": "catalog:google--gemma-3-27b-it", "tp": 1, "pp": 2, "max_model_len": 32768, "available": [50 * GiB, 49 * GiB]},
    {"name": "gemma-3-27b tp2 pp3", "config": "catalog:google--gemma-3-27b-it", "tp": 2, "pp": 3, "max_model_len": 131072, "available": [30 * GiB, 30 * GiB, 29 * GiB]},
    {"name": "llama-3.1-8b tp1 pp4", "config": "catalog:meta-llama--Llama-3.1-8B-Instruct", "tp": 1, "pp": 4, "max_model_len": 32768, "available": [20 * GiB, 21 * GiB, 21 * GiB, 19 * GiB + 555]},
    {"name": "llama-3.1-70b tp8 pp2 partition 30,50", "config": "catalog:meta-llama--Llama-3.1-70B-Instruct", "tp": 8, "pp": 2, "partition": "30,50", "max_model_len": 32768, "available": [80 * GiB, 80 * GiB]},
    {"name": "gemma-3-4b tp1 pp2", "config": "catalog:google--gemma-3-4b-it", "tp": 1, "pp": 2, "max_model_len": 32768, "available": [10 * GiB, 10 * GiB + 123_456]},
]


def main(out_path: str) -> None:
    import vllm
    from vllm.config import CacheConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig
    from vllm.distributed.utils import get_pp_indices
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    tmp = Path(tempfile.mkdtemp(prefix="vllm-pp-kv-ref-"))
    results = []
    for case in CASES:
        raw = read_config(case["config"])
        mc = ModelConfig(model=str(model_dir(raw, tmp, case["name"])), skip_tokenizer_init=True, max_model_len=case["max_model_len"], dtype="auto")
        pc = ParallelConfig(tensor_parallel_size=case["tp"], pipeline_parallel_size=case["pp"])
        scheduler = SchedulerConfig(max_model_len=case["max_model_len"], max_num_batched_tokens=8192, max_num_seqs=256, is_encoder_decoder=False, enable_chunked_prefill=True, async_scheduling=False)
        vc = VllmConfig(model_config=mc, cache_config=CacheConfig(), parallel_config=pc, scheduler_config=scheduler)
        vc.cache_config.block_size = 16
        vc.cache_config.kv_cache_layout = "LBNHC"  # as bench/vllm_kv_reference.py: CUDA's FlashAttention default preference
        text = mc.hf_text_config.to_dict()
        kinds = layer_plan(text)
        n = len(kinds)
        if case.get("partition"):
            os.environ["VLLM_PP_LAYER_PARTITION"] = case["partition"]
        else:
            os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
        kv_heads, head, dtype = mc.get_num_kv_heads(pc), mc.get_head_size(), mc.dtype
        workers, splits = [], []
        for rank in range(case["pp"]):
            start, end = get_pp_indices(n, rank, case["pp"])
            splits.append([start, end])
            specs = {}
            for i in range(start, end):
                if kinds[i] == "full":
                    specs[f"model.layers.{i}.attn"] = FullAttentionSpec(block_size=16, num_kv_heads=kv_heads, head_size=head, dtype=dtype)
                elif kinds[i] == "sliding":
                    specs[f"model.layers.{i}.attn"] = SlidingWindowSpec(block_size=16, num_kv_heads=kv_heads, head_size=head, dtype=dtype, sliding_window=text["sliding_window"])
                else:
                    raise SystemExit(f"{case['name']}: layer kind {kinds[i]} not in this reference")
            workers.append(specs)
        groups = planning.get_global_kv_cache_groups(vc, workers)
        builder = get_kv_cache_config_builder(vc)
        stages = []
        for rank, (specs, available) in enumerate(zip(workers, case["available"], strict=True)):
            projected = planning._project_kv_cache_groups_to_worker(groups, specs)
            bpb = planning._pool_bytes_per_block_from_builder(builder, vc, projected)
            stages.append(
                {
                    "rank": rank,
                    "layers": splits[rank],
                    "group_layers": [len(g.layer_names) for g in projected],
                    "bytes_per_block": bpb,
                    "available_bytes": available,
                    "own_num_blocks": available // bpb,
                }
            )
        configs = planning.get_kv_cache_configs(vc, workers, list(case["available"]), groups)
        engine = sorted({c.num_blocks for c in configs})
        results.append({**case, "global_groups": [type(g.kv_cache_spec).__name__ for g in groups], "stages": stages, "engine_num_blocks": engine})
        print(case["name"], [s["own_num_blocks"] for s in stages], engine, flush=True)
    os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"vllm_version": vllm.__version__, "script": "bench/vllm_pp_kv_reference.py", "cases": results}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parents[1] / "bench" / "results" / "vllm-pp-kv-reference-2026-12-01" / "reference.json"))
