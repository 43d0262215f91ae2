"""capacity/planning/fit.py: the search for configurations that meet a target, on the formula path.

These tests plan with the formulas on purpose: they test the search (what it may change, its order, its bisection,
that each answer is an ordinary plan), which runs on the formula path whatever the estimate; the default estimate's
check of the first configuration is tested through the CLI (tests/cli/test_fit.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from capacity.errors import BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.model.registry import load_model
from capacity.planning.fit import MIN_CONTEXT_TOKENS, FitTarget, fit, meets, nearest_fit, pinned_args
from capacity.planning.plan import WARNING
from capacity.planning.planner import build_plan, serving_under
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.vllm.versions import LATEST

QWEN_VL = "Qwen/Qwen2.5-VL-7B-Instruct"
# Qwen2.5-VL-7B's text config: 28 layers, 4 KV heads of 128, bfloat16: K and V of one 16-token block
QWEN_VL_BLOCK_BYTES = 2 * 28 * 4 * 128 * 2 * 16


def gpus(*names: str):  # type: ignore[no-untyped-def]
    return [(gpu_by_name(n), gpu_by_name(n).name) for n in names]


def run(model: str, names: tuple[str, ...], target: FitTarget, held: frozenset[str] = frozenset(), **knobs):  # type: ignore[no-untyped-def]
    source, spec = load_model(model)
    base = ServingArgs(max_model_len=target.max_model_len, **knobs)
    return source, spec, fit(source, spec, gpus(*names), base, held | frozenset(knobs), target)


def replanned(model: str, gpu: str, command_args: ServingArgs):  # type: ignore[no-untyped-def]
    source, spec = load_model(model, command_args.revision, command_args.mm_processor_kwargs)
    target = gpu_by_name(gpu)
    return build_plan(source, spec, target, serving_under(LATEST, command_args, spec, target))


def test_the_qwen_vl_rtx_4090_case_gets_a_configuration_whose_figures_are_the_plans_by_hand():
    """The issue's case: 8 requests at max_model_len 8192 on one RTX 4090 (`capacity plan` says no KV memory at the
    default 128,000 tokens). requests at once = min((available // bytes per block - 1 null block) // 512 blocks per
    request, max_num_seqs), the block bytes from the model's config."""
    _, _, result = run(QWEN_VL, ("RTX 4090",), FitTarget(8, 8192, 1))
    assert result.fits
    top = result.configs[0]
    assert (top.gpu, top.gpu_count, top.max_model_len) == ("RTX-4090", 1, 8192)
    requested = math.ceil(gpu_by_name("RTX 4090").total_memory_bytes * top.gpu_memory_utilization)
    assert top.available_kv_bytes == requested - top.non_kv_bytes
    blocks = top.available_kv_bytes // QWEN_VL_BLOCK_BYTES
    assert top.num_blocks == blocks
    assert top.kv_requests == (blocks - 1) // (8192 // 16)
    assert top.requests_at_once == min(top.kv_requests, top.max_num_seqs) >= 8
    assert top.margin_requests == top.requests_at_once - 8
    assert top.spare_kv_bytes == (blocks - 1 - 8 * 512) * QWEN_VL_BLOCK_BYTES


def test_each_configuration_replans_from_its_serve_line_to_the_same_figures():
    _, _, result = run(QWEN_VL, ("RTX 4090", "L40S", "H200"), FitTarget(64, 32768, 8))
    assert len(result.configs) >= 3
    for config in result.configs:
        flags = dict(pair.split(" ", 1) for pair in config.command.split(" --")[1:] if " " in pair)
        args = ServingArgs(
            max_model_len=int(flags["max-model-len"]),
            max_num_seqs=int(flags["max-num-seqs"]),
            max_num_batched_tokens=int(flags["max-num-batched-tokens"]),
            gpu_memory_utilization=float(flags["gpu-memory-utilization"]),
            tensor_parallel_size=int(flags.get("tensor-parallel-size", 1)),
            data_parallel_size=int(flags.get("data-parallel-size", 1)),  # RTX 4090: TP 8 does not divide 28 heads; TP 4 x DP 2
            kv_cache_dtype=flags.get("kv-cache-dtype", "auto"),
        )
        assert "limit-mm-per-prompt" not in flags  # the target is met without dropping a modality here
        plan = replanned(QWEN_VL, config.gpu, args)
        assert plan.fits
        assert (plan.total_max_concurrent_requests, plan.kv.available_bytes, plan.kv.num_blocks) == (
            config.requests_at_once,
            config.available_kv_bytes,
            config.num_blocks,
        )


def test_fewest_gpus_first_and_no_fewer_gpus_of_that_type_meet_the_target():
    target = FitTarget(64, 32768, 8)
    _, _, result = run(QWEN_VL, ("RTX 4090", "L40S", "H200"), target)
    counts = [c.gpu_count for c in result.configs]
    assert counts == sorted(counts)
    for config in result.configs:
        if config.gpu_count == 1:
            continue
        fewer = replanned(
            QWEN_VL, config.gpu, ServingArgs(max_model_len=32768, tensor_parallel_size=config.gpu_count - 1, kv_cache_dtype=config.kv_cache_dtype)
        )
        assert not meets(fewer, target)


def test_the_first_configuration_per_gpu_type_that_needs_a_change_comes_with_the_fewest_gpus_that_need_none():
    """64 requests at 32,768 tokens on H200: one GPU needs an fp8 KV cache (half the KV bytes), two need nothing."""
    _, _, result = run(QWEN_VL, ("H200",), FitTarget(64, 32768, 8))
    (one, two) = result.configs
    assert one.gpu_count == 1 and [c.knob for c in one.changes] == ["kv_cache_dtype"] and one.kv_cache_dtype == "fp8"
    assert two.gpu_count == 2 and two.changes == () and two.kv_cache_dtype == "auto"
    # without the change one H200 holds fewer than 64: what made the search reach for it
    plain = replanned(QWEN_VL, "H200", ServingArgs(max_model_len=32768))
    assert plain.fits and plain.max_concurrent_requests < 64


def test_held_knobs_are_never_changed():
    _, _, result = run(QWEN_VL, ("H200",), FitTarget(64, 32768, 8), kv_cache_dtype="auto", limit_mm_per_prompt={"image": 4})
    assert result.held == ("kv_cache_dtype", "limit_mm_per_prompt")
    for config in result.configs:
        assert config.kv_cache_dtype == "auto" and config.limit_mm_per_prompt["image"] == 4
    assert result.configs[0].gpu_count == 2


def test_max_finds_the_longest_context_that_meets_the_target():
    """Bisection: the answer meets the target and one token more does not (same knobs)."""
    source, spec, result = run(QWEN_VL, ("RTX 4090",), FitTarget(4, None, 1))
    top = result.configs[0]
    assert MIN_CONTEXT_TOKENS <= top.max_model_len < spec.derived_max_model_len
    gpu = gpu_by_name("RTX 4090")
    at = build_plan(source, spec, gpu, resolve_serving(ServingArgs(max_model_len=top.max_model_len, max_num_seqs=top.max_num_seqs), spec, gpu))
    longer = build_plan(source, spec, gpu, resolve_serving(ServingArgs(max_model_len=top.max_model_len + 1, max_num_seqs=top.max_num_seqs), spec, gpu))
    assert meets(at, FitTarget(4, None, 1)) and not meets(longer, FitTarget(4, None, 1))


def test_a_model_too_large_for_the_gpus_allowed_gets_none_and_the_reason():
    """Olmo-3.1-32B's bfloat16 weights (~64 GB) on one 24 GB card: no change the search makes frees that."""
    _, _, result = run("allenai/Olmo-3.1-32B-Instruct", ("RTX 4090",), FitTarget(1, None, 1))
    assert not result.fits
    (refusal,) = result.refusals
    assert refusal.gpu == "RTX-4090" and refusal.gpu_count == 1 and refusal.reason.startswith("no_kv_cache_memory")


def test_gpu_counts_vllm_refuses_are_skipped():
    """whisper-tiny has 6 attention heads: TP 4 and 5 do not divide them (tp_does_not_divide_heads)."""
    source, spec = load_model("openai/whisper-tiny")
    result = fit(source, spec, gpus("L4"), ServingArgs(), frozenset(), FitTarget(1, None, 8), counts=lambda _g: [4, 5, 3])
    (config,) = result.configs
    assert config.gpu_count == 3


def test_bad_targets_are_refused():
    with pytest.raises(BadInput, match="--max-gpus"):
        FitTarget(1, None, 0)
    with pytest.raises(BadInput, match="--min-concurrency"):
        FitTarget(0, None, 1)
    with pytest.raises(BadInput, match="exceeds"):
        run(QWEN_VL, ("H200",), FitTarget(1, 10**7, 1))
    with pytest.raises(BadInput, match="below --min-concurrency"):
        run(QWEN_VL, ("H200",), FitTarget(64, 8192, 1), max_num_seqs=32)


def test_pinned_args_give_the_plan_back():
    source, spec = load_model(QWEN_VL)
    gpu = gpu_by_name("L40S")
    plan = build_plan(source, spec, gpu, resolve_serving(ServingArgs(max_model_len=8192, limit_mm_per_prompt={"video": 0}), spec, gpu))
    again = build_plan(source, spec, gpu, resolve_serving(pinned_args(plan), spec, gpu))
    assert replace(again.serving, defaulted=()) == replace(plan.serving, defaulted=())
    assert again.kv == plan.kv


def test_nearest_fit_of_a_plan_that_does_not_fit_keeps_its_gpu_and_shortens_the_context():
    source, spec = load_model(QWEN_VL)
    gpu = gpu_by_name("RTX 4090")
    plan = build_plan(source, spec, gpu, resolve_serving(ServingArgs(), spec, gpu))
    assert not plan.fits and plan.suggestion is not None and plan.suggestion.command is None
    nearest = nearest_fit(plan)
    (config,) = nearest.configs
    assert (config.gpu, config.gpu_count) == ("RTX-4090", 1)
    assert [c.knob for c in config.changes] == ["max_model_len"] and config.max_model_len < 128000
    assert config.requests_at_once >= 1 and config.estimate == "formula"
    # the longest context a first start on an empty compile cache also fits (cold_compile_cache: vLLM would refuse that
    # start one token longer, though a warm restart fits): the suggestion raises no warning
    at = build_plan(source, spec, gpu, resolve_serving(ServingArgs(max_model_len=config.max_model_len), spec, gpu))
    longer = build_plan(source, spec, gpu, resolve_serving(ServingArgs(max_model_len=config.max_model_len + 1), spec, gpu))
    assert warning_ids(at) == [] and config.warnings == ()
    assert "cold_compile_cache" in warning_ids(longer)


def test_smaller_images_through_the_size_key_the_family_models():
    """Two requests of 65,536 tokens on one RTX 4090 need a Qwen-VL max_pixels cap (the video item shrinks with it):
    the configuration carries --mm-processor-kwargs and re-plans (under those kwargs) to the same figures."""
    _, _, result = run(QWEN_VL, ("RTX 4090",), FitTarget(2, 65536, 1))
    top = result.configs[0]
    kwargs = next(c.after for c in top.changes if c.knob == "mm_processor_kwargs")
    assert kwargs == {"max_pixels": 1280 * 28 * 28}
    assert "--mm-processor-kwargs '{\"max_pixels\":1003520}'" in top.command
    args = ServingArgs(max_model_len=65536, mm_processor_kwargs=kwargs, kv_cache_dtype=top.kv_cache_dtype, max_num_seqs=top.max_num_seqs)
    plan = replanned(QWEN_VL, "RTX 4090", args)
    assert plan.fits and (plan.max_concurrent_requests, plan.kv.num_blocks) == (top.requests_at_once, top.num_blocks)
    without = replanned(QWEN_VL, "RTX 4090", replace(args, mm_processor_kwargs=None))
    assert not meets(without, FitTarget(2, 65536, 1))


# max_pixels for items of at most N merged tokens: N x (patch 14 x merge 2)^2 = N x 784 pixels
EIGHT_K_ITEMS = {"max_pixels": 8192 * 784}  # 6,422,528 px: 8,192 = 64 x 128 cells (isqrt 90, largest divisor 64)


def warning_ids(plan) -> list[str]:  # type: ignore[no-untyped-def]
    return [h.id for h in plan.hazards if h.severity == WARNING]


def test_an_item_longer_than_max_model_len_is_not_a_configuration_until_items_fit():
    """The issue's case at 8,192 tokens: the default 16,384-token image (128 x 128 merged patches) and video frame pair
    are longer than a prompt may be (item_longer_than_max_model_len), so the search climbs to the smallest change that
    clears it: images of at most 8,192 tokens, and nothing else (the memory target is met without the other rungs)."""
    _, _, result = run(QWEN_VL, ("RTX 4090",), FitTarget(8, 8192, 1))
    top = result.configs[0]
    assert [(c.knob, c.after) for c in top.changes] == [("mm_processor_kwargs", EIGHT_K_ITEMS)] and top.warnings == ()
    plain = replanned(QWEN_VL, "RTX 4090", ServingArgs(max_model_len=8192))
    assert meets(plain, FitTarget(8, 8192, 1)) and warning_ids(plain) == ["item_longer_than_max_model_len"]
    # Qwen2.5-VL's video frame pairs take the image's size: video_frames at 8,192 is 2 (one pair of 8,192 tokens)
    smaller = replanned(QWEN_VL, "RTX 4090", ServingArgs(max_model_len=8192, mm_processor_kwargs=EIGHT_K_ITEMS))
    assert dict(smaller.budget.max_tokens_per_item) == {"image": 8192, "video": 8192}
    assert warning_ids(smaller) == [] and smaller.max_concurrent_requests == top.requests_at_once


def test_a_held_item_limit_vllm_would_lower_climbs_to_items_that_fit_it():
    """--limit-mm-per-prompt image=4 held at 32,768 tokens: 32,768 // 16,384 = 2 images per prompt, which vLLM budgets
    without a word (items_per_prompt_lowered); images of at most 32,768 // 4 = 8,192 tokens fit 4 per prompt."""
    _, _, result = run(QWEN_VL, ("H200",), FitTarget(64, 32768, 8), kv_cache_dtype="auto", limit_mm_per_prompt={"image": 4})
    for config in result.configs:
        assert config.limit_mm_per_prompt["image"] == 4 and config.warnings == ()
        assert [(c.knob, c.after) for c in config.changes if c.knob == "mm_processor_kwargs"] == [("mm_processor_kwargs", EIGHT_K_ITEMS)]
    held = replanned(QWEN_VL, "H200", ServingArgs(max_model_len=32768, limit_mm_per_prompt={"image": 4}, tensor_parallel_size=2))
    assert warning_ids(held) == ["items_per_prompt_lowered"]


def test_a_warning_no_rung_clears_stays_on_the_configuration():
    """Item limits and kwargs held: nothing the search may change shortens the 16,384-token items, so the configuration
    is offered with the warning named on it."""
    source, spec = load_model(QWEN_VL, None, {"max_pixels": 12_845_056})
    base = ServingArgs(max_model_len=8192, limit_mm_per_prompt={"image": 1, "video": 1}, mm_processor_kwargs={"max_pixels": 12_845_056})
    result = fit(source, spec, gpus("RTX 4090"), base, frozenset({"limit_mm_per_prompt", "mm_processor_kwargs"}), FitTarget(8, 8192, 1))
    (config,) = result.configs
    assert [w.split(":")[0] for w in config.warnings] == ["item_longer_than_max_model_len"]
    assert "image 16,384, video 16,384" in config.warnings[0]


def test_max_searches_no_shorter_than_the_largest_item():
    """16 requests at the longest context on one RTX 4090: no length from 16,384 (the default item) up meets it with
    fp8 and max_num_seqs 16, so the search takes items of at most 4,096 tokens (max_pixels 4,096 x 784 = 3,211,264),
    and the context it finds holds one."""
    target = FitTarget(16, None, 1)
    _, _, result = run(QWEN_VL, ("RTX 4090",), target)
    top = result.configs[0]
    assert dict((c.knob, c.after) for c in top.changes)["mm_processor_kwargs"] == {"max_pixels": 4096 * 784}
    assert 4096 <= top.max_model_len < 16384 and top.warnings == ()
    at_item = replanned(QWEN_VL, "RTX 4090", ServingArgs(max_model_len=16384, max_num_seqs=16, kv_cache_dtype="fp8"))
    assert not meets(at_item, target)
