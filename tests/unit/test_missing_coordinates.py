"""Vector Gaussians with missing (NaN / null) coordinates: densities marginalize them exactly, the
E-step takes their conditional expectations (checked against a row-by-row reference), EM never
lowers the observed-data likelihood, fits with 20% of coordinates missing stay within 2% of the
complete-data fit (better than dropping incomplete rows), backends agree, and the imputed values are
the posterior-weighted conditional means."""

from __future__ import annotations

import itertools
import math
import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataValueError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.stats import (
    DiagonalGaussianDistribution,
    DiagonalGaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    MultivariateGaussianDistribution,
    MultivariateGaussianEstimator,
)


def clusters(seed: int = 7, d: int = 10, k: int = 4, per: int = 1000) -> np.ndarray:
    """``k`` correlated Gaussian clusters in ``d`` dimensions, rows shuffled."""
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=4.0, size=(k, d))
    parts = []
    for m in means:
        a = rng.normal(size=(d, d)) * 0.4
        parts.append(rng.multivariate_normal(m, a @ a.T + 0.5 * np.eye(d), per))
    return rng.permutation(np.concatenate(parts))


def holes(x: np.ndarray, fraction: float, seed: int = 1) -> np.ndarray:
    """``x`` with each coordinate missing (NaN) at random with probability ``fraction``."""
    out = x.copy()
    out[np.random.default_rng(seed).random(x.shape) < fraction] = np.nan
    return out


def _observed_logpdf(row: np.ndarray, mu: np.ndarray, cov: np.ndarray) -> float:
    obs = ~np.isnan(row)
    if not obs.any():
        return 0.0
    c = cov[np.ix_(obs, obs)]
    r = row[obs] - mu[obs]
    return float(
        -0.5 * (obs.sum() * math.log(2 * math.pi) + np.linalg.slogdet(c)[1] + r @ np.linalg.solve(c, r))
    )


MU = np.array([0.5, -1.0, 3.0, 0.0])
COV = np.array([[2.0, 0.6, -0.3, 0.1], [0.6, 1.0, 0.2, 0.0], [-0.3, 0.2, 0.5, 0.1], [0.1, 0.0, 0.1, 1.5]])
ROWS = np.array(
    [
        [1.0, 0.0, 2.5, 1.0],
        [np.nan, 0.0, 2.5, 1.0],
        [1.0, np.nan, np.nan, -1.0],
        [np.nan, np.nan, np.nan, np.nan],
        [0.3, np.nan, 2.0, np.nan],
        [np.nan, 0.5, 2.5, 1.0],
    ]
)


@pytest.mark.parametrize("diagonal", [False, True], ids=["full", "diagonal"])
def test_densities_marginalize_missing_coordinates(diagonal: bool) -> None:
    cov = np.diag(np.diag(COV)) if diagonal else COV
    dist: Any = (
        DiagonalGaussianDistribution(MU, np.diag(COV))
        if diagonal
        else MultivariateGaussianDistribution(MU, COV)
    )
    want = [_observed_logpdf(r, MU, cov) for r in ROWS]
    got = dist.seq_log_density(dist.encoder().encode(list(ROWS)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose([dist.log_density(r) for r in ROWS], want, rtol=1e-12, atol=1e-14)
    assert dist.log_density([1.0, math.inf, 0.0, 0.0]) == -math.inf


def _reference_statistics(x: np.ndarray, w: np.ndarray, mu: np.ndarray, cov: np.ndarray) -> tuple[Any, ...]:
    """Σ w, Σ w E[x], Σ w E[x x^T] row by row (Ghahramani & Jordan 1994's expectations)."""
    d = len(mu)
    s1, s2 = np.zeros(d), np.zeros((d, d))
    for row, wt in zip(x, w, strict=True):
        m, o = np.isnan(row), ~np.isnan(row)
        ex, cond = row.copy(), np.zeros((d, d))
        if m.any():
            if o.any():
                gain = cov[np.ix_(m, o)] @ np.linalg.inv(cov[np.ix_(o, o)])
                ex[m] = mu[m] + gain @ (row[o] - mu[o])
                cond[np.ix_(m, m)] = cov[np.ix_(m, m)] - gain @ cov[np.ix_(o, m)]
            else:
                ex[m] = mu[m]
                cond[np.ix_(m, m)] = cov[np.ix_(m, m)]
        s1 += wt * ex
        s2 += wt * (np.outer(ex, ex) + cond)
    return float(w.sum()), s1, s2


def test_one_em_step_takes_the_conditional_expectations() -> None:
    # a mixture's M-step from statistics with missing coordinates: each component's mean and
    # covariance are its responsibilities' expected moments, computed here row by row
    x = holes(clusters(seed=3, d=4, k=2, per=60), 0.3)
    start = MixtureDistribution(
        [MultivariateGaussianDistribution(MU, COV), MultivariateGaussianDistribution(MU + 3.0, 0.5 * COV)],
        [0.4, 0.6],
    )
    est = MixtureEstimator([MultivariateGaussianEstimator(min_covar=1e-300, ridge=0.0)] * 2)
    got = optimize(x, est, max_its=1, delta=None, prev_estimate=start)
    post = start.seq_posterior(start.encoder().encode(list(x)))
    for j, comp in enumerate(start.components):
        n, s1, s2 = _reference_statistics(x, post[:, j], comp.mu, comp.covar)
        mean = s1 / n
        np.testing.assert_allclose(got.components[j].mu, mean, rtol=1e-10)
        np.testing.assert_allclose(
            got.components[j].covar, s2 / n - np.outer(mean, mean), rtol=1e-9, atol=1e-12
        )
    np.testing.assert_allclose(got.w, post.sum(axis=0) / len(x), rtol=1e-12)


@pytest.mark.parametrize(
    "component",
    [MultivariateGaussianEstimator(), DiagonalGaussianEstimator()],
    ids=["full", "diagonal"],
)
@pytest.mark.parametrize("covariance", [None, "tied", "spherical"])
def test_em_with_missing_coordinates_never_lowers_the_observed_likelihood(
    component: Any, covariance: Any
) -> None:
    if covariance == "tied" and isinstance(component, DiagonalGaussianEstimator):
        covariance = "tied_diag"
    x = holes(clusters(seed=5, d=5, k=3, per=200), 0.25)
    est = MixtureEstimator([component] * 3, covariance=covariance)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = optimize(x, est, max_its=25, delta=None, seed=2)
    history = [h.log_likelihood for h in model.fit_result.history]
    assert all(b >= a - 1e-8 * abs(a) for a, b in itertools.pairwise(history)), history
    # the last history entry is the likelihood of the observed coordinates under the model before it
    enc = model.encoder().encode(list(x))
    assert np.isfinite(model.seq_log_density(enc)).all()


@pytest.mark.parametrize(
    "component", [MultivariateGaussianEstimator(), DiagonalGaussianEstimator()], ids=["full", "diagonal"]
)
def test_twenty_percent_missing_stays_within_two_percent_of_the_complete_fit(component: Any) -> None:
    # d = 10, k = 4, 20% of coordinates missing at random: ~11% of rows complete
    x = clusters()
    holed = holes(x, 0.2)
    complete = holed[~np.isnan(holed).any(axis=1)]
    est = MixtureEstimator([component] * 4)
    full = optimize(x, est, max_its=200, seed=1)
    missing = optimize(holed, est, max_its=200, seed=1)
    dropped = optimize(complete, est, max_its=200, seed=1)
    reference = np.array([c.mu for c in full.components])

    def error(model: Any) -> float:
        paired = [
            min(model.components, key=lambda c, f=f: np.linalg.norm(c.mu - f.mu)) for f in full.components
        ]
        return float(np.abs(np.array([c.mu for c in paired]) - reference).max() / np.abs(reference).max())

    assert error(missing) < 0.02, error(missing)
    assert error(missing) < error(dropped) / 3, (error(missing), error(dropped))
    assert len(complete) < 0.15 * len(x)


def test_a_single_gaussian_learns_from_rows_with_holes() -> None:
    rng = np.random.default_rng(11)
    x = rng.multivariate_normal(MU, COV, 4000)
    holed = holes(x, 0.3, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = optimize(holed, MultivariateGaussianEstimator(), max_its=100, delta=1e-10, seed=1)
    np.testing.assert_allclose(model.mu, x.mean(axis=0), atol=0.05)
    np.testing.assert_allclose(model.covar, np.cov(x.T), atol=0.1)


def test_imputed_values_are_posterior_weighted_conditional_means() -> None:
    comps = [MultivariateGaussianDistribution(MU, COV), MultivariateGaussianDistribution(MU + 4.0, COV)]
    model = MixtureDistribution(comps, [0.3, 0.7])
    enc = model.encoder().encode(list(ROWS))
    got = model.seq_impute(enc)
    post = model.seq_posterior(enc)
    for i, row in enumerate(ROWS):
        m = np.isnan(row)
        want = row.copy()
        want[m] = 0.0
        for j, c in enumerate(comps):
            o = ~m
            cond = (
                c.mu[m] + c.covar[np.ix_(m, o)] @ np.linalg.solve(c.covar[np.ix_(o, o)], row[o] - c.mu[o])
                if o.any()
                else c.mu[m]
            )
            want[m] += post[i, j] * cond
        np.testing.assert_allclose(got[i], want, rtol=1e-12)
    assert np.array_equal(got[~np.isnan(ROWS)], ROWS[~np.isnan(ROWS)])  # observed coordinates kept


def test_backends_agree_with_missing_coordinates() -> None:
    x = holes(clusters(seed=9, d=4, k=3, per=150), 0.2)
    table = pa.table({"x": pa.array([list(r) for r in x], pa.list_(pa.float64()))})
    est = MixtureEstimator([MultivariateGaussianEstimator()] * 3)
    want = optimize(table, est, max_its=8, delta=None, seed=4, backend="local")
    for backend, extra in (("mp", {"num_workers": 2}), ("local", {"num_chunks": 5})):
        got = optimize(table, est, max_its=8, delta=None, seed=4, backend=backend, **extra)
        for a, b in zip(got.components, want.components, strict=True):
            np.testing.assert_allclose(a.mu, b.mu, rtol=1e-9)
            np.testing.assert_allclose(a.covar, b.covar, rtol=1e-9)


def test_nulls_inside_vectors_are_missing_and_infinities_are_refused() -> None:
    est = MixtureEstimator([MultivariateGaussianEstimator()] * 2)
    rows = [[1.0, None, 3.0], [2.0, 1.0, None], [0.5, 0.5, 0.5], [4.0, 4.0, 4.0], [4.5, 3.5, None]] * 10
    as_nan = [[math.nan if v is None else v for v in r] for r in rows]
    a = optimize(rows, est, max_its=3, delta=None, seed=1)
    b = optimize(as_nan, est, max_its=3, delta=None, seed=1)
    np.testing.assert_array_equal(a.w, b.w)
    with pytest.raises(
        DataValueError,
        match=r"finite numbers for MultivariateGaussianEstimator, got inf \(row 2 of 2\)",
    ):
        optimize([[1.0, 2.0], [math.inf, 1.0]], est, max_its=1)
    with pytest.raises(
        SpecError, match=r"imputed_col='x_imputed': imputing missing coordinates needs a vector"
    ):
        from mixle_spark.parallel.backends._scoring import BatchScorer
        from mixle_spark.stats import GaussianDistribution

        BatchScorer(GaussianDistribution(0.0, 1.0), imputed_col="x_imputed")


def breadth_case(seed: int = 6) -> tuple[pa.Table, MixtureEstimator]:
    """Missing coordinates, a tied covariance form and partial labels in one fit: what the engine
    backends' tests (dask, ray, mpi) compare with the local fit."""
    rng = np.random.default_rng(seed)
    cov = np.array([[1.0, 0.5, 0.0], [0.5, 2.0, -0.3], [0.0, -0.3, 0.7]])
    x = np.concatenate([rng.multivariate_normal(m, cov, 300) for m in ([0, 0, 0], [3, -2, 1], [-3, 2, 0])])
    x[rng.random(x.shape) < 0.2] = np.nan
    labels = [int(j) if rng.random() < 0.1 else None for j in np.repeat(np.arange(3), 300)]
    table = pa.table(
        {"x": pa.array([list(r) for r in x], pa.list_(pa.float64())), "y": pa.array(labels, pa.int64())}
    )
    est = MixtureEstimator(
        [MultivariateGaussianEstimator()] * 3, covariance="tied", label_column="y", data_column="x"
    )
    return table, est
