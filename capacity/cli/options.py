"""The options the commands share: the serving knobs (one table, `SERVING_OPTIONS`, given to a command by
`serving_options`, which adds --no-cache), --model, --config, the output options, and the knobs turned into ServingArgs."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from copy import copy
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args

import typer

from capacity import disk_cache
from capacity.cli.help_layout import ReadableCommand
from capacity.errors import BadInput
from capacity.units import COUNT_FORMS, MAX_MODEL_LEN_FORMS, SIZE_FORMS, parse_human_int

MODEL_PANEL = "Model and GPU"
KNOBS_PANEL = "vLLM serving knobs"
OUTPUT_PANEL = "Output"

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="A folder with config.json, else a catalog id or alias, else a Hugging Face id (org/name) from the local HF cache, else from the Hub.",
        rich_help_panel=MODEL_PANEL,
    ),
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="A `vllm serve --config` YAML file; flags given here override it.", rich_help_panel=MODEL_PANEL)]
GpuOpt = Annotated[str | None, typer.Option(help="Target GPU: a catalog name (see `capacity gpus`) or its total memory (24GiB, 16000MiB); default: the local GPU, else H200.", rich_help_panel=MODEL_PANEL)]
CsvOpt = Annotated[
    Path | None,
    typer.Option("--csv", metavar="PATH", help="Write the tables as CSV: for a plan a folder with one <section>.csv per section, for a sweep one file.", rich_help_panel=OUTPUT_PANEL),
]
HtmlOpt = Annotated[Path | None, typer.Option("--html", metavar="PATH", help="Write a self-contained HTML report (no scripts, no network).", rich_help_panel=OUTPUT_PANEL)]
JsonOpt = Annotated[
    str | None,
    typer.Option("--json", metavar="[PATH]", help="--json alone: print JSON on stdout instead of the report; --json PATH: write it to PATH.", rich_help_panel=OUTPUT_PANEL),
]
EstimateOpt = Annotated[
    str | None,
    typer.Option(
        "--estimate",
        help="Without a GPU profile: 'trace' runs the real model's phases on fake tensors (default; CAPACITY_ESTIMATE sets another), 'formula' uses the quick formulas. Given (or CAPACITY_ESTIMATE), it is used even where a local GPU could be profiled.",
    ),
]

CPU_PROBE_HELP = (
    "Run every phase for real on the CPU, counting live tensor bytes (tests, dry runs of small models). The host memory and time "
    "are estimated first; above half the available memory or 5 minutes the run is refused (--force runs it)."
)
JSON_STDOUT = "-"
OfflineOpt = Annotated[bool, typer.Option("--offline", help="Never profile on a local GPU: plan from the config alone.")]
CpuProbeOpt = Annotated[bool, typer.Option("--cpu-probe", help=CPU_PROBE_HELP)]
NoCacheOpt = Annotated[
    bool,
    typer.Option(
        "--no-cache",
        help="Neither read nor write capacity's disk cache (traces, parameter tables of Hub models, processor counts): work everything out afresh. "
        "`capacity cache info` shows where it is.",
    ),
]
VllmVersionOpt = Annotated[
    str | None,
    typer.Option(
        "--vllm-version",
        help="The vLLM release to plan for (0.6 to 0.33; default 0.33.0): its defaults, budget rules and `vllm serve` flags.",
        rich_help_panel=MODEL_PANEL,
    ),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Run a --cpu-probe even above its host-memory and time limits.")]

# One option per ServingArgs field, in the order of `capacity plan --help` (--revision, which qualifies --model, follows it).
SERVING_OPTIONS: dict[str, Any] = {
    "gpu_memory_utilization": Annotated[float | None, typer.Option("--gpu-memory-utilization", help="Fraction of GPU memory vLLM may use (vLLM default 0.92).")],
    "block_size": Annotated[int | None, typer.Option("--block-size", help="KV block size in tokens (default 16).")],
    "max_model_len": Annotated[str | None, typer.Option(help="Decoder context length; 'auto' or -1 fits it to memory.")],
    "max_num_seqs": Annotated[int | None, typer.Option(help="Max concurrent sequences (default by GPU memory).")],
    "max_num_batched_tokens": Annotated[str | None, typer.Option("--max-num-batched-tokens", help="Tokens per scheduler step (default by GPU memory and model).")],
    "limit_mm_per_prompt": Annotated[str | None, typer.Option("--limit-mm-per-prompt", help="Items per prompt, e.g. image=1 or '{\"image\": 1}'.")],
    "mm_processor_kwargs": Annotated[
        str | None,
        typer.Option(
            "--mm-processor-kwargs",
            help=(
                "vLLM's HF processor overrides as JSON, e.g. '{\"max_pixels\": 1003520}' (modelled: the Qwen-VL size keys, Gemma-4's "
                "max_soft_tokens, Gemma-3's do_pan_and_scan / pan_and_scan_*, InternVL's min/max_dynamic_patch, dynamic_image_size, "
                "use_thumbnail; others are refused)."
            ),
        ),
    ],
    "hf_overrides": Annotated[
        str | None,
        typer.Option(
            "--hf-overrides",
            help=(
                "vLLM's config.json overrides as JSON, e.g. '{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                "\"original_max_position_embeddings\": 32768}}' (vLLM 0.10's --rope-scaling X is '{\"rope_scaling\": X}')."
            ),
        ),
    ],
    "num_speculative_tokens": Annotated[int | None, typer.Option("--num-speculative-tokens", help="Speculative tokens per step (k).")],
    "tensor_parallel_size": Annotated[int | None, typer.Option("--tensor-parallel-size", "-tp", help="Tensor-parallel ranks.")],
    "decode_context_parallel_size": Annotated[int | None, typer.Option("--decode-context-parallel-size", "-dcp", help="Decode context parallel size.")],
    "pipeline_parallel_size": Annotated[
        int | None,
        typer.Option("--pipeline-parallel-size", "-pp", help="Pipeline-parallel stages (vLLM's layer split is checked; above 1 not planned yet)."),
    ],
    "pp_layer_partition": Annotated[
        str | None,
        typer.Option(
            "--pp-layer-partition",
            envvar="VLLM_PP_LAYER_PARTITION",
            help="Decoder layers per pipeline stage, e.g. 38,42 (vLLM's VLLM_PP_LAYER_PARTITION, read from the environment when not given).",
        ),
    ],
    "data_parallel_size": Annotated[
        int | None,
        typer.Option("--data-parallel-size", "-dp", help="Data-parallel engines, each planned as one; MoE experts split (or, with --enable-expert-parallel, divided) over TP x DP ranks."),
    ],
    "node": Annotated[
        str | None,
        typer.Option("--node", help="A node type ('8x H200', '8x H100 SXM', '8x A100 80GB', '8x B200', '4x L40S PCIe'): its GPU, GPUs per node and links."),
    ],
    "gpus_per_node": Annotated[int | None, typer.Option("--gpus-per-node", help="GPUs per node: TP inside a node, PP / DP across nodes.")],
    "allow_tp_across_nodes": Annotated[
        bool | None, typer.Option("--allow-tp-across-nodes", help="Plan a TP group that spans nodes (refused otherwise, as vLLM warns).")
    ],
    "kv_cache_dtype": Annotated[str | None, typer.Option("--kv-cache-dtype", help="auto, fp8, fp8_e4m3, fp8_e5m2, float16 or bfloat16.")],
    "kv_cache_memory_bytes": Annotated[str | None, typer.Option("--kv-cache-memory-bytes", help="Fixed KV cache size (e.g. 10G); skips profiling like vLLM.")],
    "dtype": Annotated[str | None, typer.Option("--dtype", help="Model dtype: auto, bfloat16, float16, float32.")],
    "enforce_eager": Annotated[bool | None, typer.Option("--enforce-eager", help="No CUDA graphs.")],
    "compile_cache": Annotated[
        str | None,
        typer.Option(
            "--compile-cache",
            help="The torch.compile cache the start finds: warm (default: a restart with the same flags) or cold (the first start: vLLM "
            "compiles inside its memory profile and sizes a smaller KV cache).",
        ),
    ],
    "language_model_only": Annotated[
        bool | None, typer.Option("--language-model-only", help="vLLM's --language-model-only: every modality limit 0 (no encoder budget, towers not loaded).")
    ],
    "enable_expert_parallel": Annotated[
        bool | None, typer.Option("--enable-expert-parallel", help="MoE: divide the experts over the TP ranks (vLLM's expert parallelism) instead of splitting each.")
    ],
    "enable_prefix_caching": Annotated[
        bool | None,
        typer.Option(
            "--enable-prefix-caching/--no-enable-prefix-caching",
            help="vLLM's prefix caching (default on, off for encoder-decoder models); hybrid Mamba models keep state in 'align' mode with it.",
        ),
    ],
    "usage_context": Annotated[str | None, typer.Option("--usage-context", help="openai_api_server (vllm serve, default), llm_class (offline LLM), openai_batch_runner (vllm run-batch) or engine_context (LLMEngine / AsyncLLMEngine.from_engine_args: Ray Data, Triton): the batch defaults follow it.")],
    "revision": Annotated[str | None, typer.Option("--revision", help="Branch, tag or commit of a Hub --model (default main); skips the catalog.")],
    "enable_lora": Annotated[
        bool | None, typer.Option("--enable-lora", help="vLLM's LoRA: every wrapped layer holds --max-loras stacked adapter buffers (counted in the model load), graphs captured with and without LoRA.")
    ],
    "max_loras": Annotated[int | None, typer.Option("--max-loras", help="LoRA adapters on the GPU at once (vLLM default 1); needs --enable-lora.")],
    "max_lora_rank": Annotated[int | None, typer.Option("--max-lora-rank", help="Largest adapter rank: 1, 8, 16 (default), 32, 64, 128, 256, 320 or 512; needs --enable-lora.")],
    "max_cpu_loras": Annotated[int | None, typer.Option("--max-cpu-loras", help="Adapters cached in host memory (default --max-loras; no GPU memory); needs --enable-lora.")],
    "lora_dtype": Annotated[str | None, typer.Option("--lora-dtype", help="auto (the model dtype), float16 or bfloat16; needs --enable-lora.")],
    "fully_sharded_loras": Annotated[
        bool | None, typer.Option("--fully-sharded-loras", help="Shard the LoRA A (column layers) and B (row layers) buffers over the TP ranks too; needs --enable-lora.")
    ],
    "lora_extra_vocab_size": Annotated[int | None, typer.Option("--lora-extra-vocab-size", help="vLLM 0.8-0.11's extra LoRA vocabulary rows per adapter (256 or 512; 256 by default there); later releases have none (refused).")],
}
TpOpt = SERVING_OPTIONS["tensor_parallel_size"]

Knobs = dict[str, Any]  # ServingArgs field -> the option's value as given (None: not given)
Command = TypeVar("Command", bound=Callable[..., Any])


def serving_options(*names: str, helps: Mapping[str, str] | None = None) -> Callable[[Command], Command]:
    """Give a command the serving knobs `names` (keys of SERVING_OPTIONS) as options, in this order where its `knobs`
    parameter stands (--revision right after --model); the command gets their values as one dict, `knobs`.

    `helps` replaces a knob's help text for this command; the option's name, type and default stay the table's.
    """
    unknown = [name for name in names if name not in SERVING_OPTIONS]
    if unknown:
        raise ValueError(f"not serving knobs: {', '.join(unknown)}")

    def knob(name: str) -> inspect.Parameter:
        kind, option = get_args(SERVING_OPTIONS[name])
        option = copy(option)
        option.rich_help_panel = MODEL_PANEL if name == "revision" else KNOBS_PANEL  # --revision qualifies --model
        if helps is not None and name in helps:
            option.help = helps[name]
        annotation = Annotated[kind, option]
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)

    def add(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)  # typer reads these annotations as objects, not strings
        params: list[inspect.Parameter] = []
        for param in signature.parameters.values():
            if param.name == "knobs":
                params += [knob(name) for name in names if name != "revision"]
                continue
            params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY))
            if param.name == "model" and "revision" in names:
                params.append(knob("revision"))

        params.append(inspect.Parameter("no_cache", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=NoCacheOpt))

        @functools.wraps(command)
        def run(**given: Any) -> Any:
            knobs = {name: given.pop(name) for name in names}
            with disk_cache.bypassed(bool(given.pop("no_cache", False))):
                return command(**given, knobs=knobs)

        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {param.name: param.annotation for param in params} | {"return": signature.return_annotation}
        return run  # type: ignore[return-value]

    return add


class OptionalJsonCommand(ReadableCommand):
    """`--json` takes an optional value: bare `--json` (last, or followed by another option) means stdout.

    typer's bundled click parser has no optional-value options (click's `is_flag=False, flag_value=`),
    so a bare `--json` is rewritten to `--json=-` before parsing. These commands take no positional
    arguments, so a word after `--json` that is not an option can only be its PATH.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        out: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":
                out += args[i:]
                break
            nxt = args[i + 1] if i + 1 < len(args) else None
            if arg == "--json" and (nxt is None or (nxt.startswith("-") and nxt != JSON_STDOUT)):
                arg = f"--json={JSON_STDOUT}"
            out.append(arg)
        return super().parse_args(ctx, out)


def _size(value: str | None, flag: str, forms: str = SIZE_FORMS) -> int | None:
    return None if value is None else parse_human_int(value, flag, forms)


def _max_model_len(value: str | None) -> int | None:
    if value is None:
        return None
    if value.strip().lower() in ("auto", "-1"):
        return -1
    return parse_human_int(value, "--max-model-len (max_model_len)", MAX_MODEL_LEN_FORMS)


def serving_values(**given: Any) -> dict[str, Any]:
    """The knobs given on the command line (None = not given), converted to ServingArgs fields."""
    from capacity.model.hf_overrides import parse_hf_overrides
    from capacity.model.processor_kwargs import parse_mm_processor_kwargs
    from capacity.serving.config import parse_limit_mm

    out: dict[str, Any] = {}
    conversions = {
        "max_model_len": _max_model_len,
        "max_num_batched_tokens": lambda v: _size(v, "--max-num-batched-tokens (max_num_batched_tokens)", COUNT_FORMS),
        "kv_cache_memory_bytes": lambda v: _size(v, "--kv-cache-memory-bytes"),
        "limit_mm_per_prompt": lambda v: parse_limit_mm(v, "--limit-mm-per-prompt"),
        "mm_processor_kwargs": lambda v: parse_mm_processor_kwargs(v, "--mm-processor-kwargs"),
        "hf_overrides": lambda v: parse_hf_overrides(v, "--hf-overrides"),
    }
    for key, value in given.items():
        if value is None:
            continue
        out[key] = conversions[key](value) if key in conversions else value
    if "pp_layer_partition" in given and given["pp_layer_partition"] is None and os.environ.get("VLLM_PP_LAYER_PARTITION") == "":
        out["pp_layer_partition"] = ""  # typer reads an empty variable as unset; vLLM's get_pp_indices raises on it
    return out


def release_semantics(version: str | None, flag: str = "--vllm-version") -> Any:
    """The rules of the vLLM release --vllm-version names (None: capacity's default, 0.33.0); BadInput for one
    capacity does not model (capacity.vllm.versions.planned_semantics)."""
    from capacity.vllm.versions import LATEST, planned_semantics

    # vLLM 0.8-0.10 run the V0 engine under VLLM_USE_V1=0: read as vLLM reads it, from the environment
    # and Model Runner V2 under VLLM_USE_V2_MODEL_RUNNER (0.20 on)
    if version is None:
        return LATEST
    return planned_semantics(version, flag, os.environ.get("VLLM_USE_V1")).with_model_runner_env(os.environ.get("VLLM_USE_V2_MODEL_RUNNER"))


def read_serve_yaml(config: Path | None, model: str | None) -> tuple[dict[str, Any], str | None]:
    """The knobs of a `vllm serve --config` YAML (none without one) and the model: --model, else the YAML's."""
    if config is None:
        return {}, model
    from capacity.serving.config import load_serve_yaml

    values, yaml_model, ignored = load_serve_yaml(config)
    if ignored:
        print(f"capacity: note: {config} options not modelled, ignored: {', '.join(ignored)}", file=sys.stderr)
    return values, model or yaml_model


def serving_args_of(model: str | None, config: Path | None, **knobs: Any) -> tuple[str, Any]:
    """The model and ServingArgs from --config (if any) and the flags, flags winning."""
    from capacity.serving.config import ServingArgs

    values, model = read_serve_yaml(config, model)
    if not model:
        raise BadInput("no model: pass --model (a folder, a catalog id or a Hugging Face id org/name), or 'model:' in --config")
    values.update(serving_values(**knobs))
    return model, ServingArgs(**values)
