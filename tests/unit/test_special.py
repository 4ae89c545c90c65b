"""Special functions against math.lgamma, high-precision reference values and identities."""

import decimal
import math

import numpy as np
import pytest

from mixle_spark.stats._special import (
    digamma,
    digamma_difference,
    digamma_difference_excess,
    gammaln,
    i1_over_i0,
    log1p_minus_identity,
    log_factorial,
    log_i0,
    log_i0e,
    log_minus_digamma,
    log_rising_factorial,
    one_minus_i1_over_i0,
    trigamma,
    trigamma_difference_excess,
)

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


# -- log Gamma / digamma differences, log1p(d) - d, Bessel I0 and I1 / I0 ------------------------

D50 = decimal.Context(prec=50)


def _dec(x: float) -> decimal.Decimal:
    return decimal.Decimal(x)  # exact: every float is a finite decimal


def _decimal_digamma_difference(r: float, x: int) -> decimal.Decimal:
    return D50.add(
        decimal.Decimal(0), sum((D50.divide(1, _dec(r) + i) for i in range(x)), decimal.Decimal(0))
    )


def _decimal_excess(r: float, x: int) -> float:
    """digamma(r + x) - digamma(r) - log(1 + x / r) for integer x, to 50 digits."""
    with decimal.localcontext(D50):
        ratio = (_dec(r) + x) / _dec(r)
        return float(_decimal_digamma_difference(r, x) - ratio.ln())


def _decimal_trigamma_excess(r: float, x: int) -> float:
    with decimal.localcontext(D50):
        rr = _dec(r)
        tri = -sum((1 / (rr + i) ** 2 for i in range(x)), decimal.Decimal(0))
        return float(tri + x / (rr * (rr + x)))


RATIO_POINTS = [
    (r, x) for r in (0.03, 1.0, 9.99, 10.0, 10.01, 55.5, 1e3, 1e6, 1e10) for x in (0, 1, 2, 7, 40)
]


@pytest.mark.parametrize(("r", "x"), RATIO_POINTS)
def test_log_rising_factorial_against_sums_of_logs(r, x):
    expected = math.fsum(math.log(r + i) for i in range(x))
    got = log_rising_factorial(r, float(x))
    assert got == pytest.approx(expected, rel=1e-13, abs=1e-300)


@pytest.mark.parametrize(("r", "x"), RATIO_POINTS)
def test_digamma_difference_and_excess_against_50_digit_sums(r, x):
    assert digamma_difference(r, float(x)) == pytest.approx(
        float(_decimal_digamma_difference(r, x)), rel=1e-13
    )
    # The excess is ~x / (2 r^2): relative accuracy where the plain difference would keep none.
    assert digamma_difference_excess(r, float(x)) == pytest.approx(
        _decimal_excess(r, x), rel=1e-10, abs=1e-40
    )
    assert trigamma_difference_excess(r, float(x)) == pytest.approx(
        _decimal_trigamma_excess(r, x), rel=1e-10, abs=1e-40
    )


def test_ratio_functions_match_math_lgamma_for_moderate_arguments_and_broadcast():
    r = np.array([0.5, 3.0, 12.0, 150.0])
    x = np.array([0.5, 2.25, 30.0, 1e4])
    expected = np.array([math.lgamma(a + b) - math.lgamma(a) for a, b in zip(r, x, strict=True)])
    assert np.allclose(log_rising_factorial(r, x), expected, rtol=1e-12)
    assert log_rising_factorial(np.ones((2, 3)), 2.0).shape == (2, 3)
    assert isinstance(log_rising_factorial(2.0, 1.0), float)
    # Gamma(h + 1/2) / Gamma(h) = sqrt(h) (1 - 1/(8h) + ...): the Student-t normaliser for a large dof.
    for h in (1e3, 1e6, 1e12):
        assert log_rising_factorial(h, 0.5) == pytest.approx(
            0.5 * math.log(h) - 1 / (8 * h) + 1 / (192 * h**3)
        )
    assert np.isnan(log_rising_factorial(np.array([-1.0, 1.0]), np.array([1.0, -1.0]))).all()
    assert np.isnan(digamma_difference(0.0, 1.0))


def test_digamma_difference_excess_derivative_is_trigamma_difference_excess():
    for r in (2.0, 9.5, 10.5, 300.0, 1e5):
        for x in (1.0, 13.0, 500.0):
            h = r * 1e-6
            numeric = (digamma_difference_excess(r + h, x) - digamma_difference_excess(r - h, x)) / (2 * h)
            assert trigamma_difference_excess(r, x) == pytest.approx(numeric, rel=1e-5)


@pytest.mark.parametrize("d", [-0.999, -0.6, -0.5, -1e-3, -1e-9, 1e-12, 1e-5, 0.3, 0.5, 0.51, 4.0, 1e6])
def test_log1p_minus_identity_against_50_digits(d):
    with decimal.localcontext(D50):
        expected = float((1 + _dec(d)).ln() - _dec(d))
    assert log1p_minus_identity(d) == pytest.approx(expected, rel=1e-14)


def test_log1p_minus_identity_edges():
    assert log1p_minus_identity(0.0) == 0.0
    assert log1p_minus_identity(-1.0) == -math.inf
    assert math.isnan(log1p_minus_identity(-1.5))
    assert log1p_minus_identity(np.zeros((2, 2))).shape == (2, 2)


def _decimal_bessel(x: float) -> tuple[decimal.Decimal, decimal.Decimal]:
    """I0(x) and I1(x) by their power series in 60-digit decimal arithmetic."""
    with decimal.localcontext(decimal.Context(prec=60)):
        q = (_dec(x) / 2) ** 2
        t0 = decimal.Decimal(1)
        t1 = _dec(x) / 2
        s0, s1 = t0, t1
        k = 0
        while True:
            k += 1
            t0 = t0 * q / (k * k)
            t1 = t1 * q / (k * (k + 1))
            s0 += t0
            s1 += t1
            if k > x and t0 < s0 * decimal.Decimal("1e-40"):
                return s0, s1


def test_bessel_known_values():
    assert log_i0(1.0) == pytest.approx(math.log(1.2660658777520082), rel=1e-15)
    assert i1_over_i0(1.0) == pytest.approx(0.5651591039924851 / 1.2660658777520082, rel=1e-15)
    assert log_i0(0.0) == 0.0
    assert i1_over_i0(0.0) == 0.0
    assert one_minus_i1_over_i0(0.0) == 1.0


@pytest.mark.parametrize("x", [1e-8, 0.5, 3.0, 10.0, 24.99, 25.0, 25.01, 60.0, 300.0, 700.0])
def test_bessel_functions_against_60_digit_series(x):
    i0, i1 = _decimal_bessel(x)
    with decimal.localcontext(decimal.Context(prec=60)):
        log_i0_ref = float(i0.ln())
        ratio = i1 / i0
        gap = float(1 - ratio)
    assert log_i0(x) == pytest.approx(log_i0_ref, rel=1e-14)
    assert log_i0e(x) == pytest.approx(log_i0_ref - x, rel=1e-13, abs=1e-15)
    assert i1_over_i0(x) == pytest.approx(float(ratio), rel=1e-14)
    assert one_minus_i1_over_i0(x) == pytest.approx(gap, rel=1e-12)


def test_bessel_asymptotics_symmetry_and_shapes():
    # For large x: 1 - I1/I0 = 1/(2x) + 1/(8x^2) + 1/(8x^3) + ...
    # and log I0e = -log(2 pi x)/2 + 1/(8x) + 1/(16x^2) + ...
    for x in (1e4, 1e8, 1e12):
        assert one_minus_i1_over_i0(x) == pytest.approx(
            1 / (2 * x) + 1 / (8 * x**2) + 1 / (8 * x**3), rel=1e-12
        )
        assert log_i0e(x) == pytest.approx(
            -0.5 * math.log(2 * math.pi * x) + 1 / (8 * x) + 1 / (16 * x**2), rel=1e-14
        )
    x = np.array([-3.0, -0.2, 0.2, 3.0, 40.0, -40.0])
    assert np.array_equal(log_i0(x), log_i0(-x))
    assert np.array_equal(i1_over_i0(x), -i1_over_i0(-x))
    assert log_i0(np.ones((3, 2))).shape == (3, 2)
    assert isinstance(i1_over_i0(2.0), float)
    assert log_i0e(math.inf) == -math.inf and i1_over_i0(math.inf) == 1.0
