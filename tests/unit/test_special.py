"""Special functions against math.lgamma, high-precision reference values and identities."""

import math

import numpy as np
import pytest

from mixle_spark.stats._special import digamma, gammaln, log_factorial, log_minus_digamma, trigamma

EULER = 0.5772156649015329

# log Gamma near its roots, computed to 60 digits (Stirling series after 40 recurrence steps, in
# decimal arithmetic); math.lgamma is only accurate in absolute terms there.
LGAMMA_NEAR_ROOTS = [
    (1.9993366666666668, -0.0002803050335418957),
    (1.0000001, -5.772155829918507e-08),
    (2.0000001, 4.227843666532498e-08),
    (0.9, 0.06637623973474295),
    (1.1, -0.049872441259839764),
    (1.46, -0.12148500100400743),
]


def test_gammaln_matches_math_lgamma_over_a_wide_range():
    x = np.concatenate([np.logspace(-300, 300, 2001), np.linspace(0.01, 30.0, 6000)])
    ref = np.array([math.lgamma(v) for v in x])
    got = gammaln(x)
    assert np.allclose(got, ref, rtol=1e-12, atol=1e-13)
    far = np.abs(ref) > 0.5  # away from the roots at 1 and 2 math.lgamma is accurate in relative terms
    assert np.max(np.abs(got[far] - ref[far]) / np.abs(ref[far])) < 1e-13


@pytest.mark.parametrize(("x", "expected"), LGAMMA_NEAR_ROOTS)
def test_gammaln_relative_accuracy_near_its_roots(x, expected):
    assert gammaln(x) == pytest.approx(expected, rel=1e-13)


def test_gammaln_exact_values_scalar_and_shape():
    assert gammaln(1.0) == 0.0
    assert gammaln(2.0) == 0.0
    assert isinstance(gammaln(3.0), float)
    assert gammaln(3.0) == pytest.approx(math.log(2.0), rel=1e-15)
    assert gammaln(0.5) == pytest.approx(0.5 * math.log(math.pi), rel=1e-14)
    assert gammaln(np.ones((2, 3))).shape == (2, 3)
    assert gammaln(1e20) == pytest.approx(math.lgamma(1e20), rel=1e-14)
    assert gammaln(0.0) == math.inf
    assert math.isnan(gammaln(-0.5))


def test_log_factorial_table_and_large_values():
    k = np.array([0, 1, 2, 10, 170, 1023, 1024, 5000, 10**7])
    ref = np.array([math.lgamma(v + 1.0) for v in k])
    assert np.allclose(log_factorial(k), ref, rtol=1e-14, atol=0)
    assert log_factorial(5) == pytest.approx(math.log(120.0), rel=1e-15)
    assert log_factorial(np.array([3.0, 4.0])) == pytest.approx([math.log(6), math.log(24)], rel=1e-15)
    assert np.isnan(log_factorial(np.array([-1.0, 2.5]))).all()


def test_digamma_known_values():
    assert digamma(1.0) == pytest.approx(-EULER, abs=1e-15)
    assert digamma(0.5) == pytest.approx(-EULER - 2.0 * math.log(2.0), rel=1e-14)
    assert digamma(2.0) == pytest.approx(1.0 - EULER, rel=1e-14)
    # psi(x + 1) = psi(x) + 1/x, across the recurrence threshold
    x = np.linspace(0.01, 40.0, 4001)
    assert np.allclose(digamma(x + 1.0), digamma(x) + 1.0 / x, rtol=1e-13, atol=1e-13)


def test_digamma_is_the_derivative_of_gammaln():
    x = np.linspace(0.2, 60.0, 300)
    h = 1e-6
    numeric = (gammaln(x + h) - gammaln(x - h)) / (2 * h)
    assert np.allclose(digamma(x), numeric, rtol=1e-7, atol=1e-7)


def test_trigamma_known_values():
    assert trigamma(1.0) == pytest.approx(math.pi**2 / 6, rel=1e-14)
    assert trigamma(0.5) == pytest.approx(math.pi**2 / 2, rel=1e-14)
    x = np.linspace(0.01, 40.0, 4001)
    assert np.allclose(trigamma(x), trigamma(x + 1.0) + 1.0 / x**2, rtol=1e-13)
    h = 1e-5
    y = np.linspace(0.5, 50.0, 200)
    assert np.allclose(trigamma(y), (digamma(y + h) - digamma(y - h)) / (2 * h), rtol=1e-6)


def test_log_minus_digamma_is_continuous_and_accurate():
    x = np.array([0.1, 1.0, 9.999999, 10.0, 10.000001, 100.0])
    direct = np.log(x) - digamma(x)
    assert np.allclose(log_minus_digamma(x), direct, rtol=1e-12)
    # For large x the difference is 1/(2x) + 1/(12x^2) + ..., which the direct form loses.
    assert log_minus_digamma(1e8) == pytest.approx(0.5e-8 + 1.0 / 12e16, rel=1e-14)
    assert isinstance(log_minus_digamma(3.0), float)


def test_nonpositive_inputs_give_nan_not_exceptions():
    assert math.isnan(digamma(0.0))
    assert math.isnan(trigamma(-1.0))
    assert np.isnan(digamma(np.array([-1.0, np.nan]))).all()
