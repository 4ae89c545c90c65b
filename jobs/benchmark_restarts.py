"""Restarts that share passes: ``best_of(trials=5)`` against five ``optimize`` calls, on Spark.

    python jobs/benchmark_restarts.py                 # 200,000 rows, d=5, k=8, 5 trials, local[2]
    python jobs/benchmark_restarts.py --rows 50000 --trials 3

Both sides fit the same estimator from the same seeds (``trial_seeds(seed, trials)``) on one encoded
DataFrame in the session's own partitioning: ``best_of`` advances its trials together, one pass over
the data (one Spark job, or one resident request) per step for every trial still running; the peer
runs the trials one after the other. Measured twice: with ``resident=False`` (one Spark job per pass,
every pass re-reads the cached data) and with the default resident E-steps. Prints the seconds of each,
the ratio (sequential / together) and whether the best models are identical. Ratios are the result;
absolute times on a 2-core machine are noise.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.estimation import best_of, optimize, trial_seeds
from mixle_spark.io import spark_session
from mixle_spark.parallel import encoded_data
from mixle_spark.spec import model_to_dict
from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator


def _frame(spark: Any, rows: int, dim: int, k: int) -> Any:
    rng = np.random.default_rng(0)
    centres = rng.uniform(-4.0, 4.0, size=(k, dim))
    x = centres[rng.integers(0, k, size=rows)] + rng.normal(size=(rows, dim))
    table = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), dim)})
    return spark.createDataFrame(table.to_pandas()).cache()


def _measure(df: Any, est: Any, trials: int, max_its: int, resident: bool) -> tuple[float, float, bool, int]:
    with encoded_data(df, est, backend="spark", resident=resident) as handle:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            started = time.perf_counter()
            _ll, together = best_of(handle, est, trials=trials, max_its=max_its, seed=1)
            middle = time.perf_counter()
            one_by_one = [optimize(handle, est, max_its=max_its, seed=s) for s in trial_seeds(1, trials)]
            finished = time.perf_counter()
    best = max(one_by_one, key=lambda m: m.fit_result.log_likelihood)
    same = model_to_dict(best) == model_to_dict(together)
    steps = sum(m.fit_result.n_iter for m in one_by_one)
    return middle - started, finished - middle, same, steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=5)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--max-its", type=int, default=30)
    args = parser.parse_args(argv)
    spark = spark_session("mixle_spark-benchmark-restarts", master="local[2]", delta=False)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = _frame(spark, args.rows, args.dim, args.k)
        df.count()
        est = MixtureEstimator([MultivariateGaussianEstimator()] * args.k)
        print(f"rows {args.rows}, d={args.dim}, k={args.k}, {args.trials} trials, max_its {args.max_its}")
        for resident in (False, True):
            together, sequential, same, steps = _measure(df, est, args.trials, args.max_its, resident)
            label = "resident" if resident else "resident=False (a Spark job per pass)"
            print(
                f"{label}: best_of {together:.1f}s, {args.trials} optimize calls {sequential:.1f}s "
                f"({steps} EM steps): ratio {sequential / together:.2f}x, identical best model: {same}",
                flush=True,
            )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
