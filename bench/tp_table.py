"""The measured tensor-parallel terms per rank against the arithmetic TP plan (no GPU needed).

    PYTHONPATH=. python3 bench/tp_table.py bench/results/h200x2-tp-2026-11-30 > bench/results/h200x2-tp-2026-11-30/table.md

For each `*-tp2-plan.json` written by `capacity profile --tensor-parallel-size 2 --json` (the measured plan, with
every rank's profile under profile.ranks), the arithmetic plan is built here for the same model, knobs and GPU
(its CUDA total) with no profile: `capacity/memory`'s formula path at that TP. The single-GPU profile of the
same model and knobs (bench/results/h200-profiles-2026-11-30) gives the TP 1 column. `--weights-from PATH` adds the
weights that another checkout's `capacity.memory.weights.weights_term` gives (e.g. the weights branch's per-rank rules),
computed in a subprocess with PYTHONPATH=PATH.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TP1 = REPO / "bench/results/h200-profiles-2026-11-30"
TP1_FILES = {
    "openai/whisper-large-v3": "profile-openai--whisper-large-v3.json",
    "nvidia/NVIDIA-Nemotron-Parse-v1.1": "profile-nvidia--NVIDIA-Nemotron-Parse-v1.1.json",
    "Qwen/Qwen2.5-VL-7B-Instruct": "profile-Qwen--Qwen2.5-VL-7B-Instruct.json",
}
ROWS = ("weights", "activation_peak", "encoder_cache", "non_torch", "cuda_graphs", "collectives", "kv_cache")


def arithmetic_plan(model: str, knobs: dict[str, Any], total: int) -> Any:
    from capacity.gpu.catalog import gpu_by_name
    from capacity.model.registry import model_spec
    from capacity.planning.planner import build_plan
    from capacity.serving.config import ServingArgs, resolve_serving
    from capacity.source.resolve import resolve_model

    source = resolve_model(model)
    spec = model_spec(source)
    gpu = replace(gpu_by_name("H200"), total_memory_bytes=total)
    args = ServingArgs(
        max_model_len=knobs["max_model_len"],
        max_num_seqs=knobs["max_num_seqs"],
        max_num_batched_tokens=knobs["max_num_batched_tokens"],
        tensor_parallel_size=knobs["tensor_parallel_size"],
        dtype=knobs["dtype"],
    )
    return build_plan(source, spec, gpu, resolve_serving(args, spec, gpu))


def other_weights(path: Path, model: str, knobs: dict[str, Any]) -> int:
    code = (
        "import json,sys;sys.meta_path=[f for f in sys.meta_path if 'editable' not in str(f)];sys.path.insert(0,sys.argv[3]);"
        "from capacity.model.registry import model_spec;from capacity.gpu.catalog import gpu_by_name;"
        "from capacity.source.resolve import resolve_model;from capacity.memory.weights import weights_term;"
        "from capacity.serving.config import ServingArgs,resolve_serving;k=json.loads(sys.argv[2]);s=resolve_model(sys.argv[1]);"
        "spec=model_spec(s);"
        "sv=resolve_serving(ServingArgs(tensor_parallel_size=k['tensor_parallel_size'],dtype=k['dtype']),spec,gpu_by_name('H200'));"
        "import capacity;assert capacity.__file__.startswith(sys.argv[3]),capacity.__file__;print(weights_term(spec,s,sv)[0].bytes)"
    )
    out = subprocess.run([sys.executable, "-c", code, model, json.dumps(knobs), str(path)], cwd=path, capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def pct(measured: int, planned: int) -> str:
    return "" if not measured else f"{(planned - measured) / measured:+.1%}"


NCCL_COMMUNICATOR_BYTES = 0  # set in main() from capacity.memory.collectives (the planner's constant)


def main() -> None:
    global NCCL_COMMUNICATOR_BYTES
    from capacity.memory.collectives import NCCL_COMMUNICATOR_BYTES as nccl

    NCCL_COMMUNICATOR_BYTES = nccl
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("--weights-from", type=Path, help="a checkout whose capacity.memory.weights.weights_term gives per-rank weights")
    a = ap.parse_args()
    print("| model | term | TP 1 measured (B) | TP 2 rank 0 measured (B) | TP 2 rank 1 measured (B) | arithmetic TP 2 plan (B) | plan vs measured |" + (" weights branch (B) | vs measured |" if a.weights_from else ""))
    print("|---|---|---|---|---|---|---|" + ("---|---|" if a.weights_from else ""))
    for path in sorted(a.folder.glob("*-tp2-plan.json")):
        measured = json.loads(path.read_text())
        profile = measured["profile"]
        model = measured["model"]["name"]
        knobs = profile["fingerprint"]["knobs"]
        plan = arithmetic_plan(model, knobs, profile["fingerprint"]["gpu_total_memory_bytes"])
        tp1 = json.loads((TP1 / TP1_FILES[model]).read_text()) if model in TP1_FILES else None
        ranks = {r["rank"]: r for r in measured["ranks"]}
        label = f"{model} ({knobs.get('mm_encoder_tp_mode', 'weights')})"
        for term in ROWS:
            if term == "kv_cache":
                values = [ranks[r]["available_kv_bytes"] for r in (0, 1)]
                planned = plan.kv.available_bytes
                one = None
            elif term == "collectives":  # NCCL's communicator; vLLM's own all-reduce buffers are not run here
                values = [p["communicator_bytes"] for p in profile["ranks"]]
                planned = NCCL_COMMUNICATOR_BYTES
                one = 0
            else:
                key = {"weights": "weights_bytes", "activation_peak": "activation_peak_bytes", "encoder_cache": "encoder_cache_bytes", "non_torch": "non_torch_bytes", "cuda_graphs": "cuda_graphs_bytes"}[term]
                values = [ranks[r][key] for r in (0, 1)]
                planned = plan.memory[term].bytes
                one = None
                if tp1 is not None:
                    graphs = (tp1.get("cuda_graphs") or {}).get("estimate_bytes", 0)
                    one = {
                        "weights": tp1["weights_bytes"],
                        "activation_peak": max(tp1["transient_peak_headroom_bytes"] - tp1["encoder_cache_bytes"], 0),
                        "encoder_cache": tp1["encoder_cache_bytes"],
                        "non_torch": max(tp1["total_consumed_bytes"] - tp1["weights_bytes"], 0),
                        "cuda_graphs": graphs,
                    }[term]
            name = "NCCL communicator" if term == "collectives" else "available KV" if term == "kv_cache" else term
            row = f"| {label} | {name} | {'' if one is None else f'{one:,}'} | {values[0]:,} | {values[1]:,} | {planned:,} | {pct(max(values), planned)} |"
            if a.weights_from:
                if term == "weights":
                    other = other_weights(a.weights_from, model, knobs)
                    row += f" {other:,} | {pct(max(values), other)} |"
                else:
                    row += " | |"
            print(row)


if __name__ == "__main__":
    main()
