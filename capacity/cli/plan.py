"""`capacity plan`: how vLLM would budget GPU memory for a model, and whether it starts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from capacity.cli.estimate import default_estimate, plan_with_estimate
from capacity.cli.options import (
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
    OfflineOpt,
    VllmVersionOpt,
    release_semantics,
    serving_args_of,
    serving_options,
)
from capacity.cli.output import check_outputs, export_outputs, print_json, show_plan
from capacity.cli.runtime import report_to_stdout, stdout_console
from capacity.errors import EXIT_DOES_NOT_FIT, EXIT_FITS


@serving_options(*SERVING_OPTIONS)
def plan(
    *,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    config: ConfigOpt = None,
    knobs: Knobs,
    profile: Annotated[
        Path | None, typer.Option("--profile", metavar="PATH", help="Plan from a saved GPU profile (`capacity profile -o`); --model defaults to its model.")
    ] = None,
    vllm_version: VllmVersionOpt = None,
    offline: OfflineOpt = False,
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

    semantics = release_semantics(vllm_version)  # an unmodelled release is refused before any work
    model, args = serving_args_of(model, config, **knobs)
    check_outputs(csv=csv, html=html, json_out=json_out)  # bad output paths fail before any work
    result = plan_with_estimate(model, args, gpu, measured, offline=offline, estimate=estimate, semantics=semantics)
    nearest = nearest_of(result, model)
    extra = None if nearest is None else {"nearest_fit": nearest.configs[0].to_dict() if nearest.configs else None}
    export_outputs(result, csv, html, json_out, extra)
    code = EXIT_FITS if result.fits else EXIT_DOES_NOT_FIT
    with report_to_stdout(code):
        if nearest is None:
            show_plan(result, json_out)
        elif json_out == JSON_STDOUT:
            print_json(result, extra)
        else:
            from reports.fit import nearest_lines
            from reports.terminal import render

            console = stdout_console()
            render(result, console, nearest_lines(nearest, result.serving.tensor_parallel_size, console.width - 4))
    raise typer.Exit(code)


def nearest_of(plan: Any, model: str) -> Any:
    """When the plan does not fit and no knob fix makes it start: the nearest configuration that fits on its GPU
    (capacity/planning/fit.py nearest_fit), checked with the fake-tensor trace when the plan came from one."""
    if plan.fits or (plan.suggestion is not None and plan.suggestion.command is not None):
        return None
    from capacity.planning.fit import nearest_fit

    traced = plan.profile is not None and plan.profile.fingerprint.device == "fake"
    return nearest_fit(plan, default_estimate(model, plan.semantics) if traced else None)
