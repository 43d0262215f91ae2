"""The activation peak of vLLM's profile_run without a GPU (estimated, `--estimate formula`): the widest layer's live
activations in each phase (encoder on the multimodal budget's items, decoder on max_num_batched_tokens, the sampler:
capacity/memory/sampler.py), the largest phase wins."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from capacity.memory.sampler import SAMPLER_0_33, SamplerForm, sampler_bytes
from capacity.memory.term import ESTIMATED, MemoryTerm
from capacity.model.spec import DecoderShape, EncoderShape, ModelSpec
from capacity.serving.config import ServingConfig
from capacity.serving.encoder_budget import MultiModalBudget

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.model.family import Family


def per_token_activation_bytes(hidden: int, ffn: int, gated: bool, dtype_bytes: int, tp: int = 1) -> int:
    """Live bytes per token inside one transformer layer at its widest point, on one TP rank.

    Residual + normed input (2 x hidden) plus the wider of the attention projections (q, k, v: hidden / TP
    each, their heads split by TP; the output projection's full-width result: hidden; attention runs in
    flash/sdpa kernels, no score matrix) and the MLP (fc1 + activation: 2 x ffn / TP, or gate/up + product:
    3 x ffn / TP when gated). At TP 1: 2 x hidden + max(4 x hidden, MLP).
    """
    attention = 3 * hidden // tp + hidden
    mlp = (3 if gated else 2) * ffn // tp
    return dtype_bytes * (2 * hidden + max(attention, mlp))


def decoder_activation_bytes(decoder: DecoderShape, num_tokens: int, dtype_bytes: int, tp: int) -> int:
    return num_tokens * per_token_activation_bytes(decoder.hidden_size, decoder.ffn_size, decoder.gated_ffn, dtype_bytes, tp)


def encoder_activation_bytes(encoder: EncoderShape, items: int, positions_per_item: int, dtype_bytes: int, tp: int) -> int:
    """The encoder on `items` max-size items of `positions_per_item` encoder positions each. vLLM 0.33 shards
    multimodal encoders over the TP ranks (MultiModalConfig.mm_encoder_tp_mode = "weights" by default; Whisper's
    encoder has parallel layers too), except towers it runs whole (`EncoderShape.tensor_parallel` False)."""
    positions = items * positions_per_item
    if encoder.max_positions_per_pass:
        positions = min(positions, encoder.max_positions_per_pass)
    ranks = tp if encoder.tensor_parallel else 1
    return positions * per_token_activation_bytes(encoder.hidden_size, encoder.ffn_size, encoder.gated_ffn, dtype_bytes, ranks)


@dataclass(frozen=True)
class ActivationEstimate:
    encoder_bytes: int
    decoder_bytes: int
    sampler_bytes: int
    sampler_form: str = ""  # SamplerForm.describe() of the sampler phase

    @property
    def peak(self) -> int:
        return max(self.encoder_bytes, self.decoder_bytes, self.sampler_bytes)

    @property
    def peak_phase(self) -> str:
        phases = {"encoder": self.encoder_bytes, "decoder": self.decoder_bytes, "sampler": self.sampler_bytes}
        return max(phases, key=lambda k: phases[k])


def activation_estimate(spec: ModelSpec, budget: MultiModalBudget, serving: ServingConfig, sampler: SamplerForm = SAMPLER_0_33) -> ActivationEstimate:
    """The profile_run phases: encoder on N max-size items, decoder on max_num_batched_tokens, sampler (`sampler`'s form)."""
    dtype = serving.dtype_bytes
    tp = serving.tensor_parallel_size
    encoder = 0
    if spec.encoder is not None and budget.profile_items:
        positions = spec.encoder_positions(budget.modality_with_max_tokens, budget.profile_tokens_per_item)
        encoder = encoder_activation_bytes(spec.encoder, budget.profile_items, positions, dtype, tp)
    decoder = decoder_activation_bytes(spec.decoder, serving.max_num_batched_tokens, dtype, tp)
    reqs = min(serving.max_num_batched_tokens, serving.max_num_seqs)
    return ActivationEstimate(encoder, decoder, sampler_bytes(spec.decoder, reqs, dtype, tp, sampler, serving.max_num_batched_tokens), sampler.describe())


def activation_term(estimate: ActivationEstimate) -> MemoryTerm:
    return MemoryTerm(
        estimate.peak,
        ESTIMATED,
        f"formula: widest layer activations of the {estimate.peak_phase} phase "
        f"(encoder {estimate.encoder_bytes:,} B, decoder {estimate.decoder_bytes:,} B, sampler {estimate.sampler_bytes:,} B"
        + (f": {estimate.sampler_form})" if estimate.sampler_form else ")"),
    )


def vllm_encoder_activation(family: Family, term: MemoryTerm, encoder_phase_dominates: bool) -> MemoryTerm:
    """A profile's activation peak scaled to vLLM's encoder kernels (the family's trace_encoder_to_vllm) when the
    encoder phase sets the peak; other families and phases unchanged.

    Every profile (the fake-tensor trace, the CPU probe and a GPU profile alike) ran transformers' module
    (profilers/run.py), whose tower is not the one vLLM's profile_run runs: the same factor applies to each, so that a
    GPU profile and the trace of the same model plan the same activation peak when their phases agree."""
    factor = family.trace_encoder_to_vllm
    if factor is None or not encoder_phase_dominates:
        return term
    return MemoryTerm(
        round(term.bytes * factor),
        ESTIMATED,
        f"{term.method}; x {factor}{TOWER_TO_VLLM} (calibrated on public vLLM logs, bench/results/predict-logs-2026-12-01)",
    )


TOWER_TO_VLLM = ": transformers' tower to vLLM's varlen encoder attention"  # marks an activation scaled by the family's factor


def tower_excess_bytes(family: Family, term: MemoryTerm) -> int:
    """What transformers' encoder tower holds beyond the activation the plan charges (vllm_encoder_activation scaled
    it down to vLLM's kernels): memory `capacity verify`, which runs transformers' tower, uses and vLLM does not."""
    factor = family.trace_encoder_to_vllm
    if factor is None or f"x {factor}{TOWER_TO_VLLM}" not in term.method:
        return 0
    return round(term.bytes / factor) - term.bytes
