"""Partly labelled mixtures on Spark: the label column rides with the data, so a labelled fit over a
DataFrame equals the local backend's, and MixleEstimator's labelCol fits the same model."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from mixle_spark.estimation import optimize
from tests.unit.test_partial_labels import LABELLED, stripes

pytestmark = pytest.mark.spark


def test_a_labelled_fit_on_spark_equals_local_and_through_label_col(spark: Any) -> None:
    from pyspark.ml.functions import array_to_vector

    from mixle_spark.ml import MixleEstimator

    _x, _z, table = stripes(2)
    df = spark.createDataFrame(table.to_pandas())
    want = optimize(table, LABELLED, max_its=8, delta=None, seed=6, backend="local")
    got = optimize(df, LABELLED, max_its=8, delta=None, seed=6)
    np.testing.assert_allclose(got.w, want.w, rtol=1e-9)
    for a, b in zip(got.components, want.components, strict=True):
        np.testing.assert_allclose(a.mu, b.mu, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(a.covar, b.covar, rtol=1e-9, atol=1e-12)
    # the Spark ML estimator: labelCol beside an ML Vector featuresCol
    vectors = df.select(array_to_vector("x").alias("features"), "segment")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 8 iterations do not converge
        model = MixleEstimator(k=3, seed=6, maxIter=8, tol=0.0, labelCol="segment").fit(vectors)
        plain = optimize(df, LABELLED, max_its=8, delta=0.0, seed=6)
    np.testing.assert_allclose(model.weights, plain.w, rtol=1e-9)
    assert model.getLabelCol() == "segment"
    scored = model.transform(vectors.drop("segment"))  # the model reads no label column
    assert scored.count() == table.num_rows
