"""What a run of `capacity` owes its terminal: Ctrl-C deferred while files are written or an import runs, and a stdout
whose reader left early, which is not a verdict."""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from capacity.errors import CapacityError


class Interrupted(BaseException):
    """Ctrl-C, raised by capacity's own SIGINT handler: typer would turn a KeyboardInterrupt into a silent exit 130."""


# Files this run has written, complete (every write is atomic): an interrupt names them.
WRITTEN: list[str] = []
# While files are written (fast) a Ctrl-C waits, so that what is on disk and what the message says agree.
# `seen` stays set once a Ctrl-C landed: library code can swallow the exception the handler raises (an import
# machinery's cleanup, a weakref finalizer, an `except BaseException`), and the run must still end as interrupted.
# `armed`: main's handler is installed (a re-sent SIGINT after main returned must not reach the default handler).
DEFERRED = {"depth": 0, "pending": False, "seen": False, "armed": False}
RESEND_SECONDS = 0.05


def _importing(frame: Any) -> bool:
    """An import is running under this frame (Python's import machinery is on the stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _resend_sigint() -> None:
    if DEFERRED["armed"]:
        os.kill(os.getpid(), signal.SIGINT)


def raise_interrupted(signum: int, frame: Any) -> None:
    DEFERRED["seen"] = True
    if DEFERRED["depth"]:
        DEFERRED["pending"] = True
        return
    if _importing(frame):
        # An exception raised inside an extension module's initialisation (torch's pybind11 callbacks while
        # `import torch` runs) cannot unwind through C++: the process aborts (SIGABRT). Let the import finish and
        # take the Ctrl-C again just after it.
        timer = threading.Timer(RESEND_SECONDS, _resend_sigint)
        timer.daemon = True
        timer.start()
        return
    raise Interrupted


def stop_if_interrupted() -> None:
    """Before any output: a Ctrl-C that landed earlier and was swallowed stops the run here."""
    if DEFERRED["seen"] and not DEFERRED["depth"]:
        raise Interrupted


@contextmanager
def writing_output() -> Iterator[None]:
    """Write and record files as one step: a Ctrl-C meanwhile is acted on after it."""
    stop_if_interrupted()
    DEFERRED["depth"] += 1
    try:
        yield
    finally:
        DEFERRED["depth"] -= 1
    if DEFERRED["pending"] and not DEFERRED["depth"]:
        DEFERRED["pending"] = False
        raise Interrupted


def interrupted_line(argv: list[str]) -> str:
    """What was interrupted, and what is on disk: every write is atomic, so only whole files were written."""
    command = next((a for a in argv if not a.startswith("-")), None)
    what = f"`capacity {command}`" if command else "`capacity`"
    wrote = f"files written before it, complete: {', '.join(WRITTEN)}" if WRITTEN else "no file was written"
    return f"capacity: interrupted: {what} stopped by Ctrl-C (SIGINT) before it finished; {wrote}"


class StdoutClosed(CapacityError):
    """The reader of stdout went away (`capacity plan --json | head -c 100`, `| true`) after the verdict was known."""

    def __init__(self, exit_code: int) -> None:
        super().__init__("stdout was closed before the report was written")
        self.exit_code = exit_code


@contextmanager
def report_to_stdout(verdict_code: int) -> Iterator[None]:
    """Where a command writes its report: a closed stdout is not a verdict, so the verdict's own code stands."""
    stop_if_interrupted()
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError as exc:
        raise StdoutClosed(verdict_code) from exc


def stdout_console() -> Any:
    """A rich Console on stdout whose broken pipe is a BrokenPipeError for report_to_stdout (rich itself exits 1)."""
    from rich.console import Console

    class StdoutConsole(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError(errno.EPIPE, "stdout was closed")

    return StdoutConsole()


def stdout_was_closed() -> bool:
    """click's or rich's broken-pipe handling ran: stdout wrapped in PacifyFlushWrapper, or its fd is /dev/null."""
    if type(sys.stdout).__name__ == "PacifyFlushWrapper":
        return True
    try:
        fd, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError):
        return False
    return (fd.st_dev, fd.st_ino) == (null.st_dev, null.st_ino)


def detach_stdout() -> None:
    """Point a closed stdout at /dev/null, so the interpreter's last flush does not fail (exit 120) or warn."""
    with suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def exit_program(code: int) -> None:
    """End `python -m capacity` with `code`. A rank of a launched run (torchrun: RANK set, torch.distributed used)
    leaves with os._exit once its output is flushed: its process group is ended and its files are written, and the
    interpreter's and C++'s teardown of what torch.distributed left can still abort the process after that
    ("terminate called without an active exception", rank 0 of a gloo PP run under load, after it wrote its
    profile), which would turn a finished run into a failed one for the launcher."""
    if os.environ.get("RANK", "") != "" and "torch.distributed" in sys.modules:
        for stream in (sys.stdout, sys.stderr):
            with suppress(Exception):
                stream.flush()
        os._exit(code)
    sys.exit(code)
