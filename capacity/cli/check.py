"""`capacity check`: a deployment gate, the plan compared with thresholds."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from capacity.cli.estimate import plan_with_estimate
from capacity.cli.options import (
    JSON_STDOUT,
    OUTPUT_PANEL,
    SERVING_OPTIONS,
    ConfigOpt,
    CsvOpt,
    EstimateOpt,
    GpuOpt,
    HtmlOpt,
    Knobs,
    ModelOpt,
    OfflineOpt,
    VllmVersionOpt,
    release_semantics,
    serving_args_of,
    serving_options,
)
from capacity.cli.output import check_outputs, export_outputs, print_json
from capacity.cli.runtime import report_to_stdout
from capacity.errors import EXIT_DOES_NOT_FIT, EXIT_FITS

GATE_PANEL = "Gate thresholds"


@serving_options(*SERVING_OPTIONS)
def check(
    *,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    config: ConfigOpt = None,
    knobs: Knobs,
    min_concurrency: Annotated[int | None, typer.Option(help="Fail unless the server runs this many requests at max_model_len at once: min(requests the KV cache holds, max_num_seqs) (concurrency.max_concurrent_requests).", rich_help_panel=GATE_PANEL)] = None,
    min_vllm_concurrency: Annotated[float | None, typer.Option(help="Fail unless vLLM's logged concurrency (concurrency.vllm_reported) is at least this.", rich_help_panel=GATE_PANEL)] = None,
    min_kv_tokens: Annotated[int | None, typer.Option(help="Fail unless vLLM's logged KV cache size in tokens (kv_cache.tokens_vllm_reported) is at least this.", rich_help_panel=GATE_PANEL)] = None,
    require_max_model_len: Annotated[int | None, typer.Option(help="Fail unless requests of this many tokens are served (max_model_len, and one request's KV fits).", rich_help_panel=GATE_PANEL)] = None,
    fail_on_hazard: Annotated[str, typer.Option(help="Lowest hazard severity that fails: info, warning or error (errors always fail).", rich_help_panel=GATE_PANEL)] = "error",
    vllm_version: VllmVersionOpt = None,
    offline: OfflineOpt = False,
    estimate: EstimateOpt = None,
    json_out: Annotated[
        str | None,
        typer.Option(
            "--json",
            metavar="[PATH]",
            help="--json alone: print the JSON (plan + gate) on stdout instead of the check lines; --json PATH: write it to PATH.",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
    csv: CsvOpt = None,
    html: HtmlOpt = None,
) -> None:
    """Gate a deployment: plan MODEL and compare the plan with thresholds.

    Prints the verdict and one line per check on stdout (the plan's JSON with a `gate` section instead with
    --json, or in --json PATH), and one verdict line on stderr. Exit codes: 0 pass, 1 fail, 2 bad input,
    3 runtime failure.
    """
    from capacity.planning.gate import Thresholds, evaluate

    thresholds = Thresholds(
        min_concurrency=min_concurrency,
        min_vllm_concurrency=min_vllm_concurrency,
        min_kv_tokens=min_kv_tokens,
        require_max_model_len=require_max_model_len,
        fail_on_hazard=fail_on_hazard.strip().lower(),
    )
    semantics = release_semantics(vllm_version)  # an unmodelled release is refused before any work
    model, args = serving_args_of(model, config, **knobs)
    check_outputs(csv=csv, html=html, json_out=json_out)
    result = plan_with_estimate(model, args, gpu, None, offline=offline, estimate=estimate, semantics=semantics)
    gate = evaluate(result, thresholds)
    extra = {"gate": gate.to_dict()}
    export_outputs(result, csv, html, json_out, extra)
    code = EXIT_FITS if gate.passed else EXIT_DOES_NOT_FIT
    try:
        if json_out == JSON_STDOUT:
            with report_to_stdout(code):
                print_json(result, extra)
        elif json_out is None:
            with report_to_stdout(code):
                print("\n".join(gate.check_lines(result)))
    finally:  # the gate's verdict reaches stderr even when stdout's reader left early
        print(f"capacity: check: {gate.verdict_line(result)}", file=sys.stderr)
    raise typer.Exit(code)
