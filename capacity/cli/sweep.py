"""`capacity sweep`: the plan over a grid of GPUs, TP sizes, max_num_seqs and max_model_len."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from capacity.cli.estimate import chosen_estimate
from capacity.cli.options import (
    JSON_STDOUT,
    SERVING_OPTIONS,
    ConfigOpt,
    CsvOpt,
    EstimateOpt,
    HtmlOpt,
    JsonOpt,
    Knobs,
    ModelOpt,
    release_semantics,
    serving_args_of,
    serving_options,
)
from capacity.cli.output import check_outputs, export_outputs, print_json
from capacity.cli.runtime import report_to_stdout, stdout_console
from capacity.errors import EXIT_DOES_NOT_FIT, EXIT_FITS, BadInput

SWEEP_AXES = ("max_model_len", "max_num_seqs", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")  # knobs the sweep takes as comma-separated grids instead
SWEEP_PROGRESS_MIN_POINTS = 1000  # smaller grids take about a second: no progress lines


@serving_options(*(name for name in SERVING_OPTIONS if name not in SWEEP_AXES))
def sweep(
    *,
    model: ModelOpt = None,
    gpu: Annotated[str | None, typer.Option(help="GPUs, comma-separated (e.g. L4,L40S,H100-80GB,H200); default: the local GPU, else H200.")] = None,
    tp_values: Annotated[str | None, typer.Option("--tensor-parallel-size", "-tp", help="Tensor-parallel sizes, comma-separated.")] = None,
    pp_values: Annotated[str | None, typer.Option("--pipeline-parallel-size", "-pp", help="Pipeline-parallel sizes, comma-separated (each stage its own worker).")] = None,
    dp_values: Annotated[
        str | None, typer.Option("--data-parallel-size", "-dp", help="Data-parallel sizes, comma-separated: engines, their requests at once added up.")
    ] = None,
    seqs_values: Annotated[str | None, typer.Option("--max-num-seqs", help="max_num_seqs values, comma-separated (e.g. 16,64,256).")] = None,
    len_values: Annotated[str | None, typer.Option("--max-model-len", help="max_model_len values, comma-separated ('auto' fits to memory).")] = None,
    versions: Annotated[
        str | None,
        typer.Option("--vllm-version", help="vLLM releases to plan for, comma-separated (e.g. 0.10.2,0.33; 0.6 to 0.33; default 0.33.0): one axis of the grid."),
    ] = None,
    profile: Annotated[Path | None, typer.Option("--profile", metavar="PATH", help="Re-plan every point from this GPU profile's measured terms.")] = None,
    config: ConfigOpt = None,
    knobs: Knobs,
    estimate: EstimateOpt = None,
    json_out: JsonOpt = None,
    csv: CsvOpt = None,
    html: HtmlOpt = None,
) -> None:
    """Re-plan MODEL over a grid of GPUs, TP / PP / DP sizes, max_num_seqs and max_model_len (offline, or from one --profile).

    Every grid point is planned exactly as `capacity plan` would; with DP engines its figures are one engine's and its
    total the engines' (DP x one engine's requests at once). Other knobs apply to every point. Grids of 1,000
    points or more print their progress on stderr; grids above 100,000 points are refused.
    Exit codes: 0 at least one point fits, 1 none fits, 2 bad input, 3 runtime failure.
    """
    from capacity.planning.sweep import SweepAxes, parse_int_list, parse_name_list, run_sweep

    model, base = serving_args_of(model, config, **knobs)
    if base.node is not None and gpu is None:  # --node "8x H200" names the GPU
        from capacity.gpu.nodes import node_by_name

        gpu = node_by_name(base.node).gpu
    axes = SweepAxes(
        gpus=parse_name_list(gpu, "--gpu") if gpu is not None else (None,),
        tensor_parallel_sizes=parse_int_list(tp_values, "--tensor-parallel-size") if tp_values is not None else (None,),
        pipeline_parallel_sizes=parse_int_list(pp_values, "--pipeline-parallel-size") if pp_values is not None else (None,),
        data_parallel_sizes=parse_int_list(dp_values, "--data-parallel-size") if dp_values is not None else (None,),
        max_num_seqs=parse_int_list(seqs_values, "--max-num-seqs") if seqs_values is not None else (None,),
        max_model_lens=parse_int_list(len_values, "--max-model-len", allow_auto=True) if len_values is not None else (None,),
        vllm_versions=parse_name_list(versions, "--vllm-version") if versions is not None else (None,),
    )
    for version in axes.vllm_versions:  # an unmodelled release is refused before any work
        release_semantics(version)
    axes.require_within_limit()  # before any work: the grid's size and the limit, in one line
    check_outputs(csv=csv, html=html, json_out=json_out, csv_is_folder=False)
    measured = None
    if profile is not None:
        from capacity.memory.measured_profile import load_profile

        measured = load_profile(profile)
        if measured.measured_tensor_parallel_size > 1:
            raise BadInput(f"--profile {profile}: a tensor-parallel profile (TP {measured.measured_tensor_parallel_size}) is re-planned with `capacity plan --profile`, not swept")
    how = chosen_estimate(estimate)
    profiler = prepare = None
    if measured is None and how == "trace":  # the same terms as `capacity plan` on each point's knobs
        from profilers.startup import freeze_heap_at_exit
        from profilers.sweep_traces import trace_in_parallel, traced_profile

        profiler, prepare = traced_profile, trace_in_parallel
        freeze_heap_at_exit()  # a process that traced holds torch's and transformers' heap: its exit skips walking it (1 s)
    result = run_sweep(model, base, axes, measured, on_progress=_sweep_progress(axes.size), profiler=profiler, prepare=prepare)
    export_outputs(result, csv, html, json_out)
    code = EXIT_FITS if result.fitting else EXIT_DOES_NOT_FIT
    with report_to_stdout(code):
        if json_out == JSON_STDOUT:
            print_json(result)
        else:
            from reports.terminal import render_sweep

            render_sweep(result, stdout_console())
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
