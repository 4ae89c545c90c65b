"""Gamma: ``GammaDistribution(k, theta)`` with shape ``k`` and scale ``theta`` (mean ``k theta``).

Records are positive real numbers; the encoded batch is ``(x, log x)`` and the statistics
``(Σw, Σw x, Σw log x)``. The M-step solves ``log k - digamma(k) = log(mean) - mean(log x)`` for the
shape by Newton's method safeguarded by bisection inside ``[min_k, max_k]`` (see :func:`solve_shape`),
then ``theta = mean / k``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._incomplete import log_gamma_pq, solve_increasing
from mixle_spark.stats._scalar_common import (
    FeatureSumAccumulator,
    ScalarEncoder,
    ScalarFamily,
    bound,
    check_bounds,
    positive,
    prior_tuple,
)
from mixle_spark.stats._special import digamma, gammaln, log_minus_digamma, trigamma
from mixle_spark.stats._validate import check_range
from mixle_spark.stats.base import (
    Estimator,
    register_distribution,
    register_estimator,
)

__all__ = [
    "GammaAccumulator",
    "GammaDistribution",
    "GammaEncoder",
    "GammaEstimator",
    "solve_shape",
]

DEFAULT_MIN_K = 1e-8
DEFAULT_MAX_K = 1e8
SHAPE_RTOL = 1e-12
_MAX_ITERATIONS = 200


def solve_shape(s: float, min_k: float = DEFAULT_MIN_K, max_k: float = DEFAULT_MAX_K) -> float:
    """The shape ``k`` in ``[min_k, max_k]`` with ``log k - digamma(k) = s``.

    ``log k - digamma(k)`` decreases from +inf to 0, so the root is unique for ``s > 0``. Newton steps
    (from the Minka / Choi-Wette closed-form start) are kept inside a shrinking bracket and replaced by
    a geometric bisection when they leave it; iteration stops when a step changes ``k`` by at most
    ``1e-12`` relative. Returns ``max_k`` when ``s`` is at or below ``log k - digamma(k)`` at ``max_k``
    (nearly constant data, including ``s <= 0`` from rounding) and ``min_k`` at the other end.
    """
    if not s > log_minus_digamma(max_k):
        return max_k
    if s >= log_minus_digamma(min_k):
        return min_k
    lo, hi = min_k, max_k
    k = (3.0 - s + math.sqrt((s - 3.0) ** 2 + 24.0 * s)) / (12.0 * s)
    k = min(max(k, lo), hi)
    for _ in range(_MAX_ITERATIONS):
        f = log_minus_digamma(k) - s
        if f > 0:
            lo = k  # the function decreases: the root is above k
        else:
            hi = k
        slope = 1.0 / k - trigamma(k)
        step = f / slope if slope < 0 else 0.0
        new = k - step
        if not (lo < new < hi):
            new = math.sqrt(lo * hi)
        if abs(new - k) <= SHAPE_RTOL * k:
            return new
        k = new
    return k


class GammaEncoder(ScalarEncoder):
    """Reads positive finite numbers into ``(x, log x)``, two float64 arrays of shape (n,)."""

    computes_float32 = True

    def seed_values(self, enc: Any) -> np.ndarray:
        return np.asarray(enc[1], dtype=np.float64)  # log x: the scale of a Gamma is multiplicative

    estimator_name = "GammaEstimator"
    expectation = "a positive finite number"

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected, low=0.0, low_open=True)

    def pack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x, np.log(x)


@register_distribution("gamma")
class GammaDistribution(ScalarFamily):
    """Gamma distribution with shape ``k`` and scale ``theta``.

    Examples
    --------
    >>> round(GammaDistribution(1.0, 2.0).log_density(1.0), 12) == round(-math.log(2.0) - 0.5, 12)
    True
    """

    parameters = (positive("k"), positive("theta"))
    k: float
    theta: float
    encoder_class = GammaEncoder

    def __init__(self, k: float, theta: float) -> None:
        self._set_parameters(k, theta)
        self._log_const = -gammaln(self.k) - self.k * math.log(self.theta)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.gamma(self.k, self.theta, size=size)

    def log_density(self, x: float) -> float:
        x = float(x)
        if not (0.0 < x < math.inf):
            return -math.inf
        return self._log_const + (self.k - 1.0) * math.log(x) - x / self.theta

    def seq_log_density(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x, log_x = enc
        return self._log_const + (self.k - 1.0) * log_x - x / self.theta

    def moments(self) -> tuple[float, float]:
        return self.k * self.theta, self.k * self.theta * self.theta

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        """``ln P(k, x / theta)`` (the regularized lower incomplete gamma)."""
        return log_gamma_pq(np.full(np.shape(x), self.k), np.asarray(x, dtype=np.float64) / self.theta)[0]

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        """``ln Q(k, x / theta)``."""
        return log_gamma_pq(np.full(np.shape(x), self.k), np.asarray(x, dtype=np.float64) / self.theta)[1]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        """Solves ``ln P(k, z) = ln p`` below the median and ``-ln Q(k, z) = -ln(1 - p)`` above it for
        ``u = ln z`` (:func:`~mixle_spark.stats._incomplete.solve_increasing`), ``x = theta e^u``."""
        p = np.asarray(p, dtype=np.float64)
        flat = p.ravel()
        upper = flat > 0.5
        with np.errstate(divide="ignore"):
            target = np.where(upper, -np.log1p(-flat), np.log(flat))
        inside = (flat > 0.0) & (flat < 1.0)
        out = np.where(flat >= 1.0, math.inf, 0.0)
        idx = np.flatnonzero(inside)
        if len(idx):
            up, log_norm = upper[idx], -gammaln(self.k)

            def g(u: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                z = np.exp(u)
                log_p, log_q = log_gamma_pq(np.full(len(u), self.k), z)
                tail = np.where(up[rows], log_q, log_p)
                with np.errstate(over="ignore"):  # z f(z) / tail, f the unit-scale density
                    slope = np.exp(self.k * u - z + log_norm - tail)
                return np.where(up[rows], -log_q, log_p), slope

            start = np.full(len(idx), math.log(self.k))
            lo, hi = np.full(len(idx), -745.0), np.full(len(idx), math.log(2.0 * self.k + 2000.0))
            out[idx] = self.theta * np.exp(solve_increasing(g, target[idx], lo, hi, start))
        return out.reshape(p.shape)

    # Mixture fast path: log p(x) = [1, x, log x] @ [const, -1 / theta, k - 1].
    def feature_key(self) -> Any:
        return ("gamma",)

    def seq_features(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x, log_x = enc
        return np.column_stack([np.ones_like(x), x, log_x])

    def feature_coefficients(self, enc: Any) -> np.ndarray:
        return np.array([self._log_const, -1.0 / self.theta, self.k - 1.0])


class GammaAccumulator(FeatureSumAccumulator):
    """Sums ``(Σw, Σw x, Σw log x)`` (the encoder's two arrays)."""

    features = 2

    encoder_class = GammaEncoder


@register_estimator("gamma")
@dataclass(eq=False, repr=False)
class GammaEstimator(Estimator):
    """Maximum-likelihood gamma fit (shape by a bracketed Newton solve, see :func:`solve_shape`).

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations drawn "on average" from ``Gamma(k0, theta0)`` =
        ``suff_stat``: they add ``pc * k0 * theta0`` to Σw x and ``pc * (digamma(k0) + log theta0)``
        to Σw log x.
    suff_stat : (float, float), optional
        Prior shape and scale (default (1, 1) when only ``pseudo_count`` is given).
    min_k, max_k : float
        Bounds of the shape (defaults 1e-8 and 1e8). Data that are all equal (or nearly so, within
        rounding) give ``k = max_k``, a very peaked but finite density.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or k = 1, theta = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda k0, theta0: k0 > 0 and theta0 > 0, "a pair (k0, theta0) of positive finite numbers"
    )
    min_k: float = bound(DEFAULT_MIN_K)
    max_k: float = bound(DEFAULT_MAX_K)
    name: str | None = None
    keys: str | None = None

    accumulator_class = GammaAccumulator
    encoder_class = GammaEncoder

    def check(self) -> None:
        check_bounds(self, "min_k", "max_k")

    def estimate(self, nobs: float | None, value: Any) -> GammaDistribution:
        sw, sx, slog = value
        pc = self.pseudo_count or 0.0
        k0, theta0 = (1.0, 1.0) if self.suff_stat is None else self.suff_stat
        if pc > 0:
            sw, sx, slog = sw + pc, sx + pc * k0 * theta0, slog + pc * (digamma(k0) + math.log(theta0))
        if not (sw > 0 and sx > 0):
            return GammaDistribution(min(max(k0, self.min_k), self.max_k), theta0)
        mean = sx / sw
        s = math.log(mean) - slog / sw
        k = solve_shape(s, self.min_k, self.max_k) if math.isfinite(s) else self.max_k
        theta = mean / k
        if not (math.isfinite(theta) and theta > 0):
            return GammaDistribution(min(max(k0, self.min_k), self.max_k), theta0)
        return GammaDistribution(k, theta)
