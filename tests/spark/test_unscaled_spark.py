"""Unscaled vectors on Spark (issue 52): scales 1e-4..1e5 and offsets to 1e6 in an array<double>
column fit to the local backend's model (floors relative to the scan's per-coordinate variances, the
scan merged across partitions), and the likelihood never falls."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator
from tests.unit.test_unscaled import _no_decrease, unscaled_clusters

pytestmark = pytest.mark.spark


def test_unscaled_vectors_fit_on_spark_as_locally(spark: Any) -> None:
    x, k = unscaled_clusters(7, n=600, d=6)
    table = pa.table({"x": pa.array(list(x), pa.list_(pa.float64()))})
    ordered = spark.createDataFrame(table.to_pandas())  # the local fit's row order and start
    est = MixtureEstimator([MultivariateGaussianEstimator()] * k)
    got = optimize(ordered, est, max_its=12, delta=None, seed=2, num_chunks=3)
    want = optimize(table, est, max_its=12, delta=None, seed=2, backend="local")
    assert got.fit_result.log_likelihood == pytest.approx(want.fit_result.log_likelihood, rel=1e-9)
    for a, b in zip(got.components, want.components, strict=True):
        np.testing.assert_allclose(a.mu, b.mu, rtol=1e-9)
        np.testing.assert_allclose(a.covar, b.covar, rtol=1e-7, atol=1e-9 * np.abs(b.covar).max())
    _no_decrease(got)
