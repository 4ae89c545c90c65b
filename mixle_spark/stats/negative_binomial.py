"""Negative binomial: ``NegativeBinomialDistribution(r, p)`` for counts ``x = 0, 1, 2, ...``.

``P(x) = Gamma(x + r) / (Gamma(r) x!) p^r (1 - p)^x`` with a real ``r > 0`` (the "size", or number of
successes) and the success probability ``0 < p < 1``: the number of failures before the r-th success,
with mean ``r (1 - p) / p`` and variance ``mean / p`` (numpy's and scipy's ``nbinom`` parametrisation).
As ``r -> inf`` with the mean fixed it tends to the Poisson distribution.

Records are non-negative integer counts; the encoded batch is ``(x, log x!)``. The MLE of ``r``
needs more than ``(Σw, Σw x)``: the statistics are the weighted histogram of the counts, a pair of
arrays ``(values, weights)`` (the distinct counts, sorted, and their total weights; its size is the
number of distinct counts, not of rows), built per batch with ``np.bincount`` / ``np.unique`` and
merged by adding the weights of equal counts. The statistics (16 bytes per distinct count) stay small
for typical count data; a column with millions of distinct counts makes them as large as that, the
price of an exact maximum-likelihood ``r`` from one pass.

M-step: for fixed ``r`` the MLE of ``p`` is ``r / (r + mean)``; ``r`` solves the profile-likelihood
equation ``Σw [digamma(x + r) - digamma(r)] = Σw log(1 + mean / r)`` (see :func:`solve_r`) by Newton's
method in ``log r`` inside a shrinking bracket, with bisection when a step leaves it, stopping when a
step changes ``r`` by at most ``1e-10`` relative (:data:`R_RTOL`). The equation has a finite root
exactly when the data are overdispersed (weighted variance > mean). Otherwise (underdispersed or
equidispersed data, for which the likelihood increases towards the Poisson limit) the estimate is
``r = max_r`` (default 1e8), a negative binomial indistinguishable from the Poisson with the same
mean - documented behaviour, no warning. Data that are all zero give ``p = 1 - min_p``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._incomplete import bisect_count, log_beta_i
from mixle_spark.stats._scalar_common import (
    CountEncoder,
    Parameter,
    ScalarFamily,
    bound,
    check_bounds,
    positive,
    prior_tuple,
)
from mixle_spark.stats._special import (
    digamma_difference_excess,
    log1p_minus_identity,
    log_factorial,
    log_rising_factorial,
    trigamma_difference_excess,
)
from mixle_spark.stats.base import (
    Accumulator,
    Estimator,
    option,
    register_distribution,
    register_estimator,
)

__all__ = [
    "NegativeBinomialAccumulator",
    "NegativeBinomialDistribution",
    "NegativeBinomialEncoder",
    "NegativeBinomialEstimator",
]

DEFAULT_MIN_R = 1e-8
DEFAULT_MAX_R = 1e8
DEFAULT_MIN_P = 1e-12
R_RTOL = 1e-10
"""Relative change of ``r`` at which the Newton iteration of :func:`solve_r` stops."""
_MAX_ITERATIONS = 300
_DENSE_HISTOGRAM = 1 << 16  # counts below max(this, 4 n) are histogrammed by bincount, else by unique
_PRIOR_MASS = 1.0 - 1e-12  # the prior's pmf is tabulated until this much mass is covered ...
_PRIOR_MAX_VALUES = 1 << 20  # ... or this many counts


def _profile_score(r: float, values: np.ndarray, weights: np.ndarray, mean: float) -> tuple[float, float]:
    """The derivative in ``r`` of the profile log-likelihood, and its derivative.

    ``Σw [digamma(x + r) - digamma(r)] - Σw log(1 + mean / r)`` is rewritten (using ``Σw (x - mean) =
    0``) as ``Σw e(r, x) + Σw [log(1 + d) - d]`` with ``e = digamma(x + r) - digamma(r) - log(1 + x / r)``
    and ``d = (x - mean) / (r + mean)``: both sums are accurate for a large ``r``, where the two
    original sums (~Σw x / r) agree to many digits.
    """
    d = (values - mean) / (r + mean)
    score = float(weights @ digamma_difference_excess(r, values)) + float(weights @ log1p_minus_identity(d))
    slope = float(weights @ trigamma_difference_excess(r, values)) + float(
        weights @ (d * d / ((1.0 + d) * (r + mean)))
    )
    return score, slope


def solve_r(
    values: np.ndarray,
    weights: np.ndarray,
    min_r: float = DEFAULT_MIN_R,
    max_r: float = DEFAULT_MAX_R,
) -> float:
    """The maximum-likelihood ``r`` in ``[min_r, max_r]`` for a weighted histogram of counts.

    The profile score is positive below its root and negative above it (the root is unique and
    finite for overdispersed data). Newton steps in ``log r`` from the moment estimate
    ``mean^2 / (variance - mean)`` are kept inside a shrinking bracket and replaced by geometric
    bisection when they leave it; iteration stops when a step changes ``r`` by at most
    :data:`R_RTOL` relative. Returns ``max_r`` when the score is still non-negative there (under- or
    equidispersed data) and ``min_r`` when it is already non-positive there.
    """
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    total = float(weights.sum())
    mean = float(weights @ values) / total
    var = float(weights @ (values - mean) ** 2) / total
    if not var > mean:
        return max_r
    if _profile_score(max_r, values, weights, mean)[0] >= 0:
        return max_r
    if _profile_score(min_r, values, weights, mean)[0] <= 0:
        return min_r
    lo, hi = min_r, max_r
    r = min(max(mean * mean / (var - mean), 2.0 * min_r), 0.5 * max_r)
    for _ in range(_MAX_ITERATIONS):
        score, slope = _profile_score(r, values, weights, mean)
        if score > 0:
            lo = r
        elif score < 0:
            hi = r
        else:
            return r
        step = -score / (r * slope) if slope < 0 else math.nan
        new = r * math.exp(step) if abs(step) < 50.0 else math.nan
        if not (lo < new < hi):
            new = math.sqrt(lo * hi)
        if abs(new - r) <= R_RTOL * r:
            return new
        r = new
    return r


def _log_pmf(r: float, log_p: float, log_q: float, x: np.ndarray, log_fact: np.ndarray) -> np.ndarray:
    return log_rising_factorial(r, x) - log_fact + r * log_p + x * log_q  # type: ignore[no-any-return]


class NegativeBinomialEncoder(CountEncoder):
    estimator_name = "NegativeBinomialEstimator"


@register_distribution("negative_binomial")
class NegativeBinomialDistribution(ScalarFamily):
    """Negative binomial distribution of the failures before the ``r``-th success, success
    probability ``p``.

    Examples
    --------
    >>> d = NegativeBinomialDistribution(1.0, 0.25)
    >>> round(d.log_density(2), 12) == round(math.log(0.75**2 * 0.25), 12)
    True
    """

    parameters = (positive("r"), Parameter("p", lambda p: 0.0 < p < 1.0, "a probability in (0, 1)"))
    r: float
    p: float
    encoder_class = NegativeBinomialEncoder
    record_type = int

    def __init__(self, r: float, p: float) -> None:
        self._set_parameters(r, p)
        self._log_p = math.log(self.p)
        self._log_q = math.log1p(-self.p)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.negative_binomial(self.r, self.p, size=size)

    def log_density(self, x: int) -> float:
        value = float(x)
        if not (0.0 <= value < math.inf and value == math.floor(value)):
            return -math.inf
        xs = np.array([value])
        return float(_log_pmf(self.r, self._log_p, self._log_q, xs, log_factorial(xs))[0])

    def moments(self) -> tuple[float, float]:
        mean = self.r * (1.0 - self.p) / self.p
        return mean, mean / self.p

    def _tails(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ln F(x), ln S(x))`` with ``F(k) = I_p(r, k + 1)`` (the regularized incomplete beta)."""
        k = np.floor(np.asarray(x, dtype=np.float64))
        shape = k.shape
        log_f, log_s = log_beta_i(
            np.full(shape, self.r),
            np.maximum(k, 0.0) + 1.0,
            np.full(shape, self.p),
            np.full(shape, 1.0 - self.p),
        )
        below = k < 0
        return np.where(below, -np.inf, log_f), np.where(below, 0.0, log_s)

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        return self._tails(x)[0]

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        return self._tails(x)[1]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        mean, variance = self.moments()
        cap = math.ceil(mean + 60.0 * math.sqrt(variance) + 800.0 / self.p)
        k = bisect_count(self.log_cdf, self.log_survival, p, 0.0, cap)
        return np.where(p >= 1.0, math.inf, k)

    def seq_log_density(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x, log_fact = enc
        return _log_pmf(self.r, self._log_p, self._log_q, x, log_fact)

    @property
    def mean(self) -> float:
        """``r (1 - p) / p``."""
        return self.r * (1.0 - self.p) / self.p


def _histogram(x: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of ``x`` (sorted) and their total weights, entries of zero weight dropped."""
    if x.size == 0:
        return np.zeros(0), np.zeros(0)
    top = float(x.max())
    if top < max(_DENSE_HISTOGRAM, 4 * x.size):
        totals = np.bincount(x.astype(np.int64), weights=weights)
        idx = np.flatnonzero(totals)
        return idx.astype(np.float64), totals[idx]
    values, inverse = np.unique(x, return_inverse=True)
    totals = np.bincount(inverse.reshape(-1), weights=weights, minlength=values.size)
    keep = totals != 0
    return values[keep], totals[keep]


class NegativeBinomialAccumulator(Accumulator):
    """The weighted histogram of the counts; value ``(values, weights)``, two float64 arrays."""

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.values = np.zeros(0)
        self.weights = np.zeros(0)

    def _add(self, values: np.ndarray, weights: np.ndarray) -> None:
        if values.size == 0:
            return
        if self.values.size == 0:
            self.values, self.weights = values.copy(), weights.copy()
            return
        self.values, self.weights = _histogram(
            np.concatenate([self.values, values]), np.concatenate([self.weights, weights])
        )

    def seq_update(self, enc: tuple[np.ndarray, np.ndarray], weights: np.ndarray, estimate: Any) -> None:
        self._add(*_histogram(enc[0], np.asarray(weights, dtype=np.float64)))
        return None

    def combine(self, value: Any) -> NegativeBinomialAccumulator:
        values, weights = value
        self._add(np.asarray(values, dtype=np.float64), np.asarray(weights, dtype=np.float64))
        return self

    def value(self) -> tuple[np.ndarray, np.ndarray]:
        return (self.values.copy(), self.weights.copy())

    def _scale(self, factor: float) -> None:
        self.weights = factor * self.weights  # the distinct counts (values) stay

    def from_value(self, value: Any) -> NegativeBinomialAccumulator:
        values, weights = value
        self.values = np.array(values, dtype=np.float64)
        self.weights = np.array(weights, dtype=np.float64)
        return self

    encoder_class = NegativeBinomialEncoder


def prior_histogram(r0: float, p0: float) -> tuple[np.ndarray, np.ndarray]:
    """The pmf of NB(r0, p0) as a histogram ``(values, probabilities)``: counts from 0 until the
    covered mass reaches ``1 - 1e-12`` (at most 2^20 counts), renormalised to sum to 1."""
    dist = NegativeBinomialDistribution(r0, p0)
    sd = math.sqrt(dist.mean / p0)
    size = int(min(max(64.0, dist.mean + 20.0 * sd + 1.0), _PRIOR_MAX_VALUES))
    while True:
        x = np.arange(size, dtype=np.float64)
        pmf = np.exp(dist.seq_log_density((x, log_factorial(x))))
        if pmf.sum() >= _PRIOR_MASS or size >= _PRIOR_MAX_VALUES:
            break
        size = min(2 * size, _PRIOR_MAX_VALUES)
    keep = pmf > 0
    return x[keep], pmf[keep] / pmf.sum()


@register_estimator("negative_binomial")
@dataclass(eq=False, repr=False)
class NegativeBinomialEstimator(Estimator):
    """Maximum-likelihood negative binomial fit: ``r`` by :func:`solve_r`, then ``p = r / (r + mean)``.

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations distributed as ``NB(r0, p0)`` = ``suff_stat``: ``pc`` times the
        prior's pmf (see :func:`prior_histogram`) is added to the histogram of the data. As ``pc``
        grows the estimate tends to ``(r0, p0)``.
    suff_stat : (float, float), optional
        Prior ``(r0, p0)`` (default (1, 0.5), the geometric distribution on 0, 1, ... with mean 1).
    min_r, max_r : float
        Bounds of ``r`` (defaults 1e-8 and 1e8); under- or equidispersed data give ``max_r``.
    min_p : float
        ``p`` is kept in ``[min_p, 1 - min_p]`` (default 1e-12): data that are all zero keep a finite
        density for positive counts.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or r = 1, p = 0.5).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda r0, p0: r0 > 0 and 0 < p0 < 1, "a pair (r0, p0) with r0 > 0 finite and 0 < p0 < 1"
    )
    min_r: float = bound(DEFAULT_MIN_R)
    max_r: float = bound(DEFAULT_MAX_R)
    min_p: float = option(DEFAULT_MIN_P, lambda v: 0 < v < 0.5, "a number in (0, 0.5)", read=float)
    name: str | None = None
    keys: str | None = None

    accumulator_class = NegativeBinomialAccumulator
    encoder_class = NegativeBinomialEncoder

    def check(self) -> None:
        check_bounds(self, "min_r", "max_r")

    def _prior(self) -> tuple[float, float]:
        return (1.0, 0.5) if self.suff_stat is None else self.suff_stat

    def estimate(self, nobs: float | None, value: Any) -> NegativeBinomialDistribution:
        values = np.asarray(value[0], dtype=np.float64)
        weights = np.asarray(value[1], dtype=np.float64)
        r0, p0 = self._prior()
        pc = self.pseudo_count or 0.0
        if pc > 0:
            prior_values, prior_mass = prior_histogram(r0, p0)
            acc = NegativeBinomialAccumulator().from_value((values, weights))
            acc.combine((prior_values, pc * prior_mass))
            values, weights = acc.values, acc.weights
        total = float(weights.sum())
        fallback = NegativeBinomialDistribution(min(max(r0, self.min_r), self.max_r), p0)
        if not (total > 0 and math.isfinite(total)):
            return fallback
        mean = float(weights @ values) / total
        if not math.isfinite(mean):
            return fallback
        if mean <= 0.0:
            return NegativeBinomialDistribution(min(max(r0, self.min_r), self.max_r), 1.0 - self.min_p)
        r = solve_r(values, weights, self.min_r, self.max_r)
        p = min(max(r / (r + mean), self.min_p), 1.0 - self.min_p)
        return NegativeBinomialDistribution(r, p)
