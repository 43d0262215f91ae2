"""`capacity fit`: the configurations that meet a concurrency and context target, fewest GPUs first."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from capacity.cli.estimate import chosen_estimate, default_estimate
from capacity.cli.options import (
    JSON_STDOUT,
    SERVING_OPTIONS,
    ConfigOpt,
    JsonOpt,
    Knobs,
    ModelOpt,
    VllmVersionOpt,
    read_serve_yaml,
    release_semantics,
    serving_options,
    serving_values,
)
from capacity.cli.output import check_outputs, json_target
from capacity.cli.runtime import WRITTEN, report_to_stdout, stdout_console, writing_output
from capacity.errors import EXIT_DOES_NOT_FIT, EXIT_FITS, BadInput
from capacity.units import parse_human_int

FIT_SEARCHES = ("max_model_len",)  # fit takes --max-model-len as its target (a number or 'max'), not as a knob

HELD = "Held at this value (the search changes only the knobs not given)."


@serving_options(*(name for name in SERVING_OPTIONS if name not in FIT_SEARCHES))
def fit(
    *,
    model: ModelOpt = None,
    gpu: Annotated[str | None, typer.Option(help="GPU types to try, comma-separated (e.g. L40S,H100-80GB,H200); default: the local GPU, else H200.")] = None,
    max_gpus: Annotated[
        int, typer.Option("--max-gpus", help="The most GPUs of one type a configuration may use: TP x PP x DP, over nodes above one node's GPUs.")
    ] = 8,
    min_concurrency: Annotated[
        int, typer.Option("--min-concurrency", help="Requests the server must run at once at max_model_len: min(requests the KV cache holds, max_num_seqs).")
    ] = 1,
    max_model_len: Annotated[
        str | None,
        typer.Option(
            "--max-model-len",
            help="The context every request must be able to use, in tokens, or 'max' (default, unless --config sets it): the longest that meets --min-concurrency.",
        ),
    ] = None,
    max_utilization: Annotated[
        float | None,
        typer.Option(
            "--max-gpu-memory-utilization", help="The most gpu_memory_utilization the search may set (default: vLLM's 0.92, or --gpu-memory-utilization)."
        ),
    ] = None,
    verify: Annotated[int, typer.Option("--verify", help="Re-plan the first N configurations with the default estimate (a fake-tensor trace; 0: none).")] = 1,
    vllm_version: VllmVersionOpt = None,
    config: ConfigOpt = None,
    knobs: Knobs,
    estimate: Annotated[
        str | None,
        typer.Option(
            "--estimate",
            help="'trace' (default; CAPACITY_ESTIMATE sets another): search by formula, check the first --verify configurations with the trace; 'formula': no check.",
        ),
    ] = None,
    json_out: JsonOpt = None,
    csv: Annotated[Path | None, typer.Option("--csv", metavar="PATH", help="Write the configurations as one CSV file ('-': stdout).")] = None,
) -> None:
    """Search the knobs vLLM lets a user change for the configurations of MODEL that meet a target, fewest GPUs first.

    Searched: GPU type and count, laid out as TP, DP engines or TP x PP (TP inside a node; above one node's GPUs,
    nodes of --node, or of the GPU's catalog node type), max_model_len ('max'), max_num_seqs, max_num_batched_tokens,
    --limit-mm-per-prompt, the --mm-processor-kwargs size key a family models (Qwen-VL max_pixels, InternVL
    max_dynamic_patch, Gemma-4 max_soft_tokens), the KV-cache dtype and gpu_memory_utilization up to
    --max-gpu-memory-utilization; a knob given here is held. A configuration raises no warning a searched knob would
    clear (an item longer than max_model_len); one no change clears is printed with it. With DP engines the target is
    their total (each engine runs its share at once). The search plans by
    formula; the first --verify configurations are then checked with the default estimate (a fake-tensor trace).
    Each configuration is an ordinary plan: its `capacity plan` line re-plans it to the same figures.
    Exit codes: 0 one fits, 1 none fits, 2 bad input, 3 runtime failure.
    """
    from capacity.gpu.detect import resolve_gpu
    from capacity.model.registry import load_model
    from capacity.planning.fit import FitTarget
    from capacity.planning.fit import fit as search
    from capacity.planning.sweep import parse_name_list
    from capacity.serving.config import ServingArgs

    semantics = release_semantics(vllm_version)  # an unmodelled release is refused before any work
    values, model = read_serve_yaml(config, model)
    if not model:
        raise BadInput("no model: pass --model (a folder, a catalog id or a Hugging Face id org/name), or 'model:' in --config")
    from_yaml = values.pop("max_model_len", None)
    values.update(serving_values(**knobs))
    if values.get("node") is not None:  # --node "8x H200" names the GPU (--gpu, if given, must name the same)
        from capacity.serving.data_parallel import node_gpu_name

        if gpu is not None and "," in gpu:
            raise BadInput(f"--node {values['node']!r} holds one GPU type; --gpu lists several ({gpu}): give one, or drop --gpu")
        gpu = node_gpu_name(values["node"], gpu)
    if max_model_len is None and from_yaml is not None and from_yaml != -1:
        max_model_len = str(from_yaml)
    length = target_length(max_model_len or "max")
    if verify < 0:
        raise BadInput(f"--verify must be an integer >= 0, got {verify}")
    target = FitTarget(min_concurrency, length, max_gpus, max_utilization if max_utilization is not None else values.get("gpu_memory_utilization"))
    if max_utilization is not None and "gpu_memory_utilization" in values:
        raise BadInput("--gpu-memory-utilization holds the utilization; --max-gpu-memory-utilization lets the search raise it: give one of them")
    how = chosen_estimate(estimate)
    check_outputs(json_out=json_out, csv=None if csv is None or str(csv) == JSON_STDOUT else csv, csv_is_folder=False)
    names = parse_name_list(gpu, "--gpu") if gpu is not None else (None,)
    gpus, notes = [], []
    for name in names:
        resolved, note = resolve_gpu(name)
        if any(g.name == resolved.name for g, _ in gpus):
            raise BadInput(f"--gpu lists {resolved.name} twice")
        gpus.append((resolved, resolved.name))
        notes += [note] if note else []
    base = ServingArgs(**{**values, "max_model_len": length})
    if semantics.release:
        from capacity.vllm.serve_flags import release_of, require_flags

        require_flags(base, release_of(semantics), semantics.release)
    source, spec = load_model(model, base.revision, base.mm_processor_kwargs, base.hf_overrides)
    checker = default_estimate(model, semantics) if how == "trace" and verify else None
    result = search(source, spec, gpus, base, frozenset(values), target, checker, verify, semantics=semantics)
    if notes or source.alias_note:
        from dataclasses import replace

        result = replace(result, notes=(*(n for n in (source.alias_note, *notes) if n), *result.notes))
    write_files(result, json_out, csv)
    code = EXIT_FITS if result.fits else EXIT_DOES_NOT_FIT
    with report_to_stdout(code):
        if json_out == JSON_STDOUT:
            from reports.fit import fit_json

            print(fit_json(result), end="")
        elif csv is not None and str(csv) == JSON_STDOUT:
            from reports.fit import fit_csv

            print(fit_csv(result), end="")
        else:
            from reports.fit import render_fit

            render_fit(result, stdout_console(), how)
    raise typer.Exit(code)


def target_length(text: str) -> int | None:
    """--max-model-len: a positive number of tokens (vLLM's `4k`, `32K` too), or 'max'."""
    if text.strip().lower() == "max":
        return None
    try:
        value = parse_human_int(text, "--max-model-len")
    except BadInput as exc:
        raise BadInput(f"--max-model-len {text!r}: give a number of tokens (e.g. 32768 or 32k) or 'max'") from exc
    if value <= 0:
        raise BadInput(f"--max-model-len {text!r}: give a positive number of tokens or 'max'")
    return value


def write_files(result: Any, json_out: str | None, csv: Path | None) -> None:
    """--json PATH and --csv PATH, all or nothing, before anything is printed."""
    import sys

    from reports.export import write_files as write_atomically
    from reports.fit import fit_csv, fit_json

    files: dict[Path, tuple[str, bytes]] = {}
    json_file = json_target(json_out)
    if json_file is not None:
        files[json_file] = ("--json", fit_json(result).encode())
    if csv is not None and str(csv) != JSON_STDOUT:
        files[csv] = ("--csv", fit_csv(result).encode())
    if not files:
        return
    with writing_output():
        written = write_atomically(files)
        WRITTEN.extend(str(p) for p in written)
    print(f"capacity: wrote {', '.join(str(p) for p in files)}", file=sys.stderr)
