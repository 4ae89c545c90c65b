"""Covariance forms on Spark: scikit-learn's four forms, fitted from scikit-learn's start over one
encoded DataFrame, equal scikit-learn's models (and so the local backend's) to 1e-9."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.parallel import encoded_data
from tests.unit.test_covariance_forms import (
    SKLEARN_FORMS,
    assert_same_as_sklearn,
    blobs,
    sklearn_fit,
    sklearn_start,
    unfloored,
)

pytestmark = pytest.mark.spark


def test_sklearn_forms_on_spark_equal_sklearn(spark: Any) -> None:
    pytest.importorskip("sklearn")
    x = blobs()
    df = spark.createDataFrame(
        pd.DataFrame({"x": list(x)})
    )  # an array column, the DataFrame's own partitions
    with encoded_data(df, unfloored("full"), column="x") as handle:
        assert type(handle).__name__ == "SparkEncodedData"
        for form in SKLEARN_FORMS:
            _, start = sklearn_start(x, form)
            got = optimize(handle, unfloored(form), max_its=20, delta=None, prev_estimate=start)
            assert got.fit_result.n_iter == 20
            assert_same_as_sklearn(got, sklearn_fit(x, form), form)
