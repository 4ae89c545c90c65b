"""Models that keep learning: a streamed fit against the batch fit, and an update against a refit.

    python jobs/benchmark_updates.py                    # n=1e6, d=10, k=16, 100 micro-batches, local
    python jobs/benchmark_updates.py --rows 200000      # quicker
    python jobs/benchmark_updates.py --spark            # the update-vs-refit timing on local[2] Spark too
    python jobs/benchmark_updates.py --no-local --spark --connect   # Spark and Spark Connect only

Measured in one run, from the data of ``jobs/benchmark.py`` (``--components`` well-separated random
Gaussians in ``--dim`` dimensions, seed ``--seed``), full covariance, default options everywhere:

* **stream vs batch** (local backend): the rows cut into ``--batches`` micro-batches in order; the first
  fitted from scratch (``optimize(..., keep_statistics=True)``), each later one folded in by
  ``update`` as :func:`mixle_spark.streaming.fit_stream` does per batch, once with incremental EM (no
  decay) and once with stepwise EM. Reported: each model's mean log-likelihood on all rows against the
  batch fit's (``optimize`` on all rows), as the gap in percent (targets: 0.5% and 2%).
* **update vs refit**: a model fitted on all ``--rows`` rows, then ``--new-rows`` new rows folded in by
  ``update``; reported: the update's wall time (the median of ``--repeats`` runs of the same update:
  a sub-second time on a shared machine) over the full refit's (``optimize`` on the rows plus the
  new ones; target under 5%), on the local backend and, with ``--spark``, on ``local[2]`` Spark (cached
  DataFrames, the update reading a DataFrame of the new rows).

Absolute times on a shared 2-core machine are noise; the ratios and gaps are the result.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

from mixle_spark.em.incremental import update
from mixle_spark.estimation import optimize
from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmark import _benchmark_session, make_data

QUIET: dict[str, Any] = {"print_iter": 0}


def mean_ll(model: Any, x: np.ndarray) -> float:
    return float(np.mean(model.seq_log_density(model.encoder().encode(x))))


def stream_vs_batch(x: np.ndarray, k: int, batches: int, seed: int) -> None:
    est = MixtureEstimator([MultivariateGaussianEstimator()] * k)
    t0 = time.perf_counter()
    batch = optimize(x, est, seed=seed, max_its=200, delta=1e-6, **QUIET)
    t_batch = time.perf_counter() - t0
    reference = mean_ll(batch, x)
    parts = np.array_split(x, batches)
    print(
        f"rows {len(x)}, d={x.shape[1]}, k={k}, {batches} micro-batches of {len(parts[0])} rows, seed {seed}"
    )
    print(f"{'fit':<34} {'mean log-lik':>13} {'gap vs batch':>13} {'seconds':>9}")
    print(f"{'batch (optimize on all rows)':<34} {reference:>13.5f} {'':>13} {t_batch:>9.1f}")
    for method in ("incremental", "stepwise"):
        t0 = time.perf_counter()
        model = optimize(parts[0], est, seed=seed, max_its=200, delta=1e-6, keep_statistics=True, **QUIET)
        for part in parts[1:]:
            model = update(model, part, method=method)
        seconds = time.perf_counter() - t0
        got = mean_ll(model, x)
        gap = 100.0 * (reference - got) / abs(reference)
        print(f"{'stream, ' + method + ' EM, no decay':<34} {got:>13.5f} {gap:>12.3f}% {seconds:>9.1f}")


def update_vs_refit(
    x: np.ndarray,
    new: np.ndarray,
    k: int,
    seed: int,
    spark: Any = None,
    name: str = "local",
    repeats: int = 5,
) -> None:
    est = MixtureEstimator([MultivariateGaussianEstimator()] * k)
    if spark is None:
        data, more, both, where = x, new, np.r_[x, new], "local"
    else:
        import pyarrow as pa
        from pyspark.ml.functions import array_to_vector

        def frame(a: np.ndarray) -> Any:
            flat = pa.FixedSizeListArray.from_arrays(pa.array(a.ravel()), a.shape[1])
            table = pa.table({"features": flat.cast(pa.list_(pa.float64()))})
            df = spark.createDataFrame(table).select(array_to_vector("features").alias("features")).cache()
            df.count()
            return df

        data, more, both, where = frame(x), frame(new), frame(np.r_[x, new]), f"{name} local[2]"
    model = optimize(data, est, seed=seed, keep_statistics=True, **QUIET)
    t0 = time.perf_counter()
    optimize(both, est, seed=seed, **QUIET)
    refit = time.perf_counter() - t0
    times = []
    for _ in range(repeats):  # the same update each time (the model is not changed by it)
        t0 = time.perf_counter()
        update(model, more)
        times.append(time.perf_counter() - t0)
    seconds = float(np.median(times))
    print(
        f"{where:<16} update of {len(new)} rows {seconds:7.2f}s (median of {repeats}, {min(times):.2f}-"
        f"{max(times):.2f}), refit on {len(x) + len(new)} rows {refit:7.2f}s: update/refit "
        f"{100 * seconds / refit:.2f}% (target < 5%)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--new-rows", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--components", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats", type=int, default=5, help="updates timed (the median is reported; a refit takes one)"
    )
    parser.add_argument("--spark", action="store_true", help="time update vs refit on local[2] Spark too")
    parser.add_argument("--connect", action="store_true", help="... and over a local Spark Connect server")
    parser.add_argument("--no-local", action="store_true", help="skip the local-backend measurements")
    args = parser.parse_args(argv)
    x, _means = make_data(args.rows + args.new_rows, args.dim, args.components, args.seed)
    old, new = x[: args.rows], x[args.rows :]
    if not args.no_local:
        stream_vs_batch(old, args.components, args.batches, args.seed)
        update_vs_refit(old, new, args.components, args.seed, repeats=args.repeats)
    for connect in [False] * args.spark + [True] * args.connect:
        spark = _benchmark_session(connect)
        name = "Spark Connect" if connect else "Spark"
        update_vs_refit(old, new, args.components, args.seed, spark, name, args.repeats)
        spark.stop()


if __name__ == "__main__":
    main()
