"""The sampler phase of vLLM's profile_run (`GPUModelRunner._dummy_sampler_run`) on one rank: the logits, what each
version's sampler holds above them (`SamplerForm`, `TopKTopP`) and, at TP > 1, the logits' all-gather."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from capacity.gpu.catalog import Gpu
from capacity.kv.layers import DTYPE_BYTES
from capacity.memory.term import ESTIMATED, MEASURED
from capacity.model.spec import DecoderShape
from capacity.weights.parallel_layers import pad_vocab_size

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.vllm.versions import VllmSemantics

FP32_BYTES = DTYPE_BYTES["float32"]
GUMBEL_BLOCK = 1024  # vllm/v1/worker/gpu/sample/gumbel.py gumbel_sample: BLOCK_SIZE of the per-block argmax


@dataclass(frozen=True)
class TopKTopP:
    """One top-k/top-p implementation the V1 model runner's dummy sampler run can take (vLLM before MRV2):
    `bytes_per_logit` is the peak of `Sampler.forward` above the model-dtype logits, per rows x vocab element, on
    `_dummy_sampler_run`'s metadata (top_k vocab - 1, top_p 0.9, temperature 0.5, no penalties, no logprobs)."""

    name: str
    symbol: str  # the vLLM function that masks the logits
    bytes_per_logit: int
    kind: str  # MEASURED or ESTIMATED: how bytes_per_logit was found
    how: str


# apply_top_k_top_p's sort on CUDA: fp32 copy 4 + sorted values 4 + int64 indices 8 + torch.sort temporaries 20 = 36 B per
# logit (measured: bench/sampler_sort_gpu.py; the later stages' 26 B: bench/vllm_sampler_reference.py).
TOP_K_TOP_P_SORT = TopKTopP(
    "PyTorch sort",
    "topk_topp_sampler.apply_top_k_top_p (sort)",
    36,
    MEASURED,
    "fp32 copy + sorted values + int64 indices + CUDA sort temporaries (the same torch operations on the H200; the later stages hold 26 B)",
)
# apply_top_k_top_p_triton masks the fp32 logits in place (a cached num_SMs x vocab fp32 buffer aside); then
# forward_native's softmax and random_sample's exponential draw: the fp32 copy + 2 fp32 tensors.
TOP_K_TOP_P_TRITON = TopKTopP(
    "Triton",
    "topk_topp_triton.apply_top_k_top_p_triton",
    12,
    MEASURED,
    "fp32 copy + softmax + exponential draw (vLLM's own Sampler on CPU, the kernel taken as in place)",
)
# flashinfer_sample -> flashinfer.sampling.top_k_top_p_sampling_from_logits: the fp32 copy + its top_k_mask_logits
# copy + softmax (read for vLLM 0.33's warmup pass, SamplerForm.fp32_copies); not runnable on CPU
TOP_K_TOP_P_FLASHINFER = TopKTopP(
    "FlashInfer",
    "topk_topp_sampler.flashinfer_sample",
    12,
    ESTIMATED,
    "fp32 copy + FlashInfer's top-k-masked copy + softmax (read, not measured: FlashInfer needs CUDA)",
)


@dataclass(frozen=True)
class SamplerForm:
    """How one vLLM version's profile_run runs the sampler (`GPUModelRunner._dummy_sampler_run`).

    `warmup_pass`: 0.33 runs it twice on the same logits, a default pass (no request registered:
    `Sampler.apply_sampling_params` returns the model-dtype logits) and a pass with
    `SamplingParams.for_sampler_warmup()` on every row (0.32 and earlier: the default pass only). capacity's
    form for versions before 0.33 is kept: the logits plus one fp32 copy.
    `flashinfer`: the warmup pass samples through FlashInfer (`flashinfer_sampler_supported`: CUDA, SM 8.0 to
    12.1), whose `top_k_top_p_sampling_from_logits` allocates a top-k-masked copy and its softmax; elsewhere
    vLLM's Triton top-k/top-p masks the fp32 copy in place.
    """

    warmup_pass: bool
    flashinfer: bool = True
    # the V1 model runner's dummy run (vLLM before MRV2 ran by default): its top-k/top-p path; None keeps capacity's
    # earlier form (one fp32 copy) for runs of MRV2 before 0.33
    v1_top_k_top_p: TopKTopP | None = None

    @property
    def fp32_copies(self) -> int:
        """rows x vocab fp32 tensors alive together at the peak of the pass that holds most."""
        if self.warmup_pass and self.flashinfer:
            return 3  # Sampler.apply_sampling_params' fp32 copy + flashinfer top_k_mask_logits + torch.softmax
        return 1  # the fp32 copy (apply_sampling_params; Triton top-k/top-p and the kernels work in place)

    def describe(self) -> str:
        if self.v1_top_k_top_p is not None:
            t = self.v1_top_k_top_p
            return f"V1 _dummy_sampler_run, {t.name} top-k/top-p ({t.symbol}): logits + {t.bytes_per_logit} B per logit, {t.kind}"
        if not self.warmup_pass:
            return "logits + one fp32 copy (capacity's form before vLLM 0.33)"
        path = "FlashInfer top-k/top-p: fp32 copy, masked copy, softmax" if self.flashinfer else "Triton top-k/top-p: one fp32 copy"
        return f"default pass + SamplingParams.for_sampler_warmup() pass ({path})"


SAMPLER_BEFORE_0_33 = SamplerForm(warmup_pass=False, flashinfer=False)
SAMPLER_0_33 = SamplerForm(warmup_pass=True, flashinfer=True)


def sampler_form(gpu: Gpu, warmup_pass: bool) -> SamplerForm:
    """The form on `gpu`: vLLM 0.33's flashinfer_sampler_supported() needs CUDA and FlashInferBackend's SM 8.0-12.1
    (and more than 16 SMs, which every catalog GPU has); ROCm, Volta and Turing take the Triton path."""
    flashinfer = gpu.platform == "cuda" and 8 <= gpu.compute_capability_major <= 12
    return SamplerForm(warmup_pass, flashinfer)


TOP_K_TOP_P = {"sort": TOP_K_TOP_P_SORT, "triton": TOP_K_TOP_P_TRITON, "flashinfer": TOP_K_TOP_P_FLASHINFER}


def v1_sampler_form(gpu: Gpu, semantics: VllmSemantics) -> SamplerForm:
    """The V1 model runner's `_dummy_sampler_run` under `semantics` on `gpu`: the larger of the top-k/top-p paths it
    takes (VllmSemantics.v1_top_k_top_p; a measured figure wins a tie)."""
    paths = [TOP_K_TOP_P[name] for name in semantics.v1_top_k_top_p(gpu)]
    widest = max(paths, key=lambda t: (t.bytes_per_logit, t.kind == MEASURED))
    return SamplerForm(warmup_pass=False, flashinfer=TOP_K_TOP_P_FLASHINFER in paths, v1_top_k_top_p=widest)


def _local_vocab(decoder: DecoderShape, tp: int) -> int:
    """Columns of one rank's logits: pad_vocab_size(vocab, 64) / TP, or the whole vocabulary when the head is tied
    to a whole embedding (Whisper: the gather then returns TP copies)."""
    return decoder.vocab_size if not decoder.lm_head_sharded else pad_vocab_size(decoder.vocab_size) // tp


def logits_gather_bytes(decoder: DecoderShape, num_reqs: int, dtype_bytes: int, tp: int) -> int:
    """TP > 1: LogitsProcessor._gather_logits -> GroupCoordinator.all_gather holds the rank's logits, a
    (TP, rows, local vocab) buffer and its reshaped copy together."""
    return 0 if tp == 1 else num_reqs * _local_vocab(decoder, tp) * dtype_bytes * (1 + 2 * tp)


def sampler_pass_bytes(decoder: DecoderShape, num_reqs: int, dtype_bytes: int, tp: int, fp32_copies: int, num_tokens: int) -> int:
    """Peak of one vLLM 0.33 sampler pass above profile_run's start (`_dummy_sampler_run`), on one rank.

    Alive throughout: profile_run's `hidden_states` (num_tokens x hidden) and `sample_hidden_states` (rows x hidden,
    hidden_states[logits_indices], a copy) and the model-dtype logits of `compute_logits` (the gathered storage at
    TP > 1: `logits[..., :org_vocab_size]` is a view). On top, the pass's own tensors: `fp32_copies` rows x vocab fp32
    tensors (the warmup pass), or gumbel_sample's per-block argmax (int64) and max (fp32) (the default pass, whose
    logits processors are skipped: no request is registered).
    """
    held = (num_tokens + num_reqs) * decoder.hidden_size * dtype_bytes  # profile_run: hidden_states, sample_hidden_states
    local = _local_vocab(decoder, tp)
    logits = num_reqs * local * tp * dtype_bytes if tp > 1 else num_reqs * decoder.vocab_size * dtype_bytes  # compute_logits
    if fp32_copies:
        own = fp32_copies * num_reqs * decoder.vocab_size * FP32_BYTES  # torch.empty_like(logits, dtype=torch.float32) ...
    else:
        own = num_reqs * -(-decoder.vocab_size // GUMBEL_BLOCK) * (8 + FP32_BYTES)  # gumbel_sample: local_argmax, local_max
    return held + max(logits_gather_bytes(decoder, num_reqs, dtype_bytes, tp), logits + own)


def sampler_bytes(decoder: DecoderShape, num_reqs: int, dtype_bytes: int, tp: int = 1, form: SamplerForm = SAMPLER_0_33, num_tokens: int = 0) -> int:
    """The sampler phase of profile_run on one rank: the larger of its passes (`SamplerForm`).

    vLLM 0.33 (`sampler_pass_bytes`): held decoder outputs + logits + 3 fp32 rows x vocab copies on FlashInfer GPUs,
    14 B per logits element in bf16 (1 copy, 6 B, on the Triton path). Before 0.33 under the V1 model runner: the
    logits plus the top-k/top-p path's own bytes per logit (`TopKTopP`: 36 B sorting on CUDA, 12 B Triton or FlashInfer);
    under MRV2 before 0.33, capacity's form: the logits in the model dtype plus one fp32 copy; with TP > 1 the
    all-gather (`logits_gather_bytes`).
    Measured on an H200 x2 with that form's emulation (bench/results/h200x2-tp-2026-11-30): whisper-large-v3's
    sampler phase peaked at 535,295,488 B for 1024 rows, the form gives 531,107,840 B."""
    if not form.warmup_pass:
        own = form.v1_top_k_top_p.bytes_per_logit if form.v1_top_k_top_p is not None else FP32_BYTES
        whole = num_reqs * decoder.vocab_size * (dtype_bytes + own)  # compute_logits + the sampler's own peak
        return max(whole, logits_gather_bytes(decoder, num_reqs, dtype_bytes, tp))
    default = sampler_pass_bytes(decoder, num_reqs, dtype_bytes, tp, 0, num_tokens)
    warmup = sampler_pass_bytes(decoder, num_reqs, dtype_bytes, tp, form.fp32_copies, num_tokens)
    return max(default, warmup)
