"""Advisory load balancing: the D x M worker grid, row chunks and the auto-balanced estimator."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from mixle_spark.parallel.planning.balance import (
    BalancePlan,
    UnrealizedModelPlacementError,
    auto_balanced_estimator,
    balance_chunks,
    balance_plan,
)
from mixle_spark.parallel.planning.model_decomposition import (
    DecompositionAxis,
    Reduction,
    decompose_model,
    subtree_bytes,
    subtree_work,
)
from mixle_spark.parallel.planning.planner import DeviceSpec, Resources
from mixle_spark.stats.gaussian import GaussianDistribution, GaussianEstimator
from mixle_spark.stats.mixture import MixtureDistribution, MixtureEstimator
from mixle_spark.stats.multivariate_gaussian import MultivariateGaussianDistribution


def _mvg(dim: int) -> MultivariateGaussianDistribution:
    return MultivariateGaussianDistribution(np.zeros(dim), np.eye(dim))


def _mix(comps: list) -> MixtureDistribution:
    return MixtureDistribution(comps, np.full(len(comps), 1.0 / len(comps)))


def _gauss_mix(k: int) -> MixtureDistribution:
    return _mix([GaussianDistribution(float(i), 1.0) for i in range(k)])


def _covers(cuts: tuple, n: int) -> bool:
    return cuts[0][0] == 0 and cuts[-1][1] == n and all(a[1] == b[0] for a, b in itertools.pairwise(cuts))


# --- balance_plan -----------------------------------------------------------------------------------
def test_tiny_model_many_rows_is_data_parallel() -> None:
    plan = balance_plan(GaussianDistribution(0.0, 1.0), Resources.local(8), n_data=10_000)
    assert (plan.data_replicas, plan.model_shards) == (8, 1)
    assert plan.workers_used == 8 and plan.workers_idle == 0 and not plan.is_model_parallel
    assert plan.axis is DecompositionAxis.NONE and plan.reduction is Reduction.REPLICATE and plan.cuts == ()
    assert plan.fits is None
    assert plan.rationale[0].startswith("Data-parallel: D=8 replicas x M=1")
    assert plan.rationale[-1].startswith("MEMORY FIT UNKNOWN")
    assert plan.busiest_worker_work == 1250 * plan.model_work


def test_wide_mixture_one_row_is_model_parallel() -> None:
    plan = balance_plan(_gauss_mix(32), Resources.local(8), n_data=1)
    assert (plan.data_replicas, plan.model_shards) == (1, 8)
    assert plan.axis is DecompositionAxis.COMPONENT
    assert plan.reduction is Reduction.LOGSUMEXP_RESPONSIBILITY
    assert len(plan.cuts) == 8 and _covers(plan.cuts, 32)
    assert all(b - a == 4 for a, b in plan.cuts)
    assert plan.rationale[0].startswith("Model-parallel: N=1 rows cannot fill 8 workers")


def test_sixteen_components_four_rows_is_a_four_by_two_grid() -> None:
    plan = balance_plan(_gauss_mix(16), Resources.local(8), n_data=4)
    assert (plan.data_replicas, plan.model_shards) == (4, 2)
    assert plan.cuts == ((0, 8), (8, 16))
    assert plan.rationale[0].startswith("Data x model grid D=4 x M=2 = 8 of 8 workers")


def test_memory_forces_a_split_that_fits() -> None:
    model = _mix([_mvg(6) for _ in range(8)])
    mem = int(subtree_bytes(model) * 0.6)
    plan = balance_plan(model, Resources.local(4, memory_bytes=4 * mem), n_data=10_000)
    assert plan.extra["m_mem"] == 2
    assert (plan.data_replicas, plan.model_shards) == (2, 2)
    assert plan.fits is True and max(plan.shard_bytes) <= mem
    assert any(r.startswith("Memory floor:") and f"= {2} shards" in r for r in plan.rationale)
    assert not any("WARNING" in r for r in plan.rationale)


def test_model_too_large_even_when_split_warns() -> None:
    model = _mix([_mvg(6) for _ in range(8)])
    mem = subtree_bytes(model) // 20
    plan = balance_plan(model, Resources.local(4, memory_bytes=4 * mem), n_data=10_000)
    assert plan.fits is False and plan.model_shards == 4
    assert plan.rationale[-1].startswith("WARNING: the model does not fit")
    assert f"smallest device has {mem} bytes" in plan.rationale[-1]


def test_leaf_with_one_row_has_no_splittable_axis() -> None:
    plan = balance_plan(GaussianDistribution(0.0, 1.0), Resources.local(8), n_data=1)
    assert (plan.data_replicas, plan.model_shards, plan.workers_idle) == (1, 1, 7)
    assert "no splittable axis" in plan.rationale[0]


def test_cuts_balance_work_not_unit_counts() -> None:
    dims = [8] + [1] * 30  # one heavy component, then thirty light ones
    model = _mix([_mvg(d) for d in dims])
    plan = balance_plan(model, Resources.local(2), n_data=1)
    assert plan.model_shards == 2 and plan.cuts == ((0, 1), (1, 31))
    assert max(plan.shard_work) / min(plan.shard_work) < 2.0
    rest = plan.model_work - sum(subtree_work(c) for c in model.components)
    by_count = [rest + sum(subtree_work(c) for c in model.components[a:b]) for a, b in ((0, 15), (15, 31))]
    assert max(by_count) / min(by_count) > 2.0  # an equal-count split would be badly unbalanced


def test_partially_known_memory_is_reported() -> None:
    res = Resources.from_specs([DeviceSpec("a", memory_bytes=10**9), DeviceSpec("b")])
    plan = balance_plan(_gauss_mix(4), res, n_data=100)
    assert plan.fits is True
    assert plan.rationale[-1] == "Memory was checked only on devices reporting it; unknown for: b."


def test_unknown_row_count_fills_every_worker() -> None:
    plan = balance_plan(_gauss_mix(32), Resources.local(4), n_data=None)
    assert (plan.data_replicas, plan.model_shards) == (4, 1)
    assert "N=unknown (assumed to fill every worker)" in plan.rationale[0]


def test_plan_to_dict_is_json() -> None:
    plan = balance_plan(_gauss_mix(16), Resources.local(8), n_data=4)
    payload = json.loads(json.dumps(plan.to_dict()))
    assert payload["data_replicas"] == 4 and payload["model_shards"] == 2
    assert payload["axis"] == "component" and payload["cuts"] == [[0, 8], [8, 16]]
    assert payload["fits"] is None and payload["extra"]["path"] == "/"


def test_balance_plan_validates_rows_and_resources() -> None:
    with pytest.raises(ValueError, match="n_data must be None or a positive integer, got 0"):
        balance_plan(_gauss_mix(4), Resources.local(2), n_data=0)
    with pytest.raises(ValueError, match=r"n_data must be None or a positive integer, got 2\.5"):
        balance_plan(_gauss_mix(4), Resources.local(2), n_data=2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a Resources with at least one device, got None"):
        balance_plan(_gauss_mix(4), None, n_data=3)


# --- balance_chunks ---------------------------------------------------------------------------------
def test_chunks_follow_throughput() -> None:
    res = Resources.from_specs([DeviceSpec("slow"), DeviceSpec("fast", throughput=3.0)])
    assert balance_chunks(8, res) == ((0, 2), (2, 8))
    assert balance_chunks(np.int64(8), res) == ((0, 2), (2, 8))
    assert balance_chunks(10, Resources.local(3)) == ((0, 3), (3, 7), (7, 10))


def test_chunks_follow_measured_row_cost() -> None:
    res = Resources.local(2)
    assert balance_chunks([5.0, 1.0, 1.0, 1.0, 1.0, 1.0], res) == ((0, 1), (1, 6))
    costs = np.r_[np.full(10, 3.0), np.full(30, 1.0)]
    (a, b), (c, d) = balance_chunks(costs, res)
    assert costs[a:b].sum() == costs[c:d].sum() == 30.0


def test_chunks_with_fewer_rows_than_devices_leave_empty_ranges() -> None:
    assert balance_chunks(2, Resources.local(3)) == ((0, 1), (1, 1), (1, 2))
    assert balance_chunks(0, Resources.local(2)) == ((0, 0), (0, 0))


def test_chunks_reject_bad_costs() -> None:
    res = Resources.local(2)
    with pytest.raises(ValueError, match="the row count must be non-negative, got -1"):
        balance_chunks(-1, res)
    with pytest.raises(
        ValueError, match=r"per-row costs must be a finite, non-negative 1-D array, got \[1.0, nan\]"
    ):
        balance_chunks([1.0, float("nan")], res)
    with pytest.raises(ValueError, match=r"non-negative 1-D array, got \[\[1.0\]\]"):
        balance_chunks([[1.0]], res)
    with pytest.raises(ValueError, match="expected a row count or a 1-D array of per-row costs, got 'many'"):
        balance_chunks("many", res)  # type: ignore[arg-type]


# --- auto_balanced_estimator and the placement error ---------------------------------------------------
def test_data_parallel_plan_returns_the_same_estimator() -> None:
    est = MixtureEstimator([GaussianEstimator()] * 3)
    chosen, plan = auto_balanced_estimator(est, _gauss_mix(3), Resources.local(4), n_data=100_000)
    assert chosen is est and isinstance(plan, BalancePlan) and not plan.is_model_parallel


def test_model_parallel_plan_raises_with_the_plan() -> None:
    est = MixtureEstimator([GaussianEstimator()] * 32)
    with pytest.raises(UnrealizedModelPlacementError, match=r"8 cuts \[\(0, 4\), \(4, 8\)") as info:
        auto_balanced_estimator(est, _gauss_mix(32), Resources.local(8), n_data=1)
    assert isinstance(info.value, RuntimeError)
    assert isinstance(info.value.plan, BalancePlan) and info.value.plan.model_shards == 8
    message = str(info.value)
    assert "in-process component-parallel runtime keeps the whole model resident" in message
    assert "explicit placement contract" in message and "change the resources or the workload" in message


def test_placement_error_carries_a_model_decomposition() -> None:
    dec = decompose_model(_gauss_mix(10), Resources.local(3), n_data=10)
    err = UnrealizedModelPlacementError(dec)
    assert err.plan is dec
    assert "3 cuts [(0, 3), (3, 7), (7, 10)] of the component axis at /" in str(err)
