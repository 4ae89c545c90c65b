"""Beta: ``BetaDistribution(alpha, beta)`` on the open interval (0, 1).

Records are numbers strictly between 0 and 1; ``log p(x) = (alpha - 1) log x + (beta - 1) log(1 - x)
- log B(alpha, beta)``. The encoded batch is ``(log x, log(1 - x))`` (the latter by ``log1p(-x)``) and
the statistics ``(Σw, Σw log x, Σw log(1 - x))``.

The M-step maximises the (strictly concave) log-likelihood by Newton's method on the digamma system
``digamma(alpha) - digamma(alpha + beta) = mean log x``, ``digamma(beta) - digamma(alpha + beta) =
mean log(1 - x)`` (see :func:`solve_beta`): each step is shortened so that neither parameter drops
below half its value, backtracked until the likelihood does not decrease, and clipped to
``[min_shape, max_shape]``. Iteration stops when a step changes both parameters by at most
``1e-12`` relative (:data:`BETA_RTOL`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import DataValueError
from mixle_spark.stats._incomplete import log_beta_i, solve_increasing
from mixle_spark.stats._scalar_common import (
    FeatureSumAccumulator,
    ScalarEncoder,
    ScalarFamily,
    bound,
    check_bounds,
    positive,
    prior_tuple,
)
from mixle_spark.stats._special import digamma, gammaln, trigamma
from mixle_spark.stats._validate import check_range, first_true
from mixle_spark.stats.base import (
    Estimator,
    register_distribution,
    register_estimator,
)

__all__ = [
    "BetaAccumulator",
    "BetaDistribution",
    "BetaEncoder",
    "BetaEstimator",
]

DEFAULT_MIN_SHAPE = 1e-8
DEFAULT_MAX_SHAPE = 1e8
BETA_RTOL = 1e-12
"""Relative change of both parameters at which the Newton iteration of :func:`solve_beta` stops."""
_MAX_ITERATIONS = 500
_QUADRATIC_REGION = 1e-3  # steps this small (relative) are taken whole: no line search needed


def _log_beta(a: float, b: float) -> float:
    ga, gb, gab = gammaln(np.array([a, b, a + b]))
    return float(ga + gb - gab)


def _objective(a: float, b: float, s1: float, s2: float) -> float:
    """Mean log-likelihood up to a constant: (a - 1) s1 + (b - 1) s2 - log B(a, b)."""
    return (a - 1.0) * s1 + (b - 1.0) * s2 - _log_beta(a, b)


def _start(s1: float, s2: float) -> tuple[float, float]:
    """Closed-form start from the geometric means G = exp(s1), H = exp(s2) (exact as a, b -> inf)."""
    g, h = math.exp(s1), math.exp(s2)
    gap = 1.0 - g - h  # > 0 unless the data are (nearly) constant
    if not gap > 0:
        return 1e6 * g, 1e6 * h
    return 0.5 + g / (2.0 * gap), 0.5 + h / (2.0 * gap)


def solve_beta(
    mean_log_x: float,
    mean_log_1mx: float,
    min_shape: float = DEFAULT_MIN_SHAPE,
    max_shape: float = DEFAULT_MAX_SHAPE,
) -> tuple[float, float]:
    """The maximum-likelihood ``(alpha, beta)`` for the mean logs ``E log x`` and ``E log(1 - x)``.

    Newton's method on the concave log-likelihood, safeguarded to keep both parameters positive and
    the likelihood non-decreasing, clipped to ``[min_shape, max_shape]``; stops when both parameters
    change by at most :data:`BETA_RTOL` relative. Nearly constant data (whose likelihood grows without
    bound along ``alpha / (alpha + beta) = x``) end at ``max_shape`` for the larger parameter.
    """
    s1, s2 = float(mean_log_x), float(mean_log_1mx)
    a, b = (min(max(v, min_shape), max_shape) for v in _start(s1, s2))
    f = _objective(a, b, s1, s2)
    for _ in range(_MAX_ITERATIONS):
        point = np.array([a, b, a + b])
        psi_a, psi_b, psi_ab = (float(v) for v in digamma(point))
        tri_a, tri_b, tri_ab = (float(v) for v in trigamma(point))
        g1 = s1 - psi_a + psi_ab
        g2 = s2 - psi_b + psi_ab
        h11, h22, h12 = tri_ab - tri_a, tri_ab - tri_b, tri_ab
        det = h11 * h22 - h12 * h12
        if not (det > 0 and math.isfinite(det)):
            break
        da = -(h22 * g1 - h12 * g2) / det
        db = -(h11 * g2 - h12 * g1) / det
        t = 1.0
        if da < 0:
            t = min(t, 0.5 * a / -da)
        if db < 0:
            t = min(t, 0.5 * b / -db)
        small = abs(t * da) <= _QUADRATIC_REGION * a and abs(t * db) <= _QUADRATIC_REGION * b
        while True:
            na = min(max(a + t * da, min_shape), max_shape)
            nb = min(max(b + t * db, min_shape), max_shape)
            nf = _objective(na, nb, s1, s2)
            if small or nf >= f or t < 1e-12:
                break
            t *= 0.5
        done = abs(na - a) <= BETA_RTOL * a and abs(nb - b) <= BETA_RTOL * b
        a, b, f = na, nb, nf
        if done:
            break
    return a, b


class BetaEncoder(ScalarEncoder):
    """Reads numbers in (0, 1) into ``(log x, log(1 - x))``, two float64 arrays of shape (n,)."""

    computes_float32 = True

    def seed_values(self, enc: Any) -> np.ndarray:
        return np.exp(enc[0])  # type: ignore[no-any-return]

    estimator_name = "BetaEstimator"
    expectation = "a number strictly between 0 and 1"

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected, low=0.0, low_open=True, high=1.0)
        ones = x == 1.0
        if ones.any():
            i = first_true(ones)
            raise DataValueError(
                self.expected, value=float(x[i]), row=i, n_rows=len(x), count=int(ones.sum())
            )

    def pack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.log(x), np.log1p(-x)


@register_distribution("beta")
class BetaDistribution(ScalarFamily):
    """Beta distribution with shape parameters ``alpha`` and ``beta`` (mean ``alpha / (alpha + beta)``).

    Examples
    --------
    >>> round(BetaDistribution(2.0, 1.0).log_density(0.25), 12) == round(math.log(0.5), 12)
    True
    """

    parameters = (positive("alpha"), positive("beta"))
    alpha: float
    beta: float
    encoder_class = BetaEncoder

    def __init__(self, alpha: float, beta: float) -> None:
        self._set_parameters(alpha, beta)
        self._log_const = -_log_beta(self.alpha, self.beta)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return np.clip(rng.beta(self.alpha, self.beta, size=size), _OPEN_LOW, _OPEN_HIGH)

    def log_density(self, x: float) -> float:
        x = float(x)
        if not (0.0 < x < 1.0):
            return -math.inf
        return self._log_const + (self.alpha - 1.0) * math.log(x) + (self.beta - 1.0) * math.log1p(-x)

    def moments(self) -> tuple[float, float]:
        total = self.alpha + self.beta
        return self.alpha / total, self.alpha * self.beta / (total * total * (total + 1.0))

    def _tails(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ln I_x(alpha, beta), ln(1 - I_x(alpha, beta)))``, x clipped to [0, 1]."""
        x = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
        return log_beta_i(np.full(x.shape, self.alpha), np.full(x.shape, self.beta), x)

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        return self._tails(x)[0]

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        return self._tails(x)[1]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        """Solves ``ln I = ln p`` below the median and ``-ln(1 - I) = -ln(1 - p)`` above it for
        ``u = logit x`` (Newton safeguarded by bisection)."""
        p = np.asarray(p, dtype=np.float64)
        flat = p.ravel()
        upper = flat > 0.5
        with np.errstate(divide="ignore"):
            target = np.where(upper, -np.log1p(-flat), np.log(flat))
        out = np.where(flat >= 1.0, 1.0, 0.0)
        idx = np.flatnonzero((flat > 0.0) & (flat < 1.0))
        if len(idx):
            up = upper[idx]

            def g(u: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                log_x, log_1mx = -np.logaddexp(0.0, -u), -np.logaddexp(0.0, u)
                x, y = np.exp(log_x), np.exp(log_1mx)
                ones = np.ones(len(u))
                lower, upper_tail = log_beta_i(self.alpha * ones, self.beta * ones, x, y)
                tail = np.where(up[rows], upper_tail, lower)
                with np.errstate(over="ignore"):  # x (1 - x) f(x) / tail
                    slope = np.exp(self._log_const + self.alpha * log_x + self.beta * log_1mx - tail)
                return np.where(up[rows], -upper_tail, lower), slope

            lo, hi = np.full(len(idx), -745.0), np.full(len(idx), 37.0)
            u = solve_increasing(g, target[idx], lo, hi, np.zeros(len(idx)))
            out[idx] = np.exp(-np.logaddexp(0.0, -u))
        return out.reshape(p.shape)

    def seq_log_density(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        log_x, log_1mx = enc
        return self._log_const + (self.alpha - 1.0) * log_x + (self.beta - 1.0) * log_1mx

    # Mixture fast path: log p(x) = [1, log x, log(1 - x)] @ [-log B, alpha - 1, beta - 1].
    def feature_key(self) -> Any:
        return ("beta",)

    def seq_features(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        log_x, log_1mx = enc
        return np.column_stack([np.ones_like(log_x), log_x, log_1mx])

    def feature_coefficients(self, enc: Any) -> np.ndarray:
        return np.array([self._log_const, self.alpha - 1.0, self.beta - 1.0])


_OPEN_LOW = float(np.nextafter(0.0, 1.0))
_OPEN_HIGH = float(np.nextafter(1.0, 0.0))


class BetaAccumulator(FeatureSumAccumulator):
    """Sums ``(Σw, Σw log x, Σw log(1 - x))`` (the encoder's two arrays)."""

    features = 2

    encoder_class = BetaEncoder


@register_estimator("beta")
@dataclass(eq=False, repr=False)
class BetaEstimator(Estimator):
    """Maximum-likelihood beta fit (Newton on the digamma system, see :func:`solve_beta`).

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations drawn "on average" from ``Beta(alpha0, beta0)`` = ``suff_stat``:
        they add ``pc * (digamma(alpha0) - digamma(alpha0 + beta0))`` to Σw log x and the same with
        ``beta0`` to Σw log(1 - x). As ``pc`` grows the estimate tends to ``(alpha0, beta0)``.
    suff_stat : (float, float), optional
        Prior shapes (default (1, 1), the uniform distribution, when only ``pseudo_count`` is given).
    min_shape, max_shape : float
        Bounds of both parameters (defaults 1e-8 and 1e8). Data that are all equal (or nearly so)
        give a very peaked but finite density with the larger parameter at ``max_shape``.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or alpha = beta = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda a0, b0: a0 > 0 and b0 > 0, "a pair (alpha0, beta0) of positive finite numbers"
    )
    min_shape: float = bound(DEFAULT_MIN_SHAPE)
    max_shape: float = bound(DEFAULT_MAX_SHAPE)
    name: str | None = None
    keys: str | None = None

    accumulator_class = BetaAccumulator
    encoder_class = BetaEncoder

    def check(self) -> None:
        check_bounds(self, "min_shape", "max_shape")

    def _clip(self, value: float) -> float:
        return min(max(value, self.min_shape), self.max_shape)

    def estimate(self, nobs: float | None, value: Any) -> BetaDistribution:
        sw, slog, slog1m = value
        pc = self.pseudo_count or 0.0
        a0, b0 = (1.0, 1.0) if self.suff_stat is None else self.suff_stat
        if pc > 0:
            psi_ab = float(digamma(a0 + b0))
            sw += pc
            slog += pc * (float(digamma(a0)) - psi_ab)
            slog1m += pc * (float(digamma(b0)) - psi_ab)
        if not sw > 0:
            return BetaDistribution(self._clip(a0), self._clip(b0))
        s1, s2 = slog / sw, slog1m / sw
        if not (math.isfinite(s1) and math.isfinite(s2) and s1 < 0 and s2 < 0):
            return BetaDistribution(self._clip(a0), self._clip(b0))
        alpha, beta = solve_beta(s1, s2, self.min_shape, self.max_shape)
        return BetaDistribution(alpha, beta)
