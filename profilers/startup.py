"""What a GPU profile spends besides the phases it measures, timed, and the parts of it vLLM itself never pays
kept out of the run (issue 23, section 6).

Measured on the project's H200 (bench/results/profile-speed-2026-12-01): of a `capacity profile` of
whisper-large-v3, the phases themselves took about 2 s. The rest was importing transformers' model code, the
garbage collector walking the whole heap of imported modules at every `gc.collect()` and again at exit, and Python
compiling torch from source in every process (that machine's environment: `bytecode_note`). Nothing here touches
the GPU: the bytes a profile measures are the same with and without it.

No torch or transformers at module level.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class Timings:
    """Wall seconds of a profile's steps, in the order they ran: each `lap` records the time since the one before
    (time.perf_counter), so the steps tile the run and add up to its wall time."""

    def __init__(self, start: float | None = None) -> None:
        self.last = time.perf_counter() if start is None else start
        self.seconds: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self.last, 4)
        self.last = now

    def total(self) -> float:
        return round(sum(self.seconds.values()), 4)


def process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc, 10 ms ticks): Python's start and the CLI's imports, before
    any step is timed. None where /proc does not say."""
    try:
        with open("/proc/self/stat") as f:
            started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(round(uptime - started_ticks / os.sysconf("SC_CLK_TCK"), 4), 0.0)
    except (OSError, ValueError, IndexError):
        return None


# --- transformers' optional imports ---------------------------------------------------------------------------


@dataclass(frozen=True)
class UnusedImport:
    """An optional package that transformers modules import at module level whenever it is installed, for code a
    profile never runs. While transformers' model code is imported, transformers.utils' `flag` answers False to
    those modules (`importers`: a module, or a package and everything under it) and the truth to every other caller;
    the modules keep that answer (the code that needs the package would find it missing in this process), and
    transformers.utils gets its own function back."""

    flag: str  # transformers.utils' is_<package>_available
    importers: str

    def spares(self, module: str) -> bool:
        return module == self.importers or module.startswith(self.importers + ".")


CANDIDATE_GENERATOR = "transformers.generation.candidate_generator"

UNUSED_IMPORTS = (
    # transformers 5.17 generation/candidate_generator.py: `if is_sklearn_available(): from sklearn.metrics import
    # roc_curve` (later releases import it inside the function). Every model class imports it through GenerationMixin.
    # It serves assisted generation's confidence threshold: 1.9 s of the profile's wall time on the H200 machine.
    UnusedImport("is_sklearn_available", CANDIDATE_GENERATOR),
    # transformers 5.17 loss/loss_for_object_detection.py and the other DETR-family losses: `if is_scipy_available():
    # from scipy.optimize import linear_sum_assignment` for the training losses' Hungarian matcher. modeling_utils imports
    # them all through loss_utils: 0.68 s.
    UnusedImport("is_scipy_available", "transformers.loss"),
)
"""bench/results/profile-speed-2026-12-01: `-X importtime` of a whisper-large-v3 profile (1-before-diagnose for
scikit-learn, 2-intermediate for scipy.optimize)."""


@contextmanager
def without_unused_optional_imports() -> Iterator[None]:
    """While transformers' model code is imported, the packages of UNUSED_IMPORTS read as absent to the modules that
    import them for nothing a profile runs, and as they are to every other module (scipy in FNet's or MaskFormer's
    model code). Nothing is patched without transformers.utils."""
    utils = sys.modules.get("transformers.utils")
    originals = {unused: getattr(utils, unused.flag) for unused in UNUSED_IMPORTS if hasattr(utils, unused.flag)}
    for unused, original in originals.items():
        setattr(utils, unused.flag, _answer(unused, original))
    try:
        yield
    finally:
        for unused, original in originals.items():
            setattr(utils, unused.flag, original)


def _answer(unused: UnusedImport, original: Callable[[], bool]) -> Callable[[], bool]:
    def is_available() -> bool:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        return False if unused.spares(caller) else original()

    return is_available


# --- the garbage collector --------------------------------------------------------------------------------------


# What every profile and fake-tensor trace imports before its phases: torch, transformers, and transformers' model
# base (every family's model is built from transformers' modules, and modeling_utils imports nearly all of what they
# need: torch._dynamo, torch.distributed.tensor and sympy among it).
RUN_MODULES = ("torch", "transformers", "transformers.modeling_utils")


@contextmanager
def collector_paused() -> Iterator[None]:
    """The garbage collector off (gc.disable) inside, back on after if it was on: for imports.

    Importing torch and transformers' model code (RUN_MODULES) makes about 350,000 objects that stay alive (modules,
    classes, functions) and little garbage (about 9,000 objects). While they are made, the collector's automatic
    full collections walk the growing heap again and again: about 0.9 s CPU of the 4.7 s those imports take on a
    2-core machine. Nothing a profile measures changes: the imports allocate no device memory and come before the
    phases and their own collections, and the garbage they leave is collected later (or frozen with the heap, inside
    the pause, and freed once it thaws: a heap frozen before the collector is back costs no young-generation walk
    of the 350,000 new objects either)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def import_modules(names: Iterable[str]) -> None:
    """Import `names` as the weights phase imports transformers' model code: `without_unused_optional_imports`."""
    for name in names:
        with without_unused_optional_imports():
            importlib.import_module(name)


def freeze_heap() -> bool:
    """Move every object alive now out of the collector's reach (gc.freeze), as vLLM's engine freezes its start-up
    heap: the `gc.collect()` before each measurement (vLLM's memory_profiling does one too) then walks only what the
    phases made, not the millions of objects of torch, sympy and transformers (0.2 s a collection on the H200
    machine). Objects frozen here are alive (modules, the model), so no collection would have freed them, or (frozen
    right after imports, `collector_paused`) garbage the imports left, which holds no tensor; `thaw_heap` gives them
    back before the run's last collection.

    True when this call began the freeze (its caller thaws). False when the heap was frozen already: what was made
    since (the modules imported after, the model) is frozen too, and the freeze's first caller thaws it all with the
    rest (gc.unfreeze thaws every frozen object). Whether this module froze it is remembered: gc.get_freeze_count()
    walks every frozen object (20 ms with torch and transformers imported), and a run asks again once its weights are
    built."""
    began = not _FROZEN[0] and not gc.get_freeze_count()
    gc.freeze()
    if began:
        _FROZEN[0] = True
    return began


def thaw_heap(frozen: bool) -> None:
    if frozen:
        gc.unfreeze()
        _FROZEN[0] = False


_FROZEN = [False]  # freeze_heap froze the heap and thaw_heap has not given it back yet


def freeze_heap_at_exit() -> None:
    """At interpreter exit, freeze the heap before Python's shutdown walks it: its final collections then skip the
    millions of objects torch, sympy and transformers made, which the ending process frees anyway (about 1.3 s of a
    profile's wall time on the H200 machine, after the report is out). Only at exit: a caller that goes on (a test
    calling the CLI's main) keeps a collector that sees everything."""
    global _AT_EXIT
    if not _AT_EXIT:
        atexit.register(gc.freeze)
        _AT_EXIT = True


_AT_EXIT = False


# --- Python's bytecode cache --------------------------------------------------------------------------------------


def bytecode_note(package: str = "torch") -> str | None:
    """A line saying that Python compiles `package` from source in every process here, or None.

    It does when the install holds no valid .pyc for it and Python may not write one (PYTHONDONTWRITEBYTECODE, or a
    read-only folder): on the H200 machine (PYTHONDONTWRITEBYTECODE=1, no bytecode shipped for torch, sympy and
    numpy) that is about 1,700 modules compiled in every run. Finds the package without importing it."""
    found = _compiled_in_every_run(package)
    if found is None:
        return None
    return (
        f"Python compiled {package} from source: the install has no valid bytecode for it and {found[1]}, so every run compiles it again "
        "(--no-cache or CAPACITY_NO_CACHE=1 keeps capacity from caching it); with bytecode cached the imports take seconds less"
    )


@dataclass(frozen=True)
class BytecodeCache:
    """The bytecode of a profile's imports, kept in capacity's disk cache because the install has none for torch and
    Python may not write it beside the source."""

    folder: str
    why: str  # why Python would compile torch again in every run
    had_torch: bool  # the folder held valid bytecode for torch when this run started

    def note(self) -> str:
        done = "loaded torch's and transformers' bytecode from there" if self.had_torch else "compiled them and stored the bytecode for later runs"
        return (
            f"the install has no bytecode for torch and {self.why}: capacity keeps the bytecode of a profile's imports in {self.folder} "
            f"(`capacity cache clear` empties it; --no-cache or CAPACITY_NO_CACHE=1 leaves it out); this run {done}"
        )


def cache_bytecode(folder: os.PathLike[str] | str | None, package: str = "torch") -> BytecodeCache | None:
    """Where Python would compile `package` from source in every run (bytecode_note), keep the bytecode it compiles in
    `folder` (capacity's disk cache, disk_cache.bytecode_folder(); None: the cache is off) from here on.

    Python's own mirror tree (sys.pycache_prefix, PEP 3147 names; the source's mtime and size checked at each
    import, so a changed source is compiled again) within this process; the sources and the environment are not
    touched. Must run before `package` is imported. On the H200 machine a whisper-large-v3 profile took a median
    7.48 s from the second run on, 13.74 s with the cache off (bench/results/profile-speed-2026-12-02d)."""
    if folder is None or package in sys.modules:
        return None
    found = _compiled_in_every_run(package)
    if found is None:
        return None
    source, why = found
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    if not os.access(folder, os.W_OK):
        return None
    sys.pycache_prefix = os.path.abspath(folder)
    sys.dont_write_bytecode = False
    return BytecodeCache(sys.pycache_prefix, why, _valid_bytecode(source, importlib.util.cache_from_source(source)))


def _source_of(package: str) -> str | None:
    """The .py file Python would import for `package`, found without importing it; None for what is not installed
    or has no source."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return spec.origin


def _compiled_in_every_run(package: str) -> tuple[str, str] | None:
    """(its source file, why) where Python compiles `package` from source in every process here (no valid bytecode,
    and Python may not write one); None when it does not."""
    source = _source_of(package)
    if source is None:
        return None
    cached = importlib.util.cache_from_source(source)
    if _valid_bytecode(source, cached):
        return None
    folder = os.path.dirname(cached)
    if not sys.dont_write_bytecode and os.access(folder if os.path.isdir(folder) else os.path.dirname(folder), os.W_OK):
        return None  # Python writes it this time: compiled once
    return source, "PYTHONDONTWRITEBYTECODE is set" if sys.dont_write_bytecode else f"{folder} is read-only"


def _valid_bytecode(source: str, cached: str) -> bool:
    """`cached` is a .pyc that Python would load for `source` (timestamp-based: the source's mtime and size)."""
    try:
        with open(cached, "rb") as f:
            header = f.read(16)
        st = os.stat(source)
    except OSError:
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(header[4:8], "little") & 1:  # hash-based: checked against the source, or never
        return True
    mtime, size = int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")
    return (mtime, size) == (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)
