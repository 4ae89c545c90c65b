"""Driver of tests/spark/test_cluster.py, run in a subprocess (one SparkContext per process): fits
with default options on a standalone cluster, once undisturbed and once killing a worker (its JVM,
executor and Python workers) mid-fit, and writes what it saw as JSON.

    python _cluster_fit.py MASTER_URL WORKER_PID OUTPUT_JSON
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from mixle_spark.estimation import optimize
from mixle_spark.io import spark_session
from mixle_spark.parallel._slots import task_slots
from mixle_spark.parallel.backends.spark import SparkEncodedData
from mixle_spark.parallel.backends.spark._resident import ResidentSession
from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator

ROWS, DIM, K, ITS = 20_000, 3, 3, 12


def _params(model: Any) -> list[float]:
    out: list[float] = []
    for w, c in zip(model.w, model.components, strict=True):
        out += [float(w), *np.ravel(c.mu), *np.ravel(c.covar)]
    return out


def _fit(df: Any, est: Any) -> dict[str, Any]:
    started = time.monotonic()
    with SparkEncodedData(df, estimator=est) as handle:
        layout = handle.num_partitions
        model = optimize(handle, est, max_its=ITS, delta=None, seed=1)
        return {
            "params": _params(model),
            "ll": model.fit_result.log_likelihood,
            "layout": layout,
            "partitions_after": handle.num_partitions,
            "resident_steps": handle.resident_steps,
            "resident_starts": handle.resident_starts,
            "resident_off": handle.resident_off,
            "events": {str(r.iteration): list(r.events) for r in model.fit_result.trace if r.events},
            "seconds": time.monotonic() - started,
        }


def main(master: str, worker_pid: int, output: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the checkout
    from tests.spark._standalone import process_tree

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = spark_session(
        "mixle_spark-cluster-test",
        master=master,
        conf={
            "spark.default.parallelism": "8",  # more than the 2 cores: must not be taken for slots
            "spark.executor.memory": "1g",
            "spark.driver.host": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "4",
        },
        delta=False,
    )
    spark.sparkContext.setLogLevel("ERROR")
    sc = spark.sparkContext
    files = sc.parallelize(range(4), 4).map(lambda _: __import__("mixle_spark").__file__).collect()
    rng = np.random.default_rng(5)
    x = rng.normal(size=(ROWS, DIM)) + 4.0 * rng.integers(0, K, ROWS)[:, None]
    rows = [(list(map(float, r)),) for r in x]
    df = spark.createDataFrame(sc.parallelize(rows, 12), "x array<double>")  # 12 partitions, row order kept
    est = MixtureEstimator([MultivariateGaussianEstimator()] * K)
    out: dict[str, Any] = {
        "executor_files": files,
        "slots": task_slots(sc),
        "default_parallelism": sc.defaultParallelism,
        "input_partitions": df.rdd.getNumPartitions(),
    }
    out["calm"] = _fit(df, est)

    original = ResidentSession.request
    calls = {"n": 0}

    def request(self: ResidentSession, payload: Any) -> list[Any]:
        calls["n"] += 1
        if calls["n"] == 5:  # mid-fit: the whole worker goes, with its executor and Python workers
            for pid in process_tree(worker_pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:  # it exited between the listing and the kill
                    pass
        return original(self, payload)

    ResidentSession.request = request  # type: ignore[method-assign]
    out["killed"] = _fit(df, est)
    out["slots_after"] = task_slots(sc)
    local = optimize(x, est, max_its=ITS, delta=None, seed=1)
    out["local"] = {"params": _params(local), "ll": local.fit_result.log_likelihood}
    with open(output, "w") as fh:
        json.dump(out, fh)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
