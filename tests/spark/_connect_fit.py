"""Fit (optimize, best_of, select_k), score, count assignments, keep statistics and update, and fit a
Pipeline with MixleEstimator through a real Spark Connect session (a local Connect server); print the
results as JSON. Run by tests/spark/test_spark_connect.py in a subprocess: a process holds either a
classic session (the shared test fixture) or a Connect one."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from mixle_spark.estimation import best_of, optimize
from mixle_spark.model_selection import select_k
from mixle_spark.parallel import encoded_data
from mixle_spark.parallel.backends.registry import data_identity
from mixle_spark.scoring import assignment_counts, score
from mixle_spark.spec import model_to_dict
from mixle_spark.stats import GaussianEstimator, MixtureEstimator
from tests.spark.test_incremental_spark import connect_updates
from tests.spark.test_ml_estimator import connect_pipeline
from tests.spark.test_precision_spark import connect_precision
from tests.spark.test_streaming import connect_stream


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    x = np.asarray(json.loads(sys.argv[1]))
    # the local Connect server authenticates with a token pyspark makes; it also listens on loopback only
    spark = (
        SparkSession.builder.remote("local[2]")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .getOrCreate()
    )
    df = spark.createDataFrame(pa.table({"x": x}))
    est = MixtureEstimator([GaussianEstimator()] * 2)
    with encoded_data(df, est, num_chunks=3) as handle:
        facts = {"handle": type(handle).__name__, "connect": handle.connect, "merge": handle.merge}
        facts["executor"] = type(handle.executor).__name__  # Connect runs no resident tasks: jobs only
        model = optimize(handle, est, max_its=5, delta=None, seed=4)
    scored = score(model, df)
    facts["columns"] = scored.columns
    facts["rows"] = scored.count()
    facts["ll_sum"] = scored.agg({"log_likelihood": "sum"}).collect()[0][0]
    facts["assignments"] = assignment_counts(model, df)  # the segment profile's sizes: one aggregation
    facts["identity"] = data_identity(df)  # the digest a checkpoint records: the same as classic's
    facts["identity_reordered"] = data_identity(df.orderBy(F.desc("x")).repartition(3))
    # As a Databricks user meets it: default options (the job path lays the data out for the session),
    # several fits advancing in shared passes over one handle. Five partitions holding the rows in their
    # original order (repartition(5) would deal them out in an order the local fit cannot reproduce, and
    # the starting models are keyed by row position).
    ordered = (
        df.withColumn("i", F.monotonically_increasing_id())
        .repartitionByRange(5, "i")
        .sortWithinPartitions("i")
        .select("x")
    )
    with encoded_data(ordered, est) as handle:
        facts["default_partitions"] = handle.num_partitions
        ll, best = best_of(handle, est, trials=3, max_its=4, delta=None, seed=7)
        chosen = select_k(handle, est, ks=[1, 2, 3], max_its=4, delta=None, seed=11)
    facts["best_of_ll"] = ll
    incremental = connect_updates(spark)  # kept statistics, updates: tests/spark/test_incremental_spark.py
    stream = connect_stream(spark)  # fit_stream's foreachBatch in the server: tests/spark/test_streaming.py
    pipeline = connect_pipeline(spark, sys.argv[2])  # MixleEstimator: tests/spark/test_ml_estimator.py
    precision = connect_precision(spark)  # float32 chunks: tests/spark/test_precision_spark.py
    result = {
        "pipeline": pipeline,
        "precision": precision,
        "incremental": incremental,
        "stream": stream,
        "facts": facts,
        "model": model_to_dict(model),
        "best_of": model_to_dict(best),
        "select_k": {str(k): model_to_dict(m) for k, m in chosen.models.items()},
        "best_k": chosen.best_k,
    }
    print("RESULT " + json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
