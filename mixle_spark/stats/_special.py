"""Special functions in plain numpy (the numerical core does not depend on scipy).

* :func:`gammaln` - log Gamma(x) for x > 0: Lanczos (g = 671/128, 14 terms, as in Numerical
  Recipes 3rd ed.) away from the roots of log Gamma, and its Taylor series around x = 1 and x = 2,
  where log Gamma vanishes and only a series keeps the *relative* error near 1e-15.
* :func:`log_factorial` - log k! for non-negative integers: a table for k < 1024, gammaln above.
* :func:`digamma`, :func:`trigamma` - recurrence up to x >= 10, then the asymptotic series.
* :func:`log_minus_digamma` - log x - digamma(x) without cancellation for large x (the gamma shape
  equation).
* :func:`log_rising_factorial`, :func:`digamma_difference` (and its ``_excess`` over log(1 + x / r),
  with :func:`trigamma_difference_excess`, its derivative) - differences of log Gamma / digamma at
  ``r + x`` and ``r``, kept accurate for large ``r`` by differencing the asymptotic series term by
  term (negative binomial, Student-t).
* :func:`log1p_minus_identity` - log(1 + d) - d without cancellation for small d (negative
  binomial, Student-t).
* :func:`log_i0e`, :func:`log_i0`, :func:`i1_over_i0`, :func:`one_minus_i1_over_i0` - the modified
  Bessel function I0 and the ratio I1 / I0 (von Mises): power series below 25, asymptotic expansion
  above.

All accept a scalar (returning a float) or an array (returning an array of the same shape). The
domain is x > 0; other inputs give NaN (or +inf at the poles of log Gamma).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "digamma",
    "digamma_difference",
    "digamma_difference_excess",
    "gammaln",
    "i1_over_i0",
    "log1p_minus_identity",
    "log_factorial",
    "log_i0",
    "log_i0e",
    "log_minus_digamma",
    "log_rising_factorial",
    "one_minus_i1_over_i0",
    "trigamma",
    "trigamma_difference_excess",
]

_LANCZOS = np.array(
    [
        57.1562356658629235,
        -59.5979603554754912,
        14.1360979747417471,
        -0.491913816097620199,
        0.339946499848118887e-4,
        0.465236289270485756e-4,
        -0.983744753048795646e-4,
        0.158088703224912494e-3,
        -0.210264441724104883e-3,
        0.217439618115212643e-3,
        -0.164318106536763890e-3,
        0.844182239838527433e-4,
        -0.261908384015814087e-4,
        0.368991826595316234e-5,
    ]
)
_EULER = 0.57721566490153286061


def _zeta_values(kmax: int) -> np.ndarray:
    """zeta(k) for k = 0..kmax (entries 0 and 1 unused) by Euler-Maclaurin summation."""
    n_terms = 40
    n = np.arange(1, n_terms, dtype=np.float64)
    out = np.zeros(kmax + 1)
    big_n = float(n_terms)
    for k in range(2, kmax + 1):
        head = float(np.sum(n**-k))
        tail = big_n ** (1 - k) / (k - 1) + 0.5 * big_n**-k
        # Bernoulli-number corrections B2/2!, B4/4!, B6/6! times the rising factorials of k.
        tail += k * big_n ** (-k - 1) / 12.0
        tail -= k * (k + 1) * (k + 2) * big_n ** (-k - 3) / 720.0
        tail += k * (k + 1) * (k + 2) * (k + 3) * (k + 4) * big_n ** (-k - 5) / 30240.0
        out[k] = head + tail
    return out


# Taylor coefficients of log Gamma(1 + e) = -gamma e + sum_{k>=2} (-1)^k zeta(k) e^k / k.
_SERIES_ORDER = 40
_ZETA = _zeta_values(_SERIES_ORDER)
_SERIES = np.array([0.0, -_EULER] + [(-1) ** k * _ZETA[k] / k for k in range(2, _SERIES_ORDER + 1)])
_SERIES_RADIUS = 0.2  # |e| < 0.2: 0.2**40 / 40 < 1e-29, far below double rounding.


def _lgamma1p_series(e: np.ndarray) -> np.ndarray:
    """log Gamma(1 + e) for |e| <= 0.2 by Horner's rule on the Taylor series."""
    acc = np.zeros_like(e)
    for c in _SERIES[:0:-1]:
        acc = acc * e + c
    return acc * e


def _lanczos(x: np.ndarray) -> np.ndarray:
    tmp = x + 5.24218750000000000
    tmp = (x + 0.5) * np.log(tmp) - tmp
    ser = np.full_like(x, 0.999999999999997092)
    y = x.copy()
    for c in _LANCZOS:
        y = y + 1.0
        ser = ser + c / y
    return tmp + np.log(2.5066282746310005 * ser / x)


def _as_float_array(x: Any) -> tuple[np.ndarray, bool]:
    arr = np.asarray(x, dtype=np.float64)
    return np.atleast_1d(arr).astype(np.float64, copy=True), arr.ndim == 0


def _out(values: np.ndarray, scalar: bool) -> Any:
    return float(values[0]) if scalar else values


def gammaln(x: Any) -> Any:
    """log Gamma(x) for x > 0 (relative error ~1e-15).

    Examples
    --------
    >>> round(gammaln(5.0), 12) == round(math.log(24.0), 12)
    True
    """
    arr, scalar = _as_float_array(x)
    shape = np.shape(x) if not scalar else ()
    flat = arr.reshape(-1)
    out = np.full(flat.shape, np.nan)
    pos = flat > 0
    out[(flat <= 0) & (flat == np.floor(flat))] = np.inf
    near1 = pos & (np.abs(flat - 1.0) <= _SERIES_RADIUS)
    near2 = pos & (np.abs(flat - 2.0) <= _SERIES_RADIUS)
    huge = pos & (flat > 1e15)  # Stirling: the Lanczos sum is exactly 1 there anyway
    rest = pos & ~near1 & ~near2 & ~huge & np.isfinite(flat)
    out[near1] = _lgamma1p_series(flat[near1] - 1.0)
    e2 = flat[near2] - 2.0
    out[near2] = _lgamma1p_series(e2) + np.log1p(e2)
    xh = flat[huge]
    out[huge] = (xh - 0.5) * np.log(xh) - xh + 0.5 * math.log(2 * math.pi) + 1.0 / (12.0 * xh)
    out[rest] = _lanczos(flat[rest])
    out[pos & np.isposinf(flat)] = np.inf
    return _out(out, True) if scalar else out.reshape(shape)


_FACTORIAL_TABLE_SIZE = 1024
_LOG_FACTORIAL_TABLE = np.concatenate(
    [[0.0], np.cumsum(np.log(np.arange(1, _FACTORIAL_TABLE_SIZE, dtype=np.float64)))]
)


def log_factorial(k: Any) -> Any:
    """log k! for non-negative integers ``k`` (ints, or floats with integral values).

    Table lookup below 1024 (the cumulative sum of logs there is exact to a few ulps), gammaln(k + 1)
    above. Negative or fractional ``k`` gives NaN; callers validate their data first.
    """
    arr, scalar = _as_float_array(k)
    shape = np.shape(k) if not scalar else ()
    flat = arr.reshape(-1)
    out = np.full(flat.shape, np.nan)
    valid = (flat >= 0) & (flat == np.floor(flat))
    small = valid & (flat < _FACTORIAL_TABLE_SIZE)
    out[small] = _LOG_FACTORIAL_TABLE[flat[small].astype(np.int64)]
    large = valid & ~small
    if large.any():
        out[large] = gammaln(flat[large] + 1.0)
    return _out(out, True) if scalar else out.reshape(shape)


_DIGAMMA_ASYMPTOTIC = 10.0  # recurrence up to here: the series error is then below 1e-16


def digamma(x: Any) -> Any:
    """digamma(x) = d/dx log Gamma(x) for x > 0.

    Examples
    --------
    >>> round(digamma(1.0), 12)
    -0.577215664902
    """
    arr, scalar = _as_float_array(x)
    shape = np.shape(x) if not scalar else ()
    flat = arr.reshape(-1)
    bad = ~(flat > 0)
    z = np.where(bad, 1.0, flat)
    acc = np.zeros_like(z)
    low = z < _DIGAMMA_ASYMPTOTIC
    while low.any():
        acc[low] -= 1.0 / z[low]
        z[low] += 1.0
        low = z < _DIGAMMA_ASYMPTOTIC
    inv2 = 1.0 / (z * z)
    series = inv2 * (
        1.0 / 12
        - inv2
        * (
            1.0 / 120
            - inv2
            * (1.0 / 252 - inv2 * (1.0 / 240 - inv2 * (1.0 / 132 - inv2 * (691.0 / 32760 - inv2 / 12.0))))
        )
    )
    out = acc + np.log(z) - 0.5 / z - series
    out[bad] = np.nan
    return _out(out, True) if scalar else out.reshape(shape)


def trigamma(x: Any) -> Any:
    """trigamma(x) = d^2/dx^2 log Gamma(x) for x > 0.

    Examples
    --------
    >>> abs(trigamma(1.0) - math.pi ** 2 / 6) < 1e-14
    True
    """
    arr, scalar = _as_float_array(x)
    shape = np.shape(x) if not scalar else ()
    flat = arr.reshape(-1)
    bad = ~(flat > 0)
    z = np.where(bad, 1.0, flat)
    acc = np.zeros_like(z)
    low = z < _DIGAMMA_ASYMPTOTIC
    while low.any():
        acc[low] += 1.0 / (z[low] * z[low])
        z[low] += 1.0
        low = z < _DIGAMMA_ASYMPTOTIC
    inv = 1.0 / z
    inv2 = inv * inv
    series = inv + inv2 * (
        0.5
        + inv
        * (
            1.0 / 6
            - inv2
            * (
                1.0 / 30
                - inv2
                * (1.0 / 42 - inv2 * (1.0 / 30 - inv2 * (5.0 / 66 - inv2 * (691.0 / 2730 - inv2 * 7.0 / 6))))
            )
        )
    )
    out = acc + series
    out[bad] = np.nan
    return _out(out, True) if scalar else out.reshape(shape)


def log_minus_digamma(x: Any) -> Any:
    """log(x) - digamma(x) for x > 0, accurate to ~1e-15 relative also for large x.

    For x >= 10 it sums the asymptotic series 1/(2x) + 1/(12x^2) - 1/(120x^4) + ... directly, avoiding
    the cancellation between log(x) and digamma(x) (the difference is ~1/(2x)).
    """
    arr, scalar = _as_float_array(x)
    shape = np.shape(x) if not scalar else ()
    flat = arr.reshape(-1)
    out = np.full(flat.shape, np.nan)
    large = flat >= _DIGAMMA_ASYMPTOTIC
    small = (flat > 0) & ~large
    if small.any():
        out[small] = np.log(flat[small]) - digamma(flat[small])
    z = flat[large]
    inv2 = 1.0 / (z * z)
    out[large] = 0.5 / z + inv2 * (
        1.0 / 12
        - inv2
        * (
            1.0 / 120
            - inv2
            * (1.0 / 252 - inv2 * (1.0 / 240 - inv2 * (1.0 / 132 - inv2 * (691.0 / 32760 - inv2 / 12.0))))
        )
    )
    return _out(out, True) if scalar else out.reshape(shape)


# -- log Gamma ratios for large arguments (negative binomial, Student-t) ----------------------

_STIRLING_FROM = 10.0  # Stirling / asymptotic differences from here: the series error is below 1e-16


def _stirling_correction(z: np.ndarray) -> np.ndarray:
    """log Gamma(z) - [(z - 1/2) log z - z + log(2 pi) / 2] for z >= 10 (the Stirling series)."""
    inv = 1.0 / z
    inv2 = inv * inv
    return inv * (
        1.0 / 12
        - inv2
        * (
            1.0 / 360
            - inv2 * (1.0 / 1260 - inv2 * (1.0 / 1680 - inv2 * (1.0 / 1188 - inv2 * 691.0 / 360360)))
        )
    )


def _digamma_tail(z: np.ndarray) -> np.ndarray:
    """log z - 1/(2z) - digamma(z) for z >= 10 (the Bernoulli-number series)."""
    inv2 = 1.0 / (z * z)
    return inv2 * (
        1.0 / 12
        - inv2
        * (
            1.0 / 120
            - inv2
            * (1.0 / 252 - inv2 * (1.0 / 240 - inv2 * (1.0 / 132 - inv2 * (691.0 / 32760 - inv2 / 12.0))))
        )
    )


def _broadcast_pair(r: Any, x: Any) -> tuple[np.ndarray, np.ndarray, bool]:
    scalar = np.ndim(r) == 0 and np.ndim(x) == 0
    rr, xx = np.broadcast_arrays(np.asarray(r, dtype=np.float64), np.asarray(x, dtype=np.float64))
    return np.atleast_1d(rr).astype(np.float64), np.atleast_1d(xx).astype(np.float64), scalar


def log_rising_factorial(r: Any, x: Any) -> Any:
    """log Gamma(r + x) - log Gamma(r) (the log Pochhammer symbol) for r > 0, x >= 0.

    For r >= 10 it is computed from the difference of the Stirling series,
    ``(r - 1/2) log1p(x / r) + x log(r + x) - x + c(r + x) - c(r)``, which keeps its relative
    accuracy (~1e-15) when r is large and x small, where the difference of two log Gamma values
    (each ~r log r) would lose ``log10(r)`` digits; below 10 the plain difference is exact enough.
    ``r`` and ``x`` broadcast against each other.

    Examples
    --------
    >>> round(log_rising_factorial(3.0, 2.0), 12) == round(math.log(12.0), 12)
    True
    """
    rr, xx, scalar = _broadcast_pair(r, x)
    shape = np.broadcast_shapes(np.shape(r), np.shape(x))
    out = np.full(rr.shape, np.nan)
    ok = (rr > 0) & (xx >= 0) & np.isfinite(rr) & np.isfinite(xx)
    large = ok & (rr >= _STIRLING_FROM)
    small = ok & ~large
    if small.any():
        out[small] = gammaln(rr[small] + xx[small]) - gammaln(rr[small])
    if large.any():
        a, b = rr[large], xx[large]
        z = a + b
        out[large] = (
            (a - 0.5) * np.log1p(b / a)
            + b * np.log(z)
            - b
            + (_stirling_correction(z) - _stirling_correction(a))
        )
    return _out(out, True) if scalar else out.reshape(shape)


def digamma_difference(r: Any, x: Any) -> Any:
    """digamma(r + x) - digamma(r) for r > 0, x >= 0 (= sum_{i<x} 1/(r + i) for integer x).

    For r >= 10 the asymptotic series are differenced term by term (``log1p(x / r) + x / (2 r (r + x))
    - [t(r + x) - t(r)]``), which keeps the relative accuracy when r is large and the difference
    ~x / r is far below digamma(r) ~ log r; below 10 the plain difference is used.
    """
    rr, xx, scalar = _broadcast_pair(r, x)
    shape = np.broadcast_shapes(np.shape(r), np.shape(x))
    out = np.full(rr.shape, np.nan)
    ok = (rr > 0) & (xx >= 0) & np.isfinite(rr) & np.isfinite(xx)
    large = ok & (rr >= _STIRLING_FROM)
    small = ok & ~large
    if small.any():
        out[small] = digamma(rr[small] + xx[small]) - digamma(rr[small])
    if large.any():
        a, b = rr[large], xx[large]
        z = a + b
        out[large] = np.log1p(b / a) + 0.5 * b / (a * z) - (_digamma_tail(z) - _digamma_tail(a))
    return _out(out, True) if scalar else out.reshape(shape)


def _trigamma_tail(z: np.ndarray) -> np.ndarray:
    """trigamma(z) - 1/z - 1/(2z^2) for z >= 10 (the Bernoulli-number series)."""
    inv = 1.0 / z
    inv2 = inv * inv
    return (
        inv2
        * inv
        * (
            1.0 / 6
            - inv2
            * (
                1.0 / 30
                - inv2
                * (1.0 / 42 - inv2 * (1.0 / 30 - inv2 * (5.0 / 66 - inv2 * (691.0 / 2730 - inv2 * 7.0 / 6))))
            )
        )
    )


def digamma_difference_excess(r: Any, x: Any) -> Any:
    """digamma(r + x) - digamma(r) - log(1 + x / r) for r > 0, x >= 0, without cancellation.

    The excess is ~x / (2 r^2) for large r, far below either term; for r >= 10 it is summed from
    the asymptotic series directly (``x / (2 r (r + x)) - [t(r + x) - t(r)]``). The negative
    binomial profile score is a sum of these.
    """
    rr, xx, scalar = _broadcast_pair(r, x)
    shape = np.broadcast_shapes(np.shape(r), np.shape(x))
    out = np.full(rr.shape, np.nan)
    ok = (rr > 0) & (xx >= 0) & np.isfinite(rr) & np.isfinite(xx)
    large = ok & (rr >= _STIRLING_FROM)
    small = ok & ~large
    if small.any():
        a, b = rr[small], xx[small]
        out[small] = digamma(a + b) - digamma(a) - np.log1p(b / a)
    if large.any():
        a, b = rr[large], xx[large]
        z = a + b
        out[large] = 0.5 * b / (a * z) - (_digamma_tail(z) - _digamma_tail(a))
    return _out(out, True) if scalar else out.reshape(shape)


def trigamma_difference_excess(r: Any, x: Any) -> Any:
    """trigamma(r + x) - trigamma(r) + x / (r (r + x)), the r-derivative of
    :func:`digamma_difference_excess`, without cancellation for r >= 10."""
    rr, xx, scalar = _broadcast_pair(r, x)
    shape = np.broadcast_shapes(np.shape(r), np.shape(x))
    out = np.full(rr.shape, np.nan)
    ok = (rr > 0) & (xx >= 0) & np.isfinite(rr) & np.isfinite(xx)
    large = ok & (rr >= _STIRLING_FROM)
    small = ok & ~large
    if small.any():
        a, b = rr[small], xx[small]
        out[small] = trigamma(a + b) - trigamma(a) + b / (a * (a + b))
    if large.any():
        a, b = rr[large], xx[large]
        z = a + b
        out[large] = -b * (a + z) / (2.0 * a * a * z * z) + (_trigamma_tail(z) - _trigamma_tail(a))
    return _out(out, True) if scalar else out.reshape(shape)


def log1p_minus_identity(d: Any) -> Any:
    """log(1 + d) - d for d > -1, without the cancellation of the direct form for small |d|.

    With ``y = d / (2 + d)``: ``log(1 + d) = 2 atanh(y)``, so the difference is
    ``-2 y^2 / (1 - y) + 2 y^3 (1/3 + y^2 / 5 + y^4 / 7 + ...)``, summed for ``|d| <= 1/2`` (where
    ``|y| <= 1/3`` and 24 terms leave an error far below rounding); the direct form elsewhere.
    ``d = -1`` gives ``-inf``, ``d < -1`` NaN.

    Examples
    --------
    >>> abs(log1p_minus_identity(1e-10) / (-0.5e-20 + 1e-30 / 3) - 1) < 1e-15  # -d^2/2 + d^3/3 - ...
    True
    """
    arr, scalar = _as_float_array(d)
    shape = np.shape(d) if not scalar else ()
    flat = arr.reshape(-1)
    out = np.full(flat.shape, np.nan)
    small = np.abs(flat) <= 0.5
    rest = (flat >= -1.0) & ~small
    with np.errstate(divide="ignore"):
        out[rest] = np.log1p(flat[rest]) - flat[rest]
    if small.any():
        ds = flat[small]
        y = ds / (2.0 + ds)
        y2 = y * y
        acc = np.zeros_like(y)
        for k in range(24, 0, -1):
            acc = acc * y2 + 1.0 / (2 * k + 1)
        out[small] = -2.0 * y2 / (1.0 - y) + 2.0 * y2 * y * acc
    return _out(out, True) if scalar else out.reshape(shape)


# -- modified Bessel functions of the first kind (von Mises) ----------------------------------

_BESSEL_ASYMPTOTIC = 25.0
"""Power series below this argument, the asymptotic expansion of e^-x I_nu(x) sqrt(2 pi x) above: at
x = 25 the smallest asymptotic term is ~1e-18 and the power series needs ~50 terms."""
_BESSEL_MAX_TERMS = 200
_BESSEL_EPS = 1e-17


def _bessel_series(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Power series of I0(x) and I1(x) / (x / 2) for 0 <= x < 25 (all terms positive)."""
    q = 0.25 * x * x
    t0 = np.ones_like(x)
    t1 = np.ones_like(x)
    s0 = np.ones_like(x)
    s1 = np.ones_like(x)
    for k in range(1, _BESSEL_MAX_TERMS):
        t0 = t0 * q / (k * k)
        t1 = t1 * q / (k * (k + 1))
        s0 += t0
        s1 += t1
        if not np.any(t0 > _BESSEL_EPS * s0):
            break
    return s0, s1


def _bessel_asymptotic(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For x >= 25: ``(S0, D)`` with ``S0 = e^-x I0(x) sqrt(2 pi x)`` and ``D = S0 - S1``, ``S1`` the same
    for I1 (so ``1 - I1/I0 = D / S0``, without cancellation: the series are differenced term by term).
    """
    c0 = np.ones_like(x)
    c1 = np.ones_like(x)
    s0 = np.ones_like(x)
    d = np.zeros_like(x)
    for k in range(1, _BESSEL_MAX_TERMS):
        # I_nu(x) ~ e^x / sqrt(2 pi x) sum_k (-1)^k a_k(nu) / x^k, a_k / a_{k-1} = (4 nu^2 - (2k-1)^2) / (8k).
        c0 = c0 * ((2 * k - 1) ** 2) / (8.0 * k * x)
        c1 = c1 * ((2 * k - 3) * (2 * k + 1)) / (8.0 * k * x)
        s0 += c0
        d += c0 - c1
        if not np.any(np.abs(c0) > _BESSEL_EPS * s0):
            break
    return s0, d


def _bessel_parts(x: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool, tuple[int, ...]]:
    arr, scalar = _as_float_array(x)
    shape = np.shape(x) if not scalar else ()
    flat = np.abs(arr.reshape(-1))
    small = flat < _BESSEL_ASYMPTOTIC
    large = np.isfinite(flat) & ~small
    return flat, small, large, np.sign(arr.reshape(-1)), scalar, shape


def log_i0e(x: Any) -> Any:
    """log(I0(x)) - |x|, the log of the exponentially scaled modified Bessel function I0.

    Power series for |x| < 25, the asymptotic expansion above (relative error ~1e-15 of I0 over the
    whole range; finite for every finite x, -0.5 log(2 pi |x|) + ... for large |x|).
    """
    flat, small, large, _, scalar, shape = _bessel_parts(x)
    out = np.full(flat.shape, np.nan)
    if small.any():
        s0, _ = _bessel_series(flat[small])
        out[small] = np.log(s0) - flat[small]
    if large.any():
        xl = flat[large]
        s0, _ = _bessel_asymptotic(xl)
        out[large] = np.log(s0) - 0.5 * np.log(2.0 * math.pi * xl)
    out[np.isposinf(flat)] = -np.inf
    return _out(out, True) if scalar else out.reshape(shape)


def log_i0(x: Any) -> Any:
    """log I0(x) for real x (I0 is even); see :func:`log_i0e`.

    Examples
    --------
    >>> log_i0(0.0)
    0.0
    """
    arr, scalar = _as_float_array(x)
    out = np.asarray(log_i0e(arr)) + np.abs(arr)
    return _out(out, True) if scalar else out.reshape(np.shape(x))


def i1_over_i0(x: Any) -> Any:
    """A(x) = I1(x) / I0(x), the mean resultant length of a von Mises distribution with kappa = x.

    Odd in x, increasing from 0 to 1 on [0, inf). Ratio of power series for |x| < 25; above, ``1 - A``
    from the difference of the asymptotic expansions (see :func:`one_minus_i1_over_i0`).
    """
    flat, small, large, sign, scalar, shape = _bessel_parts(x)
    out = np.full(flat.shape, np.nan)
    if small.any():
        xs = flat[small]
        s0, s1 = _bessel_series(xs)
        out[small] = 0.5 * xs * s1 / s0
    if large.any():
        s0, d = _bessel_asymptotic(flat[large])
        out[large] = 1.0 - d / s0
    out[np.isposinf(flat)] = 1.0
    out *= np.where(sign < 0, -1.0, 1.0)
    return _out(out, True) if scalar else out.reshape(shape)


def one_minus_i1_over_i0(x: Any) -> Any:
    """1 - I1(x) / I0(x) for x >= 0, with full relative accuracy also for large x (~1 / (2x)).

    Examples
    --------
    >>> abs(one_minus_i1_over_i0(1e8) - 0.5e-8) < 1e-15
    True
    """
    flat, small, large, _, scalar, shape = _bessel_parts(x)
    out = np.full(flat.shape, np.nan)
    if small.any():
        xs = flat[small]
        s0, s1 = _bessel_series(xs)
        out[small] = 1.0 - 0.5 * xs * s1 / s0
    if large.any():
        s0, d = _bessel_asymptotic(flat[large])
        out[large] = d / s0
    out[np.isposinf(flat)] = 0.0
    return _out(out, True) if scalar else out.reshape(shape)
