"""The `capacity` command (typer). The one place that knows exit codes and imports reports lazily.

Exit codes: 0 fits, 1 does not fit, 2 bad input, 3 runtime failure, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from capacity.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_FITS, EXIT_INTERRUPTED, EXIT_RUNTIME_FAILURE, BadInput, CapacityError
from capacity.units import parse_human_int

EXIT_CODES_HELP = (
    "Exit codes: 0 fits (check: passes), 1 does not fit (check: fails), 2 bad input, 3 runtime failure, 130 interrupted (Ctrl-C; no partial file). "
    "A reader that closes stdout early (`| head`) does not change the verdict's code (3 if it closed before the verdict was known)."
)
MODEL_RESOLUTION_HELP = (
    "--model is resolved in this order: a folder with config.json; a catalog id or alias (`capacity models`); "
    "a Hugging Face id (org/name) in the local HF cache; the Hugging Face Hub (config, processor and generation "
    "configs and the safetensors headers only, into the HF cache; HF_TOKEN for gated repos, HF_HUB_OFFLINE=1 for the cache alone)."
)

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help=f"How a multimodal / encoder-decoder model will use GPU memory under vLLM 0.33 (Model Runner V2). {MODEL_RESOLUTION_HELP} {EXIT_CODES_HELP}",
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
    from capacity.model.processor_kwargs import parse_mm_processor_kwargs
    from capacity.serving.config import parse_limit_mm

    out: dict[str, Any] = {}
    conversions = {
        "max_model_len": _max_model_len,
        "max_num_batched_tokens": lambda v: _size(v, "--max-num-batched-tokens"),
        "kv_cache_memory_bytes": lambda v: _size(v, "--kv-cache-memory-bytes"),
        "limit_mm_per_prompt": lambda v: parse_limit_mm(v, "--limit-mm-per-prompt"),
        "mm_processor_kwargs": lambda v: parse_mm_processor_kwargs(v, "--mm-processor-kwargs"),
    }
    for key, value in given.items():
        if value is None:
            continue
        out[key] = conversions[key](value) if key in conversions else value
    return out


# --- options shared by plan, check and sweep ----------------------------------------------------------

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="A folder with config.json, else a catalog id or alias, else a Hugging Face id (org/name) from the local HF cache, else from the Hub.",
    ),
]
RevisionOpt = Annotated[str | None, typer.Option("--revision", help="Branch, tag or commit of a Hub --model (default main); skips the catalog.")]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="A `vllm serve --config` YAML file; flags given here override it.")]
GpuOpt = Annotated[str | None, typer.Option(help="Target GPU: a catalog name (see `capacity gpus`) or its total memory (24GiB, 16000MiB); default: the local GPU, else H200.")]
MaxModelLenOpt = Annotated[str | None, typer.Option(help="Decoder context length; 'auto' or -1 fits it to memory.")]
MaxNumSeqsOpt = Annotated[int | None, typer.Option(help="Max concurrent sequences (default by GPU memory).")]
TpOpt = Annotated[int | None, typer.Option("--tensor-parallel-size", "-tp", help="Tensor-parallel ranks.")]
UtilOpt = Annotated[float | None, typer.Option("--gpu-memory-utilization", help="Fraction of GPU memory vLLM may use (vLLM default 0.92).")]
BlockSizeOpt = Annotated[int | None, typer.Option("--block-size", help="KV block size in tokens (default 16).")]
BatchedTokensOpt = Annotated[str | None, typer.Option("--max-num-batched-tokens", help="Tokens per scheduler step (default by GPU memory and model).")]
LimitMmOpt = Annotated[str | None, typer.Option("--limit-mm-per-prompt", help="Items per prompt, e.g. image=1 or '{\"image\": 1}'.")]
MmKwargsOpt = Annotated[
    str | None,
    typer.Option(
        "--mm-processor-kwargs",
        help=(
            "vLLM's HF processor overrides as JSON, e.g. '{\"max_pixels\": 1003520}' (modelled: the Qwen-VL size keys, Gemma-4's "
            "max_soft_tokens, Gemma-3's do_pan_and_scan / pan_and_scan_*, InternVL's min/max_dynamic_patch, dynamic_image_size, "
            "use_thumbnail; others are refused)."
        ),
    ),
]
SpecTokensOpt = Annotated[int | None, typer.Option("--num-speculative-tokens", help="Speculative tokens per step (k).")]
DcpOpt = Annotated[int | None, typer.Option("--decode-context-parallel-size", "-dcp", help="Decode context parallel size.")]
KvDtypeOpt = Annotated[str | None, typer.Option("--kv-cache-dtype", help="auto, fp8, fp8_e4m3, fp8_e5m2, float16 or bfloat16.")]
KvBytesOpt = Annotated[str | None, typer.Option("--kv-cache-memory-bytes", help="Fixed KV cache size (e.g. 10G); skips profiling like vLLM.")]
DtypeOpt = Annotated[str | None, typer.Option("--dtype", help="Model dtype: auto, bfloat16, float16, float32.")]
EagerOpt = Annotated[bool | None, typer.Option("--enforce-eager", help="No CUDA graphs.")]
CompileCacheOpt = Annotated[
    str | None,
    typer.Option(
        "--compile-cache",
        help="The torch.compile cache the start finds: warm (default: a restart with the same flags) or cold (the first start: vLLM "
        "compiles inside its memory profile and sizes a smaller KV cache).",
    ),
]
LanguageModelOnlyOpt = Annotated[
    bool | None, typer.Option("--language-model-only", help="vLLM's --language-model-only: every modality limit 0 (no encoder budget, towers not loaded).")
]
ExpertParallelOpt = Annotated[
    bool | None, typer.Option("--enable-expert-parallel", help="MoE: divide the experts over the TP ranks (vLLM's expert parallelism) instead of splitting each.")
]
PrefixCachingOpt = Annotated[
    bool | None,
    typer.Option(
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="vLLM's prefix caching (default on, off for encoder-decoder models); hybrid Mamba models keep state in 'align' mode with it.",
    ),
]
UsageOpt = Annotated[str | None, typer.Option("--usage-context", help="openai_api_server (vllm serve, default) or llm_class (offline LLM).")]
CsvOpt = Annotated[
    Path | None,
    typer.Option("--csv", metavar="PATH", help="Write the tables as CSV: for a plan a folder with one <section>.csv per section, for a sweep one file."),
]
HtmlOpt = Annotated[Path | None, typer.Option("--html", metavar="PATH", help="Write a self-contained HTML report (no scripts, no network).")]
JsonOpt = Annotated[
    str | None,
    typer.Option("--json", metavar="[PATH]", help="--json alone: print JSON on stdout instead of the report; --json PATH: write it to PATH."),
]

EstimateOpt = Annotated[
    str | None,
    typer.Option(
        "--estimate",
        help="Without a GPU profile: 'trace' runs the real model's phases on fake tensors (default; CAPACITY_ESTIMATE sets another), 'formula' uses the quick formulas.",
    ),
]

CPU_PROBE_HELP = (
    "Run every phase for real on the CPU, counting live tensor bytes (tests, dry runs of small models). The host memory and time "
    "are estimated first; above half the available memory or 5 minutes the run is refused (--force runs it)."
)
JSON_STDOUT = "-"
ESTIMATES = ("trace", "formula")


def _estimate(estimate: str | None) -> str:
    how = (estimate or os.environ.get("CAPACITY_ESTIMATE") or "trace").strip().lower()
    if how not in ESTIMATES:
        raise BadInput(f"--estimate {how!r}: use trace or formula")
    return how


def _plan(model: str, args: Any, gpu: str | None, measured: Any, *, offline: bool, estimate: str | None) -> Any:
    """The plan from a saved profile, else from profiling the local GPU, else from a fake-tensor trace or formulas."""
    from dataclasses import replace

    from capacity.planning.planner import plan_for

    how = _estimate(estimate)
    if measured is not None:
        return plan_for(model, args, gpu, measured)
    if not offline and _local_cuda_gpu():
        return _profile_with_progress(model, args, gpu)[0]
    if how == "formula":
        return plan_for(model, args, gpu)
    import logging

    from profilers.api import trace_model

    # torch logs an op that fails under fake tensors (e.g. numel overflow for absurd knobs) as an ERROR with its
    # traceback before raising; the exception is handled below (fallback to formulas, with a note), so keep stderr clean
    # (a filter, not a level: importing torch re-sets its loggers' levels)
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    quiet = logging.Filter("capacity.quiet")  # passes only records of a logger named capacity.quiet...: none of torch's
    fake_log.addFilter(quiet)
    try:
        result, _ = trace_model(model, args, gpu_name=gpu)
        return result
    except CapacityError as exc:
        if exc.exit_code != EXIT_BAD_INPUT or "not implemented yet" not in str(exc):
            raise
        reason = f"no fake-tensor trace for this family ({exc}); the activation terms are formulas"
    except Exception as exc:  # a data-dependent op (.item(), nonzero) stops a fake trace: documented fallback
        reason = f"the fake-tensor trace stopped at {type(exc).__name__}: {' '.join(str(exc).split())[:160]}; the activation terms are formulas"
    finally:
        fake_log.removeFilter(quiet)
    result = plan_for(model, args, gpu)
    return replace(result, notes=(*result.notes, reason))


class OptionalJsonCommand(TyperCommand):
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


KNOBS = (
    "gpu_memory_utilization",
    "block_size",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "limit_mm_per_prompt",
    "mm_processor_kwargs",
    "num_speculative_tokens",
    "tensor_parallel_size",
    "decode_context_parallel_size",
    "kv_cache_dtype",
    "kv_cache_memory_bytes",
    "dtype",
    "enforce_eager",
    "compile_cache",
    "language_model_only",
    "enable_expert_parallel",
    "enable_prefix_caching",
    "usage_context",
    "revision",
)


def _knobs(scope: dict[str, Any]) -> dict[str, Any]:
    """The serving knobs among a command's parameters (its `locals()`); each command takes a subset."""
    return {name: scope[name] for name in KNOBS if name in scope}


def _serve_yaml(config: Path | None, model: str | None) -> tuple[dict[str, Any], str | None]:
    """The knobs of a `vllm serve --config` YAML (none without one) and the model: --model, else the YAML's."""
    if config is None:
        return {}, model
    from capacity.serving.config import load_serve_yaml

    values, yaml_model, ignored = load_serve_yaml(config)
    if ignored:
        print(f"capacity: note: {config} options not modelled, ignored: {', '.join(ignored)}", file=sys.stderr)
    return values, model or yaml_model


def _serving_args(model: str | None, config: Path | None, **knobs: Any) -> tuple[str, Any]:
    """The model and ServingArgs from --config (if any) and the flags, flags winning."""
    from capacity.serving.config import ServingArgs

    values, model = _serve_yaml(config, model)
    if not model:
        raise BadInput("no model: pass --model (a folder, a catalog id or a Hugging Face id org/name), or 'model:' in --config")
    values.update(serving_values(**knobs))
    return model, ServingArgs(**values)


def _json_path(value: str | None) -> Path | None:
    if value is None or value == JSON_STDOUT:
        return None
    if not value.strip():
        raise BadInput("--json: empty path; use --json alone for stdout or --json PATH for a file")
    return Path(value)


def _check_outputs(*, csv: Path | None = None, html: Path | None = None, json_out: str | None = None, output: Path | None = None, csv_is_folder: bool = True) -> None:
    """Every output path can be written, checked before the plan (which takes seconds); else one line, exit 2."""
    from reports.targets import Target, check_targets

    json_file = _json_path(json_out)
    given = [("--output", output, False), ("--csv", csv, csv_is_folder), ("--html", html, False), ("--json", json_file, False)]
    check_targets(*(Target(flag, path, is_folder) for flag, path, is_folder in given if path is not None))


def _export(subject: Any, csv: Path | None, html: Path | None, json_out: str | None, extra: dict[str, Any] | None = None) -> None:
    """Write the file exports (all or nothing) before anything is printed on stdout."""
    json_file = _json_path(json_out)
    if csv is None and html is None and json_file is None:
        return
    from reports.export import write_exports

    with _writing():
        written = write_exports(subject, csv=csv, html=html, json=json_file, json_extra=extra)
        _WRITTEN.extend(str(p) for p in written)
    shown = []
    if csv is not None:
        shown.append(f"{csv}/ ({sum(p.parent == csv.resolve() for p in written)} CSV files)" if csv.is_dir() else str(csv))
    shown += [str(p) for p in (html, json_file) if p is not None]
    print(f"capacity: wrote {', '.join(shown)}", file=sys.stderr)


class StdoutClosed(CapacityError):
    """The reader of stdout went away (`capacity plan --json | head -c 100`, `| true`) after the verdict was known."""

    def __init__(self, exit_code: int) -> None:
        super().__init__("stdout was closed before the report was written")
        self.exit_code = exit_code


@contextmanager
def _stdout(verdict_code: int) -> Iterator[None]:
    """Where a command writes its report: a closed stdout is not a verdict, so the verdict's own code stands."""
    _stop_if_interrupted()
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError as exc:
        raise StdoutClosed(verdict_code) from exc


def _console() -> Any:
    """A rich Console on stdout whose broken pipe is a BrokenPipeError for _stdout (rich itself exits 1)."""
    from rich.console import Console

    class StdoutConsole(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError(errno.EPIPE, "stdout was closed")

    return StdoutConsole()


def _stdout_was_closed() -> bool:
    """click's or rich's broken-pipe handling ran: stdout wrapped in PacifyFlushWrapper, or its fd is /dev/null."""
    if type(sys.stdout).__name__ == "PacifyFlushWrapper":
        return True
    try:
        fd, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError):
        return False
    return (fd.st_dev, fd.st_ino) == (null.st_dev, null.st_ino)


def _detach_stdout() -> None:
    """Point a closed stdout at /dev/null, so the interpreter's last flush does not fail (exit 120) or warn."""
    with suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _print_json(subject: Any, extra: dict[str, Any] | None = None) -> None:
    from reports.export import json_text

    sys.stdout.write(json_text(subject, extra))


@app.command(cls=OptionalJsonCommand)
def plan(
    model: ModelOpt = None,
    revision: RevisionOpt = None,
    gpu: GpuOpt = None,
    config: ConfigOpt = None,
    gpu_memory_utilization: UtilOpt = None,
    block_size: BlockSizeOpt = None,
    max_model_len: MaxModelLenOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    limit_mm_per_prompt: LimitMmOpt = None,
    mm_processor_kwargs: MmKwargsOpt = None,
    num_speculative_tokens: SpecTokensOpt = None,
    tensor_parallel_size: TpOpt = None,
    decode_context_parallel_size: DcpOpt = None,
    kv_cache_dtype: KvDtypeOpt = None,
    kv_cache_memory_bytes: KvBytesOpt = None,
    dtype: DtypeOpt = None,
    enforce_eager: EagerOpt = None,
    compile_cache: CompileCacheOpt = None,
    language_model_only: LanguageModelOnlyOpt = None,
    enable_expert_parallel: ExpertParallelOpt = None,
    enable_prefix_caching: PrefixCachingOpt = None,
    usage_context: UsageOpt = None,
    profile: Annotated[Path | None, typer.Option("--profile", metavar="PATH", help="Plan from a saved GPU profile (`capacity profile -o`); --model defaults to its model.")] = None,
    offline: Annotated[bool, typer.Option("--offline", help="Never profile on a local GPU: plan from the config alone.")] = False,
    estimate: EstimateOpt = None,
    json_out: JsonOpt = None,
    csv: CsvOpt = None,
    html: HtmlOpt = None,
) -> None:
    """Plan how vLLM 0.33 would budget GPU memory for MODEL, and whether it will start.

    MODEL: a folder with config.json, else a catalog id or alias, else a Hugging Face id in the local HF cache,
    else the Hub (only the configs and the safetensors headers are fetched).

    On a machine with an NVIDIA GPU (and without --offline or --profile) the model is profiled on it
    first and the plan uses the measurements. Exit codes: 0 fits, 1 does not fit, 2 bad input, 3 runtime failure.
    """

    measured = None
    if profile is not None:
        from capacity.memory.measured_profile import load_profile, tensor_parallel_of

        measured = load_profile(profile)
        model = model or measured.fingerprint.model_name
        tensor_parallel_size = tensor_parallel_of(measured, tensor_parallel_size)

    model, args = _serving_args(model, config, **_knobs(locals()))
    _check_outputs(csv=csv, html=html, json_out=json_out)  # bad output paths fail before any work
    result = _plan(model, args, gpu, measured, offline=offline, estimate=estimate)
    _export(result, csv, html, json_out)
    code = EXIT_FITS if result.fits else EXIT_DOES_NOT_FIT
    with _stdout(code):
        _show_plan(result, json_out)
    raise typer.Exit(code)


def _show_plan(result: Any, json_out: str | None) -> None:
    """The plan on stdout: its JSON for a bare --json, else the terminal report."""
    if json_out == JSON_STDOUT:
        _print_json(result)
    else:
        from reports.terminal import render

        render(result, _console())


def _local_cuda_gpu() -> bool:
    """An NVIDIA GPU here that torch can use (NVML first: it is cheap and needs no CUDA context)."""
    from capacity.gpu.catalog import detect_local_gpu

    if detect_local_gpu() is None:
        return False
    from profilers.api import cuda_available

    return cuda_available()


class _PhaseProgress:
    """One progress line per profiler phase on stderr, with the phase's estimated time when there is one.

    On a terminal a rich progress display; elsewhere (a pipe, a CI log) plain lines, printed as each phase starts,
    so a long run is never silent.
    """

    def __init__(self, cost: Any = None) -> None:
        from rich.console import Console

        self.cost = cost
        self.console = Console(stderr=True)
        self.start = time.perf_counter()
        self.rich: Any = None
        self.tasks: list[Any] = []

    def __enter__(self) -> _PhaseProgress:
        if self.console.is_terminal:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.rich = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=self.console)
            self.rich.__enter__()
        return self

    def __call__(self, name: str, detail: str) -> None:
        from profilers.cpu_cost import duration

        seconds = self.cost.phase_seconds(name) if self.cost is not None else None
        about = f" (about {duration(seconds)})" if seconds is not None else ""
        if self.rich is None:
            print(f"capacity: [{time.perf_counter() - self.start:.0f} s] {name}: {detail}{about}", file=sys.stderr, flush=True)
            return
        if self.tasks:
            self.rich.update(self.tasks[-1], total=1, completed=1)
        self.tasks.append(self.rich.add_task(f"{name}: {detail}{about}", total=None))

    def __exit__(self, *exc: Any) -> None:
        if self.rich is not None:
            if self.tasks:
                self.rich.update(self.tasks[-1], total=1, completed=1)
            self.rich.__exit__(*exc)
        elif exc[0] is None:
            print(f"capacity: [{time.perf_counter() - self.start:.0f} s] phases done", file=sys.stderr, flush=True)


def _cpu_probe_cost(command: str, plan: Any, *, force: bool, warmup: bool = True, steps: int = 3) -> Any:
    """Estimate a --cpu-probe run's host memory and time from the formula plan; refuse it above the limits."""
    from profilers.cpu_cost import CpuProbeLimits, check_cost, duration, estimate_profile_cost, estimate_verify_cost, measure_host_rates

    rates = measure_host_rates(plan.serving.dtype)
    if command == "profile":
        cost = estimate_profile_cost(plan, rates, warmup=warmup)
    else:
        cost = estimate_verify_cost(plan, rates, steps=steps)
    if not force:
        check_cost(cost, CpuProbeLimits.for_this_host(), plan.source.name)
    print(
        f"capacity: --cpu-probe: about {cost.host_bytes / 1e9:.1f} GB of host memory and {duration(cost.seconds)} on this CPU "
        f"(estimated; matrix products at {rates.matmul_flops_per_s / 1e9:.1f} GFLOP/s in {plan.serving.dtype}, measured now)",
        file=sys.stderr,
    )
    return cost


def _profile_with_progress(
    model: str, args: Any, gpu: str | None, *, cpu_probe: bool = False, attn: str = "sdpa", graphs: bool = True, warmup: bool = True, force: bool = False
) -> tuple[Any, Any]:
    """Run the profiler with one progress line per phase on stderr; returns (plan, profile).

    A --cpu-probe run is estimated first (host memory, time) and refused above the limits unless `force`."""
    from profilers.api import profile_model
    from profilers.probes import CpuProbe

    cost = None
    if cpu_probe:
        from capacity.planning.planner import plan_for

        cost = _cpu_probe_cost("profile", plan_for(model, args, gpu), force=force, warmup=warmup)
    with _PhaseProgress(cost) as on_phase:
        return profile_model(
            model, args, gpu_name=gpu, probe=CpuProbe() if cpu_probe else None, attn_implementation=attn, on_phase=on_phase, capture_graphs=graphs, warmup=warmup
        )


@app.command(name="profile", cls=OptionalJsonCommand)
def profile_command(
    output: Annotated[Path, typer.Option("--output", "-o", metavar="PATH", help="Where to write the profile JSON (atomically).")],
    model: ModelOpt = None,
    revision: RevisionOpt = None,
    gpu: Annotated[str | None, typer.Option(help="Resolve vLLM's defaults for this catalog GPU instead of the local one.")] = None,
    config: ConfigOpt = None,
    gpu_memory_utilization: UtilOpt = None,
    block_size: BlockSizeOpt = None,
    max_model_len: Annotated[str | None, typer.Option(help="Decoder context length.")] = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    limit_mm_per_prompt: LimitMmOpt = None,
    mm_processor_kwargs: MmKwargsOpt = None,
    num_speculative_tokens: SpecTokensOpt = None,
    kv_cache_dtype: KvDtypeOpt = None,
    dtype: DtypeOpt = None,
    enforce_eager: EagerOpt = None,
    language_model_only: LanguageModelOnlyOpt = None,
    enable_expert_parallel: ExpertParallelOpt = None,
    enable_prefix_caching: PrefixCachingOpt = None,
    usage_context: UsageOpt = None,
    tensor_parallel_size: TpOpt = None,
    mm_encoder_tp_mode: Annotated[str, typer.Option(help="With --tensor-parallel-size: the multimodal encoder sharded ('weights', vLLM's default) or whole on every rank ('data', where vLLM supports it).")] = "weights",
    timeout: Annotated[float, typer.Option(help="With --tensor-parallel-size: seconds before the ranks are stopped (collectives time out after min(timeout, 300) s).")] = 900.0,
    attn_implementation: Annotated[str, typer.Option(help="transformers attention: sdpa (default, like vLLM's kernels), flash_attention_2 or eager.")] = "sdpa",
    no_graphs: Annotated[bool, typer.Option("--no-graphs", help="Skip the CUDA-graph captures (the graph term stays estimated).")] = False,
    no_warmup: Annotated[bool, typer.Option("--no-warmup", help="Skip the warmup batches.")] = False,
    cpu_probe: Annotated[bool, typer.Option("--cpu-probe", help=CPU_PROBE_HELP)] = False,
    force: Annotated[bool, typer.Option("--force", help="Run a --cpu-probe even above its host-memory and time limits.")] = False,
    json_out: JsonOpt = None,
    csv: CsvOpt = None,
    html: HtmlOpt = None,
) -> None:
    """Profile MODEL on the local GPU as vLLM 0.33's Model Runner V2 starts it, save the profile, and plan from it.

    A CUDA out-of-memory error in a phase is a result (exit 1), and the GPU memory is released.
    Exit codes: 0 fits, 1 does not fit or out of memory, 2 bad input (e.g. no GPU), 3 runtime failure.
    """
    from capacity.memory.measured_profile import save_profile

    if attn_implementation not in ("sdpa", "eager", "flash_attention_2"):
        raise BadInput(f"--attn-implementation {attn_implementation!r}: use sdpa, flash_attention_2 or eager")
    model, args = _serving_args(model, config, **_knobs(locals()))
    _check_outputs(csv=csv, html=html, json_out=json_out, output=output)
    if not cpu_probe and not _local_cuda_gpu():
        raise BadInput(
            "no usable NVIDIA GPU here: `capacity profile` measures on a GPU; plan offline with `capacity plan` (the same phases on fake tensors, "
            "seconds), or pass --cpu-probe for a real, slow CPU run of a small model"
        )
    if args.tensor_parallel_size > 1:
        from profilers.api import profile_model_tensor_parallel

        if timeout <= 0:
            raise BadInput(f"--timeout must be > 0 seconds, got {timeout}")
        result, measured = profile_model_tensor_parallel(
            model, args, gpu_name=gpu, cpu=cpu_probe, encoder_tp_mode=mm_encoder_tp_mode, attn_implementation=attn_implementation,
            capture_graphs=not no_graphs, warmup=not no_warmup, timeout_s=timeout, collective_timeout_s=min(timeout, 300.0),
        )  # fmt: skip
    else:
        result, measured = _profile_with_progress(
            model, args, gpu, cpu_probe=cpu_probe, attn=attn_implementation, graphs=not no_graphs, warmup=not no_warmup, force=force
        )
    with _writing():
        save_profile(measured, output)
        _WRITTEN.append(str(output))
    print(f"capacity: wrote profile {output}", file=sys.stderr)
    if measured.oom is not None:
        print(f"capacity: out of memory in phase '{measured.oom.phase}' ({measured.oom.detail}); GPU memory released", file=sys.stderr)
    _export(result, csv, html, json_out)
    code = EXIT_FITS if result.fits else EXIT_DOES_NOT_FIT
    with _stdout(code):
        _show_plan(result, json_out)
    raise typer.Exit(code)


@app.command(cls=OptionalJsonCommand)
def verify(
    model: ModelOpt = None,
    revision: RevisionOpt = None,
    gpu: Annotated[str | None, typer.Option(help="Resolve vLLM's defaults for this catalog GPU instead of the local one.")] = None,
    config: ConfigOpt = None,
    gpu_memory_utilization: UtilOpt = None,
    block_size: BlockSizeOpt = None,
    max_model_len: Annotated[str | None, typer.Option(help="Decoder context length.")] = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    kv_cache_memory_bytes: KvBytesOpt = None,
    dtype: DtypeOpt = None,
    profile: Annotated[Path | None, typer.Option("--profile", metavar="PATH", help="Verify the plan made from this saved profile (default: profile here first).")] = None,
    steps: Annotated[int, typer.Option(help="Decode steps to run at full concurrency.")] = 3,
    tensor_parallel_size: TpOpt = None,
    mm_encoder_tp_mode: Annotated[str, typer.Option(help="With --tensor-parallel-size: the multimodal encoder sharded ('weights') or whole on every rank ('data').")] = "weights",
    timeout: Annotated[float, typer.Option(help="With --tensor-parallel-size: seconds before the ranks are stopped.")] = 900.0,
    cpu_probe: Annotated[bool, typer.Option("--cpu-probe", help=CPU_PROBE_HELP)] = False,
    force: Annotated[bool, typer.Option("--force", help="Run a --cpu-probe even above its host-memory and time limits.")] = False,
    json_out: JsonOpt = None,
) -> None:
    """Prove a plan on the GPU: allocate its KV pool next to the model and run its worst steady state.

    Exit codes: 0 verified (no OOM, within the requested memory), 1 failed (a reproducer is printed), 2 bad input, 3 runtime failure.
    """
    import shlex

    from capacity.planning.planner import plan_for
    from capacity.planning.suggest import suggested_flags
    from profilers.probes import CpuProbe, CudaProbe
    from profilers.verify import check_verifiable, run_verify

    if steps < 1:
        raise BadInput(f"--steps must be >= 1, got {steps}")
    measured = None
    if profile is not None:
        from capacity.memory.measured_profile import load_profile

        measured = load_profile(profile)
        model = model or measured.fingerprint.model_name
    model, args = _serving_args(model, config, **_knobs(locals()))
    _check_outputs(json_out=json_out)
    if not cpu_probe and not _local_cuda_gpu():
        raise BadInput("no usable NVIDIA GPU here: `capacity verify` runs on a GPU (or pass --cpu-probe for a dry run)")
    tp = args.tensor_parallel_size if measured is None else measured.measured_tensor_parallel_size
    if measured is not None and args.tensor_parallel_size not in (1, tp):
        raise BadInput(f"--tensor-parallel-size {args.tensor_parallel_size}: the profile was taken at TP {tp}; verify its plan at TP {tp} or profile again")
    if tp > 1:
        from dataclasses import replace

        from profilers.api import profile_model_tensor_parallel, verify_tensor_parallel_plan

        if timeout <= 0:
            raise BadInput(f"--timeout must be > 0 seconds, got {timeout}")
        args = replace(args, tensor_parallel_size=tp)
        if measured is None and not cpu_probe:
            result, _ = profile_model_tensor_parallel(model, args, gpu_name=gpu, cpu=cpu_probe, encoder_tp_mode=mm_encoder_tp_mode, timeout_s=timeout, collective_timeout_s=min(timeout, 300.0))
        else:
            result = plan_for(model, args, gpu, measured)
    elif measured is None and not cpu_probe:
        result, _ = _profile_with_progress(model, args, gpu)
    else:
        result = plan_for(model, args, gpu, measured)
    pinned = ["--revision", args.revision] if args.revision else []
    reproducer = shlex.join(["capacity", "verify", "--model", model, *pinned, *" ".join(suggested_flags(result)).split(), "--steps", str(steps)])
    check_verifiable(result)
    if tp > 1:
        outcome = verify_tensor_parallel_plan(result, cpu=cpu_probe, steps=steps, reproducer=reproducer, encoder_tp_mode=mm_encoder_tp_mode, timeout_s=timeout)
    else:
        cost = _cpu_probe_cost("verify", result, force=force, steps=steps) if cpu_probe else None
        with _PhaseProgress(cost) as on_phase:
            outcome = run_verify(result, CpuProbe() if cpu_probe else CudaProbe(), steps=steps, reproducer=reproducer, on_phase=on_phase)
    code = EXIT_FITS if outcome.passed else EXIT_DOES_NOT_FIT
    text = None
    if json_out is not None:
        import json

        text = json.dumps({"plan": result.to_dict(), "verify": outcome.to_dict()}, indent=2) + "\n"
        path = _json_path(json_out)
        if path is not None:
            from reports.export import write_files

            with _writing():
                write_files({path: ("--json", text.encode())})
                _WRITTEN.append(str(path))
    with _stdout(code):
        if json_out == JSON_STDOUT:
            sys.stdout.write(text or "")
        else:
            from reports.terminal import render_verify

            render_verify(outcome, _console())
    raise typer.Exit(code)


@app.command()
def reconcile(
    log: Annotated[Path, typer.Argument(metavar="LOG", help="A vLLM startup log, or what you pasted of it (V0 and 0.8 to 0.33).")],
    model: Annotated[str | None, typer.Option("--model", "-m", help="The model vLLM served; default: the one the log names.")] = None,
    revision: RevisionOpt = None,
    gpu: Annotated[
        str | None, typer.Option(help="The GPU vLLM ran on: a catalog name or its total memory (24GiB); default: the total the log prints.")
    ] = None,
    config: ConfigOpt = None,
    gpu_memory_utilization: UtilOpt = None,
    block_size: BlockSizeOpt = None,
    max_model_len: Annotated[str | None, typer.Option(help="Decoder context length vLLM ran with (default: the log's).")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="max_num_seqs vLLM ran with.")] = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    limit_mm_per_prompt: LimitMmOpt = None,
    mm_processor_kwargs: MmKwargsOpt = None,
    num_speculative_tokens: SpecTokensOpt = None,
    tensor_parallel_size: TpOpt = None,
    decode_context_parallel_size: DcpOpt = None,
    kv_cache_dtype: KvDtypeOpt = None,
    kv_cache_memory_bytes: KvBytesOpt = None,
    dtype: DtypeOpt = None,
    enforce_eager: EagerOpt = None,
    compile_cache: CompileCacheOpt = None,
    language_model_only: LanguageModelOnlyOpt = None,
    enable_expert_parallel: ExpertParallelOpt = None,
    enable_prefix_caching: PrefixCachingOpt = None,
    usage_context: UsageOpt = None,
    engine: Annotated[
        int | None, typer.Option("--engine", help="Which startup of a paste holding several (1 = the first); default: each one, in order.")
    ] = None,
    vllm_version: Annotated[
        str | None,
        typer.Option("--vllm-version", help="The vLLM version that printed the log (e.g. 0.28.0), when the paste does not state it: its rules are used."),
    ] = None,
    profile: Annotated[Path | None, typer.Option("--profile", metavar="PATH", help="Compare with the plan made from this saved profile.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON on stdout.")] = False,
) -> None:
    """Set a vLLM startup log side by side with capacity's plan for the same knobs, term by term.

    The log's own knobs (non-default args, the engine's config), GPU total and version rules are used unless flags
    say otherwise. Exit codes: 0 compared, 2 bad input (no vLLM startup in the input, no GPU to plan for), 3 runtime failure.
    """
    import json
    from dataclasses import replace

    from capacity.planning.planner import plan_for
    from capacity.reconcile.compare import reconcile_facts
    from capacity.reconcile.log_inputs import log_plan_inputs
    from capacity.vllm.log_startups import load_vllm_startups, with_stated_version

    startups = load_vllm_startups(log)  # a file that is not a vLLM log is refused before any planning (or torch import)
    if vllm_version is not None:
        startups = tuple(with_stated_version(f, vllm_version, "--vllm-version") for f in startups)
    measured = None
    if profile is not None:
        from capacity.memory.measured_profile import load_profile, tensor_parallel_of

        measured = load_profile(profile)
        model = model or measured.fingerprint.model_name
        tensor_parallel_size = tensor_parallel_of(measured, tensor_parallel_size)
    flags, model = _serve_yaml(config, model)
    flags.update(serving_values(**_knobs(locals())))
    if engine is not None:
        if not 1 <= engine <= len(startups):
            raise BadInput(f"--engine {engine}: {log} holds {len(startups)} vLLM startup(s); pick 1 to {len(startups)}")
        startups = (startups[engine - 1],)
    results = []
    for facts in startups:
        inputs = log_plan_inputs(facts, model=model, flags=flags, gpu=gpu)
        plan = plan_for(inputs.model, inputs.args, profile=measured, gpu=inputs.gpu, semantics=inputs.semantics)
        result = reconcile_facts(facts, plan, semantics=inputs.log_semantics)
        results.append(replace(result, notes=(*inputs.notes, *result.notes)))
    for warning in {w for r in results for w in r.facts.warnings}:
        print(f"capacity: warning: {warning}", file=sys.stderr)
    with _stdout(EXIT_FITS):
        if as_json:
            doc: Any = results[0].to_dict() if len(results) == 1 else {"capacity_reconcile_version": 1, "engines": [r.to_dict() for r in results]}
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        else:
            from reports.reconcile import render_reconcile

            console = _console()
            for result in results:
                if len(results) > 1:
                    console.rule(f"startup {result.facts.index} of {len(results)} (lines {result.facts.first_line}-{result.facts.last_line})")
                render_reconcile(result, console)
    raise typer.Exit(EXIT_FITS)


@app.command(cls=OptionalJsonCommand)
def check(
    model: ModelOpt = None,
    revision: RevisionOpt = None,
    gpu: GpuOpt = None,
    config: ConfigOpt = None,
    gpu_memory_utilization: UtilOpt = None,
    block_size: BlockSizeOpt = None,
    max_model_len: MaxModelLenOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    limit_mm_per_prompt: LimitMmOpt = None,
    mm_processor_kwargs: MmKwargsOpt = None,
    num_speculative_tokens: SpecTokensOpt = None,
    tensor_parallel_size: TpOpt = None,
    decode_context_parallel_size: DcpOpt = None,
    kv_cache_dtype: KvDtypeOpt = None,
    kv_cache_memory_bytes: KvBytesOpt = None,
    dtype: DtypeOpt = None,
    enforce_eager: EagerOpt = None,
    compile_cache: CompileCacheOpt = None,
    language_model_only: LanguageModelOnlyOpt = None,
    enable_expert_parallel: ExpertParallelOpt = None,
    enable_prefix_caching: PrefixCachingOpt = None,
    usage_context: UsageOpt = None,
    min_concurrency: Annotated[int | None, typer.Option(help="Fail unless the server runs this many requests at max_model_len at once: min(requests the KV cache holds, max_num_seqs) (concurrency.max_concurrent_requests).")] = None,
    min_vllm_concurrency: Annotated[float | None, typer.Option(help="Fail unless vLLM's logged concurrency (concurrency.vllm_reported) is at least this.")] = None,
    min_kv_tokens: Annotated[int | None, typer.Option(help="Fail unless vLLM's logged KV cache size in tokens (kv_cache.tokens_vllm_reported) is at least this.")] = None,
    require_max_model_len: Annotated[int | None, typer.Option(help="Fail unless requests of this many tokens are served (max_model_len, and one request's KV fits).")] = None,
    fail_on_hazard: Annotated[str, typer.Option(help="Lowest hazard severity that fails: info, warning or error (errors always fail).")] = "error",
    offline: Annotated[bool, typer.Option("--offline", help="Never profile on a local GPU: plan from the config alone.")] = False,
    estimate: EstimateOpt = None,
    json_out: Annotated[str | None, typer.Option("--json", metavar="[PATH]", help="Write the JSON (plan + gate) to PATH instead of stdout.")] = None,
    csv: CsvOpt = None,
    html: HtmlOpt = None,
) -> None:
    """Gate a deployment: plan MODEL and compare the plan with thresholds.

    Prints one verdict line on stderr and the plan's JSON with a `gate` section on stdout (or in --json PATH).
    Exit codes: 0 pass, 1 fail, 2 bad input, 3 runtime failure.
    """
    from capacity.planning.gate import Thresholds, evaluate

    thresholds = Thresholds(
        min_concurrency=min_concurrency,
        min_vllm_concurrency=min_vllm_concurrency,
        min_kv_tokens=min_kv_tokens,
        require_max_model_len=require_max_model_len,
        fail_on_hazard=fail_on_hazard.strip().lower(),
    )
    model, args = _serving_args(model, config, **_knobs(locals()))
    _check_outputs(csv=csv, html=html, json_out=json_out)
    result = _plan(model, args, gpu, None, offline=offline, estimate=estimate)
    gate = evaluate(result, thresholds)
    extra = {"gate": gate.to_dict()}
    _export(result, csv, html, json_out, extra)
    code = EXIT_FITS if gate.passed else EXIT_DOES_NOT_FIT
    try:
        if _json_path(json_out) is None:
            with _stdout(code):
                _print_json(result, extra)
    finally:  # the gate's verdict reaches stderr even when stdout's reader left early
        print(f"capacity: check: {gate.verdict_line(result)}", file=sys.stderr)
    raise typer.Exit(code)


@app.command(cls=OptionalJsonCommand)
def sweep(
    model: ModelOpt = None,
    revision: RevisionOpt = None,
    gpu: Annotated[str | None, typer.Option(help="GPUs, comma-separated (e.g. L4,L40S,H100-80GB,H200); default: the local GPU, else H200.")] = None,
    tp_values: Annotated[str | None, typer.Option("--tensor-parallel-size", "-tp", help="Tensor-parallel sizes, comma-separated.")] = None,
    seqs_values: Annotated[str | None, typer.Option("--max-num-seqs", help="max_num_seqs values, comma-separated (e.g. 16,64,256).")] = None,
    len_values: Annotated[str | None, typer.Option("--max-model-len", help="max_model_len values, comma-separated ('auto' fits to memory).")] = None,
    profile: Annotated[Path | None, typer.Option("--profile", metavar="PATH", help="Re-plan every point from this GPU profile's measured terms.")] = None,
    config: ConfigOpt = None,
    gpu_memory_utilization: UtilOpt = None,
    block_size: BlockSizeOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    limit_mm_per_prompt: LimitMmOpt = None,
    mm_processor_kwargs: MmKwargsOpt = None,
    num_speculative_tokens: SpecTokensOpt = None,
    decode_context_parallel_size: DcpOpt = None,
    kv_cache_dtype: KvDtypeOpt = None,
    kv_cache_memory_bytes: KvBytesOpt = None,
    dtype: DtypeOpt = None,
    enforce_eager: EagerOpt = None,
    compile_cache: CompileCacheOpt = None,
    language_model_only: LanguageModelOnlyOpt = None,
    enable_expert_parallel: ExpertParallelOpt = None,
    enable_prefix_caching: PrefixCachingOpt = None,
    usage_context: UsageOpt = None,
    estimate: EstimateOpt = None,
    json_out: JsonOpt = None,
    csv: CsvOpt = None,
    html: HtmlOpt = None,
) -> None:
    """Re-plan MODEL over a grid of GPUs, TP sizes, max_num_seqs and max_model_len (offline, or from one --profile).

    Every grid point is planned exactly as `capacity plan` would. Other knobs apply to every point. Grids of 1,000
    points or more print their progress on stderr; grids above 100,000 points are refused.
    Exit codes: 0 at least one point fits, 1 none fits, 2 bad input, 3 runtime failure.
    """
    from capacity.planning.sweep import SweepAxes, parse_int_list, parse_name_list, run_sweep

    model, base = _serving_args(model, config, **_knobs(locals()))
    axes = SweepAxes(
        gpus=parse_name_list(gpu, "--gpu") if gpu is not None else (None,),
        tensor_parallel_sizes=parse_int_list(tp_values, "--tensor-parallel-size") if tp_values is not None else (None,),
        max_num_seqs=parse_int_list(seqs_values, "--max-num-seqs") if seqs_values is not None else (None,),
        max_model_lens=parse_int_list(len_values, "--max-model-len", allow_auto=True) if len_values is not None else (None,),
    )
    axes.require_within_limit()  # before any work: the grid's size and the limit, in one line
    _check_outputs(csv=csv, html=html, json_out=json_out, csv_is_folder=False)
    measured = None
    if profile is not None:
        from capacity.memory.measured_profile import load_profile

        measured = load_profile(profile)
        if measured.measured_tensor_parallel_size > 1:
            raise BadInput(f"--profile {profile}: a tensor-parallel profile (TP {measured.measured_tensor_parallel_size}) is re-planned with `capacity plan --profile`, not swept")
    how = _estimate(estimate)
    profiler = None
    if measured is None and how == "trace":  # the same terms as `capacity plan` on each point's knobs
        from profilers.api import traced_profile

        profiler = traced_profile
    result = run_sweep(model, base, axes, measured, on_progress=_sweep_progress(axes.size), profiler=profiler)
    _export(result, csv, html, json_out)
    code = EXIT_FITS if result.fitting else EXIT_DOES_NOT_FIT
    with _stdout(code):
        if json_out == JSON_STDOUT:
            _print_json(result)
        else:
            from reports.terminal import render_sweep

            render_sweep(result, _console())
    raise typer.Exit(code)


SWEEP_PROGRESS_MIN_POINTS = 1000  # smaller grids take about a second: no progress lines


def _sweep_progress(total: int) -> Any:
    """A progress callback printing one stderr line per tenth of a large grid (plain lines: CI logs keep them)."""
    if total < SWEEP_PROGRESS_MIN_POINTS:
        return None
    import time

    start = time.perf_counter()
    step = max(1, total // 10)
    print(f"capacity: sweep: planning {total:,} points", file=sys.stderr, flush=True)

    def report(done: int, total: int) -> None:
        if done % step == 0 or done == total:
            print(f"capacity: sweep: {done:,} of {total:,} points planned ({time.perf_counter() - start:.1f} s)", file=sys.stderr, flush=True)

    return report


@app.command()
def models() -> None:
    """List the built-in model catalog (works offline)."""
    from capacity.model.registry import spec_from_files
    from capacity.source.resolve import catalog, catalog_config, catalog_planning_files, catalog_preprocessor
    from reports.terminal import render_models

    entries = catalog().values()
    with _stdout(EXIT_FITS):
        render_models(
            [
                (entry, spec_from_files(catalog_config(entry), entry.name, catalog_preprocessor(entry), catalog_planning_files(entry).get("processor_config.json")))
                for entry in entries
            ],
            _console(),
        )


@app.command()
def gpus() -> None:
    """List the GPU catalog and the local GPU (through NVML), or say that none was found."""

    from capacity.gpu.catalog import catalog_gpus, detect_local_gpu
    from reports.terminal import render_gpus

    with _stdout(EXIT_FITS):
        render_gpus(detect_local_gpu(), catalog_gpus(), _console())


class Interrupted(BaseException):
    """Ctrl-C, raised by capacity's own SIGINT handler: typer would turn a KeyboardInterrupt into a silent exit 130."""


# Files this run has written, complete (every write is atomic): an interrupt names them.
_WRITTEN: list[str] = []
# While files are written (fast) a Ctrl-C waits, so that what is on disk and what the message says agree.
# `seen` stays set once a Ctrl-C landed: library code can swallow the exception the handler raises (an import
# machinery's cleanup, a weakref finalizer, an `except BaseException`), and the run must still end as interrupted.
# `armed`: main's handler is installed (a re-sent SIGINT after main returned must not reach the default handler).
_DEFERRED = {"depth": 0, "pending": False, "seen": False, "armed": False}
RESEND_SECONDS = 0.05


def _importing(frame: Any) -> bool:
    """An import is running under this frame (Python's import machinery is on the stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _resend_sigint() -> None:
    if _DEFERRED["armed"]:
        os.kill(os.getpid(), signal.SIGINT)


def _raise_interrupted(signum: int, frame: Any) -> None:
    _DEFERRED["seen"] = True
    if _DEFERRED["depth"]:
        _DEFERRED["pending"] = True
        return
    if _importing(frame):
        # An exception raised inside an extension module's initialisation (torch's pybind11 callbacks while
        # `import torch` runs) cannot unwind through C++: the process aborts (SIGABRT). Let the import finish and
        # take the Ctrl-C again just after it.
        timer = threading.Timer(RESEND_SECONDS, _resend_sigint)
        timer.daemon = True
        timer.start()
        return
    raise Interrupted


def _stop_if_interrupted() -> None:
    """Before any output: a Ctrl-C that landed earlier and was swallowed stops the run here."""
    if _DEFERRED["seen"] and not _DEFERRED["depth"]:
        raise Interrupted


@contextmanager
def _writing() -> Iterator[None]:
    """Write and record files as one step: a Ctrl-C meanwhile is acted on after it."""
    _stop_if_interrupted()
    _DEFERRED["depth"] += 1
    try:
        yield
    finally:
        _DEFERRED["depth"] -= 1
    if _DEFERRED["pending"] and not _DEFERRED["depth"]:
        _DEFERRED["pending"] = False
        raise Interrupted


def _interrupted_line(argv: list[str]) -> str:
    """What was interrupted, and what is on disk: every write is atomic, so only whole files were written."""
    command = next((a for a in argv if not a.startswith("-")), None)
    what = f"`capacity {command}`" if command else "`capacity`"
    wrote = f"files written before it, complete: {', '.join(_WRITTEN)}" if _WRITTEN else "no file was written"
    return f"capacity: interrupted: {what} stopped by Ctrl-C (SIGINT) before it finished; {wrote}"


def main(argv: list[str] | None = None) -> int:
    """Entry point: one-line errors, documented exit codes, never a traceback for bad input."""
    argv = sys.argv[1:] if argv is None else list(argv)
    _WRITTEN.clear()
    _DEFERRED.update(depth=0, pending=False, seen=False, armed=False)
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread
        return _main(argv)
    previous = signal.signal(signal.SIGINT, _raise_interrupted)
    _DEFERRED["armed"] = True
    try:
        return _main(argv)
    except (Interrupted, KeyboardInterrupt):  # a second Ctrl-C while the first is reported, or one _main re-raised
        print(_interrupted_line(argv), file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        _DEFERRED["armed"] = False
        signal.signal(signal.SIGINT, previous)


def _main(argv: list[str]) -> int:
    try:  # typer >= 0.2x vendors click as typer._click; older typer raises click's own exceptions
        from typer._click.exceptions import UsageError
    except ImportError:  # pragma: no cover
        from click.exceptions import UsageError

    try:
        # standalone_mode=False: typer returns the code of a raised typer.Exit instead of exiting
        rv = app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except StdoutClosed as exc:
        _detach_stdout()
        with suppress(OSError):
            print(f"capacity: note: stdout was closed before the report was written; exit {exc.exit_code} is the verdict's code", file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:
        # A write outside _stdout (typer's --help) met a closed pipe: click's branch exits 1 after swapping in
        # PacifyFlushWrapper, rich's after pointing stdout at /dev/null. Exit 1 reads as "does not fit": say 3.
        if exc.code != 1 or not _stdout_was_closed():
            raise
        _detach_stdout()
        with suppress(OSError):
            print("capacity: error: stdout was closed before the output was written", file=sys.stderr)
        return EXIT_RUNTIME_FAILURE
    except UsageError as exc:
        if not exc.format_message():  # bare `capacity`: the help was printed, no error to add
            return EXIT_BAD_INPUT
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        print(f"capacity: error: {exc.format_message()}{hint}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except typer.Abort:  # EOF on a prompt
        _stop_if_interrupted()  # (each failure below: after a swallowed Ctrl-C it is the Ctrl-C's consequence)
        print("capacity: error: end of input", file=sys.stderr)
        return EXIT_RUNTIME_FAILURE
    except (Interrupted, KeyboardInterrupt):
        print(_interrupted_line(argv), file=sys.stderr)
        return EXIT_INTERRUPTED
    except CapacityError as exc:
        _stop_if_interrupted()
        print(f"capacity: error: {' '.join(str(exc).split())}", file=sys.stderr)  # one line, whatever the message held
        return exc.exit_code
    except Exception as exc:  # a bug, not the input: still exit 3 (a gate must not read a crash as "fail")
        _stop_if_interrupted()
        if os.environ.get("CAPACITY_TRACEBACK"):
            traceback.print_exc()
        what = " ".join(str(exc).split())
        print(f"capacity: error: internal error: {type(exc).__name__}: {what} (set CAPACITY_TRACEBACK=1 for the traceback)", file=sys.stderr)
        return EXIT_RUNTIME_FAILURE
    _stop_if_interrupted()
    return int(rv) if isinstance(rv, int) else EXIT_FITS


if __name__ == "__main__":
    sys.exit(main())
