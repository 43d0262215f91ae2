"""V0's default max_num_batched_tokens, from vLLM's own code (0.6.6.post1 SchedulerConfig.__post_init__, index id
59727640247; EngineArgs' long-context rule, index id 356895891): a whole prompt of max(max_model_len, 2048) tokens
without chunked prefill; above 32,768 tokens V0 turns chunked prefill on by itself (no sliding window, no prefix
caching) and batches 2048 tokens; multimodal models get at least 5120."""

from __future__ import annotations

import pytest

from capacity.vllm.versions import LATEST, V0, semantics_for
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT


@pytest.mark.parametrize(
    ("max_model_len", "multimodal", "sliding_window", "prefix_caching", "tokens"),
    [
        (20_000, False, False, False, 20_000),  # the RTX 3090 log's 20k start: a whole prompt
        (32_768, False, False, False, 32_768),  # 32K itself is not 'long context' (> 32K)
        (131_072, False, False, False, 2048),  # Llama-3.1-8B's default length: chunked, 2048
        (131_072, False, False, True, 131_072),  # --enable-prefix-caching keeps chunked prefill off in V0
        (131_072, False, True, False, 131_072),  # a sliding-window model too
        (1024, False, False, False, 2048),  # a short context still batches 2048
        (131_072, True, False, False, 5120),  # multimodal floor
    ],
)
def test_v0_batched_tokens(max_model_len: int, multimodal: bool, sliding_window: bool, prefix_caching: bool, tokens: int) -> None:
    got = V0.v0_batched_tokens(max_model_len, multimodal=multimodal, sliding_window=sliding_window, prefix_caching=prefix_caching)
    assert got == tokens


def test_v1_ranges_have_no_v0_long_context_rule() -> None:
    assert semantics_for("0.15.1").long_context_chunking is None


@pytest.mark.parametrize(
    ("version", "architecture", "moe", "quantized", "hybrid", "mrv2"),
    [
        ("0.19.1", "Qwen3ForCausalLM", False, False, False, False),  # V1 runner only
        ("0.20.0", "LlamaForCausalLM", False, False, False, False),  # VLLM_USE_V2_MODEL_RUNNER defaults to 0
        ("0.23.0", "LlamaForCausalLM", False, False, False, True),  # DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES
        ("0.23.0", "Qwen3ForCausalLM", False, True, False, False),  # ... not quantized
        ("0.23.0", "Qwen2_5_VLForConditionalGeneration", False, False, False, False),  # not listed
        ("0.21.0", "Qwen3ForCausalLM", False, False, False, False),  # 0.21.0: VLLM_USE_V2_MODEL_RUNNER defaults to 0
        ("0.24.0", "Qwen2MoeForCausalLM", True, False, False, True),  # 0.24.0: the list alone, MoE included
        ("0.24.0", "Qwen3ForCausalLM", False, True, False, True),  # ... quantized too
        ("0.24.0", "Qwen2ForCausalLM", False, False, False, False),
        ("0.25.0", "Qwen2ForCausalLM", False, False, False, True),  # 0.25.0, 0.26.0: any dense generate model
        ("0.26.0", "Qwen3MoeForCausalLM", True, False, False, False),  # MoE, not listed
        ("0.26.0", "Qwen2MoeForCausalLM", True, False, False, True),  # MoE, listed
        ("0.27.1", "Qwen2_5_VLForConditionalGeneration", False, False, False, True),  # any dense generate model
        ("0.27.1", "Qwen3MoeForCausalLM", True, False, False, False),  # MoE, not listed
        ("0.27.1", "Qwen2MoeForCausalLM", True, False, False, True),  # MoE, listed
        ("0.28.0", "Qwen3ForCausalLM", False, False, False, True),
        ("0.28.0", "NemotronHForCausalLM", False, False, True, False),  # hybrid, not listed
        ("0.29.0", "Qwen3MoeForCausalLM", True, False, False, True),  # 0.29.0+: no architecture test
        ("0.32.0", "NemotronHForCausalLM", False, False, True, True),
        ("0.33.0", "Qwen3MoeForCausalLM", True, True, True, True),
    ],
)
def test_default_model_runner(version: str, architecture: str, moe: bool, quantized: bool, hybrid: bool, mrv2: bool) -> None:
    sem = semantics_for(version)
    assert sem is not None and sem.runs_mrv2(architecture, moe=moe, quantized=quantized, hybrid=hybrid) is mrv2


def test_v1_runner_and_mrv2_charge_the_same_captures_differently() -> None:
    """Qwen2.5-VL-7B (28 decoder layers) under 0.23.0 runs the V1 runner, under 0.29.0 Model Runner V2: both capture 51
    PIECEWISE sizes and 35 FULL decode graphs. MRV2 adds its first FULL sample (s1) to the PIECEWISE total; the V1
    runner takes the larger first capture of the two modes once (the PIECEWISE one): one FULL graph less, 28 x 40 KiB."""
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    args = ServingArgs(max_model_len=8192)
    v023 = plan_for("Qwen/Qwen2.5-VL-7B-Instruct", args, "A100-80GB", semantics=semantics_for("0.23.0"))
    v029 = plan_for("Qwen/Qwen2.5-VL-7B-Instruct", args, "A100-80GB", semantics=semantics_for("0.29.0"))
    assert v023.serving.max_num_seqs == v029.serving.max_num_seqs == 256
    assert v023.memory["cuda_graphs"].bytes == v029.memory["cuda_graphs"].bytes - 28 * 40 * 1024
    assert v023.memory["cuda_graphs"].kind == "estimated" and "V1 runner" in v023.memory["cuda_graphs"].method
    assert "MRV2: 51 PIECEWISE sizes x 29 pieces" in v029.memory["cuda_graphs"].method


@pytest.mark.parametrize(("version", "set_aside"), [("0.23.0", False), ("0.24.0", False), ("0.27.1", False), ("0.28.0", False), ("0.29.0", True), ("0.32.0", True)])
def test_mrv2_cuda_graph_estimate_by_version(version: str, set_aside: bool) -> None:
    """Model Runner V2's profile_cudagraph_memory is `return 0` in the 0.23.0, 0.24.0, 0.27.1 and 0.28.0 wheels and
    calls cudagraph_utils.profile_cudagraph_memory from 0.29.0 (read in each wheel's vllm/v1/worker/gpu/model_runner.py):
    Llama-3.1-8B (an MRV2 architecture in all of them) has nothing set aside before 0.29, and 0.33's form after."""
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    args = ServingArgs(max_model_len=8192)
    latest = plan_for("meta-llama/Llama-3.1-8B-Instruct", args, "H100-SXM").memory["cuda_graphs"]
    graphs = plan_for("meta-llama/Llama-3.1-8B-Instruct", args, "H100-SXM", semantics=semantics_for(version)).memory["cuda_graphs"]
    assert latest.bytes > 0
    assert graphs.bytes == (latest.bytes if set_aside else 0)
    if not set_aside:
        assert graphs.kind == "exact" and "returns 0 from profile_cudagraph_memory" in graphs.method


def test_rocm_has_no_estimate_in_0_23() -> None:
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    args = ServingArgs(max_model_len=8192)
    assert plan_for("meta-llama/Llama-3.1-8B-Instruct", args, "MI300X", semantics=semantics_for("0.23.0")).memory["cuda_graphs"].bytes == 0
    assert plan_for("meta-llama/Llama-3.1-8B-Instruct", args, "MI300X", semantics=semantics_for("0.29.0")).memory["cuda_graphs"].bytes > 0  # is_cuda_alike()


@pytest.mark.parametrize(("gpu", "charged"), [("H200", True), ("L40S", False)])
def test_0_10_charges_the_communicators_on_nvlinked_gpus(gpu: str, charged: bool) -> None:
    """vLLM 0.9.2 / 0.10.2 take the startup snapshot before init_worker_distributed_environment, 0.11.0 after: at TP 2
    on NVLinked H200s the 0.10 non-torch memory holds NCCL's communicator (975,175,680 B measured on the H200 pair) and
    vLLM's buffers for capability 9.0 at world size 2 (symmetric memory 64 MiB + custom all-reduce: signal 8 MiB, IPC
    max(8, 2, 16) = 16 MiB, rank data 8 MiB: 96 MiB). Over PCIe (L40S) nothing is added, and the method says why."""
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs
    from capacity.units import MiB

    args = ServingArgs(max_model_len=8192, tensor_parallel_size=2)
    v010 = plan_for("meta-llama/Llama-3.1-8B-Instruct", args, gpu, semantics=semantics_for("0.10.2"))
    v011 = plan_for("meta-llama/Llama-3.1-8B-Instruct", args, gpu, semantics=semantics_for("0.11.0"))
    added = v010.memory["non_torch"].bytes - v011.memory["non_torch"].bytes
    assert added == ((975_175_680 + 96 * MiB) if charged else 0)
    assert v010.kv.available_bytes == v011.kv.available_bytes - added
    # the snapshot precedes NCCL in 0.10: the GPU starts with the communicators' memory still free
    assert v010.free_at_startup_bytes - v011.free_at_startup_bytes == v011.memory["collectives"].bytes
    if not charged:
        assert "not added" in v010.memory["non_torch"].method


def test_0_11_and_tp1_charge_no_communicators() -> None:
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    tp1 = ServingArgs(max_model_len=8192)
    a = plan_for("meta-llama/Llama-3.1-8B-Instruct", tp1, "H200", semantics=semantics_for("0.10.2")).memory["non_torch"]
    b = plan_for("meta-llama/Llama-3.1-8B-Instruct", tp1, "H200", semantics=semantics_for("0.11.0")).memory["non_torch"]
    assert a == b


def test_sliding_windows_reserve_one_batch_before_0_27() -> None:
    """Gemma-4-E4B (20 sliding layers of window 512 as 5 groups of 4, 4 full layers of head_dim 512; pages unified at
    64 KiB, so sliding blocks hold 32 tokens) at max_model_len 32,768 and 2,048 batched tokens. vLLM 0.23-0.25
    reserve a window for one batch: cdiv(511 + 2048, 32) + 1 = 81 blocks; 0.26.0+ for max_in_flight_tokens, two batches
    with async scheduling: cdiv(511 + 4096, 32) + 1 = 145. The 0.22.1 log of bench/vllm_logs agrees with the former:
    4.1 GiB / ((5 x 81 + 2048) blocks x 4 layers x 64 KiB) = 6.85x, as printed (with 145: 6.06x)."""
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    model = str(ROOT / "bench" / "vllm_logs" / "configs" / "google--gemma-4-E4B-it")
    args = ServingArgs(max_model_len=32768, gpu_memory_utilization=0.9)
    for version, window in (("0.22.1", 81), ("0.24.0", 81), ("0.25.0", 81), ("0.26.0", 145), ("0.27.1", 145), ("0.33.0", 145)):
        plan = plan_for(model, args, "RTX-3090-Ti", semantics=semantics_for(version))
        assert plan.serving.max_num_batched_tokens == 2048
        assert [g.blocks_per_request_vllm for g in plan.kv.groups] == [window] * 5 + [2048], version
    assert round(4.1 * 2**30 / ((5 * 81 + 2048) * 4 * 64 * 1024), 2) == 6.85
    assert round(4.1 * 2**30 / ((5 * 145 + 2048) * 4 * 64 * 1024), 2) == 6.06


def test_latest_is_the_planners_own_path() -> None:
    """A plan made without a version is planned with LATEST (0.33): its fields take each version branch of the planner
    the way 0.33 runs (Model Runner V2 for every model, the CUDA-graph estimate set aside on CUDA and ROCm, the
    communicators outside the non-KV memory, 0.33's utilization and batch defaults)."""
    from capacity.gpu.catalog import CATALOG
    from capacity.serving.config import USAGE_CONTEXTS, ServingArgs, batch_defaults

    assert LATEST.engine == "MRV2" and LATEST.runs_mrv2("AnyForCausalLM", moe=True, quantized=True, hybrid=True)
    assert LATEST.subtracts_cudagraph_estimate and LATEST.mrv2_cudagraph_estimate and LATEST.cudagraph_estimate_on_rocm
    assert not LATEST.communicators_in_non_kv and not LATEST.whole_prompt_batches
    args = ServingArgs()
    assert LATEST.serving_args(args) is args
    for entry in CATALOG:
        gpu = entry.gpu()
        for context in USAGE_CONTEXTS:
            assert LATEST.batch_defaults(gpu, context) == batch_defaults(gpu, context), (gpu.name, context)


def test_a_plan_carries_its_semantics() -> None:
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs
    from reports.fingerprint import fingerprint

    args = ServingArgs(max_model_len=8192)
    latest = plan_for("meta-llama/Llama-3.1-8B-Instruct", args, "H100-SXM")
    v023 = plan_for("meta-llama/Llama-3.1-8B-Instruct", args, "H100-SXM", semantics=semantics_for("0.23.0"))
    assert latest.semantics is LATEST and v023.semantics is semantics_for("0.23.0")
    assert fingerprint(latest)["vllm_semantics_version"] == "0.33.0" and fingerprint(v023)["vllm_semantics_version"] == "0.23"
    assert "semantics" not in latest.to_dict()


@pytest.mark.parametrize(
    ("given", "nearest"),
    [("0.34.0", "0.33.0"), ("1.0", "0.33.0"), ("0.5.4", "0.6.0")],
)
def test_a_release_capacity_does_not_model_is_refused_naming_the_nearest(given: str, nearest: str) -> None:
    from capacity.errors import BadInput
    from capacity.vllm.versions import planned_semantics

    with pytest.raises(BadInput) as refused:
        planned_semantics(given)
    assert str(refused.value).count("\n") == 0 and str(refused.value).endswith(f"the nearest it plans is {nearest}")


def test_planned_semantics_names_the_release_and_keeps_the_default_object() -> None:
    from capacity.vllm.versions import planned_semantics

    assert planned_semantics("0.33.0") is LATEST and planned_semantics("0.33") is LATEST
    old = planned_semantics("0.10.2")
    assert (old.name, old.release, old.default_gpu_memory_utilization) == ("0.8-0.10", "0.10.2", 0.9)


# --- usage contexts outside get_batch_defaults' tables -----------------------------------------------------------


@pytest.mark.parametrize("context", ["engine_context", "openai_batch_runner"])
@pytest.mark.parametrize("version", ["0.8.5", "0.10.2", "0.11.0", "0.12.0", "0.20.0", "0.33.0"])
def test_an_engine_built_directly_keeps_the_scheduler_defaults(context: str, version: str) -> None:
    """EngineArgs.get_batch_defaults lists OPENAI_API_SERVER and LLM_CLASS only (0.8.5 to 0.33.0): an engine built with
    LLMEngine / AsyncLLMEngine.from_engine_args (UsageContext.ENGINE_CONTEXT: Ray Data, Triton) or `vllm run-batch`
    (OPENAI_BATCH_RUNNER) keeps SchedulerConfig's 2048 batched tokens and 128 sequences, on every GPU size."""
    from capacity.gpu.catalog import gpu_by_name

    for gpu in ("H200", "A100-80GB", "L4"):
        assert semantics_for(version).batch_defaults(gpu_by_name(gpu), context) == (2048, 128)
    assert V0.batch_defaults(gpu_by_name("L4"), context) == (2048, 256)  # V0's EngineArgs set 256 sequences itself


@pytest.mark.parametrize(("version", "model", "tokens"), [
    ("0.11.0", "Qwen/Qwen2.5-VL-3B-Instruct", 5120),  # max(2048, MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS 5120)
    ("0.9.2", "Qwen/Qwen2.5-VL-3B-Instruct", 5120),
    ("0.12.0", "Qwen/Qwen2.5-VL-3B-Instruct", 2048),  # 0.12.0's SchedulerConfig has no multimodal floor
    ("0.33.0", "Qwen/Qwen2.5-VL-3B-Instruct", 2048),
    ("0.11.0", "Qwen/Qwen3-8B", 2048),  # a text model: no floor
])  # fmt: skip
def test_before_0_12_a_multimodal_engine_defaults_to_5120_batched_tokens(version: str, model: str, tokens: int) -> None:
    """SchedulerConfig.__post_init__ of 0.8.5-0.11.0 raised a defaulted max_num_batched_tokens to 5120 for a multimodal
    model, then (0.9.2 on) capped it at max_num_seqs x max_model_len: an engine-context start of Qwen2.5-VL-3B at
    max_model_len 8192 batches min(128 x 8192, max(2048, 5120)) = 5120 tokens; `vllm serve` (its own default) 2048."""
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    engine = plan_for(model, ServingArgs(max_model_len=8192, usage_context="engine_context"), "L4", semantics=semantics_for(version))
    assert (engine.serving.max_num_batched_tokens, engine.serving.max_num_seqs) == (tokens, 128)
    serve = plan_for(model, ServingArgs(max_model_len=8192), "L4", semantics=semantics_for(version))
    assert serve.serving.max_num_batched_tokens == 2048
    given = plan_for(model, ServingArgs(max_model_len=8192, usage_context="engine_context", max_num_batched_tokens=3000), "L4", semantics=semantics_for(version))
    assert given.serving.max_num_batched_tokens == 3000  # a value the user gives is kept


# --- the V0 engine's non-torch figure ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("release", "use_v1", "v0_non_torch"),
    [("0.6.4", None, False), ("0.6.5", None, True), ("0.7.3", None, True), ("0.10.2", "0", True)],
)
def test_v0_counts_its_non_torch_growth_from_0_6_5(release: str, use_v1: str | None, v0_non_torch: bool) -> None:
    """0.6.5's worker.py profiles with memory_profiling (non-torch = growth since a baseline taken after the CUDA
    context); 0.6.4.post1's counts mem_get_info's used - torch's allocated, the context too (both wheels read)."""
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs
    from capacity.vllm.versions import planned_semantics

    sem = planned_semantics(release, use_v1=use_v1)
    assert sem.engine == "V0" and sem.v0_memory_profiling is v0_non_torch
    plan = plan_for("meta-llama/Llama-3.1-8B-Instruct", ServingArgs(max_model_len=8192), "A100-80GB", semantics=sem)
    # 0.05 GiB: 'non_torch_memory takes 0.05GiB' of the calibration half's V0 log; else the formulas' 256 MiB
    assert plan.memory["non_torch"].bytes == (round(0.05 * 2**30) if v0_non_torch else 256 * 2**20)


def test_a_v0_log_in_the_0_6_4_format_keeps_its_context_inclusive_non_torch() -> None:
    from capacity.vllm.log_startups import parse_vllm_log
    from capacity.vllm.versions import log_semantics

    old = parse_vllm_log(
        "INFO 01-01 00:00:00 worker.py:232] Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB "
        "peak_torch_memory=17.06GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90"
    )
    new = parse_vllm_log(
        "INFO 05-05 15:25:32 [worker.py:267] model weights take 6.02GiB; non_torch_memory takes 0.05GiB; PyTorch activation peak memory "
        "takes 0.90GiB; the rest of the memory reserved for KV Cache is 6.22GiB."
    )
    assert old.engine == new.engine == "V0"
    assert not log_semantics(old).v0_memory_profiling and log_semantics(new).v0_memory_profiling


def test_gemma_4_31b_on_0_26_reserves_two_batches_per_sliding_group_as_its_public_start_prints() -> None:
    """bench/vllm_logs/gemma-4-31b-b300-len16384-util0.92-v0.26.0.log: 'Available KV cache memory: 182.37 GiB', 'GPU KV
    cache size: 217,116 tokens', 'Maximum concurrency for 16,384 tokens per request: 13.25x', max_num_batched_tokens
    8192. Five groups of ten sliding layers (16 KV heads x 256, window 1024, block 16) and one of ten full layers (4
    KV heads x 512, block 32): pages of 256 KiB x 10 layers. A sliding group holds min(1023 + 2 x 8192, 16384) tokens:
    cdiv(16384, 16) + 1 = 1025 blocks (one batch: cdiv(1023 + 8192, 16) + 1 = 577); the full group 16384 / 32 = 512.
    182.37 GiB / 2,621,440 B = 74,698 blocks; / (5 x 1025 + 512) = 13.25x, as printed (577: 21.99x)."""
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    model = str(ROOT / "bench" / "vllm_logs" / "configs" / "google--gemma-4-31B-it")
    args = ServingArgs(max_model_len=16384, gpu_memory_utilization=0.92, limit_mm_per_prompt={"image": 0, "audio": 0})
    for version, window in (("0.25.0", 577), ("0.26.0", 1025)):
        plan = plan_for(model, args, "B300", semantics=semantics_for(version))
        assert plan.serving.max_num_batched_tokens == 8192
        assert [g.blocks_per_request_vllm for g in plan.kv.groups] == [window] * 5 + [512], version
        assert plan.kv.bytes_per_block == 10 * 16 * 16 * 256 * 2 * 2
    assert int(182.37 * 2**30) // 2_621_440 == 74_698
    assert round(74_698 / (5 * 1025 + 512), 2) == 13.25 and round(74_698 / (5 * 577 + 512), 2) == 21.99


@pytest.mark.parametrize(
    ("version", "value", "mrv2"),
    [
        ("0.26.0", None, True),  # a dense generate model: Model Runner V2 by default
        ("0.26.0", "0", False),  # the Gemma-4-31B-it start on a B300 (bench/vllm_logs/gemma-4-31b-b300-*)
        ("0.21.0", "1", True),  # 0.20-0.21 default to 0; 1 turns it on
        ("0.19.1", "1", False),  # no such variable before 0.20: vLLM ignores it
    ],
)
def test_vllm_use_v2_model_runner_picks_the_runner(version: str, value: str | None, mrv2: bool) -> None:
    sem = semantics_for(version).with_model_runner_env(value)
    assert sem.runs_mrv2("Gemma4ForConditionalGeneration", moe=False, quantized=False, hybrid=False) is mrv2


@pytest.mark.parametrize(("version", "value", "needle"), [("0.33.0", "0", "after 0.28 is not modelled"), ("0.26.0", "yes", "as an integer")])
def test_vllm_use_v2_model_runner_that_cannot_be_planned_is_refused_in_one_line(version: str, value: str, needle: str) -> None:
    from capacity.errors import BadInput

    with pytest.raises(BadInput) as refused:
        semantics_for(version).with_model_runner_env(value)
    assert needle in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("tag", "mrv2"),
    [("[gpu_model_runner.py:5347]", False), ("[model_runner.py:407]", True)],
)
def test_the_loading_lines_file_tag_names_the_model_runner(tag: str, mrv2: bool) -> None:
    """vLLM 0.20-0.28 pick the runner by architecture and VLLM_USE_V2_MODEL_RUNNER; the log's 'Model loading took' line
    comes from vllm/v1/worker/gpu_model_runner.py (V1 runner) or vllm/v1/worker/gpu/model_runner.py (V2). A 0.26.0
    start of Qwen3-8B (a dense model: V2 by default) that shows the V1 runner's tag is planned with the V1 runner."""
    from capacity.vllm.log_startups import parse_vllm_log
    from capacity.vllm.versions import log_semantics

    facts = parse_vllm_log(
        "(EngineCore pid=1) INFO 08-06 20:10:11 [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config: model='Qwen/Qwen3-8B'\n"
        f"(EngineCore pid=1) INFO 08-06 20:11:51 {tag} Model loading took 15.27 GiB memory and 9.1 seconds\n"
        "(EngineCore pid=1) INFO 08-06 20:14:51 [gpu_worker.py:560] Available KV cache memory: 20.0 GiB\n"
    )
    assert facts.model_runner_v2 is mrv2
    assert log_semantics(facts).runs_mrv2("Qwen3ForCausalLM", moe=False, quantized=False, hybrid=False) is mrv2


def test_a_runner_tag_after_0_28_or_before_0_20_leaves_the_release_rules() -> None:
    from capacity.vllm.log_startups import parse_vllm_log
    from capacity.vllm.versions import log_semantics

    for version, tag in (("0.30.0", "[gpu_model_runner.py:1]"), ("0.19.1", "[model_runner.py:1]")):
        facts = parse_vllm_log(
            f"INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v{version}) with config: model='Qwen/Qwen3-8B'\n"
            f"INFO 01-01 00:00:01 {tag} Model loading took 15.27 GiB memory and 9.1 seconds\n"
            "INFO 01-01 00:00:02 [gpu_worker.py:1] Available KV cache memory: 20.0 GiB\n"
        )
        assert log_semantics(facts).use_v2_model_runner is None, version
