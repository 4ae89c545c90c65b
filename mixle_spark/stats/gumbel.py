"""Gumbel (maximum extreme value, type I): ``GumbelDistribution(mu, beta)`` with location ``mu`` (the mode)
and scale ``beta`` (``scipy.stats.gumbel_r(loc=mu, scale=beta)``); with ``z = (x - mu) / beta``,
``log p(x) = -log beta - z - exp(-z)``, mean ``mu + gamma beta``, variance ``(pi beta)^2 / 6``.

Records are finite real numbers; the encoded batch is the values themselves. The likelihood equations
(Johnson, Kotz & Balakrishnan, *Continuous Univariate Distributions* vol. 2, 2nd ed., ch. 22 section 7)
give ``mu`` in closed form given ``beta``, ``exp(-mu / beta) = Σw exp(-x / beta) / Σw``, but ``beta``
only implicitly. The fit is an ECM step (Meng & Rubin, Biometrika 80 (1993)) from statistics at the
current model ``(c, beta_c)``, exponents shifted by ``c`` and by a merged log-offset (nothing overflows):
``Σw``, ``Σw (x - c)``, ``Σw (x - c)^2``, ``E_j = Σw (x - c)^j exp(-(x - c) / beta_c)`` for j = 0, 1, 2, and
``min x``, ``max x`` over rows of positive weight; sums merge by addition (the exponential ones after
rescaling to the larger offset), extremes by ``min`` / ``max``.

1. ``mu`` given ``beta_c`` in closed form: ``mu_1 = c - beta_c log(E_0 / Σw)`` (the exact conditional
   maximum).
2. ``theta = 1 / beta`` given ``mu_1``: ``l(theta) = Σw log theta - theta Σw r - Σw exp(-theta r)``,
   ``r = x - mu_1``. Taylor's theorem with the Lagrange remainder bounds ``exp(-theta r)`` above by
   ``exp(-theta_c r) (1 - d r + d^2 r^2 exp(|d| rho) / 2)``, ``d = theta - theta_c``, ``rho`` the
   largest ``-r`` (``d > 0``) or ``r`` (``d < 0``) over the rows, which the merged ``min x`` / ``max x``
   give. The resulting minorizer of ``l`` needs only the sums above (re-expressed about ``mu_1``),
   equals ``l`` at ``theta_c`` and is concave; its maximum (by bisection on its derivative, on the
   driver) is the new ``theta``. So the likelihood never decreases; near the maximum ``d`` is small,
   the bound is Newton's quadratic, and convergence is fast.

The first pass (no current model) takes the moments: ``beta = sd sqrt 6 / pi``, ``mu = mean - gamma
beta``; so do statistics taken at different scales (an incremental update's frozen old rows beside new
ones), whose exponential sums cannot be re-expressed at one ``beta``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._cdf import log1m_exp
from mixle_spark.stats._scalar_common import ScalarEncoder, ScalarFamily, finite, floor, positive, prior_tuple
from mixle_spark.stats.base import Accumulator, Estimator, register_distribution, register_estimator
from mixle_spark.stats.gaussian import shift_moments

__all__ = ["GumbelAccumulator", "GumbelDistribution", "GumbelEncoder", "GumbelEstimator"]

DEFAULT_MIN_BETA = 1e-12
EULER_GAMMA = 0.5772156649015329
_BISECTIONS = 200


def _pseudo_points() -> tuple[float, float]:
    """Two standardized points ``z_1 < z_2`` whose equal-weight Gumbel MLE is exactly ``(0, 1)``: with
    ``a = exp(-z_1)``, ``exp(-z_2) = 2 - a`` (the ``mu`` equation) and ``a`` solving the ``beta``
    equation ``mean z - mean(z exp(-z)) = 1`` (by bisection on (1, 2), where it changes sign once)."""

    def gap(a: float) -> float:
        z1, z2 = -math.log(a), -math.log(2.0 - a)
        return 0.5 * (z1 + z2) - 0.5 * (z1 * a + z2 * (2.0 - a)) - 1.0

    low, high = 1.0 + 1e-15, 2.0 - 1e-15
    for _ in range(_BISECTIONS):
        mid = 0.5 * (low + high)
        if (gap(mid) > 0) == (gap(low) > 0):
            low = mid
        else:
            high = mid
    a = 0.5 * (low + high)
    return -math.log(a), -math.log(2.0 - a)


PSEUDO_POINTS = _pseudo_points()
"""The prior's pseudo-rows, in units of its scale about its location (see :class:`GumbelEstimator`)."""


class GumbelEncoder(ScalarEncoder):
    """Reads finite real numbers into a float64 array of shape (n,)."""

    estimator_name = "GumbelEstimator"
    expectation = "a finite number"


@register_distribution("gumbel")
class GumbelDistribution(ScalarFamily):
    """Gumbel (right-skewed, maximum) distribution with location ``mu`` and scale ``beta``.

    Examples
    --------
    >>> GumbelDistribution(0.0, 1.0).log_density(0.0) == -1.0
    True
    """

    parameters = (finite("mu"), positive("beta"))
    encoder_class = GumbelEncoder
    mu: float
    beta: float

    def __init__(self, mu: float, beta: float) -> None:
        self._set_parameters(mu, beta)
        self._log_beta = math.log(self.beta)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.gumbel(self.mu, self.beta, size=size)

    def log_density(self, x: float) -> float:
        x = float(x)
        if not math.isfinite(x):
            return -math.inf
        return float(self.seq_log_density(np.array([x]))[0])

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        z = (enc - self.mu) / self.beta
        with np.errstate(over="ignore"):
            return -self._log_beta - z - np.exp(-z)  # type: ignore[no-any-return]

    def moments(self) -> tuple[float, float]:
        return self.mu + EULER_GAMMA * self.beta, (math.pi * self.beta) ** 2 / 6.0

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x, dtype=np.float64) - self.mu) / self.beta
        with np.errstate(over="ignore"):
            return -np.exp(-z)  # type: ignore[no-any-return]

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        """``log(1 - exp(-a))``, ``a = exp(-z)``; far in the upper tail (``a < 1e-10``, where ``a`` may also
        underflow) ``-z + log1p(-a / 2)``, whose error is below ``a^2 / 24``."""
        z = (np.asarray(x, dtype=np.float64) - self.mu) / self.beta
        with np.errstate(over="ignore", invalid="ignore"):
            a = np.exp(-z)
            return np.where(a < 1e-10, -z + np.log1p(-0.5 * a), log1m_exp(a))  # type: ignore[no-any-return]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        with np.errstate(divide="ignore"):
            return self.mu - self.beta * np.log(-np.log(p))  # type: ignore[no-any-return]


class GumbelAccumulator(Accumulator):
    """The statistics at the current model (see the module docstring); value ``(sw, s1, s2, shift,
    unit, offset, e0, e1, e2, min_x, max_x, mixed)``: ``shift`` and ``unit`` the current ``mu`` and
    ``beta`` (``unit`` 0 on a first pass), ``e_j`` the exponential sums divided by ``exp(offset)``
    (``offset`` 0 while ``e0`` is 0)."""

    encoder_class = GumbelEncoder

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sw = self.s1 = self.s2 = self.shift = self.unit = 0.0
        self.offset = 0.0  # meaningful once e0 > 0
        self.e0 = self.e1 = self.e2 = 0.0
        self.min_x, self.max_x = math.inf, -math.inf
        self.mixed = False

    def seq_update(self, enc: np.ndarray, weights: np.ndarray, estimate: Any) -> None:
        x = np.asarray(enc, dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)
        if estimate is not None and not isinstance(estimate, GumbelDistribution):
            raise SpecError(
                "GumbelAccumulator.seq_update needs the current GumbelDistribution (or None on the first "
                f"pass), got {estimate!r}"
            )
        part = GumbelAccumulator()
        part.shift = self.shift if estimate is None else estimate.mu
        d = x - part.shift
        part.sw, part.s1, part.s2 = float(w.sum()), float(np.dot(w, d)), float(np.dot(w, d * d))
        seen = x[w > 0]
        if seen.size:
            part.min_x, part.max_x = float(seen.min()), float(seen.max())
        if estimate is not None and seen.size:
            part.unit = estimate.beta
            y = -d / estimate.beta
            part.offset = float(y[w > 0].max())
            tilt = w * np.exp(y - part.offset)
            part.e0, part.e1, part.e2 = float(tilt.sum()), float(np.dot(tilt, d)), float(np.dot(tilt, d * d))
        elif estimate is not None:
            part.unit = estimate.beta
        self.combine(part.value())

    def combine(self, value: Any) -> GumbelAccumulator:
        sw, s1, s2, shift, unit, offset, e0, e1, e2, min_x, max_x, mixed = (float(v) for v in value)
        if self.sw == 0.0 and self.unit == 0.0 and self.s1 == 0.0:
            self.shift = shift
        self.mixed = self.mixed or bool(mixed)
        if unit > 0:
            if self.unit == 0.0:
                self.unit = unit
            elif unit != self.unit:
                self.mixed = True  # exponential sums at another scale: the moments decide (docstring)
            delta = shift - self.shift
            if (
                delta != 0.0 and e0 > 0
            ):  # (x - k') = (x - k) + delta, exp(-(x - k') / b) = ... exp(-delta / b)
                e1, e2 = e1 + delta * e0, e2 + 2.0 * delta * e1 + delta * delta * e0
                offset -= delta / unit
            if e0 > 0 and not self.e0 > 0:
                self.e0, self.e1, self.e2, self.offset = e0, e1, e2, offset
            elif e0 > 0:
                top = max(self.offset, offset)
                mine, theirs = math.exp(self.offset - top), math.exp(offset - top)
                self.e0 = self.e0 * mine + e0 * theirs
                self.e1 = self.e1 * mine + e1 * theirs
                self.e2 = self.e2 * mine + e2 * theirs
                self.offset = top
        s1, s2 = shift_moments(sw, s1, s2, shift, self.shift)
        self.sw += sw
        self.s1 += s1
        self.s2 += s2
        self.min_x = min(self.min_x, min_x)
        self.max_x = max(self.max_x, max_x)
        return self

    def value(self) -> tuple[float, ...]:
        return (
            self.sw,
            self.s1,
            self.s2,
            self.shift,
            self.unit,
            self.offset,
            self.e0,
            self.e1,
            self.e2,
            self.min_x,
            self.max_x,
            float(self.mixed),
        )

    def _scale(self, factor: float) -> None:
        for name in ("sw", "s1", "s2", "e0", "e1", "e2"):
            setattr(self, name, factor * getattr(self, name))

    def from_value(self, value: Any) -> GumbelAccumulator:
        (self.sw, self.s1, self.s2, self.shift, self.unit, self.offset) = (float(v) for v in value[:6])
        self.e0, self.e1, self.e2, self.min_x, self.max_x = (float(v) for v in value[6:11])
        self.mixed = bool(value[11])
        return self


def theta_step(s: GumbelAccumulator, mu: float) -> float:
    """The new ``theta = 1 / beta`` given ``mu`` (step 2 of the module docstring)."""
    theta_c, total = 1.0 / s.unit, s.sw
    delta = mu - s.shift
    q1, q2 = s.e1 / s.e0, s.e2 / s.e0  # tilted moments of x - c
    a1 = total * (q1 - delta)  # Σw r exp(-theta_c r) with Σw exp(-theta_c r) = Σw (mu's equation)
    a2 = total * (max(q2 - q1 * q1, 0.0) + (q1 - delta) ** 2)
    sum_r = s.s1 - total * delta

    def slope(d: float) -> float:
        rho = max(0.0, mu - s.min_x) if d > 0 else max(0.0, s.max_x - mu)
        with np.errstate(over="ignore"):
            growth = math.exp(min(abs(d) * rho, 700.0))
        return total / (theta_c + d) - sum_r + a1 - a2 * growth * (d + math.copysign(d * d * rho / 2.0, d))

    start = slope(0.0)
    if start == 0.0 or not math.isfinite(start):
        return theta_c
    if start > 0:
        low, high = 0.0, theta_c
        while slope(high) > 0 and high < 1e300 * theta_c:
            low, high = high, 2.0 * high
    else:
        low, high = -theta_c, 0.0  # the slope tends to +inf as theta -> 0
    for _ in range(_BISECTIONS):
        mid = 0.5 * (low + high)
        if mid in (low, high):
            break
        if slope(mid) > 0:
            low = mid
        else:
            high = mid
    return theta_c + 0.5 * (low + high)


@register_estimator("gumbel")
@dataclass(eq=False, repr=False)
class GumbelEstimator(Estimator):
    """Maximum-likelihood Gumbel fit by the ECM step of the module docstring (never lowering the
    likelihood; iterated by EM to the maximum, ``scipy.stats.gumbel_r.fit``'s).

    Parameters
    ----------
    pseudo_count : float, optional
        With ``suff_stat = (mu0, beta0)``: ``pc / 2`` pseudo-rows at each of ``mu0 + beta0 z_j`` for the
        two points :data:`PSEUDO_POINTS`, whose own maximum-likelihood fit is exactly ``(mu0, beta0)``:
        a prior that is the likelihood of those rows, so each step still never lowers the posterior, and
        as ``pc`` grows the estimate tends to ``(mu0, beta0)``.
    suff_stat : (float, float), optional
        Prior location and scale (default (0, 1) when only ``pseudo_count`` is given).
    min_beta : float
        Scale floor (default 1e-12): rows on one value keep a finite density.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or mu = 0, beta = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda mu0, beta0: beta0 > 0, "a pair (mu0, beta0) of finite numbers with beta0 > 0"
    )
    min_beta: float = floor(DEFAULT_MIN_BETA)
    name: str | None = None
    keys: str | None = None

    accumulator_class = GumbelAccumulator
    encoder_class = GumbelEncoder

    def estimate(self, nobs: float | None, value: Any) -> GumbelDistribution:
        s = GumbelAccumulator().from_value(value)
        mu0, beta0 = (0.0, 1.0) if self.suff_stat is None else self.suff_stat
        if not s.sw > 0:
            return GumbelDistribution(mu0, beta0)
        pc = self.pseudo_count or 0.0
        if pc > 0:
            rows = np.array([mu0 + beta0 * z for z in PSEUDO_POINTS])
            current = GumbelDistribution(s.shift, s.unit) if s.unit > 0 else None
            prior = GumbelAccumulator()
            prior.shift = s.shift
            prior.seq_update(rows, np.array([0.5 * pc, 0.5 * pc]), current)
            s.combine(prior.value())
        if s.unit == 0.0 or s.mixed or not s.e0 > 0:  # moments (see the module docstring)
            mean = s.shift + s.s1 / s.sw
            var = max(s.s2 / s.sw - (s.s1 / s.sw) ** 2, 0.0)
            beta = math.sqrt(6.0 * var) / math.pi
            return GumbelDistribution(mean - EULER_GAMMA * beta, max(beta, self.min_beta))
        mu = s.shift - s.unit * (math.log(s.e0 / s.sw) + s.offset)
        theta = theta_step(s, mu)
        beta = 1.0 / theta if theta > 0 and math.isfinite(theta) else s.unit
        return GumbelDistribution(mu, max(beta, self.min_beta))
