"""The compute engines against each other: EM iterations of a full-covariance Gaussian mixture on the
local backend with numpy (float64, float32) and torch (float64, float32, bfloat16).

    python jobs/benchmark_engines.py                      # 1e6 rows, d = 10, k = 16, 10 iterations
    python jobs/benchmark_engines.py --rows 100000 --iterations 5
    python jobs/benchmark_engines.py --device cuda        # torch on the GPU (numpy stays on the CPU)

The data are ``--rows`` vectors of dimension ``--dim`` drawn around ``--components`` shifted centres.
One start model (three EM steps on 50,000 rows, numpy float64) is shared by every run; each run
encodes the data at its precision, takes one untimed EM step from the start (its first pass builds the
cached features) and then times ``--iterations`` EM steps; ``--rounds`` rounds (default 3) run every
engine in turn. Reported per run: the median seconds per iteration, the ratio to numpy float64's
(above 1: faster), and the mean log-likelihood after the iterations with its relative difference from
numpy float64's.

Threads: BLAS and torch run ``OMP_NUM_THREADS`` threads (one when it is not set, as in Spark's tasks;
set before numpy is imported). The machines are shared: absolute times are noise, the ratios measured
in one run are the result.
"""

from __future__ import annotations

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from mixle_spark.engines import EngineUnavailableError  # noqa: E402
from mixle_spark.errors import ConvergenceWarning  # noqa: E402
from mixle_spark.estimation import optimize  # noqa: E402
from mixle_spark.parallel import encoded_data  # noqa: E402
from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator  # noqa: E402

RUNS = (
    ("numpy", "float64"),
    ("numpy", "float32"),
    ("torch", "float64"),
    ("torch", "float32"),
    ("torch", "bfloat16"),
)
"""The engine and precision of each run, in the order reported; the first is the reference."""


def sample(rows: int, dim: int, components: int, seed: int = 0) -> np.ndarray:
    """``rows`` vectors around ``components`` centres on a diagonal, with unequal coordinate scales."""
    rng = np.random.default_rng(seed)
    scales = rng.uniform(0.5, 3.0, dim)
    centres = rng.integers(0, components, rows)[:, None] * 0.7
    return rng.normal(size=(rows, dim)) * scales + centres


def _time_run(x: np.ndarray, est: Any, start: Any, engine: str, precision: str, iterations: int) -> Any:
    """Each timed iteration's seconds and the mean log-likelihood after the last, for one run."""
    with encoded_data(x, est, engine=engine, precision=precision) as handle:
        model = handle.pysp_em_step(est, start)[2]
        seconds = []
        for _ in range(iterations):
            began = time.perf_counter()
            _, ll, model = handle.pysp_em_step(est, model)
            seconds.append(time.perf_counter() - began)
    return seconds, ll / len(x)


def run(
    rows: int,
    dim: int = 10,
    components: int = 16,
    iterations: int = 10,
    runs: Any = RUNS,
    rounds: int = 1,
) -> list[dict[str, Any]]:
    """One row per (engine, precision): the median seconds per iteration over ``rounds`` rounds (each
    runs every engine in turn, so a shared machine's load falls on all of them), its ratio to the first
    run's, the mean log-likelihood and its relative difference from the first run's. An engine whose
    library is missing is reported with ``seconds`` None and the reason."""
    x = sample(rows, dim, components)
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=dim)] * components)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with encoded_data(x[: min(rows, 50_000)], est) as handle:
            start = optimize(handle, est, max_its=3, seed=1, print_iter=0)
    out: list[dict[str, Any]] = [{"engine": e, "precision": p, "times": [], "note": ""} for e, p in runs]
    for _ in range(rounds):
        for row in out:
            if row["note"]:
                continue
            try:
                seconds, mean_ll = _time_run(x, est, start, row["engine"], row["precision"], iterations)
            except EngineUnavailableError as err:
                row["note"] = str(err)
                continue
            row["times"] += seconds
            row["mean_ll"] = mean_ll
    for row in out:
        row["seconds"] = statistics.median(row["times"]) if row["times"] else None
    reference = out[0]
    for row in out:
        if row["seconds"] is not None and reference["seconds"] is not None:
            row["speedup"] = reference["seconds"] / row["seconds"]
            row["ll_difference"] = abs(row["mean_ll"] / reference["mean_ll"] - 1.0)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--components", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="each runs every engine in turn")
    parser.add_argument(
        "--device", default=None, help="torch's device: cpu, cuda, cuda:1 (sets MIXLE_SPARK_TORCH_DEVICE)"
    )
    args = parser.parse_args(argv)
    if args.device:
        os.environ["MIXLE_SPARK_TORCH_DEVICE"] = args.device
    rows = int(args.rows)
    print(
        f"local backend, n={rows:,}, d={args.dim}, k={args.components} full covariance, "
        f"{args.iterations} EM iterations x {args.rounds} rounds (median), "
        f"{os.environ['OMP_NUM_THREADS']} thread(s)"
    )
    header = ("engine", "precision", "s/iter", "vs numpy f64", "mean ll", "ll diff")
    print("{:8s} {:10s} {:>9s} {:>13s} {:>14s} {:>9s}".format(*header))
    for row in run(rows, args.dim, args.components, args.iterations, rounds=args.rounds):
        if row["seconds"] is None:
            print(f"{row['engine']:8s} {row['precision']:10s} not run: {row['note']}")
            continue
        print(
            f"{row['engine']:8s} {row['precision']:10s} {row['seconds']:9.3f} {row['speedup']:12.2f}x "
            f"{row['mean_ll']:14.8f} {row['ll_difference']:9.1e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
