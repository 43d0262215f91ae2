"""Profile a model over N tensor-parallel ranks: one process per GPU (NCCL) or per CPU slot (gloo), each running
the profiler's phases (profilers/run.py) on its shard (profilers/sharding.py).

One process per rank is started with torch.multiprocessing (spawn); they meet through torch.distributed's TCP
store on a free local port. Each rank:

1. starts its CUDA context and cuBLAS handles (as vLLM's Worker.init_device does), then measures the device
   memory that `init_process_group` and the first collectives (all-reduce, all-gather, barrier) add: NCCL's
   communicator, a term of its own; vLLM takes its baseline snapshot after this point too;
2. runs `run_profile` with a `RankShard` placement: the model built on meta, sharded, materialised, randomised;
3. sends its MemoryProfile back to the parent.

Faults are one result: collectives have a timeout (`init_process_group(timeout=)`), and the parent watches the
ranks. When a rank reports an out-of-memory phase, or dies, or the deadline passes, the parent stops the others
(terminate, then kill): a process that ends gives its GPU memory back. Ctrl-C in the parent stops every rank.
"""

from __future__ import annotations

import datetime
import os
import queue
import socket
import time
import traceback
from dataclasses import dataclass, replace
from typing import Any

from capacity.errors import EXIT_DOES_NOT_FIT, BadInput, CapacityError
from capacity.gpu.catalog import Gpu
from capacity.memory.measured_profile import MemoryProfile, combine_ranks, random_weights_kind
from capacity.model.spec import ModelSpec
from capacity.serving.config import ServingConfig
from capacity.serving.encoder_budget import MultiModalBudget
from capacity.source.resolve import ModelSource
from capacity.weights.quant_schemes import quant_method
from profilers.probes import MemoryProbe
from profilers.sharding import ENCODER_TP_MODES, encoder_whole, materialize, shard_module, shard_rules

GRACE_S = 20.0  # after one rank fails, how long the others get to report before they are stopped


class RankFailed(CapacityError):
    """A rank died or the run timed out: one line, exit 1 (the run is a does-not-fit result, not a bug)."""

    exit_code = EXIT_DOES_NOT_FIT


@dataclass(frozen=True)
class RankJob:
    """What every rank needs to run its phases (pickled to the spawned processes)."""

    source: ModelSource
    spec: ModelSpec
    serving: ServingConfig
    budget: MultiModalBudget
    gpu: Gpu
    backend: str  # "nccl" (one GPU per rank) | "gloo" (CPU probe)
    world_size: int
    port: int
    collective_timeout_s: float
    encoder_tp_mode: str = "weights"
    attn_implementation: str = "sdpa"
    capture_graphs: bool = True
    warmup: bool = True
    task: str = "profile"  # "profile" | "verify"
    plan: Any = None  # verify: the plan to put to the test (a Plan from the tensor-parallel profile)
    steps: int = 3  # verify: decode steps
    reproducer: str = ""
    # Per-rank memory limits in bytes (the CPU probe's limit; on a GPU, torch's per-process memory fraction):
    # a smaller device for one rank, to see what a rank that runs out of memory does to the run.
    rank_memory_limit_bytes: tuple[tuple[int, int], ...] = ()
    fail_rank: int | None = None  # tests: this rank dies (os._exit) after its weights phase
    hang_rank: int | None = None  # tests: this rank stops answering after its weights phase


class RankShard:
    """The placement of one tensor-parallel rank: its shard of the model, materialised and randomised."""

    def __init__(self, job: RankJob, comm: Any, communicator_bytes: int | None) -> None:
        self.job = job
        self.comm = comm
        self.rank = comm.rank
        self.world_size = comm.world_size
        self.communicator_bytes = communicator_bytes
        self.report: Any = None

    def describe(self) -> str:
        return f"(rank {self.rank} of TP {self.world_size}, sharded as vLLM's parallel layers)"

    def load(self, spec: ModelSpec, source: ModelSource, serving: ServingConfig, probe: MemoryProbe, device: str, attn: str) -> tuple[Any, str]:
        from profilers.run import _randomize
        from profilers.sharding import build_on_meta_with_host_buffers

        rules = shard_rules(spec.family)
        whole = encoder_whole(rules, self.job.encoder_tp_mode)
        with probe.host():
            model = build_on_meta_with_host_buffers(
                lambda: spec.family.build_module(dict(source.config), device="cpu", dtype=serving.dtype, init_weights=False, attn_implementation=attn)
            )
            self.report = shard_module(model, rules, self.comm, whole_encoder=whole)
        materialize(model, device)
        _randomize(model)
        if self.job.fail_rank == self.rank:
            os._exit(17)
        if self.job.hang_rank == self.rank:
            time.sleep(3600)
        return model.eval(), f"{random_weights_kind(quant_method(source.config), serving.dtype)}; {self.report.describe()}"

    def encode(self, adapter: Any, model: Any, item: Any, count: int) -> list[Any]:
        """weights mode: every rank runs the sharded encoder on all items (vLLM). data mode: rank r encodes
        items r, r + TP, ... with the whole encoder, and the outputs are combined over the ranks (vLLM
        run_dp_sharded_*_vision_model all-gathers them), so every rank holds all of them."""
        import torch

        if not (self.report and self.report.encoder_whole):
            return adapter.encode(model, item, count)
        mine = len(range(self.rank, count, self.world_size))
        local = adapter.encode(model, item, mine) if mine else []
        shape = local[0].shape if local else None
        shapes: list[Any] = [None] * self.world_size
        import torch.distributed as dist

        dist.all_gather_object(shapes, shape)
        shape = next(s for s in shapes if s is not None)
        dtype = getattr(torch, self.job.serving.dtype)
        device = local[0].device if local else ("cuda" if self.job.backend == "nccl" else "cpu")
        full = torch.zeros((count, *shape), dtype=dtype, device=device)
        for i, out in zip(range(self.rank, count, self.world_size), local, strict=True):
            full[i].copy_(out)
        del local
        self.comm.all_reduce(full)  # each item is non-zero on one rank only: the sum is the gathered outputs
        return list(full.unbind(0))

    def knobs(self) -> dict[str, Any]:
        return {"mm_encoder_tp_mode": self.job.encoder_tp_mode, "collectives_backend": self.job.backend}


def _measure_communicator(job: RankJob, rank: int, probe: MemoryProbe) -> int | None:
    """init_process_group + first collectives; the device memory they added (None without a device)."""
    import torch
    import torch.distributed as dist

    before = probe.device_used()
    kwargs: dict[str, Any] = {}
    if job.backend == "nccl":
        kwargs["device_id"] = torch.device(f"cuda:{rank}")
    dist.init_process_group(
        job.backend,
        init_method=f"tcp://127.0.0.1:{job.port}",
        rank=rank,
        world_size=job.world_size,
        timeout=datetime.timedelta(seconds=job.collective_timeout_s),
        **kwargs,
    )
    device = f"cuda:{rank}" if job.backend == "nccl" else "cpu"
    t = torch.ones(1024, device=device)
    dist.all_reduce(t)
    gathered = torch.empty(job.world_size * 1024, device=device)
    if job.backend == "nccl":
        dist.all_gather_into_tensor(gathered, t)
    else:
        dist.all_gather(list(gathered.chunk(job.world_size)), t)
    dist.barrier()
    probe.sync()
    del t, gathered
    probe.empty_cache()
    after = probe.device_used()
    return None if before is None or after is None else max(after - before, 0)


def _rank_main(rank: int, job: RankJob, results: Any) -> None:
    """One rank's process: set up, run the phases, report (a profile, or the error that stopped it)."""
    try:
        import torch
        import torch.distributed as dist

        from profilers.probes import CpuProbe, CudaProbe
        from profilers.run import run_profile
        from profilers.sharding import TorchCollectives

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // job.world_size))
        limit = dict(job.rank_memory_limit_bytes).get(rank)
        probe: MemoryProbe = CudaProbe(rank) if job.backend == "nccl" else CpuProbe(limit)
        probe.init()
        if limit is not None and job.backend == "nccl":
            torch.cuda.set_per_process_memory_fraction(min(limit / torch.cuda.mem_get_info(rank)[1], 1.0), rank)
        communicator = _measure_communicator(job, rank, probe)
        placement = RankShard(job, TorchCollectives(), communicator)
        if job.task == "verify":
            from profilers.verify import run_verify

            outcome = run_verify(job.plan, probe, steps=job.steps, reproducer=job.reproducer, placement=placement)
            results.put(("verify", rank, outcome))
            failed = outcome.oom is not None
        else:
            profile = run_profile(
                job.source,
                job.spec,
                job.serving,
                job.budget,
                job.gpu,
                probe,
                attn_implementation=job.attn_implementation,
                capture_graphs=job.capture_graphs,
                warmup=job.warmup,
                placement=placement,
            )
            results.put(("profile", rank, profile.to_dict()))
            failed = profile.oom is not None
        if not failed:
            dist.barrier()  # leave together: a rank still in a collective is not torn down under the others
        dist.destroy_process_group()
    except CapacityError as exc:
        results.put(("error", rank, f"{type(exc).__name__}: {exc}", getattr(exc, "exit_code", 3)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as this rank's failure
        # A collective that timed out or lost its peer failed because of another rank (exit 1); anything else is a bug (3).
        code = 1 if _collective_failure(exc) else 3
        results.put(("error", rank, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}", code, traceback.format_exc()[-2000:]))


def _collective_failure(exc: BaseException) -> bool:
    import torch.distributed as dist

    text = str(exc).lower()
    return isinstance(exc, dist.DistError) or any(s in text for s in ("timed out", "timeout", "connection closed", "watchdog", "nccl error"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gpus_available() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def require_ranks(world_size: int, backend: str) -> None:
    """More ranks than GPUs (or fewer than 2) is bad input, said in one line."""
    if world_size < 2:
        raise BadInput(f"--tensor-parallel-size {world_size}: a tensor-parallel profile needs at least 2 ranks (TP 1 is `capacity profile`)")
    if backend == "nccl":
        have = gpus_available()
        if world_size > have:
            raise BadInput(f"--tensor-parallel-size {world_size} needs {world_size} GPUs, this machine has {have}: lower it, or profile on a larger machine")


def run_tensor_parallel(job: RankJob, *, timeout_s: float) -> MemoryProfile:
    """Start one process per rank, collect their profiles, and return them combined (profile.ranks).

    A rank that runs out of memory makes the run an out-of-memory result (the plan exits 1) once the others have
    stopped; a rank that dies, a rank's error, or the deadline raises one error after every rank is stopped.
    """
    outcomes, notes = _run_ranks(job, timeout_s)
    return combine_ranks(tuple(MemoryProfile.from_dict(d) for d in outcomes.values()), notes)


def verify_tensor_parallel(job: RankJob, *, timeout_s: float) -> Any:
    """`capacity verify` on every rank; the result is the rank that fared worst, with every rank under `ranks`."""
    from capacity.planning.verify_result import combine_verify_ranks

    outcomes, notes = _run_ranks(replace(job, task="verify"), timeout_s)
    return combine_verify_ranks(tuple(outcomes.values()), notes)


def _failed(message: tuple[Any, ...]) -> bool:
    """A rank's result that ends the run: an out-of-memory profile or verify."""
    result = message[2]
    oom = result.get("oom") if isinstance(result, dict) else getattr(result, "oom", None)
    return oom is not None


def _run_ranks(job: RankJob, timeout_s: float) -> tuple[dict[int, Any], tuple[str, ...]]:
    import torch.multiprocessing as mp

    if job.encoder_tp_mode not in ENCODER_TP_MODES:
        raise BadInput(f"--mm-encoder-tp-mode {job.encoder_tp_mode!r}: use weights or data")
    shard_rules(job.spec.family)  # an unsupported family is bad input before any process starts
    require_ranks(job.world_size, job.backend)
    if job.spec.num_attention_heads % job.world_size:
        raise BadInput(f"{job.spec.num_attention_heads} attention heads are not divisible by --tensor-parallel-size {job.world_size}; vLLM refuses it too")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(rank, job, results), daemon=True, name=f"capacity-tp-rank{rank}") for rank in range(job.world_size)]
    for p in procs:
        p.start()
    outcomes: dict[int, Any] = {}
    errors: dict[int, tuple[Any, ...]] = {}
    deadline = time.monotonic() + timeout_s
    stop_at: float | None = None
    why = ""
    try:
        while len(outcomes) + len(errors) < job.world_size:
            now = time.monotonic()
            if stop_at is not None and now >= stop_at:
                why = why or "stopped after another rank ran out of memory"
                break
            if now >= deadline:
                why = f"the ranks did not finish within {timeout_s:.0f} s (a collective may be stuck)"
                break
            try:
                msg = results.get(timeout=0.2)
            except queue.Empty:
                for rank, p in enumerate(procs):
                    if p.exitcode is not None and p.exitcode != 0 and rank not in outcomes and rank not in errors:
                        errors[rank] = ("died", rank, f"rank {rank} died (exit code {p.exitcode})", 1)
                        stop_at = stop_at or time.monotonic() + 2.0
                continue
            if msg[0] == "error":
                errors[msg[1]] = msg
                stop_at = stop_at or time.monotonic() + 2.0
                continue
            outcomes[msg[1]] = msg[2]
            if _failed(msg) and stop_at is None:
                stop_at = time.monotonic() + GRACE_S  # the others may be waiting on the failed rank's collective
    finally:
        _stop(procs)
        results.close()
    if errors and not any(_failed(("", r, o)) for r, o in outcomes.items()):  # an out-of-memory rank is the result
        died = {r: e for r, e in errors.items() if e[0] == "died"}  # the cause, before the peers' lost connections
        rank, error = min((died or errors).items())
        raise _error_class(error)(f"tensor-parallel run failed on rank {rank}: {error[2]}; every rank was stopped and its memory released")
    missing = sorted(set(range(job.world_size)) - set(outcomes))
    if missing and not any(_failed(("", r, o)) for r, o in outcomes.items()):
        raise RankFailed(f"tensor-parallel run: ranks {missing} did not report ({why}); every rank was stopped and its memory released")
    notes = (f"ranks {missing} did not report ({why or 'their collective lost the failed rank'}); they were stopped and their memory released",) if missing else ()
    notes += tuple(f"rank {r} then failed: {e[2]}" for r, e in sorted(errors.items()))
    return outcomes, notes


def _error_class(error: tuple[Any, ...]) -> type[CapacityError]:
    code = error[3] if len(error) > 3 else 3
    from capacity.errors import BadInput as _Bad
    from capacity.errors import RuntimeFailure

    return _Bad if code == 2 else RankFailed if code == 1 else RuntimeFailure


def _stop(procs: list[Any]) -> int:
    """Terminate the ranks still running, then kill what remains (Ctrl-C in the parent comes here too)."""
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.terminate()
    end = time.monotonic() + 10
    for p in alive:
        p.join(max(0.1, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5)
    return len(alive)


def tensor_parallel_job(
    source: ModelSource,
    spec: ModelSpec,
    serving: ServingConfig,
    budget: MultiModalBudget,
    gpu: Gpu,
    *,
    backend: str,
    encoder_tp_mode: str = "weights",
    collective_timeout_s: float = 300.0,
    **kw: Any,
) -> RankJob:
    return RankJob(
        source=source,
        spec=spec,
        serving=serving,
        budget=budget,
        gpu=gpu,
        backend=backend,
        world_size=serving.tensor_parallel_size,
        port=free_port(),
        collective_timeout_s=collective_timeout_s,
        encoder_tp_mode=encoder_tp_mode,
        **kw,
    )

