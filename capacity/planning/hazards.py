"""Hazards: named findings with a severity and a one-line fix.

`error` means vLLM 0.33 would refuse to start on these knobs, or the deployment would run out of
memory; it makes the verdict does_not_fit. `warning` and `info` do not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from capacity.gpu.windows import DESKTOP_IDLE_BYTES, DESKTOP_IDLE_REFERENCE, under_wsl
from capacity.kv.specs import MambaSpec, kv_heads_per_rank
from capacity.memory.term import ESTIMATED
from capacity.planning.kv_groups import max_model_len_that_fits
from capacity.planning.plan import ERROR, INFO, WARNING, Hazard
from capacity.planning.profile_hazards import profile_provenance
from capacity.serving.config import DEFAULT_LIMIT_PER_PROMPT
from capacity.units import MiB, gib
from capacity.vllm.compile_lines import COLD
from capacity.vllm.serve_flags import block_size_choices, release_of
from capacity.vllm.versions import LATEST, release_tuple

if TYPE_CHECKING:
    from capacity.planning.plan import Plan

Check = Callable[["Plan"], Iterator[Hazard]]
CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


def find_hazards(plan: Plan) -> list[Hazard]:
    found: list[Hazard] = []
    for fn in CHECKS:
        found.extend(fn(plan))
    order = {ERROR: 0, WARNING: 1, INFO: 2}
    return sorted(found, key=lambda h: order[h.severity])


@check
def vllm_support(plan: Plan) -> Iterator[Hazard]:
    support = plan.spec.vllm_support
    through = release_tuple(support.served_through) if support.served_through else None
    if through is not None and release_of(plan.semantics) <= through:
        return  # the release planned still serves it in its own registry
    if support.status in ("removed", "unsupported"):
        yield Hazard("model_not_served_by_vllm", ERROR, support.detail, "serve it with a vLLM release or plugin that supports it; the figures show what it would need")
    elif support.status == "plugin":
        yield Hazard("model_needs_plugin", WARNING, support.detail, "pip install the plugin next to vLLM 0.33; its memory behaviour is assumed to follow vLLM's")


@check
def max_model_len_above_derived(plan: Plan) -> Iterator[Hazard]:
    s, spec = plan.serving, plan.spec
    if s.max_model_len > spec.derived_max_model_len:
        yield Hazard(
            "max_model_len_above_model_limit",
            ERROR,
            f"--max-model-len {s.max_model_len} exceeds the derived max_model_len ({spec.max_len_key}={spec.derived_max_model_len}); vLLM raises ValueError",
            f"use --max-model-len {spec.derived_max_model_len} or less (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 overrides, with out-of-bounds risk)",
            (("max_model_len", spec.derived_max_model_len),),
        )


@check
def batched_tokens_vs_lengths(plan: Plan) -> Iterator[Hazard]:
    s = plan.serving
    if not s.enable_chunked_prefill and s.max_num_batched_tokens < s.max_model_len:
        yield Hazard(
            "batched_tokens_below_max_model_len",
            ERROR,
            f"max_num_batched_tokens ({s.max_num_batched_tokens}) is smaller than max_model_len ({s.max_model_len}) with chunked prefill off (encoder-decoder); vLLM raises ValueError",
            f"use --max-num-batched-tokens {s.max_model_len} or more, or a smaller --max-model-len",
            (("max_num_batched_tokens", s.max_model_len),),
        )
    if s.max_num_batched_tokens < s.max_num_seqs:
        yield Hazard(
            "batched_tokens_below_max_num_seqs",
            ERROR,
            f"max_num_batched_tokens ({s.max_num_batched_tokens}) must be >= max_num_seqs ({s.max_num_seqs}); vLLM raises ValueError",
            f"use --max-num-batched-tokens {s.max_num_seqs} or more, or --max-num-seqs {s.max_num_batched_tokens}",
            (("max_num_batched_tokens", s.max_num_seqs),),
        )
    if s.num_speculative_tokens and s.max_num_batched_tokens <= s.num_speculative_tokens:
        yield Hazard(
            "batched_tokens_below_lookahead",
            ERROR,
            f"max_num_batched_tokens ({s.max_num_batched_tokens}) leaves no slot beside {s.num_speculative_tokens} lookahead tokens; vLLM raises ValueError",
            f"use --max-num-batched-tokens {s.num_speculative_tokens + 1} or more",
            (("max_num_batched_tokens", s.num_speculative_tokens + 1),),
        )
    if plan.budget.chunked_mm_input_error:
        need = max(plan.budget.max_tokens_per_item.values())
        yield Hazard(
            "encoder_item_exceeds_batched_tokens",
            ERROR,
            plan.budget.chunked_mm_input_error + " (vLLM raises ValueError at startup)",
            f"use --max-num-batched-tokens {max(need, s.max_model_len)} or more",
            (("max_num_batched_tokens", max(need, s.max_model_len)),),
        )


@check
def silent_changes(plan: Plan) -> Iterator[Hazard]:
    """What vLLM 0.33 changes or refuses without a word at startup: an `auto` knob's value, a per-prompt item limit the
    budget lowers, an item longer than a decoder prompt may be."""
    s, b = plan.serving, plan.budget
    if s.auto_fit_max_model_len:
        reduced = s.max_model_len < plan.spec.derived_max_model_len
        yield Hazard(
            "max_model_len_auto",
            WARNING if reduced else INFO,
            f"--max-model-len auto became {s.max_model_len:,}: "
            + (
                f"the model's {plan.spec.derived_max_model_len:,} did not fit, so vLLM fits the longest length one request's KV cache holds "
                "(_estimate_max_model_len_from_groups); another GPU, utilization or knob gives another length"
                if reduced
                else f"the model's own limit ({plan.spec.max_len_key}), which fits"
            ),
            f"pin it: --max-model-len {s.max_model_len}",
            (("max_model_len", s.max_model_len),),
        )
    for m in plan.spec.modalities:
        given = s.limit_mm_per_prompt.get(m.name)
        budgeted = b.max_items_per_prompt.get(m.name)
        if given is None or budgeted is None or given in (0, DEFAULT_LIMIT_PER_PROMPT) or budgeted >= given:
            continue
        tokens = b.max_tokens_per_item[m.name]
        why = (
            f"the model takes {m.supported_limit} per prompt"
            if m.supported_limit is not None and m.supported_limit < given
            else f"max_model_len {s.max_model_len:,} // {tokens:,} tokens per {m.name} = {s.max_model_len // tokens}, at least 1"
        )
        yield Hazard(
            "items_per_prompt_lowered",
            WARNING,
            f"--limit-mm-per-prompt {m.name}={given}, but vLLM budgets {budgeted} {m.name} per prompt ({why}: MultiModalBudget._get_max_items)",
            f"use --limit-mm-per-prompt {m.name}={budgeted}, or a --max-model-len that holds {given} x {tokens:,} tokens",
            (("limit_mm_per_prompt", {**{k: v for k, v in s.limit_mm_per_prompt.items() if v != DEFAULT_LIMIT_PER_PROMPT}, m.name: budgeted}),),
        )
    if plan.spec.is_encoder_decoder:  # the encoder's tokens are not in the decoder's prompt
        return
    longer = {name: tokens for name, tokens in b.max_tokens_per_item.items() if tokens > s.max_model_len}
    if longer:
        items = ", ".join(f"{name} {tokens:,}" for name, tokens in longer.items())
        yield Hazard(
            "item_longer_than_max_model_len",
            WARNING,
            f"the largest item is longer than max_model_len {s.max_model_len:,} tokens ({items}): vLLM profiles it, then refuses any "
            "prompt that carries one (the prompt, placeholders included, is longer than the maximum model length)",
            f"use --max-model-len {max(longer.values())} or more, or smaller items (--mm-processor-kwargs, where the model takes a size)",
        )


@check
def parallelism(plan: Plan) -> Iterator[Hazard]:
    s, spec = plan.serving, plan.spec
    tp, dcp = s.tensor_parallel_size, s.decode_context_parallel_size
    if spec.num_attention_heads % tp:
        yield Hazard(
            "tp_does_not_divide_heads",
            ERROR,
            f"{spec.num_attention_heads} attention heads are not divisible by --tensor-parallel-size {tp}; vLLM raises ValueError",
            "pick a tensor-parallel size that divides the head count",
        )
    state = list(dict.fromkeys(part for layer in spec.layers for part in layer.tp_indivisible(tp)))
    if state:
        yield Hazard(
            "tp_does_not_divide_state_heads",
            ERROR,
            f"{', '.join(state)} not divisible by --tensor-parallel-size {tp}; vLLM asserts it at model construction "
            "(Mamba / linear-attention layers; the state figures are the largest rank's share)",
            "pick a tensor-parallel size that divides them",
        )
    heads = [h for h in (layer.kv_heads() for layer in spec.layers) if h]
    if dcp > 1 and heads:
        kv_heads = max(heads)
        problems = []
        if tp % dcp:
            problems.append(f"tp_size={tp} must be divisible by dcp_size={dcp}")
        if tp <= kv_heads:
            problems.append(f"DCP needs --tensor-parallel-size ({tp}) above the model's {kv_heads} KV heads")
        elif dcp > tp // kv_heads:
            problems.append(f"dcp ({dcp}) exceeds tp // kv_heads ({tp // kv_heads})")
        if not all(layer.supports_decode_context_parallel for layer in spec.layers):
            problems.append("DCP does not support sliding-window layers")
        if problems:
            yield Hazard("dcp_invalid", ERROR, "; ".join(problems) + " (vLLM refuses)", "drop --decode-context-parallel-size or change TP", (("decode_context_parallel_size", 1),))
    if tp > 1 and heads and kv_heads_per_rank(min(heads), tp) == 1 and min(heads) < tp:
        yield Hazard("kv_heads_replicated", INFO, f"TP {tp} exceeds the KV heads: each rank keeps 1 replicated KV head", "expected; the KV cost per rank stops shrinking")


@check
def kv_dtype(plan: Plan) -> Iterator[Hazard]:
    s = plan.serving
    if s.kv_cache_dtype in ("float16", "bfloat16") and s.kv_cache_dtype != s.dtype:
        yield Hazard(
            "kv_cache_dtype_mismatch",
            ERROR,
            f'kv_cache_dtype="{s.kv_cache_dtype}" is incompatible with dtype="{s.dtype}"; vLLM raises ValueError',
            f"use --kv-cache-dtype auto or {s.dtype}",
            (("kv_cache_dtype", "auto"),),
        )


# vLLM 0.33 on CUDA picks an attention backend the block size suits (CudaPlatform.get_valid_backends ->
# AttentionBackend.validate_configuration -> supports_block_size). For the (non-MLA) attention of every family
# capacity models, each candidate takes multiples of 16 only: FLASH_ATTN (get_supported_kernel_block_sizes
# [MultipleOf(16)], or a larger fixed size for its FA4 kernels), FLASHINFER ([16, 32, 64], checked as
# divisors), TRITON_ATTN (supports_block_size: block_size % 16 == 0), FLEX_ATTENTION ([MultipleOf(16)]);
# TURBOQUANT takes only its own KV dtypes. No valid backend: ValueError "No valid attention backend found".
KERNEL_BLOCK_MULTIPLE = 16


def supported_block_size(block_size: int) -> int:
    """The multiple of 16 nearest a block size no CUDA backend takes (16 at the least)."""
    return KERNEL_BLOCK_MULTIPLE * max(1, round(block_size / KERNEL_BLOCK_MULTIPLE))


@check
def block_size(plan: Plan) -> Iterator[Hazard]:
    bs = plan.serving.block_size
    release = release_of(plan.semantics)
    dated, choices = block_size_choices(release)
    name = plan.semantics.release or plan.semantics.name
    if choices is not None and bs not in choices:
        nearest = min(choices, key=lambda c: (abs(c - bs), c))
        yield Hazard(
            "block_size_unsupported",
            ERROR,
            f"--block-size {bs} is not one of vLLM {name}'s choices ({', '.join(map(str, choices))}: capacity.vllm.serve_flags); vLLM refuses the argument",
            f"use --block-size {nearest}, or leave it to vLLM's default 16",
            (("block_size", nearest),),
        )
        return
    if not dated and bs != 16:
        yield Hazard(
            "block_size_not_checked",
            WARNING,
            f"--block-size {bs}: which block sizes vLLM {name} takes was not read (capacity.vllm.serve_flags.BLOCK_SIZE_CHOICES)",
            "check `vllm serve --help` of that release, or use the default 16",
        )
        return
    if choices is not None:  # an older release's list: its backends' own limits were not read
        return
    if bs % KERNEL_BLOCK_MULTIPLE:
        yield Hazard(
            "block_size_unsupported",
            ERROR,
            f"--block-size {bs} is not a multiple of {KERNEL_BLOCK_MULTIPLE}: none of vLLM 0.33's CUDA attention backends takes it "
            "(FLASH_ATTN, FLASHINFER, TRITON_ATTN and FLEX_ATTENTION accept multiples of 16: AttentionBackend.supports_block_size); "
            "vLLM raises ValueError 'No valid attention backend found'",
            f"use --block-size {supported_block_size(bs)} (allowed: 16, 32, 48, 64, ... any multiple of 16), or leave it to vLLM's default 16",
            (("block_size", supported_block_size(bs)),),
        )


@check
def state_outgrows_page(plan: Plan) -> Iterator[Hazard]:
    """Platform._align_hybrid_block_size pads Mamba pages to the attention page it sized for the model class's state;
    a layer whose own state is larger (LFM2's conv state with speculative slots) trips MambaSpec's assert."""
    over = [g.group.spec for g in plan.kv.groups if isinstance(g.group.spec, MambaSpec) and g.group.spec.overflows_page]
    if not over:
        return
    state, page = sum(over[0].state_bytes), over[0].page_size_bytes
    attention = [g.group.spec for g in plan.kv.groups if not isinstance(g.group.spec, MambaSpec)]
    per_token = attention[0].page_size_bytes // attention[0].block_size if attention else 0
    block = KERNEL_BLOCK_MULTIPLE * -(-state // (KERNEL_BLOCK_MULTIPLE * per_token)) if per_token else 0
    yield Hazard(
        "mamba_state_outgrows_page",
        ERROR,
        f"a state layer keeps {state:,} B per request ({plan.serving.num_speculative_tokens} speculative tokens included) but vLLM "
        f"padded its page to {page:,} B, the attention page it sized for the model class's state without the speculative slots "
        "(get_mamba_state_shape_from_config); vLLM raises AssertionError in MambaSpec.page_size_bytes at startup",
        f"use fewer --num-speculative-tokens, or --block-size {block} (an attention page that holds the state)" if block else "use fewer --num-speculative-tokens",
        (("block_size", block),) if block else (),
    )


def utilization_within(plan: Plan, limit_bytes: int) -> float:
    """The largest --gpu-memory-utilization, to 2 decimals, whose ceil(total x utilization) stays within `limit_bytes`."""
    return math.floor(limit_bytes / plan.gpu.total_memory_bytes * 100) / 100


def utilization_that_fits(plan: Plan) -> float:
    """The largest --gpu-memory-utilization whose request stays within the free bytes."""
    return utilization_within(plan, plan.free_at_startup_bytes)


def batched_tokens_floor(plan: Plan) -> int:
    """The least --max-num-batched-tokens vLLM 0.33 starts with under the other knobs: max_num_seqs
    (SchedulerConfig._verify_args), max_model_len with chunked prefill off, the largest encoder item with chunked
    multimodal input off (MultiModalBudget)."""
    s = plan.serving
    floor = s.max_num_seqs
    if not s.enable_chunked_prefill:
        floor = max(floor, s.max_model_len)
    if s.disable_chunked_mm_input and plan.budget.max_tokens_per_item:
        floor = max(floor, max(plan.budget.max_tokens_per_item.values()))
    return floor


def memory_levers(plan: Plan, *, sized_by_batch: str = "") -> str:
    """The knobs that would give the KV cache more room, leaving out one already at its limit: raising
    --gpu-memory-utilization (not past what is free), lowering --max-num-batched-tokens (not below its floor)."""
    s, levers = plan.serving, []
    if s.kv_cache_memory_bytes is None and s.gpu_memory_utilization < utilization_that_fits(plan):
        levers.append(f"raise --gpu-memory-utilization (up to {utilization_that_fits(plan):.2f})")
    floor = batched_tokens_floor(plan)
    if s.max_num_batched_tokens > floor:
        levers.append(f"lower --max-num-batched-tokens (down to {floor}{sized_by_batch})")
    return ", ".join(levers)


def pcie_nccl_bytes(plan: Plan) -> int:
    """The collectives the free memory at startup was lowered by when they are the NVLink-measured constant on a GPU not
    known to be NVLinked (capacity/memory/collectives.py): their size over PCIe is not measured, and public PCIe starts
    held less (two RTX 4090s at TP 2 under 0.28.0: 0.60 and 0.82 GiB in all at startup, CUDA context included)."""
    collectives = plan.memory["collectives"]
    if plan.gpu.nvlink or collectives.kind != ESTIMATED:
        return 0
    before_snapshot = plan.gpu.total_memory_bytes - plan.gpu.used_by_others_bytes - plan.free_at_startup_bytes
    return min(collectives.bytes, max(before_snapshot - plan.memory["cuda_context"].bytes, 0))


@check
def memory_at_startup(plan: Plan) -> Iterator[Hazard]:
    s = plan.serving
    if s.kv_cache_memory_bytes is None and plan.requested_memory_bytes > plan.free_at_startup_bytes:
        # floor to 2 decimals: ceil(total x utilization) then stays within the free bytes
        fitting = utilization_that_fits(plan)
        nccl = pcie_nccl_bytes(plan)
        yield Hazard(
            "requested_exceeds_free",
            WARNING if plan.requested_memory_bytes <= plan.free_at_startup_bytes + nccl else ERROR,
            f"gpu_memory_utilization {s.gpu_memory_utilization} asks for {gib(plan.requested_memory_bytes)} but about {gib(plan.free_at_startup_bytes)} is free after the CUDA context"
            + (f" and {gib(plan.gpu.used_by_others_bytes)} held by other processes" if plan.gpu.used_by_others_bytes else "")
            + (
                f" and {gib(nccl)} of NCCL's communicator as measured over NVLink (over PCIe it is smaller and not measured, so vLLM may start)"
                if nccl and plan.requested_memory_bytes <= plan.free_at_startup_bytes + nccl
                else ""
            ),
            f"lower --gpu-memory-utilization to {fitting:.2f} or less",
            (("gpu_memory_utilization", fitting),) if fitting > 0 else (),
        )
    if plan.kv.available_bytes <= 0:
        yield Hazard(
            "no_kv_cache_memory",
            ERROR,
            f"nothing is left for the KV cache: non-KV memory {gib(plan.non_kv_bytes)} exceeds the requested {gib(plan.requested_memory_bytes)}; vLLM raises 'No available memory for the cache blocks'",
            ", ".join(filter(None, [memory_levers(plan), "use a larger GPU or more tensor parallelism"])),
        )
        return
    if s.kv_cache_memory_bytes is not None:
        total_use = s.kv_cache_memory_bytes + plan.non_kv_bytes + plan.memory["block_tables"].bytes
        if total_use > plan.free_at_startup_bytes:
            room = max(plan.free_at_startup_bytes - plan.non_kv_bytes - plan.memory["block_tables"].bytes, 0)
            yield Hazard(
                "kv_cache_memory_bytes_oom",
                ERROR,
                f"--kv-cache-memory-bytes {gib(s.kv_cache_memory_bytes)} plus {gib(plan.non_kv_bytes)} of non-KV memory exceeds the ~{gib(plan.free_at_startup_bytes)} free: out of memory when the cache is allocated",
                f"use --kv-cache-memory-bytes {room} or less",
                (("kv_cache_memory_bytes", room),) if room > 0 else (),
            )
    needed = plan.kv.needed_for_one_request_bytes
    check_memory = plan.kv.available_bytes - plan.kv.bytes_per_block
    if needed > check_memory:
        fits = plan.max_model_len_that_fits
        estimate = f" Based on the available memory, the estimated maximum model length is {fits}." if fits else ""
        yield Hazard(
            "no_room_for_one_request",
            ERROR,
            f"one request at max_model_len {s.max_model_len} needs {gib(needed)} of KV cache, more than the {gib(check_memory)} available.{estimate}",
            f"use --max-model-len {fits}"
            if fits
            else memory_levers(plan, sized_by_batch="; cross-attention and sliding windows size by it") or "use a larger GPU or more tensor parallelism",
            (("max_model_len", fits),) if fits else (),
        )


# Terms vLLM frees after its memory profile: the activation peak, the profiled encoder outputs, LoRA's shrink buffer
TRANSIENT_TERMS = ("activation_peak", "encoder_cache", "lora_activations")
# envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, default 0: read in the 0.18.0 and 0.19.0 wheels (absent from 0.16.0
# and 0.17.0; default 1 from 0.20.0): set, the V1 runner subtracts its graph estimate from the KV budget
GRAPH_ESTIMATE_OPT_IN = ((0, 18, 0), (0, 20, 0))


def room_after_kv_cache(plan: Plan) -> int:
    """What is free once the KV cache is allocated: the free bytes at vLLM's snapshot less what the process then holds
    (its non-KV memory without the profile's transients, the KV blocks, the block tables)."""
    transient = sum(plan.memory[k].bytes for k in TRANSIENT_TERMS if k in plan.memory)
    held = plan.non_kv_bytes - transient + plan.kv.num_blocks * plan.kv.bytes_per_block + plan.memory["block_tables"].bytes
    return plan.free_at_startup_bytes - held


@check
def graph_capture_oom(plan: Plan) -> Iterator[Hazard]:
    """Where the version sizes the KV cache without setting CUDA-graph memory aside, the graphs are captured in what is
    left (GPUModelRunner.capture_model after initialize_kv_cache): more than that is a CUDA OOM at capture."""
    s, graphs = plan.serving, plan.graphs_after_budget_bytes
    if not graphs or s.pipeline_parallel_size > 1 or plan.gpu.unified_memory or plan.kv.available_bytes <= 0:
        return
    if s.kv_cache_memory_bytes is None and plan.requested_memory_bytes > plan.free_at_startup_bytes:
        return  # vLLM refuses before it sizes anything (requested_exceeds_free)
    room = room_after_kv_cache(plan)
    if graphs <= room:
        return
    short = graphs - room
    fitting = 0.0 if s.kv_cache_memory_bytes is not None else utilization_within(plan, plan.requested_memory_bytes - short)
    lower = f"lower --gpu-memory-utilization to {fitting:.2f}, or " if fitting > 0 else ""
    opt_in = GRAPH_ESTIMATE_OPT_IN[0] <= release_of(plan.semantics) < GRAPH_ESTIMATE_OPT_IN[1] and plan.semantics.release != ""
    env = ", or set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (this release then sets its estimate aside)" if opt_in else ""
    yield Hazard(
        "graph_capture_oom",
        ERROR,
        f"vLLM {plan.semantics.name} captures its CUDA graphs after sizing the KV cache and sets no memory aside for them: they need about "
        f"{gib(graphs)} (estimated), but about {gib(max(room, 0))} is left once the KV cache is allocated: CUDA out of memory at graph capture",
        f"{lower}pass --enforce-eager (no graphs){env}",
        (("gpu_memory_utilization", fitting),) if fitting > 0 else (("enforce_eager", True),),
    )


@check
def windows_desktop_memory(plan: Plan) -> Iterator[Hazard]:
    """Under WSL2 the desktop's memory counts against vLLM's startup check (capacity/gpu/windows.py): warn when the
    headroom above the request is less than an idle desktop was measured to hold."""
    s = plan.serving
    headroom = plan.free_at_startup_bytes - plan.requested_memory_bytes
    if not under_wsl(plan.gpu) or s.kv_cache_memory_bytes is not None or headroom < 0 or headroom >= DESKTOP_IDLE_BYTES:
        return
    fitting = utilization_within(plan, plan.free_at_startup_bytes - DESKTOP_IDLE_BYTES)
    yield Hazard(
        "windows_desktop_memory",
        WARNING,
        f"under WSL2 the Windows desktop holds memory on a GPU that drives a display ({DESKTOP_IDLE_REFERENCE}); vLLM "
        f"refuses to start unless the requested {gib(plan.requested_memory_bytes)} is free, which leaves Windows only "
        f"about {headroom // MiB:,} MiB",
        f"check nvidia-smi's used memory before starting, or lower --gpu-memory-utilization to {fitting:.2f}",
        (("gpu_memory_utilization", fitting),) if fitting > 0 else (),
    )


@check
def block_tables(plan: Plan) -> Iterator[Hazard]:
    spec = plan.spec
    if not spec.has_cross_attention:
        return
    enc_tokens = spec.encoder_tokens_per_request
    for g in plan.kv.groups:
        if not g.group.spec.reads_encoder_output:
            continue
        pre_tokens = g.block_table_width_blocks_pre_fix * g.group.spec.block_size
        if pre_tokens < enc_tokens:
            yield Hazard(
                "cross_attention_block_table_too_narrow_pre_fix",
                WARNING,
                f"before vLLM PR #46753 the cross-attention block table was sized by max(max_model_len, max_source_positions) = {plan.kv.block_table_max_len_pre_fix} tokens "
                f"({g.block_table_width_blocks_pre_fix} blocks), fewer than the {enc_tokens} encoder tokens: out-of-bounds writes",
                f"run vLLM 0.33 (width {g.block_table_width_blocks} blocks) or, on older releases, --max-model-len {enc_tokens} or more",
            )
        if g.block_table_width_blocks * g.group.spec.block_size < enc_tokens:
            yield Hazard(
                "cross_attention_block_table_too_narrow",
                ERROR,
                f"the cross-attention block table covers {g.block_table_width_blocks * g.group.spec.block_size} tokens, fewer than the {enc_tokens} encoder tokens",
                f"raise --max-num-batched-tokens to {enc_tokens} or more",
                (("max_num_batched_tokens", enc_tokens),),
            )
        break


@check
def warmup(plan: Plan) -> Iterator[Hazard]:
    w, spec = plan.warmup, plan.spec
    if spec.has_cross_attention and w.max_encoder_len <= 0:
        yield Hazard(
            "cross_attention_warmup_zero_keys",
            ERROR,
            "the warmup gives cross-attention no encoder length (max_encoder_len = 0): it warms up an attention over zero keys, not the real kernels",
            "set max_source_positions in config.json to the encoder's token count",
        )
    elif spec.has_cross_attention and w.max_encoder_len < spec.encoder_tokens_per_request:
        yield Hazard(
            "warmup_encoder_len_short",
            WARNING,
            f"warmup cross-attention uses {w.max_encoder_len} keys ({w.max_encoder_len_source}) but real requests carry {spec.encoder_tokens_per_request}: the real key length is first compiled under load",
            f"use --max-model-len {spec.encoder_tokens_per_request} or more, or add max_source_positions to config.json",
        )
    if w.prompt_len <= w.decode_query_len:
        yield Hazard(
            "prefill_warmup_taken_for_decode",
            ERROR,
            f"warmup prompt_len {w.prompt_len} <= decode query length {w.decode_query_len}: the prefill warmup batch is classified as a uniform decode batch",
            "run vLLM with PR #40746 (0.33 has it)",
        )
    if plan.serving.num_speculative_tokens:
        yield Hazard(
            "spec_decode_pre_40746",
            INFO,
            f"vLLM releases before PR #40746 warm prefill with 2 tokens, which with k={plan.serving.num_speculative_tokens} is not longer than the decode query ({w.decode_query_len}): prefill kernels were not warmed",
            "use vLLM 0.33",
        )
        yield Hazard(
            "draft_kv_not_modelled",
            INFO,
            "the speculator's own KV layers (EAGLE/MTP/draft model) are not counted in this plan",
            "add the draft model's KV to the non-KV budget when planning tight",
        )


COLD_START_NOTEWORTHY_BYTES = 256 * MiB  # below this, a first start that still fits is not worth a finding


@check
def cold_compile_cache(plan: Plan) -> Iterator[Hazard]:
    """The first start on an empty torch.compile cache: vLLM's profile peak holds the compile's scratch
    (capacity/memory/compile_cache.py), so that start gets less KV cache than a restart."""
    s, kv, m, scratch = plan.serving, plan.kv, plan.memory, plan.cold_compile
    if scratch is None or kv.available_bytes <= 0 or s.compile_cache == COLD:
        return
    extra = scratch.extra_bytes(m["activation_peak"], m["encoder_cache"])
    cold_available = kv.available_bytes - extra
    lost_blocks = kv.num_blocks - max(cold_available, 0) // kv.bytes_per_block
    refuses = cold_available - kv.bytes_per_block < kv.needed_for_one_request_bytes
    if not refuses and extra < COLD_START_NOTEWORTHY_BYTES:
        return
    fix = "start once to fill the cache (keep ~/.cache/vllm on a volume) and restart, or plan the first start with --compile-cache cold"
    knobs: tuple[tuple[str, int], ...] = ()
    if refuses:
        cold_len = max_model_len_that_fits([g.group for g in kv.groups], kv.bytes_per_block, s, cold_available, s.max_model_len)
        if cold_len:
            fix = f"use --max-model-len {cold_len} (what the first start fits), or " + fix
            knobs = (("max_model_len", cold_len),)
    yield Hazard(
        "cold_compile_cache",
        WARNING if refuses else INFO,
        "the first start on an empty torch.compile cache (a new vLLM version, dtype, TP, --max-num-batched-tokens or "
        "--max-model-len, or a container whose VLLM_CACHE_ROOT is not kept) compiles inside vLLM's memory profile: its peak "
        f"is up to max(warm peak + A, S) ({scratch.describe()}), {gib(extra)} above this warm plan's, so "
        f"that start's KV cache is up to {gib(extra)} ({lost_blocks:,} blocks, {extra / kv.available_bytes:.0%}) smaller"
        + ("; it then has no room for one request and vLLM refuses to start (a restart, warm, would start)" if refuses else ""),
        fix,
        knobs,
    )


@check
def encoder_profiling(plan: Plan) -> Iterator[Hazard]:
    cache = plan.memory["encoder_cache"].bytes
    if cache == 0:
        return
    # vLLM 0.33 profiles the encoder (this plan counts its outputs and activations); the hazard is about an older
    # engine, a warning only when the plan is for one (--vllm-version semantics other than 0.33's)
    other_engine = plan.semantics.name != LATEST.name
    yield Hazard(
        "kv_overallocated_without_encoder_profiling",
        WARNING if other_engine and cache >= 256 * MiB else INFO,
        f"an engine that does not profile the encoder (MRV2 before PR #47985) gives the {cache:,} B ({gib(cache)}) of encoder-cache outputs "
        f"({plan.budget.profile_items} x {plan.budget.profile_tokens_per_item} tokens) to the KV cache, plus the encoder's activations, and can OOM under load"
        + ("" if other_engine else "; vLLM 0.33, which this plan is for, profiles them and this plan counts them"),
        "use vLLM 0.33 (it profiles the encoder cache), or lower --gpu-memory-utilization by that much on older MRV2",
    )


@check
def concurrency_pessimism(plan: Plan) -> Iterator[Hazard]:
    c = plan.concurrency
    if plan.spec.has_cross_attention and c.actual > c.vllm_reported * 1.05:
        yield Hazard(
            "vllm_concurrency_pessimistic",
            INFO,
            f"vLLM logs {c.vllm_reported:.2f}x because it counts max_num_batched_tokens ({plan.serving.max_num_batched_tokens}) cross-attention tokens per request; "
            f"requests really hold {plan.spec.encoder_tokens_per_request}, so {c.actual:.2f}x fit",
            "expected; trust the actual figure for capacity",
        )


check(profile_provenance)  # capacity/planning/profile_hazards.py: what the plan's measurements rest on, last
