"""Inverse gamma: ``InverseGammaDistribution(a, b)`` with shape ``a`` and scale ``b`` (``1 / x`` is
gamma with shape ``a`` and rate ``b``; ``scipy.stats.invgamma(a, scale=b)``).

Records are positive real numbers; ``log p(x) = a log b - lgamma(a) - (a + 1) log x - b / x``. The
encoded batch is ``(1 / x, log x)`` and the statistics ``(Σw, Σw / x, Σw log x)``, merged by addition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._scalar_common import (
    FeatureSumAccumulator,
    ScalarEncoder,
    ScalarFamily,
    bound,
    check_bounds,
    positive,
    prior_tuple,
)
from mixle_spark.stats._special import digamma, gammaln
from mixle_spark.stats._validate import check_range
from mixle_spark.stats.base import Estimator, register_distribution, register_estimator
from mixle_spark.stats.gamma import DEFAULT_MAX_K, DEFAULT_MIN_K, solve_shape

__all__ = [
    "InverseGammaAccumulator",
    "InverseGammaDistribution",
    "InverseGammaEncoder",
    "InverseGammaEstimator",
]


class InverseGammaEncoder(ScalarEncoder):
    """Reads positive finite numbers into ``(1 / x, log x)``, two float64 arrays of shape (n,)."""

    computes_float32 = True

    estimator_name = "InverseGammaEstimator"
    expectation = "a positive finite number"

    def seed_values(self, enc: Any) -> np.ndarray:
        return np.asarray(enc[1], dtype=np.float64)  # log x: the scale is multiplicative

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected, low=0.0, low_open=True)

    def pack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return 1.0 / x, np.log(x)


@register_distribution("inverse_gamma")
class InverseGammaDistribution(ScalarFamily):
    """Inverse gamma distribution with shape ``a`` and scale ``b`` (mean ``b / (a - 1)`` for a > 1).

    Examples
    --------
    >>> round(InverseGammaDistribution(1.0, 2.0).log_density(1.0), 12) == round(math.log(2.0) - 2.0, 12)
    True
    """

    parameters = (positive("a"), positive("b"))
    encoder_class = InverseGammaEncoder
    a: float
    b: float

    def __init__(self, a: float, b: float) -> None:
        self._set_parameters(a, b)
        self._log_const = self.a * math.log(self.b) - gammaln(self.a)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return self.b / rng.gamma(self.a, 1.0, size=size)

    def log_density(self, x: float) -> float:
        x = float(x)
        if not (0.0 < x < math.inf):
            return -math.inf
        return self._log_const - (self.a + 1.0) * math.log(x) - self.b / x

    def seq_log_density(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        inv_x, log_x = enc
        return self._log_const - (self.a + 1.0) * log_x - self.b * inv_x

    # Mixture fast path: log p(x) = [1, 1 / x, log x] @ [const, -b, -(a + 1)].
    def feature_key(self) -> Any:
        return ("inverse_gamma",)

    def seq_features(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        inv_x, log_x = enc
        return np.column_stack([np.ones_like(inv_x), inv_x, log_x])

    def feature_coefficients(self, enc: Any) -> np.ndarray:
        return np.array([self._log_const, -self.b, -(self.a + 1.0)])


class InverseGammaAccumulator(FeatureSumAccumulator):
    """Sums ``(Σw, Σw / x, Σw log x)`` (the encoder's two arrays)."""

    features = 2

    encoder_class = InverseGammaEncoder


@register_estimator("inverse_gamma")
@dataclass(eq=False, repr=False)
class InverseGammaEstimator(Estimator):
    """Maximum-likelihood inverse gamma fit. ``y = 1 / x`` is gamma with shape ``a`` and rate ``b``, so
    the likelihood equations are the gamma's in ``y``: ``b = a Σw / Σw y`` and
    ``log a - digamma(a) = log(mean y) - mean(log y) = log(Σw / x / Σw) + Σw log x / Σw``, solved by
    the gamma's bracketed Newton step (:func:`~mixle_spark.stats.gamma.solve_shape`; T. P. Minka,
    *Estimating a Gamma distribution*, 2002; N. L. Johnson, S. Kotz, N. Balakrishnan, *Continuous
    Univariate Distributions* vol. 1, 2nd ed., ch. 17 section 7).

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations drawn "on average" from ``InverseGamma(a0, b0)`` =
        ``suff_stat``: they add ``pc * a0 / b0`` to Σw / x and ``pc * (log b0 - digamma(a0))`` to
        Σw log x.
    suff_stat : (float, float), optional
        Prior shape and scale (default (1, 1) when only ``pseudo_count`` is given).
    min_a, max_a : float
        Bounds of the shape (defaults 1e-8 and 1e8). Data that are all equal give ``a = max_a``.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or a = 1, b = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda a0, b0: a0 > 0 and b0 > 0, "a pair (a0, b0) of positive finite numbers"
    )
    min_a: float = bound(DEFAULT_MIN_K)
    max_a: float = bound(DEFAULT_MAX_K)
    name: str | None = None
    keys: str | None = None

    accumulator_class = InverseGammaAccumulator
    encoder_class = InverseGammaEncoder

    def check(self) -> None:
        check_bounds(self, "min_a", "max_a")

    def estimate(self, nobs: float | None, value: Any) -> InverseGammaDistribution:
        sw, s_inv, slog = value
        pc = self.pseudo_count or 0.0
        a0, b0 = (1.0, 1.0) if self.suff_stat is None else self.suff_stat
        if pc > 0:
            sw, s_inv, slog = sw + pc, s_inv + pc * a0 / b0, slog + pc * (math.log(b0) - digamma(a0))
        prior = InverseGammaDistribution(min(max(a0, self.min_a), self.max_a), b0)
        if not (sw > 0 and s_inv > 0):
            return prior
        mean_inv = s_inv / sw
        s = math.log(mean_inv) + slog / sw
        a = solve_shape(s, self.min_a, self.max_a) if math.isfinite(s) else self.max_a
        b = a / mean_inv
        if not (math.isfinite(b) and b > 0):
            return prior
        return InverseGammaDistribution(a, b)
