"""capacity/planning/fit_layouts.py: the TP x PP x DP layouts `capacity fit` tries, fewest GPUs first."""

from __future__ import annotations

from capacity.gpu.catalog import gpu_by_name
from capacity.planning.fit import FitTarget
from capacity.planning.fit_layouts import Layout, by_count, layouts
from capacity.serving.config import ServingArgs


def shapes(items: list[Layout]) -> list[tuple[int, int, int]]:
    return [(lay.tensor_parallel_size, lay.pipeline_parallel_size, lay.data_parallel_size) for lay in items]


def test_one_host_counts_try_tp_then_dp_then_pp_and_never_pp_with_dp():
    """8 GPUs on one H200 host (the 8x H200 node's size): TP 8; DP 2/4/8 with TP 4/2/1; PP 2/4/8 with TP 4/2/1."""
    groups = dict(by_count(layouts(gpu_by_name("H200"), ServingArgs(), frozenset(), 8)))
    assert list(groups) == list(range(1, 9))
    assert shapes(groups[8]) == [(8, 1, 1), (4, 1, 2), (2, 1, 4), (1, 1, 8), (4, 2, 1), (2, 4, 1), (1, 8, 1)]
    assert all(lay.node is None and lay.nodes == 1 for lay in groups[8])  # one host, as `capacity plan` assumes
    assert not any(lay.pipeline_parallel_size > 1 and lay.data_parallel_size > 1 for group in groups.values() for lay in group)


def test_above_one_node_the_gpus_catalog_node_places_tp_inside_a_node():
    """16 H200s: two '8x H200' nodes; a TP group of 16 would span them, so TP is 8 at most (dividing 8)."""
    groups = dict(by_count(layouts(gpu_by_name("H200"), ServingArgs(), frozenset(), 16)))
    assert shapes(groups[16]) == [(8, 1, 2), (4, 1, 4), (2, 1, 8), (1, 1, 16), (8, 2, 1), (4, 4, 1), (2, 8, 1), (1, 16, 1)]
    assert {lay.node for lay in groups[16]} == {"8x H200"} and {lay.nodes for lay in groups[16]} == {2}
    # 12 GPUs: TP 8 does not divide 12; TP 4 x 3 takes ranks 0-3, 4-7 (node 0) and 8-11 (node 1)
    assert shapes(groups[12]) == [(4, 1, 3), (2, 1, 6), (1, 1, 12), (4, 3, 1), (2, 6, 1), (1, 12, 1)]


def test_held_knobs_hold_the_layout():
    base = ServingArgs(tensor_parallel_size=8, node="8x H200")
    items = layouts(gpu_by_name("H200"), base, frozenset({"tensor_parallel_size", "node"}), 24)
    assert shapes(items) == [(8, 1, 1), (8, 1, 2), (8, 2, 1), (8, 1, 3), (8, 3, 1)]
    assert [lay.nodes for lay in items] == [1, 2, 2, 3, 3]
    assert items[1].describe() == "TP 8 x DP 2 on 2 x 8x H200"


def test_a_gpu_no_node_type_holds_stays_on_one_host_as_before():
    """RTX 4090: no catalog node; every count up to --max-gpus on one host, TP alone first (fit's old order)."""
    groups = dict(by_count(layouts(gpu_by_name("RTX 4090"), ServingArgs(), frozenset(), 8)))
    assert [group[0] for group in groups.values()] == [Layout(n) for n in range(1, 9)]


def test_dp_engines_each_meet_their_share_of_the_target():
    assert FitTarget(10, 163840, 16).per_engine(2).min_concurrency == 5
    assert FitTarget(11, 163840, 16).per_engine(2).min_concurrency == 6  # ceil(11 / 2): 2 x 5 = 10 would miss 11
    assert FitTarget(11, 163840, 16).per_engine(1).min_concurrency == 11
