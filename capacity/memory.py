"""Memory terms without a GPU: exact where the architecture fixes them, documented estimates elsewhere.

Every term says how it was obtained (`kind`: exact / estimated / measured) and by which method.
The estimates are rough formulas, replaced by measurements once a GPU profile is given.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from capacity.budget import MultiModalBudget
from capacity.errors import RuntimeFailure
from capacity.models import ModelSource
from capacity.profile import MemoryProfile
from capacity.serving import ServingConfig
from capacity.spec import DTYPE_BYTES, DecoderShape, ModelSpec
from capacity.units import MiB

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.family import Family

EXACT = "exact"
ESTIMATED = "estimated"
MEASURED = "measured"

# Constants of the estimates (documented in README "How each figure is obtained").
# CUDA context + cuBLAS/cuBLASLt handles before vLLM's baseline snapshot: measured on the H200
# (torch 2.11, CUDA 13.0, driver 580.159.04; bench/results/calibration-h200-2026-11-30.json).
CUDA_CONTEXT_BYTES = 753_729_536
NCCL_BYTES_PER_RANK = 256 * MiB  # NCCL buffers when tensor_parallel_size > 1, before the snapshot
NON_TORCH_INCREASE_BYTES = 256 * MiB  # kernel modules loaded during profile_run (non-torch growth)
MIN_GRAPH_BYTES = 1 * MiB  # MRV2 _extrapolate_full_graph_memory floor per extra graph
# total_consumed - weights on the H200 (bench/results/h200-profiles-2026-11-30), what a fake-tensor trace cannot
# see: models that run convolutions initialise cuDNN (whisper-tiny, -large-v3, -turbo, Nemotron-Parse, Gemma-3,
# Qwen2.5-VL: 105.9 to 252.9 MB, median 134.9 MB); those that do not (BART, T5: 5.2 and 14.6 MB) stay small.
NON_TORCH_WITH_CONVOLUTIONS_BYTES = 134_862_848
NON_TORCH_WITHOUT_CONVOLUTIONS_BYTES = 9_925_888
# vLLM's own non-torch memory (consumed - weights), which a trace of transformers' modules cannot see (vLLM's
# attention and sampler kernels, cuBLAS and NCCL state): the median of the calibration half of bench/vllm_logs
# where a log prints it, 0.26 GiB (Llama-3.1-8B, H100, MRV2: consumed 15.26 - loaded 15.0), 0.27 GiB (Qwen2.5-1.5B,
# 0.28.1 MRV2: 3.25 - 2.98) and 0.56 GiB (Qwen2.5-0.5B, 0.27.1 under WSL2: 1.49 - 0.93). A fake trace's plan
# uses it, plus the cuDNN difference the H200 measured for models that run convolutions.
VLLM_NON_TORCH_BYTES = round(0.27 * 2**30)


@dataclass(frozen=True)
class MemoryTerm:
    bytes: int
    kind: str
    method: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- weights ---------------------------------------------------------------------------------------


@lru_cache(maxsize=32)
def _meta_parameter_count(family: Family, config_json: str) -> int:
    import json

    from capacity.arch import parameter_count

    module = family.build_module(json.loads(config_json), device="meta", dtype="bfloat16")
    return parameter_count(module)


# _config_json memo, keyed by the identity of the config dict (the entry keeps the dict alive, so the id
# cannot be reused): re-planning one model many times (a sweep) serializes its config once.
_CONFIG_JSON: dict[int, tuple[dict[str, Any], str]] = {}


def _config_json(config: dict[str, Any]) -> str:
    """The config as canonical JSON: the key of the meta-device build cache."""
    hit = _CONFIG_JSON.get(id(config))
    if hit is not None and hit[0] is config:
        return hit[1]
    import json

    text = json.dumps(config, sort_keys=True)
    if len(_CONFIG_JSON) >= 32:
        _CONFIG_JSON.clear()
    _CONFIG_JSON[id(config)] = (config, text)
    return text


def parameter_count(spec: ModelSpec, source: ModelSource) -> tuple[int, str]:
    """Parameters of the real architecture: the checkpoint's safetensors headers when known, else a meta-device build."""
    if source.weights is not None:
        return source.weights.element_count, source.weights.source
    try:
        count = _meta_parameter_count(spec.family, _config_json(source.config))
    except ImportError as exc:
        raise RuntimeFailure(f"exact weights need torch and transformers ({exc.name} missing): pip install the project") from exc
    except Exception as exc:  # a config transformers cannot build
        raise RuntimeFailure(f"building {spec.architecture} on the meta device failed: {exc}") from exc
    return count, f"parameters of {spec.architecture} built on the meta device"


def weights_term(spec: ModelSpec, source: ModelSource, serving: ServingConfig, counted: int | None = None) -> tuple[MemoryTerm, int]:
    """Parameter bytes in the serving dtype; `counted` is a count already taken (a profile's model).

    From safetensors headers (`CheckpointWeights.serving_bytes`): an unquantized checkpoint is its parameters in the
    serving dtype; a quantized one keeps its quantized tensors and fp32 scales as stored and casts its 16-bit ones
    (estimated: vLLM's kernels may repack or pad quantized weights)."""
    count, how = (counted, "parameters of the profiled model") if counted else parameter_count(spec, source)
    checkpoint = None if counted else source.weights
    quantized = checkpoint.quantized_dtypes if checkpoint is not None else ()
    if checkpoint is not None and quantized:
        total = checkpoint.serving_bytes(serving.dtype_bytes)
        kept = "/".join(d for d in sorted(checkpoint.bytes_by_dtype) if d not in ("F16", "BF16"))
        what = f"{count:,} stored elements: 16-bit ones x {serving.dtype_bytes} B ({serving.dtype}), {kept} as stored"
    else:
        total = count * serving.dtype_bytes
        what = f"{count:,} parameters x {serving.dtype_bytes} B ({serving.dtype})"
    kind = ESTIMATED if quantized else EXACT
    tp = serving.tensor_parallel_size
    if tp == 1:
        return MemoryTerm(total, kind, f"{what}; {how}"), count
    return (
        MemoryTerm(
            total // tp,
            ESTIMATED,
            f"{what} / TP {tp} (norms and biases are replicated, so slightly more); {how}",
        ),
        count,
    )


# --- encoder cache -----------------------------------------------------------------------------------


def encoder_cache_term(spec: ModelSpec, budget: MultiModalBudget, serving: ServingConfig) -> MemoryTerm:
    """profile_run holds N x T x hidden outputs as temporary encoder-cache entries through the decoder pass."""
    items, tokens = budget.profile_items, budget.profile_tokens_per_item
    if items == 0 or spec.encoder is None:
        return MemoryTerm(0, EXACT, "no encoder profiling (no multimodal budget)")
    hidden = spec.encoder.output_hidden_size
    return MemoryTerm(
        items * tokens * hidden * serving.dtype_bytes,
        EXACT,
        f"{items} {budget.modality_with_max_tokens} items x {tokens} tokens x {hidden} hidden x {serving.dtype_bytes} B",
    )


# --- activation peak (estimated) ---------------------------------------------------------------------


def per_token_activation_bytes(hidden: int, ffn: int, gated: bool, dtype_bytes: int) -> int:
    """Live bytes per token inside one transformer layer at its widest point.

    Residual + normed input (2 x hidden) plus the wider of attention projections (q, k, v, out:
    4 x hidden; attention runs in flash/sdpa kernels, no score matrix) and the MLP (fc1 + activation:
    2 x ffn, or gate/up + product: 3 x ffn when gated).
    """
    mlp = (3 if gated else 2) * ffn
    return dtype_bytes * (2 * hidden + max(4 * hidden, mlp))


def decoder_activation_bytes(decoder: DecoderShape, num_tokens: int, dtype_bytes: int, tp: int) -> int:
    return num_tokens * per_token_activation_bytes(decoder.hidden_size, decoder.ffn_size // tp, decoder.gated_ffn, dtype_bytes)


def sampler_bytes(decoder: DecoderShape, num_reqs: int, dtype_bytes: int) -> int:
    """One logits row per request in the model dtype, plus the one fp32 copy MRV2's sampler
    (penalties, temperature, top-k/top-p as in-place triton kernels) works on."""
    return num_reqs * decoder.vocab_size * (dtype_bytes + DTYPE_BYTES["float32"])


@dataclass(frozen=True)
class ActivationEstimate:
    encoder_bytes: int
    decoder_bytes: int
    sampler_bytes: int

    @property
    def peak(self) -> int:
        return max(self.encoder_bytes, self.decoder_bytes, self.sampler_bytes)

    @property
    def peak_phase(self) -> str:
        phases = {"encoder": self.encoder_bytes, "decoder": self.decoder_bytes, "sampler": self.sampler_bytes}
        return max(phases, key=lambda k: phases[k])


def activation_estimate(spec: ModelSpec, budget: MultiModalBudget, serving: ServingConfig) -> ActivationEstimate:
    """The profile_run phases: encoder on N max-size items, decoder on max_num_batched_tokens, sampler."""
    dtype = serving.dtype_bytes
    tp = serving.tensor_parallel_size
    encoder = 0
    if spec.encoder is not None and budget.profile_items:
        e = spec.encoder
        # vLLM runs multimodal encoders replicated (data-parallel style) unless configured otherwise.
        seq = e.seq_len_for(budget.profile_tokens_per_item)
        encoder = budget.profile_items * seq * per_token_activation_bytes(e.hidden_size, e.ffn_size, e.gated_ffn, dtype)
    decoder = decoder_activation_bytes(spec.decoder, serving.max_num_batched_tokens, dtype, tp)
    reqs = min(serving.max_num_batched_tokens, serving.max_num_seqs)
    return ActivationEstimate(encoder, decoder, sampler_bytes(spec.decoder, reqs, dtype))


def activation_term(estimate: ActivationEstimate) -> MemoryTerm:
    return MemoryTerm(
        estimate.peak,
        ESTIMATED,
        f"formula: widest layer activations of the {estimate.peak_phase} phase "
        f"(encoder {estimate.encoder_bytes:,} B, decoder {estimate.decoder_bytes:,} B, sampler {estimate.sampler_bytes:,} B)",
    )


# --- constants: context, non-torch ----------------------------------------------------------------------


def cuda_context_term(serving: ServingConfig) -> MemoryTerm:
    nccl = NCCL_BYTES_PER_RANK if serving.tensor_parallel_size > 1 else 0
    return MemoryTerm(
        CUDA_CONTEXT_BYTES + nccl,
        ESTIMATED,
        "constant measured on an H200: CUDA context and cuBLAS handles" + (" + NCCL buffers (estimated)" if nccl else "") + " (before vLLM's baseline snapshot)",
    )


def non_torch_term() -> MemoryTerm:
    return MemoryTerm(NON_TORCH_INCREASE_BYTES, ESTIMATED, "constant: non-torch growth during profile_run (kernel modules)")


# --- CUDA graphs (estimated) -------------------------------------------------------------------------------


def capture_sizes(serving: ServingConfig, sm100: bool) -> list[int]:
    """vLLM: VllmConfig._set_cudagraph_sizes (no user capture sizes, default performance mode)."""
    q = 1 + serving.num_speculative_tokens
    default_max = 1024 if sm100 else 512
    cap = min(serving.max_num_seqs * q * 2, default_max, serving.max_num_batched_tokens)
    sizes = {s for s in (1, 2, 4) if s <= cap}
    sizes.update(range(8, min(cap + 1, 256), 8))
    sizes.update(range(256, cap + 1, 16))
    if serving.max_num_batched_tokens <= cap:
        sizes.add(serving.max_num_batched_tokens)
    if q == 1:
        if serving.max_num_seqs <= cap:
            sizes.add(serving.max_num_seqs)
    else:
        m = min(serving.max_num_seqs, default_max)
        counts = {c for c in (1, 2, 4) if c <= m} | set(range(8, min(m + 1, 256), 8)) | set(range(256, m + 1, 16)) | {m}
        sizes.update(n * q for n in counts if n * q <= cap)
    return sorted(s for s in sizes if s <= serving.max_num_batched_tokens)


def full_decode_graph_sizes(serving: ServingConfig, sizes: list[int]) -> list[int]:
    """MRV2 CudaGraphManager FULL decode descriptors: sizes rounded up to the decode query length."""
    q = 1 + serving.num_speculative_tokens
    cap = max(sizes) if sizes else 0
    out = set()
    for s in sizes:
        r = -(-s // q) * q
        if r <= serving.max_num_seqs * q and r <= cap:
            out.add(r)
    return sorted(out)


def cuda_graph_term(spec: ModelSpec, serving: ServingConfig, sm100: bool) -> tuple[MemoryTerm, int]:
    """MRV2 profile_cudagraph_memory's form: s1 + (N_full - 1) x max(s2, 1 MiB), s_i estimated.

    s1 (the first capture, which sizes the shared graph pool) = decoder activations at the largest
    size; s2 (each further capture) = its output buffer (tokens x hidden).
    """
    if serving.enforce_eager:
        return MemoryTerm(0, EXACT, "--enforce-eager: no CUDA graphs"), 0
    sizes = full_decode_graph_sizes(serving, capture_sizes(serving, sm100))
    if not sizes:
        return MemoryTerm(0, EXACT, "no CUDA-graph sizes"), 0
    largest = sizes[-1]
    dtype = serving.dtype_bytes
    s1 = decoder_activation_bytes(spec.decoder, largest, dtype, serving.tensor_parallel_size)
    s2 = largest * spec.decoder.hidden_size * dtype
    total = s1 + (len(sizes) - 1) * max(s2, MIN_GRAPH_BYTES)
    mode = "FULL_DECODE_ONLY" if spec.is_encoder_decoder else "FULL_AND_PIECEWISE (FULL decode graphs counted)"
    return (
        MemoryTerm(total, ESTIMATED, f"{len(sizes)} FULL decode graphs ({mode}), largest {largest} tokens; MRV2 extrapolation form"),
        len(sizes),
    )


# --- measured (from a MemoryProfile) --------------------------------------------------------------------


def measured_terms(profile: MemoryProfile, estimates: dict[str, MemoryTerm]) -> dict[str, MemoryTerm]:
    """The terms a GPU profile measured; they replace the estimates.

    weights + non_torch = vLLM's total_consumed (cudaMemGetInfo delta since the baseline), and
    encoder_cache + activation_peak = vLLM's transient_peak_headroom (peak - allocated after).
    """
    where = f"measured on {profile.fingerprint.gpu_name} ({profile.fingerprint.created})"
    terms = {
        "weights": MemoryTerm(profile.weights_bytes, MEASURED, f"allocated growth across model load, {profile.fingerprint.weights} weights; {where}"),
        "encoder_cache": MemoryTerm(
            profile.encoder_cache_bytes, MEASURED, f"{profile.encoder_items} encoder outputs of {profile.encoder_tokens_per_item} tokens held; {where}"
        ),
        "activation_peak": MemoryTerm(profile.activation_peak_bytes, MEASURED, f"profile peak - allocated after - encoder outputs; {where}"),
        "non_torch": MemoryTerm(
            profile.non_torch_and_reserve_bytes, MEASURED, f"total_consumed - weights (non-torch growth + allocator reserve); {where}"
        ),
        "cuda_context": MemoryTerm(profile.baseline_device_used_bytes, MEASURED, f"CUDA context + cuBLAS before the model; {where}"),
    }
    if profile.fingerprint.device == "fake":
        # A fake-tensor trace sees the allocator's tensors only: device-level memory is a constant.
        terms.pop("cuda_context")
        conv = bool(profile.uses_convolution)
        cudnn = NON_TORCH_WITH_CONVOLUTIONS_BYTES - NON_TORCH_WITHOUT_CONVOLUTIONS_BYTES if conv else 0
        terms["non_torch"] = MemoryTerm(
            VLLM_NON_TORCH_BYTES + cudnn,
            ESTIMATED,
            "vLLM's non-torch memory, median of the calibration logs (bench/vllm_logs, 0.27 GiB)"
            + (" + cuDNN, the H200's difference between models with and without convolutions" if conv else ""),
        )
        for key in ("weights", "encoder_cache", "activation_peak"):
            term = terms[key]
            terms[key] = MemoryTerm(term.bytes, ESTIMATED, "fake-tensor trace of the real model: " + term.method.replace(f"; {where}", ""))
    elif profile.fingerprint.device != "cuda":
        terms.pop("cuda_context")
        for key, term in terms.items():
            terms[key] = MemoryTerm(term.bytes, MEASURED, term.method.replace(where, f"measured on the CPU probe ({profile.fingerprint.created})"))
    if profile.cuda_graphs is not None:
        g = profile.cuda_graphs
        terms["cuda_graphs"] = MemoryTerm(
            g.estimate_bytes,
            MEASURED,
            f"captures of {list(g.sampled_sizes)} tokens took {list(g.samples_bytes)} B; s1 + ({len(g.sizes)} - 1) x max(s2, 1 MiB) as MRV2 extrapolates; {where}",
        )
    return terms


def vllm_encoder_activation(family: Family, term: MemoryTerm, encoder_phase_dominates: bool) -> MemoryTerm:
    """A fake trace's activation peak scaled to vLLM's encoder kernels (the family's trace_encoder_to_vllm) when
    the encoder phase sets the peak; other families and phases unchanged."""
    factor = family.trace_encoder_to_vllm
    if factor is None or not encoder_phase_dominates:
        return term
    return MemoryTerm(
        round(term.bytes * factor),
        ESTIMATED,
        f"{term.method}; x {factor} for vLLM's varlen encoder attention (calibrated on public vLLM logs, bench/results/predict-logs-2026-11-30)",
    )
