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
from capacity.serving.pipeline import pipeline_stages
from capacity.source.resolve import ModelSource
from capacity.weights.quant_schemes import quant_method
from profilers.launcher import LaunchEnv, ParallelLayout, check_world
from profilers.pipeline_stage import PipelineStage, StageTransport, keep_stage, refuse_unstaged
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
    pipeline_parallel_size: int = 1  # stages; world_size is TP x PP (profilers/launcher.py lays the ranks out)
    pp_layer_partition: str | None = None  # VLLM_PP_LAYER_PARTITION

    @property
    def layout(self) -> ParallelLayout:
        return ParallelLayout(self.world_size // self.pipeline_parallel_size, self.pipeline_parallel_size)


class RankShard:
    """The placement of one tensor-parallel rank: its shard of the model, materialised and randomised."""

    def __init__(self, job: RankJob, comm: Any, communicator_bytes: int | None, stage: PipelineStage | None = None, rank: int | None = None) -> None:
        self.job = job
        self.comm = comm
        self.rank = comm.rank if rank is None else rank  # the global rank (the TP rank without stages)
        self.world_size = comm.world_size  # the TP size (MemoryProfile.measured_tensor_parallel_size)
        self.communicator_bytes = communicator_bytes
        self.stage = stage
        self.pipeline_rank = 0 if stage is None else stage.layers.rank
        self.pipeline_parallel_size = job.pipeline_parallel_size
        self.samples = stage is None or stage.layers.last  # vLLM runs the sampler on the last stage only
        self.report: Any = None

    def describe(self) -> str:
        where = "" if self.stage is None else f", {self.stage.describe()} of PP {self.pipeline_parallel_size}"
        return f"(rank {self.rank}: TP rank {self.comm.rank} of {self.world_size}{where}, sharded as vLLM's parallel layers)"

    def decode(self, family: Any, model: Any, ids: Any, encoder_states: Any) -> Any:
        return family.decode(model, ids, encoder_states) if self.stage is None else self.stage.decode(model, ids)

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
            if self.stage is not None:
                keep_stage(model, self.stage.layers)
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
        knobs = {"mm_encoder_tp_mode": self.job.encoder_tp_mode, "collectives_backend": self.job.backend}
        if self.stage is not None:
            layers = self.stage.layers
            knobs.update(pipeline_parallel_size=self.pipeline_parallel_size, stage_layers=[layers.start, layers.end])
        return knobs


@dataclass
class RankGroups:
    """This rank's process groups (vLLM's layout) and the device memory their setup added."""

    tp_group: Any
    pp_group: Any
    communicator_bytes: int | None


def _measure_communicator(job: RankJob, rank: int, probe: MemoryProbe, device_index: int, init_method: str) -> RankGroups:
    """init_process_group, the TP and PP groups (every rank creates every group, in vLLM's order) and their first
    collectives; the device memory they added (None without a device)."""
    import torch
    import torch.distributed as dist

    before = probe.device_used()
    kwargs: dict[str, Any] = {}
    if job.backend == "nccl":
        kwargs["device_id"] = torch.device(f"cuda:{device_index}")
    if not dist.is_initialized():  # under a launcher, verify's ranks reuse the group their profile made
        dist.init_process_group(
            job.backend,
            init_method=init_method,
            rank=rank,
            world_size=job.world_size,
            timeout=datetime.timedelta(seconds=job.collective_timeout_s),
            **kwargs,
        )
    layout = job.layout
    tp_group = pp_group = None
    if layout.pipeline_parallel_size > 1:  # TP only: the default group is the TP group
        for ranks in layout.tp_groups():
            group = dist.new_group(list(ranks))
            tp_group = group if rank in ranks else tp_group
        for ranks in layout.pp_groups():
            group = dist.new_group(list(ranks))
            pp_group = group if rank in ranks else pp_group
    device = f"cuda:{device_index}" if job.backend == "nccl" else "cpu"
    tp = layout.tensor_parallel_size
    t = torch.ones(1024, device=device)
    dist.all_reduce(t, group=tp_group)
    gathered = torch.empty(tp * 1024, device=device)
    if job.backend == "nccl":
        dist.all_gather_into_tensor(gathered, t, group=tp_group)
    else:
        dist.all_gather(list(gathered.chunk(tp)), t, group=tp_group)
    if pp_group is not None:
        dist.all_reduce(t, group=pp_group)
    dist.barrier()
    probe.sync()
    del t, gathered
    probe.empty_cache()
    after = probe.device_used()
    return RankGroups(tp_group, pp_group, None if before is None or after is None else max(after - before, 0))


def _stage_of(job: RankJob, rank: int, groups: RankGroups) -> PipelineStage | None:
    """This rank's pipeline stage (None without stages): its layers (vLLM get_pp_indices) and its transport."""
    if job.pipeline_parallel_size == 1:
        return None
    layout = job.layout
    layers = pipeline_stages(job.spec.decoder.num_layers, layout.pipeline_parallel_size, job.pp_layer_partition)[layout.pp_rank(rank)]
    transport = StageTransport(
        rank=rank,
        tp=layout.tensor_parallel_size,
        tp_position=layout.tp_rank(rank),
        tp_group=groups.tp_group,
        prev_rank=layout.prev_stage_rank(rank),
        next_rank=layout.next_stage_rank(rank),
        backend=job.backend,
    )
    return PipelineStage(layers, transport)


def _rank_run(rank: int, job: RankJob, device_index: int, init_method: str, limit: int | None) -> tuple[Any, ...]:
    """One rank's work (in a spawned process or under torchrun): set up, run the phases; the message it reports
    (a profile, a verify outcome, or the error that stopped it). The process group is left up (the caller gathers)."""
    try:
        import torch

        from profilers.probes import CpuProbe, CudaProbe
        from profilers.run import run_profile
        from profilers.sharding import TorchCollectives

        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", job.world_size))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(local_world, 1)))
        probe: MemoryProbe = CudaProbe(device_index) if job.backend == "nccl" else CpuProbe(limit)
        probe.init()
        if limit is not None and job.backend == "nccl":
            torch.cuda.set_per_process_memory_fraction(min(limit / torch.cuda.mem_get_info(device_index)[1], 1.0), device_index)
        groups = _measure_communicator(job, rank, probe, device_index, init_method)
        placement = RankShard(job, TorchCollectives(groups.tp_group), groups.communicator_bytes, _stage_of(job, rank, groups), rank)
        if job.task == "verify":
            from profilers.verify import run_verify

            return ("verify", rank, run_verify(job.plan, probe, steps=job.steps, reproducer=job.reproducer, placement=placement))
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
        if placement.stage is not None:
            t = placement.stage.transport
            profile = replace(profile, notes=(*profile.notes, f"intermediate tensors of the last decoder pass: sent {t.sent} B, received {t.received} B"))
        return ("profile", rank, profile.to_dict())
    except CapacityError as exc:
        return ("error", rank, f"{type(exc).__name__}: {exc}", getattr(exc, "exit_code", 3))
    except BaseException as exc:  # noqa: BLE001 - reported as this rank's failure
        # A collective that timed out or lost its peer failed because of another rank (exit 1); anything else is a bug (3).
        code = 1 if _collective_failure(exc) else 3
        return ("error", rank, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}", code, traceback.format_exc()[-2000:])


def _rank_main(rank: int, job: RankJob, results: Any) -> None:
    """One spawned rank's process: run, report to the parent, leave the group together."""
    limit = dict(job.rank_memory_limit_bytes).get(rank)
    message = _rank_run(rank, job, rank, f"tcp://127.0.0.1:{job.port}", limit)
    results.put(message)
    try:
        import torch.distributed as dist

        if dist.is_initialized() and message[0] != "error":
            if not _failed(message):
                dist.barrier()  # leave together: a rank still in a collective is not torn down under the others
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - the result is reported; the parent stops what remains
        pass


def run_launched(job: RankJob, env: LaunchEnv) -> list[tuple[Any, ...]] | None:
    """This process is one rank of a run an outside launcher (torchrun) started: run it on GPU LOCAL_RANK (or the
    CPU under gloo), then gather every rank's message on rank 0. Returns them (rank order) on rank 0, None elsewhere.
    The process group stays up: the caller ends it (`finish_launched`) once rank 0 knows the exit code."""
    import torch.distributed as dist

    check_world(env, job.layout)
    check_job(job)
    limit = dict(job.rank_memory_limit_bytes).get(env.rank)
    message = _rank_run(env.rank, job, env.local_rank, env.init_method, limit)
    if not dist.is_initialized():  # this rank never joined: the others time out in init_process_group
        raise _error_class(message)(f"rank {env.rank} failed before joining the others: {message[2]}") if message[0] == "error" else RankFailed(f"rank {env.rank} did not join")
    gathered: list[Any] | None = [None] * env.world_size if env.rank == 0 else None
    dist.gather_object(message, gathered, dst=0)
    return gathered


def finish_launched(env: LaunchEnv, code: int) -> int:
    """Rank 0's exit code, sent to every rank (each exits with it), then the process group is ended."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return code
    box: list[Any] = [("exit", code) if env.rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    dist.barrier()  # leave together (as _rank_main): a rank that tears its connections down under a peer still in the
    dist.destroy_process_group()  # last collective can abort that peer (gloo)
    return int(box[0][1])


def share_from_rank0(env: LaunchEnv, value: Any) -> tuple[Any, int | None]:
    """Rank 0's `value` (verify's plan) on every rank: (value, None); or (None, code) where rank 0 stopped with
    exit `code` instead (finish_launched's message), after which the group is ended."""
    import torch.distributed as dist

    box: list[Any] = [("value", value) if env.rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    kind, got = box[0]
    if kind == "exit":
        dist.destroy_process_group()
        return None, int(got)
    return got, None


def launched_outcomes(messages: list[tuple[Any, ...]]) -> dict[int, Any]:
    """The ranks' results from rank 0's gathered messages; a rank's error is raised (the first failed rank's)."""
    errors = [m for m in messages if m[0] == "error"]
    outcomes = {m[1]: m[2] for m in messages if m[0] != "error"}
    if errors and not any(_failed(("", r, o)) for r, o in outcomes.items()):
        died = [e for e in errors if e[3] != 1] or errors  # the cause, before the peers' lost connections
        error = min(died, key=lambda e: e[1])
        raise _error_class(error)(f"launched run failed on rank {error[1]}: {error[2]}")
    return outcomes


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


def check_job(job: RankJob) -> None:
    """What every rank would refuse, refused once before any process starts (or any rendezvous)."""
    if job.encoder_tp_mode not in ENCODER_TP_MODES:
        raise BadInput(f"--mm-encoder-tp-mode {job.encoder_tp_mode!r}: use weights or data")
    shard_rules(job.spec.family)  # an unsupported family is bad input before any process starts
    tp = job.layout.tensor_parallel_size
    if job.spec.num_attention_heads % tp:
        raise BadInput(f"{job.spec.num_attention_heads} attention heads are not divisible by --tensor-parallel-size {tp}; vLLM refuses it too")
    if job.pipeline_parallel_size > 1:
        refuse_unstaged(job.spec)
        stages = pipeline_stages(job.spec.decoder.num_layers, job.pipeline_parallel_size, job.pp_layer_partition)
        if job.task == "verify":
            raise BadInput("verify at --pipeline-parallel-size > 1 is not implemented yet: profile the stages with `capacity profile`")
        empty = [st.rank for st in stages if st.num_layers == 0]
        if empty:
            raise BadInput(f"pipeline stage(s) {empty} hold no decoder layer: give every stage at least one layer")


def _run_ranks(job: RankJob, timeout_s: float) -> tuple[dict[int, Any], tuple[str, ...]]:
    import torch.multiprocessing as mp

    check_job(job)
    require_ranks(job.world_size, job.backend)
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
    pipeline_parallel_size: int = 1,
    **kw: Any,
) -> RankJob:
    """A job of TP (serving.tensor_parallel_size) x `pipeline_parallel_size` ranks."""
    return RankJob(
        source=source,
        spec=spec,
        serving=serving,
        budget=budget,
        gpu=gpu,
        backend=backend,
        world_size=serving.tensor_parallel_size * pipeline_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
        port=free_port(),
        collective_timeout_s=collective_timeout_s,
        encoder_tp_mode=encoder_tp_mode,
        **kw,
    )

