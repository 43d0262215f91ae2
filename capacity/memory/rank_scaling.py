"""Terms measured on a model split over one number of TP ranks, as one rank's at another: the formula's per-rank
widths give each profile_run phase's ratio; the sampler's logits stay whole, plus what their all-gather adds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from capacity.memory.activations import per_token_activation_bytes
from capacity.memory.sampler import FP32_BYTES, SAMPLER_0_33, SamplerForm, sampler_bytes, sampler_pass_bytes
from capacity.memory.term import ESTIMATED, MEASURED, MemoryTerm
from capacity.model.spec import ModelSpec
from capacity.serving.config import ServingConfig

if TYPE_CHECKING:  # pragma: no cover - typing only (a formula plan has no measured profile)
    from capacity.memory.measured_profile import MemoryProfile


@dataclass(frozen=True)
class RankScaling:
    """How terms measured on a model split over `measured_tp` ranks become one rank's at `tp`, under the plan's
    sampler form: the formula's per-rank widths (heads and FFN divided by TP) give each phase's ratio; the sampler's
    logits are whole, plus what the logits' all-gather adds at TP > 1 (`sampler_bytes`: whisper-large-v3's sampler
    phase grew 1.44x from TP 1 to TP 2 on an H200 x2, bench/results/h200x2-tp-2026-11-30).

    A profile's "sampler" phase is vLLM 0.33's default pass and its "sampler_warmup" phase the
    SamplingParams.for_sampler_warmup() pass (profilers/run.py); a plan of a version without that pass drops the
    phase and adds to the default pass what that version's sampler holds above the logits (`legacy_copy_bytes`: the
    V1 runner's top-k/top-p path, `TopKTopP`; under MRV2 capacity's earlier emulation's fp32 copy and the bool mask
    of its top-k masked_fill_, 1 B per logit, so those plans stay as they were). Profiles
    made before the split have one "sampler" phase, that earlier form's emulation."""

    measured_tp: int
    tp: int
    encoder_ratio: float
    decoder_ratio: float
    sampler_extra_bytes: int = 0  # sampler phase at tp - at measured_tp (the gathered logits), same rows
    sampler_warmup_extra_bytes: int = 0  # the same for the warmup-param pass
    warmup_pass: bool = True  # the plan's version runs the warmup-param pass (SamplerForm.warmup_pass)
    legacy_copy_bytes: int = 0  # rows x vocab x (4 + 1), or the V1 top-k/top-p path's bytes: held above a default pass
    legacy_form: str = "capacity's earlier fp32 copy and mask"  # what legacy_copy_bytes holds

    @property
    def needed(self) -> bool:
        return self.measured_tp != self.tp

    def reshapes(self, profile: MemoryProfile) -> bool:
        """Whether the profile's headroom must be rebuilt from its phases for this plan."""
        return self.needed or (not self.warmup_pass and profile.phase("sampler_warmup") is not None)


def rank_scaling(spec: ModelSpec, serving: ServingConfig, measured_tp: int, sampler: SamplerForm = SAMPLER_0_33) -> RankScaling:
    tp, dtype = serving.tensor_parallel_size, serving.dtype_bytes

    def ratio(hidden: int, ffn: int, gated: bool) -> float:
        return per_token_activation_bytes(hidden, ffn, gated, dtype, tp) / per_token_activation_bytes(hidden, ffn, gated, dtype, measured_tp)

    d, e = spec.decoder, spec.encoder
    rows, tokens = min(serving.max_num_batched_tokens, serving.max_num_seqs), serving.max_num_batched_tokens

    def grows(copies: int) -> int:
        return sampler_pass_bytes(d, rows, dtype, tp, copies, tokens) - sampler_pass_bytes(d, rows, dtype, measured_tp, copies, tokens)

    if sampler.warmup_pass:
        extra, warmup_extra = grows(0), grows(sampler.fp32_copies)
    else:
        extra, warmup_extra = sampler_bytes(d, rows, dtype, tp, sampler) - sampler_bytes(d, rows, dtype, measured_tp, sampler), 0
    return RankScaling(
        measured_tp,
        tp,
        ratio(e.hidden_size, e.ffn_size, e.gated_ffn) if e is not None and e.tensor_parallel else 1.0,
        ratio(d.hidden_size, d.ffn_size, d.gated_ffn),
        extra,
        warmup_extra,
        sampler.warmup_pass,
        rows * d.vocab_size * _own_bytes_per_logit(sampler),
        sampler.describe() if sampler.v1_top_k_top_p is not None else RankScaling.legacy_form,
    )


def _own_bytes_per_logit(sampler: SamplerForm) -> int:
    """What a version without the warmup-param pass holds above the default pass's logits, per logit: the V1 runner's
    top-k/top-p path (`TopKTopP`), else capacity's earlier emulation's fp32 copy and its `x < kth` bool mask."""
    return sampler.v1_top_k_top_p.bytes_per_logit if sampler.v1_top_k_top_p is not None else FP32_BYTES + 1


def per_rank_headroom(profile: MemoryProfile, scaling: RankScaling) -> int:
    """vLLM's transient_peak_headroom on one rank at scaling.tp, from the phases measured at measured_tp: the largest
    of `phase_headrooms` (the whole profile's headroom, scaled by the decoder ratio, when it recorded no phases)."""
    phases = phase_headrooms(profile, scaling)
    if not phases:
        return round(profile.transient_peak_headroom_bytes * scaling.decoder_ratio)
    return max(max(phases.values()), 0)


def phase_headrooms(profile: MemoryProfile, scaling: RankScaling) -> dict[str, int]:
    """Each profile_run phase's peak above what stays allocated after it, on one rank at scaling.tp ({} when the
    profile recorded no phases). The encoder's scales by the encoder ratio, the decoder's (less the encoder outputs it
    holds) by the decoder ratio; the sampler's logits stay whole, plus the all-gather's growth
    (RankScaling.sampler_extra_bytes). A plan without the warmup-param pass drops the "sampler_warmup" phase and puts
    capacity's earlier fp32 copy on the default pass. A pipeline stage runs only some of them (planning/stages.py)."""
    phases = {name: profile.phase(name) for name in ("encoder", "decoder", "sampler", "sampler_warmup")}
    present = [p for p in phases.values() if p is not None]
    if not present:
        return {}
    base = present[0].allocated_before_bytes
    held = profile.encoder_cache_bytes
    raw = {name: p.peak_allocated_bytes - base for name, p in phases.items() if p is not None}
    scaled = dict(raw)
    if "encoder" in raw:
        scaled["encoder"] = round(raw["encoder"] * scaling.encoder_ratio)
    if "decoder" in raw:
        scaled["decoder"] = held + round(max(raw["decoder"] - held, 0) * scaling.decoder_ratio)
    split = "sampler_warmup" in raw  # a profile with the 0.33 passes apart
    if "sampler" in raw:
        scaled["sampler"] = raw["sampler"] + scaling.sampler_extra_bytes + (scaling.legacy_copy_bytes if split and not scaling.warmup_pass else 0)
    if split:
        if scaling.warmup_pass:
            scaled["sampler_warmup"] = raw["sampler_warmup"] + scaling.sampler_warmup_extra_bytes
        else:
            del scaled["sampler_warmup"]
    offset = profile.transient_peak_headroom_bytes - max(raw.values())  # allocated after vs before profile_run
    return {name: value + offset for name, value in scaled.items()}


def per_rank_terms(profile: MemoryProfile, terms: dict[str, MemoryTerm], scaling: RankScaling) -> dict[str, MemoryTerm]:
    """Activation peak and CUDA graphs of one rank at scaling.tp from a model measured at scaling.measured_tp."""
    at = f"{'traced' if profile.fingerprint.device == 'fake' else 'measured'} at TP {scaling.measured_tp}, per rank at TP {scaling.tp}"
    headroom = per_rank_headroom(profile, scaling)
    if not scaling.needed:  # same TP, a version without the warmup-param pass
        return {
            "activation_peak": MemoryTerm(
                max(headroom - profile.encoder_cache_bytes, 0),
                ESTIMATED,
                f"sampler_warmup phase left out (no SamplingParams.for_sampler_warmup() pass before vLLM 0.33), default pass + "
                f"{scaling.legacy_form}, {scaling.legacy_copy_bytes:,} B; was {terms['activation_peak'].bytes:,} B ({terms['activation_peak'].method})",
            )
        }
    out = {
        "activation_peak": MemoryTerm(
            max(headroom - profile.encoder_cache_bytes, 0),
            ESTIMATED,
            f"{at}: encoder phase x {scaling.encoder_ratio:.4f}, decoder phase x {scaling.decoder_ratio:.4f} (heads and FFN width / TP as the "
            f"formula divides them), sampler logits whole; was {terms['activation_peak'].bytes:,} B ({terms['activation_peak'].method})",
        )
    }
    graphs = terms.get("cuda_graphs")
    if graphs is not None and graphs.kind == MEASURED:
        out["cuda_graphs"] = MemoryTerm(
            round(graphs.bytes * scaling.decoder_ratio), ESTIMATED, f"{at}: x {scaling.decoder_ratio:.4f} (decoder widths / TP); was {graphs.bytes:,} B ({graphs.method})"
        )
    return out


