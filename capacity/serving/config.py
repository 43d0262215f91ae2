"""The `vllm serve` knobs the plan depends on, with vLLM 0.33's names and defaults.

`ServingArgs` holds what the user gave (None = let vLLM choose); `resolve_serving` applies vLLM's
defaulting rules for the target GPU and model and returns the concrete `ServingConfig`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from capacity.errors import BadInput
from capacity.gpu.catalog import Gpu
from capacity.kv.layers import DTYPE_BYTES
from capacity.model.spec import ModelSpec
from capacity.serving.lora import LoraArgs, LoraConfig, refuse_lora_with_speculation, resolve_lora
from capacity.serving.pipeline import pipeline_stages
from capacity.units import COUNT_FORMS, MAX_MODEL_LEN_FORMS, SIZE_FORMS, GiB, parse_human_int
from capacity.user_files import json_object, read_text

DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # CacheConfig.gpu_memory_utilization (0.33)
DEFAULT_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE; FlashAttention keeps 16
DEFAULT_LIMIT_PER_PROMPT = 999  # MultiModalConfig.get_limit_per_prompt for an unset modality
# vLLM's UsageContext, lower-cased: `vllm serve`, the offline LLM class, and the two that EngineArgs.get_batch_defaults
# has no default for, so they keep SchedulerConfig's: `vllm run-batch` and an engine built directly
# (LLMEngine / AsyncLLMEngine.from_engine_args: Ray Data, Triton's vLLM backend, custom servers).
USAGE_CONTEXTS = ("openai_api_server", "llm_class", "openai_batch_runner", "engine_context")
BATCH_DEFAULT_CONTEXTS = ("openai_api_server", "llm_class")  # the contexts get_batch_defaults lists
SCHEDULER_DEFAULTS = (2048, 128)  # SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS (0.8.5-0.33.0 read)
MODELLED_KV_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
MODEL_DTYPES = ("auto", "float16", "bfloat16", "float32", "half", "float")


@dataclass(frozen=True)
class ServingArgs:
    """Knobs as the user gave them; None means vLLM's default."""

    gpu_memory_utilization: float | None = None
    block_size: int | None = None
    max_model_len: int | None = None  # -1 = auto-fit to memory
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    limit_mm_per_prompt: dict[str, int] | None = None
    # --language-model-only: vLLM's MultiModalConfig.get_limit_per_prompt returns 0 for every modality (whatever
    # --limit-mm-per-prompt says), so no encoder budget and every tower left out (_mark_tower_model)
    language_model_only: bool = False
    mm_processor_kwargs: dict[str, Any] | None = None  # --mm-processor-kwargs (capacity.model.processor_kwargs)
    hf_overrides: dict[str, Any] | None = None  # --hf-overrides, written over config.json (capacity.model.hf_overrides)
    num_speculative_tokens: int = 0
    tensor_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    # --pipeline-parallel-size: decoder layers split over PP stages (capacity/serving/pipeline.py); above 1 refused
    # until each stage is planned as its own worker (issue 27)
    pipeline_parallel_size: int = 1
    pp_layer_partition: str | None = None  # vLLM's VLLM_PP_LAYER_PARTITION ("a,b,..."): layers per stage
    enable_expert_parallel: bool = False  # --enable-expert-parallel: MoE experts divided over the TP (x DP) ranks
    # --data-parallel-size: engines, each planned as one (capacity/serving/data_parallel.py); the MoE layers' ranks are tp x dp
    data_parallel_size: int = 1
    node: str | None = None  # a node type of capacity/gpu/nodes.json ("8x H200"): GPUs per node and the links
    gpus_per_node: int | None = None  # nodes of this many --gpu GPUs (the catalog GPU's own link inside a node)
    allow_tp_across_nodes: bool = False  # plan a TP group that spans nodes (refused otherwise, as vLLM warns)
    kv_cache_dtype: str = "auto"
    kv_cache_memory_bytes: int | None = None
    dtype: str = "auto"
    enforce_eager: bool = False
    compile_cache: str = "warm"  # the torch.compile cache the start finds: "warm" or "cold" (capacity.memory.compile_cache)
    usage_context: str = "openai_api_server"  # `vllm serve`; "llm_class" for the offline LLM class; USAGE_CONTEXTS
    enable_prefix_caching: bool | None = None  # None: vLLM's default (on, except for encoder-decoder models)
    revision: str | None = None  # `vllm serve --revision`: the Hub revision of --model (resolution only, no memory effect)
    # LoRA (capacity/serving/lora.py): the stacked adapter buffers vLLM allocates (capacity/memory/lora.py)
    enable_lora: bool = False
    max_loras: int | None = None
    max_lora_rank: int | None = None
    max_cpu_loras: int | None = None
    lora_dtype: str | None = None
    fully_sharded_loras: bool = False
    lora_extra_vocab_size: int | None = None  # vLLM 0.8-0.11 only: the planner refuses it for later releases

    def lora_args(self) -> LoraArgs:
        return LoraArgs(
            enable_lora=self.enable_lora,
            max_loras=self.max_loras,
            max_lora_rank=self.max_lora_rank,
            max_cpu_loras=self.max_cpu_loras,
            lora_dtype=self.lora_dtype,
            fully_sharded_loras=self.fully_sharded_loras,
            lora_extra_vocab_size=self.lora_extra_vocab_size,
        )


@dataclass(frozen=True)
class ServingConfig:
    """Concrete knobs after vLLM's defaulting; `defaulted` names those vLLM chose."""

    gpu_memory_utilization: float
    block_size: int
    max_model_len: int
    auto_fit_max_model_len: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    limit_mm_per_prompt: dict[str, int]
    num_speculative_tokens: int
    tensor_parallel_size: int
    decode_context_parallel_size: int
    kv_cache_dtype: str
    kv_cache_dtype_bytes: int
    kv_cache_memory_bytes: int | None
    dtype: str
    dtype_bytes: int
    enforce_eager: bool
    usage_context: str
    enable_chunked_prefill: bool
    disable_chunked_mm_input: bool
    enable_expert_parallel: bool = False
    enable_prefix_caching: bool = True  # hybrid Mamba models then keep Mamba state in "align" mode
    mm_processor_kwargs: dict[str, Any] = field(default_factory=dict)  # applied to the model's processor configs
    hf_overrides: dict[str, Any] = field(default_factory=dict)  # applied to config.json (to_dict leaves it out when empty)
    language_model_only: bool = False  # every limit above is then 0
    compile_cache: str = "warm"  # "cold": the first start, whose profile holds the compile's scratch
    lora: LoraConfig | None = None  # --enable-lora and its knobs; None: LoRA off (the key is then left out of to_dict)
    pipeline_parallel_size: int = 1  # stages planned as workers: capacity/planning/stages.py
    pp_layer_partition: str | None = None  # VLLM_PP_LAYER_PARTITION, checked (capacity/serving/pipeline.py)
    defaulted: tuple[str, ...] = field(default=())
    # data parallelism and nodes (capacity/serving/data_parallel.py); written by to_dict only when given
    data_parallel_size: int = 1
    node: str | None = None
    gpus_per_node: int | None = None
    allow_tp_across_nodes: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.lora is None:
            del out["lora"]
        if not self.hf_overrides:
            del out["hf_overrides"]
        for key, default in _PLACEMENT_DEFAULTS.items():
            if out[key] == default:
                del out[key]
        return out

    def as_args(self) -> ServingArgs:
        """The knobs as given: what resolve_serving turns back into this config (vLLM's choices left to it)."""
        chosen = set(self.defaulted)

        def given(name: str, value: Any) -> Any:
            return None if name in chosen else value

        return ServingArgs(
            gpu_memory_utilization=given("gpu_memory_utilization", self.gpu_memory_utilization),
            block_size=given("block_size", self.block_size),
            max_model_len=-1 if self.auto_fit_max_model_len else given("max_model_len", self.max_model_len),
            max_num_seqs=given("max_num_seqs", self.max_num_seqs),
            max_num_batched_tokens=given("max_num_batched_tokens", self.max_num_batched_tokens),
            limit_mm_per_prompt=dict(self.limit_mm_per_prompt),
            language_model_only=self.language_model_only,
            mm_processor_kwargs=dict(self.mm_processor_kwargs) or None,
            hf_overrides=dict(self.hf_overrides) or None,
            num_speculative_tokens=self.num_speculative_tokens,
            tensor_parallel_size=self.tensor_parallel_size,
            decode_context_parallel_size=self.decode_context_parallel_size,
            kv_cache_dtype=self.kv_cache_dtype,
            kv_cache_memory_bytes=self.kv_cache_memory_bytes,
            dtype=self.dtype,
            enforce_eager=self.enforce_eager,
            compile_cache=self.compile_cache,
            enable_expert_parallel=self.enable_expert_parallel,
            enable_prefix_caching=given("enable_prefix_caching", self.enable_prefix_caching),
            usage_context=self.usage_context,
            **lora_given(self.lora),
            data_parallel_size=self.data_parallel_size,
            node=self.node,
            gpus_per_node=self.gpus_per_node,
            allow_tp_across_nodes=self.allow_tp_across_nodes,
            pipeline_parallel_size=self.pipeline_parallel_size,
            pp_layer_partition=self.pp_layer_partition,
        )

    def knob_items(self) -> list[tuple[str, Any, bool]]:
        """(knob, value, chosen by vLLM's defaults) for every knob, as reports list them."""
        defaulted = set(self.defaulted)
        return [(key, value, key in defaulted) for key, value in self.to_dict().items() if key != "defaulted"]


def lora_given(lora: LoraConfig | None) -> dict[str, Any]:
    """The ServingArgs fields that give `lora` back (none when LoRA is off)."""
    if lora is None:
        return {}
    return {
        "enable_lora": True,
        "max_loras": lora.max_loras,
        "max_lora_rank": lora.max_lora_rank,
        "max_cpu_loras": lora.max_cpu_loras,
        "lora_dtype": lora.lora_dtype,
        "fully_sharded_loras": lora.fully_sharded_loras,
    }


# left out of to_dict at their defaults: a single-engine, single-stage plan's JSON is as before they existed
_PLACEMENT_DEFAULTS: dict[str, Any] = {"data_parallel_size": 1, "node": None, "gpus_per_node": None, "allow_tp_across_nodes": False, "pipeline_parallel_size": 1, "pp_layer_partition": None}


def batch_defaults(gpu: Gpu, usage_context: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) before model rules (vLLM: EngineArgs.get_batch_defaults, whose tables
    list `vllm serve` and the LLM class; any other context takes SchedulerConfig's defaults)."""
    if usage_context not in BATCH_DEFAULT_CONTEXTS:
        return SCHEDULER_DEFAULTS
    api = usage_context == "openai_api_server"
    memory = gpu.total_memory_bytes
    if memory >= 160 * GiB:
        return 16384, 1024
    if memory >= 70 * GiB and "a100" not in gpu.name.lower() and "gb10" not in gpu.name.lower():
        return (8192 if api else 16384), 1024
    return (2048 if api else 8192), 256


def model_dtype(spec: ModelSpec, requested: str) -> str:
    """vLLM's --dtype: "auto" keeps a 16-bit checkpoint dtype and downcasts float32 to bfloat16."""
    aliases = {"half": "float16", "float": "float32"}
    requested = aliases.get(requested, requested)
    if requested != "auto":
        return requested
    return "bfloat16" if spec.config_dtype not in ("float16", "bfloat16") else spec.config_dtype


def _check_args(args: ServingArgs) -> None:
    util = args.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise BadInput(f"--gpu-memory-utilization must be in (0, 1], got {util}")
    positive = {
        "--block-size": args.block_size,
        "--max-num-seqs": args.max_num_seqs,
        "--max-num-batched-tokens": args.max_num_batched_tokens,
        "--kv-cache-memory-bytes": args.kv_cache_memory_bytes,
    }
    for flag, value in positive.items():
        if value is not None and value <= 0:
            raise BadInput(f"{flag} must be a positive integer, got {value}")
    if args.max_model_len is not None and args.max_model_len != -1 and args.max_model_len <= 0:
        raise BadInput(f"--max-model-len must be positive (or -1 / auto to fit memory), got {args.max_model_len}")
    if args.num_speculative_tokens < 0:
        raise BadInput(f"--num-speculative-tokens must be >= 0, got {args.num_speculative_tokens}")
    if args.tensor_parallel_size < 1:
        raise BadInput(f"--tensor-parallel-size must be >= 1, got {args.tensor_parallel_size}")
    if args.decode_context_parallel_size < 1:
        raise BadInput(f"--decode-context-parallel-size must be >= 1, got {args.decode_context_parallel_size}")
    if args.pipeline_parallel_size < 1:
        raise BadInput(f"--pipeline-parallel-size must be >= 1, got {args.pipeline_parallel_size}")
    if args.data_parallel_size < 1:
        raise BadInput(f"--data-parallel-size must be >= 1, got {args.data_parallel_size}")
    if args.kv_cache_dtype not in MODELLED_KV_DTYPES:
        raise BadInput(f"--kv-cache-dtype {args.kv_cache_dtype!r} is not modelled; use one of {', '.join(MODELLED_KV_DTYPES)}")
    if args.dtype not in MODEL_DTYPES:
        raise BadInput(f"--dtype {args.dtype!r} is not one of {', '.join(MODEL_DTYPES)}")
    if args.usage_context not in USAGE_CONTEXTS:
        raise BadInput(f"usage context {args.usage_context!r} is not one of {', '.join(USAGE_CONTEXTS)}")
    for modality, limit in (args.limit_mm_per_prompt or {}).items():
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise BadInput(f"--limit-mm-per-prompt {modality}={limit!r}: limits are integers >= 0")


def refuse_unmodelled(spec: ModelSpec, limits: dict[str, int]) -> None:
    """A modality whose item tokens capacity cannot count is refused while vLLM would budget it (limit > 0)."""
    for modality in spec.modalities:
        if modality.unmodelled and limits.get(modality.name, DEFAULT_LIMIT_PER_PROMPT) > 0:
            raise BadInput(
                f"{spec.name}: {modality.unmodelled}; vLLM budgets {modality.name} items, which capacity cannot count: "
                f"plan with --limit-mm-per-prompt {modality.name}=0 (vLLM then budgets no {modality.name}) or --language-model-only"
            )


def refuse_unplanned_pipeline(args: ServingArgs, spec: ModelSpec) -> None:
    """--pipeline-parallel-size and VLLM_PP_LAYER_PARTITION: the split checked as vLLM's get_pp_indices checks it;
    encoder-decoder models refused (their stages are not modelled). What else a stage plan cannot model is refused
    by capacity/planning/stages.py."""
    pp = args.pipeline_parallel_size
    if pp > 1 and spec.is_encoder_decoder:
        raise BadInput(f"--pipeline-parallel-size {pp}: {spec.name} is an encoder-decoder model, whose pipeline stages capacity does not model; plan at --pipeline-parallel-size 1")
    if pp > 1 or args.pp_layer_partition is not None:
        pipeline_stages(spec.decoder.num_layers, pp, args.pp_layer_partition)  # BadInput where vLLM raises ValueError


def resolve_serving(args: ServingArgs, spec: ModelSpec, gpu: Gpu, base_batch: tuple[int, int] | None = None) -> ServingConfig:
    """Apply vLLM 0.33's defaults (EngineArgs._set_default_max_num_seqs_and_batched_tokens_args etc.).

    `base_batch`: (max_num_batched_tokens, max_num_seqs) before the model rules, when another vLLM version's
    `get_batch_defaults` differs from 0.33's (capacity.vllm.versions); None: 0.33's `batch_defaults`.
    """
    _check_args(args)
    refuse_unplanned_pipeline(args, spec)
    defaulted: list[str] = []
    known = {m.name for m in spec.modalities}
    for modality, limit in (args.limit_mm_per_prompt or {}).items():
        # vLLM reads the limits of the modalities the model supports only (allowed_mm_limits): another name is ignored.
        # A 0 there changes nothing; any other count is refused, as most likely a misspelt modality.
        if modality not in known and limit != 0:
            names = ", ".join(sorted(known)) or "none (text-only model)"
            raise BadInput(
                f"--limit-mm-per-prompt names '{modality}', which {spec.name} does not take; its modalities: {names} "
                "(vLLM would ignore it; drop it or give it 0)"
            )

    auto_fit = args.max_model_len == -1
    if args.max_model_len is None or auto_fit:
        max_model_len = spec.derived_max_model_len
        defaulted.append("max_model_len")
    else:
        max_model_len = args.max_model_len

    # Encoder-decoder models force chunked prefill off and chunked MM input off.
    chunked_prefill = not spec.is_encoder_decoder
    base_tokens, base_seqs = base_batch if base_batch is not None else batch_defaults(gpu, args.usage_context)
    max_num_seqs = args.max_num_seqs if args.max_num_seqs is not None else base_seqs
    if args.max_num_batched_tokens is not None:
        max_num_batched_tokens = args.max_num_batched_tokens
    else:
        max_num_batched_tokens = base_tokens
        if not chunked_prefill:
            max_num_batched_tokens = max(max_model_len, max_num_batched_tokens)
        max_num_batched_tokens = min(max_num_seqs * max_model_len, max_num_batched_tokens)
        defaulted.append("max_num_batched_tokens")
    if args.max_num_seqs is None:
        max_num_seqs = min(max_num_seqs, max_num_batched_tokens)
        defaulted.append("max_num_seqs")

    dtype = model_dtype(spec, args.dtype)
    kv_dtype = dtype if args.kv_cache_dtype == "auto" else args.kv_cache_dtype
    limits = {m.name: DEFAULT_LIMIT_PER_PROMPT for m in spec.modalities}
    limits.update(args.limit_mm_per_prompt or {})
    if args.language_model_only:
        limits = {m.name: 0 for m in spec.modalities}  # MultiModalConfig.get_limit_per_prompt: 0 for every modality
    refuse_unmodelled(spec, limits)
    if args.gpu_memory_utilization is None:
        defaulted.append("gpu_memory_utilization")
    if args.block_size is None:
        defaulted.append("block_size")
    # ModelConfig.is_prefix_caching_supported: generative decoder and hybrid models yes, encoder-decoder no.
    prefix_caching = not spec.is_encoder_decoder if args.enable_prefix_caching is None else args.enable_prefix_caching and not spec.is_encoder_decoder
    if args.enable_prefix_caching is None:
        defaulted.append("enable_prefix_caching")
    lora = resolve_lora(args.lora_args(), dtype, args.tensor_parallel_size)
    refuse_lora_with_speculation(lora, max_num_batched_tokens, max_num_seqs, args.num_speculative_tokens)
    return ServingConfig(
        gpu_memory_utilization=args.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION,
        block_size=args.block_size or DEFAULT_BLOCK_SIZE,
        max_model_len=max_model_len,
        auto_fit_max_model_len=auto_fit,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        limit_mm_per_prompt=limits,
        language_model_only=args.language_model_only,
        num_speculative_tokens=args.num_speculative_tokens,
        tensor_parallel_size=args.tensor_parallel_size,
        decode_context_parallel_size=args.decode_context_parallel_size,
        kv_cache_dtype=args.kv_cache_dtype,
        kv_cache_dtype_bytes=DTYPE_BYTES[kv_dtype],
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        dtype=dtype,
        dtype_bytes=DTYPE_BYTES[dtype],
        enforce_eager=args.enforce_eager,
        usage_context=args.usage_context,
        enable_chunked_prefill=chunked_prefill,
        disable_chunked_mm_input=spec.is_encoder_decoder,
        enable_expert_parallel=args.enable_expert_parallel,
        enable_prefix_caching=prefix_caching,
        mm_processor_kwargs=dict(args.mm_processor_kwargs or {}),
        hf_overrides=dict(args.hf_overrides or {}),
        compile_cache=compile_cache_state(args.compile_cache),
        lora=lora,
        pipeline_parallel_size=args.pipeline_parallel_size,
        pp_layer_partition=args.pp_layer_partition if args.pipeline_parallel_size > 1 else None,  # at PP 1 it can only name every layer
        defaulted=tuple(defaulted),
        data_parallel_size=args.data_parallel_size,
        node=args.node,
        gpus_per_node=args.gpus_per_node,
        allow_tp_across_nodes=args.allow_tp_across_nodes,
    )


def compile_cache_state(value: str) -> str:
    """--compile-cache: "warm" or "cold" (capacity.memory.compile_cache); BadInput for anything else."""
    if value not in ("warm", "cold"):
        raise BadInput(f"--compile-cache {value!r}: give warm (a restart with the same flags) or cold (the first start)")
    return value


# --- `vllm serve --config serve.yaml` -------------------------------------------------------------

_YAML_KEYS = {
    "gpu_memory_utilization": "gpu_memory_utilization",
    "device_memory_utilization": "gpu_memory_utilization",
    "block_size": "block_size",
    "max_model_len": "max_model_len",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "limit_mm_per_prompt": "limit_mm_per_prompt",
    "mm_processor_kwargs": "mm_processor_kwargs",
    "hf_overrides": "hf_overrides",
    "num_speculative_tokens": "num_speculative_tokens",
    "tensor_parallel_size": "tensor_parallel_size",
    "decode_context_parallel_size": "decode_context_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "kv_cache_dtype": "kv_cache_dtype",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "kv_cache_memory": "kv_cache_memory_bytes",
    "dtype": "dtype",
    "enforce_eager": "enforce_eager",
    "language_model_only": "language_model_only",
    "enable_expert_parallel": "enable_expert_parallel",
    "enable_prefix_caching": "enable_prefix_caching",
    "revision": "revision",
    "enable_lora": "enable_lora",
    "max_loras": "max_loras",
    "max_lora_rank": "max_lora_rank",
    "max_cpu_loras": "max_cpu_loras",
    "lora_dtype": "lora_dtype",
    "fully_sharded_loras": "fully_sharded_loras",
    "lora_extra_vocab_size": "lora_extra_vocab_size",
}
_SHORT_KEYS = {"tp": "tensor_parallel_size", "dcp": "decode_context_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size"}


def parse_limit_mm(value: Any, where: str) -> dict[str, int]:
    """`image=2,audio=1`, a JSON object string, or a mapping (YAML)."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, str) and value.strip().startswith("{"):
        items = json_object(value, where, "limit_mm_per_prompt", '{"image": 1}').items()
    elif isinstance(value, str):
        pairs = [p for p in value.split(",") if p.strip()]
        items = []
        for pair in pairs:
            if "=" not in pair:
                raise BadInput(f"{where}: limit_mm_per_prompt entry {pair!r} must be MODALITY=N, e.g. image=1")
            k, v = pair.split("=", 1)
            items.append((k.strip(), v.strip()))
    else:
        raise BadInput(f"{where}: limit_mm_per_prompt must be MODALITY=N pairs or a mapping")
    out: dict[str, int] = {}
    for k, v in items:
        if isinstance(v, dict):  # vLLM also accepts {"count": N, ...} per modality (BaseDummyOptions and subclasses)
            sizing = sorted(set(v) - {"count"})
            if sizing:
                raise BadInput(
                    f"{where}: limit_mm_per_prompt {k}: {', '.join(sizing)} (vLLM's dummy-item size options) not modelled: "
                    "capacity plans vLLM's default dummy items; give only the count, e.g. {\"" + str(k) + "\": {\"count\": 1}}"
                )
            v = v.get("count")
        try:
            out[str(k)] = int(v)
        except (TypeError, ValueError) as exc:
            raise BadInput(f"{where}: limit_mm_per_prompt {k}={v!r} is not an integer") from exc
    return out


def _int(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool):
        raise BadInput(f"{where}: {key} must be an integer, got {value!r}")
    if key == "max_model_len" and str(value).strip().lower() == "auto":
        return -1
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        forms = MAX_MODEL_LEN_FORMS if key == "max_model_len" else SIZE_FORMS if key.endswith("_bytes") else COUNT_FORMS
        return parse_human_int(value if isinstance(value, int) else str(value), f"{where}: {key}", forms)
    except BadInput:
        raise
    except ValueError as exc:
        raise BadInput(f"{where}: {key} must be an integer, got {value!r}") from exc


def _unique_key_loader() -> Any:
    """A yaml SafeLoader that refuses a key written twice in one mapping with different values (PyYAML keeps the last)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: dict[Any, tuple[Any, int]] = {}
            for key_node, value_node in node.value:
                key = self.construct_object(key_node, deep=True)
                value = self.construct_object(value_node, deep=True)
                line = key_node.start_mark.line + 1
                if isinstance(key, str) and key in seen and seen[key][0] != value:
                    raise DuplicateYamlKey(f"'{key}' is set twice, to {seen[key][0]!r} (line {seen[key][1]}) and to {value!r} (line {line})")
                if isinstance(key, str):
                    seen[key] = (value, line)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


class DuplicateYamlKey(Exception):
    """A key given twice with different values in one YAML mapping."""


def _yaml_value(target: str, raw_key: str, value: Any, where: str) -> Any:
    """One serve-YAML value converted to its ServingArgs field's type."""
    if target == "gpu_memory_utilization":
        try:
            return float(value)
        except (TypeError, ValueError) as exc:
            raise BadInput(f"{where}: {raw_key} must be a number, got {value!r}") from exc
    if target == "limit_mm_per_prompt":
        return parse_limit_mm(value, where)
    if target == "mm_processor_kwargs":
        from capacity.model.processor_kwargs import parse_mm_processor_kwargs

        return parse_mm_processor_kwargs(value, where)
    if target == "hf_overrides":
        from capacity.model.hf_overrides import parse_hf_overrides

        return parse_hf_overrides(value, where)
    if target in ("kv_cache_dtype", "dtype", "revision", "lora_dtype"):
        return str(value)
    if target in ("enforce_eager", "enable_expert_parallel", "enable_prefix_caching", "language_model_only", "enable_lora", "fully_sharded_loras"):
        if not isinstance(value, bool):
            raise BadInput(f"{where}: {raw_key} must be true or false, got {value!r}")
        return value
    return _int(value, target, where)


def load_serve_yaml(path: Path) -> tuple[dict[str, Any], str | None, list[str]]:
    """Read a `vllm serve --config` YAML: (ServingArgs fields, model named in it, keys capacity does not model).

    One option spelled two ways (`max-num-seqs` and `max_num_seqs`, `tp` and `tensor-parallel-size`) with
    different values is refused, naming both keys: vLLM would keep whichever its parser read last.
    """
    import yaml

    text = read_text(path, "--config")
    where = f"--config {path}"
    try:
        data = yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 (a SafeLoader subclass)
    except DuplicateYamlKey as exc:
        raise BadInput(f"{where}: {exc}; keep one") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise BadInput(f"--config {path} is not valid YAML{line}: fix the file") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BadInput(f"--config {path} must be a mapping of vllm serve options, e.g. 'max-model-len: 4096'")
    values: dict[str, Any] = {}
    given_by: dict[str, str] = {}  # field -> the YAML key that set it
    ignored: list[str] = []
    model: str | None = None

    def put(target: str, raw_key: str, value: Any) -> None:
        if target in values and values[target] != value:
            raise BadInput(
                f"{where}: '{given_by[target]}' ({values[target]!r}) and '{raw_key}' ({value!r}) set the same option {target} to different values; keep one"
            )
        values[target] = value
        given_by.setdefault(target, raw_key)

    for raw_key, value in data.items():
        key = str(raw_key).lstrip("-").replace("-", "_")
        key = _SHORT_KEYS.get(key, key)
        if key == "model":
            if model is not None and model != str(value):
                raise BadInput(f"{where}: the model is given twice, as {model!r} and {str(value)!r}; keep one")
            model = str(value)
            continue
        target = _YAML_KEYS.get(key)
        if target is None:
            if key == "speculative_config" and isinstance(value, dict) and "num_speculative_tokens" in value:
                nested = f"{raw_key}.num_speculative_tokens"
                put("num_speculative_tokens", nested, _int(value["num_speculative_tokens"], "num_speculative_tokens", where))
            else:
                ignored.append(str(raw_key))
            continue
        put(target, str(raw_key), _yaml_value(target, str(raw_key), value, where))
    return values, model, ignored
