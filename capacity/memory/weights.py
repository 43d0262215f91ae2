"""The weights term: one rank's weights in the serving dtype, the glue from a model (spec, source, knobs, GPU) to
capacity.weights' per-rank layout (capacity/weights/per_rank.py).

The tensors come from the safetensors headers of a local folder, else from the real architecture built on the meta
device; a checkpoint known only by its header summary at TP 1 gives its bytes without tensor names.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from capacity.errors import BadInput, RuntimeFailure
from capacity.gpu.catalog import Gpu
from capacity.memory.term import ESTIMATED, EXACT, MemoryTerm
from capacity.model.spec import ModelSpec
from capacity.serving.config import ServingConfig
from capacity.serving.data_parallel import SEQUENCE_PARALLEL_REPLICATED_SHARED, use_sequence_parallel_moe
from capacity.source.parameter_table import ParameterTable, read_parameter_table
from capacity.source.resolve import ModelSource
from capacity.weights.awq import awq_kernel, kernel_tensors
from capacity.weights.mxfp4 import GptOssMxfp4, gpt_oss_expert_tensors, gpt_oss_mxfp4
from capacity.weights.parallel_layers import Parallelism, WeightLayout
from capacity.weights.per_rank import KindBytes, WeightsBreakdown, weights_per_rank
from capacity.weights.pipeline_stage import StageSlice, stage_tensors
from capacity.weights.quant_schemes import AwqScheme, is_quantized_header, quant_scheme, quantized_tensors
from capacity.weights.stored_tensor import MODEL_DTYPE, StoredTensor

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.model.family import Family, Tower


@lru_cache(maxsize=32)
def _meta_parameters(family: Family, config_json: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(name, shape) of every unique parameter of the real architecture (`Family.parameter_shapes`: built on the meta
    device, or listed from the config by a remote-code family), kept in capacity's disk cache (capacity/disk_cache.py)."""
    import json

    from capacity import disk_cache

    config = json.loads(config_json)
    return disk_cache.remembered(
        "parameters",
        {"family": family.name, "config_sha256": disk_cache.sha256_of(config)},
        lambda: family.parameter_shapes(config),
        lambda params: [[name, list(shape)] for name, shape in params],
        lambda stored: tuple((str(name), tuple(int(d) for d in shape)) for name, shape in stored),
    )


@lru_cache(maxsize=32)
def _recorded_parameters(table: Any, config_sha256: str, family: str) -> ParameterTable | None:
    """The model's recorded parameter table (a catalog entry's), when it was made from this very config by this family."""
    recorded = read_parameter_table(table, str(table))
    if recorded is None or recorded.config_sha256 != config_sha256 or recorded.family != family:
        return None
    return recorded


_T = TypeVar("_T")

# Memos keyed by the identity of their input (a config dict, a parameter list from an lru-cached reader): the entry
# keeps the input alive, so its id cannot be reused. Re-planning one model (a sweep) serializes its config once and
# makes its StoredTensors once (their name parts, cached properties, are then split once).
_BY_IDENTITY: dict[tuple[Any, ...], tuple[Any, Any]] = {}


def _by_identity(kind: str, source: Any, make: Callable[[], _T], *more: Any) -> _T:
    """make(), remembered as `kind` for this very `source` object and `more` (the other arguments make reads)."""
    key = (kind, id(source), *more)
    hit = _BY_IDENTITY.get(key)
    if hit is not None and hit[0] is source:
        return hit[1]
    value = make()
    if len(_BY_IDENTITY) >= 64:
        _BY_IDENTITY.clear()
    _BY_IDENTITY[key] = (source, value)
    return value


def _config_json(config: dict[str, Any]) -> str:
    """The config as canonical JSON: the key of the meta-device build cache."""
    import json

    return _by_identity("config json", config, lambda: json.dumps(config, sort_keys=True))


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


def _stored_tensors(rows: tuple[tuple[Any, ...], ...], dtype: str | None = None) -> tuple[StoredTensor, ...]:
    """StoredTensor of each (name, shape, dtype) row, or (name, shape) row loaded as `dtype`."""
    return _by_identity("stored tensors", rows, lambda: tuple(StoredTensor(r[0], r[1], r[2] if dtype is None else dtype) for r in rows), dtype)


def model_tensors(spec: ModelSpec, source: ModelSource) -> tuple[tuple[StoredTensor, ...], str]:
    """The stored tensors by name: the safetensors headers of local shards, else those the Hub's headers named (read
    now, or recorded in the HF assets cache), else the catalog's parameter table, else the meta-device build's
    parameters (a summary recorded without names, or none: a config-only folder, a Hub repo without safetensors)."""
    shards = _local_shards(source)
    if shards:
        try:
            return _header_tensors(shards), "safetensors headers of the model folder"
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise BadInput(f"{source.path}: a safetensors header cannot be read ({exc})") from exc
    if source.weights is not None and source.weights.tensors:  # the Hub's headers, named (read now or recorded)
        return _stored_tensors(source.weights.tensors), source.weights.source
    if source.parameter_table is not None:
        recorded = _recorded_parameters(source.parameter_table, source.shapes_config_sha256, spec.family.name)
        if recorded is not None:
            return _stored_tensors(recorded.parameters, MODEL_DTYPE), f"parameters of {spec.architecture} {recorded.source}, recorded in the catalog"
    try:
        params = _meta_parameters(spec.family, _config_json(source.shapes_config))
    except BadInput:  # a field the family's parameter list needs, named in one line
        raise
    except ImportError as exc:
        raise RuntimeFailure(f"exact weights need torch and transformers ({exc.name} missing): pip install the project") from exc
    except Exception as exc:  # a config transformers cannot build
        raise RuntimeFailure(f"building {spec.architecture} on the meta device failed: {exc}") from exc
    return _stored_tensors(params, MODEL_DTYPE), f"parameters of {spec.architecture} {spec.family.parameters_source}"


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
    model_type transformers does not know (remote code). Shipped for the catalog's model types (capacity/model/shipped),
    else worked out once and kept in capacity's disk cache."""
    from capacity import disk_cache
    from capacity.model.shipped import shipped

    key = {"model_type": model_type, "field": "tie_word_embeddings"}
    return disk_cache.remembered("class-defaults", key, lambda: _class_ties(model_type), bool, _checked_bool, shipped=shipped("class-defaults"))


def _checked_bool(stored: object) -> bool:
    if not isinstance(stored, bool):
        raise ValueError("not a bool")
    return stored


def _class_ties(model_type: str) -> bool:
    from transformers import CONFIG_MAPPING

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


def _moe_split_by_dp(spec: ModelSpec, source: ModelSource, serving: ServingConfig) -> bool:
    """DP > 1 on an MoE model: its experts are split (or divided) over tp x dp ranks (FusedMoEParallelConfig.make)."""
    return serving.data_parallel_size > 1 and weight_layout(spec, source.config, class_default_tie=False).num_experts > 0


def shared_experts_under_sequence_parallel_moe(layout: WeightLayout, spec: ModelSpec, serving: ServingConfig, tensors: Any) -> WeightLayout:
    """Under sequence-parallel MoE (EP, TP > 1, DP > 1) vLLM 0.33 builds DeepSeek-V2/V3's shared experts whole on every rank
    (deepseek_v2.py DeepseekV2MLP(disable_tp=is_sequence_parallel)); another architecture with shared experts is refused."""
    if not use_sequence_parallel_moe(serving.tensor_parallel_size, serving.data_parallel_size, serving.enable_expert_parallel):
        return layout
    if not any(".shared_expert" in t.name for t in tensors):
        return layout
    if spec.architecture not in SEQUENCE_PARALLEL_REPLICATED_SHARED:
        raise BadInput(
            f"{spec.name}: with --enable-expert-parallel at TP > 1 and DP > 1 vLLM runs sequence-parallel MoE, and how {spec.architecture} "
            "then builds its shared experts is not modelled; plan at --tensor-parallel-size 1 per DP rank, or DP 1"
        )
    return replace(layout, replicated_linear_modules=(*layout.replicated_linear_modules, r"\.shared_experts?(\.|$)"))


def weights_breakdown(
    spec: ModelSpec, source: ModelSource, serving: ServingConfig, rank: int = 0, gpu: Gpu | None = None, stage: StageSlice | None = None
) -> WeightsBreakdown:
    """Weights of one rank by parallel kind (capacity/weights/per_rank.py), from headers or the meta build: the figure every
    path plans with (rank 0), and what a measured TP profile compares each rank's model load against. `gpu` matters
    only where vLLM's layout depends on it (gpt-oss MXFP4 experts: the MoE backend). `stage`: one pipeline stage's
    share (capacity/weights/pipeline_stage.py) instead of the whole model's."""
    summary = source.weights
    named = bool(_local_shards(source)) or bool(summary is not None and summary.tensors)
    moe = gpt_oss_mxfp4(source.config, gpu)
    if moe is not None:
        if stage is not None:
            raise BadInput(f"{spec.name}: a pipeline stage's share of gpt-oss's MXFP4 experts is not modelled; plan at --pipeline-parallel-size 1")
        return _gpt_oss_mxfp4_breakdown(spec, source, serving, rank, moe)
    if stage is not None and not named and summary is not None and summary.quantized_dtypes:
        raise BadInput(
            f"{spec.name}: a quantized checkpoint known by its header summary only (no tensor names) cannot be split into pipeline stages; "
            "plan from a folder with its safetensors, or at --pipeline-parallel-size 1"
        )
    skipped = skipped_towers(spec, source, serving)
    if stage is None and not named and summary is not None and serving.tensor_parallel_size == 1 and not _moe_split_by_dp(spec, source, serving) and not spec.family.adds_vllm_tensors and not skipped:
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
    layout = shared_experts_under_sequence_parallel_moe(weight_layout(spec, source.config), spec, serving, tensors)
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
    if stage is not None:
        tensors = tuple(stage_tensors(tensors, stage))
        how += f", the tensors of pipeline stage layers {stage.start}..{stage.end - 1}" + (", embedding" if stage.first else "") + (", final norm and LM head" if stage.last else "")
    par = Parallelism(serving.tensor_parallel_size, serving.enable_expert_parallel, serving.dtype_bytes, rank, serving.data_parallel_size)
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
    par = Parallelism(serving.tensor_parallel_size, serving.enable_expert_parallel, serving.dtype_bytes, rank, serving.data_parallel_size)
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
        serving.data_parallel_size,
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
    if tp == 1 and not _moe_split_by_dp(spec, source, serving) and not quantized:
        return MemoryTerm(wb.total_bytes, EXACT, f"{count:,} parameters x {serving.dtype_bytes} B ({serving.dtype}){layout}; {wb.source}"), count, wb
    exact = not wb.unclassified and spec.vllm_support.status == "native" and (not quantized or wb.quantized_layout_modelled)
    caveats = []
    if wb.unclassified:
        caveats.append(f"{len(wb.unclassified)} tensors no rule names counted whole, e.g. {wb.unclassified[0]}")
    if spec.vllm_support.status != "native":
        caveats.append(f"vLLM 0.33 serves {spec.architecture} {spec.vllm_support.status}: layers assumed as vLLM's usual parallel layers")
    if quantized and not wb.quantized_layout_modelled:
        caveats.append("vLLM's quantization kernels may repack or pad")
    how = wb.describe() if tp > 1 or _moe_split_by_dp(spec, source, serving) else f"{count:,} stored elements"
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
