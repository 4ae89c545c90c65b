"""Choosing the covariance form and k together, as mclust does: does BIC find the truth?

    python jobs/form_selection.py              # fresh seeds: docs/covariance.md's table, a minute or two
    python jobs/form_selection.py --seed 12345 # one run again
    python jobs/form_selection.py --backend spark

For each of six forms (EII, VII, EEI, VVI, EEE, VVV; see ``mixle_spark.stats._covariance``) it draws a
data set from a mixture of that form: d = 3, k from 2 to 4, 400 rows per component, well-separated
means, volumes, shapes and orientations drawn at random as the form allows. Seeds are fresh unless
given, so nothing is tuned to the data. Then
``select_k(x, MixtureEstimator([MultivariateGaussianEstimator()]), ks=range(1, 9), forms="all")``
chooses among the 64 candidates by BIC with default options (every
candidate advancing in the same data passes), and the table says what it chose, the BIC margin to the
truth (how much better BIC found the choice), and whether it chose a model with more free parameters
than the truth's.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

from mixle_spark.model_selection import select_k
from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator

TRUE_FORMS = ("EII", "VII", "EEI", "VVI", "EEE", "VVV")
D, PER = 3, 400


def _rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(D, D)))
    return q * np.sign(np.diag(r))


def covariances(form: str, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``k`` covariances of ``form``: volumes in [0.5, 2.5], shapes with axes ratios up to 6."""

    def shape() -> np.ndarray:
        a = np.exp(rng.uniform(-0.9, 0.9, D))
        return a / np.exp(np.log(a).mean())  # |A| = 1

    volume = rng.uniform(0.5, 2.5)
    if form == "EII":
        return [volume * np.eye(D)] * k
    if form == "VII":
        return [v * np.eye(D) for v in rng.uniform(0.3, 3.0, k)]
    if form == "EEI":
        return [volume * np.diag(shape())] * k
    if form == "VVI":
        return [v * np.diag(shape()) for v in rng.uniform(0.3, 3.0, k)]
    if form == "EEE":
        rot = _rotation(rng)
        return [volume * rot @ np.diag(shape()) @ rot.T] * k
    if form == "VVV":
        out = []
        for v in rng.uniform(0.3, 3.0, k):
            rot = _rotation(rng)
            out.append(v * rot @ np.diag(shape()) @ rot.T)
        return out
    raise ValueError(form)


def draw(form: str, seed: int) -> tuple[np.ndarray, int]:
    """Rows of a mixture of ``form`` with a random k in 2..4, its means at least 4 standard deviations
    (of the widest component) apart."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 5))
    covs = covariances(form, k, rng)
    spread = 4.0 * np.sqrt(max(float(np.linalg.eigvalsh(c).max()) for c in covs))
    while True:
        means = rng.normal(scale=2.0 * spread, size=(k, D))
        gaps = [np.linalg.norm(a - b) for i, a in enumerate(means) for b in means[i + 1 :]]
        if min(gaps) >= spread:
            break
    x = np.concatenate([rng.multivariate_normal(m, c, PER) for m, c in zip(means, covs, strict=True)])
    return rng.permutation(x), k


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, help="the run's seed (default: fresh, printed)")
    parser.add_argument("--backend", default="local", choices=("local", "spark"))
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed} (data sets seeded {seed} + 0..5); d = {D}, {PER} rows per component, k = 1..8")
    spark = None
    if args.backend == "spark":
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    columns = ("truth", "chosen", "right", "BIC gap to truth", "more parameters", "seconds")
    print("{:<9} {:<9} {:<6} {:>17} {:>16} {:>8}".format(*columns))
    right = 0
    for i, form in enumerate(TRUE_FORMS):
        x, k = draw(form, seed + i)
        data = x
        if spark is not None:
            import pandas as pd

            data = spark.createDataFrame(pd.DataFrame({"x": list(x)}))
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # candidates with too many components converge slowly
            found = select_k(
                data,
                MixtureEstimator([MultivariateGaussianEstimator()]),
                ks=range(1, 9),
                forms="all",
                seed=seed,
            )
        seconds = time.perf_counter() - started
        rows = {(r.k, r.form): r for r in found.table}
        chosen = (found.best_k, found.best_form)
        ok = chosen == (k, form)
        right += ok
        gap = rows[k, form].bic - rows[chosen].bic
        more = rows[chosen].free_parameters > rows[k, form].free_parameters
        print(
            f"{form} k={k:<3} {found.best_form} k={found.best_k:<3} {'yes' if ok else 'no':<6} {gap:>17.3f} "
            f"{'yes' if more and not ok else 'no':>16} {seconds:>8.1f}"
        )
    print(f"right form and k: {right} of {len(TRUE_FORMS)}")
    if spark is not None:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
