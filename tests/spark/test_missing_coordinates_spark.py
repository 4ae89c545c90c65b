"""Missing coordinates on Spark: an array<double> column holding NaN and null elements fits to the
local backend's model (and under a covariance form), and ``score(..., imputed_col=...)`` writes the
posterior-weighted conditional means."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.scoring import score
from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator
from tests.unit.test_missing_coordinates import clusters, holes

pytestmark = pytest.mark.spark


def test_nan_and_null_coordinates_fit_and_impute_on_spark_as_locally(spark: Any) -> None:
    x = holes(clusters(seed=12, d=4, k=3, per=200), 0.2)
    cells = [
        [None if (i + j) % 7 == 0 and np.isnan(v) else float(v) for j, v in enumerate(r)]
        for i, r in enumerate(x)
    ]
    table = pa.table({"x": pa.array(cells, pa.list_(pa.float64()))})  # some NaN, some null elements
    df = spark.createDataFrame(table.to_pandas()).repartition(3)
    assert df.filter("exists(x, v -> v IS NULL)").count() > 0
    for covariance in (None, "tied"):
        est = MixtureEstimator([MultivariateGaussianEstimator()] * 3, covariance=covariance)
        ordered = spark.createDataFrame(table.to_pandas())  # the local fit's row order and start
        got = optimize(ordered, est, max_its=10, delta=None, seed=3)
        want = optimize(table, est, max_its=10, delta=None, seed=3, backend="local")
        for a, b in zip(got.components, want.components, strict=True):
            np.testing.assert_allclose(a.mu, b.mu, rtol=1e-9)
            np.testing.assert_allclose(a.covar, b.covar, rtol=1e-9, atol=1e-12)
    scored = score(got, df, imputed_col="x_filled").toPandas()
    filled = np.array(scored["x_filled"].tolist())
    raw = np.array([[np.nan if v is None else v for v in r] for r in scored["x"]], dtype=float)
    want_filled = got.seq_impute(got.encoder().encode(list(raw)))
    np.testing.assert_allclose(filled, want_filled, rtol=1e-12)
    assert not np.isnan(filled).any()
    assert np.array_equal(filled[~np.isnan(raw)], raw[~np.isnan(raw)])
