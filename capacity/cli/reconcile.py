"""`capacity reconcile`: a vLLM startup log set side by side with capacity's plan for the same knobs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from capacity.cli.options import SERVING_OPTIONS, ConfigOpt, EstimateOpt, Knobs, read_serve_yaml, release_semantics, serving_options, serving_values
from capacity.cli.runtime import report_to_stdout, stdout_console
from capacity.errors import EXIT_FITS, BadInput


@serving_options(
    *SERVING_OPTIONS,
    helps={"max_model_len": "Decoder context length vLLM ran with (default: the log's).", "max_num_seqs": "max_num_seqs vLLM ran with."},
)
def reconcile(
    *,
    log: Annotated[
        str, typer.Argument(metavar="LOG", help="A vLLM startup log, or what you pasted of it (V0 and 0.8 to 0.33); - reads it from stdin.")
    ],
    model: Annotated[str | None, typer.Option("--model", "-m", help="The model vLLM served; default: the one the log names.")] = None,
    gpu: Annotated[
        str | None,
        typer.Option(help="The GPU vLLM ran on: a catalog name (the total the log prints is kept) or its total memory (24GiB); default: the log's."),
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
    vllm_env: Annotated[
        list[str] | None,
        typer.Option(
            "--vllm-env",
            metavar="KEY=VALUE",
            help="An environment variable vLLM ran with (repeatable); VLLM_USE_FLASHINFER_SAMPLER and VLLM_USE_V2_MODEL_RUNNER change the plan, others are listed.",
        ),
    ] = None,
    estimate: EstimateOpt = None,
    profile: Annotated[Path | None, typer.Option("--profile", metavar="PATH", help="Compare with the plan made from this saved profile.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON on stdout.")] = False,
) -> None:
    """Set a vLLM startup log side by side with capacity's plan for the same knobs, term by term.

    The log's own knobs (non-default args, the engine's config), GPU total and version rules are used unless flags
    say otherwise; the plan is `capacity plan`'s default (the fake-tensor trace) unless --estimate formula. When the
    paste does not state its version and the versions it fits plan differently, each is shown. A log that prints no
    GPU total (and no --gpu) is compared on what it alone determines: the weights, and the KV blocks, tokens and
    concurrency from its own KV memory; the rows planned from the total say "needs --gpu". Exit codes: 0 compared
    (differences are shown, not failed: reconcile has no verdict to fail, so never 1), 2 bad input (no vLLM startup
    in the input, no model named and no --model), 3 runtime failure.
    """
    import json

    from capacity.cli.estimate import chosen_estimate
    from capacity.cli.startup_plan import StartupRequest, reconcile_startup
    from capacity.vllm.log_startups import checked_text, load_vllm_startups, parse_vllm_startups, with_stated_version

    chosen_estimate(estimate)  # a bad --estimate fails before the log is read
    if vllm_version is not None:  # a release capacity does not model is refused as plan refuses it (before the log is read)
        release_semantics(vllm_version)
    env = env_pairs(vllm_env or [])
    if log == "-":
        if sys.stdin.isatty():
            print("capacity: paste the vLLM log, then Ctrl-D (Ctrl-Z Enter on Windows)", file=sys.stderr)
        startups = parse_vllm_startups(checked_text(sys.stdin.buffer.read(), "stdin"), source="stdin")
    else:
        startups = load_vllm_startups(Path(log))  # a file that is not a vLLM log is refused before any planning (or torch import)
    if vllm_version is not None:
        startups = tuple(with_stated_version(f, vllm_version, "--vllm-version") for f in startups)
    measured = None
    if profile is not None:
        from capacity.memory.measured_profile import load_profile, tensor_parallel_of

        measured = load_profile(profile)
        model = model or measured.fingerprint.model_name
        knobs["tensor_parallel_size"] = tensor_parallel_of(measured, knobs["tensor_parallel_size"])
    flags, model = read_serve_yaml(config, model)
    flags.update(serving_values(**knobs))
    if engine is not None:
        if not 1 <= engine <= len(startups):
            raise BadInput(f"--engine {engine}: {'stdin' if log == '-' else log} holds {len(startups)} vLLM startup(s); pick 1 to {len(startups)}")
        startups = (startups[engine - 1],)
    request = StartupRequest(model, flags, gpu, estimate, env, measured)
    results = [reconcile_startup(facts, request)[1] for facts in startups]
    for warning in {w for r in results for w in r.facts.warnings}:
        print(f"capacity: warning: {warning}", file=sys.stderr)
    with report_to_stdout(EXIT_FITS):
        if as_json:
            doc: Any = results[0].to_dict() if len(results) == 1 else {"capacity_reconcile_version": 1, "engines": [r.to_dict() for r in results]}
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        else:
            from reports.reconcile import render_reconcile

            console = stdout_console()
            for result in results:
                if len(results) > 1:
                    console.rule(f"startup {result.facts.index} of {len(results)} (lines {result.facts.first_line}-{result.facts.last_line})")
                render_reconcile(result, console)
    raise typer.Exit(EXIT_FITS)


def env_pairs(given: list[str]) -> dict[str, str]:
    """--vllm-env KEY=VALUE options as a dict; BadInput for one without '='."""
    out: dict[str, str] = {}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"--vllm-env {item!r}: give KEY=VALUE (e.g. --vllm-env VLLM_USE_FLASHINFER_SAMPLER=0)")
        out[key.strip()] = value.strip()
    return out
