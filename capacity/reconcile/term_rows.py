"""`capacity reconcile`'s rows for the model, the memory budget and the non-KV memory terms: what vLLM printed of
each (model loading, consumed, non-torch, peak activation, encoder cache, CUDA graphs) beside capacity's term.
"""

from __future__ import annotations

import math

from capacity.memory.cuda_context import CUBLAS_HANDLES_BYTES, CUDA_CONTEXT_BYTES
from capacity.planning.plan import TERM_LABELS, Plan, loaded_bytes
from capacity.reconcile.log_inputs import is_local_path
from capacity.reconcile.rows import ReconcileRow, count_row, gib_row
from capacity.units import GiB
from capacity.vllm.log_facts import VllmLogFacts
from capacity.vllm.versions import VllmSemantics


def model_rows(facts: VllmLogFacts, plan: Plan) -> list[ReconcileRow]:
    rows: list[ReconcileRow] = []
    if facts.model is not None:
        names = {plan.source.name, plan.source.requested}
        local = is_local_path(facts.model)  # a folder on the serving machine: --model names what it holds
        same = local or facts.model in names or facts.model.rstrip("/").rsplit("/", 1)[-1] == plan.source.name.rsplit("/", 1)[-1]
        why = "the model vLLM's lines name"
        if local:
            why += f": a local folder ({facts.model}), planned as {plan.source.name}"
        elif not same:
            why += f": the log serves another model; run capacity reconcile with --model {facts.model}"
        rows.append(ReconcileRow("model", "model", facts.model, plan.source.name, "" if same else "different", same, why, "", facts.model, plan.source.name))
    length = facts.concurrency_max_model_len or facts.max_seq_len
    if length is not None:
        cap = plan.serving.max_model_len
        why = "the request length of vLLM's KV capacity line (max_model_len)"
        if length != cap:
            why += f": the run used --max-model-len {length}; plan with the same value, or the KV rows below compare different requests"
        rows.append(count_row("max_model_len", "max_model_len", length, cap, "tokens", why))
    logged = facts.effective_max_num_batched_tokens
    if logged is not None:
        planned = plan.serving.max_num_batched_tokens
        why = "the scheduler's batch, from vLLM's 'Chunked prefill is enabled with max_num_batched_tokens=N' line"
        if logged != planned:
            why += (
                f": the run used {logged}, given or defaulted otherwise than the plan's {planned} (the defaults follow the GPU, the vLLM "
                "version and how vLLM was started: --usage-context); plan with --max-num-batched-tokens "
                f"{logged} to compare the activation rows like with like"
            )
        rows.append(count_row("max_num_batched_tokens", "max_num_batched_tokens", logged, planned, "tokens", why))
    return rows


def budget_rows(facts: VllmLogFacts, plan: Plan) -> list[ReconcileRow]:
    rows: list[ReconcileRow] = []
    fm = facts.free_memory
    s = plan.serving
    total = plan.gpu.total_memory_bytes
    if fm is not None:
        rows.append(
            gib_row(
                "gpu_total_memory",
                "GPU total memory",
                fm.total_gib,
                total,
                f"cudaMemGetInfo's total at vLLM's startup; capacity: {plan.gpu.name} ({plan.gpu.provenance or plan.gpu.source}).",
            )
        )
    if fm is not None and fm.gpu_memory_utilization is not None:
        same_u = math.isclose(fm.gpu_memory_utilization, s.gpu_memory_utilization)
        rows.append(
            ReconcileRow(
                "gpu_memory_utilization",
                "gpu_memory_utilization",
                f"{fm.gpu_memory_utilization}",
                f"{s.gpu_memory_utilization}",
                "" if same_u else f"{s.gpu_memory_utilization - fm.gpu_memory_utilization:+.4g}",
                same_u,
                "vLLM's default was 0.9 up to 0.19 and is 0.92 from 0.20 (capacity.vllm.versions)"
                + ("" if same_u else f"; plan with --gpu-memory-utilization {fm.gpu_memory_utilization} to compare the memory rows like with like"),
                "",
                fm.gpu_memory_utilization,
                s.gpu_memory_utilization,
            )
        )
    if facts.requested_gib is not None:
        rows.append(
            gib_row(
                "requested_memory",
                "requested memory",
                facts.requested_gib,
                plan.requested_memory_bytes,
                f"ceil(total x gpu_memory_utilization); capacity: ceil({total:,} x {s.gpu_memory_utilization}).",
            )
        )
    free_gib = fm.free_gib if fm is not None else facts.initial_free_gib
    if free_gib is not None:
        others = plan.gpu.used_by_others_bytes
        rows.append(
            gib_row(
                "free_at_startup",
                "free memory at startup",
                free_gib,
                plan.free_at_startup_bytes,
                f"free memory at vLLM's baseline snapshot (after the CUDA context, cuBLAS and NCCL); capacity: total - {plan.memory['cuda_context'].bytes:,} B of CUDA context "
                f"({plan.memory['cuda_context'].kind}) - {others:,} B held by other processes.",
            )
        )
    if fm is not None and fm.free_minus_requested_bytes is not None:
        cap = plan.free_at_startup_bytes - plan.requested_memory_bytes
        why = (
            "exact: vLLM's two --kv-cache-memory suggestions subtract the same non-KV memory + 150 MiB from the free and from the requested memory, "
            "so they differ by free - requested"
        )
        if cap != fm.free_minus_requested_bytes:
            ctx = plan.memory["cuda_context"].bytes
            if fm.gpu_memory_utilization is not None and math.isclose(fm.gpu_memory_utilization, s.gpu_memory_utilization):
                why += f"; with the same requested memory, the CUDA context at vLLM's start was {ctx - (cap - fm.free_minus_requested_bytes):,} B, capacity's constant {ctx:,} B"
                if ctx in (CUDA_CONTEXT_BYTES, CUDA_CONTEXT_BYTES + CUBLAS_HANDLES_BYTES):
                    why += " (measured on an H200)"
            else:
                why += f"; the requested memories differ (utilization {fm.gpu_memory_utilization} in the log, {s.gpu_memory_utilization} in the plan)"
        rows.append(count_row("free_minus_requested", "free - requested at startup", fm.free_minus_requested_bytes, cap, "B", why))
    return rows


def term_rows(facts: VllmLogFacts, plan: Plan, sem: VllmSemantics | None) -> list[ReconcileRow]:
    rows: list[ReconcileRow] = []
    mem = plan.memory
    w = mem["weights"]
    loads = mem.get("load_buffers")
    if facts.model_loading_gib is not None:
        rows.append(
            gib_row(
                "model_loading",
                "model loading (weights + load buffers)",
                facts.model_loading_gib,
                loaded_bytes(plan),
                f"vLLM: growth of torch's allocated memory across the load ('Model loading took', model_memory_usage); capacity: {w.method} ({w.kind})"
                + (f" + {loads.method} ({loads.kind})" if loads is not None else "")
                + "".join(f" + {mem[k].bytes:,} B of {TERM_LABELS[k]} ({mem[k].kind})" for k in ("lora_buffers", "lora_extra_vocabulary") if k in mem)
                + ". A difference is memory the model allocates besides its parameters that capacity does not model, or parameters the two builds do not share.",
                decimals=facts.model_loading_gib_decimals,
            )
        )
    fm = facts.free_memory
    if fm is not None and not fm.startup_error:
        nt = mem["non_torch"]
        if fm.consumed_gib is not None:
            rows.append(
                gib_row(
                    "consumed",
                    "consumed (weights + non-torch)",
                    fm.consumed_gib,
                    w.bytes + nt.bytes,
                    "vLLM 0.33: the drop in free memory (mem_get_info) from the startup snapshot to the end of profile_run, i.e. weights, "
                    f"non-torch allocations and the allocator's reserve; capacity: weights {w.bytes:,} B ({w.kind}) + non-torch {nt.bytes:,} B ({nt.kind}).",
                )
            )
        if fm.non_torch_gib is not None:
            why = f"vLLM 0.8-0.20: growth of (used - torch reserved) since the startup snapshot; capacity: {nt.method} ({nt.kind})."
            rows.append(gib_row("non_torch", "non-torch memory", fm.non_torch_gib, nt.bytes, why))
        if fm.peak_activation_gib is not None:
            act, enc, cg = mem["activation_peak"], mem["encoder_cache"], mem["cuda_graphs"]
            if fm.consumed_gib is not None:
                cap = act.bytes + enc.bytes + cg.bytes
                why = (
                    "vLLM 0.33: profile_run's torch peak above what stays allocated (the encoder outputs held during the decoder pass included) "
                    f"+ the CUDA-graph estimate it subtracts; capacity: activation peak {act.bytes:,} B ({act.kind}) + encoder cache {enc.bytes:,} B ({enc.kind}) "
                    f"+ CUDA graphs {cg.bytes:,} B ({cg.kind})."
                )
            else:
                cap = act.bytes + enc.bytes
                why = (
                    "vLLM 0.11-0.20: growth of torch's peak allocation during profile_run (encoder outputs included); "
                    f"capacity: activation peak {act.bytes:,} B ({act.kind}) + encoder cache {enc.bytes:,} B ({enc.kind})."
                )
            rows.append(gib_row("peak_activation", "peak activation", fm.peak_activation_gib, cap, why))
    b = plan.budget
    if facts.encoder_cache_budget_tokens is not None:
        largest = max(b.max_tokens_per_item.values(), default=0)
        mnbt = plan.serving.max_num_batched_tokens
        why = f"min(encoder compute budget, encoder cache size) = max(max_num_batched_tokens {mnbt:,}, the largest item {largest:,}) in vLLM 0.15+ and capacity"
        if facts.encoder_cache_budget_tokens != b.encoder_budget and facts.encoder_cache_budget_tokens == largest and plan.spec.is_encoder_decoder:
            why += f"; vLLM 0.11 set max_num_encoder_input_tokens to the encoder length ({largest:,}) for encoder-decoder models, so its budget held one item"
        elif facts.encoder_cache_budget_tokens != b.encoder_budget:
            why += "; a different budget means different knobs (max_num_batched_tokens, --limit-mm-per-prompt) or another model"
        rows.append(count_row("encoder_cache_budget", "encoder cache budget", facts.encoder_cache_budget_tokens, b.encoder_budget, "tokens", why))
    if facts.encoder_profile_items is not None:
        modality = b.modality_with_max_tokens or "-"
        t = b.profile_tokens_per_item
        same = facts.encoder_profile_items == b.profile_items and facts.encoder_profile_modality == modality
        why = (
            f"items profile_run encodes and holds during the decoder pass: min(budget // {t:,} tokens per item, max_num_seqs"
            + (f" capped at max_num_batched_tokens // {t:,}" if not plan.serving.enable_chunked_prefill else "")
            + f" x items per prompt); capacity's encoder-cache term holds {b.profile_items} x {t:,} tokens"
        )
        rows.append(
            ReconcileRow(
                "encoder_profile_items",
                "encoder profile items",
                f"{facts.encoder_profile_items} {facts.encoder_profile_modality}",
                f"{b.profile_items} {modality}",
                f"{b.profile_items - facts.encoder_profile_items:+}",
                same,
                why,
                "items",
                facts.encoder_profile_items,
                b.profile_items,
            )
        )
    cg = mem["cuda_graphs"]
    estimate = facts.cudagraph_estimate_gib(plan.gpu.total_memory_bytes / GiB)
    if estimate is not None:
        interval = facts.cudagraph_estimate_interval_bytes(plan.gpu.total_memory_bytes)
        source = (
            "printed ('Estimated CUDA graph memory')"
            if interval is None
            else "from its utilization line: (current - equivalent utilization) x the GPU total, +-0.00005 x total"
        )
        taken = "subtracted from the KV budget" if facts.cudagraph_estimate_subtracted is not False else "printed but not subtracted (the estimate was off)"
        rows.append(
            gib_row(
                "cuda_graphs_estimate",
                "CUDA graphs (estimate)",
                estimate,
                cg.bytes,
                f"vLLM 0.19+: graphs captured before the KV cache is sized, {taken}; vLLM's figure {source}; "
                f"capacity: {cg.bytes:,} B ({cg.kind}): {cg.method}.",
                decimals=3 if interval is not None else 2,
                interval=interval,
            )
        )
    actual = facts.cudagraph_actual_gib if facts.cudagraph_actual_gib is not None else facts.graph_capture_gib
    if actual is not None:
        why = (
            "vLLM: free memory taken by the real capture, after the KV cache is allocated; vLLM subtracts the estimate, not this, "
            "so an actual above the estimate comes out of the (1 - gpu_memory_utilization) headroom"
        )
        if sem is not None and not sem.subtracts_cudagraph_estimate:
            why = f"vLLM {sem.name} set no memory aside for CUDA graphs: the capture came out of the (1 - gpu_memory_utilization) headroom"
        rows.append(gib_row("cuda_graphs_actual", "CUDA graphs (actual capture)", actual, cg.bytes, why + f"; capacity: {cg.bytes:,} B ({cg.kind}): {cg.method}."))
    return rows

