"""What vLLM 0.33.0 itself plans for the KV cache of a pipeline-parallel engine: each stage's layers by its own
get_pp_indices, the whole model's groups by get_global_kv_cache_groups, and each stage's blocks by
get_kv_cache_configs (the smallest stage sets the pool), on vLLM's CPU platform (no GPU).

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_pp_kv_reference.py \
        bench/results/vllm-pp-kv-reference-2026-12-01/reference.json

For each case the script
1. builds a real ModelConfig from the case's config and a VllmConfig with the case's TP and PP (async scheduling on);
2. gives every stage the specs of the decoder layers get_pp_indices puts on it (the engine passes one spec dict per
   worker; the TP ranks of one stage hold the same layers and specs, so one dict per stage stands for them);
3. calls get_global_kv_cache_groups on all stages, get_kv_cache_configs with each stage's available memory, and
   records per stage: its layers, the projected groups, its bytes per block (_pool_bytes_per_block_from_builder on
   its projected groups), the blocks its own memory holds, and the blocks the engine gives it after the minimum.
Only full-attention and sliding-window layers (dense and Gemma-3-style hybrids): other kinds are planned by
bench/vllm_kv_reference.py at PP 1.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_kv_reference import ROOT, layer_plan, model_dir, read_config  # noqa: E402

GiB = 1 << 30

# Llama-3.1-70B: Llama-3.1-8B-Instruct's published config with the 70B's published sizes (meta-llama's
# Llama-3.1-70B-Instruct config.json: 80 layers, hidden 8192, 64 heads, 8 KV heads, intermediate 28672)
LLAMA_70B = {"hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672}

# name, config, overrides of the config, TP, PP, VLLM_PP_LAYER_PARTITION, max_model_len, and each stage's available
# KV memory per rank (bytes)
CASES: list[dict] = [
    {
        "name": "llama-3.1-70b tp4 pp2",
        "config": "catalog:meta-llama--Llama-3.1-8B-Instruct",
        "override": LLAMA_70B,
        "tp": 4,
        "pp": 2,
        "max_model_len": 131072,
        "available": [100 * GiB, 97 * GiB],
    },
    {
        "name": "llama-3.1-70b tp8 pp2 equal",
        "config": "catalog:meta-llama--Llama-3.1-8B-Instruct",
        "override": LLAMA_70B,
        "tp": 8,
        "pp": 2,
        "max_model_len": 32768,
        "available": [60 * GiB, 60 * GiB],
    },
    {
        "name": "llama-3.1-70b tp2 pp3",
        "config": "catalog:meta-llama--Llama-3.1-8B-Instruct",
        "override": LLAMA_70B,
        "tp": 2,
        "pp": 3,
        "max_model_len": 32768,
        "available": [30 * GiB, 31 * GiB + 7, 29 * GiB + 123_456],
    },
    {
        "name": "llama-3.1-70b tp4 pp2 partition 30,50",
        "config": "catalog:meta-llama--Llama-3.1-8B-Instruct",
        "override": LLAMA_70B,
        "tp": 4,
        "pp": 2,
        "partition": "30,50",
        "max_model_len": 32768,
        "available": [80 * GiB, 80 * GiB],
    },
    {
        "name": "llama-3.1-8b tp1 pp4",
        "config": "catalog:meta-llama--Llama-3.1-8B-Instruct",
        "tp": 1,
        "pp": 4,
        "max_model_len": 32768,
        "available": [20 * GiB, 21 * GiB, 21 * GiB, 19 * GiB + 555],
    },
    {"name": "qwen3-32b tp1 pp2", "config": "vllm_logs:Qwen--Qwen3-32B", "tp": 1, "pp": 2, "max_model_len": 32768, "available": [6 * GiB + 987_654, 9 * GiB]},
    {
        "name": "gemma-3-27b tp1 pp2",
        "config": "catalog:google--gemma-3-27b-it#text_config",
        "tp": 1,
        "pp": 2,
        "max_model_len": 32768,
        "available": [30 * GiB, 28 * GiB],
    },
    {
        "name": "gemma-3-27b tp2 pp3",
        "config": "catalog:google--gemma-3-27b-it#text_config",
        "tp": 2,
        "pp": 3,
        "max_model_len": 131072,
        "available": [20 * GiB, 20 * GiB, 20 * GiB],
    },
    {
        "name": "gemma-3-4b tp1 pp2",
        "config": "catalog:google--gemma-3-4b-it#text_config",
        "tp": 1,
        "pp": 2,
        "max_model_len": 32768,
        "available": [10 * GiB, 10 * GiB],
    },
]


def case_config(case: dict) -> dict:
    ref = case["config"]
    if ref.startswith("vllm_logs:"):
        raw = json.loads((ROOT / "bench" / "vllm_logs" / "configs" / ref.split(":", 1)[1] / "config.json").read_text())
    else:
        raw = read_config(ref)
    raw = {**raw, **case.get("override", {})}
    if "#text_config" in ref:  # a VL config's text part alone: vLLM's ModelConfig wants an architecture it serves as text
        raw.setdefault("architectures", ["Gemma3ForCausalLM"])
        raw["model_type"] = "gemma3_text"
    return raw


def main(out_path: str) -> None:
    import torch
    import vllm
    from vllm.config import CacheConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig
    from vllm.distributed.utils import get_pp_indices
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    tmp = Path(tempfile.mkdtemp(prefix="vllm-pp-kv-ref-"))
    results = []
    for case in CASES:
        if "partition" in case:
            os.environ["VLLM_PP_LAYER_PARTITION"] = case["partition"]
        else:
            os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
        raw = case_config(case)
        model_config = ModelConfig(model=str(model_dir(raw, tmp, case["name"])), skip_tokenizer_init=True, max_model_len=case["max_model_len"], dtype="auto")
        vc = VllmConfig(
            model_config=model_config,
            cache_config=CacheConfig(enable_prefix_caching=True),
            parallel_config=ParallelConfig(tensor_parallel_size=case["tp"], pipeline_parallel_size=case["pp"]),
            scheduler_config=SchedulerConfig(
                max_model_len=case["max_model_len"], max_num_batched_tokens=8192, max_num_seqs=256, is_encoder_decoder=False, async_scheduling=False
            ),
        )
        # CUDA runs Model Runner V2 with async scheduling (max_concurrent_batches PP + 1); the CPU platform falls back
        # to the V1 runner, which refuses async scheduling with PP at construction: turned on after it
        vc.scheduler_config.async_scheduling = True
        vc.cache_config.block_size = 16  # the CUDA platform's; the CPU platform changes it for its own kernels
        vc.cache_config.kv_cache_layout = "LBNHC"
        mc = model_config
        pc = vc.parallel_config
        text = mc.hf_text_config.to_dict()
        kinds = layer_plan(text)
        if set(kinds) - {"full", "sliding"}:
            raise SystemExit(f"{case['name']}: layer kinds {sorted(set(kinds))}: this script plans full and sliding layers only")
        n_layers = len(kinds)
        stages = []
        for rank in range(case["pp"]):
            start, end = get_pp_indices(n_layers, rank, case["pp"])
            specs = {}
            for i in range(start, end):
                common = {"block_size": 16, "num_kv_heads": mc.get_num_kv_heads(pc), "head_size": mc.get_head_size(), "dtype": mc.dtype}
                name = f"model.layers.{i}.self_attn.attn"
                specs[name] = FullAttentionSpec(**common) if kinds[i] == "full" else SlidingWindowSpec(**common, sliding_window=text["sliding_window"])
            stages.append({"start": start, "end": end, "specs": specs})
        all_specs = [s["specs"] for s in stages]
        groups = planning.get_global_kv_cache_groups(vc, all_specs)
        builder = get_kv_cache_config_builder(vc)
        configs = planning.get_kv_cache_configs(vc, all_specs, case["available"], groups)
        rows = []
        for stage, available, config in zip(stages, case["available"], configs, strict=True):
            projected = planning._project_kv_cache_groups_to_worker(groups, stage["specs"])
            bpb = planning._pool_bytes_per_block_from_builder(builder, vc, projected)
            rows.append(
                {
                    "layers": [stage["start"], stage["end"]],
                    "layer_kinds": {k: sum(1 for i in range(stage["start"], stage["end"]) if kinds[i] == k) for k in ("full", "sliding")},
                    "projected_groups": [{"spec": type(g.kv_cache_spec).__name__, "num_layers": len(g.layer_names)} for g in projected],
                    "available_bytes": available,
                    "bytes_per_block": bpb,
                    "own_num_blocks": available // bpb,
                    "engine_num_blocks": config.num_blocks,
                }
            )
        tokens, concurrency = get_kv_cache_capacity(vc, configs[0])
        results.append(
            {
                **{k: v for k, v in case.items() if k != "override"},
                "config_overrides": case.get("override", {}),
                "num_hidden_layers": n_layers,
                "global_groups": [
                    {"spec": type(g.kv_cache_spec).__name__, "num_layers": len(g.layer_names), "page_size_bytes": g.kv_cache_spec.page_size_bytes}
                    for g in groups
                ],
                "stages": rows,
                "engine_num_blocks": min(r["engine_num_blocks"] for r in rows),
                "tokens": tokens,
                "concurrency": concurrency,
            }
        )
        print(
            f"{case['name']}: " + ", ".join(f"stage {i} {r['layers']} {r['own_num_blocks']} -> {r['engine_num_blocks']}" for i, r in enumerate(rows)),
            flush=True,
        )
    os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    document = {
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "platform": "vLLM CPU platform (VLLM_TARGET_DEVICE=cpu), block size 16 and the LBNHC layout as on CUDA",
        "cases": results,
    }
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "bench" / "results" / "vllm-pp-kv-reference-2026-12-01" / "reference.json"))
