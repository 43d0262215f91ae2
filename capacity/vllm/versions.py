"""What changed between vLLM releases in the figures a startup log prints: one `VllmSemantics` per range of versions.

capacity plans vLLM 0.33 (Model Runner V2). A log of another version is compared with a plan made under *that*
version's rules where they change the numbers: the default `gpu_memory_utilization`, whether the CUDA-graph
estimate is taken out of the KV budget, the batch defaults per GPU and usage context, and how cross-attention is
charged per request. `capacity reconcile` and `bench/predict_logs.py` both take their semantics from here.

Each range's fields, and the wheels, logs and measurements they were read from: bench/vllm_versions/SOURCES.md.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from capacity.errors import BadInput
from capacity.gpu.catalog import Gpu
from capacity.model.spec import ModelSpec
from capacity.serving.config import BATCH_DEFAULT_CONTEXTS, DEFAULT_GPU_MEMORY_UTILIZATION, SCHEDULER_DEFAULTS, ServingArgs
from capacity.units import GiB

ENCODER_LENGTH = "encoder length"
# Which model runner a version picks by default (VllmConfig.use_v2_model_runner with VLLM_USE_V2_MODEL_RUNNER unset)
MRV2_NEVER = "never"  # 0.20.0, 0.21.0: VLLM_USE_V2_MODEL_RUNNER defaults to 0 (0.22 not read)
MRV2_LISTED = "listed"  # 0.23.0: DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, not MoE, not quantized
MRV2_LISTED_ANY = "listed, any"  # 0.24.0: DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, MoE and quantized too
MRV2_DENSE = "dense"  # 0.25.0 to 0.28.0: listed architectures, or any generate model that is not MoE (hybrid: listed only)
MRV2_ALL = "all"  # 0.29.0 to 0.33.0
MRV2_ENV_FROM = (0, 20)  # VLLM_USE_V2_MODEL_RUNNER, read first by VllmConfig.use_v2_model_runner (0.20.0 to 0.33.0)
MRV2_ARCHITECTURES_0_23 = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"})  # 0.23.0 vllm/config/vllm.py
MRV2_ARCHITECTURES_0_24 = frozenset(
    {"Qwen3ForCausalLM", "DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM", "LlamaForCausalLM", "MistralForCausalLM"}
)  # 0.24.0 vllm/config/vllm.py
MRV2_ARCHITECTURES_0_27 = frozenset(
    {
        "DeepseekV2ForCausalLM",
        "GraniteMoeForCausalLM",
        "InklingForCausalLM",
        "InklingForConditionalGeneration",
        "KimiK3ForConditionalGeneration",
        "LongcatFlashNgramForCausalLM",
        "Qwen2MoeForCausalLM",
    }
)  # 0.27.1 vllm/config/vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES
MAX_NUM_BATCHED_TOKENS = "max_num_batched_tokens"


@dataclass(frozen=True)
class VllmSemantics:
    """The rules of one range of vLLM versions that change the memory figures of a startup."""

    name: str  # "0.20-0.26"
    first: tuple[int, int]  # first (major, minor) of the range
    engine: str  # "V0", "V1" (GPU model runner) or "MRV2"
    default_gpu_memory_utilization: float
    subtracts_cudagraph_estimate: bool  # the KV budget is requested - non-KV - CUDA-graph estimate
    batch_tier_160gib: bool  # >= 160 GiB GPUs get 16384 tokens / 1024 sequences in both usage contexts
    cross_attention_per_request: str  # ENCODER_LENGTH or MAX_NUM_BATCHED_TOKENS
    non_kv_formula: str
    plannable: bool = True
    why_not_plannable: str = ""
    whole_prompt_batches: bool = False  # V0 without chunked prefill: max_num_batched_tokens = max(max_model_len, 2048), 256 seqs
    # SchedulerConfig.__post_init__ raised a defaulted max_num_batched_tokens to at least this for a multimodal model
    # (MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS: read in 0.8.5, 0.9.2, 0.10.2 and 0.11.0; gone in 0.12.0): it applied where
    # get_batch_defaults set none, a usage context outside its tables (capacity.serving.config.SCHEDULER_DEFAULTS)
    scheduler_multimodal_batched_tokens: int | None = None
    long_context_chunking: int | None = None  # V0: above this max_model_len chunked prefill is on by default
    # profile_run's _dummy_sampler_run runs a second sampler pass with SamplingParams.for_sampler_warmup() (0.33.0;
    # 0.29.0-0.32.0 MRV2 wheels run the default pass only, under "NOTE(woosuk): ... the sampler may skip top_k,
    # top_p, and logprobs"); False keeps capacity's earlier sampler form (capacity.memory.sampler.SamplerForm)
    sampler_warmup_pass: bool = False
    # Qwen2-VL / Qwen2.5-VL vision towers build a get_rope cos_sin_cache (8192 positions) at load: read in 0.21.0,
    # 0.23.0, 0.24.0, 0.27.1 and 0.33.0; 0.9.0.1 keeps an inv_freq only (0.12-0.19 not read: taken as the older form)
    vision_rope_cache: bool = True
    # Which model runner vLLM picks by default (VllmConfig.use_v2_model_runner with VLLM_USE_V2_MODEL_RUNNER unset):
    # MRV2_NEVER, MRV2_LISTED, MRV2_DENSE or MRV2_ALL (see runs_mrv2)
    mrv2_default: str = MRV2_ALL
    # Model Runner V2 measures its graphs before the KV cache is sized (cudagraph_utils.profile_cudagraph_memory, 0.29.0+);
    # 0.23.0 to 0.28.0's MRV2 profile_cudagraph_memory returns 0
    mrv2_cudagraph_estimate: bool = True
    # The V1 worker takes its startup memory snapshot before init_worker_distributed_environment (0.9.2, 0.10.2): NCCL's
    # communicators and vLLM's all-reduce buffers then count as non-torch growth, inside the non-KV memory; from 0.11.0
    # the snapshot follows them (as in 0.33), so they sit outside it
    communicators_in_non_kv: bool = False
    # CompilationConfig sets Inductor's combo_kernels and benchmark_combo_kernel when torch >= 2.9 (0.12.0 pins torch
    # 2.9.0; 0.11.0's compilation.py has no such line): a cold compile then benchmarks the embedding's kernel on
    # random copies of its arguments (capacity/memory/compile_cache.py)
    benchmarks_combo_kernels: bool = True
    # determine_available_memory profiles CUDA graphs on ROCm too (is_cuda_alike: 0.27.1, 0.28.0, 0.33.0); 0.23.0 asks
    # current_platform.is_cuda(), so on ROCm its estimate is 0
    cudagraph_estimate_on_rocm: bool = True
    # The V1 model runner's dummy sampler run (GPUModelRunner._dummy_sampler_run, inside profile_run's peak) on
    # min(max_num_seqs, max_num_batched_tokens) rows with top_k vocab - 1 and top_p 0.9. `native_top_k_top_p`: what
    # TopKTopPSampler.forward_native masks with on CUDA (apply_top_k_top_p: "sort" through 0.15.1, "triton" from 0.18.0
    # for 8 rows or more); `flashinfer_sampler_by_default`: a plain `pip install vllm==X` samples through FlashInfer on
    # a FlashInfer GPU (VLLM_USE_FLASHINFER_SAMPLER unset); `warms_native_sampler`: the run calls the sampler again with
    # a generator, which takes forward_native (0.24.0, 0.27.1); `use_flashinfer_sampler`: the env var as a log states
    # it, or as its sampler warning implies (None: the version's default)
    native_top_k_top_p: str = "triton"
    flashinfer_sampler_by_default: bool = True
    warms_native_sampler: bool = True
    use_flashinfer_sampler: bool | None = None
    # The batches a sliding-window or chunked-local layer reserves KV for beyond its window: 0.27.1+ size it by
    # VllmConfig.max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens (2 batches with async
    # scheduling; 0.26.0 too); 0.23.0, 0.24.0 and 0.25.0's SlidingWindowSpec.max_memory_usage_bytes read
    # scheduler_config.max_num_batched_tokens (one batch); earlier versions are taken as them
    window_batches: int = 2
    # The release a plan was asked for (`--vllm-version 0.10.2`): which flags its `vllm serve` line may use
    # (capacity.vllm.serve_flags); "" for a range's rules read from a log
    release: str = ""
    # VLLM_USE_V1=1 was given for a 0.8 release: 0.8 runs LoRA on its V0 engine without it (arg_utils' V1 oracle)
    v1_by_env: bool = False
    # VLLM_USE_V2_MODEL_RUNNER as the start set it (None: the release's default model runner; see with_model_runner_env)
    use_v2_model_runner: bool | None = None
    # The V0 engine's memory_profiling (0.6.5 to 0.10.2): its non-torch figure is the growth since a baseline taken
    # after the CUDA context (capacity.memory.non_torch.V0_NON_TORCH_BYTES); 0.6.4's worker counted all non-torch memory
    v0_memory_profiling: bool = False
    # Worker.init_device creates the cuBLAS / cuBLASLt handles before the baseline snapshot ("so they count as baseline
    # like the NCCL buffers": read in 0.33.0; 0.29.0, 0.30.0 and 0.32.0 do not, so there they grow in the profile run)
    cublas_handles_before_snapshot: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def model_spec(self, spec: ModelSpec) -> ModelSpec:
        """`spec` with the max_model_len this version derives (vLLM _get_and_verify_max_len): up to 0.29 a YaRN RoPE's
        length is its original_max_position_embeddings x factor (ModelSpec.derived_max_model_len_before_0_30). The
        release when one is named, else the range's first version (a 0.29-0.32 log without one is read as 0.29)."""
        before = spec.derived_max_model_len_before_0_30
        named = release_tuple(self.release) if self.release else None
        if before is None or (named[:2] if named else self.first) >= (0, 30):
            return spec
        key = "the RoPE-scaled length of vLLM 0.29 and earlier"
        return replace(spec, derived_max_model_len=before, max_len_key=key, derived_max_model_len_before_0_30=None)

    def runs_mrv2(self, architecture: str, *, moe: bool, quantized: bool, hybrid: bool) -> bool:
        """Whether this version runs Model Runner V2 by default for the model (VllmConfig.use_v2_model_runner,
        _is_default_v2_model_runner_model; features that force a fallback, e.g. custom logits processors, aside)."""
        if self.use_v2_model_runner is not None:
            return self.use_v2_model_runner
        if self.mrv2_default == MRV2_NEVER:
            return False
        if self.mrv2_default == MRV2_LISTED:  # 0.23.0: the architecture list, not MoE, not quantized
            return architecture in MRV2_ARCHITECTURES_0_23 and not moe and not quantized
        if self.mrv2_default == MRV2_LISTED_ANY:  # 0.24.0: the (longer) list alone
            return architecture in MRV2_ARCHITECTURES_0_24
        if self.mrv2_default == MRV2_DENSE:  # 0.27.1, 0.28.0: listed, or not MoE; hybrid only when listed
            listed = architecture in MRV2_ARCHITECTURES_0_27
            return listed or (not moe and not hybrid)
        return True

    def v1_top_k_top_p(self, gpu: Gpu) -> tuple[str, ...]:
        """The top-k/top-p paths the V1 runner's dummy sampler run takes on `gpu` (its peak is the larger):
        FlashInfer where it is on and FlashInferBackend supports the GPU (CUDA, SM 8.0 to 12.x), else forward_native."""
        flashinfer = self.flashinfer_sampler_by_default if self.use_flashinfer_sampler is None else self.use_flashinfer_sampler
        if flashinfer and gpu.platform == "cuda" and 8 <= gpu.compute_capability_major <= 12:
            return ("flashinfer", self.native_top_k_top_p) if self.warms_native_sampler else ("flashinfer",)
        return (self.native_top_k_top_p,)

    def with_flashinfer_sampler(self, used: bool | None) -> VllmSemantics:
        """These rules with FlashInfer's sampler on or off as a log shows it (None: unchanged)."""
        return self if used is None else replace(self, use_flashinfer_sampler=used)

    def with_model_runner_env(self, value: str | None) -> VllmSemantics:
        """These rules with VLLM_USE_V2_MODEL_RUNNER set to `value` (envs.py: bool(int(value)); it comes first in
        VllmConfig.use_v2_model_runner from 0.20.0). Before 0.20 vLLM has no such variable; from 0.29 capacity models
        Model Runner V2 only, so 0 is refused there."""
        if value is None or value.strip() == "" or self.engine == "V0" or self.first < MRV2_ENV_FROM:
            return self
        try:
            on = bool(int(value))
        except ValueError:
            raise BadInput(f"VLLM_USE_V2_MODEL_RUNNER={value!r}: vLLM reads it as an integer (0 or 1)") from None
        if self.engine == "MRV2" and not on:
            raise BadInput(f"VLLM_USE_V2_MODEL_RUNNER=0 with vLLM {self.name}: the V1 model runner after 0.28 is not modelled; unset it")
        return replace(self, use_v2_model_runner=on)

    def with_sampler_env(self, value: str | None) -> VllmSemantics:
        """These rules with VLLM_USE_FLASHINFER_SAMPLER set to `value` ("0" / "1", envs.py: bool(int(value)))."""
        if value is None:
            return self
        try:
            return replace(self, use_flashinfer_sampler=bool(int(value)))
        except ValueError:
            raise BadInput(f"VLLM_USE_FLASHINFER_SAMPLER={value!r}: vLLM reads it as an integer (0 or 1)") from None

    def batch_defaults(self, gpu: Gpu, usage_context: str) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) before model rules (EngineArgs.get_batch_defaults of the version; a
        usage context its tables do not list keeps SchedulerConfig's defaults)."""
        if self.whole_prompt_batches:
            return 2048, 256
        if usage_context not in BATCH_DEFAULT_CONTEXTS:
            return SCHEDULER_DEFAULTS
        api = usage_context == "openai_api_server"
        memory = gpu.total_memory_bytes
        if self.batch_tier_160gib and memory >= 160 * GiB:
            return 16384, 1024
        name = gpu.name.lower()
        if memory >= 70 * GiB and "a100" not in name and "gb10" not in name:
            return (8192 if api else 16384), 1024
        return (2048 if api else 8192), 256

    def v0_batched_tokens(self, max_model_len: int, *, multimodal: bool, sliding_window: bool, prefix_caching: bool) -> int:
        """V0's max_num_batched_tokens when the user sets none (SchedulerConfig.__post_init__, 0.6.6.post1): a whole
        prompt without chunked prefill; 2048 (5120 for multimodal models) when EngineArgs turned chunked prefill on
        for a context above 32K (no sliding window, no prefix caching)."""
        chunked = (
            self.long_context_chunking is not None and max_model_len > self.long_context_chunking and not sliding_window and not prefix_caching
        )
        tokens = 2048 if chunked else max(max_model_len, 2048)
        return max(tokens, 5120) if multimodal else tokens

    def serving_args(self, args: ServingArgs) -> ServingArgs:
        """The knobs as this version would have defaulted them where they differ from 0.33 (the utilization);
        the batch defaults go to `resolve_serving` through `batch_defaults`."""
        if args.gpu_memory_utilization is None and self.default_gpu_memory_utilization != LATEST_UTILIZATION:
            return replace(args, gpu_memory_utilization=self.default_gpu_memory_utilization)
        return args


LATEST_UTILIZATION = DEFAULT_GPU_MEMORY_UTILIZATION  # 0.33's


V0 = VllmSemantics(
    name="V0 engine",
    first=(0, 0),
    engine="V0",
    default_gpu_memory_utilization=0.9,
    subtracts_cudagraph_estimate=False,
    batch_tier_160gib=False,
    cross_attention_per_request=ENCODER_LENGTH,
    non_kv_formula="V0 worker: weights + PyTorch activation peak + non-torch memory",
    vision_rope_cache=False,
    mrv2_default=MRV2_NEVER,
    whole_prompt_batches=True,
    long_context_chunking=32768,
    benchmarks_combo_kernels=False,
    window_batches=1,
    v0_memory_profiling=True,
)
V0_MEMORY_PROFILING_FROM = (0, 6, 5)  # 0.6.5's worker.py profiles with memory_profiling; 0.6.4.post1's does not
V0_EARLY = replace(V0, v0_memory_profiling=False)  # 0.6.4 and older, and V0 logs in its 'Memory profiling results' format

# Each range is the one before it with what that release changed (the tables in the module docstring say where each
# change was read).
_V0_8 = VllmSemantics(
    name="0.8-0.10",
    first=(0, 8),
    engine="V1",
    default_gpu_memory_utilization=0.9,
    subtracts_cudagraph_estimate=False,
    batch_tier_160gib=False,
    cross_attention_per_request=ENCODER_LENGTH,
    non_kv_formula="weights + torch peak increase + non-torch increase",
    vision_rope_cache=False,
    mrv2_default=MRV2_NEVER,
    native_top_k_top_p="sort",
    flashinfer_sampler_by_default=False,  # used when installed, but no Requires-Dist (0.9.2; 0.10.2: an extra)
    warms_native_sampler=False,
    communicators_in_non_kv=True,
    benchmarks_combo_kernels=False,
    window_batches=1,
    scheduler_multimodal_batched_tokens=5120,
)
_V0_11 = replace(_V0_8, name="0.11", first=(0, 11), communicators_in_non_kv=False)  # snapshot after NCCL from 0.11.0
# 0.15.1: opt in with VLLM_USE_FLASHINFER_SAMPLER=1 (as 0.18.0, 0.19.1)
_V0_12 = replace(
    _V0_11,
    name="0.12-0.15",
    first=(0, 12),
    cross_attention_per_request=MAX_NUM_BATCHED_TOKENS,
    benchmarks_combo_kernels=True,
    scheduler_multimodal_batched_tokens=None,
)
_V0_16 = replace(_V0_12, name="0.16-0.19", first=(0, 16), native_top_k_top_p="triton")
_V0_20 = replace(
    _V0_16,
    name="0.20-0.22",
    first=(0, 20),
    default_gpu_memory_utilization=0.92,
    subtracts_cudagraph_estimate=True,
    non_kv_formula="weights + torch peak increase + non-torch increase + CUDA-graph estimate",
    vision_rope_cache=True,
    flashinfer_sampler_by_default=True,
    warms_native_sampler=True,
    cudagraph_estimate_on_rocm=False,
)
_V0_23 = replace(_V0_20, name="0.23", first=(0, 23), mrv2_default=MRV2_LISTED, mrv2_cudagraph_estimate=False)
_V0_24 = replace(_V0_23, name="0.24", first=(0, 24), mrv2_default=MRV2_LISTED_ANY)
# 0.25.0 and 0.26.0 (wheels read): Model Runner V2 for any generate model that is not MoE or hybrid, and for the listed
# MoE ones (DeepseekV2, Qwen2Moe, GraniteMoe; 0.26 adds two the catalog lacks). That is 0.27's MRV2_DENSE for every
# model (0.27 also runs a listed hybrid on MRV2; no listed architecture is hybrid). The MRV2 graph estimate is still 0,
# and the batch defaults have no 160 GiB tier.
_V0_25 = replace(_V0_24, name="0.25", first=(0, 25), mrv2_default=MRV2_DENSE)
# 0.26.0: SlidingWindowSpec reserves VllmConfig.max_in_flight_tokens (0.25.0: max_num_batched_tokens)
_V0_26 = replace(_V0_25, name="0.26", first=(0, 26), window_batches=2)
_V0_27 = replace(
    _V0_26,
    name="0.27-0.28",
    first=(0, 27),
    batch_tier_160gib=True,
    non_kv_formula="consumed (mem_get_info) + peak activation + CUDA-graph estimate (V1 runner; 0 under MRV2)",
    mrv2_default=MRV2_DENSE,
    cudagraph_estimate_on_rocm=True,
    window_batches=2,  # 0.27.1 SlidingWindowSpec.max_admission_blocks_per_request(max_in_flight_tokens)
)
_V0_29 = replace(
    _V0_27,
    name="0.29-0.32",
    first=(0, 29),
    engine="MRV2",
    non_kv_formula="consumed (mem_get_info) + peak activation + CUDA-graph estimate",
    mrv2_default=MRV2_ALL,
    mrv2_cudagraph_estimate=True,
)
_V0_33 = replace(
    _V0_29,
    name="0.33",
    first=(0, 33),
    non_kv_formula="consumed (mem_get_info) + transient peak + CUDA-graph estimate",
    sampler_warmup_pass=True,
    cublas_handles_before_snapshot=True,
    release="0.33.0",
)
_RANGES: tuple[VllmSemantics, ...] = (_V0_8, _V0_11, _V0_12, _V0_16, _V0_20, _V0_23, _V0_24, _V0_25, _V0_26, _V0_27, _V0_29, _V0_33)
LATEST = _RANGES[-1]  # capacity's default: vLLM 0.33.0 (capacity.VLLM_VERSION)
# The releases `--vllm-version` plans: V0 as read from 0.6.4 / 0.6.6.post1 (bench/vllm_versions/SOURCES.md) to 0.33.x
OLDEST_PLANNED = (0, 6)
NEWEST_PLANNED = LATEST.first


def version_tuple(version: str) -> tuple[int, int] | None:
    """(major, minor) of '0.15.1', '0.11.0+582e4e37.nv25.11', 'v0.21.1rc1.dev323', '0.15-0.20' (its first), or None."""
    m = re.match(r"v?(\d+)\.(\d+)", version.strip())
    return (int(m[1]), int(m[2])) if m else None


def semantics_for(version: str | None) -> VllmSemantics | None:
    """The semantics of a version string, or None when it names no version (capacity then uses 0.33's)."""
    v = version_tuple(version) if version else None
    if v is None:
        return None
    chosen = None
    for sem in _RANGES:
        if v >= sem.first:
            chosen = sem
    return chosen if chosen is not None else V0


def release_tuple(version: str) -> tuple[int, ...] | None:
    """The release's numbers, '0.10.2' -> (0, 10, 2), '0.9.0.1' -> (0, 9, 0, 1), '0.10' -> (0, 10, 0); None if not a version."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)((?:\.\d+)*)(?:\.?(?:post|rc|dev|a|b)\d*)*(?:\+[\w.]+)?", version.strip())
    if m is None:
        return None
    rest = tuple(int(x) for x in m[3].split(".") if x)
    return (int(m[1]), int(m[2]), *(rest or (0,)))


def planned_semantics(version: str, flag: str = "--vllm-version", use_v1: str | None = None) -> VllmSemantics:
    """The rules to plan vLLM `version` with, naming that release (the flags its serve line may use).

    BadInput, in one line naming the nearest release capacity plans: not a version, a release outside
    OLDEST_PLANNED..NEWEST_PLANNED (the newest is 0.33: a later release's rules are not read), or one whose rules
    say it cannot be planned. `use_v1`: the VLLM_USE_V1 environment variable (engine_semantics)."""
    numbers = release_tuple(version)
    if numbers is None:
        raise BadInput(f"{flag} {version!r}: not a vLLM release; give one such as 0.10.2 or 0.33.0 (capacity plans 0.6 to 0.33)")
    span = "capacity plans vLLM 0.6 to 0.33"
    if numbers[:2] > NEWEST_PLANNED:
        raise BadInput(f"{flag} {version}: vLLM after 0.33 is not modelled ({span}); the nearest it plans is 0.33.0")
    if numbers[:2] < OLDEST_PLANNED:
        raise BadInput(f"{flag} {version}: vLLM before 0.6 is not modelled ({span}); the nearest it plans is 0.6.0")
    sem = semantics_for(version)
    assert sem is not None  # a release tuple is a version
    if not sem.plannable:
        nearest = next(s for s in reversed(_RANGES) if s.plannable)
        raise BadInput(f"{flag} {version}: {sem.why_not_plannable}; the nearest release capacity plans is {nearest.first[0]}.{nearest.first[1]}")
    release = ".".join(str(n) for n in numbers)
    sem = engine_semantics(sem, numbers, use_v1, flag)
    if sem.engine == "V0" and numbers < V0_MEMORY_PROFILING_FROM:
        sem = V0_EARLY
    if sem.name == LATEST.name and release == LATEST.release:
        return LATEST
    return replace(sem, release=release)


V1_DEFAULT_FROM = (0, 8)  # VLLM_USE_V1 defaults to 1 (envs.py, 0.8.0 to 0.10.2)
V0_REMOVED_IN = (0, 11)  # 0.11.0's wheel has no vllm/worker/worker.py: the V0 engine is gone


def engine_semantics(sem: VllmSemantics, numbers: tuple[int, ...], use_v1: str | None, flag: str) -> VllmSemantics:
    """The engine VLLM_USE_V1 selects, as vLLM's envs.py reads it (`bool(int(os.getenv("VLLM_USE_V1", "1")))` in 0.8.0
    to 0.10.2): "0" runs the V0 engine in 0.8-0.10; unset or "1" keeps the release's default. V1 before 0.8 (opt-in)
    is not modelled; V0 after 0.10 does not exist."""
    if use_v1 is None or use_v1.strip() == "":
        return sem
    try:
        v1 = bool(int(use_v1))
    except ValueError:
        raise BadInput(f"VLLM_USE_V1={use_v1!r}: vLLM reads it as an integer (0 or 1); unset it or give 0 or 1") from None
    release = ".".join(str(n) for n in numbers)
    if not v1 and numbers[:2] >= V0_REMOVED_IN:
        raise BadInput(f"VLLM_USE_V1=0 with {flag} {release}: vLLM 0.11 removed the V0 engine; unset VLLM_USE_V1 or plan 0.10.2 or older")
    if v1 and numbers[:2] < V1_DEFAULT_FROM:
        raise BadInput(f"VLLM_USE_V1=1 with {flag} {release}: the V1 engine before 0.8 (opt-in) is not modelled; unset VLLM_USE_V1 or plan 0.8.0 or newer")
    if not v1:
        return V0
    return replace(sem, v1_by_env=True) if numbers[:2] < (0, 9) else sem


def all_semantics() -> tuple[VllmSemantics, ...]:
    return (V0_EARLY, V0, *_RANGES)


def log_semantics(facts: Any) -> VllmSemantics | None:
    """The semantics of a parsed log (`VllmLogFacts`): the V0 engine when its worker lines are there, else the
    version stated or guessed from the formats; None when neither tells."""
    if getattr(facts, "engine", None) == "V0":
        stated = release_tuple(facts.version) if getattr(facts, "version", None) else None
        early = getattr(facts, "v0_results_format", False) or (stated is not None and stated < V0_MEMORY_PROFILING_FROM)
        return V0_EARLY if early else V0
    sem = semantics_for(facts.version or facts.version_guess)
    if sem is None:
        return None
    sem = sem.with_flashinfer_sampler(getattr(facts, "flashinfer_sampler", None))
    runner = getattr(facts, "model_runner_v2", None)
    if runner is not None and sem.first >= MRV2_ENV_FROM and sem.engine == "V1":  # the runner the log's tags name (0.20-0.28)
        sem = replace(sem, use_v2_model_runner=runner)
    return sem
