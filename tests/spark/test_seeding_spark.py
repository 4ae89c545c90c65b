"""init="kmeans||" on Spark: the local backend's initial model on any partitioning, resident or not, and
the d=50 clusters MLlib-style random starts miss are all found from default options."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import ConvergenceWarning
from mixle_spark.estimation import initialize, optimize
from mixle_spark.parallel.backends.spark import SparkEncodedData
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianEstimator,
    MixtureEstimator,
    MultivariateGaussianEstimator,
    PoissonEstimator,
    RecordEstimator,
)
from tests.unit._cases import model_numbers as _numbers
from tests.unit.test_nested_seeding import EST as NESTED
from tests.unit.test_nested_seeding import nested_table

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def segments(spark: Any) -> tuple[Any, list[dict[str, Any]]]:
    rng = np.random.default_rng(8)
    n = 3000
    seg = rng.integers(0, 3, size=n)
    amount = rng.normal(np.array([-2.0, 0.0, 3.0])[seg], 0.7)
    channel = np.array(["web", "app", "store"])[(seg + (rng.random(n) < 0.2)) % 3]
    items = rng.poisson(np.array([1.0, 5.0, 2.0])[seg])
    table = pa.table({"amount": amount, "channel": channel, "items": items})
    rows = table.to_pylist()
    return spark.createDataFrame(table.to_pandas()), rows  # row order kept: seeding is keyed by row


EST = MixtureEstimator(
    [
        RecordEstimator(
            {"amount": GaussianEstimator(), "channel": CategoricalEstimator(), "items": PoissonEstimator()}
        )
    ]
    * 3
)


def _initialized_on_spark(df: Any, est: Any, seed: int, **options: Any) -> np.ndarray:
    """The numbers of ``est``'s initial model from ``seed``, seeded over ``df`` by Spark."""
    with SparkEncodedData(df, estimator=est, **options) as handle:
        handle.begin_fit()
        try:
            return _numbers(initialize(handle, est, seed=seed))
        finally:
            handle.end_fit()


def test_kmeans_init_on_spark_equals_local_for_any_layout(segments: Any) -> None:
    df, rows = segments
    local = _numbers(initialize(rows, EST, seed=4))
    for options in ({"resident": False}, {"resident": False, "num_chunks": 3}, {"resident": True}):
        got = _initialized_on_spark(df, EST, 4, **options)
        np.testing.assert_allclose(got, local, rtol=1e-9, atol=1e-12, err_msg=str(options))
    assert not np.allclose(_numbers(initialize(rows, EST, seed=5)), local)


def test_a_nested_mixtures_start_on_spark_equals_local(spark: Any) -> None:
    """The K x k flat clusters of a mixture nested in a record (tests/unit/test_nested_seeding.py)."""
    table = nested_table(5, n=2000)
    local = _numbers(initialize(table, NESTED, seed=6))
    df = spark.createDataFrame(table.to_pandas())
    for options in ({"resident": False}, {"resident": True}):
        got = _initialized_on_spark(df, NESTED, 6, **options)
        np.testing.assert_allclose(got, local, rtol=1e-9, atol=1e-12, err_msg=str(options))


def test_default_fit_on_spark_recovers_all_eight_centres_in_50_dimensions(spark: Any) -> None:
    rng = np.random.default_rng(3)
    centres = rng.uniform(-10.0, 10.0, size=(8, 50))
    labels = rng.integers(0, 8, size=20_000)
    x = centres[labels] + rng.normal(size=(20_000, 50))
    df = spark.createDataFrame(pa.table({"x": pa.array(list(x), pa.list_(pa.float64()))}).to_pandas())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = optimize(df, MixtureEstimator([MultivariateGaussianEstimator()] * 8))  # default options
    means = np.array([c.mu for c in model.components])
    distance = np.sqrt(((means[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2))
    assert sorted(np.argmin(distance, axis=0).tolist()) == list(range(8))  # a component per centre
    assert distance.min(axis=0).max() < 0.5
    np.testing.assert_allclose(np.sort(model.w), np.sort(np.bincount(labels) / 20_000), atol=1e-6)


def test_select_k_on_spark_equals_local(spark: Any) -> None:
    from mixle_spark.model_selection import select_k
    from mixle_spark.stats import DiagonalGaussianEstimator

    rng = np.random.default_rng(6)
    centres = np.array([[-6.0, 0.0], [0.0, 6.0], [6.0, 0.0]])
    x = np.vstack([c + rng.normal(size=(400, 2)) for c in centres])
    df = spark.createDataFrame(pa.table({"x": pa.array(list(x), pa.list_(pa.float64()))}).to_pandas())
    est = MixtureEstimator([DiagonalGaussianEstimator()])
    with warnings.catch_warnings(record=True) as local_warnings:
        warnings.simplefilter("always", ConvergenceWarning)
        local = select_k(list(x), est, ks="1:5", seed=2)
    with warnings.catch_warnings(record=True) as remote_warnings:
        warnings.simplefilter("always", ConvergenceWarning)
        remote = select_k(df, est, ks="1:5", seed=2)
    assert local.best_k == remote.best_k == 3

    # k=4 and 5 converge slowly: one warning each, the same on both backends
    def candidates(caught: list[warnings.WarningMessage]) -> list[str]:
        return [str(w.message).split(":")[0] for w in caught if w.category is ConvergenceWarning]

    assert candidates(local_warnings) == [f"k={r.k}" for r in local.table if not r.converged] != []
    assert candidates(remote_warnings) == candidates(local_warnings)
    for a, b in zip(local.table, remote.table, strict=True):
        assert (a.k, a.free_parameters, a.iterations, a.converged) == (
            b.k,
            b.free_parameters,
            b.iterations,
            b.converged,
        )
        assert b.log_likelihood == pytest.approx(a.log_likelihood, rel=1e-9)
        assert b.bic == pytest.approx(a.bic, rel=1e-9)
    np.testing.assert_allclose(_numbers(remote.model), _numbers(local.model), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("resident", [False, True])
def test_best_of_on_spark_shares_passes_and_equals_the_trials_alone(segments: Any, resident: bool) -> None:
    from mixle_spark.estimation import best_of, trial_seeds

    df, rows = segments
    with SparkEncodedData(df, estimator=EST, resident=resident) as handle, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ll, together = best_of(handle, EST, trials=3, max_its=8, seed=2)
        alone = [optimize(handle, EST, max_its=8, seed=s) for s in trial_seeds(2, 3)]
    best = max(alone, key=lambda m: m.fit_result.log_likelihood)
    np.testing.assert_allclose(_numbers(together), _numbers(best), rtol=1e-12, atol=1e-12)
    assert ll == pytest.approx(best.fit_result.log_likelihood, rel=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _ll, local = best_of(rows, EST, trials=3, max_its=8, seed=2)
    np.testing.assert_allclose(_numbers(together), _numbers(local), rtol=1e-9, atol=1e-9)
