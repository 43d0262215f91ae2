"""Where a multi-rank profile's processes come from, and how its ranks are grouped.

Two launchers:

- capacity itself (the default): one process per GPU on this machine, spawned (profilers/tensor_parallel.py);
- an existing launcher such as `torchrun`, which starts every process itself and tells each one who it is in the
  environment: RANK (0 .. WORLD_SIZE - 1), LOCAL_RANK (the GPU on its node), WORLD_SIZE, MASTER_ADDR, MASTER_PORT
  (torch.distributed's env:// rendezvous). Then capacity spawns nothing: each process is one rank.

The ranks are grouped as vLLM 0.33 groups them (vllm/distributed/parallel_state.py, initialize_model_parallel):
`all_ranks = arange(world).reshape(-1, DP, PP, PCP, TP)`; a tensor-parallel group is TP consecutive ranks
(`all_ranks.view(-1, TP)`), a pipeline group takes one rank of each stage at the same TP position
(`all_ranks.transpose(2, 4).reshape(-1, PP)`). With DP = PCP = 1, rank r is TP rank r % TP of stage r // TP.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from capacity.errors import BadInput

LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class LaunchEnv:
    """One process's place in a run an outside launcher started (torchrun's environment)."""

    rank: int
    local_rank: int
    world_size: int
    master_addr: str
    master_port: int

    @property
    def init_method(self) -> str:
        return f"tcp://{self.master_addr}:{self.master_port}"


def _integer(environ: Mapping[str, str], name: str) -> int:
    value = environ[name]
    try:
        number = int(value)
    except ValueError:
        raise BadInput(f"{name}={value!r} from the launcher is not an integer: start capacity with torchrun, or unset the launcher variables") from None
    if number < 0:
        raise BadInput(f"{name}={value!r} from the launcher is negative: start capacity with torchrun, or unset the launcher variables")
    return number


def launch_env(environ: Mapping[str, str] | None = None) -> LaunchEnv | None:
    """The launcher's environment, or None when no launcher variable is set (capacity spawns its own ranks).
    Some set and some not, or values that do not fit together, is bad input, said in one line."""
    environ = os.environ if environ is None else environ
    present = [name for name in LAUNCHER_VARIABLES if environ.get(name, "") != ""]
    if not present:
        return None
    missing = [name for name in LAUNCHER_VARIABLES if name not in present]
    if missing:
        raise BadInput(
            f"{', '.join(present)} set but {', '.join(missing)} not: run under torchrun (which sets all of {', '.join(LAUNCHER_VARIABLES)}), "
            "or unset them to let capacity spawn one process per GPU"
        )
    env = LaunchEnv(
        rank=_integer(environ, "RANK"),
        local_rank=_integer(environ, "LOCAL_RANK"),
        world_size=_integer(environ, "WORLD_SIZE"),
        master_addr=environ["MASTER_ADDR"],
        master_port=_integer(environ, "MASTER_PORT"),
    )
    if env.world_size < 1 or env.rank >= env.world_size:
        raise BadInput(f"RANK {env.rank} is not below WORLD_SIZE {env.world_size} from the launcher: check the torchrun command")
    return env


@dataclass(frozen=True)
class ParallelLayout:
    """TP x PP ranks laid out as vLLM 0.33's initialize_model_parallel lays them out (DP = PCP = 1)."""

    tensor_parallel_size: int
    pipeline_parallel_size: int = 1

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def tp_rank(self, rank: int) -> int:
        return rank % self.tensor_parallel_size

    def pp_rank(self, rank: int) -> int:
        return rank // self.tensor_parallel_size

    def tp_groups(self) -> tuple[tuple[int, ...], ...]:
        """all_ranks.view(-1, TP).unbind(0): consecutive ranks."""
        tp = self.tensor_parallel_size
        return tuple(tuple(range(start, start + tp)) for start in range(0, self.world_size, tp))

    def pp_groups(self) -> tuple[tuple[int, ...], ...]:
        """all_ranks.transpose(2, 4).reshape(-1, PP).unbind(0): one rank per stage, at the same TP position."""
        tp = self.tensor_parallel_size
        return tuple(tuple(stage * tp + position for stage in range(self.pipeline_parallel_size)) for position in range(tp))

    def tp_group_of(self, rank: int) -> tuple[int, ...]:
        return self.tp_groups()[self.pp_rank(rank)]

    def pp_group_of(self, rank: int) -> tuple[int, ...]:
        return self.pp_groups()[self.tp_rank(rank)]

    def next_stage_rank(self, rank: int) -> int | None:
        """The rank this one sends its intermediate tensors to (GroupCoordinator.next_rank), None on the last stage."""
        return None if self.pp_rank(rank) == self.pipeline_parallel_size - 1 else rank + self.tensor_parallel_size

    def prev_stage_rank(self, rank: int) -> int | None:
        """The rank this one receives its intermediate tensors from (prev_rank), None on the first stage."""
        return None if self.pp_rank(rank) == 0 else rank - self.tensor_parallel_size


def check_world(env: LaunchEnv, layout: ParallelLayout) -> None:
    """WORLD_SIZE must be TP x PP: a mismatch is refused (every rank reads the same values, so every rank refuses)."""
    if env.world_size != layout.world_size:
        pp = f" x --pipeline-parallel-size {layout.pipeline_parallel_size}" if layout.pipeline_parallel_size > 1 else ""
        raise BadInput(
            f"WORLD_SIZE {env.world_size} from the launcher, but --tensor-parallel-size {layout.tensor_parallel_size}{pp} "
            f"is {layout.world_size} rank(s): start {layout.world_size} processes (torchrun --nnodes x --nproc-per-node), or change the sizes"
        )
