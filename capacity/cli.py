"""The `capacity` command (typer). The one place that knows exit codes and imports reports lazily.

Exit codes: 0 fits, 1 does not fit, 2 bad input, 3 runtime failure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from capacity.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_FITS, EXIT_RUNTIME_FAILURE, BadInput, CapacityError
from capacity.units import parse_human_int

EXIT_CODES_HELP = "Exit codes: 0 fits, 1 does not fit, 2 bad input, 3 runtime failure."

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help=f"How a multimodal / encoder-decoder model will use GPU memory under vLLM 0.33 (Model Runner V2). {EXIT_CODES_HELP}",
)


def _size(value: str | None, flag: str) -> int | None:
    return None if value is None else parse_human_int(value, flag)


def _max_model_len(value: str | None) -> int | None:
    if value is None:
        return None
    if value.strip().lower() in ("auto", "-1"):
        return -1
    return parse_human_int(value, "--max-model-len")


def serving_values(**given: Any) -> dict[str, Any]:
    """The knobs given on the command line (None = not given), converted to ServingArgs fields."""
    from capacity.serving import parse_limit_mm

    out: dict[str, Any] = {}
    conversions = {
        "max_model_len": _max_model_len,
        "max_num_batched_tokens": lambda v: _size(v, "--max-num-batched-tokens"),
        "kv_cache_memory_bytes": lambda v: _size(v, "--kv-cache-memory-bytes"),
        "limit_mm_per_prompt": lambda v: parse_limit_mm(v, "--limit-mm-per-prompt"),
    }
    for key, value in given.items():
        if value is None:
            continue
        out[key] = conversions[key](value) if key in conversions else value
    return out


@app.command()
def plan(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Catalog id or alias, a HF id in the local cache, or a folder with config.json.")] = None,
    gpu: Annotated[str | None, typer.Option(help="Target GPU from the catalog (see `capacity gpus`); default: the local GPU, else H200.")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="A `vllm serve --config` YAML file; flags given here override it.")] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option(help="Fraction of GPU memory vLLM may use (vLLM default 0.92).")] = None,
    block_size: Annotated[int | None, typer.Option(help="KV block size in tokens (default 16).")] = None,
    max_model_len: Annotated[str | None, typer.Option(help="Decoder context length; 'auto' or -1 fits it to memory.")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="Max concurrent sequences (default by GPU memory).")] = None,
    max_num_batched_tokens: Annotated[str | None, typer.Option(help="Tokens per scheduler step (default by GPU memory and model).")] = None,
    limit_mm_per_prompt: Annotated[str | None, typer.Option(help="Items per prompt, e.g. image=1 or '{\"image\": 1}'.")] = None,
    num_speculative_tokens: Annotated[int | None, typer.Option(help="Speculative tokens per step (k).")] = None,
    tensor_parallel_size: Annotated[int | None, typer.Option("--tensor-parallel-size", "-tp", help="Tensor-parallel ranks.")] = None,
    decode_context_parallel_size: Annotated[int | None, typer.Option("--decode-context-parallel-size", "-dcp", help="Decode context parallel size.")] = None,
    kv_cache_dtype: Annotated[str | None, typer.Option(help="auto, fp8, fp8_e4m3, fp8_e5m2, float16 or bfloat16.")] = None,
    kv_cache_memory_bytes: Annotated[str | None, typer.Option(help="Fixed KV cache size (e.g. 10G); skips profiling like vLLM.")] = None,
    dtype: Annotated[str | None, typer.Option(help="Model dtype: auto, bfloat16, float16, float32.")] = None,
    enforce_eager: Annotated[bool | None, typer.Option("--enforce-eager", help="No CUDA graphs.")] = None,
    usage_context: Annotated[str | None, typer.Option(help="openai_api_server (vllm serve, default) or llm_class (offline LLM).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON on stdout instead of the report.")] = False,
) -> None:
    """Plan how vLLM 0.33 would budget GPU memory for MODEL, and whether it will start.

    Exit codes: 0 fits, 1 does not fit, 2 bad input, 3 runtime failure.
    """
    from capacity.planner import plan_for
    from capacity.serving import ServingArgs, load_serve_yaml

    values: dict[str, Any] = {}
    if config is not None:
        values, yaml_model, ignored = load_serve_yaml(config)
        model = model or yaml_model
        if ignored:
            print(f"capacity: note: {config} options not modelled, ignored: {', '.join(ignored)}", file=sys.stderr)
    if not model:
        raise BadInput("no model: pass --model (a catalog id, a HF id in the local cache or a folder), or 'model:' in --config")
    values.update(
        serving_values(
            gpu_memory_utilization=gpu_memory_utilization,
            block_size=block_size,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            limit_mm_per_prompt=limit_mm_per_prompt,
            num_speculative_tokens=num_speculative_tokens,
            tensor_parallel_size=tensor_parallel_size,
            decode_context_parallel_size=decode_context_parallel_size,
            kv_cache_dtype=kv_cache_dtype,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            dtype=dtype,
            enforce_eager=enforce_eager,
            usage_context=usage_context,
        )
    )
    result = plan_for(model, ServingArgs(**values), gpu)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        from rich.console import Console

        from reports.terminal import render

        render(result, Console())
    raise typer.Exit(EXIT_FITS if result.fits else EXIT_DOES_NOT_FIT)


@app.command()
def models() -> None:
    """List the built-in model catalog (works offline)."""
    from rich.console import Console
    from rich.table import Table

    from capacity.families import model_spec
    from capacity.models import catalog, catalog_config

    table = Table(title="capacity model catalog")
    for col in ("id", "aliases", "family", "encoder tokens / request", "provenance"):
        table.add_column(col, overflow="fold")
    for entry in catalog().values():
        spec = model_spec(catalog_config(entry), entry.name)
        table.add_row(entry.name, ", ".join(entry.aliases), spec.family, f"{spec.encoder_tokens_per_request:,}", entry.provenance)
    Console().print(table)


@app.command()
def gpus() -> None:
    """List the GPU catalog and the local GPU (through NVML) if there is one."""
    from rich.console import Console
    from rich.table import Table

    from capacity.gpus import catalog_gpus, detect_local_gpu

    table = Table(title="GPUs")
    for col in ("name", "total memory (B)", "GiB", "source"):
        table.add_column(col)
    local = detect_local_gpu()
    for g in ([local] if local else []) + catalog_gpus():
        table.add_row(g.name, f"{g.total_memory_bytes:,}", f"{g.total_memory_bytes / 2**30:.2f}", g.provenance)
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    """Entry point: one-line errors, documented exit codes, never a traceback for bad input."""
    try:  # typer >= 0.2x vendors click as typer._click; older typer raises click's own exceptions
        from typer._click.exceptions import UsageError
    except ImportError:  # pragma: no cover
        from click.exceptions import UsageError

    try:
        # standalone_mode=False: typer returns the code of a raised typer.Exit instead of exiting
        rv = app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except UsageError as exc:
        if not exc.format_message():  # bare `capacity`: the help was printed, no error to add
            return EXIT_BAD_INPUT
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        print(f"capacity: error: {exc.format_message()}{hint}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except typer.Abort:
        print("capacity: interrupted", file=sys.stderr)
        return EXIT_RUNTIME_FAILURE
    except CapacityError as exc:
        print(f"capacity: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("capacity: interrupted", file=sys.stderr)
        return EXIT_RUNTIME_FAILURE
    return int(rv) if isinstance(rv, int) else EXIT_FITS


if __name__ == "__main__":
    sys.exit(main())
