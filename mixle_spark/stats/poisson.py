"""Poisson: ``PoissonDistribution(lam)``.

Records are non-negative integer counts (floats with integral values are accepted);
``log p(x) = x log(lam) - lam - log x!``. The encoded batch is ``(x, log x!)`` so scoring needs no
special function per E-step; statistics ``(Σw, Σw x)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._incomplete import bisect_count, log_gamma_pq
from mixle_spark.stats._scalar_common import (
    CountEncoder,
    OneParameterEstimator,
    ScalarFamily,
    SumAccumulator,
    floor,
    positive,
    prior,
)
from mixle_spark.stats._special import log_factorial
from mixle_spark.stats.base import register_distribution, register_estimator

__all__ = [
    "PoissonAccumulator",
    "PoissonDistribution",
    "PoissonEncoder",
    "PoissonEstimator",
]

DEFAULT_MIN_LAM = 1e-12


def _is_count(x: float) -> bool:
    return 0.0 <= x < math.inf and x == math.floor(x)


class PoissonEncoder(CountEncoder):
    computes_float32 = True
    estimator_name = "PoissonEstimator"


@register_distribution("poisson")
class PoissonDistribution(ScalarFamily):
    """Poisson distribution with rate ``lam``.

    Examples
    --------
    >>> round(PoissonDistribution(2.0).log_density(0), 12) == -2.0
    True
    """

    parameters = (positive("lam"),)
    encoder_class = PoissonEncoder
    record_type = int
    lam: float

    def __init__(self, lam: float) -> None:
        self._set_parameters(lam)
        self._log_lam = math.log(self.lam)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.poisson(self.lam, size=size)

    def log_density(self, x: int) -> float:
        value = float(x)
        if not _is_count(value):
            return -math.inf
        return value * self._log_lam - self.lam - float(log_factorial(value))

    def seq_log_density(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x, log_fact = enc
        return x * self._log_lam - self.lam - log_fact

    def moments(self) -> tuple[float, float]:
        return self.lam, self.lam

    def _tails(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ln F(x), ln S(x))``: ``F(k) = Q(k + 1, lam)`` (the regularized upper incomplete gamma)."""
        k = np.floor(np.asarray(x, dtype=np.float64))
        log_p, log_q = log_gamma_pq(np.maximum(k, 0.0) + 1.0, np.full(k.shape, self.lam))
        below = k < 0
        return np.where(below, -np.inf, log_q), np.where(below, 0.0, log_p)

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        return self._tails(x)[0]

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        return self._tails(x)[1]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        cap = math.ceil(self.lam + 60.0 * math.sqrt(self.lam) + 800.0)
        k = bisect_count(self.log_cdf, self.log_survival, p, 0.0, cap)
        return np.where(p >= 1.0, math.inf, k)

    # Mixture fast path: log p(x) = [1, x, log x!] @ [-lam, log lam, -1].
    def feature_key(self) -> Any:
        return ("poisson",)

    def seq_features(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x, log_fact = enc
        return np.column_stack([np.ones_like(x), x, log_fact])

    def feature_coefficients(self, enc: Any) -> np.ndarray:
        return np.array([-self.lam, self._log_lam, -1.0])


class PoissonAccumulator(SumAccumulator):
    """Sums ``(Σw, Σw x)``; its own factory."""

    encoder_class = PoissonEncoder

    def values(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return enc[0]


@register_estimator("poisson")
@dataclass(eq=False, repr=False)
class PoissonEstimator(OneParameterEstimator):
    """Maximum-likelihood Poisson fit ``lam = Σw x / Σw``.

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations with mean ``suff_stat``:
        ``lam = (Σw x + pc * lam0) / (Σw + pc)``.
    suff_stat : float, optional
        Prior rate ``lam0`` (default 1.0 when only ``pseudo_count`` is given).
    min_lam : float
        Rate floor (default 1e-12): a component that sees only zeros keeps a finite density for
        positive counts.
    keys : str, optional
        Tie this parameter to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or 1.0).
    """

    pseudo_count: float | None = None
    suff_stat: float | None = prior()
    min_lam: float = floor(DEFAULT_MIN_LAM)
    name: str | None = None
    keys: str | None = None

    distribution_class = PoissonDistribution
    accumulator_class = PoissonAccumulator
    encoder_class = PoissonEncoder
    floor_name = "min_lam"
    prior_default = 1.0
