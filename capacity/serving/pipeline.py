"""Pipeline parallelism's layer split, as vLLM 0.33 lays it out (`vllm/distributed/utils.py: get_pp_indices`).

Each of `--pipeline-parallel-size` stages holds a contiguous run of the decoder layers:

- with VLLM_PP_LAYER_PARTITION set ("a,b,c,..."), stage i holds the i-th count; vLLM raises ValueError when an entry
  is not an integer, when there are not exactly PP entries, or when they do not sum to the model's layers;
- otherwise every stage holds layers // PP and the remainder goes one layer each to the stages before the last,
  from the second-to-last backwards (`partitions[-i] += 1` for i in 2 .. remainder + 1): the last stage never gets an
  extra layer (it holds the final norm and the LM head), and the first only when the remainder is PP - 1.

The first stage also holds the embedding and the last the LM head (vLLM's PP-aware models build them only there,
`PPMissingLayer` elsewhere). Pure Python; vLLM's function is reproduced as facts, not imported.
"""

from __future__ import annotations

from dataclasses import dataclass

from capacity.errors import BadInput
from capacity.weights.pipeline_stage import StageSlice

PP_PARTITION_ENV = "--pp-layer-partition (VLLM_PP_LAYER_PARTITION)"  # vLLM reads the variable, vllm/envs.py


@dataclass(frozen=True)
class StageLayers:
    """The decoder layers one pipeline stage holds: [start, end), and whether it holds the embedding / LM head."""

    rank: int
    start: int
    end: int
    first: bool
    last: bool

    @property
    def num_layers(self) -> int:
        return self.end - self.start

    def holds(self, layer: int) -> bool:
        return self.start <= layer < self.end

    def weights_slice(self, num_layers: int, tie_word_embeddings: bool, towers: tuple[str, ...] = (), every_stage: tuple[str, ...] = ()) -> StageSlice:
        """What the stage builds, for placing stored tensors (capacity/weights/pipeline_stage.py); `towers`: the modules
        built under _mark_tower_model, which Model Runner V2 builds on the first stage only; `every_stage`: bare
        parameters assigned there, which it builds on every stage."""
        return StageSlice(self.start, self.end, num_layers, self.first, self.last, tie_word_embeddings, towers, self.first, every_stage)


def _partition_from_env(value: str, num_layers: int, pp_size: int) -> list[int]:
    """VLLM_PP_LAYER_PARTITION parsed and checked as get_pp_indices checks it (one-line BadInput where vLLM raises)."""
    try:
        counts = [int(part) for part in value.split(",")]
    except ValueError:
        raise BadInput(
            f"{PP_PARTITION_ENV} {value!r} is not a comma-separated list of layer counts (vLLM raises ValueError); "
            f"give {pp_size} layer count(s) summing to {num_layers}"
        ) from None
    if len(counts) != pp_size:
        raise BadInput(f"{PP_PARTITION_ENV} {value!r} has {len(counts)} entries for --pipeline-parallel-size {pp_size} (vLLM raises ValueError)")
    if sum(counts) != num_layers:
        raise BadInput(f"{PP_PARTITION_ENV} {value!r} sums to {sum(counts)} layers, the model has {num_layers} (vLLM raises ValueError)")
    if any(c < 0 for c in counts):
        # vLLM does not check this; its stages would overlap. Not modelled.
        raise BadInput(f"{PP_PARTITION_ENV} {value!r} has a negative layer count; give {pp_size} counts >= 0")
    return counts


def layer_partition(num_layers: int, pp_size: int, env_partition: str | None = None) -> tuple[int, ...]:
    """Decoder layers per stage (vLLM get_pp_indices' `partitions`)."""
    if pp_size < 1:
        raise BadInput(f"--pipeline-parallel-size must be >= 1, got {pp_size}")
    if env_partition is not None:
        return tuple(_partition_from_env(env_partition, num_layers, pp_size))
    counts = [num_layers // pp_size] * pp_size
    for i in range(2, num_layers % pp_size + 2):  # the remainder, from the second-to-last stage backwards
        counts[-i] += 1
    return tuple(counts)


def pipeline_stages(num_layers: int, pp_size: int, env_partition: str | None = None) -> tuple[StageLayers, ...]:
    """Every stage's [start, end) (vLLM get_pp_indices for pp_rank 0 .. PP - 1)."""
    counts = layer_partition(num_layers, pp_size, env_partition)
    stages, start = [], 0
    for rank, count in enumerate(counts):
        stages.append(StageLayers(rank, start, start + count, rank == 0, rank == pp_size - 1))
        start += count
    return tuple(stages)
