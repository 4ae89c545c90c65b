"""The standard normal cdf, its logarithm and its inverse in plain numpy (the numerical core does not
depend on scipy), accurate to a few units in the last place over the whole float64 range.

* :func:`erfcx` - the scaled complementary error function ``exp(x^2) erfc(x)``; everything else is
  written in it, so nothing underflows: ``Phi(z) = erfcx(-z / sqrt 2) exp(-z^2 / 2) / 2``.
* :func:`erf_small` - ``erf(x)`` for ``|x| <= 1`` by its Maclaurin series (relative accuracy near 0,
  where ``1 - erfc`` would cancel).
* :func:`ndtr`, :func:`log_ndtr`, :func:`ndtri` - ``Phi(z)``, ``ln Phi(z)`` (to ``z = -1e150`` and
  beyond: ``-z^2 / 2 + ln erfcx(-z / sqrt 2) - ln 2``) and the inverse ``Phi^-1(p)``.
* :func:`mills_ratio` - ``phi(z) / Phi(z)`` (the inverse Mills ratio of truncated-normal moments),
  with no overflow or underflow for any finite ``z``.
* :func:`exp_half_square` - ``exp(-z^2 / 2)`` with ``z^2`` split exactly (Dekker 1971), so a large
  ``|z|`` loses no digits to the rounding of ``z^2``.

How :func:`erfcx` is computed: for ``0 <= x <= 50``, in ``y = 4 / (4 + x)`` (Johnson's change of
variable in the Faddeeva package notes: smooth in ``y`` over ``[0, inf)``) by piecewise Chebyshev
interpolation of degree :data:`_DEGREE` on :data:`_PIECES` equal pieces of ``y`` in ``[4 / 54, 1]``
(Trefethen, *Approximation Theory and Approximation Practice*, 2013, ch. 3-8), evaluated by Horner's
rule in the power basis of each piece (table lookups and in-place arithmetic: fast on whole arrays).
The interpolation nodes are evaluated once, at import, from ``math.erfc`` (``x < 2``) and from
Laplace's continued fraction ``erfc(x) = exp(-x^2) / sqrt(pi) / (x + 1/2 / (x + 1 / (x + 3/2 / ...)))``
(Abramowitz & Stegun 7.1.14) run backwards from 400 terms (``x >= 2``). Beyond ``x = 50`` the
asymptotic series ``erfcx(x) = 1 / (x sqrt pi) sum (-1)^n (2n - 1)!! / (2 x^2)^n`` (A&S 7.1.23) to
eight terms is exact to rounding. Negative arguments use ``erfcx(-x) = 2 exp(x^2) - erfcx(x)``.

:func:`ndtri` starts from a two-piece guess (a cubic in ``p - 1/2`` in the centre, the tail's
``sqrt(-2 ln p)`` expansion beyond) and takes Halley steps (cubic convergence): on ``Phi(z) - 1/2 =
erf(z / sqrt 2) / 2`` near the centre (relative accuracy of a small ``z``), on ``ln Phi(z) = ln p`` in
the tails (no underflow for ``p`` down to the smallest subnormal).

All accept a scalar (returning a float) or an array (returning an array of the same shape).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["erf_small", "erfcx", "exp_half_square", "log_ndtr", "mills_ratio", "ndtr", "ndtri"]

_LN2 = math.log(2.0)
_SQRT2 = math.sqrt(2.0)
_SQRT_PI = math.sqrt(math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_PIECES = 192
_DEGREE = 9
_X_MAX = 50.0  # the asymptotic series beyond
_Y_LOW = 4.0 / (4.0 + _X_MAX)
_WIDTH = (1.0 - _Y_LOW) / _PIECES
_SPLIT = 134217729.0  # 2^27 + 1: Dekker's splitting constant for float64


def _as_array(x: Any) -> tuple[np.ndarray, bool]:
    arr = np.asarray(x, dtype=np.float64)
    return np.atleast_1d(arr), arr.ndim == 0


def _out(values: np.ndarray, scalar: bool) -> Any:
    return float(values[0]) if scalar else values


def _erfcx_continued_fraction(x: np.ndarray, terms: int = 400) -> np.ndarray:
    """Laplace's continued fraction (A&S 7.1.14) run backwards; accurate to rounding for ``x >= 2``."""
    f = x.copy()
    for n in range(terms, 0, -1):
        f = x + (0.5 * n) / f
    return 1.0 / (_SQRT_PI * f)


def _erfcx_nodes(x: np.ndarray) -> np.ndarray:
    """erfcx at the interpolation nodes (import time only): libm's erfc times ``exp(x^2)`` below 2 (``x^2``
    split exactly), the continued fraction above."""
    out = _erfcx_continued_fraction(np.maximum(x, 2.0))
    for i in np.flatnonzero(x < 2.0):
        v = float(x[i])
        hi = v * _SPLIT - (v * _SPLIT - v)
        lo = v - hi
        out[i] = math.exp(hi * hi) * math.exp(2.0 * hi * lo + lo * lo) * math.erfc(v)
    return out


def _chebyshev_table() -> np.ndarray:
    """Chebyshev coefficients of erfcx on each piece of ``y``, shape (degree + 1, pieces)."""
    j = np.arange(_DEGREE + 1)
    theta = np.pi * (j + 0.5) / (_DEGREE + 1)
    u = np.cos(theta)  # Chebyshev points of the first kind on [-1, 1]
    starts = _Y_LOW + _WIDTH * np.arange(_PIECES)
    y = starts[None, :] + 0.5 * _WIDTH * (u[:, None] + 1.0)
    values = _erfcx_nodes((4.0 / y - 4.0).ravel()).reshape(y.shape)
    # c_k = (2 / (n + 1)) sum_j f(u_j) cos(k theta_j), halved for k = 0 (discrete orthogonality).
    basis = np.cos(np.outer(j, theta))
    coef = (2.0 / (_DEGREE + 1)) * basis @ values
    coef[0] *= 0.5
    # the power basis in u (Horner is one operation a degree cheaper than Clenshaw; at this degree the
    # change of basis costs no digits: the coefficients fall fast)
    return np.stack([np.polynomial.chebyshev.cheb2poly(coef[:, i]) for i in range(_PIECES)], axis=1)


_TABLE = _chebyshev_table()


def _erfcx_table(x: np.ndarray) -> np.ndarray:
    """erfcx for ``0 <= x <= _X_MAX`` from the piecewise table (Horner's rule, in place: a fresh array per
    operation would cost more than the arithmetic)."""
    y = np.add(x, 4.0)
    np.divide(4.0, y, out=y)
    y -= _Y_LOW
    y *= 1.0 / _WIDTH  # the piece's index plus the position in it, in [0, pieces]
    with np.errstate(invalid="ignore"):  # NaN in, NaN out (its piece is clipped)
        piece = y.astype(np.intp)
    np.minimum(piece, _PIECES - 1, out=piece)
    u2 = np.subtract(y, piece, out=y)
    u2 *= 4.0
    u2 -= 2.0  # 2 u, u in [-1, 1] across the piece
    u = u2
    u *= 0.5
    out = np.take(_TABLE[_DEGREE], piece, mode="clip")
    step = np.empty_like(out)
    for k in range(_DEGREE - 1, -1, -1):  # Horner in u
        out *= u
        out += np.take(_TABLE[k], piece, out=step, mode="clip")
    return out


def _erfcx_asymptotic(x: np.ndarray) -> np.ndarray:
    """A&S 7.1.23 to eight terms, for ``x > _X_MAX`` (the first omitted term is below 1e-19)."""
    with np.errstate(over="ignore"):
        r = 1.0 / (2.0 * x * x)
    total = np.ones_like(x)
    term = np.ones_like(x)
    for n in range(1, 8):
        term = term * (-(2 * n - 1) * r)
        total = total + term
    return total / (_SQRT_PI * x)  # type: ignore[no-any-return]


def _erfcx_nonnegative(x: np.ndarray) -> np.ndarray:
    far = x > _X_MAX
    if not far.any():
        return _erfcx_table(x)
    out = np.empty_like(x)
    near = ~far
    out[near] = _erfcx_table(x[near])
    out[far] = _erfcx_asymptotic(x[far])
    return out


def erfcx(x: Any) -> Any:
    """``exp(x^2) erfc(x)``: decreasing from ``+inf`` (overflow below ``x ~ -26.6``) to ``~1 / (x sqrt pi)``.

    >>> round(erfcx(0.0), 12), round(erfcx(1e3) * 1e3 * math.sqrt(math.pi), 9)
    (1.0, 0.9999995)
    """
    arr, scalar = _as_array(x)
    neg = arr < 0
    out = _erfcx_nonnegative(np.where(neg, -arr, arr))
    if neg.any():
        with np.errstate(over="ignore", divide="ignore"):
            out[neg] = 2.0 * _exp_square(arr[neg], 1.0) - out[neg]
    return _out(out, scalar)


def erf_small(x: Any) -> Any:
    """``erf(x)`` for ``|x| <= 1`` by its Maclaurin series ``2 / sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1))``
    (A&S 7.1.5), to rounding (the series is truncated after 25 terms: the first omitted is < 1e-26).

    >>> round(erf_small(1e-20) / 1e-20 * math.sqrt(math.pi) / 2, 15)
    1.0
    """
    arr, scalar = _as_array(x)
    x2 = arr * arr
    total = np.zeros_like(arr)
    for n in range(24, -1, -1):  # Horner in x^2 from the smallest term
        total = (-1.0) ** n / (math.factorial(n) * (2 * n + 1)) + x2 * total
    return _out((2.0 / _SQRT_PI) * arr * total, scalar)


def exp_half_square(z: Any) -> Any:
    """``exp(-z^2 / 2)`` with ``z^2`` formed exactly (``z = hi + lo``, ``hi`` of 26 bits: Dekker 1971), so the
    result keeps full relative precision for ``|z|`` up to 38 (where it underflows)."""
    arr, scalar = _as_array(z)
    return _out(_exp_square(arr, -0.5), scalar)


def _exp_square(x: np.ndarray, c: float) -> np.ndarray:
    """``exp(c x^2)`` for ``c`` a power of 2: ``exp(c hi^2) exp(c (2 hi lo + lo^2))``, ``c hi^2`` exact."""
    with np.errstate(invalid="ignore", over="ignore"):
        big = ~(np.abs(x) < 1e3)  # (or NaN) exp(c x^2) is 0 or inf anyway: no split needed
        hi = np.where(big, x, x * _SPLIT - (x * _SPLIT - x))
        lo = np.where(big, 0.0, x - hi)
        return np.exp(c * hi * hi) * np.where(big, 1.0, np.exp(c * lo * (2.0 * hi + lo)))  # type: ignore[no-any-return]


def ndtr(z: Any) -> Any:
    """``Phi(z)``, the standard normal cdf, with relative accuracy in both tails' own terms (``Phi(-z)``
    for ``z`` large is never ``1 - Phi(z)``).

    >>> round(ndtr(0.0), 15), ndtr(-37.0) > 0
    (0.5, True)
    """
    arr, scalar = _as_array(z)
    half = 0.5 * erfcx(np.abs(arr) / _SQRT2) * exp_half_square(arr)  # Phi(-|z|)
    return _out(np.where(arr < 0, half, 1.0 - half), scalar)


def log_ndtr(z: Any) -> Any:
    """``ln Phi(z)``: ``ln erfcx(-z / sqrt 2) - z^2 / 2 - ln 2`` below 0 (no underflow for any finite ``z``),
    ``log1p(-Phi(-z))`` above.

    >>> round(log_ndtr(-1e4) + 5e7, 6)  # -z^2 / 2 - ln(-z sqrt(2 pi)) - ...
    -10.129279
    """
    arr, scalar = _as_array(z)
    a = np.abs(arr)
    e = _erfcx_nonnegative(a / _SQRT2)
    with np.errstate(divide="ignore", over="ignore"):
        out = np.log(e)
        a *= a
    a *= 0.5
    out -= a
    out -= _LN2
    pos = arr > 0
    if pos.any():
        zp = arr[pos]
        out[pos] = np.log1p(-0.5 * e[pos] * _exp_square(zp, -0.5))
    return _out(out, scalar)


def mills_ratio(z: Any) -> Any:
    """The inverse Mills ratio ``phi(z) / Phi(z)``: ``sqrt(2 / pi) / erfcx(-z / sqrt 2)`` for ``z <= 0``
    (``~ -z`` as ``z -> -inf``, no overflow), ``phi(z) / (1 - Phi(-z))`` above (``exp(-z^2 / 2)`` formed
    exactly, so no digits are lost to the rounding of ``z / sqrt 2`` where it is tiny). ``-`` it is the
    mean of a standard normal truncated above at ``z``.

    >>> round(mills_ratio(0.0), 15) == round(math.sqrt(2 / math.pi) * 1.0, 15)
    True
    """
    arr, scalar = _as_array(z)
    a = np.abs(arr)
    e = _erfcx_nonnegative(a / _SQRT2)
    with np.errstate(divide="ignore"):
        out = _SQRT_2_OVER_PI / e
    pos = arr > 0
    if pos.any():
        phi = _exp_square(arr[pos], -0.5)
        out[pos] = (phi / math.sqrt(2.0 * math.pi)) / (1.0 - 0.5 * e[pos] * phi)
    return _out(out, scalar)


def _ndtri_guess(q: np.ndarray) -> np.ndarray:
    """A start for ``Phi^-1(q)``, ``q <= 1/2``: ``sqrt(2 pi) (q - 1/2)`` corrected by its cubic term near
    the centre, the tail expansion ``-(t - (2.515517 + 0.802853 t + 0.010328 t^2) / (1 + 1.432788 t +
    0.189269 t^2 + 0.001308 t^3))``, ``t = sqrt(-2 ln q)`` (A&S 26.2.23, error < 4.5e-4) elsewhere."""
    with np.errstate(divide="ignore"):
        t = np.sqrt(-2.0 * np.log(q))
    tail = -(
        t
        - (2.515517 + t * (0.802853 + t * 0.010328)) / (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308)))
    )
    s = math.sqrt(2.0 * math.pi) * (q - 0.5)
    centre = s + s**3 / 6.0
    return np.where(q > 0.4, centre, tail)  # type: ignore[no-any-return]


def _halley_centre(z: np.ndarray, d: np.ndarray) -> np.ndarray:
    """One Halley step on ``g(z) = erf(z / sqrt 2) / 2 - d`` (``g' = phi``, ``g'' / g' = -z``)."""
    step = (0.5 * erf_small(z / _SQRT2) - d) / np.exp(-0.5 * z * z - _LOG_SQRT_2PI)
    return z - step / (1.0 + 0.5 * z * step)  # type: ignore[no-any-return]


def _halley_tail(z: np.ndarray, log_q: np.ndarray) -> np.ndarray:
    """One Halley step on ``g(z) = ln Phi(z) - ln q`` (``g' = r = phi / Phi``, ``g'' / g' = -(z + r)``)."""
    r = mills_ratio(z)
    step = (log_ndtr(z) - log_q) / r
    return z - step / (1.0 + 0.5 * (z + r) * step)  # type: ignore[no-any-return]


def ndtri(p: Any) -> Any:
    """``Phi^-1(p)`` for ``p`` in [0, 1] (``-inf`` at 0, ``inf`` at 1, NaN outside), to about 1e-15 relative.

    >>> round(ndtri(0.975), 12)
    1.95996398454
    """
    arr, scalar = _as_array(p)
    upper = arr > 0.5
    q = np.where(upper, 1.0 - arr, arr)  # exact for p >= 1/2 (Sterbenz)
    ok = (q > 0) & (q <= 0.5)
    z = np.full_like(q, np.nan)
    centre = ok & (q > 0.3)
    tail = ok & ~centre
    if centre.any():
        d = q[centre] - 0.5
        zc = _ndtri_guess(q[centre])
        for _ in range(2):  # the guess is within 2e-3: cubic convergence to rounding in two steps
            zc = _halley_centre(zc, d)
        z[centre] = zc
    if tail.any():
        log_q = np.log(q[tail])
        zt = _ndtri_guess(q[tail])
        for _ in range(2):  # within 4.5e-4 (A&S 26.2.23): two steps as well
            zt = _halley_tail(zt, log_q)
        z[tail] = zt
    z = np.where(upper, -z, z)
    z = np.where(arr == 0.0, -np.inf, np.where(arr == 1.0, np.inf, z))
    return _out(np.where(arr == 0.5, 0.0, z), scalar)
