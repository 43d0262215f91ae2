"""The terms a memory profile measured (a GPU profile, the CPU probe, or a fake-tensor trace), in place of the
estimates; a profile made at another TP than the plan's becomes one rank's through capacity/memory/rank_scaling.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from capacity.memory.non_torch import NON_TORCH_WITH_CONVOLUTIONS_BYTES, NON_TORCH_WITHOUT_CONVOLUTIONS_BYTES, VLLM_NON_TORCH_BYTES
from capacity.memory.rank_scaling import per_rank_terms, rank_scaling
from capacity.memory.sampler import SAMPLER_0_33, SamplerForm
from capacity.memory.term import ESTIMATED, EXACT, MEASURED, MemoryTerm
from capacity.model.spec import ModelSpec
from capacity.serving.config import ServingConfig

if TYPE_CHECKING:  # pragma: no cover - typing only (a formula plan has no measured profile)
    from capacity.memory.measured_profile import MemoryProfile


def measured_terms(
    profile: MemoryProfile,
    estimates: dict[str, MemoryTerm],
    spec: ModelSpec,
    serving: ServingConfig,
    sampler: SamplerForm = SAMPLER_0_33,
    quantized: bool = False,
) -> dict[str, MemoryTerm]:
    """The terms a GPU profile measured; they replace the estimates.

    weights + non_torch = vLLM's total_consumed (cudaMemGetInfo delta since the baseline), and
    encoder_cache + activation_peak = vLLM's transient_peak_headroom (peak - allocated after).
    A fake-tensor trace's weights are the planner's own per-rank figure (the same tensors, counted by
    capacity/weights/per_rank.py). A profile of a model split over another number of ranks than the plan's TP
    (a single-GPU profile re-planned at TP 2) gives per-rank terms: weights from capacity/weights/per_rank.py,
    activations and CUDA graphs divided as the formula divides them (RankScaling). `quantized`: the checkpoint's
    weights are quantized; every profile built the module from its config in the serving dtype (profilers/run.py),
    dense, where vLLM loads the quantized tensors (Qwen2.5-Omni-7B-AWQ: 17.1 GB measured, 8.3 GB loaded), so the
    weights are capacity/weights/per_rank.py's on every path.
    """
    where = f"measured on {profile.fingerprint.gpu_name} ({profile.fingerprint.created})"
    modelled = f" ({profile.modelled_layers})" if profile.modelled_layers else ""
    terms = {
        "weights": MemoryTerm(profile.weights_bytes, MEASURED, f"allocated growth across model load, {profile.fingerprint.weights} weights; {where}"),
        "encoder_cache": MemoryTerm(
            profile.encoder_cache_bytes, MEASURED, f"{profile.encoder_items} encoder outputs of {profile.encoder_tokens_per_item} tokens held; {where}"
        ),
        "activation_peak": MemoryTerm(profile.activation_peak_bytes, MEASURED, f"profile peak - allocated after - encoder outputs{modelled}; {where}"),
        "non_torch": MemoryTerm(
            profile.non_torch_and_reserve_bytes, MEASURED, f"total_consumed - weights (non-torch growth + allocator reserve); {where}"
        ),
        "cuda_context": MemoryTerm(
            profile.baseline_device_used_bytes - (profile.communicator_bytes or 0), MEASURED, f"CUDA context + cuBLAS before the model (NCCL's share in collectives); {where}"
        ),
    }
    fake = profile.fingerprint.device == "fake"
    if fake:
        # A fake-tensor trace sees the allocator's tensors only: device-level memory is a constant.
        terms.pop("cuda_context")
        conv = bool(profile.uses_convolution)
        cudnn = NON_TORCH_WITH_CONVOLUTIONS_BYTES - NON_TORCH_WITHOUT_CONVOLUTIONS_BYTES if conv else 0
        terms["non_torch"] = MemoryTerm(
            VLLM_NON_TORCH_BYTES + cudnn,
            ESTIMATED,
            "vLLM's non-torch memory, median of the calibration logs (bench/vllm_logs, 0.27 GiB)"
            + (" + cuDNN, the H200's difference between models with and without convolutions" if conv else "")
            + "; the formulas (--estimate formula) take 256 MiB, the kernel modules' growth alone",
        )
        for key in ("encoder_cache", "activation_peak"):
            term = terms[key]
            terms[key] = MemoryTerm(term.bytes, ESTIMATED, "fake-tensor trace of the real model: " + term.method.replace(f"; {where}", ""))
        exact = estimates.get("encoder_cache")
        if exact is not None and exact.kind == EXACT and exact.bytes == terms["encoder_cache"].bytes:
            # the outputs' bytes follow from the budget alone (capacity/memory/encoder_cache.py): exact on both paths
            terms["encoder_cache"] = MemoryTerm(exact.bytes, EXACT, f"{exact.method} (the fake-tensor trace holds the same bytes)")
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
    scaling = rank_scaling(spec, serving, profile.measured_tensor_parallel_size, sampler)
    if fake or scaling.needed:
        terms["weights"] = estimates["weights"]  # one figure for every path: capacity/weights/per_rank.py
    elif quantized:  # the profilers build a quantized checkpoint's layers dense: their bytes are not the checkpoint's
        w = estimates["weights"]
        terms["weights"] = MemoryTerm(w.bytes, w.kind, f"{w.method} (the profile built the layers dense: {profile.weights_bytes:,} B)")
    if scaling.reshapes(profile):
        terms.update(per_rank_terms(profile, terms, scaling))
    return terms
