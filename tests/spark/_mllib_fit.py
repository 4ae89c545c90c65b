"""MLlib's GaussianMixture, the reference of tests/spark/test_ml_estimator.py, fitted in a Spark of its
own: ``python -m tests.spark._mllib_fit POINTS.npy OUT.json K SEED``.

MLlib's EM has no covariance floor, and the LAPACK ``dsyev`` it calls on a NaN covariance loops
forever inside a task that cancelling does not stop: in the tests' shared session such a task would
hold a task slot until the session ends. In a process of its own it is killed with that process.
Writes the fit's weights, means, covariances and log-likelihood, its predictions in the order of the
points' first coordinate, and the data types of its output columns.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pandas as pd


def main() -> None:
    points, out, k, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.ml.clustering import GaussianMixture
    from pyspark.ml.feature import VectorAssembler

    from mixle_spark.io import spark_session

    spark = spark_session(
        "mixle_spark-tests-mllib", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    x = np.load(points)
    frame = spark.createDataFrame(pd.DataFrame({"x": x[:, 0], "y": x[:, 1]})).repartition(2)
    vectors = VectorAssembler(inputCols=["x", "y"], outputCol="features").transform(frame).cache()
    model = GaussianMixture(k=k, seed=seed).fit(vectors)
    scored = model.transform(vectors)
    rows = scored.select("x", "prediction").toPandas().sort_values("x")
    facts = {
        "weights": list(model.weights),
        "means": [g.mean.toArray().tolist() for g in model.gaussians],
        "covs": [g.cov.toArray().tolist() for g in model.gaussians],
        "log_likelihood": model.summary.logLikelihood,
        "predictions": rows["prediction"].astype(int).tolist(),
        "types": {
            n: type(scored.schema[n].dataType).__name__ for n in ("features", "prediction", "probability")
        },
    }
    with open(out, "w") as f:
        json.dump(facts, f)
    spark.stop()


if __name__ == "__main__":
    main()
