"""What a `--cpu-probe` run will cost this host, estimated before it starts, and the limits it must stay under.

`--cpu-probe` runs every phase of `capacity profile` (or `capacity verify`) for real on the CPU: a 1.5 B-parameter
Whisper at an H200's defaults is about 10 GB of host memory and hours of matrix products (its warmup projects 1,500
encoder positions for each of ~540 requests in every decoder layer). The estimate, from the formula plan of the
same knobs, is:

- host memory = this process's resident memory now + the weights + the larger of the profile run (activation peak
  + encoder outputs, the plan's formula terms) and the warmup (encoder-decoder: the warmup requests' encoder
  positions and one layer's cross-attention K and V, `3 x num_reqs x max_encoder_len x hidden x dtype`, plus fp32
  logits); for `verify`, the planned KV pool and block tables instead of the warmup;
- time = the multiply-adds of each phase (2 FLOPs each: per transformer layer and token, the attention
  projections `4 x hidden^2`, the MLP `(2 or 3) x hidden x ffn`, attention over the context `2 x context x
  hidden`; the LM head `hidden x vocab` per sampled row) at the matrix-product rate measured on this CPU in the
  serving dtype, plus the weights' random initialisation at the measured `normal_` rate (and, for `verify`,
  zero-filling the pool at the measured fill rate).

Both are estimates (convolutions, norms and element-wise ops are left out); they decide whether to start, and
the progress lines show them per phase. Above the limits (`CpuProbeLimits`: half the host's available memory,
5 minutes) the run is refused in one line that names the faster way.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from capacity.errors import BadInput
from capacity.model.spec import ModelSpec
from capacity.planning.plan import Plan

MAX_SECONDS = 300  # documented in the README: a --cpu-probe run longer than this is refused


@dataclass(frozen=True)
class HostRates:
    """This CPU's speed, measured in the serving dtype (a fraction of a second)."""

    matmul_flops_per_s: float
    normal_elements_per_s: float  # Tensor.normal_ (random weights)
    fill_bytes_per_s: float  # torch.zeros (verify's KV pool)


@dataclass(frozen=True)
class PhaseCost:
    name: str  # the profiler's phase name
    flops: int
    seconds: float


@dataclass(frozen=True)
class CpuProbeCost:
    """Estimated host memory and time of one --cpu-probe run."""

    command: str  # "profile" | "verify"
    host_bytes: int
    baseline_bytes: int  # this process's resident memory before the run
    seconds: float
    phases: tuple[PhaseCost, ...]
    rates: HostRates

    def phase_seconds(self, name: str) -> float | None:
        return next((p.seconds for p in self.phases if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CpuProbeLimits:
    max_host_bytes: int
    max_seconds: float

    @classmethod
    def for_this_host(cls) -> CpuProbeLimits:
        """Half of the memory the host has available now, and MAX_SECONDS."""
        return cls(max_host_bytes=available_host_bytes() // 2, max_seconds=MAX_SECONDS)


def available_host_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux), else the physical memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def resident_bytes() -> int:
    """This process's resident set size (VmRSS), 0 where /proc is missing."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure_host_rates(dtype: str, seconds: float = 0.15) -> HostRates:
    """Time a 512 x 1024 x 1024 matrix product, normal_ and zeros in `dtype` on this CPU."""
    import torch

    dt = getattr(torch, dtype)

    def rate(work: float, run: Any) -> float:
        run()  # warm up (allocations, kernels)
        n, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds or n == 0:
            run()
            n += 1
        return work * n / elapsed

    a, b = torch.ones(512, 1024, dtype=dt), torch.ones(1024, 1024, dtype=dt)
    x = torch.empty(1 << 20, dtype=dt)
    fill = 16 << 20
    return HostRates(
        matmul_flops_per_s=rate(2 * 512 * 1024 * 1024, lambda: a @ b),
        normal_elements_per_s=rate(x.numel(), lambda: x.normal_(0.0, 0.02)),
        fill_bytes_per_s=rate(fill, lambda: torch.zeros(fill, dtype=torch.uint8)),
    )


def layer_flops(tokens: int, context: int, hidden: int, ffn: int, gated: bool, cross_queries: bool = False) -> int:
    """One transformer layer over `tokens` tokens attending to `context` keys each (2 FLOPs per multiply-add)."""
    weights = 4 * hidden * hidden + (3 if gated else 2) * hidden * ffn + (2 * hidden * hidden if cross_queries else 0)
    return 2 * tokens * weights + 2 * 2 * tokens * context * hidden


def cross_kv_flops(requests: int, positions: int, hidden: int) -> int:
    """K and V projections of `positions` encoder positions for each request, in one decoder layer."""
    return 2 * 2 * requests * positions * hidden * hidden


def encoder_flops(spec: ModelSpec, items: int, tokens_per_item: int, modality: str | None = None) -> int:
    enc = spec.encoder
    if enc is None or items == 0:
        return 0
    seq = spec.encoder_positions(modality, tokens_per_item)
    return items * enc.num_layers * layer_flops(seq, seq, enc.hidden_size, enc.ffn_size, enc.gated_ffn)


def profile_phase_flops(plan: Plan, warmup: bool = True) -> list[tuple[str, int]]:
    """(phase, FLOPs) of `capacity profile`'s phases for this plan's knobs (profilers/run.py)."""
    spec, s, dec = plan.spec, plan.serving, plan.spec.decoder
    cross = spec.is_encoder_decoder
    reqs = min(s.max_num_batched_tokens, s.max_num_seqs)
    per_req = -(-s.max_num_batched_tokens // reqs)
    phases = [
        ("encoder", encoder_flops(spec, plan.budget.profile_items, plan.budget.profile_tokens_per_item, plan.budget.modality_with_max_tokens)),
        ("decoder", dec.num_layers * layer_flops(reqs * per_req, per_req, dec.hidden_size, dec.ffn_size, dec.gated_ffn, cross)),
        ("sampler", 2 * reqs * dec.hidden_size * dec.vocab_size),
        ("sampler_warmup", 10 * reqs * dec.vocab_size),  # elementwise passes over rows x vocab (copy, kernels, mask, softmax)
    ]
    if warmup:
        w = plan.warmup
        for name, length in (("warmup_prefill", w.prompt_len), ("warmup_decode", w.decode_query_len)):
            per_layer = layer_flops(w.num_reqs * length, length + w.max_encoder_len, dec.hidden_size, dec.ffn_size, dec.gated_ffn, cross)
            per_layer += cross_kv_flops(w.num_reqs, w.max_encoder_len, dec.hidden_size)
            phases.append((name, dec.num_layers * per_layer + 2 * w.num_reqs * dec.hidden_size * dec.vocab_size))
    return phases


def verify_phase_flops(plan: Plan, steps: int) -> list[tuple[str, int]]:
    """(phase, FLOPs) of `capacity verify` (profilers/verify.py): encoder items, their K/V per layer, decode steps."""
    spec, s, dec = plan.spec, plan.serving, plan.spec.decoder
    requests = min(plan.concurrency.actual_requests, s.max_num_seqs)
    enc_len = spec.encoder_tokens_per_request
    encoder = encoder_flops(spec, max(plan.budget.profile_items, 1), plan.budget.profile_tokens_per_item, plan.budget.modality_with_max_tokens)
    encoder += dec.num_layers * cross_kv_flops(1, enc_len, dec.hidden_size)
    step = dec.num_layers * layer_flops(requests, s.max_model_len + enc_len, dec.hidden_size, dec.ffn_size, dec.gated_ffn, True)
    step += 2 * requests * dec.hidden_size * dec.vocab_size
    return [("encoder", encoder), *((f"decode_{i}", step) for i in range(steps))]


def _dtype_bytes(plan: Plan) -> int:
    return plan.serving.dtype_bytes


def _probe_weights_bytes(plan: Plan) -> int:
    """The model the probe builds: every parameter transformers defines, in the serving dtype, on one host (not
    the plan's weights term, which is one TP rank laid out as vLLM lays it out)."""
    return plan.parameter_count * _dtype_bytes(plan)


def estimate_profile_cost(plan: Plan, rates: HostRates, *, warmup: bool = True, baseline_bytes: int | None = None) -> CpuProbeCost:
    """Host memory and time of `capacity profile --cpu-probe` for this plan's model and knobs."""
    m, w, dec = plan.memory, plan.warmup, plan.spec.decoder
    profile_run = m["activation_peak"].bytes + m["encoder_cache"].bytes
    warmup_bytes = 0
    if warmup:
        warmup_bytes = 3 * w.num_reqs * w.max_encoder_len * dec.hidden_size * _dtype_bytes(plan) + 3 * w.num_reqs * dec.vocab_size * 4
    baseline = resident_bytes() if baseline_bytes is None else baseline_bytes
    host = baseline + _probe_weights_bytes(plan) + max(profile_run, warmup_bytes)
    phases = [PhaseCost("weights", 0, plan.parameter_count / rates.normal_elements_per_s)]
    phases += [PhaseCost(name, flops, flops / rates.matmul_flops_per_s) for name, flops in profile_phase_flops(plan, warmup)]
    return CpuProbeCost("profile", host, baseline, sum(p.seconds for p in phases), tuple(phases), rates)


def estimate_verify_cost(plan: Plan, rates: HostRates, *, steps: int, baseline_bytes: int | None = None) -> CpuProbeCost:
    """Host memory and time of `capacity verify --cpu-probe`: the planned KV pool is allocated on the host."""
    m, kv = plan.memory, plan.kv
    pool = kv.num_blocks * kv.bytes_per_block + m["block_tables"].bytes
    baseline = resident_bytes() if baseline_bytes is None else baseline_bytes
    host = baseline + _probe_weights_bytes(plan) + pool + m["activation_peak"].bytes + m["encoder_cache"].bytes
    phases = [
        PhaseCost("weights", 0, plan.parameter_count / rates.normal_elements_per_s),
        PhaseCost("kv_pool", 0, pool / rates.fill_bytes_per_s),
    ]
    phases += [PhaseCost(name, flops, flops / rates.matmul_flops_per_s) for name, flops in verify_phase_flops(plan, steps)]
    return CpuProbeCost("verify", host, baseline, sum(p.seconds for p in phases), tuple(phases), rates)


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def check_cost(cost: CpuProbeCost, limits: CpuProbeLimits, model: str) -> None:
    """BadInput, in one line, when the run would exceed a limit; it names the faster way to the same answer."""
    over = []
    if cost.host_bytes > limits.max_host_bytes:
        over.append(f"{_gb(cost.host_bytes)} of host memory (limit {_gb(limits.max_host_bytes)}: half of what this host has available)")
    if cost.seconds > limits.max_seconds:
        over.append(f"{duration(cost.seconds)} on this CPU (limit {duration(limits.max_seconds)})")
    if not over:
        return
    faster = (
        f"`capacity plan --model {model}` runs the same phases on fake tensors in seconds (or `--estimate formula`)"
        if cost.command == "profile"
        else "verify needs the GPU the plan is for; on the CPU, use a smaller --kv-cache-memory-bytes and --max-num-seqs"
    )
    raise BadInput(f"--cpu-probe would need about {' and '.join(over)}, estimated; {faster}; --force runs it anyway")
