"""`capacity profile` and `capacity verify`: measure a model on the local GPU (or the CPU probe), and prove a plan there."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from capacity import disk_cache
from capacity.cli.estimate import local_cuda_gpu
from capacity.cli.options import (
    JSON_STDOUT,
    ConfigOpt,
    CpuProbeOpt,
    CsvOpt,
    ForceOpt,
    HtmlOpt,
    JsonOpt,
    Knobs,
    ModelOpt,
    TpOpt,
    serving_args_of,
    serving_options,
)
from capacity.cli.output import check_outputs, export_outputs, json_target, show_plan
from capacity.cli.progress import PhaseProgress, checked_cpu_probe_cost, profile_with_progress
from capacity.cli.runtime import WRITTEN, report_to_stdout, stdout_console, writing_output
from capacity.errors import EXIT_DOES_NOT_FIT, EXIT_FITS, BadInput, CapacityError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.memory.measured_profile import MemoryProfile
    from capacity.planning.plan import Plan
    from profilers.launcher import LaunchEnv

LOCAL_GPU_HELP = "Resolve vLLM's defaults for this catalog GPU instead of the local one."
PP_HELP = "Pipeline stages: each rank builds and profiles its stage's layers (decoder-only text models; no plan is made yet)."


@contextmanager
def launched_exit(launch: LaunchEnv | None) -> Iterator[None]:
    """Under torchrun, rank 0's exit code is sent to every other rank (which wait for it in `others_exit`)."""
    if launch is None or launch.rank != 0:
        yield
        return
    code = EXIT_FITS
    try:
        yield
    except typer.Exit as exc:
        code = int(exc.exit_code)
        raise
    except CapacityError as exc:
        code = exc.exit_code
        raise
    except BaseException:
        code = 3
        raise
    finally:
        from profilers.tensor_parallel import finish_launched

        finish_launched(launch, code)


def others_exit(launch: LaunchEnv) -> typer.Exit:
    """A rank other than 0 writes nothing: it exits with rank 0's code."""
    from profilers.tensor_parallel import finish_launched

    return typer.Exit(finish_launched(launch, EXIT_FITS))


def launcher_of(tp: int, pp: int) -> LaunchEnv | None:
    """torchrun's environment when this process is one rank of several (None: capacity spawns its own)."""
    from profilers.launcher import launch_env

    launch = launch_env()
    return None if launch is None or (launch.world_size == 1 and tp * pp == 1) else launch


def show_stages(measured: MemoryProfile) -> None:
    """A profile of pipeline stages: each rank's measured figures, one line each (no plan is made from it yet)."""
    console = stdout_console()
    for r in measured.ranks:
        peak = max((ph.peak_allocated_bytes for ph in r.phases), default=0)
        layers = r.fingerprint.knobs.get("stage_layers", [0, 0])
        oom = f", out of memory in {r.oom.phase}" if r.oom else ""
        console.print(
            f"rank {r.rank} (stage {r.pipeline_rank}, layers {layers[0]}-{layers[1] - 1}): weights {r.weights_bytes:,} B, "
            f"peak allocated {peak:,} B, total consumed {r.total_consumed_bytes:,} B (measured){oom}"
        )
    console.print("no plan: plans from per-stage profiles are not built yet (the profile JSON holds every rank's phases)")


MAX_MODEL_LEN_HELP = "Decoder context length."


@serving_options(
    "gpu_memory_utilization",
    "block_size",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "limit_mm_per_prompt",
    "mm_processor_kwargs",
    "hf_overrides",
    "num_speculative_tokens",
    "kv_cache_dtype",
    "dtype",
    "enforce_eager",
    "language_model_only",
    "enable_expert_parallel",
    "enable_prefix_caching",
    "usage_context",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "pp_layer_partition",
    "revision",
    helps={"max_model_len": MAX_MODEL_LEN_HELP, "pipeline_parallel_size": PP_HELP},
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
    cpu_probe: CpuProbeOpt = False,
    force: ForceOpt = False,
    json_out: JsonOpt = None,
    csv: CsvOpt = None,
    html: HtmlOpt = None,
) -> None:
    """Profile MODEL on the local GPU as vLLM 0.33's Model Runner V2 starts it, save the profile, and plan from it.

    A CUDA out-of-memory error in a phase is a result (exit 1), and the GPU memory is released.
    Exit codes: 0 fits, 1 does not fit or out of memory, 2 bad input (e.g. no GPU), 3 runtime failure.
    """
    from profilers.startup import Timings, bytecode_note, cache_bytecode, freeze_heap_at_exit, process_age_s

    timings = Timings()
    age = process_age_s()
    if age is not None:
        timings.seconds["python_start"] = age  # the interpreter and the CLI's imports, before this command ran
    freeze_heap_at_exit()
    bytecode = cache_bytecode(disk_cache.bytecode_folder())
    if attn_implementation not in ("sdpa", "eager", "flash_attention_2"):
        raise BadInput(f"--attn-implementation {attn_implementation!r}: use sdpa, flash_attention_2 or eager")
    model, args = serving_args_of(model, config, **knobs)
    check_outputs(csv=csv, html=html, json_out=json_out, output=output)
    if not cpu_probe and not local_cuda_gpu():
        raise BadInput(
            "no usable NVIDIA GPU here: `capacity profile` measures on a GPU; plan offline with `capacity plan` (the same phases on fake tensors, "
            "seconds), or pass --cpu-probe for a real, slow CPU run of a small model"
        )
    timings.lap("cli")
    pp = args.pipeline_parallel_size
    if pp > 1 and (json_out is not None or csv is not None or html is not None):
        raise BadInput("--json, --csv and --html report a plan; a profile of pipeline stages makes none yet: write it with --output only")
    launch = launcher_of(args.tensor_parallel_size, pp)
    with launched_exit(launch):
        if args.tensor_parallel_size > 1 or pp > 1 or launch is not None:
            from profilers.api import profile_model_tensor_parallel

            if timeout <= 0:
                raise BadInput(f"--timeout must be > 0 seconds, got {timeout}")
            result, ranks = profile_model_tensor_parallel(
                model, args, gpu_name=gpu, cpu=cpu_probe, encoder_tp_mode=mm_encoder_tp_mode, attn_implementation=attn_implementation,
                capture_graphs=not no_graphs, warmup=not no_warmup, timeout_s=timeout, collective_timeout_s=min(timeout, 300.0), launch=launch,
            )  # fmt: skip
            if ranks is None:  # a rank of torchrun's other than 0
                assert launch is not None
                raise others_exit(launch)
            measured = ranks
        else:
            result, measured = profile_with_progress(
                model, args, gpu, cpu_probe=cpu_probe, attn=attn_implementation, graphs=not no_graphs, warmup=not no_warmup, force=force, timings=timings,
                release_memory=False,  # the process ends after the plan: the driver frees the GPU at exit
            )  # fmt: skip
        _write_and_report(measured, result, output, csv, html, json_out, bytecode.note() if bytecode is not None else bytecode_note())


def _write_and_report(
    measured: MemoryProfile, result: Plan | None, output: Path, csv: Path | None, html: Path | None, json_out: str | None, python_note: str | None
) -> None:
    from capacity.memory.measured_profile import save_profile

    with writing_output():
        save_profile(measured, output)
        WRITTEN.append(str(output))
    print(f"capacity: wrote profile {output}", file=sys.stderr)
    if measured.oom is not None:
        print(f"capacity: out of memory in phase '{measured.oom.phase}' ({measured.oom.detail}); GPU memory released", file=sys.stderr)
    if result is None:  # pipeline stages: measured, not planned
        code = EXIT_DOES_NOT_FIT if measured.oom is not None else EXIT_FITS
        with report_to_stdout(code):
            show_stages(measured)
        raise typer.Exit(code)
    export_outputs(result, csv, html, json_out)
    code = EXIT_FITS if result.fits else EXIT_DOES_NOT_FIT
    with report_to_stdout(code):
        show_plan(result, json_out)
        if json_out != JSON_STDOUT and measured.timings_s:
            from reports.terminal import render_timings

            render_timings(measured, stdout_console(), python_note)
    raise typer.Exit(code)


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
    cpu_probe: CpuProbeOpt = False,
    force: ForceOpt = False,
    json_out: JsonOpt = None,
) -> None:
    """Prove a plan on the GPU: allocate its KV pool next to the model and run its worst steady state.

    Exit codes: 0 verified (no OOM, within the requested memory), 1 failed (a reproducer is printed), 2 bad input, 3 runtime failure.
    """

    from profilers.startup import cache_bytecode, freeze_heap_at_exit
    from profilers.verify import check_verifiable_family

    freeze_heap_at_exit()
    cache_bytecode(disk_cache.bytecode_folder())

    if steps < 1:
        raise BadInput(f"--steps must be >= 1, got {steps}")
    measured = None
    if profile is not None:
        from capacity.memory.measured_profile import load_profile

        measured = load_profile(profile)
        model = model or measured.fingerprint.model_name
    model, args = serving_args_of(model, config, **knobs, tensor_parallel_size=tensor_parallel_size)
    check_outputs(json_out=json_out)
    if not cpu_probe and not local_cuda_gpu():
        raise BadInput("no usable NVIDIA GPU here: `capacity verify` runs on a GPU (or pass --cpu-probe for a dry run)")
    if measured is None:  # a family verify cannot run is refused before it is profiled
        from capacity.model.registry import load_model

        check_verifiable_family(load_model(model, args.revision, args.mm_processor_kwargs, args.hf_overrides)[1])
    tp = args.tensor_parallel_size if measured is None else measured.measured_tensor_parallel_size
    if measured is not None and args.tensor_parallel_size not in (1, tp):
        raise BadInput(f"--tensor-parallel-size {args.tensor_parallel_size}: the profile was taken at TP {tp}; verify its plan at TP {tp} or profile again")
    launch = launcher_of(tp, args.pipeline_parallel_size)
    with launched_exit(launch):
        _verify_ranks(model, args, tp, launch, measured=measured, gpu=gpu, cpu_probe=cpu_probe, force=force, steps=steps, mm_encoder_tp_mode=mm_encoder_tp_mode, timeout=timeout, json_out=json_out)


def _verify_ranks(
    model: str, args: Any, tp: int, launch: LaunchEnv | None, *, measured: Any, gpu: str | None, cpu_probe: bool, force: bool, steps: int, mm_encoder_tp_mode: str, timeout: float, json_out: Any
) -> None:
    import shlex

    from capacity.planning.planner import plan_for
    from capacity.planning.suggest import suggested_flags
    from profilers.probes import CpuProbe, CudaProbe
    from profilers.verify import check_verifiable, run_verify

    if args.pipeline_parallel_size > 1:
        raise BadInput("verify at --pipeline-parallel-size > 1 is not implemented yet: profile the stages with `capacity profile`")
    ranked = tp > 1 or launch is not None
    if ranked:
        from dataclasses import replace

        from profilers.api import profile_model_tensor_parallel, verify_tensor_parallel_plan

        if timeout <= 0:
            raise BadInput(f"--timeout must be > 0 seconds, got {timeout}")
        args = replace(args, tensor_parallel_size=tp)
        if measured is None and not cpu_probe:
            result, _ = profile_model_tensor_parallel(
                model, args, gpu_name=gpu, cpu=cpu_probe, encoder_tp_mode=mm_encoder_tp_mode, timeout_s=timeout, collective_timeout_s=min(timeout, 300.0), launch=launch
            )
            if launch is not None:  # every rank verifies rank 0's plan
                from profilers.tensor_parallel import share_from_rank0

                result, stopped = share_from_rank0(launch, result)
                if stopped is not None:
                    raise typer.Exit(stopped)
        else:
            result = plan_for(model, args, gpu, measured)
    elif measured is None and not cpu_probe:
        result, _ = profile_with_progress(model, args, gpu)
    else:
        result = plan_for(model, args, gpu, measured)
    pinned = ["--revision", args.revision] if args.revision else []
    reproducer = shlex.join(["capacity", "verify", "--model", model, *pinned, *" ".join(suggested_flags(result)).split(), "--steps", str(steps)])
    check_verifiable(result)
    if ranked:
        outcome = verify_tensor_parallel_plan(result, cpu=cpu_probe, steps=steps, reproducer=reproducer, encoder_tp_mode=mm_encoder_tp_mode, timeout_s=timeout, launch=launch)
        if outcome is None:  # a rank of torchrun's other than 0
            assert launch is not None
            raise others_exit(launch)
    else:
        cost = checked_cpu_probe_cost("verify", result, force=force, steps=steps) if cpu_probe else None
        with PhaseProgress(cost) as on_phase:
            outcome = run_verify(result, CpuProbe() if cpu_probe else CudaProbe(), steps=steps, reproducer=reproducer, on_phase=on_phase)
    code = EXIT_FITS if outcome.passed else EXIT_DOES_NOT_FIT
    text = None
    if json_out is not None:
        import json

        text = json.dumps({"plan": result.to_dict(), "verify": outcome.to_dict()}, indent=2) + "\n"
        path = json_target(json_out)
        if path is not None:
            from reports.export import write_files

            with writing_output():
                write_files({path: ("--json", text.encode())})
                WRITTEN.append(str(path))
    with report_to_stdout(code):
        if json_out == JSON_STDOUT:
            sys.stdout.write(text or "")
        else:
            from reports.terminal import render_verify

            render_verify(outcome, stdout_console())
    raise typer.Exit(code)
