"""Peak bytes of the V1 model runner's dummy sampler run (`GPUModelRunner._dummy_sampler_run`), measured by running
each vLLM version's own `Sampler` on CPU under capacity's CpuProbe (live tensor bytes).

Run with the vLLM 0.33 venv, outside the test suite (vLLM is never a test dependency), on the unzipped sources of
older wheels (`pip download vllm==X --no-deps`, then unzip `vllm/v1/sample/*`):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_sampler_reference.py OUT.json \
        0.9.2=/path/to/unzipped-0.9.2 0.15.1=/path/to/unzipped-0.15.1 0.18.0=/path/to/unzipped-0.18.0

For each version the script executes that wheel's `vllm/v1/sample/{metadata,sampler}.py` and
`vllm/v1/sample/ops/*.py` in place of 0.33's modules of the same names (the rest of the `vllm` package is 0.33's:
logger, envs, platforms), builds the `SamplingMetadata` that version's `_dummy_sampler_run` builds (temperature 0.5,
top_p 0.9, top_k vocab - 1, no_penalties, no logprobs), and calls `Sampler.forward` with `TopKTopPSampler.forward`
bound to `forward_native` (what the CUDA path runs without FlashInfer). The logits (rows x vocab, bfloat16) are made
before tracking starts, as `compute_logits` makes them before the sampler: the figure is the sampler's own peak above
them. Where a version's `apply_top_k_top_p` dispatches to the Triton kernel on CUDA (0.18.0+: `HAS_TRITON and
logits.shape[0] >= 8`), the script also runs the `_pytorch` sort fallback and reports the Triton path with the
kernel taken as in-place (it allocates nothing but a cached num_SMs x vocab fp32 buffer, read from
`apply_top_k_top_p_triton`, not counted here).
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROWS = (64, 256)
VOCABS = (151936, 128256)  # Qwen2.5 / Qwen3, Llama 3


def _load(name: str, path: Path) -> None:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def load_version(src: Path) -> object:
    """Execute the wheel's sampler modules under vLLM's module names; return its `vllm.v1.sample.sampler` module."""
    import vllm.utils
    import vllm.v1.sample  # noqa: F401  (0.33's package objects the old modules are put into)
    from vllm.utils.platform_utils import is_pin_memory_available
    from vllm.utils.torch_utils import make_tensor_with_pad

    # helpers 0.9.2's modules import from vllm.utils, moved since (same functions, new homes)
    vllm.utils.is_pin_memory_available = is_pin_memory_available
    vllm.utils.make_tensor_with_pad = make_tensor_with_pad
    import vllm.config

    if not hasattr(vllm.config, "LogprobsMode"):  # 0.10.2's enum, a Literal of the same strings since
        import enum

        vllm.config.LogprobsMode = enum.Enum(
            "LogprobsMode",
            {m.upper(): m for m in ("raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits")},
            type=str,
        )

    sample = src / "vllm" / "v1" / "sample"
    lp = sample / "logits_processor"
    if lp.is_dir():
        for f in ("interface.py", "state.py", "builtin.py", "__init__.py"):
            if (lp / f).exists():
                _load("vllm.v1.sample.logits_processor" + ("" if f == "__init__.py" else "." + f[:-3]), lp / f)
    else:
        _load("vllm.v1.sample.logits_processor", sample / "logits_processor.py")
    _load("vllm.v1.sample.metadata", sample / "metadata.py")
    for f in ("topk_topp_triton.py", "bad_words.py", "logprobs.py", "penalties.py", "topk_topp_sampler.py"):
        if (sample / "ops" / f).exists():
            _load("vllm.v1.sample.ops." + f[:-3], sample / "ops" / f)
    _load("vllm.v1.sample.sampler", sample / "sampler.py")
    return sys.modules["vllm.v1.sample.sampler"]


def dummy_metadata(version_sampler: object, rows: int, vocab: int) -> object:
    """The SamplingMetadata `_dummy_sampler_run` builds (0.9.2 to 0.27.1 build the same values; fields differ)."""
    import dataclasses

    import torch

    metadata_module = sys.modules["vllm.v1.sample.metadata"]
    processors = getattr(metadata_module, "LogitsProcessors", None) or metadata_module.LogitsProcessorManager

    def full(v: float) -> torch.Tensor:
        return torch.full((rows,), v)

    values = {
        "temperature": full(0.5),
        "all_greedy": False,
        "all_random": False,
        "top_p": full(0.9),
        "top_k": full(vocab - 1),
        "generators": {},
        "max_num_logprobs": None,
        "logprob_token_ids": None,
        "no_penalties": True,
        "prompt_token_ids": None,
        "frequency_penalties": full(0.1),
        "presence_penalties": full(0.1),
        "repetition_penalties": full(0.1),
        "output_token_ids": [[] for _ in range(rows)],
        "spec_token_ids": [[] for _ in range(rows)],
        "allowed_token_ids_mask": None,
        "bad_words_token_ids": {},
        "logitsprocs": processors(),
    }
    fields = {f.name for f in dataclasses.fields(metadata_module.SamplingMetadata)}
    return metadata_module.SamplingMetadata(**{k: v for k, v in values.items() if k in fields})


def measure(sampler_module: object, rows: int, vocab: int, path: str) -> int:
    """Peak live bytes above the bf16 logits while the version's Sampler runs the dummy batch on `path`."""
    import torch

    from profilers.probes import CpuProbe

    ops = sys.modules["vllm.v1.sample.ops.topk_topp_sampler"]
    if hasattr(ops, "HAS_TRITON"):  # the version dispatches to Triton on CUDA (its import is skipped without Triton)
        if path == "triton":  # the kernel masks the fp32 logits in place (apply_top_k_top_p_triton)
            ops.apply_top_k_top_p_triton = lambda logits, k, p, *a, **kw: logits
            ops.HAS_TRITON = True
        else:
            ops.HAS_TRITON = False
    sampler = sampler_module.Sampler()
    sampler.topk_topp_sampler.forward = sampler.topk_topp_sampler.forward_native
    if hasattr(sampler.topk_topp_sampler, "apply_top_k_top_p"):
        sampler.topk_topp_sampler.apply_top_k_top_p = ops.apply_top_k_top_p
    torch.manual_seed(0)
    logits = torch.randn(rows, vocab, dtype=torch.bfloat16)
    metadata = dummy_metadata(sampler_module, rows, vocab)
    probe = CpuProbe()
    with torch.inference_mode(), probe.tracking():
        output = sampler(logits=logits, sampling_metadata=metadata)
    del output
    return probe.peak()


def main() -> None:
    out = Path(sys.argv[1])
    import torch
    import vllm

    sys.path.insert(0, str(ROOT))
    results = []
    for arg in sys.argv[2:]:
        version, src = arg.split("=", 1)
        module = load_version(Path(src))
        has_triton_path = hasattr(sys.modules["vllm.v1.sample.ops.topk_topp_sampler"], "HAS_TRITON")
        for path in ("sort", "triton") if has_triton_path else ("sort",):
            for vocab in VOCABS:
                for rows in ROWS:
                    peak = measure(module, rows, vocab, path)
                    results.append(
                        {
                            "version": version,
                            "top_k_top_p": path,
                            "rows": rows,
                            "vocab": vocab,
                            "logits_dtype": "bfloat16",
                            "peak_bytes_above_logits": peak,
                            "bytes_per_logit": peak / (rows * vocab),
                        }
                    )
                    print(version, path, rows, vocab, peak, round(peak / (rows * vocab), 3), flush=True)
    doc = {
        "what": "peak live tensor bytes of each version's own Sampler.forward on the _dummy_sampler_run metadata, "
        "TopKTopPSampler.forward_native, above the bf16 logits (measured on CPU, capacity's CpuProbe)",
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "host_vllm": vllm.__version__,
        "rows_note": "rows 64 and 256 (1024 rows would need > 4 GiB of host memory on the sort path: the figure is linear in rows)",
        "results": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
