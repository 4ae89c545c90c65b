"""Log-series (logarithmic): ``LogSeriesDistribution(p)`` on ``{1, 2, ...}`` (``scipy.stats.logser(p)``).

``P(x) = -p^x / (x ln(1 - p))`` for ``0 < p < 1`` (Fisher's log-series of species abundance; Johnson,
Kemp & Kotz, *Univariate Discrete Distributions*, 3rd ed., ch. 7). Records are integers ``>= 1``; the
encoded batch is ``(x, log x)`` and ``log p(x) = x log p - log x - log(-ln(1 - p))`` is linear in
``[1, x, log x]`` (the mixture fast path). Statistics ``(Σw, Σw x)``, merged by addition.

M-step: the likelihood equation is ``mean = -p / ((1 - p) ln(1 - p))`` (the distribution's mean equals
the weighted mean of the data). With ``t = -ln(1 - p)`` it reads ``expm1(t) / t = mean``, whose left
side rises from 1 (``t -> 0``) without bound; :func:`solve_t` solves it by Newton's method in ``t``
kept inside a shrinking bracket, to machine precision, and ``p = -expm1(-t)`` (no digits lost as ``p``
nears 1). A mean of 1 (all ones) gives ``p = min_p``.

No cdf, survival function or quantile here: the tail sum ``Σ_{j>k} p^j / j`` is a Lerch transcendent
whose numpy evaluation would be slow (a series of ~``1 / (1 - p)`` terms) or inaccurate near ``p = 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._scalar_common import (
    OneParameterEstimator,
    Parameter,
    ScalarEncoder,
    ScalarFamily,
    SumAccumulator,
    check_counts,
    floor,
    prior,
)
from mixle_spark.stats.base import register_distribution, register_estimator

__all__ = [
    "LogSeriesAccumulator",
    "LogSeriesDistribution",
    "LogSeriesEncoder",
    "LogSeriesEstimator",
    "solve_t",
]

DEFAULT_MIN_P = 1e-12
_MAX_ITERATIONS = 200


def _log_mean(t: float) -> float:
    """``ln(expm1(t) / t)`` for ``t > 0`` (no overflow for a large ``t``)."""
    log_expm1 = math.log(math.expm1(t)) if t < 30.0 else t + math.log1p(-math.exp(-t))
    return log_expm1 - math.log(t)


def _slope(t: float) -> float:
    """The derivative of :func:`_log_mean`: ``1 / (1 - e^-t) - 1 / t`` (positive)."""
    return 1.0 / -math.expm1(-t) - 1.0 / t


def solve_t(mean: float) -> float:
    """The ``t > 0`` with ``expm1(t) / t = mean`` (``mean > 1``): Newton's method on ``ln(expm1(t) / t) =
    ln mean`` (increasing and concave in ``t``) inside a bracket that shrinks with every step, bisection
    when a step leaves it, until a step changes ``t`` by at most 4 ulps.

    >>> round(math.expm1(solve_t(3.0)) / solve_t(3.0), 13)
    3.0
    """
    target = math.log(mean)
    lo, hi = 0.0, 1.0
    while _log_mean(hi) < target:
        lo, hi = hi, 2.0 * hi
    t = 2.0 * (mean - 1.0)  # expm1(t) / t = 1 + t / 2 + ... near 0
    if not lo < t < hi:
        t = 0.5 * (lo + hi)
    for _ in range(_MAX_ITERATIONS):
        f = _log_mean(t) - target
        if f > 0:
            hi = t
        elif f < 0:
            lo = t
        else:
            return t
        new = t - f / _slope(t)
        if not (lo < new < hi):
            new = 0.5 * (lo + hi)
        if abs(new - t) <= 4.0 * math.ulp(t):
            return new
        t = new
    return t


def _log1p_plus(p: float) -> float:
    """``ln(1 - p) + p`` (``-p^2 / 2 - p^3 / 3 - ...``), by its series below 0.1, where the two terms
    would cancel."""
    if p >= 0.1:
        return math.log1p(-p) + p
    return -sum(p**k / k for k in range(20, 1, -1))  # p^21 / 21 < 1e-16 p^2 / 2 for p < 0.1


def _mean(p: float) -> float:
    """``-p / ((1 - p) ln(1 - p))``."""
    return -p / ((1.0 - p) * math.log1p(-p))


class LogSeriesEncoder(ScalarEncoder):
    """Reads integers >= 1 into ``(x, log x)``, two float64 arrays of shape (n,)."""

    computes_float32 = True

    embedding = "count"
    estimator_name = "LogSeriesEstimator"
    expectation = "an integer >= 1"

    def seed_values(self, enc: Any) -> np.ndarray:
        return np.asarray(enc[0], dtype=np.float64)

    def validate(self, x: np.ndarray) -> None:
        check_counts(x, self.expected, low=1.0)

    def pack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x, np.log(x)


@register_distribution("log_series")
class LogSeriesDistribution(ScalarFamily):
    """Log-series distribution on ``{1, 2, ...}`` with parameter ``p`` in (0, 1).

    Examples
    --------
    >>> round(math.exp(LogSeriesDistribution(0.5).log_density(1)), 12) == round(0.5 / math.log(2), 12)
    True
    """

    parameters = (Parameter("p", lambda p: 0.0 < p < 1.0, "a probability in (0, 1)"),)
    encoder_class = LogSeriesEncoder
    record_type = int
    p: float

    def __init__(self, p: float) -> None:
        self._set_parameters(p)
        self._log_p = math.log(self.p)
        # log P(1) = -ln(-ln(1 - p) / p) = -ln(1 + r), r = -(ln(1 - p) + p) / p: exact for a small p
        self._log_first = -math.log1p(-_log1p_plus(self.p) / self.p)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.logseries(self.p, size=size)

    def log_density(self, x: int) -> float:
        value = float(x)
        if not (1.0 <= value < math.inf and value == math.floor(value)):
            return -math.inf
        return (value - 1.0) * self._log_p - math.log(value) + self._log_first

    def seq_log_density(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x, log_x = enc
        return (x - 1.0) * self._log_p - log_x + self._log_first  # type: ignore[no-any-return]

    def moments(self) -> tuple[float, float]:
        """Mean ``a p / (1 - p)`` and variance ``a p (1 - a p) / (1 - p)^2`` with ``a = -1 / ln(1 - p)``
        (``1 - a p = (ln(1 - p) + p) / ln(1 - p)``, kept exact for a small ``p``)."""
        log_q = math.log1p(-self.p)
        mean = _mean(self.p)
        return mean, mean * _log1p_plus(self.p) / (log_q * (1.0 - self.p))

    # Mixture fast path: log p(x) = [1, x, log x] @ [log P(1) - log p, log p, -1].
    def feature_key(self) -> Any:
        return ("log_series",)

    def seq_features(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x, log_x = enc
        return np.column_stack([np.ones_like(x), x, log_x])

    def feature_coefficients(self, enc: Any) -> np.ndarray:
        return np.array([self._log_first - self._log_p, self._log_p, -1.0])


class LogSeriesAccumulator(SumAccumulator):
    """Sums ``(Σw, Σw x)``; its own factory."""

    encoder_class = LogSeriesEncoder

    def values(self, enc: Any) -> np.ndarray:
        return enc[0]  # type: ignore[no-any-return]


@register_estimator("log_series")
@dataclass(eq=False, repr=False)
class LogSeriesEstimator(OneParameterEstimator):
    """Maximum-likelihood log-series fit: ``p`` with mean ``-p / ((1 - p) ln(1 - p)) = Σw x / Σw``
    (solved to machine precision, see the module docstring), clipped to ``[min_p, 1 - min_p]``.

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations with the mean of ``LogSeries(p0)``: they add ``pc`` to Σw and
        ``pc`` times that mean to Σw x.
    suff_stat : float, optional
        Prior ``p0`` (default 0.5 when only ``pseudo_count`` is given).
    min_p : float
        Clip (default 1e-12): a component that saw only ones keeps a finite density for x > 1.
    keys : str, optional
        Tie this parameter to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or 0.5).
    """

    pseudo_count: float | None = None
    suff_stat: float | None = prior(lambda v: 0.0 < v < 1.0, "a probability in (0, 1)")
    min_p: float = floor(DEFAULT_MIN_P, lambda v: 0.0 < v < 0.5, "in (0, 0.5)")
    name: str | None = None
    keys: str | None = None

    distribution_class = LogSeriesDistribution
    accumulator_class = LogSeriesAccumulator
    encoder_class = LogSeriesEncoder
    floor_name = "min_p"
    prior_default = 0.5

    def point_estimate(self, sw: float, sx: float, pc: float, prior: float) -> float:
        total = sw + pc
        if not total > 0:
            return prior
        mean = (sx + pc * _mean(prior)) / total
        if math.isnan(mean):
            return math.nan  # the base estimate then falls back to the prior
        if mean <= 1.0:  # all ones (or rounding below): p -> 0, floored to min_p
            return 0.0
        if mean == math.inf:
            return 1.0
        return -math.expm1(-solve_t(mean))

    def apply_floor(self, value: float) -> float:
        return min(max(value, self.floor), 1.0 - self.floor)
