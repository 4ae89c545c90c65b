"""Special functions in plain numpy (the numerical core does not depend on scipy).

* :func:`gammaln` - log Gamma(x) for x > 0: Lanczos (g = 671/128, 14 terms, as in Numerical
  Recipes 3rd ed.) away from the roots of log Gamma, and its Taylor series around x = 1 and x = 2,
  where log Gamma vanishes and only a series keeps the *relative* error near 1e-15.
* :func:`log_factorial` - log k! for non-negative integers: a table for k < 1024, gammaln above.
* :func:`digamma`, :func:`trigamma` - recurrence up to x >= 10, then the asymptotic series.
* :func:`log_minus_digamma` - log x - digamma(x) without cancellation for large x (the gamma shape
  equation).

All accept a scalar (returning a float) or an array (returning an array of the same shape). The
domain is x > 0; other inputs give NaN (or +inf at the poles of log Gamma).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["digamma", "gammaln", "log_factorial", "log_minus_digamma", "trigamma"]

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
