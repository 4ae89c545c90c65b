"""Fit and score through a real Spark Connect session (a local Connect server), print the results
as JSON. Run by tests/spark/test_spark_connect.py in a subprocess: a process holds either a classic
session (the shared test fixture) or a Connect one."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

from mixle_spark.estimation import optimize
from mixle_spark.parallel import encoded_data
from mixle_spark.scoring import score
from mixle_spark.spec import model_to_dict
from mixle_spark.stats import GaussianEstimator, MixtureEstimator


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
        model = optimize(handle, est, max_its=5, delta=None, seed=4)
    scored = score(model, df)
    facts["columns"] = scored.columns
    facts["rows"] = scored.count()
    facts["ll_sum"] = scored.agg({"log_likelihood": "sum"}).collect()[0][0]
    print("RESULT " + json.dumps({"facts": facts, "model": model_to_dict(model)}))
    spark.stop()


if __name__ == "__main__":
    main()
