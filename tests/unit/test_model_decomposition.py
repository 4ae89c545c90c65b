"""Advisory model decomposition: tree walking, sizing, axis choice and device cuts."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from mixle_spark.parallel.planning.model_decomposition import (
    DecompositionAxis,
    ParallelAxisKind,
    Reduction,
    axis_reduction,
    best_parallel_axis,
    cost_balanced_cuts,
    cost_children,
    decompose_model,
    parallel_units,
    register_decomposition,
    size_model_tree,
    subtree_bytes,
    subtree_work,
    threaded_axes,
    threaded_nodes,
    tree_axes,
)
from mixle_spark.parallel.planning.planner import DeviceSpec, Resources
from mixle_spark.stats.composite import CompositeDistribution
from mixle_spark.stats.gaussian import GaussianDistribution
from mixle_spark.stats.mixture import MixtureDistribution
from mixle_spark.stats.multivariate_gaussian import MultivariateGaussianDistribution
from mixle_spark.stats.optional import OptionalDistribution
from mixle_spark.stats.poisson import PoissonDistribution
from mixle_spark.stats.record import RecordDistribution
from mixle_spark.stats.sequence import SequenceDistribution

GAUSSIAN_WORK = 4.0  # 1 + mu + sigma2 + the cached log-normaliser


def _gauss(mu: float = 0.0) -> GaussianDistribution:
    return GaussianDistribution(mu, 1.0)


def _mvg(dim: int) -> MultivariateGaussianDistribution:
    return MultivariateGaussianDistribution(np.zeros(dim), np.eye(dim))


def _mix(comps: list) -> MixtureDistribution:
    return MixtureDistribution(comps, np.full(len(comps), 1.0 / len(comps)))


def _gauss_mix(k: int) -> MixtureDistribution:
    return _mix([_gauss(float(i)) for i in range(k)])


def _covers(cuts: tuple, n: int) -> bool:
    return cuts[0][0] == 0 and cuts[-1][1] == n and all(a[1] == b[0] for a, b in itertools.pairwise(cuts))


# --- enums, children, units -----------------------------------------------------------------------
def test_enums_are_strings_and_reductions_follow_axes() -> None:
    assert DecompositionAxis.COMPONENT == "component" and str(DecompositionAxis.FACTOR) == "factor"
    assert ParallelAxisKind is DecompositionAxis
    assert [a.value for a in DecompositionAxis] == [
        "none",
        "component",
        "factor",
        "sequence",
        "state",
        "topic",
    ]
    assert axis_reduction(DecompositionAxis.COMPONENT) is Reduction.LOGSUMEXP_RESPONSIBILITY
    assert axis_reduction(DecompositionAxis.FACTOR) is Reduction.SUM
    assert axis_reduction(DecompositionAxis.NONE) is Reduction.REPLICATE


def test_cost_children_of_the_combinators() -> None:
    a, b, c = _gauss(1.0), _gauss(2.0), _gauss(3.0)
    assert cost_children(_mix([a, b])) == (a, b)
    assert cost_children(RecordDistribution({"z": c, "a": a})) == (c, a)  # field order kept
    assert cost_children(CompositeDistribution([b, c])) == (b, c)
    assert cost_children(OptionalDistribution(a, 0.1)) == (a,)
    length = PoissonDistribution(3.0)
    assert cost_children(SequenceDistribution(a, length)) == (a, length)
    assert cost_children(SequenceDistribution(a)) == (a,)
    assert cost_children(a) == ()


def test_cost_children_reflects_on_unknown_families() -> None:
    class Wrapper:
        def __init__(self) -> None:
            self.inner = a
            self.parts = [b, 3.0, c]
            self.named = {"x": d, "y": "label"}

    a, b, c, d = (_gauss(float(i)) for i in range(4))
    assert cost_children(Wrapper()) == (a, b, c, d)


def test_register_decomposition_rejects_non_classes() -> None:
    with pytest.raises(TypeError, match="expected a class, got 'mixture'"):
        register_decomposition("mixture", lambda d: [])  # type: ignore[arg-type]


def test_parallel_units() -> None:
    mix = _gauss_mix(3)
    assert parallel_units(mix) == (DecompositionAxis.COMPONENT, tuple(mix.components))
    rec = RecordDistribution({"a": _gauss(), "b": _gauss()})
    assert parallel_units(rec) == (DecompositionAxis.FACTOR, tuple(rec.fields.values()))
    comp = CompositeDistribution([_gauss(), _gauss()])
    assert parallel_units(comp)[0] is DecompositionAxis.FACTOR
    assert parallel_units(OptionalDistribution(mix)) == (DecompositionAxis.NONE, ())
    assert parallel_units(SequenceDistribution(mix)) == (DecompositionAxis.NONE, ())
    assert parallel_units(_gauss()) == (DecompositionAxis.NONE, ())


# --- sizing -----------------------------------------------------------------------------------------
def test_subtree_work_counts_arrays_scalars_and_shared_nodes_once() -> None:
    g = _gauss()
    assert subtree_work(g) == GAUSSIAN_WORK
    assert subtree_bytes(g) == 24  # three float64 scalars
    mvg = _mvg(3)
    own_arrays = sum(v.size for v in vars(mvg).values() if isinstance(v, np.ndarray))
    assert subtree_work(mvg) == 1 + own_arrays + 2  # + dim and the log-normaliser
    assert subtree_bytes(mvg) == sum(v.nbytes for v in vars(mvg).values() if isinstance(v, np.ndarray)) + 16
    shared, distinct = _mix([g, g]), _mix([g, _gauss()])
    assert subtree_work(distinct) - subtree_work(shared) == GAUSSIAN_WORK
    assert subtree_bytes(distinct) - subtree_bytes(shared) == 24


def test_size_model_tree_matches_subtree_sizes() -> None:
    g = _gauss()
    model = RecordDistribution({"x": _mix([g, g, _mvg(2)]), "y": g})
    tree = size_model_tree(model)
    assert tree.path == "/" and tree.family == "RecordDistribution"
    assert tree.axis is DecompositionAxis.FACTOR and tree.num_units == 2
    assert tree.subtree_bytes == subtree_bytes(model)
    assert tree.subtree_work == subtree_work(model)
    mix_node = tree.children[0]
    assert mix_node.path == "/fields/x" and mix_node.num_units == 3
    assert [c.path for c in mix_node.children] == ["/fields/x/components/0", "/fields/x/components/2"]
    assert len(tree.children) == 1  # g under "y" was already sized under the mixture


# --- axes and threading ------------------------------------------------------------------------------
def test_tree_axes_finds_nested_axes_with_unit_costs() -> None:
    seg = _mix([_mvg(4) for _ in range(6)])
    model = RecordDistribution({"age": _gauss(), "segment": seg})
    axes = tree_axes(model)
    assert [(a.path, a.axis, a.num_units) for a in axes] == [
        ("/", DecompositionAxis.FACTOR, 2),
        ("/fields/segment", DecompositionAxis.COMPONENT, 6),
    ]
    assert axes[1].unit_works == tuple(subtree_work(c) for c in seg.components)
    assert axes[1].unit_bytes == tuple(subtree_bytes(c) for c in seg.components)
    best = best_parallel_axis(model, 3)
    assert best is not None and best.path == "/fields/segment" and best.node is seg
    assert best.reduction is Reduction.LOGSUMEXP_RESPONSIBILITY


def test_benefit_formula() -> None:
    mix = _gauss_mix(10)
    (axis,) = tree_axes(mix)
    assert axis.total_work == 10 * GAUSSIAN_WORK
    assert axis.benefit(4) == pytest.approx(40.0 - 10.0)  # total - max(4, 40 / 4)
    assert axis.benefit(None) == pytest.approx(40.0 - 4.0)  # one worker per unit
    assert axis.benefit(1) == 0.0


def test_threaded_nodes_picks_the_heavy_mixture_not_the_wide_one() -> None:
    heavy = _mix([_mvg(15) for _ in range(3)])
    wide = _gauss_mix(20)
    model = CompositeDistribution([heavy, wide])
    chosen = threaded_nodes(model, 8)
    assert len(chosen) == 1 and chosen[0] is heavy


def test_threaded_nodes_returns_every_tie_and_nothing_without_benefit() -> None:
    elements = _mix([PoissonDistribution(float(k + 1)) for k in range(4)])
    lengths = _mix([PoissonDistribution(float(k + 1)) for k in range(4)])
    model = SequenceDistribution(elements, lengths)
    assert {id(n) for n in threaded_nodes(model, 4)} == {id(elements), id(lengths)}
    assert [a.path for a in threaded_axes(model, 4)] == ["/dist", "/len_dist"]
    assert threaded_nodes(model, 1) == ()
    assert threaded_nodes(_gauss(), 8) == ()


def test_worker_count_is_validated() -> None:
    with pytest.raises(ValueError, match="num_workers must be None or a positive integer, got 0"):
        best_parallel_axis(_gauss_mix(3), 0)
    with pytest.raises(ValueError, match="num_workers must be None or a positive integer, got True"):
        threaded_nodes(_gauss_mix(3), True)  # type: ignore[arg-type]


# --- cuts -------------------------------------------------------------------------------------------
def test_cost_balanced_cuts() -> None:
    assert cost_balanced_cuts([1.0] * 10, [1.0, 1.0, 1.0]) == ((0, 3), (3, 7), (7, 10))
    assert cost_balanced_cuts([9.0, 1.0, 1.0, 1.0], [1.0, 1.0]) == ((0, 1), (1, 4))
    assert cost_balanced_cuts([1.0] * 8, [1.0, 3.0]) == ((0, 2), (2, 8))
    assert cost_balanced_cuts([0.0] * 4, [1.0, 1.0]) == ((0, 2), (2, 4))  # no cost: by count
    assert cost_balanced_cuts([100.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0], 1) == ((0, 1), (1, 2), (2, 4))
    assert cost_balanced_cuts([1.0], [1.0, 1.0]) == ((0, 0), (0, 1))


def test_cost_balanced_cuts_rejects_bad_input() -> None:
    with pytest.raises(
        ValueError, match=r"unit costs must be finite and non-negative, got array\(\[ 1., -1.\]\)"
    ):
        cost_balanced_cuts([1.0, -1.0], [1.0])
    with pytest.raises(ValueError, match=r"shares must be finite and positive, got array\(\[1., 0.\]\)"):
        cost_balanced_cuts([1.0, 1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="cannot give 3 cuts at least 2 of 5 units each"):
        cost_balanced_cuts([1.0] * 5, [1.0] * 3, 2)


# --- decompose_model --------------------------------------------------------------------------------
def test_ten_component_mixture_is_cut_three_ways() -> None:
    dec = decompose_model(_gauss_mix(10), Resources.local(3), n_data=10)
    assert dec.axis is DecompositionAxis.COMPONENT
    assert dec.reduction is Reduction.LOGSUMEXP_RESPONSIBILITY
    assert dec.num_units == 10
    assert dec.cuts == ((0, 3), (3, 7), (7, 10))
    assert dec.is_model_parallel
    assert dec.extra["cut_work"] == [12.0, 16.0, 12.0]
    assert dec.extra["devices"] == ["cpu:0", "cpu:1", "cpu:2"]
    assert (
        "N=10 < 8 x 3 devices = 24 rows" in dec.rationale[0]
        and "cpu:1: units [3, 7) work 16" in dec.rationale[0]
    )
    payload = json.loads(json.dumps(dec.to_dict()))
    assert payload["axis"] == "component" and payload["cuts"] == [[0, 3], [3, 7], [7, 10]]
    assert payload["is_model_parallel"] is True


def test_wide_record_gets_factor_cuts() -> None:
    model = RecordDistribution({f"x{i}": _gauss(float(i)) for i in range(8)})
    dec = decompose_model(model, Resources.local(3))  # N unknown, 8 units >= 2 x 3 devices
    assert dec.axis is DecompositionAxis.FACTOR and dec.reduction is Reduction.SUM
    assert len(dec.cuts) == 3 and _covers(dec.cuts, 8)
    assert dec.is_model_parallel


def test_leaf_gets_none() -> None:
    dec = decompose_model(_gauss(), Resources.local(4), n_data=3)
    assert dec.axis is DecompositionAxis.NONE and dec.reduction is Reduction.REPLICATE
    assert dec.cuts == () and not dec.is_model_parallel
    assert "No node of the GaussianDistribution tree has 2 or more shardable units" in dec.rationale[0]


def test_single_device_replicates() -> None:
    dec = decompose_model(_gauss_mix(12), Resources.local(1), n_data=5)
    assert not dec.is_model_parallel and dec.axis is DecompositionAxis.NONE
    assert dec.rationale[0].startswith("Single device (cpu:0)")


def test_data_parallel_when_n_dominates_whatever_the_unit_count() -> None:
    res = Resources.local(4)
    # 0.8.2 cut a 12-component mixture on 4 devices however large N was; with N >= 8 x 4 we replicate.
    for n in (32, 40, 100_000):
        dec = decompose_model(_gauss_mix(12), res, n_data=n)
        assert dec.axis is DecompositionAxis.NONE and not dec.is_model_parallel
        assert f"N={n} >= 8 x 4 devices = 32 rows" in dec.rationale[0]
    assert not decompose_model(_gauss_mix(5), res, n_data=100_000).is_model_parallel
    assert decompose_model(_gauss_mix(12), res, n_data=31).is_model_parallel
    # N unknown: the 0.8.2 rule (fewer than 2 x devices units -> replicate) still applies.
    assert not decompose_model(_gauss_mix(7), res).is_model_parallel
    assert "fewer than 2 x 4 devices = 8" in decompose_model(_gauss_mix(7), res).rationale[0]
    assert decompose_model(_gauss_mix(8), res).is_model_parallel


def test_model_that_does_not_fit_replicated_is_cut_even_with_large_n() -> None:
    model = _mix([_mvg(6) for _ in range(8)])
    mem = subtree_bytes(model) // 2
    dec = decompose_model(model, Resources.local(4, memory_bytes=4 * mem), n_data=1_000_000)
    assert dec.is_model_parallel and dec.extra["fits_replicated"] is False
    assert (
        f"({subtree_bytes(model)} bytes) does not fit replicated in the smallest device ({mem} bytes)"
        in dec.rationale[0]
    )
    assert not any(r.startswith("WARNING") for r in dec.rationale)
    tiny = decompose_model(model, Resources.local(2, memory_bytes=2 * 64), n_data=1_000_000)
    assert tiny.is_model_parallel and tiny.rationale[-1].startswith("WARNING: the largest cut needs")


def test_throughput_weighting_gives_the_fast_device_more_units() -> None:
    res = Resources.from_specs([DeviceSpec("slow", throughput=1.0), DeviceSpec("fast", throughput=3.0)])
    dec = decompose_model(_gauss_mix(8), res, n_data=1)
    assert dec.cuts == ((0, 2), (2, 8))
    assert dec.extra["devices"] == ["slow", "fast"]
    assert dec.extra["cut_work"][1] == 3 * dec.extra["cut_work"][0]


def test_nested_axis_is_found_below_the_root() -> None:
    seg = _mix([_mvg(4) for _ in range(6)])
    model = RecordDistribution({"age": _gauss(), "segment": seg})
    dec = decompose_model(model, Resources.local(3), n_data=4)
    assert dec.axis is DecompositionAxis.COMPONENT and dec.num_units == 6
    assert dec.extra["path"] == "/fields/segment"
    assert dec.cuts == ((0, 2), (2, 4), (4, 6))
    assert "at /fields/segment" in dec.rationale[0]


def test_min_components_per_shard_limits_the_cuts() -> None:
    res = Resources.local(4)
    dec = decompose_model(_gauss_mix(10), res, n_data=2, min_components_per_shard=3)
    assert len(dec.cuts) == 3 and all(b - a >= 3 for a, b in dec.cuts) and _covers(dec.cuts, 10)
    assert "Only 3 of 4 devices are used" in dec.rationale[1]
    one = decompose_model(_gauss_mix(10), res, n_data=2, min_components_per_shard=6)
    assert not one.is_model_parallel and "min_components_per_shard=6" in one.rationale[0]


def test_the_fastest_devices_take_the_shards() -> None:
    res = Resources.from_specs(
        [DeviceSpec("a", throughput=1.0), DeviceSpec("b", throughput=5.0), DeviceSpec("c", throughput=2.0)]
    )
    dec = decompose_model(_gauss_mix(4), res, n_data=1, min_components_per_shard=2)
    assert dec.extra["devices"] == ["b", "c"]


def test_decompose_model_validates_its_arguments() -> None:
    res = Resources.local(2)
    with pytest.raises(ValueError, match="n_data must be None or a positive integer, got 0"):
        decompose_model(_gauss_mix(4), res, n_data=0)
    with pytest.raises(ValueError, match="min_components_per_shard must be a positive integer, got 0"):
        decompose_model(_gauss_mix(4), res, min_components_per_shard=0)
    with pytest.raises(TypeError, match="expected a Resources with at least one device, got 'local'"):
        decompose_model(_gauss_mix(4), "local")
