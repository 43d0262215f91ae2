"""Memory terms without a GPU: exact where the architecture fixes them, documented estimates elsewhere.

Every term says how it was obtained (`kind`: exact / estimated / measured) and by which method.
The estimates are rough formulas, replaced by measurements once a GPU profile is given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from capacity.errors import BadInput, RuntimeFailure
from capacity.gpu.catalog import Gpu
from capacity.memory.cuda_graphs import GraphEstimate, capture_sizes, full_decode_graph_sizes, mrv2_estimate, preset_max_capture_size, v1_estimate
from capacity.memory.load_buffers import load_allocations
from capacity.memory.measured_profile import MemoryProfile
from capacity.memory.non_torch import NON_TORCH_WITH_CONVOLUTIONS_BYTES, NON_TORCH_WITHOUT_CONVOLUTIONS_BYTES, VLLM_NON_TORCH_BYTES
from capacity.memory.term import ESTIMATED, EXACT, MEASURED, MemoryTerm
from capacity.model.spec import DTYPE_BYTES, DecoderShape, EncoderShape, ModelSpec
from capacity.serving.config import ServingConfig
from capacity.serving.encoder_budget import MultiModalBudget
from capacity.source.resolve import ModelSource
from capacity.weights.awq import awq_kernel, kernel_tensors
from capacity.weights.mxfp4 import GptOssMxfp4, gpt_oss_mxfp4
from capacity.weights.per_rank import (
    MODEL_DTYPE,
    AwqScheme,
    KindBytes,
    Parallelism,
    StoredTensor,
    WeightLayout,
    WeightsBreakdown,
    gpt_oss_expert_tensors,
    is_quantized_header,
    quant_scheme,
    quantized_tensors,
    weights_per_rank,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.model.family import Family, Tower
    from capacity.vllm.versions import VllmSemantics


# --- weights ---------------------------------------------------------------------------------------


@lru_cache(maxsize=32)
def _meta_parameters(family: Family, config_json: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(name, shape) of every unique parameter of the real architecture (`Family.parameter_shapes`: built on the meta
    device, or listed from the config by a remote-code family)."""
    import json

    return family.parameter_shapes(json.loads(config_json))


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


@lru_cache(maxsize=32)
def _header_tensors(files: tuple[str, ...]) -> tuple[StoredTensor, ...]:
    from capacity.source.safetensors_header import read_safetensors_header

    out: list[StoredTensor] = []
    for path in files:
        for name, info in read_safetensors_header(path).items():
            out.append(StoredTensor(name, tuple(int(d) for d in info["shape"]), str(info["dtype"])))  # type: ignore[index, union-attr]
    return tuple(out)


def _local_shards(source: ModelSource) -> tuple[str, ...]:
    """The shard files on disk whose headers name every tensor: those the checkpoint summary read (the index's), else all."""
    if source.weights is not None and source.path is not None:
        named = tuple(os.path.join(source.path, f) for f in source.weights.files)
        if named and all(os.path.isfile(f) for f in named):
            return named
    return tuple(source.safetensors)


def model_tensors(spec: ModelSpec, source: ModelSource) -> tuple[tuple[StoredTensor, ...], str]:
    """The stored tensors by name: the safetensors headers of local shards, else the meta-device build's parameters
    (a checkpoint known only by its header summary, from the Hub or the catalog, names no tensors)."""
    shards = _local_shards(source)
    if shards:
        try:
            return _header_tensors(shards), "safetensors headers of the model folder"
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise BadInput(f"{source.path}: a safetensors header cannot be read ({exc})") from exc
    try:
        params = _meta_parameters(spec.family, _config_json(source.config))
    except BadInput:  # a field the family's parameter list needs, named in one line
        raise
    except ImportError as exc:
        raise RuntimeFailure(f"exact weights need torch and transformers ({exc.name} missing): pip install the project") from exc
    except Exception as exc:  # a config transformers cannot build
        raise RuntimeFailure(f"building {spec.architecture} on the meta device failed: {exc}") from exc
    return tuple(StoredTensor(n, s, MODEL_DTYPE) for n, s in params), f"parameters of {spec.architecture} {spec.family.parameters_source}"


def skipped_towers(spec: ModelSpec, source: ModelSource, serving: ServingConfig) -> tuple[Tower, ...]:
    """The towers vLLM leaves unbuilt under these limits (every modality they serve at --limit-mm-per-prompt 0)."""
    return tuple(t for t in spec.family.towers(source.config) if t.skipped(serving.limit_mm_per_prompt))


def without_towers(tensors: tuple[StoredTensor, ...], towers: tuple[Tower, ...]) -> tuple[StoredTensor, ...]:
    return tuple(t for t in tensors if not any(tower.holds(t.name) for tower in towers))


def parameter_count(spec: ModelSpec, source: ModelSource) -> tuple[int, str]:
    """Parameters of the real architecture: the checkpoint's safetensors headers when known, else a meta-device build."""
    if source.weights is not None:
        return source.weights.element_count, source.weights.source
    tensors, how = model_tensors(spec, source)
    return sum(t.numel for t in tensors), how


def _first_int(config: dict[str, Any], keys: tuple[str, ...]) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


@lru_cache(maxsize=64)
def tied_by_default(model_type: str) -> bool:
    """`tie_word_embeddings` of the transformers config class of `model_type` when a config.json omits it: what vLLM
    reads from the config object it builds. Each 5.x class sets its own (Qwen2Config, LlamaConfig: untied; the text
    config of Qwen2-Audio and Voxtral is one of those); True, transformers 4's PretrainedConfig default, for a
    model_type transformers does not know (remote code)."""
    from transformers import CONFIG_MAPPING  # only for a file that omits the key: the meta build imports it anyway

    try:
        return bool(CONFIG_MAPPING[model_type]().tie_word_embeddings)
    except (KeyError, AttributeError, TypeError, ValueError):
        return True


def weight_layout(spec: ModelSpec, config: dict[str, Any], class_default_tie: bool = True) -> WeightLayout:
    """The config facts the parallel rules need: the decoder's heads, MoE experts, tied embeddings.
    `class_default_tie=False`: a config that omits tie_word_embeddings is taken as tied without asking transformers'
    config class (no import; the load buffers' rounding then counts one embedding, a lower bound)."""
    text = spec.family.text_config(config)
    # the decoder's own attention (not cross-attention, not Mamba/MLA state): its KV heads decide K/V replication
    decoder = next((layer for layer in spec.layers if layer.kv_heads() is not None and not layer.reads_encoder_output), None)
    tie = text.get("tie_word_embeddings", config.get("tie_word_embeddings"))
    if tie is None:  # the file leaves it to the config class vLLM builds (vllm llama.py: config.tie_word_embeddings)
        tie = tied_by_default(str(text.get("model_type", config.get("model_type", "")))) if class_default_tie else True
    kv_heads = decoder.kv_heads() if decoder is not None else None
    # every (KV heads, head size) of the decoder's attention kinds (Gemma-4: sliding 8 x 256, full 2 x 512)
    shapes = {(layer.kv_heads(), int(getattr(layer, "head_size", 0) or 0)) for layer in spec.layers if layer.kv_heads() is not None and not layer.reads_encoder_output}
    return WeightLayout(
        num_attention_heads=spec.num_attention_heads,
        num_kv_heads=kv_heads if kv_heads is not None else spec.num_attention_heads,
        head_size=int(getattr(decoder, "head_size", 0) or 0),
        num_experts=_first_int(text, ("num_experts", "n_routed_experts", "num_local_experts")) or _first_int(config, ("num_experts", "n_routed_experts", "num_local_experts")),
        tie_word_embeddings=bool(tie),
        replicated_modules=spec.family.unsharded_modules(config),
        column_modules=spec.family.column_parallel_modules(config),
        row_modules=spec.family.row_parallel_modules(config),
        added_biases=spec.family.vllm_added_biases,
        kv_shapes=tuple(sorted((int(h), s) for h, s in shapes if h and s)),
    )


def weights_breakdown(spec: ModelSpec, source: ModelSource, serving: ServingConfig, rank: int = 0, gpu: Gpu | None = None) -> WeightsBreakdown:
    """Weights of one rank by parallel kind (capacity/weights/per_rank.py), from headers or the meta build: the figure every
    path plans with (rank 0), and what a measured TP profile compares each rank's model load against. `gpu` matters
    only where vLLM's layout depends on it (gpt-oss MXFP4 experts: the MoE backend)."""
    named = bool(_local_shards(source))
    summary = source.weights
    moe = gpt_oss_mxfp4(source.config, gpu)
    if moe is not None:
        return _gpt_oss_mxfp4_breakdown(spec, source, serving, rank, moe)
    skipped = skipped_towers(spec, source, serving)
    if not named and summary is not None and serving.tensor_parallel_size == 1 and not spec.family.adds_vllm_tensors and not skipped:
        # One rank holds the whole checkpoint: its header summary's bytes (no tensor names needed, no torch import).
        total = summary.serving_bytes(serving.dtype_bytes)
        kept = "/".join(d for d in sorted(summary.bytes_by_dtype) if d not in ("F16", "BF16"))
        quantization = f"16-bit tensors x {serving.dtype_bytes} B ({serving.dtype}), {kept} as stored, from the header summary" if summary.quantized_dtypes else "none"
        return WeightsBreakdown(1, serving.enable_expert_parallel, (KindBytes("whole checkpoint", summary.tensor_count, total, total),), summary.source, quantization)
    tensors, how = model_tensors(spec, source)
    if skipped:
        tensors = without_towers(tensors, skipped)
        how += f", less the {' and '.join(m for t in skipped for m in t.modules)} vLLM leaves out at --limit-mm-per-prompt " + ",".join(f"{m}=0" for t in skipped for m in t.modalities)
    tensors = spec.family.vllm_tensors(tensors, source.config)
    layout = weight_layout(spec, source.config)
    scheme = quant_scheme(source.config)
    quantization = "none"
    if named and is_quantized_header(tensors):
        quantization = f"{scheme.name if scheme else 'quantized'}: stored bytes from the safetensors headers"
    elif scheme is not None and not named:
        tensors = tuple(quantized_tensors(tensors, scheme, layout))
        quantization = f"{scheme.name}: stored tensors worked out from quantization_config"
    kernel_modelled = False
    experts = any(t.leaf == "qweight" and (len(t.shape) > 2 or ".experts." in t.name) for t in tensors)  # AWQ MoE: another method, not modelled
    if isinstance(scheme, AwqScheme) and gpu is not None and quantization != "none" and not experts:
        # what vLLM's AWQ kernel for this GPU leaves resident after loading (capacity/weights/awq.py)
        kernel = awq_kernel(gpu, tensors, serving.tensor_parallel_size)
        tensors = tuple(kernel_tensors(tensors, kernel))
        quantization = f"{quantization}; kernel {kernel.describe()}"
        kernel_modelled = True
    par = Parallelism(serving.tensor_parallel_size, serving.enable_expert_parallel, serving.dtype_bytes, rank)
    wb = replace(weights_per_rank(tensors, layout, par, source=how, quantization=quantization), quantized_layout_modelled=kernel_modelled)
    if not named and summary is not None and summary.quantized_dtypes:
        # A quantized checkpoint known by its header summary only (Hub, catalog): its stored bytes are exact, the
        # tensor names are not; the per-rank share of the layout worked out above divides those bytes.
        wb = replace(
            wb,
            checkpoint_bytes=summary.serving_bytes(serving.dtype_bytes),
            quantization=f"{wb.quantization if scheme else 'quantized'}; total from {summary.source}, split as the layout splits",
        )
    return wb


def _gpt_oss_mxfp4_breakdown(spec: ModelSpec, source: ModelSource, serving: ServingConfig, rank: int, moe: GptOssMxfp4) -> WeightsBreakdown:
    """gpt-oss MXFP4: the non-expert tensors (headers or meta build) in the serving dtype, the experts as vLLM's MoE
    method allocates them for the GPU's backend (capacity/weights/mxfp4.py); a header summary's total is not used (it holds
    the checkpoint's unpadded experts, not vLLM's)."""
    tensors, how = model_tensors(spec, source)
    layout = replace(weight_layout(spec, source.config), mxfp4=moe)
    par = Parallelism(serving.tensor_parallel_size, serving.enable_expert_parallel, serving.dtype_bytes, rank)
    return weights_per_rank(gpt_oss_expert_tensors(tensors, moe), layout, par, source=how, quantization=moe.describe())


# weights_term memo: a sweep re-plans one model at many points that share its TP, EP and dtype.
_WEIGHTS: dict[tuple[Any, ...], tuple[MemoryTerm, int, WeightsBreakdown]] = {}


def weights_term(spec: ModelSpec, source: ModelSource, serving: ServingConfig, gpu: Gpu | None = None) -> tuple[MemoryTerm, int, WeightsBreakdown]:
    """Bytes of one rank's weights in the serving dtype (quantized tensors as stored), with the parameter count."""
    summary = None if source.weights is None else (source.weights.source, source.weights.data_bytes, source.weights.files)
    moe = gpt_oss_mxfp4(source.config, gpu)
    # AWQ's kernel, and so its resident bytes, depends on the GPU (capacity/weights/awq.py)
    awq_gpu = (gpu.platform, gpu.source == "size", gpu.compute_capability_major) if gpu is not None and isinstance(quant_scheme(source.config), AwqScheme) else None
    key = (
        spec,
        _config_json(source.config),
        source.safetensors,
        summary,
        serving.tensor_parallel_size,
        serving.enable_expert_parallel,
        serving.dtype,
        serving.dtype_bytes,
        moe,
        awq_gpu,
        skipped_towers(spec, source, serving),
    )
    hit = _WEIGHTS.get(key)
    if hit is None:
        if len(_WEIGHTS) >= 64:
            _WEIGHTS.clear()
        hit = _WEIGHTS[key] = _weights_term(spec, source, serving, gpu)
    return hit


def _weights_term(spec: ModelSpec, source: ModelSource, serving: ServingConfig, gpu: Gpu | None) -> tuple[MemoryTerm, int, WeightsBreakdown]:
    count, _ = parameter_count(spec, source)
    skipped = skipped_towers(spec, source, serving)
    if skipped:  # the parameters vLLM builds: the towers it leaves out are not among them
        count -= sum(t.numel for t in model_tensors(spec, source)[0] if any(tower.holds(t.name) for tower in skipped))
    wb = weights_breakdown(spec, source, serving, gpu=gpu)
    if wb.kinds and any(k.kind.startswith("moe-experts (mxfp4") for k in wb.kinds):
        return _gpt_oss_mxfp4_term(spec, serving, wb), count, wb
    tp = serving.tensor_parallel_size
    quantized = wb.quantization != "none"
    quant = f"; quantized ({wb.quantization})" if quantized else ""
    dense = count * serving.dtype_bytes
    layout = "" if quantized or wb.total_bytes == dense else f" {wb.total_bytes - dense:+,} B as vLLM lays them out (vocabulary padded to 64, biases its fused layers add)"
    if tp == 1 and not quantized:
        return MemoryTerm(wb.total_bytes, EXACT, f"{count:,} parameters x {serving.dtype_bytes} B ({serving.dtype}){layout}; {wb.source}"), count, wb
    exact = not wb.unclassified and spec.vllm_support.status == "native" and (not quantized or wb.quantized_layout_modelled)
    caveats = []
    if wb.unclassified:
        caveats.append(f"{len(wb.unclassified)} tensors no rule names counted whole, e.g. {wb.unclassified[0]}")
    if spec.vllm_support.status != "native":
        caveats.append(f"vLLM 0.33 serves {spec.architecture} {spec.vllm_support.status}: layers assumed as vLLM's usual parallel layers")
    if quantized and not wb.quantized_layout_modelled:
        caveats.append("vLLM's quantization kernels may repack or pad")
    how = wb.describe() if tp > 1 else f"{count:,} stored elements"
    return (
        MemoryTerm(wb.total_bytes, EXACT if exact else ESTIMATED, f"{how}{quant}; {wb.source}" + (f" ({'; '.join(caveats)})" if caveats else "")),
        count,
        wb,
    )


def _gpt_oss_mxfp4_term(spec: ModelSpec, serving: ServingConfig, wb: WeightsBreakdown) -> MemoryTerm:
    """gpt-oss MXFP4: exact from the config where every tensor is named by a rule and vLLM serves it natively."""
    exact = not wb.unclassified and spec.vllm_support.status == "native"
    caveat = f" ({len(wb.unclassified)} tensors no rule names counted whole, e.g. {wb.unclassified[0]})" if wb.unclassified else ""
    label = "exact (from config, vLLM 0.33 MXFP4 layout)" if exact else "estimated"
    return MemoryTerm(wb.total_bytes, EXACT if exact else ESTIMATED, f"{label}: {wb.describe()}; {wb.quantization}; {wb.source}{caveat}")


def runner_facts(spec: ModelSpec, source: ModelSource, wb: WeightsBreakdown) -> dict[str, bool]:
    """What decides a version's default model runner: MoE, quantized, hybrid (VllmConfig._is_default_v2_model_runner_model)."""
    return {
        "moe": weight_layout(spec, source.config, class_default_tie=False).num_experts > 0,
        "quantized": wb.quantization != "none" or quant_scheme(source.config) is not None,
        "hybrid": any(layer.is_state for layer in spec.layers),
    }


def load_buffers_term(
    spec: ModelSpec, source: ModelSource, serving: ServingConfig, wb: WeightsBreakdown, semantics: VllmSemantics, rounding: bool = True
) -> MemoryTerm:
    """What vLLM's "Model loading took" holds besides the parameters (capacity/memory/load_buffers.py): the rotary
    cos_sin_cache buffers (exact) and, for unquantized checkpoints, the caching allocator's rounding of the decoder's
    large tensors (estimated). `rounding=False` where a GPU measurement of the load already holds the rounding."""
    layout = weight_layout(spec, source.config, class_default_tie=False)
    buffers = spec.family.load_buffers(source.config, serving.max_num_batched_tokens, serving.dtype_bytes)
    loads = load_allocations(spec, source.config, layout, serving.tensor_parallel_size, serving.dtype_bytes, semantics.vision_rope_cache, buffers)
    if not rounding or wb.quantization != "none":
        loads = replace(loads, rounding_bytes=0, rounded_tensors=0)
    kind = EXACT if loads.exact else ESTIMATED
    return MemoryTerm(loads.total_bytes, kind, f"{loads.describe()} (vLLM {semantics.name}: allocated inside the load window besides the parameters)")


# --- encoder cache -----------------------------------------------------------------------------------


def encoder_cache_term(spec: ModelSpec, budget: MultiModalBudget, serving: ServingConfig) -> MemoryTerm:
    """profile_run holds N x T x hidden outputs as temporary encoder-cache entries through the decoder pass."""
    items, tokens = budget.profile_items, budget.profile_tokens_per_item
    if items == 0 or spec.encoder is None:
        return MemoryTerm(0, EXACT, "no encoder profiling (no multimodal budget)")
    hidden = spec.encoder.output_hidden_size
    rows = spec.encoder_output_tokens(budget.modality_with_max_tokens, tokens)
    of = "" if rows == tokens else f" (of its {tokens} placeholder tokens, the embeddings vLLM's dummy item yields)"
    return MemoryTerm(
        items * rows * hidden * serving.dtype_bytes,
        EXACT,
        f"{items} {budget.modality_with_max_tokens} items x {rows} tokens{of} x {hidden} hidden x {serving.dtype_bytes} B",
    )


# --- activation peak (estimated) ---------------------------------------------------------------------


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


# The sort path's peak is its sort on CUDA: Sampler.forward's fp32 copy 4 + the sorted values 4 + their int64 indices 8
# + torch.sort's device temporaries 20 (the index sequence it sorts along and the radix sort's alternate buffers) =
# 36 B per logit, measured on the H200 with the same torch operations as vLLM 0.9.2-0.15.1's apply_top_k_top_p
# (bench/sampler_sort_gpu.py, bench/results/h200-sampler-sort-2026-12-01: 36.0 B at six shapes, 256-1024 rows, vocab
# 51,866-262,208). The later stages hold 26 B (each wheel's own Sampler.forward on CPU under capacity's CpuProbe,
# bench/vllm_sampler_reference.py: the fp32 copy, sorted values, indices, softmax, two bool masks, the scattered
# result), which a CPU sort does not exceed. 0.17.0+ keep a sort as `apply_top_k_top_p_pytorch` below 8 rows.
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
    return decoder.vocab_size if not decoder.lm_head_sharded else -(-decoder.vocab_size // 64) * 64 // tp


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


# --- CUDA graphs (estimated): capacity/memory/cuda_graphs.py -----------------------------------------------------------


def _graph_sizes(spec: ModelSpec, serving: ServingConfig, sm100: bool) -> tuple[list[int], list[int]]:
    """(PIECEWISE sizes, FULL decode sizes) vLLM captures; encoder-decoder models capture FULL decode graphs only."""
    sizes = capture_sizes(serving, sm100, preset_max_capture_size(spec.architecture))
    full = full_decode_graph_sizes(serving, sizes)
    return ([] if spec.is_encoder_decoder else sizes), full


def graph_estimate(spec: ModelSpec, serving: ServingConfig, sm100: bool, runner: str) -> GraphEstimate | None:
    """The estimate of `runner` ("MRV2" or "V1"); None without CUDA graphs (--enforce-eager, no sizes)."""
    piecewise, full = _graph_sizes(spec, serving, sm100)
    if serving.enforce_eager or (not full and not piecewise):
        return None
    largest = max(piecewise or full)
    activations = decoder_activation_bytes(spec.decoder, largest, serving.dtype_bytes, serving.tensor_parallel_size)
    return (mrv2_estimate if runner == "MRV2" else v1_estimate)(spec.decoder, activations, len(piecewise), len(full))


def _graph_term(spec: ModelSpec, serving: ServingConfig, sm100: bool, runner: str) -> tuple[MemoryTerm, int]:
    if serving.enforce_eager:
        return MemoryTerm(0, EXACT, "--enforce-eager: no CUDA graphs"), 0
    estimate = graph_estimate(spec, serving, sm100, runner)
    if estimate is None:
        return MemoryTerm(0, EXACT, "no CUDA-graph sizes"), 0
    mode = "FULL_DECODE_ONLY" if spec.is_encoder_decoder else "FULL_AND_PIECEWISE"
    return MemoryTerm(estimate.total_bytes, ESTIMATED, f"{mode}; {estimate.how}"), estimate.piecewise_sizes + estimate.full_sizes


def cuda_graph_term(spec: ModelSpec, serving: ServingConfig, sm100: bool) -> tuple[MemoryTerm, int]:
    """Model Runner V2's estimate (0.29-0.33): every PIECEWISE graph measured, FULL decode graphs extrapolated."""
    return _graph_term(spec, serving, sm100, "MRV2")


def v1_cuda_graph_term(spec: ModelSpec, serving: ServingConfig, sm100: bool) -> tuple[MemoryTerm, int]:
    """The V1 model runner's estimate (0.19-0.28): the first two captures of each mode, extrapolated."""
    return _graph_term(spec, serving, sm100, "V1")


# --- measured (from a MemoryProfile) --------------------------------------------------------------------


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
    """vLLM's transient_peak_headroom on one rank at scaling.tp, from the phases measured at measured_tp.

    Each phase's peak above the level before profile_run: the encoder's scales by the encoder ratio, the
    decoder's (less the encoder outputs it holds) by the decoder ratio; the sampler's logits stay whole, plus the
    all-gather's growth (RankScaling.sampler_extra_bytes). A plan without the warmup-param pass drops the
    "sampler_warmup" phase and puts capacity's earlier fp32 copy on the default pass."""
    phases = {name: profile.phase(name) for name in ("encoder", "decoder", "sampler", "sampler_warmup")}
    present = [p for p in phases.values() if p is not None]
    if not present:
        return round(profile.transient_peak_headroom_bytes * scaling.decoder_ratio)
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
    return max(max(scaled.values()) + offset, 0)


def measured_terms(
    profile: MemoryProfile, estimates: dict[str, MemoryTerm], spec: ModelSpec, serving: ServingConfig, sampler: SamplerForm = SAMPLER_0_33
) -> dict[str, MemoryTerm]:
    """The terms a GPU profile measured; they replace the estimates.

    weights + non_torch = vLLM's total_consumed (cudaMemGetInfo delta since the baseline), and
    encoder_cache + activation_peak = vLLM's transient_peak_headroom (peak - allocated after).
    A fake-tensor trace's weights are the planner's own per-rank figure (the same tensors, counted by
    capacity/weights/per_rank.py). A profile of a model split over another number of ranks than the plan's TP
    (a single-GPU profile re-planned at TP 2) gives per-rank terms: weights from capacity/weights/per_rank.py,
    activations and CUDA graphs divided as the formula divides them (RankScaling).
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
            + (" + cuDNN, the H200's difference between models with and without convolutions" if conv else ""),
        )
        for key in ("encoder_cache", "activation_peak"):
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
    scaling = rank_scaling(spec, serving, profile.measured_tensor_parallel_size, sampler)
    if fake or scaling.needed:
        terms["weights"] = estimates["weights"]  # one figure for every path: capacity/weights/per_rank.py
    if scaling.reshapes(profile):
        terms.update(per_rank_terms(profile, terms, scaling))
    return terms


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


def vllm_encoder_activation(family: Family, term: MemoryTerm, encoder_phase_dominates: bool) -> MemoryTerm:
    """A fake trace's activation peak scaled to vLLM's encoder kernels (the family's trace_encoder_to_vllm) when
    the encoder phase sets the peak; other families and phases unchanged."""
    factor = family.trace_encoder_to_vllm
    if factor is None or not encoder_phase_dominates:
        return term
    return MemoryTerm(
        round(term.bytes * factor),
        ESTIMATED,
        f"{term.method}; x {factor} for vLLM's varlen encoder attention (calibrated on public vLLM logs, bench/results/predict-logs-2026-12-01)",
    )
