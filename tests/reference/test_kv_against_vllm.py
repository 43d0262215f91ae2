"""capacity's KV planning against what vLLM 0.33.0 itself computed for the same cases.

The numbers come from bench/vllm_kv_reference.py, which ran vLLM's own spec classes, block-size functions,
get_global_kv_cache_groups, get_kv_cache_configs and get_kv_cache_capacity (CPU platform, CUDA block-size
choices); its output is committed under bench/results/vllm-kv-reference-2026-11-30/. vLLM is not imported here.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from capacity.gpu.catalog import gpu_by_name
from capacity.kv.specs import bytes_per_block
from capacity.model.registry import spec_from_files
from capacity.planning.kv_groups import block_context, kv_groups_for
from capacity.planning.planner import max_model_len_that_fits
from capacity.planning.warmup import warmup_plan
from capacity.serving.config import ServingArgs, resolve_serving
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
REFERENCE = ROOT / "bench" / "results" / "vllm-kv-reference-2026-11-30" / "reference.json"
DOCUMENT = json.loads(REFERENCE.read_text())
CASES = DOCUMENT["cases"]


def config_of(ref: str) -> dict[str, Any]:
    """`catalog:<entry>` (a catalog folder's config.json, or an early entry's <entry>.json) or a test fixture."""
    if not ref.startswith("catalog:"):
        return json.loads((ROOT / "tests" / "fixtures" / "configs" / ref).read_text())
    name, _, key = ref.split(":", 1)[1].partition("#")  # `#text_config`: a published VL config's text config, alone
    entry = ROOT / "capacity" / "source" / "catalog" / "models" / name
    raw = json.loads((entry / "config.json" if entry.is_dir() else entry.with_suffix(".json")).read_text())
    return raw[key] if key else raw


def capacity_groups(case: dict[str, Any]) -> tuple[Any, list[Any]]:
    spec = spec_from_files(config_of(case["config"]), case["name"])
    gpu = gpu_by_name(case["gpu"])
    serving = resolve_serving(serving_args(case), spec, gpu)
    return serving, kv_groups_for(spec, serving, gpu)


def serving_args(case: dict[str, Any]) -> ServingArgs:
    return ServingArgs(
        max_model_len=case["max_model_len"],
        max_num_batched_tokens=case["mnbt"],
        max_num_seqs=256,
        tensor_parallel_size=case["tp"],
        kv_cache_dtype=case.get("kv", "auto"),
        num_speculative_tokens=case.get("spec", 0),
        enable_prefix_caching=case.get("prefix_caching", True),
        limit_mm_per_prompt=case.get("limit_mm"),
        block_size=case.get("block_size"),
    )


def capacity_plan(case: dict[str, Any]) -> dict[str, Any]:
    """The same figures, from capacity's model description, knobs and GPU only."""
    spec = spec_from_files(config_of(case["config"]), case["name"])
    gpu = gpu_by_name(case["gpu"])
    serving = resolve_serving(serving_args(case), spec, gpu)
    groups = kv_groups_for(spec, serving, gpu)
    bpb = bytes_per_block(groups)
    ctx = block_context(serving)
    blocks = [g.spec.blocks_per_request_vllm(ctx) for g in groups]
    warmup = warmup_plan(
        spec,
        groups,
        num_speculative_tokens=serving.num_speculative_tokens,
        max_model_len=serving.max_model_len,
        max_num_seqs=serving.max_num_seqs,
        max_num_batched_tokens=serving.max_num_batched_tokens,
        num_blocks=1 << 30,
    )
    by_available = []
    for row in case["by_available"]:
        available = row["available_bytes"]
        if bpb * sum(blocks) > available - bpb:  # _check_enough_kv_cache_memory (the null block held back)
            fits = max_model_len_that_fits(groups, bpb, serving, available, serving.max_model_len)
            by_available.append({"available_bytes": available, "refused": True, "estimated_max_model_len": fits})
            continue
        num_blocks = available // bpb
        concurrency = num_blocks / sum(blocks)
        by_available.append({"available_bytes": available, "num_blocks": num_blocks, "tokens": int(concurrency * serving.max_model_len), "concurrency": concurrency})
    return {
        "layers_with_kv": sum(g.num_layers for g in groups),
        "groups": [
            {
                "spec": type(g.spec).__name__,
                "num_layers": g.num_layers,
                "block_size": g.spec.block_size,
                "page_size_bytes": g.page_size_bytes,
                "blocks_per_request": n,
                "block_table_width": g.spec.block_table_width(serving.max_model_len, serving.decode_context_parallel_size),
                "warmup_blocks": w,
            }
            for g, n, w in zip(groups, blocks, warmup.blocks_per_request, strict=True)
        ],
        "bytes_per_block": bpb,
        "warmup_decode_len": warmup.decode_len,
        "needed_bytes_one_request": bpb * sum(blocks),
        "by_available": by_available,
        # vLLM's estimate receives the budget after the null block; capacity's takes the memory before it.
        "max_model_len_that_fits": max_model_len_that_fits(groups, bpb, serving, case["fit_budget_bytes"] + bpb, serving.max_model_len),
    }


def differences(case: dict[str, Any]) -> list[str]:
    if "startup_error" in case:  # vLLM did not start: capacity must see the same overflowing page
        serving, groups = capacity_groups(case)
        over = [g for g in groups if g.spec.overflows_page]
        if not over:
            return [f"vLLM: {case['startup_error']}; capacity sees no state outgrowing its page"]
        if over[0].spec.page_size_bytes != case["mamba_page_size_padded"] or serving.block_size != case["block_size"]:
            return [f"padded page {over[0].spec.page_size_bytes} vs vLLM {case['mamba_page_size_padded']}"]
        return []
    mine = capacity_plan(case)
    out = []
    for key in ("groups", "bytes_per_block", "warmup_decode_len", "needed_bytes_one_request", "max_model_len_that_fits"):
        if mine[key] != case[key]:
            out.append(f"{key}: capacity {mine[key]} vs vLLM {case[key]}")
    if mine["layers_with_kv"] != case["layers_with_kv"]:
        out.append(f"layers with KV: capacity {mine['layers_with_kv']} vs vLLM {case['layers_with_kv']}")
    for got, want in zip(mine["by_available"], case["by_available"], strict=True):
        if "error" in want or "refused" in got:
            # vLLM: "... the estimated maximum model length is N." when one request does not fit
            estimate = re.search(r"estimated maximum model length is (\d+)", want.get("error", ""))
            if "refused" not in got or "error" not in want or estimate is None or int(estimate.group(1)) != got["estimated_max_model_len"]:
                out.append(f"refusal at {want['available_bytes']} B: capacity {got} vs vLLM {want}")
            continue
        for key in ("num_blocks", "tokens"):
            if got[key] != want[key]:
                out.append(f"{key} at {want['available_bytes']} B: capacity {got[key]} vs vLLM {want[key]}")
        if got["concurrency"] != pytest.approx(want["concurrency"], rel=1e-12):
            out.append(f"concurrency at {want['available_bytes']} B: capacity {got['concurrency']} vs vLLM {want['concurrency']}")
    return out


def test_reference_was_made_by_vllm_0_33_with_enough_cases():
    assert DOCUMENT["vllm_version"].startswith("0.33.0")
    assert len(CASES) >= 24
    specs = {g["spec"] for case in CASES for g in case.get("groups", [])}
    assert specs >= {"FullAttentionSpec", "SlidingWindowSpec", "ChunkedLocalAttentionSpec", "CrossAttentionSpec", "MLAAttentionSpec", "MambaSpec"}
    assert {case["tp"] for case in CASES} >= {1, 2, 4}
    assert any(case.get("kv") == "fp8" for case in CASES)
    # Gemma-3n: 35 layers, the last 15 read earlier layers' KV (num_kv_shared_layers) and get no spec.
    assert {case["layers_with_kv"] for case in CASES if "gemma-3n" in case["name"]} == {35 - 15}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_capacity_matches_vllm(case):
    assert differences(case) == []
