"""What missing coordinates cost an E-step: per-iteration time of a full-covariance mixture over rows
with 20% of their coordinates missing at random, against the same rows complete, in the same run.

    python jobs/benchmark_missing.py              # 100,000 rows, d = 10, k = 4 (local backend)
    python jobs/benchmark_missing.py --rows 20000 --missing 0.05

Complete rows take the mixture's fused kernel (two matrix products per block); rows with missing
coordinates are scored and folded component by component, grouped by how many coordinates they
observe (:class:`~mixle_spark.stats._vector.PatternGroup`). No peer fits such data (scikit-learn
and MLlib refuse NaN), so the complete data is the reference. Absolute times on a 2-core machine are
noise; the ratio is the figure.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np

from mixle_spark.estimation import optimize
from mixle_spark.parallel import encoded_data
from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator


def _clusters(rows: int, d: int, k: int, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    parts = []
    for m in rng.normal(scale=4.0, size=(k, d)):
        a = rng.normal(size=(d, d)) * 0.4
        parts.append(rng.multivariate_normal(m, a @ a.T + 0.5 * np.eye(d), rows // k))
    return rng.permutation(np.concatenate(parts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--missing", type=float, default=0.2, help="fraction of coordinates missing")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    x = _clusters(args.rows, args.dim, args.k)
    holed = x.copy()
    holed[np.random.default_rng(1).random(x.shape) < args.missing] = np.nan
    est = MixtureEstimator([MultivariateGaussianEstimator()] * args.k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a few iterations do not converge
        start = optimize(x, est, max_its=2, delta=None, seed=1)

        def per_iteration(data: np.ndarray) -> float:
            with encoded_data(data, est) as handle:
                optimize(handle, est, max_its=1, delta=None, prev_estimate=start)  # encoding, caches
                times = []
                for _ in range(args.repeats):
                    t = time.perf_counter()
                    optimize(handle, est, max_its=1, delta=None, prev_estimate=start)
                    times.append(time.perf_counter() - t)
            return statistics.median(times)

        complete, missing = per_iteration(x), per_iteration(holed)
    incomplete = float(np.isnan(holed).any(axis=1).mean())
    print(
        f"{args.rows:,} rows, d = {args.dim}, k = {args.k}, {args.missing:.0%} of coordinates missing "
        f"({incomplete:.0%} of rows incomplete)"
    )
    print(f"complete rows: {complete:.3f} s per iteration (median of {args.repeats})")
    print(f"with missing coordinates: {missing:.3f} s per iteration")
    print(f"ratio: {missing / complete:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
