"""Spark equals local for the families whose accumulator reads the current model (Student-t) inside a
mixture and a record, and for the negative binomial's histogram statistics, over a whole fit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.stats.mixture import MixtureDistribution, MixtureEstimator
from mixle_spark.stats.negative_binomial import NegativeBinomialDistribution, NegativeBinomialEstimator
from mixle_spark.stats.record import RecordEstimator
from mixle_spark.stats.student_t import StudentTDistribution, StudentTEstimator
from mixle_spark.stats.von_mises import VonMisesDistribution, VonMisesEstimator
from tests.unit._cases import assert_models_close as _assert_models_close

pytestmark = pytest.mark.spark


def test_student_t_mixture_fit_equals_local(spark: Any) -> None:
    truth = MixtureDistribution(
        [StudentTDistribution(-4.0, 1.0, 3.0), StudentTDistribution(3.0, 0.5, 8.0)], [0.4, 0.6]
    )
    x = np.asarray(truth.sampler(5).sample(1500))
    df = spark.createDataFrame(pa.table({"x": x}))
    est = MixtureEstimator([StudentTEstimator()] * 2)
    got = optimize(df, est, max_its=6, delta=None, seed=4, num_chunks=3)
    want = optimize(list(x), est, max_its=6, delta=None, seed=4)
    _assert_models_close(got, want)


def test_record_of_new_families_fit_equals_local(spark: Any) -> None:
    rng = np.random.default_rng(6)
    n = 1200
    table = pa.table(
        {
            "visits": NegativeBinomialDistribution(2.0, 0.3).sampler(1).sample(n),
            "heading": VonMisesDistribution(2.5, 4.0).sampler(2).sample(n),
            "residual": StudentTDistribution(0.0, 1.0, 3.0).sampler(3).sample(n) + rng.normal(0, 1e-3, n),
        }
    )
    est = RecordEstimator(
        {
            "visits": NegativeBinomialEstimator(),
            "heading": VonMisesEstimator(),
            "residual": StudentTEstimator(),
        }
    )
    got = optimize(spark.createDataFrame(table), est, max_its=5, delta=None, seed=1, num_chunks=4)
    want = optimize(table, est, max_its=5, delta=None, seed=1)
    _assert_models_close(got, want)
    assert got.fields["residual"].dof == pytest.approx(want.fields["residual"].dof, rel=1e-9)
