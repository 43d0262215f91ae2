"""`capacity plan`: how vLLM would budget GPU memory for a model, and whether it starts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from capacity.cli.estimate import plan_with_estimate
from capacity.cli.options import (
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
    serving_args_of,
    serving_options,
)
from capacity.cli.output import check_outputs, export_outputs, show_plan
from capacity.cli.runtime import report_to_stdout
from capacity.errors import EXIT_DOES_NOT_FIT, EXIT_FITS


@serving_options(*SERVING_OPTIONS)
def plan(
    *,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    config: ConfigOpt = None,
    knobs: Knobs,
    profile: Annotated[Path | None, typer.Option("--profile", metavar="PATH", help="Plan from a saved GPU profile (`capacity profile -o`); --model defaults to its model.")] = None,
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

    model, args = serving_args_of(model, config, **knobs)
    check_outputs(csv=csv, html=html, json_out=json_out)  # bad output paths fail before any work
    result = plan_with_estimate(model, args, gpu, measured, offline=offline, estimate=estimate)
    export_outputs(result, csv, html, json_out)
    code = EXIT_FITS if result.fits else EXIT_DOES_NOT_FIT
    with report_to_stdout(code):
        show_plan(result, json_out)
    raise typer.Exit(code)
