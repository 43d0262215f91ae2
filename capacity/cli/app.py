"""The `capacity` command (typer): the app, its commands, and the one place that maps exceptions to exit codes.

Exit codes: 0 fits, 1 does not fit, 2 bad input, 3 runtime failure, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from contextlib import suppress
from importlib import import_module
from typing import Any

import typer

from capacity.cli.runtime import (
    DEFERRED,
    WRITTEN,
    Interrupted,
    StdoutClosed,
    detach_stdout,
    interrupted_line,
    raise_interrupted,
    stdout_was_closed,
    stop_if_interrupted,
)
from capacity.errors import EXIT_BAD_INPUT, EXIT_FITS, EXIT_INTERRUPTED, EXIT_RUNTIME_FAILURE, CapacityError

EXIT_CODES_HELP = (
    "Exit codes: 0 fits (check: passes), 1 does not fit (check: fails), 2 bad input, 3 runtime failure, 130 interrupted (Ctrl-C; no partial file). "
    "A reader that closes stdout early (`| head`) does not change the verdict's code (3 if it closed before the verdict was known)."
)
MODEL_RESOLUTION_HELP = (
    "--model is resolved in this order: a folder with config.json; a catalog id or alias (`capacity models`); "
    "a Hugging Face id (org/name) in the local HF cache; the Hugging Face Hub (config, processor and generation "
    "configs and the safetensors headers only, into the HF cache; HF_TOKEN for gated repos, HF_HUB_OFFLINE=1 for the cache alone)."
)

APP_HELP = f"How a multimodal / encoder-decoder model will use GPU memory under vLLM 0.33 (Model Runner V2). {MODEL_RESOLUTION_HELP} {EXIT_CODES_HELP}"

# name: (module, function, command class: "json" takes --json / -o, "readable" prints text), in --help's order
COMMANDS: dict[str, tuple[str, str, str]] = {
    "plan": ("capacity.cli.plan", "plan", "json"),
    "profile": ("capacity.cli.profile", "profile_command", "json"),
    "verify": ("capacity.cli.profile", "verify", "json"),
    "reconcile": ("capacity.cli.reconcile", "reconcile", "readable"),
    "check": ("capacity.cli.check", "check", "json"),
    "sweep": ("capacity.cli.sweep", "sweep", "json"),
    "fit": ("capacity.cli.fit", "fit", "json"),
    "models": ("capacity.cli.catalogs", "models", "readable"),
    "gpus": ("capacity.cli.catalogs", "gpus", "readable"),
}
GROUPS: dict[str, tuple[str, str]] = {"cache": ("capacity.cli.cache", "app")}


def build_app(only: str | None = None) -> typer.Typer:
    """The typer app with every command, or with the one `only` names: a run imports its own command's module, not
    the others', and typer builds the parameters of that command alone (`gpus`, `plan --help`: about 20 ms less)."""
    from capacity.cli.help_layout import ReadableCommand
    from capacity.cli.options import OptionalJsonCommand

    classes = {"json": OptionalJsonCommand, "readable": ReadableCommand}
    built = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True, help=APP_HELP)
    for name, (module, function, kind) in COMMANDS.items():
        if only in (None, name):
            built.command(name=name, cls=classes[kind])(getattr(import_module(module), function))
    for name, (module, attribute) in GROUPS.items():
        if only in (None, name):
            built.add_typer(getattr(import_module(module), attribute), name=name)
    if only in COMMANDS:  # one command alone would become the root command: a callback keeps `capacity NAME ...`
        built.callback()(_no_options)
    return built


def _no_options() -> None:
    """The app's own (empty) options."""


def _command_named(argv: list[str]) -> str | None:
    """The command `argv` runs when its first word names one, else None (the top-level help, a typo: every command
    is registered so that typer lists them or suggests one)."""
    return argv[0] if argv and (argv[0] in COMMANDS or argv[0] in GROUPS) else None


def __getattr__(name: str) -> Any:
    """`app`: the whole app, built on first use (the docs' CLI reference and the tests walk it)."""
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    """Entry point: one-line errors, documented exit codes, never a traceback for bad input."""
    argv = sys.argv[1:] if argv is None else list(argv)
    WRITTEN.clear()
    DEFERRED.update(depth=0, pending=False, seen=False, armed=False)
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread
        return _main(argv)
    previous = signal.signal(signal.SIGINT, raise_interrupted)
    DEFERRED["armed"] = True
    try:
        return _main(argv)
    except (Interrupted, KeyboardInterrupt):  # a second Ctrl-C while the first is reported, or one _main re-raised
        print(interrupted_line(argv), file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        DEFERRED["armed"] = False
        signal.signal(signal.SIGINT, previous)


def _main(argv: list[str]) -> int:
    try:  # typer >= 0.2x vendors click as typer._click; older typer raises click's own exceptions
        from typer._click.exceptions import UsageError
    except ImportError:  # pragma: no cover
        from click.exceptions import UsageError

    try:
        # standalone_mode=False: typer returns the code of a raised typer.Exit instead of exiting
        rv = build_app(_command_named(argv))(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except StdoutClosed as exc:
        detach_stdout()
        with suppress(OSError):
            print(f"capacity: note: stdout was closed before the report was written; exit {exc.exit_code} is the verdict's code", file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:
        # A write outside report_to_stdout (typer's --help) met a closed pipe: click's branch exits 1 after swapping in
        # PacifyFlushWrapper, rich's after pointing stdout at /dev/null. Exit 1 reads as "does not fit": say 3.
        if exc.code != 1 or not stdout_was_closed():
            raise
        detach_stdout()
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
        stop_if_interrupted()  # (each failure below: after a swallowed Ctrl-C it is the Ctrl-C's consequence)
        print("capacity: error: end of input", file=sys.stderr)
        return EXIT_RUNTIME_FAILURE
    except (Interrupted, KeyboardInterrupt):
        print(interrupted_line(argv), file=sys.stderr)
        return EXIT_INTERRUPTED
    except CapacityError as exc:
        stop_if_interrupted()
        print(f"capacity: error: {' '.join(str(exc).split())}", file=sys.stderr)  # one line, whatever the message held
        return exc.exit_code
    except Exception as exc:  # a bug, not the input: still exit 3 (a gate must not read a crash as "fail")
        stop_if_interrupted()
        if os.environ.get("CAPACITY_TRACEBACK"):
            traceback.print_exc()
        what = " ".join(str(exc).split())
        print(f"capacity: error: internal error: {type(exc).__name__}: {what} (set CAPACITY_TRACEBACK=1 for the traceback)", file=sys.stderr)
        return EXIT_RUNTIME_FAILURE
    stop_if_interrupted()
    return int(rv) if isinstance(rv, int) else EXIT_FITS


if __name__ == "__main__":
    sys.exit(main())
