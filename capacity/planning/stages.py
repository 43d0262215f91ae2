"""Pipeline parallelism: each stage planned as its own worker, then the engine's pool, as vLLM 0.33 does.

Every PP rank is a worker that loads its own layers, profiles its own forward and reports its own available KV memory
(vllm/v1/engine/core.py: `determine_available_memory()` per worker); `get_kv_cache_configs` then plans each worker's
blocks on its own memory and gives every worker the smallest count (capacity/kv/pipeline_stages.py). Per stage:

- weights: the stage's decoder layers, the embedding on the first (and the last when tied), the final norm and LM head
  on the last (capacity/weights/pipeline_stage.py, via weights_breakdown(stage=...));
- activation peak: Model Runner V2's profile_run (vllm/v1/worker/gpu/model_runner.py) profiles the encoder cache on
  the first stage only (`self.supports_mm_inputs and self.is_first_pp_rank`), runs the stage's layers on every stage,
  and the sampler on the last only (`if self.is_last_pp_rank: self._dummy_sampler_run(...)`);
- intermediate tensors: a non-first stage keeps `make_empty_intermediate_tensors(batch_size=max_num_tokens)` alive
  from load_model on (capacity/memory/pipeline_buffers.py), counted in vLLM's total_consumed;
- CUDA graphs: the stage's own layers' pieces and graphs (capacity/memory/cuda_graphs.py on the stage's layer count);
- the PP group's communicator: one more PyNcclCommunicator (world size PP) built before the baseline snapshot, as
  the TP group's (vllm/distributed/parallel_state.py); custom all-reduce and symmetric memory are TP-only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import TYPE_CHECKING, Any

from capacity.errors import BadInput
from capacity.gpu.catalog import Gpu
from capacity.kv.pipeline_stages import StageKV, engine_num_blocks, limiting_stage, stage_kv
from capacity.kv.specs import KVCacheSpec
from capacity.memory.activations import ActivationEstimate
from capacity.memory.collectives import NCCL_COMMUNICATOR_BYTES
from capacity.memory.compile_cache import ColdCompileScratch, cold_start_activation
from capacity.memory.load_buffers import load_buffers_term
from capacity.memory.pipeline_buffers import intermediate_tensors_bytes, max_concurrent_batches
from capacity.memory.rank_scaling import RankScaling, phase_headrooms
from capacity.memory.term import ESTIMATED, EXACT, MemoryTerm
from capacity.memory.weights import weight_layout, weights_breakdown
from capacity.model.spec import ModelSpec
from capacity.planning.kv_groups import max_model_len_that_fits, model_knobs
from capacity.planning.plan import NON_KV_TERMS
from capacity.planning.stage_towers import check_deepstack, intermediate_keys, tower_family
from capacity.serving.config import ServingConfig
from capacity.serving.pipeline import StageLayers, pipeline_stages
from capacity.source.resolve import ModelSource
from capacity.vllm.versions import LATEST, VllmSemantics

if TYPE_CHECKING:  # pragma: no cover - typing only (a formula plan has no measured profile)
    from capacity.memory.measured_profile import MemoryProfile

_KEYS = json.loads(resources.files("capacity.memory").joinpath("vllm_intermediate_keys.json").read_text())
INTERMEDIATE_TENSOR_KEYS: dict[str, list[str]] = _KEYS["intermediate_tensor_keys"]  # bench/vllm_pp_intermediate_keys.py

# The profile_run phases each stage runs (Model Runner V2): the tower on the first, the sampler on the last.
FIRST_STAGE_PHASES = ("encoder",)
EVERY_STAGE_PHASES = ("decoder",)
LAST_STAGE_PHASES = ("sampler", "sampler_warmup")


@dataclass(frozen=True)
class StagePlan:
    """One pipeline stage as its own worker: its terms, its KV budget and blocks on its own memory."""

    rank: int
    start_layer: int
    end_layer: int  # exclusive
    first: bool
    last: bool
    memory: dict[str, MemoryTerm]
    requested_bytes: int
    kv: StageKV
    max_model_len_that_fits: int
    limiting: bool = False  # its blocks set the engine's pool
    phases: tuple[str, ...] = field(default=())  # the profile_run phases it runs

    @property
    def non_kv_bytes(self) -> int:
        return sum(t.bytes for k, t in self.memory.items() if k in NON_KV_TERMS)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "layers": [self.start_layer, self.end_layer],
            "embedding": self.first,
            "lm_head_and_sampler": self.last,
            "profile_phases": list(self.phases),
            "memory": {k: t.to_dict() for k, t in self.memory.items()},
            "non_kv_bytes": self.non_kv_bytes,
            "requested_bytes": self.requested_bytes,
            "kv": self.kv.to_dict(),
            "max_model_len_that_fits": self.max_model_len_that_fits,
            "limiting": self.limiting,
        }


def stage_phases(stage: StageLayers) -> tuple[str, ...]:
    return (FIRST_STAGE_PHASES if stage.first else ()) + EVERY_STAGE_PHASES + (LAST_STAGE_PHASES if stage.last else ())


def pipeline_window_batches(pipeline_parallel_size: int, v2_model_runner: bool) -> int:
    """The batches a sliding-window layer reserves blocks for at PP > 1 (VllmConfig.max_concurrent_batches): async
    scheduling stays on with the V2 model runner (PP + 1); vLLM 0.33 turns it off for PP on the V1 runner (PP)."""
    return max_concurrent_batches(pipeline_parallel_size, async_scheduling=v2_model_runner, v2_model_runner=v2_model_runner)


def refuse_unplanned_stages(spec: ModelSpec, serving: ServingConfig, profile: MemoryProfile | None, semantics: VllmSemantics = LATEST) -> None:
    """What the stage plan does not model, refused in one line (fail closed)."""
    pp = serving.pipeline_parallel_size
    if semantics.engine == "V0":
        # the V1 engine's per-worker profile and min-of-workers pool (vllm/v1/engine/core.py) is what is modelled; V0's
        # driver sized every worker from the driver's own profile
        raise BadInput(f"--pipeline-parallel-size {pp}: stages are planned under the V1 engine's rules (0.8 and later), not the {semantics.name}'s")
    if not (spec.modalities or spec.encoder is not None) and spec.architecture not in INTERMEDIATE_TENSOR_KEYS:
        raise BadInput(
            f"--pipeline-parallel-size {pp}: which tensors {spec.architecture} sends between stages is not read from vLLM 0.33 "
            "(bench/vllm_pp_intermediate_keys.py lists the decoder-only architectures whose module names them); plan at --pipeline-parallel-size 1"
        )
    if serving.num_speculative_tokens:
        # llama.py builds embed_tokens on a non-first stage too when spec_decode_needs_target_embed(vllm_config)
        raise BadInput(
            f"--pipeline-parallel-size {pp} with speculative tokens: the target embedding a drafter reads on later stages is not modelled; plan without them"
        )
    if len(spec.layers) != spec.decoder.num_layers:
        raise BadInput(
            f"--pipeline-parallel-size {pp}: {spec.name}'s KV layers ({len(spec.layers)}) are not one per decoder layer ({spec.decoder.num_layers}); its stages are not modelled"
        )
    if profile is not None and profile.fingerprint.device != "fake":
        raise BadInput(
            f"--pipeline-parallel-size {pp}: a measured profile ran the whole model on one worker, not one stage; plan from the trace or the formulas"
        )


@dataclass(frozen=True)
class StageModel:
    """What the stages of this model build besides its decoder layers, and what they send each other."""

    keys: tuple[str, ...]  # the intermediate tensors a non-first stage receives
    keys_of: str  # the class whose make_empty_intermediate_tensors names them
    towers: tuple[str, ...] = ()  # modules under _mark_tower_model: the first stage's
    every_stage: tuple[str, ...] = ()  # bare parameters assigned there: every stage's


def stage_model(spec: ModelSpec, config: dict[str, Any], stages: tuple[StageLayers, ...], mrv2: bool) -> StageModel:
    """A text-only decoder's keys from the key list; a multimodal model's from its language model, its towers from the
    family (capacity/planning/stage_towers.py)."""
    pp = len(stages)
    family = tower_family(spec, config, pp)
    if family is None:
        return StageModel(tuple(INTERMEDIATE_TENSOR_KEYS[spec.architecture]), spec.architecture)
    if not mrv2:
        raise BadInput(
            f"--pipeline-parallel-size {pp}: {spec.name}'s towers under the V1 model runner (built on every stage) are not modelled; plan at --pipeline-parallel-size 1"
        )
    keys, language_model = intermediate_keys(family, config, INTERMEDIATE_TENSOR_KEYS, pp)
    check_deepstack(family, config, stages[1].start, pp)
    towers = tuple(m for t in spec.family.towers(config) for m in t.modules)
    return StageModel(keys, language_model, towers, family.every_stage)


def indexed_layer_specs(spec: ModelSpec, serving: ServingConfig, gpu: Gpu) -> list[tuple[int, KVCacheSpec]]:
    """(decoder layer index, its KV spec on one rank) of every layer that builds one (vLLM's per-worker spec dicts)."""
    knobs = model_knobs(spec, serving, gpu)
    return [(i, s) for i, s in ((i, layer.kv_spec(knobs)) for i, layer in enumerate(spec.layers)) if s is not None]


def phase_transients(profile: MemoryProfile | None, estimate: ActivationEstimate, scaling: RankScaling | None = None) -> tuple[dict[str, int], str]:
    """Each profile_run phase's transient peak on one rank, as the whole model's activation term counts it: a trace's
    phase headroom less the encoder outputs held (capacity/memory/rank_scaling.py, scaled to the plan's TP when the
    trace ran at another), the largest being the whole model's; without a trace, each formula phase."""
    formula = {"encoder": estimate.encoder_bytes, "decoder": estimate.decoder_bytes, "sampler": estimate.sampler_bytes}
    if profile is None:
        return formula, "formula"
    assert scaling is not None
    phases = phase_headrooms(profile, scaling)
    if not phases:  # a profile still being made (the trace's warmup plan): no phase recorded yet
        return formula, "formula (the profile recorded no profile_run phase)"
    at = f" at TP {scaling.measured_tp}, per rank at TP {scaling.tp}" if scaling.needed else ""
    return {k: max(v - profile.encoder_cache_bytes, 0) for k, v in phases.items()}, f"fake-tensor trace{at}"


def stage_activation(whole: MemoryTerm, transients: dict[str, int], how: str, phases: tuple[str, ...]) -> MemoryTerm:
    """The stage's activation peak: the whole model's term when the stage runs the phase that sets it, else the
    largest of its own phases (the decoder phase: the widest layer's, charged to every stage)."""
    peak_phase = max(transients, key=lambda k: transients[k])
    if peak_phase in phases:
        return replace(whole, method=f"the stage runs the {peak_phase} phase that sets the whole model's peak: {whole.method}")
    held = {k: v for k, v in transients.items() if k in phases}
    phase = max(held, key=lambda k: held[k])
    return MemoryTerm(
        held[phase],
        ESTIMATED,
        f"{how}: the {phase} phase's peak ({', '.join(f'{k} {v:,} B' for k, v in held.items())}); "
        f"the {peak_phase} phase ({transients[peak_phase]:,} B) runs on another stage",
    )


def stage_cold_scratch(scratch: ColdCompileScratch, stage: StageLayers) -> ColdCompileScratch:
    """A cold compile on one stage: each worker compiles its own layers; only the first stage's graph gathers the token
    embeddings (a later one starts from the hidden states it receives), so only it benchmarks the embedding table (S);
    every stage autotunes its kernels' first launches (A)."""
    return scratch if stage.first else replace(scratch, embedding_bytes=0)


def stage_spec(spec: ModelSpec, stage: StageLayers) -> ModelSpec:
    """The model as the stage builds it, for the terms that count per decoder layer (CUDA-graph pieces, load rounding)."""
    return replace(spec, decoder=replace(spec.decoder, num_layers=stage.num_layers))


def plan_stages(
    source: ModelSource,
    spec: ModelSpec,
    gpu: Gpu,
    serving: ServingConfig,
    whole: dict[str, MemoryTerm],
    transients: tuple[dict[str, int], str],
    requested: int,
    semantics: VllmSemantics,
    graphs_for: Callable[[ModelSpec], MemoryTerm],
    window_batches: int,
    mrv2: bool = True,
    cold: ColdCompileScratch | None = None,
) -> tuple[StagePlan, ...]:
    """Each stage's terms, available KV memory and blocks on its own memory; the limiting stage marked. `cold`: a cold
    compile cache's scratch (the whole model's terms are then the warm ones), applied per stage."""
    pp = serving.pipeline_parallel_size
    num_layers = spec.decoder.num_layers
    tied = weight_layout(spec, source.config).tie_word_embeddings
    specs = indexed_layer_specs(spec, serving, gpu)
    split = pipeline_stages(num_layers, pp, serving.pp_layer_partition)
    built = stage_model(spec, source.config, split, mrv2)
    keys, towers = built.keys, built.towers
    upper = spec.derived_max_model_len if serving.auto_fit_max_model_len else serving.max_model_len
    plans = []
    for stage in split:
        phases = stage_phases(stage)
        wb = weights_breakdown(spec, source, serving, gpu=gpu, stage=stage.weights_slice(num_layers, tied, towers, built.every_stage))
        w = whole["weights"]
        layers = f"pipeline stage {stage.rank}: decoder layers {stage.start}..{stage.end - 1}"
        if towers:
            layers += f", {'/'.join(towers)} {'built here' if stage.first else 'not built (MRV2 builds towers on the first stage only)'}"
        buffers = intermediate_tensors_bytes(stage.first, len(keys), serving.max_num_batched_tokens, spec.decoder.hidden_size, serving.dtype_bytes)
        memory = {
            "weights": MemoryTerm(wb.total_bytes, w.kind, f"{layers}; {wb.describe()}; {wb.source}"),
            "load_buffers": _estimated(
                load_buffers_term(stage_spec(spec, stage), source, serving, wb, semantics, towers_built=stage.first or not towers),
                "the allocator rounding of the stage's own layers",
            ),
            "activation_peak": stage_activation(whole["activation_peak"], *transients, phases),
            "encoder_cache": whole["encoder_cache"]
            if stage.first
            else MemoryTerm(0, EXACT, "profiled on the first stage only (MRV2 profile_run: is_first_pp_rank)"),
            "non_torch": whole["non_torch"],
            "cuda_graphs": graphs_for(stage_spec(spec, stage)),
            "pp_intermediate": MemoryTerm(
                buffers,
                EXACT,
                "the first stage receives none"
                if stage.first
                else f"{len(keys)} x ({'/'.join(keys)}{'' if built.keys_of == spec.architecture else f', its {built.keys_of} language model'}) x {serving.max_num_batched_tokens} tokens x hidden {spec.decoder.hidden_size} x {serving.dtype_bytes} B, "
                "not split by TP (make_empty_intermediate_tensors, kept from load_model on)",
            ),
            "cuda_context": whole["cuda_context"],
            "collectives": MemoryTerm(
                whole["collectives"].bytes + NCCL_COMMUNICATOR_BYTES,
                ESTIMATED,
                f"{whole['collectives'].method}; + the PP group's PyNcclCommunicator ({pp} ranks) {NCCL_COMMUNICATOR_BYTES:,} B, the TP-measured "
                "NCCL constant (not measured for a PP group); before the baseline snapshot",
            ),
        }
        if cold is not None:  # the whole model's terms are the warm ones: the stage's own compile on top
            memory["activation_peak"] = cold_start_activation(memory["activation_peak"], memory["encoder_cache"], stage_cold_scratch(cold, stage))
        non_kv = sum(t.bytes for k, t in memory.items() if k in NON_KV_TERMS)
        available = serving.kv_cache_memory_bytes if serving.kv_cache_memory_bytes is not None else requested - non_kv
        kv = stage_kv(stage.rank, specs, stage.start, stage.end, available)
        fit = max_model_len_that_fits(list(kv.groups), kv.bytes_per_block, serving, available, upper, window_batches)
        plans.append(StagePlan(stage.rank, stage.start, stage.end, stage.first, stage.last, memory, requested, kv, fit, phases=phases))
    limiting = limiting_stage([p.kv for p in plans]).rank
    assert engine_num_blocks([p.kv for p in plans]) == plans[limiting].kv.num_blocks
    return tuple(replace(p, limiting=p.rank == limiting) for p in plans)


def _estimated(term: MemoryTerm, why: str) -> MemoryTerm:
    if not term.bytes:
        return term
    return MemoryTerm(term.bytes, ESTIMATED if term.kind != EXACT else term.kind, f"{term.method}; {why}")
