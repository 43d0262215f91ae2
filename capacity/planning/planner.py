"""The planner: from model, knobs and GPU to vLLM 0.33's memory budget, KV blocks and concurrency."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from capacity.errors import BadInput
from capacity.gpu.catalog import Gpu, nvidia_smi_total_caveat, total_setting_note
from capacity.gpu.detect import resolve_gpu
from capacity.kv.specs import BlockContext, KVGroup, bytes_per_block
from capacity.memory.activations import activation_estimate, activation_term, vllm_encoder_activation
from capacity.memory.collectives import collectives_term
from capacity.memory.compile_cache import cold_compile_scratch, cold_start_activation
from capacity.memory.cuda_context import cuda_context_term, handles_moved
from capacity.memory.cuda_graphs import GraphEstimate, cuda_graph_term, graph_estimate, v1_cuda_graph_term
from capacity.memory.encoder_cache import encoder_cache_term
from capacity.memory.load_buffers import load_buffers_term
from capacity.memory.lora import lora_memory, lora_terms
from capacity.memory.measured_terms import measured_terms
from capacity.memory.non_torch import communicators_in_profile, non_torch_term, v0_non_torch_term
from capacity.memory.rank_scaling import rank_scaling
from capacity.memory.sampler import SAMPLER_0_33, SamplerForm, sampler_form, v1_sampler_form
from capacity.memory.term import ESTIMATED, EXACT, MEASURED, MemoryTerm
from capacity.memory.unified_memory import capture_cost, free_memory_reading, host_memory_term, with_host_memory
from capacity.memory.weights import runner_facts, weights_term
from capacity.model.registry import load_model
from capacity.model.spec import ModelSpec
from capacity.planning.data_parallel import is_moe, placement_of, with_data_parallel_terms
from capacity.planning.hazards import find_hazards
from capacity.planning.kv_groups import block_context, block_table_max_len, block_table_max_len_pre_fix, kv_groups_for, max_model_len_that_fits
from capacity.planning.plan import NON_KV_TERMS, Concurrency, GroupPlan, KVCachePlan, Plan, RankBudget
from capacity.planning.stages import StagePlan, phase_transients, pipeline_window_batches, plan_stages, refuse_unplanned_stages
from capacity.planning.suggest import suggest
from capacity.planning.warmup import warmup_plan
from capacity.serving.config import BATCH_DEFAULT_CONTEXTS, ServingArgs, ServingConfig, resolve_serving
from capacity.serving.data_parallel import node_gpu_name
from capacity.serving.encoder_budget import MultiModalBudget, build_budget
from capacity.source.resolve import ModelSource
from capacity.units import plural
from capacity.vllm.compile_lines import COLD
from capacity.vllm.lora_rules import LORA_RULES, NOT_MODELLED, LoraRules, for_release
from capacity.vllm.serve_flags import release_of, require_flags
from capacity.vllm.versions import LATEST, VllmSemantics, release_tuple

if TYPE_CHECKING:  # pragma: no cover - typing only (a formula plan has no measured profile)
    from capacity.memory.measured_profile import MemoryProfile


def requested_memory(gpu: Gpu, utilization: float) -> int:
    """vLLM: request_memory = ceil(total_memory x gpu_memory_utilization)."""
    return math.ceil(gpu.total_memory_bytes * utilization)


def needed_bytes(groups: list[KVGroup], bpb: int, ctx: BlockContext) -> int:
    """vLLM: _max_memory_usage_bytes_from_groups = bytes_per_block x sum of per-group blocks."""
    return bpb * sum(g.spec.blocks_per_request_vllm(ctx) for g in groups)


def block_tables_term(groups: list[KVGroup], widths: list[int], serving: ServingConfig) -> MemoryTerm:
    """MRV2 BlockTables: per group an int32 (max_num_reqs x width) table and its staged copy, plus int64 slot mappings."""
    tables = sum(2 * serving.max_num_seqs * w * 4 for w in widths)
    slots = len(groups) * serving.max_num_batched_tokens * 8
    return MemoryTerm(
        tables + slots,
        EXACT,
        f"{plural(len(groups), 'group')} x 2 x {serving.max_num_seqs} reqs x width x 4 B + slot mappings; allocated after the KV budget",
    )


def graphs_in_budget(semantics: VllmSemantics, gpu: Gpu, mrv2: bool) -> bool:
    """Whether vLLM sets its CUDA-graph estimate aside in the KV budget (Worker.determine_available_memory's
    cudagraph_memory_estimate_applied); where not, the graphs are captured after the KV cache, out of the headroom."""
    if not semantics.subtracts_cudagraph_estimate:
        return False
    if gpu.platform == "rocm" and not semantics.cudagraph_estimate_on_rocm:
        return False
    return not mrv2 or semantics.mrv2_cudagraph_estimate


def graphs_set_aside(
    spec: ModelSpec, serving: ServingConfig, gpu: Gpu, semantics: VllmSemantics, mrv2: bool
) -> tuple[MemoryTerm, int]:
    """The CUDA-graph memory a version takes out of the KV budget (Worker.determine_available_memory's
    cudagraph_memory_estimate_applied), and the number of graphs capacity's form counts."""
    graphs, n_graphs = cuda_graph_term(spec, serving, gpu.sm100, capture_cost(gpu))
    if not graphs.bytes:
        return graphs, n_graphs
    if not graphs_in_budget(semantics, gpu, mrv2):
        would_be = f"capacity's estimate would be {graphs_captured_after_budget(spec, serving, gpu, mrv2):,} B ({graphs.kind})"
        if not semantics.subtracts_cudagraph_estimate:
            why = f"vLLM {semantics.name} sets no memory aside for CUDA graphs (they come out of the utilization headroom); {would_be}"
        elif gpu.platform == "rocm" and not semantics.cudagraph_estimate_on_rocm:
            why = f"vLLM {semantics.name} profiles CUDA graphs on CUDA only (current_platform.is_cuda()): no estimate on ROCm; {would_be}"
        else:
            why = f"vLLM {semantics.name}'s Model Runner V2 returns 0 from profile_cudagraph_memory: its graphs come out of the utilization headroom; {would_be}"
        return MemoryTerm(0, EXACT, why), n_graphs
    if not mrv2:
        return v1_cuda_graph_term(spec, serving, gpu.sm100, capture_cost(gpu))
    return graphs, n_graphs


def graphs_captured_after_budget(spec: ModelSpec, serving: ServingConfig, gpu: Gpu, mrv2: bool) -> int:
    """What the graphs cost when they are captured after the KV cache is sized, by the runner's own estimate form."""
    form = cuda_graph_term if mrv2 else v1_cuda_graph_term
    return form(spec, serving, gpu.sm100, capture_cost(gpu))[0].bytes


def lora_rules_of(semantics: VllmSemantics) -> LoraRules:
    """How `semantics`' vLLM allocates LoRA (capacity/vllm/lora_rules.py); BadInput where it is not modelled."""
    rules = LORA_RULES.get(semantics.name)
    if rules is None:
        raise BadInput(f"--enable-lora under vLLM's {semantics.name}: {NOT_MODELLED}; plan the V1 engine's release (--vllm-version 0.9 or later), or without --enable-lora")
    if semantics.release.startswith("0.8.") and not semantics.v1_by_env:  # arg_utils: LoRA falls back to V0 (0.9 does not)
        raise BadInput(
            f"--enable-lora under vLLM {semantics.release}: 0.8 serves LoRA on its V0 engine unless VLLM_USE_V1=1, whose LoRA capacity does not "
            "model; set VLLM_USE_V1=1 as the server will have it, or plan --vllm-version 0.9 or later"
        )
    return for_release(rules, release_tuple(semantics.release) if semantics.release else None)


def with_piecewise_graphs(full: MemoryTerm, estimate: GraphEstimate | None) -> MemoryTerm:
    """The profiler's FULL decode graphs (captured on transformers' modules) plus the PIECEWISE graphs, which it does
    not capture: capacity/memory/cuda_graphs.py's estimate of them."""
    if estimate is None or not estimate.piecewise_bytes:
        return full
    return MemoryTerm(
        full.bytes + estimate.piecewise_bytes,
        ESTIMATED,
        f"{full.method} ({full.kind}, FULL decode graphs) + {estimate.piecewise_bytes:,} B of PIECEWISE graphs (estimated: {estimate.how})",
    )


def serving_under(semantics: VllmSemantics, args: ServingArgs, spec: ModelSpec, gpu: Gpu) -> ServingConfig:
    """The knobs with the defaults of `semantics`' vLLM version: its utilization default, its batch defaults per GPU
    and usage context, and (V0) a whole max_model_len prompt per batch when chunked prefill is off."""
    args = semantics.serving_args(args)
    spec = semantics.model_spec(spec)
    base_batch = semantics.batch_defaults(gpu, args.usage_context)
    serving = resolve_serving(args, spec, gpu, base_batch)
    if semantics.whole_prompt_batches and args.max_num_batched_tokens is None:
        # V0 profiles a whole max_model_len prompt when chunked prefill is off (on by default above 32K tokens)
        tokens = semantics.v0_batched_tokens(
            serving.max_model_len,
            multimodal=bool(spec.modalities),
            sliding_window=any(layer.kind == "sliding_window" for layer in spec.layers),
            prefix_caching=bool(args.enable_prefix_caching),
        )
        serving = resolve_serving(replace(args, max_num_batched_tokens=tokens), spec, gpu, base_batch)
    floor = semantics.scheduler_multimodal_batched_tokens
    if floor and spec.modalities and args.max_num_batched_tokens is None and args.usage_context not in BATCH_DEFAULT_CONTEXTS:
        # SchedulerConfig.__post_init__ (0.8.5-0.11.0): max(tokens, 5120) for a multimodal model, then (0.9.2 on)
        # min(max_num_seqs x max_model_len, tokens)
        tokens = min(serving.max_num_seqs * serving.max_model_len, max(serving.max_num_batched_tokens, floor))
        serving = resolve_serving(replace(args, max_num_batched_tokens=tokens), spec, gpu, base_batch)
    return serving


def build_plan(
    source: ModelSource,
    spec: ModelSpec,
    gpu: Gpu,
    serving: ServingConfig,
    notes: tuple[str, ...] = (),
    profile: MemoryProfile | None = None,
    semantics: VllmSemantics = LATEST,
) -> Plan:
    """The plan under vLLM 0.33's rules, or under `semantics` (another version's, capacity.vllm.versions), with the
    `vllm serve` line that realises it: each re-plan the suggestion makes keeps the model, GPU, measurements,
    semantics and notes, and changes only the knobs its hazard's fix names."""

    def replan(plan: Plan, args: ServingArgs) -> Plan:
        return plan_without_suggestion(source, spec, gpu, serving_under(semantics, args, spec, gpu), notes, profile, semantics)

    plan = plan_without_suggestion(source, spec, gpu, serving, notes, profile, semantics)
    return replace(plan, suggestion=suggest(plan, replan))


def plan_without_suggestion(
    source: ModelSource,
    spec: ModelSpec,
    gpu: Gpu,
    serving: ServingConfig,
    notes: tuple[str, ...] = (),
    profile: MemoryProfile | None = None,
    semantics: VllmSemantics = LATEST,
) -> Plan:
    """The plan's figures and hazards (`build_plan` adds the suggestion)."""
    spec = semantics.model_spec(spec)  # the max_model_len this version derives
    budget: MultiModalBudget = build_budget(spec, serving, enable_cache=False)
    weights, n_params, per_rank = weights_term(spec, source, serving, gpu)
    loads = load_buffers_term(spec, source, serving, per_rank, semantics)
    mrv2 = semantics.runs_mrv2(spec.architecture, **runner_facts(spec, source, per_rank))
    sampler = sampler_form(gpu, semantics.sampler_warmup_pass)
    if semantics.engine == "V1" and not mrv2:
        sampler = v1_sampler_form(gpu, semantics)  # the V1 model runner's _dummy_sampler_run
    activations = activation_estimate(spec, budget, serving, sampler)
    lora_rules = lora_rules_of(semantics) if serving.lora is not None else None

    def logits_cost(columns: int) -> int:
        """before 0.12 the LoRA logits processor keeps vocab + extra columns: the sampler's rows are that much wider"""
        wide = replace(spec, decoder=replace(spec.decoder, vocab_size=spec.decoder.vocab_size + columns))
        return activation_estimate(wide, budget, serving, sampler).sampler_bytes - activations.sampler_bytes
    graphs, n_graphs = graphs_set_aside(spec, serving, gpu, semantics, mrv2)
    memory: dict[str, MemoryTerm] = {
        "weights": weights,
        "load_buffers": loads,
        "activation_peak": activation_term(activations),
        "encoder_cache": encoder_cache_term(spec, budget, serving),
        "non_torch": non_torch_term(),
        "cuda_graphs": graphs,
        "cuda_context": cuda_context_term(semantics.cublas_handles_before_snapshot),
        "collectives": collectives_term(serving, gpu, profile),
    }
    # graphs vLLM captures after sizing the KV cache, where it sets none aside (the headroom must hold them)
    in_budget = graphs_in_budget(semantics, gpu, mrv2)
    after_budget = 0 if in_budget else graphs_captured_after_budget(spec, serving, gpu, mrv2)
    if lora_rules is not None:  # --enable-lora: the LoRA terms (capacity/memory/lora.py); none otherwise
        lora = lora_memory(spec, source, serving, gpu.sm100, "MRV2" if mrv2 else "V1", lora_rules, semantics.name, logits_cost, capture_cost(gpu))
        memory.update(lora_terms(lora, serving.lora, spec.decoder.num_layers, semantics.name, in_budget))
        n_graphs += lora.extra_graphs
        after_budget += 0 if in_budget else lora.graph_bytes
    if profile is not None:
        memory.update(measured_terms(profile, memory, spec, serving, sampler, quantized=per_rank.quantization != "none"))
        if profile.cuda_graphs is not None and memory["cuda_graphs"].bytes:
            memory["cuda_graphs"] = with_piecewise_graphs(memory["cuda_graphs"], graph_estimate(spec, serving, gpu.sm100, "MRV2" if mrv2 else "V1", capture_cost(gpu)))
        if profile.fingerprint.device == "cuda" and memory["weights"].kind == MEASURED:  # the measured load holds the rounding
            memory["load_buffers"] = load_buffers_term(spec, source, serving, per_rank, semantics, rounding=False)
        # every profile (fake trace, CPU probe, GPU) ran transformers' tower (profilers/run.py): one scaling to vLLM's
        enc = profile.phase("encoder")
        dominates = enc is not None and enc.peak_above_start_bytes >= max(
            (p.peak_above_start_bytes for p in profile.phases if p.name not in ("weights", "encoder")), default=0
        )
        memory["activation_peak"] = vllm_encoder_activation(spec.family, memory["activation_peak"], dominates)
    # the cuBLAS handles on the side of the snapshot the version puts them (capacity/memory/cuda_context.py)
    memory["non_torch"], memory["cuda_context"] = handles_moved(memory["non_torch"], memory["cuda_context"], semantics.cublas_handles_before_snapshot)
    if semantics.v0_memory_profiling and memory["non_torch"].kind == ESTIMATED:
        memory["non_torch"] = v0_non_torch_term(profile is not None and bool(profile.uses_convolution))
    # unified memory (GB10, Jetson): vLLM's free figure is the system's, so its non-torch term holds host memory too
    memory["non_torch"] = with_host_memory(memory["non_torch"], host_memory_term(gpu, serving), free_memory_reading(gpu, semantics))
    placed = placement_of(serving, gpu)  # DP and nodes (capacity/planning/data_parallel.py); None at DP 1 without nodes
    if placed is not None:
        memory = with_data_parallel_terms(memory, spec, source, serving, gpu, placed)
    scratch = None
    if not serving.enforce_eager and serving.kv_cache_memory_bytes is None:
        scratch = cold_compile_scratch(spec, serving, gpu, semantics.benchmarks_combo_kernels)
        if serving.compile_cache == COLD and serving.pipeline_parallel_size == 1:  # at PP > 1 per stage (plan_stages)
            memory["activation_peak"] = cold_start_activation(memory["activation_peak"], memory["encoder_cache"], scratch)
    requested = requested_memory(gpu, serving.gpu_memory_utilization)
    window_batches = semantics.window_batches
    stages: tuple[StagePlan, ...] = ()
    if serving.pipeline_parallel_size > 1:  # each stage its own worker; the limiting stage's terms and KV budget below
        scaling = None if profile is None else rank_scaling(spec, serving, profile.measured_tensor_parallel_size, sampler)
        refuse_unplanned_stages(spec, serving, profile, semantics)
        window_batches = pipeline_window_batches(serving.pipeline_parallel_size, mrv2)
        stages = plan_stages(
            source, spec, gpu, serving, memory, phase_transients(profile, activations, scaling), requested, semantics,
            lambda stage_spec: graphs_set_aside(stage_spec, serving, gpu, semantics, mrv2)[0], window_batches, mrv2,
            cold=scratch if serving.compile_cache == COLD else None,
        )  # fmt: skip
        memory = dict(next(st for st in stages if st.limiting).memory)
    before_snapshot = memory["cuda_context"].bytes + memory["collectives"].bytes
    if semantics.communicators_in_non_kv and serving.tensor_parallel_size > 1:
        memory["non_torch"] = communicators_in_profile(memory["non_torch"], memory["collectives"], gpu, semantics.name)
        before_snapshot = memory["cuda_context"].bytes  # NCCL starts after that version's snapshot
    free_at_startup = gpu.total_memory_bytes - before_snapshot - gpu.used_by_others_bytes
    non_kv = sum(memory[k].bytes for k in NON_KV_TERMS if k in memory)
    if serving.kv_cache_memory_bytes is not None:
        available = serving.kv_cache_memory_bytes
        kv_term = MemoryTerm(available, EXACT, "--kv-cache-memory-bytes (profiling skipped, gpu_memory_utilization ignored)")
    else:
        available = requested - non_kv
        kinds = {memory[k].kind for k in NON_KV_TERMS if k in memory}
        kind = ESTIMATED if ESTIMATED in kinds else MEASURED if MEASURED in kinds else EXACT
        kv_term = MemoryTerm(max(available, 0), kind, "requested - (weights + activation peak + encoder cache + non-torch) - CUDA graphs")

    groups = kv_groups_for(spec, serving, gpu)
    if not groups:
        raise BadInput(f"{spec.name} has no attention layers that hold KV cache: nothing to plan")
    bpb = bytes_per_block(groups)
    if stages:  # vLLM get_kv_cache_configs: the limiting stage's groups (its own layers) and bytes per block
        limiting = next(st for st in stages if st.limiting)
        groups, bpb = list(limiting.kv.groups), limiting.kv.bytes_per_block
    num_blocks = max(available, 0) // bpb

    fit_len = max_model_len_that_fits(
        groups, bpb, serving, available, spec.derived_max_model_len if serving.auto_fit_max_model_len else serving.max_model_len, window_batches
    )
    if stages:  # each worker's fit check on its own projected groups: the shortest fit binds
        fit_len = min(st.max_model_len_that_fits for st in stages)
    if serving.auto_fit_max_model_len and 0 < fit_len < serving.max_model_len:
        notes += (f"auto-fit: max_model_len reduced from {serving.max_model_len} to {fit_len}",)
        serving = replace(serving, max_model_len=fit_len)
        budget = build_budget(spec, serving, enable_cache=False)

    ctx = block_context(serving, window_batches=window_batches)
    bt_len = block_table_max_len(spec, serving)
    bt_len_pre = block_table_max_len_pre_fix(spec, serving)
    dcp = serving.decode_context_parallel_size
    group_plans = tuple(
        GroupPlan(
            group=g,
            blocks_per_request_vllm=g.spec.blocks_per_request_vllm(ctx),
            blocks_per_request_actual=g.spec.blocks_per_request_actual(ctx, spec.encoder_tokens_per_request),
            block_table_width_blocks=g.spec.block_table_width(bt_len, dcp),
            block_table_width_blocks_pre_fix=g.spec.block_table_width(bt_len_pre, dcp),
        )
        for g in groups
    )
    kv = KVCachePlan(
        available_bytes=available,
        bytes_per_block=bpb,
        num_blocks=num_blocks,
        groups=group_plans,
        block_table_max_len=bt_len,
        block_table_max_len_pre_fix=bt_len_pre,
    )
    memory["kv_cache"] = replace(kv_term, bytes=num_blocks * bpb) if serving.kv_cache_memory_bytes is None else kv_term
    memory["block_tables"] = block_tables_term(groups, [g.block_table_width_blocks for g in group_plans], serving)

    vllm_conc = num_blocks / kv.blocks_per_request_vllm
    usable = max(num_blocks - 1, 0)  # block 0 is the null block
    actual_conc = usable / kv.blocks_per_request_actual
    concurrency = Concurrency(
        vllm_reported=vllm_conc,
        actual=actual_conc,
        actual_requests=usable // kv.blocks_per_request_actual,
        tokens_vllm_reported=int(vllm_conc * serving.max_model_len),
    )
    warmup = warmup_plan(
        spec,
        groups,
        num_speculative_tokens=serving.num_speculative_tokens,
        max_model_len=serving.max_model_len,
        max_num_seqs=serving.max_num_seqs,
        max_num_batched_tokens=serving.max_num_batched_tokens,
        num_blocks=num_blocks,
    )
    if spec.family.method_label:
        memory = {key: replace(term, method=f"{spec.family.method_label}: {term.method}") for key, term in memory.items()}
    plan = Plan(
        source=source,
        spec=spec,
        gpu=gpu,
        serving=serving,
        budget=budget,
        memory=memory,
        requested_memory_bytes=requested,
        free_at_startup_bytes=free_at_startup,
        kv=kv,
        concurrency=concurrency,
        warmup=warmup,
        max_model_len_that_fits=fit_len,
        parameter_count=n_params,
        cuda_graph_count=n_graphs,
        graphs_after_budget_bytes=after_budget,
        semantics=semantics,
        notes=notes,
        profile=profile,
        weights_per_rank=per_rank,
        ranks=rank_budgets(profile, memory, requested, spec, serving, sampler, per_rank.quantization != "none") if profile is not None and profile.ranks else (),
        cold_compile=scratch,
        placement=placed,
        moe=placed is not None and is_moe(spec, source),
        stages=stages,
    )
    return replace(plan, hazards=tuple(find_hazards(plan)))


def rank_budgets(
    profile: MemoryProfile,
    estimates: dict[str, MemoryTerm],
    requested: int,
    spec: ModelSpec,
    serving: ServingConfig,
    sampler: SamplerForm = SAMPLER_0_33,
    quantized: bool = False,
) -> tuple[RankBudget, ...]:
    """Every profiled rank's non-KV terms and the KV memory it leaves; vLLM 0.33 sizes the cache by the least."""
    out = []
    for rank in profile.ranks:
        terms = {**estimates, **measured_terms(rank, estimates, spec, serving, sampler, quantized)}
        non_kv = sum(terms[k].bytes for k in NON_KV_TERMS if k in terms)
        out.append(
            RankBudget(
                rank=rank.rank,
                weights_bytes=terms["weights"].bytes,
                activation_peak_bytes=terms["activation_peak"].bytes,
                encoder_cache_bytes=terms["encoder_cache"].bytes,
                non_torch_bytes=terms["non_torch"].bytes,
                cuda_graphs_bytes=terms["cuda_graphs"].bytes,
                communicator_bytes=rank.communicator_bytes,
                non_kv_bytes=non_kv,
                available_kv_bytes=requested - non_kv,
                deciding=rank.rank == profile.rank,
            )
        )
    return tuple(out)


def cuda_total_of_profiled_gpu(local: Gpu, profile: MemoryProfile) -> Gpu:
    """The local GPU with the CUDA total its profile recorded, when the profile was taken on a GPU of that name.

    vLLM requests gpu_memory_utilization x cudaMemGetInfo's total, which is 600+ MiB below NVML's (H200: 615 MiB);
    NVML's total would plan a pool that the device cannot hold (`verify --profile` at TP 2 ran 713,031 B over).
    """
    fp = profile.fingerprint
    if local.source != "nvml" or fp.device != "cuda" or fp.gpu_name != local.name:
        return local
    return replace(local, total_memory_bytes=fp.gpu_total_memory_bytes, source="cuda", provenance="cudaMemGetInfo total recorded in the profile (vLLM reads this total, not NVML's)")


def plan_for(
    model: str,
    args: ServingArgs,
    gpu_name: str | None = None,
    profile: MemoryProfile | None = None,
    *,
    gpu: Gpu | None = None,
    semantics: VllmSemantics = LATEST,
) -> Plan:
    """Resolve the model and GPU, apply vLLM's defaults, and plan (from a profile's measurements if given).

    `gpu`: a GPU already resolved (e.g. read from a vLLM log), instead of `gpu_name`. `semantics`: plan with another
    vLLM version's defaults and budget rules (capacity.vllm.versions) instead of 0.33's.
    """
    if semantics.release:  # a release named by --vllm-version: the knobs given must be flags it has
        require_flags(args, release_of(semantics), semantics.release)
    source, spec = load_model(model, args.revision, args.mm_processor_kwargs, args.hf_overrides)
    if profile is not None:
        from capacity.memory.measured_profile import require_profile_of

        require_profile_of(profile, source)
    gpu_note = None
    if gpu is None:
        gpu, gpu_note = resolve_gpu(node_gpu_name(args.node, gpu_name))
        if profile is not None and gpu_name is None:
            gpu = cuda_total_of_profiled_gpu(gpu, profile)
    serving = serving_under(semantics, args, spec, gpu)
    notes = tuple(n for n in (source.alias_note, gpu_note, nvidia_smi_total_caveat(gpu, serving.gpu_memory_utilization), total_setting_note(gpu)) if n)
    if semantics is not LATEST:
        notes += (
            f"planned with vLLM {semantics.release + ' (' + semantics.name + ' rules)' if semantics.release else semantics.name + ' semantics'}: "
            f"utilization default {semantics.default_gpu_memory_utilization}, "
            f"CUDA-graph estimate {'subtracted' if semantics.subtracts_cudagraph_estimate else 'not subtracted'} from the KV budget",
        )
    return build_plan(source, spec, gpu, serving, notes, profile, semantics)
