"""Each pipeline stage's KV groups and blocks, and the engine's pool across stages, as vLLM 0.33 plans them
(vllm/v1/core/kv_cache_planning.py).

- `get_global_kv_cache_groups` groups the WHOLE model's layers once (every stage's specs merged): the groups are
  `kv_cache_groups` of all layers (capacity/kv/specs.py).
- `_project_kv_cache_groups_to_worker` keeps every global group on every stage, each with only the stage's own
  layers (a group can be left with none on a stage; it stays listed).
- Per stage, `_get_kv_cache_bytes_per_block` is the largest group's summed pages over the stage's own layers (no
  padding layers: vLLM's groups simply hold fewer), and `num_blocks = available_memory // bytes_per_block`.
- `get_kv_cache_configs` then re-plans every stage with the smallest stage's `num_blocks`: the engine's pool.

A stage whose layers hold no KV at all is refused: vLLM 0.33 would divide by its zero bytes per block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from capacity.errors import BadInput
from capacity.kv.specs import KVCacheSpec, KVGroup, group_slots, kv_cache_groups


@dataclass(frozen=True)
class StageKV:
    """One stage's share of the KV cache: its groups (its own layers only), bytes per block, blocks on its memory."""

    rank: int
    groups: tuple[KVGroup, ...]  # every global group, num_layers = the stage's layers in it, no padding
    bytes_per_block: int
    available_bytes: int
    num_blocks: int  # on this stage's own memory, before the engine takes the smallest stage's

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "groups": [{"kind": g.kind, "num_layers": g.num_layers, "page_size_bytes": g.page_size_bytes} for g in self.groups],
            "bytes_per_block": self.bytes_per_block,
            "available_bytes": self.available_bytes,
            "num_blocks": self.num_blocks,
        }


def project_groups(layer_specs: Sequence[tuple[int, KVCacheSpec]], start: int, end: int) -> tuple[KVGroup, ...]:
    """The whole model's groups, each holding only the layers in [start, end) (vLLM _project_kv_cache_groups_to_worker).

    `layer_specs`: (decoder layer index, spec) of every layer that builds a spec, in layer order."""
    specs = [s for _, s in layer_specs]
    groups = kv_cache_groups(specs)
    counts = [0] * len(groups)
    for (layer, _), (group, _slot) in zip(layer_specs, group_slots(specs), strict=True):
        if start <= layer < end:
            counts[group] += 1
    return tuple(KVGroup(g.spec, n, 0) for g, n in zip(groups, counts, strict=True))


def stage_kv(rank: int, layer_specs: Sequence[tuple[int, KVCacheSpec]], start: int, end: int, available_bytes: int) -> StageKV:
    """One stage's groups and blocks on its own available memory (vLLM get_kv_cache_configs, per worker)."""
    groups = project_groups(layer_specs, start, end)
    bpb = max((g.num_layers * g.page_size_bytes for g in groups), default=0)  # _get_kv_cache_bytes_per_block
    if bpb == 0:
        raise BadInput(
            f"pipeline stage {rank} (decoder layers {start}..{end - 1}) holds no KV-cache layer: vLLM 0.33 divides by its zero bytes per block; "
            "give it layers that hold KV (VLLM_PP_LAYER_PARTITION) or plan at a smaller --pipeline-parallel-size"
        )
    return StageKV(rank, groups, bpb, available_bytes, max(available_bytes, 0) // bpb)


def engine_num_blocks(stages: Sequence[StageKV]) -> int:
    """The engine's pool: every stage re-planned with the smallest stage's block count (get_kv_cache_configs)."""
    return min(s.num_blocks for s in stages)


def limiting_stage(stages: Sequence[StageKV]) -> StageKV:
    """The stage whose blocks set the pool (the first of them on a tie)."""
    return min(stages, key=lambda s: s.num_blocks)
