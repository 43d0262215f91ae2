"""The `capacity` command (typer). The one place that knows exit codes and imports reports lazily.

Exit codes: 0 fits, 1 does not fit, 2 bad input, 3 runtime failure, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from contextlib import suppress
from pathlib import Path
from typing import Annotated, Any

import typer

from capacity.cli.options import (
    CPU_PROBE_HELP,
    JSON_STDOUT,
    SERVING_OPTIONS,
    ConfigOpt,
    CsvOpt,
    EstimateOpt,
    GpuOpt,
    HtmlOpt,
    JsonOpt,
    Knobs,
    ModelOpt,
    OptionalJsonCommand,
    TpOpt,
    _serve_yaml,
    _serving_args,
    serving_options,
    serving_values,
)
from capacity.cli.runtime import (
    _DEFERRED,
    _WRITTEN,
    Interrupted,
    StdoutClosed,
    _console,
    _detach_stdout,
    _interrupted_line,
    _raise_interrupted,
    _stdout,
    _stdout_was_closed,
    _stop_if_interrupted,
    _writing,
)
from capacity.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_FITS, EXIT_INTERRUPTED, EXIT_RUNTIME_FAILURE, BadInput, CapacityError

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

ESTIMATES = ("trace", "formula")


def _estimate(estimate: str | None) -> str:
    how = (estimate or os.environ.get("CAPACITY_ESTIMATE") or "trace").strip().lower()
    if how not in ESTIMATES:
        raise BadInput(f"--estimate {how!r}: use trace or formula")
    return how


def _local_cuda_gpu() -> bool:
    """An NVIDIA GPU here that torch can use (NVML first: it is cheap and needs no CUDA context)."""
    from capacity.gpu.catalog import detect_local_gpu

    if detect_local_gpu() is None:
        return False
    from profilers.api import cuda_available

    return cuda_available()


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


def _print_json(subject: Any, extra: dict[str, Any] | None = None) -> None:
    from reports.export import json_text

    sys.stdout.write(json_text(subject, extra))


def _show_plan(result: Any, json_out: str | None) -> None:
    """The plan on stdout: its JSON for a bare --json, else the terminal report."""
    if json_out == JSON_STDOUT:
        _print_json(result)
    else:
        from reports.terminal import render

        render(result, _console())


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


@app.command(cls=OptionalJsonCommand)
@serving_options(*SERVING_OPTIONS)
def plan(
    *,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    config: ConfigOpt = None,
    knobs: Knobs,
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
        knobs["tensor_parallel_size"] = tensor_parallel_of(measured, knobs["tensor_parallel_size"])

    model, args = _serving_args(model, config, **knobs)
    _check_outputs(csv=csv, html=html, json_out=json_out)  # bad output paths fail before any work
    result = _plan(model, args, gpu, measured, offline=offline, estimate=estimate)
    _export(result, csv, html, json_out)
    code = EXIT_FITS if result.fits else EXIT_DOES_NOT_FIT
    with _stdout(code):
        _show_plan(result, json_out)
    raise typer.Exit(code)


LOCAL_GPU_HELP = "Resolve vLLM's defaults for this catalog GPU instead of the local one."
MAX_MODEL_LEN_HELP = "Decoder context length."


@app.command(name="profile", cls=OptionalJsonCommand)
@serving_options(
    "gpu_memory_utilization",
    "block_size",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "limit_mm_per_prompt",
    "mm_processor_kwargs",
    "num_speculative_tokens",
    "kv_cache_dtype",
    "dtype",
    "enforce_eager",
    "language_model_only",
    "enable_expert_parallel",
    "enable_prefix_caching",
    "usage_context",
    "tensor_parallel_size",
    "revision",
    helps={"max_model_len": MAX_MODEL_LEN_HELP},
)
def profile_command(
    *,
    output: Annotated[Path, typer.Option("--output", "-o", metavar="PATH", help="Where to write the profile JSON (atomically).")],
    model: ModelOpt = None,
    gpu: Annotated[str | None, typer.Option(help=LOCAL_GPU_HELP)] = None,
    config: ConfigOpt = None,
    knobs: Knobs,
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
    model, args = _serving_args(model, config, **knobs)
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
@serving_options(
    "gpu_memory_utilization",
    "block_size",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_memory_bytes",
    "dtype",
    "revision",
    helps={"max_model_len": MAX_MODEL_LEN_HELP},
)
def verify(
    *,
    model: ModelOpt = None,
    gpu: Annotated[str | None, typer.Option(help=LOCAL_GPU_HELP)] = None,
    config: ConfigOpt = None,
    knobs: Knobs,
    profile: Annotated[Path | None, typer.Option("--profile", metavar="PATH", help="Verify the plan made from this saved profile (default: profile here first).")] = None,
    steps: Annotated[int, typer.Option(help="Decode steps to run at full concurrency.")] = 3,
    tensor_parallel_size: TpOpt = None,  # a serving knob, listed after --steps in verify's help
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
    model, args = _serving_args(model, config, **knobs, tensor_parallel_size=tensor_parallel_size)
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
@serving_options(
    *SERVING_OPTIONS,
    helps={"max_model_len": "Decoder context length vLLM ran with (default: the log's).", "max_num_seqs": "max_num_seqs vLLM ran with."},
)
def reconcile(
    *,
    log: Annotated[Path, typer.Argument(metavar="LOG", help="A vLLM startup log, or what you pasted of it (V0 and 0.8 to 0.33).")],
    model: Annotated[str | None, typer.Option("--model", "-m", help="The model vLLM served; default: the one the log names.")] = None,
    gpu: Annotated[
        str | None, typer.Option(help="The GPU vLLM ran on: a catalog name or its total memory (24GiB); default: the total the log prints.")
    ] = None,
    config: ConfigOpt = None,
    knobs: Knobs,
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
    from capacity.vllm.log import load_vllm_startups, with_stated_version

    startups = load_vllm_startups(log)  # a file that is not a vLLM log is refused before any planning (or torch import)
    if vllm_version is not None:
        startups = tuple(with_stated_version(f, vllm_version, "--vllm-version") for f in startups)
    measured = None
    if profile is not None:
        from capacity.memory.measured_profile import load_profile, tensor_parallel_of

        measured = load_profile(profile)
        model = model or measured.fingerprint.model_name
        knobs["tensor_parallel_size"] = tensor_parallel_of(measured, knobs["tensor_parallel_size"])
    flags, model = _serve_yaml(config, model)
    flags.update(serving_values(**knobs))
    if engine is not None:
        if not 1 <= engine <= len(startups):
            raise BadInput(f"--engine {engine}: {log} holds {len(startups)} vLLM startup(s); pick 1 to {len(startups)}")
        startups = (startups[engine - 1],)
    results = []
    for facts in startups:
        inputs = log_plan_inputs(facts, model=model, flags=flags, gpu=gpu)
        plan = plan_for(inputs.model, inputs.args, profile=measured, gpu=inputs.gpu, semantics=inputs.semantics)
        result = reconcile_facts(facts, plan)
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
@serving_options(*SERVING_OPTIONS)
def check(
    *,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    config: ConfigOpt = None,
    knobs: Knobs,
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
    model, args = _serving_args(model, config, **knobs)
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


SWEEP_AXES = ("max_model_len", "max_num_seqs", "tensor_parallel_size")  # knobs the sweep takes as comma-separated grids instead
SWEEP_PROGRESS_MIN_POINTS = 1000  # smaller grids take about a second: no progress lines


@app.command(cls=OptionalJsonCommand)
@serving_options(*(name for name in SERVING_OPTIONS if name not in SWEEP_AXES))
def sweep(
    *,
    model: ModelOpt = None,
    gpu: Annotated[str | None, typer.Option(help="GPUs, comma-separated (e.g. L4,L40S,H100-80GB,H200); default: the local GPU, else H200.")] = None,
    tp_values: Annotated[str | None, typer.Option("--tensor-parallel-size", "-tp", help="Tensor-parallel sizes, comma-separated.")] = None,
    seqs_values: Annotated[str | None, typer.Option("--max-num-seqs", help="max_num_seqs values, comma-separated (e.g. 16,64,256).")] = None,
    len_values: Annotated[str | None, typer.Option("--max-model-len", help="max_model_len values, comma-separated ('auto' fits to memory).")] = None,
    profile: Annotated[Path | None, typer.Option("--profile", metavar="PATH", help="Re-plan every point from this GPU profile's measured terms.")] = None,
    config: ConfigOpt = None,
    knobs: Knobs,
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

    model, base = _serving_args(model, config, **knobs)
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
