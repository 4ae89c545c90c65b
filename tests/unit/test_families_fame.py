"""The normal cdf in numpy (issue 54: ``stats/_normal_cdf.py``) against scipy.special (mpmath where scipy
loses digits), the Gaussian and log-normal tails (moments, log cdf, log survival, quantile) against
scipy.stats."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
import scipy.special as sp
import scipy.stats as st

from mixle_spark.stats import GaussianDistribution, LogGaussianDistribution
from mixle_spark.stats._normal_cdf import (
    erf_small,
    erfcx,
    exp_half_square,
    log_ndtr,
    mills_ratio,
    ndtr,
    ndtri,
)
from mixle_spark.stats._scalar_common import describes


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want) / np.abs(want)))


def test_erfcx_matches_scipy_over_the_whole_range() -> None:
    rng = np.random.default_rng(54_301)
    x = np.concatenate(
        [np.linspace(0.0, 60.0, 30_001), np.geomspace(1e-12, 1e300, 3001), rng.uniform(0, 55, 20_000)]
    )
    assert _rel(erfcx(x), sp.erfcx(x)) < 1e-14
    # below 0, 2 exp(x^2) - erfcx(-x): scipy rounds x^2 (5e-14 off at x = -26), mpmath for the reference
    mp.mp.dps = 40
    neg = -np.linspace(0.0, 26.0, 521)
    exact = np.array([float(mp.exp(mp.mpf(v) ** 2) * mp.erfc(mp.mpf(v))) for v in neg])
    assert _rel(erfcx(neg), exact) < 1e-14
    assert erfcx(-30.0) == math.inf and erfcx(math.inf) == 0.0 and math.isnan(erfcx(math.nan))
    assert isinstance(erfcx(1.0), float) and erfcx(np.array([1.0])).shape == (1,)


def test_erf_small_and_the_exact_half_square() -> None:
    x = np.concatenate([np.linspace(-1.0, 1.0, 4001), np.geomspace(1e-300, 1.0, 500)])
    x = x[x != 0.0]
    assert _rel(erf_small(x), sp.erf(x)) < 1e-15
    z = np.random.default_rng(54_302).uniform(-38.0, 38.0, 400)
    mp.mp.dps = 40
    exact = np.array([float(mp.exp(-(mp.mpf(v) ** 2) / 2)) for v in z])
    assert _rel(exp_half_square(z), exact) < 5e-16
    # np.exp(-z*z/2) rounds z*z first: the split keeps the digits that loses at |z| ~ 30
    assert _rel(np.exp(-0.5 * z**2), exact) > 1e-15


def test_ndtr_and_log_ndtr_match_scipy_and_mpmath() -> None:
    z = np.concatenate(
        [np.linspace(-37.0, 5.0, 8401), -np.geomspace(1e-10, 1e4, 3001), np.geomspace(1e-10, 5, 500)]
    )
    near = z > -6.0  # beyond, scipy's ndtr rounds z^2 (2e-13 off at z = -37): mpmath for the reference
    assert _rel(ndtr(z[near]), sp.ndtr(z[near])) < 1e-14
    mp.mp.dps = 40
    low = np.linspace(-37.5, -6.0, 316)
    assert _rel(ndtr(low), np.array([float(mp.ncdf(mp.mpf(v))) for v in low])) < 1e-14
    assert _rel(log_ndtr(z), sp.log_ndtr(z)) < 1e-14
    # in the upper tail ln Phi(z) = log1p(-Phi(-z)) ~ -Phi(-z): scipy loses digits there (1.2e-14 at
    # z ~ 7), mpmath for the reference
    mp.mp.dps = 60
    far = np.linspace(5.0, 37.0, 321)
    exact = np.array([float(mp.log1p(-mp.ncdf(-mp.mpf(v)))) for v in far])
    assert _rel(log_ndtr(far), exact) < 5e-15
    deep = np.array([-1e5, -1e10, -1e100, -1e150])
    assert _rel(log_ndtr(deep), sp.log_ndtr(deep)) < 1e-14
    assert list(log_ndtr(np.array([-math.inf, math.inf]))) == [-math.inf, 0.0]
    assert list(ndtr(np.array([-math.inf, math.inf]))) == [0.0, 1.0]


def test_mills_ratio_is_phi_over_Phi_without_underflow() -> None:
    mp.mp.dps = 40
    z = np.linspace(-60.0, 37.0, 971)
    exact = np.array([float(mp.npdf(mp.mpf(v)) / mp.ncdf(mp.mpf(v))) for v in z])
    assert _rel(mills_ratio(z), exact) < 1e-14
    deep = -np.geomspace(1e8, 1e300, 30)  # -z (1 + 1 / z^2 - ...), the correction below rounding
    assert _rel(mills_ratio(deep), -deep) < 1e-15
    assert mills_ratio(math.inf) == 0.0 and mills_ratio(-math.inf) == math.inf


def test_ndtri_inverts_ndtr_to_rounding() -> None:
    p = np.concatenate(
        [
            np.geomspace(1e-300, 0.49, 3000),
            np.linspace(0.001, 0.999, 4001),
            1.0 - np.geomspace(1e-16, 0.49, 500),
        ]
    )
    p = p[p != 0.5]
    assert _rel(ndtri(p), sp.ndtri(p)) < 1e-14
    near = 0.5 + np.array([-1e-12, 1e-15, 3e-9])
    assert _rel(ndtri(near), sp.ndtri(near)) < 1e-14
    edges = ndtri(np.array([0.0, 0.5, 1.0, -0.1, 1.1, math.nan]))
    assert list(edges[:3]) == [-math.inf, 0.0, math.inf] and np.isnan(edges[3:]).all()
    assert ndtri(1e-320) == pytest.approx(sp.ndtri(1e-320), rel=1e-14)


@pytest.mark.parametrize("mu, sigma", [(0.0, 1.0), (-3.0, 0.25), (1e4, 30.0)])
def test_gaussian_tails_match_scipy(mu: float, sigma: float) -> None:
    d, ref = GaussianDistribution(mu, sigma * sigma), st.norm(mu, sigma)
    x = mu + sigma * np.concatenate([np.linspace(-37.0, 37.0, 1481), [-1e3, 1e3]])
    np.testing.assert_allclose(d.log_cdf(x), ref.logcdf(x), rtol=1e-12)
    np.testing.assert_allclose(d.log_survival(x), ref.logsf(x), rtol=1e-12)
    p = np.concatenate([np.geomspace(1e-300, 0.4, 500), np.linspace(0.4, 0.999999, 1001)])
    np.testing.assert_allclose(d.quantile(p), ref.ppf(p), rtol=1e-12, atol=1e-12 * sigma)
    assert d.moments() == pytest.approx((ref.mean(), ref.var()), rel=1e-15)
    assert describes(d, "moments", "log_cdf", "log_survival", "quantile")


@pytest.mark.parametrize("mu, sigma", [(0.0, 1.0), (2.0, 0.3), (-5.0, 2.0)])
def test_log_gaussian_tails_match_scipy(mu: float, sigma: float) -> None:
    d, ref = LogGaussianDistribution(mu, sigma * sigma), st.lognorm(sigma, scale=math.exp(mu))
    x = np.exp(mu + sigma * np.linspace(-30.0, 30.0, 1201))
    np.testing.assert_allclose(d.log_cdf(x), ref.logcdf(x), rtol=1e-12)
    np.testing.assert_allclose(d.log_survival(x), ref.logsf(x), rtol=1e-12)
    below = np.array([0.0, -1.0])
    assert list(d.log_cdf(below)) == [-math.inf, -math.inf] and list(d.log_survival(below)) == [0.0, 0.0]
    p = np.concatenate([np.geomspace(1e-200, 0.4, 300), np.linspace(0.4, 0.999999, 601)])
    np.testing.assert_allclose(d.quantile(p), ref.ppf(p), rtol=1e-12)
    mean, var = d.moments()
    assert mean == pytest.approx(ref.mean(), rel=1e-14) and var == pytest.approx(ref.var(), rel=1e-13)
    assert LogGaussianDistribution(0.0, 2000.0).moments() == (math.inf, math.inf)
