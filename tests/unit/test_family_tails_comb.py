"""Cdfs, survival functions, quantiles and moments of poisson, gamma, negative_binomial and beta (issue 54),
and the incomplete gamma / beta functions behind them, against scipy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sp
import scipy.stats as st

from mixle_spark.stats import (
    BetaDistribution,
    GammaDistribution,
    NegativeBinomialDistribution,
    PoissonDistribution,
)
from mixle_spark.stats._incomplete import log_beta_i, log_gamma_pq

FAMILIES = {
    "poisson-small": (PoissonDistribution(0.4), st.poisson(0.4)),
    "poisson": (PoissonDistribution(3.5), st.poisson(3.5)),
    "poisson-large": (PoissonDistribution(320.0), st.poisson(320.0)),
    "negative_binomial": (NegativeBinomialDistribution(3.0, 0.4), st.nbinom(3.0, 0.4)),
    "negative_binomial-heavy": (NegativeBinomialDistribution(0.5, 0.05), st.nbinom(0.5, 0.05)),
    "gamma-small": (GammaDistribution(0.3, 2.0), st.gamma(0.3, scale=2.0)),
    "gamma": (GammaDistribution(2.5, 1.5), st.gamma(2.5, scale=1.5)),
    "gamma-large": (GammaDistribution(60.0, 0.1), st.gamma(60.0, scale=0.1)),
    "beta-u": (BetaDistribution(0.5, 0.7), st.beta(0.5, 0.7)),
    "beta": (BetaDistribution(2.0, 5.0), st.beta(2.0, 5.0)),
    "beta-peaked": (BetaDistribution(30.0, 4.0), st.beta(30.0, 4.0)),
}
NAMES = sorted(FAMILIES)


def _points(frozen: object, count: bool) -> np.ndarray:
    p = np.concatenate([[1e-14, 1e-8], np.linspace(0.001, 0.999, 99), [1 - 1e-8]])
    x = np.unique(frozen.ppf(p))  # type: ignore[attr-defined]
    x = np.concatenate([x, frozen.isf([1e-30, 1e-100])])  # type: ignore[attr-defined]
    return np.unique(x[np.isfinite(x) & (x > 0)]) if not count else np.unique(x[np.isfinite(x)])


@pytest.mark.parametrize("name", NAMES)
def test_tails_match_scipy(name: str) -> None:
    model, frozen = FAMILIES[name]
    count = model.record_type is int
    x = _points(frozen, count)
    lc, ls = frozen.logcdf(x), frozen.logsf(x)
    got_c, got_s = model.log_cdf(x), model.log_survival(x)
    # relative on the log where it is away from 0, absolute (= relative on the probability) near 0
    np.testing.assert_allclose(got_c, lc, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got_s, ls, rtol=1e-12, atol=1e-13)
    mean, variance = model.moments()
    assert (mean, variance) == pytest.approx((frozen.mean(), frozen.var()), rel=1e-12)
    if count:
        assert (
            model.log_cdf(np.array([-1.0]))[0] == -np.inf and model.log_survival(np.array([-0.5]))[0] == 0.0
        )


@pytest.mark.parametrize("name", NAMES)
def test_quantiles_match_scipy(name: str) -> None:
    model, frozen = FAMILIES[name]
    p = np.concatenate([[1e-12], np.linspace(0.001, 0.999, 199), [1 - 1e-12]])
    got = model.quantile(p)
    if model.record_type is int:
        np.testing.assert_array_equal(got, frozen.ppf(p))
    else:
        np.testing.assert_allclose(got, frozen.ppf(p), rtol=1e-12)
    top = 1.0 if name.startswith("beta") else np.inf
    assert model.quantile(np.array([0.0]))[0] == 0.0 and model.quantile(np.array([1.0]))[0] == top


def test_incomplete_gamma_and_beta_match_scipy_special() -> None:
    rng = np.random.default_rng(54_401)
    a = np.exp(rng.uniform(np.log(0.05), np.log(200.0), 5000))
    x = a * np.exp(rng.normal(0.0, 0.8, 5000))
    log_p, log_q = log_gamma_pq(a, x)
    np.testing.assert_allclose(np.exp(log_p), sp.gammainc(a, x), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(np.exp(log_q), sp.gammaincc(a, x), rtol=1e-12, atol=1e-300)
    b = np.exp(rng.uniform(np.log(0.05), np.log(200.0), 5000))
    y = rng.uniform(0.0, 1.0, 5000)
    lower, upper = log_beta_i(a, b, y)
    np.testing.assert_allclose(np.exp(lower), sp.betainc(a, b, y), rtol=1e-11, atol=1e-300)
    np.testing.assert_allclose(np.exp(upper), sp.betainc(b, a, 1.0 - y), rtol=1e-11, atol=1e-300)
