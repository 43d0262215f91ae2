"""Error types and the documented exit codes of the `capacity` command."""

from __future__ import annotations

EXIT_FITS = 0
EXIT_DOES_NOT_FIT = 1
EXIT_BAD_INPUT = 2
EXIT_RUNTIME_FAILURE = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT: the shell's convention for a command stopped by Ctrl-C


class CapacityError(Exception):
    """An error the CLI reports as one line; `exit_code` is what the process returns."""

    exit_code = EXIT_RUNTIME_FAILURE


class BadInput(CapacityError):
    """The user's input (model, knobs, files) is wrong; the message says what to do."""

    exit_code = EXIT_BAD_INPUT


class RuntimeFailure(CapacityError):
    """Something failed while computing the plan (not the user's input)."""

    exit_code = EXIT_RUNTIME_FAILURE
