"""Beta-binomial: ``BetaBinomialDistribution(n, alpha, beta)``, successes in ``n`` trials whose success
probability is drawn from ``Beta(alpha, beta)`` (``scipy.stats.betabinom(n, alpha, beta)``).

``P(x) = C(n, x) B(x + alpha, n - x + beta) / B(alpha, beta)``, written as
``log C(n, x) + [log (alpha)_x] + [log (beta)_(n-x)] - [log (alpha + beta)_n]`` with rising factorials
(:func:`~mixle_spark.stats._special.log_rising_factorial`), which keep their digits when ``alpha`` and
``beta`` are large. Records are integers in ``[0, n]``; ``n`` is handled as the binomial's
(:mod:`mixle_spark.stats.binomial`): given, or learned by a scan (the largest count seen), and the
encoded batch is the binomial's ``(x, log C(n, x))``. A batch is scored by a lookup in the table of
the ``n + 1`` log-probabilities (built once per model) unless ``n`` dwarfs the batch.

Estimation: the statistics are the weighted histogram of the counts over ``0..n`` (``n + 1`` sums, the
sufficient statistic, merged by addition; ``n`` is the number of trials, usually small). The M-step
is the exact weighted MLE (:func:`solve_shapes`): Newton's method in ``(log alpha, log beta)`` on the
log-likelihood of the histogram, each step kept only if it raises the likelihood, else replaced by a
step of Minka's fixed-point iteration for the Polya distribution (T. P. Minka, *Estimating a Dirichlet
distribution*, 2000, eq. 55 with two categories: ``alpha' = alpha Σh_k [digamma(k + alpha) -
digamma(alpha)] / (Σh_k [digamma(n + s) - digamma(s)])``, ``s = alpha + beta``), an MM step that
never lowers it; iterated until a step changes the parameters by at most 1e-12 relative. Each EM
pass therefore takes the full M-step (an exact EM step: the likelihood never decreases) instead of
one slow fixed-point step per pass.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._cdf import log1m_exp
from mixle_spark.stats._scalar_common import (
    Parameter,
    ScalarFamily,
    bound,
    check_bounds,
    positive,
    prior_tuple,
)
from mixle_spark.stats._special import (
    digamma_difference,
    log_rising_factorial,
    trigamma_difference_excess,
)
from mixle_spark.stats.base import (
    Accumulator,
    Encoder,
    Estimator,
    option,
    register_distribution,
    register_estimator,
)
from mixle_spark.stats.binomial import BinomialEncoded, BinomialEncoder, log_binomial_coefficient

__all__ = [
    "BetaBinomialAccumulator",
    "BetaBinomialDistribution",
    "BetaBinomialEncoder",
    "BetaBinomialEstimator",
]

DEFAULT_MIN_SHAPE = 1e-8
DEFAULT_MAX_SHAPE = 1e8
_LN2 = math.log(2.0)
SHAPE_RTOL = 1e-12
"""Relative change of ``alpha`` and ``beta`` at which :func:`solve_shapes` stops."""
_MAX_ITERATIONS = 500
_TABLE_ROWS = 4  # a batch is scored by table lookup when n + 1 <= this many times its rows (+ 1024)


def _is_count(n: Any) -> bool:
    return isinstance(n, (int, np.integer)) and not isinstance(n, bool) and bool(n >= 0)


class BetaBinomialEncoder(BinomialEncoder):
    """Reads counts in ``[0, n]`` into a :class:`~mixle_spark.stats.binomial.BinomialEncoded` (the
    binomial's encoding and scan: ``n=None`` accepts any non-negative integer and a scan returns the
    largest count seen)."""

    estimator_name = "BetaBinomialEstimator"

    def union(self, other: Encoder) -> Encoder:
        if not isinstance(other, BetaBinomialEncoder):
            return Encoder.union(self, other)
        if self.n is None or other.n is None:
            return BetaBinomialEncoder(None)
        return BetaBinomialEncoder(max(self.n, other.n))

    def __hash__(self) -> int:
        return hash(("BetaBinomialEncoder", self.n))

    def __repr__(self) -> str:
        return f"BetaBinomialEncoder(n={self.n!r})"


@register_distribution("beta_binomial")
class BetaBinomialDistribution(ScalarFamily):
    """Beta-binomial distribution: ``n`` trials, success probability ``Beta(alpha, beta)``.

    Mean ``n alpha / (alpha + beta)``; as ``alpha + beta -> inf`` with the mean fixed it tends to the
    binomial distribution.

    Examples
    --------
    >>> round(math.exp(BetaBinomialDistribution(2, 1.0, 1.0).log_density(1)), 12)  # uniform on 0..2
    0.333333333333
    """

    parameters = (
        Parameter("n", _is_count, "a non-negative integer", parse=int),
        positive("alpha"),
        positive("beta"),
    )
    encoder_class = BetaBinomialEncoder
    record_type = int
    n: int
    alpha: float
    beta: float

    def __init__(self, n: int, alpha: float, beta: float) -> None:
        self._set_parameters(n, alpha, beta)
        self.n = int(n)
        self._log_norm = float(log_rising_factorial(self.alpha + self.beta, float(self.n)))
        self._table: np.ndarray | None = None

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.binomial(self.n, rng.beta(self.alpha, self.beta, size=size))

    def _log_pmf(self, x: np.ndarray, log_comb: np.ndarray) -> np.ndarray:
        return (  # type: ignore[no-any-return]
            log_comb
            + log_rising_factorial(self.alpha, x)
            + log_rising_factorial(self.beta, self.n - x)
            - self._log_norm
        )

    def log_density(self, x: int) -> float:
        value = float(x)
        if not (0.0 <= value <= self.n and value == math.floor(value)):
            return -math.inf
        xs = np.array([value])
        return float(self._log_pmf(xs, log_binomial_coefficient(self.n, xs))[0])

    def log_pmf_table(self) -> np.ndarray:
        """``ln P(X = k)`` for ``k = 0..n``, shape (n + 1,), computed once per model."""
        if self._table is None:
            k = np.arange(self.n + 1, dtype=np.float64)
            self._table = self._log_pmf(k, log_binomial_coefficient(self.n, k))
        return self._table

    def seq_log_density(self, enc: BinomialEncoded) -> np.ndarray:
        x = enc.x
        if self.n + 1 <= _TABLE_ROWS * len(x) + 1024:
            index = x.astype(np.int64)
            inside = index <= self.n
            if inside.all():
                return self.log_pmf_table()[index]
            return np.where(inside, self.log_pmf_table()[np.minimum(index, self.n)], -np.inf)
        if enc.n == self.n and enc.log_comb is not None:
            return self._log_pmf(x, enc.log_comb)
        inside = x <= self.n
        xs = np.where(inside, x, 0.0)
        return np.where(inside, self._log_pmf(xs, log_binomial_coefficient(self.n, xs)), -np.inf)

    def estimator(self, pseudo_count: float | None = None) -> BetaBinomialEstimator:
        if pseudo_count is None:
            return BetaBinomialEstimator(n=self.n)
        return BetaBinomialEstimator(n=self.n, pseudo_count=pseudo_count, suff_stat=(self.alpha, self.beta))

    def encoder(self) -> BetaBinomialEncoder:
        return BetaBinomialEncoder(self.n)

    def n_free_parameters(self) -> int:
        return 2  # n (trials) is given or scanned, not estimated

    def moments(self) -> tuple[float, float]:
        s = self.alpha + self.beta
        mean = self.n * self.alpha / s
        return mean, mean * self.beta * (s + self.n) / (s * (s + 1.0))

    def _log_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``ln P(X <= k)`` and ``ln P(X > k)`` for ``k = 0..n`` (log-sum-exp accumulations of the pmf,
        so neither tail underflows or loses its digits to ``1 - cdf``)."""
        log_pmf = self.log_pmf_table()
        log_cdf = np.logaddexp.accumulate(log_pmf)
        upper = np.logaddexp.accumulate(log_pmf[::-1])[::-1]  # ln P(X >= k)
        log_sf = np.append(upper[1:], -np.inf)
        # each from the complement where that is the smaller sum (fewer digits lost to the additions)
        with np.errstate(divide="ignore"):
            log_cdf, log_sf = (
                np.where(log_cdf > -_LN2, log1m_exp(-log_sf), log_cdf),
                np.where(log_sf > -_LN2, log1m_exp(-log_cdf), log_sf),
            )
        log_cdf[-1] = 0.0
        return log_cdf, log_sf

    def _table_lookup(self, x: np.ndarray, table: np.ndarray, below: float) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        k = np.floor(np.clip(x, -1.0, float(self.n)))
        out = table[np.maximum(k, 0.0).astype(np.int64)]
        return np.where(k < 0, below, out)

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        """``ln P(X <= x)`` from the cumulative log-sum-exp of the pmf over ``0..n``."""
        return self._table_lookup(x, self._log_tables()[0], -math.inf)

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        """``ln P(X > x)`` from the reverse cumulative log-sum-exp of the pmf over ``0..n``."""
        return self._table_lookup(x, self._log_tables()[1], 0.0)

    def quantile(self, p: np.ndarray) -> np.ndarray:
        """The least ``k`` in ``0..n`` with ``P(X <= k) >= p`` (searched in the cdf table)."""
        p = np.asarray(p, dtype=np.float64)
        log_cdf, log_sf = self._log_tables()
        # the cdf from the side that holds its digits: 1 - sf where the survival is small
        cdf = np.where(log_cdf < -math.log(2.0), np.exp(log_cdf), -np.expm1(log_sf))
        cdf = np.maximum.accumulate(cdf)
        k = np.searchsorted(cdf, p * (1.0 - 1e-14), side="left")
        return np.minimum(k, self.n).astype(np.float64)


class BetaBinomialAccumulator(Accumulator):
    """The weighted histogram of the counts: value an array of shape (n + 1,), entry ``k`` the total
    weight of the rows equal to ``k`` (grown to the largest count seen while ``n`` is unknown); merged
    by addition."""

    encoder_class = BetaBinomialEncoder

    def __init__(self, keys: Any = None, n: int | None = None) -> None:
        self.keys = keys
        self.n = n
        self.counts = np.zeros(0 if n is None else n + 1)

    def _add(self, counts: np.ndarray) -> None:
        if counts.size > self.counts.size:
            counts = counts.copy()
            counts[: self.counts.size] += self.counts
            self.counts = counts
        else:
            self.counts[: counts.size] += counts

    def seq_update(self, enc: BinomialEncoded, weights: np.ndarray, estimate: Any) -> None:
        if len(enc.x):
            self._add(np.bincount(enc.x.astype(np.int64), weights=np.asarray(weights, dtype=np.float64)))
        return None

    def combine(self, value: Any) -> BetaBinomialAccumulator:
        self._add(np.asarray(value, dtype=np.float64))
        return self

    def value(self) -> np.ndarray:
        return self.counts.copy()

    def _scale(self, factor: float) -> None:
        self.counts = factor * self.counts

    def from_value(self, value: Any) -> BetaBinomialAccumulator:
        self.counts = np.array(value, dtype=np.float64)
        return self

    def make_encoder(self) -> BetaBinomialEncoder:
        return BetaBinomialEncoder(self.n)

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.keys, self.n)


def moment_shapes(n: int, k: np.ndarray, h: np.ndarray, s_low: float, s_high: float) -> tuple[float, float]:
    """Method-of-moments ``(alpha, beta)`` of the histogram ``h`` over the counts ``k`` in ``0..n``:
    ``p = mean / n`` and ``rho = 1 / (alpha + beta + 1) = (var / (n p q) - 1) / (n - 1)`` (Johnson, Kemp
    & Kotz, *Univariate Discrete Distributions*, 3rd ed., section 6.7.2), the precision ``alpha +
    beta`` clipped to ``[s_low, s_high]`` (``s_high`` for under-dispersed data, 2 when ``n < 2``)."""
    total = float(h.sum())
    mean = float(h @ k) / total
    p = min(max(mean / n, 1e-3), 1.0 - 1e-3) if n > 0 else 0.5
    var = float(h @ (k - mean) ** 2) / total
    rho = (var / (n * p * (1.0 - p)) - 1.0) / (n - 1.0) if n >= 2 else 1.0 / 3.0
    s = 1.0 / rho - 1.0 if rho > 0 else s_high
    s = min(max(s, s_low), s_high)
    return p * s, (1.0 - p) * s


def _log_likelihood(n: int, k: np.ndarray, h: np.ndarray, a: float, b: float) -> float:
    total = float(h.sum())
    return float(
        h @ (log_rising_factorial(a, k) + log_rising_factorial(b, n - k))
        - total * log_rising_factorial(a + b, float(n))
    )


def _mm_step(n: int, k: np.ndarray, h: np.ndarray, a: float, b: float) -> tuple[float, float]:
    """Minka's fixed-point (MM) step (see the module docstring): never lowers the likelihood."""
    den = float(h.sum()) * float(digamma_difference(a + b, float(n)))
    return (
        a * float(h @ digamma_difference(a, k)) / den,
        b * float(h @ digamma_difference(b, n - k)) / den,
    )


def _newton_step(n: int, k: np.ndarray, h: np.ndarray, a: float, b: float) -> tuple[float, float] | None:
    """Newton's step in ``(log alpha, log beta)``, or None where the Hessian is not negative definite."""
    total = float(h.sum())
    dd_s = total * float(digamma_difference(a + b, float(n)))
    ga = float(h @ digamma_difference(a, k)) - dd_s
    gb = float(h @ digamma_difference(b, n - k)) - dd_s
    # trigamma(r + x) - trigamma(r), from the accurate "excess" form
    ts = total * float(trigamma_difference_excess(a + b, float(n)) - n / ((a + b) * (a + b + n)))
    ta = float(h @ (trigamma_difference_excess(a, k) - k / (a * (a + k)))) - ts
    tb = float(h @ (trigamma_difference_excess(b, n - k) - (n - k) / (b * (b + n - k)))) - ts
    huu, hvv, huv = a * a * ta + a * ga, b * b * tb + b * gb, -a * b * ts
    det = huu * hvv - huv * huv
    if not (huu < 0 and det > 0):
        return None
    gu, gv = a * ga, b * gb
    du, dv = -(hvv * gu - huv * gv) / det, -(huu * gv - huv * gu) / det
    scale = min(1.0, 2.0 / max(abs(du), abs(dv), 1e-300))  # at most a factor e^2 per step
    return a * math.exp(scale * du), b * math.exp(scale * dv)


def solve_shapes(
    n: int, h: np.ndarray, start: tuple[float, float], low: float, high: float
) -> tuple[float, float]:
    """The weighted maximum-likelihood ``(alpha, beta)`` in ``[low, high]^2`` of the histogram ``h``
    (shape (n + 1,)) of counts ``0..n``, from ``start`` (see the module docstring): safeguarded Newton
    steps with Minka's MM step as the fallback, each accepted only if the likelihood does not drop,
    until a step changes both by at most :data:`SHAPE_RTOL` relative. ``n >= 2``."""
    keep = np.flatnonzero(h)
    k, hk = keep.astype(np.float64), h[keep]
    a, b = start
    ll = _log_likelihood(n, k, hk, a, b)
    slack = 1e-13 * max(abs(ll), 1.0)  # a rise within rounding counts as no change
    for _ in range(_MAX_ITERATIONS):
        best = None
        for step in (_newton_step(n, k, hk, a, b), _mm_step(n, k, hk, a, b)):
            if step is None:
                continue
            na, nb = (min(max(v, low), high) for v in step)
            new_ll = _log_likelihood(n, k, hk, na, nb)
            if new_ll >= ll - slack:
                best = na, nb, new_ll
                break
        if best is None:
            return a, b
        na, nb, new_ll = best
        done = abs(na - a) <= SHAPE_RTOL * a and abs(nb - b) <= SHAPE_RTOL * b
        a, b, ll = na, nb, max(new_ll, ll)
        if done:
            break
    return a, b


@register_estimator("beta_binomial")
@dataclass(eq=False, repr=False)
class BetaBinomialEstimator(Estimator):
    """Maximum-likelihood beta-binomial fit from the histogram of the counts (see the module docstring).

    Parameters
    ----------
    n : int, optional
        Number of trials; None learns it by a scan (the largest count in the data).
    pseudo_count : float, optional
        Number of pseudo-observations drawn "on average" from ``BetaBinomial(n, alpha0, beta0)``: ``pc``
        times its pmf is added to the histogram (a prior whose fit alone is ``(alpha0, beta0)``).
    suff_stat : (float, float), optional
        Prior ``(alpha0, beta0)`` (default (1, 1) when only ``pseudo_count`` is given).
    min_shape, max_shape : float
        Bounds of ``alpha`` and ``beta`` (defaults 1e-8 and 1e8); under-dispersed data (whose
        likelihood rises towards the binomial limit) give a precision near ``max_shape``.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or alpha = beta = 1). With ``n < 2`` only
    the mean ``n alpha / (alpha + beta)`` is identified: its MLE, with ``alpha + beta`` that of the prior
    (2 without one).
    """

    n: int | None = option(None, lambda v: _is_count(v), "a non-negative integer", read=int)
    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda a0, b0: a0 > 0 and b0 > 0, "a pair (alpha0, beta0) of positive finite numbers"
    )
    min_shape: float = bound(DEFAULT_MIN_SHAPE)
    max_shape: float = bound(DEFAULT_MAX_SHAPE)
    name: str | None = None
    keys: str | None = None

    def check(self) -> None:
        check_bounds(self, "min_shape", "max_shape")

    def accumulator_factory(self) -> BetaBinomialAccumulator:
        return BetaBinomialAccumulator(self.keys, self.n)

    def encoder(self) -> BetaBinomialEncoder:
        return BetaBinomialEncoder(self.n)

    def with_scan(self, scan: Any) -> BetaBinomialEstimator:
        if self.n is not None or scan is None:
            return self
        return dataclasses.replace(self, n=int(scan))

    def estimate(self, nobs: float | None, value: Any) -> BetaBinomialDistribution:
        if self.n is None:
            raise SpecError("BetaBinomialEstimator: n is unknown; fix n=... or apply a scan with with_scan()")
        n = self.n
        h = np.zeros(n + 1)
        counts = np.asarray(value, dtype=np.float64)[: n + 1]
        h[: counts.size] = counts
        pc = self.pseudo_count or 0.0
        a0, b0 = (1.0, 1.0) if self.suff_stat is None else self.suff_stat
        low, high = self.min_shape, self.max_shape
        prior = BetaBinomialDistribution(n, min(max(a0, low), high), min(max(b0, low), high))
        if pc > 0:
            h = h + pc * np.exp(prior.log_pmf_table())
        total = float(h.sum())
        if not (total > 0 and np.isfinite(h).all()):
            return prior
        k = np.arange(n + 1, dtype=np.float64)
        if n < 2:
            p = float(h @ k) / (n * total) if n > 0 else 0.5
            s = (a0 + b0) if self.suff_stat is not None else 2.0
            p = min(max(p, low / s), 1.0 - low / s)
            return BetaBinomialDistribution(n, min(max(p * s, low), high), min(max((1 - p) * s, low), high))
        start = moment_shapes(n, k, h, 2.0 * low, 0.5 * high)
        a, b = solve_shapes(n, h, start, low, high)
        return BetaBinomialDistribution(n, a, b)
