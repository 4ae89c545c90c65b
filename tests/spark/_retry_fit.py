"""Fit in a Spark session that allows task retries, with an E-step that fails on every task's first
attempt; prints the fitted model's JSON. Run by tests/spark/test_task_retry.py in a subprocess (one
SparkContext per process, and the shared test session allows no retries)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow as pa
from pyspark import TaskContext

from mixle_spark.estimation import optimize
from mixle_spark.io import spark_session
from mixle_spark.spec import model_to_dict
from mixle_spark.stats import (
    GaussianAccumulator,
    GaussianAccumulatorFactory,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
)


def _fail_on_first_attempt() -> None:
    ctx = TaskContext.get()
    if ctx is not None and ctx.attemptNumber() == 0:
        raise RuntimeError(f"injected failure in partition {ctx.partitionId()}, attempt 0")


class FlakyAccumulator(GaussianAccumulator):
    def seq_update(self, enc, weights, estimate):  # type: ignore[no-untyped-def]
        _fail_on_first_attempt()
        return super().seq_update(enc, weights, estimate)

    def add_feature_sums(self, sums, enc, estimate):  # type: ignore[no-untyped-def]
        _fail_on_first_attempt()  # the mixture's fast path calls this instead of seq_update
        return super().add_feature_sums(sums, enc, estimate)


class FlakyFactory(GaussianAccumulatorFactory):
    def make(self) -> FlakyAccumulator:
        return FlakyAccumulator(self.keys)


class FlakyEstimator(GaussianEstimator):
    def accumulator_factory(self) -> FlakyFactory:
        return FlakyFactory(self.keys)


def main() -> None:
    x = np.asarray(json.loads(sys.argv[1]))
    start = MixtureDistribution([GaussianDistribution(-3.0, 1.0), GaussianDistribution(2.0, 0.5)], [0.4, 0.6])
    spark = spark_session("retry-test", master="local[2,4]", conf={"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("WARN")  # task failures are logged at WARN
    df = spark.createDataFrame(pa.table({"x": x}))
    model = optimize(
        df, MixtureEstimator([FlakyEstimator()] * 2), max_its=4, delta=None, prev_estimate=start, num_chunks=3
    )
    print("MODEL " + json.dumps(model_to_dict(model)))
    spark.stop()


if __name__ == "__main__":
    main()
