"""Segment profiles over Spark: the hard-assignment counts and certainty of a whole DataFrame (one
aggregation job) equal the model's predictions computed locally on the same rows, for a DataFrame
read by column names and for an ML Vector column through ``MixleEstimator``'s summary."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.ml import MixleEstimator
from mixle_spark.profile import CERTAINTY_BINS
from mixle_spark.scoring import assignment_counts
from mixle_spark.stats import GaussianEstimator, MixtureEstimator, RecordEstimator

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    n = 3000
    label = rng.random(n) < 0.35
    return pd.DataFrame(
        {
            "x": np.where(label, rng.normal(4.0, 1.0, n), rng.normal(-1.0, 1.5, n)),
            "y": np.where(label, rng.normal(0.0, 0.5, n), rng.normal(2.0, 1.0, n)),
            "id": np.arange(n, dtype=np.int64),
        }
    )


def test_assignment_counts_over_a_dataframe_equal_local_predictions(spark: Any, table: pd.DataFrame) -> None:
    estimator = MixtureEstimator([RecordEstimator({"x": GaussianEstimator(), "y": GaussianEstimator()})] * 2)
    model = optimize(table[["x", "y"]], estimator, max_its=30, seed=2, backend="local")
    frame = spark.createDataFrame(table).repartition(3)
    counts = assignment_counts(model, frame)
    assert counts is not None and counts["basis"] == "the whole table"
    proba = model.predict_proba(table[["x", "y"]])
    assert counts["rows"] == np.bincount(proba.argmax(axis=1), minlength=2).tolist()
    top = proba.max(axis=1)
    expected = np.bincount(np.minimum((top * CERTAINTY_BINS).astype(int), CERTAINTY_BINS - 1), minlength=20)
    assert counts["certainty_histogram"] == expected.tolist()
    by_component = np.bincount(proba.argmax(axis=1), weights=top, minlength=2)
    assert counts["certainty_sum"] == pytest.approx(by_component.tolist(), rel=1e-9)


def test_the_estimator_summary_profiles_its_segments(spark: Any, table: pd.DataFrame) -> None:
    frame = spark.createDataFrame(table)
    model = MixleEstimator(k=2, seed=3, inputCols=["x", "y"]).fit(frame)
    summary = model.summary
    profile = summary.segmentProfile
    assert [c["rows"] for c in profile["components"]] == summary.clusterSizes
    assert sum(profile["assignments"]["certainty_histogram"]) == len(table)
    spec = model.distribution.to_dict()
    for row in profile["fields"]:
        for k, cell in enumerate(row["cells"]):
            assert cell["mean"] == pytest.approx(
                spec["components"][k]["fields"][row["field"]]["mu"], rel=1e-12
            )
    assert set(summary.timings) == {"encode", "seeding", "em", "total"}
    assert summary.timings["total"] == pytest.approx(
        sum(v for k, v in summary.timings.items() if k != "total")
    )
