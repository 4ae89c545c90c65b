"""The tail interface of scalar families (``moments``, ``log_cdf``, ``log_survival``, ``quantile``) and
the profile / separation paths that describe a family by it rather than by a closed form of their own."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as st

from mixle_spark import profile
from mixle_spark.report import separation as sep
from mixle_spark.stats import ExponentialDistribution, GeometricDistribution, RayleighDistribution
from mixle_spark.stats._scalar_common import describes


def test_exponential_tails_match_scipy() -> None:
    d, ref = ExponentialDistribution(2.5), st.expon(scale=2.5)
    x = np.concatenate([[0.0], np.geomspace(1e-9, 200.0, 301)])
    np.testing.assert_allclose(d.log_cdf(x)[1:], ref.logcdf(x)[1:], rtol=1e-12)
    assert d.log_cdf(np.array([0.0]))[0] == -math.inf
    np.testing.assert_allclose(d.log_survival(x), ref.logsf(x), rtol=1e-12, atol=1e-300)
    p = np.linspace(0.0, 0.999, 1000)
    np.testing.assert_allclose(d.quantile(p), ref.ppf(p), rtol=1e-12)
    assert d.moments() == (2.5, 6.25)


def test_geometric_tails_match_scipy() -> None:
    d, ref = GeometricDistribution(0.3), st.geom(0.3)
    x = np.arange(0.0, 120.0)
    np.testing.assert_allclose(d.log_survival(x), ref.logsf(x), rtol=1e-12)
    # scipy's logcdf loses digits in the far upper tail (1 - q^k rounded before its log): closer here
    np.testing.assert_allclose(d.log_cdf(x)[1:], ref.logcdf(x)[1:], rtol=1e-12, atol=1e-15)
    exact = np.log1p(-np.exp(x[1:] * math.log1p(-0.3)))  # 1 - q^k as its log1p
    np.testing.assert_allclose(d.log_cdf(x)[1:], exact, rtol=1e-13)
    np.testing.assert_allclose(np.exp(d.log_cdf(x)) + np.exp(d.log_survival(x)), 1.0, rtol=1e-15)
    p = np.linspace(0.001, 0.999, 997)
    q = d.quantile(p)
    # the least k with P(X <= k) >= p: checked by the cdf itself, not by scipy's rounding
    assert np.all(ref.cdf(q) >= p - 1e-12) and np.all(ref.cdf(q - 1) < p)
    mean, var = d.moments()
    assert mean == pytest.approx(ref.mean(), rel=1e-14) and var == pytest.approx(ref.var(), rel=1e-14)


def test_describes_tells_what_a_family_gives() -> None:
    assert describes(ExponentialDistribution(1.0), "moments", "log_cdf", "log_survival", "quantile")
    assert describes(GeometricDistribution, "quantile")
    assert not describes(RayleighDistribution(1.0), "quantile")
    assert not describes("gaussian", "moments")
    with pytest.raises(ValueError, match="unknown name"):
        describes(ExponentialDistribution(1.0), "median")
    with pytest.raises(NotImplementedError, match="rayleigh has no quantile"):
        RayleighDistribution(1.0).quantile(np.array([0.5]))


def test_profile_of_a_self_described_family_equals_its_closed_form() -> None:
    spec = {"type": "exponential", "beta": 3.0}
    generic, written = profile._described(spec), profile.field_cell(spec)
    assert generic is not None
    assert generic.keys() == written.keys()
    for key in ("mean", "sd", "q1", "median", "q3"):
        assert generic[key] == pytest.approx(written[key], rel=1e-12)
    assert profile._described({"type": "categorical", "pmap": [["a", 1.0]]}) is None
    assert profile.is_number("geometric") and not profile.is_number("categorical")


@pytest.mark.parametrize(
    "specs",
    [
        [{"type": "exponential", "beta": 1.0}, {"type": "exponential", "beta": 6.0}],
        [{"type": "exponential", "beta": 1.0}, {"type": "exponential", "beta": 1.2}],
        [{"type": "geometric", "p": 0.6}, {"type": "geometric", "p": 0.05}],
    ],
)
def test_separation_of_a_self_described_family_equals_its_closed_form(specs: list[dict]) -> None:
    w = np.array([0.35, 0.65])
    closed, generic = sep.separation(specs, w), sep._described(specs, w)
    assert closed is not None and generic is not None
    assert generic == pytest.approx(closed, rel=2e-4)


def test_separation_refuses_what_it_cannot_integrate() -> None:
    with pytest.raises(KeyError):
        sep._described(
            [{"type": "rayleigh", "sigma": 1.0}, {"type": "rayleigh", "sigma": 2.0}], np.ones(2) / 2
        )
