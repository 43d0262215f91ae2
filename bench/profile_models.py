"""Profile catalog models on the GPU with vLLM 0.33's default knobs for it; write each profile and
a summary (markdown + JSON) under OUT_DIR. Also the speed benchmark: a full whisper-large-v3 profile
in a fresh process (CUDA init included) against the floor (build on GPU + one max-size encoder
batch + one decoder step in plain transformers), in the same run.

    PYTHONPATH=. python3 bench/profile_models.py OUT_DIR [MODEL ...]

A MODEL written `name::{"max_pixels": 1003520}` is profiled with those --mm-processor-kwargs (its profile file is
named with a `-mm-kwargs` suffix).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_MODELS = [
    "openai/whisper-tiny",
    "openai/whisper-large-v3",
    "openai/whisper-large-v3-turbo",
    "nvidia/NVIDIA-Nemotron-Parse-v1.1",
    "Qwen/Qwen2.5-VL-7B-Instruct",
]


def profile_one(model: str, out_dir: Path) -> dict:
    from capacity.memory.measured_profile import save_profile
    from capacity.serving.config import ServingArgs
    from profilers.api import profile_model

    name, _, kwargs = model.partition("::")
    mm_kwargs = json.loads(kwargs) if kwargs else None
    start = time.perf_counter()
    plan, profile = profile_model(name, ServingArgs(mm_processor_kwargs=mm_kwargs))
    wall = time.perf_counter() - start
    stem = name.replace("/", "--") + ("-mm-kwargs" if mm_kwargs else "")
    save_profile(profile, out_dir / f"profile-{stem}.json")
    return {"model": model, "wall_s": round(wall, 2), "verdict": plan.verdict, "oom": None if profile.oom is None else profile.oom.phase}


def floor_whisper() -> float:
    """Build on GPU + one max-size encoder batch + one decoder step, plain transformers, fresh process."""
    code = r'''
import torch
from capacity.model.family import family_named
from capacity.source.resolve import resolve_model
m = family_named("whisper").build_module(resolve_model("openai/whisper-large-v3").config, device="cuda", dtype="float16", init_weights=False, attn_implementation="sdpa").eval()
with torch.inference_mode():
    enc = m.model.encoder(input_features=torch.randn(5, 128, 3000, device="cuda", dtype=torch.float16)).last_hidden_state
    ids = torch.zeros(1024, 8, dtype=torch.long, device="cuda")
    m.proj_out(m.model.decoder(input_ids=ids, encoder_hidden_states=torch.zeros(1024, 1, 1280, device="cuda", dtype=torch.float16), use_cache=False).last_hidden_state)
torch.cuda.synchronize()
'''
    return timed(code)


def timed(code: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return time.perf_counter() - start


def full_profile_whisper() -> float:
    code = "from capacity.serving.config import ServingArgs\nfrom profilers.api import profile_model\nprofile_model('openai/whisper-large-v3', ServingArgs())\n"
    return timed(code)


def main() -> None:
    out_dir = Path(sys.argv[1])
    models = sys.argv[2:] or DEFAULT_MODELS
    rows = []
    for model in models:
        try:
            rows.append(profile_one(model, out_dir))
        except Exception as exc:  # record and go on: one model must not lose the others
            rows.append({"model": model, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        print(json.dumps(rows[-1]), flush=True)
    speed = {}
    if "openai/whisper-large-v3" in models:
        speed = {"full_profile_fresh_process_s": round(full_profile_whisper(), 2), "floor_fresh_process_s": round(floor_whisper(), 2)}
        speed["ratio"] = round(speed["full_profile_fresh_process_s"] / speed["floor_fresh_process_s"], 2)
        print(json.dumps(speed), flush=True)
    (out_dir / "summary.json").write_text(json.dumps({"runs": rows, "speed": speed}, indent=2))


if __name__ == "__main__":
    main()
