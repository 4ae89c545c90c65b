"""Exponential: ``ExponentialDistribution(beta)`` with ``beta`` the scale (the mean).

Records are non-negative real numbers; ``log p(x) = -log(beta) - x / beta``. Statistics
``(Σw, Σw x)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._cdf import log1m_exp
from mixle_spark.stats._scalar_common import (
    OneParameterEstimator,
    ScalarEncoder,
    ScalarFamily,
    SumAccumulator,
    floor,
    positive,
    prior,
)
from mixle_spark.stats._validate import check_range
from mixle_spark.stats.base import register_distribution, register_estimator

__all__ = [
    "ExponentialAccumulator",
    "ExponentialDistribution",
    "ExponentialEncoder",
    "ExponentialEstimator",
]

DEFAULT_MIN_BETA = 1e-12


class ExponentialEncoder(ScalarEncoder):
    """Reads non-negative finite numbers into a float64 array of shape (n,)."""

    computes_float32 = True

    estimator_name = "ExponentialEstimator"
    expectation = "a non-negative finite number"

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected, low=0.0)


@register_distribution("exponential")
class ExponentialDistribution(ScalarFamily):
    """Exponential distribution with scale (mean) ``beta``.

    Examples
    --------
    >>> ExponentialDistribution(2.0).log_density(0.0) == -math.log(2.0)
    True
    """

    parameters = (positive("beta"),)
    encoder_class = ExponentialEncoder
    beta: float

    def __init__(self, beta: float) -> None:
        self._set_parameters(beta)
        self._log_beta = math.log(self.beta)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.exponential(self.beta, size=size)

    def log_density(self, x: float) -> float:
        x = float(x)
        if not (0.0 <= x < math.inf):
            return -math.inf
        return -self._log_beta - x / self.beta

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        return -self._log_beta - enc / self.beta

    def moments(self) -> tuple[float, float]:
        return self.beta, self.beta * self.beta

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        return log1m_exp(np.maximum(np.asarray(x, dtype=np.float64), 0.0) / self.beta)  # type: ignore[no-any-return]

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        return -np.maximum(np.asarray(x, dtype=np.float64), 0.0) / self.beta  # type: ignore[no-any-return]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return -self.beta * np.log1p(-np.asarray(p, dtype=np.float64))  # type: ignore[no-any-return]

    # Mixture fast path: log p(x) = [1, x] @ [-log beta, -1 / beta].
    def feature_key(self) -> Any:
        return ("exponential",)

    def seq_features(self, enc: np.ndarray) -> np.ndarray:
        return np.column_stack([np.ones_like(enc), enc])

    def feature_coefficients(self, enc: np.ndarray) -> np.ndarray:
        return np.array([-self._log_beta, -1.0 / self.beta])


class ExponentialAccumulator(SumAccumulator):
    """Sums ``(Σw, Σw x)``; its own factory."""

    encoder_class = ExponentialEncoder


@register_estimator("exponential")
@dataclass(eq=False, repr=False)
class ExponentialEstimator(OneParameterEstimator):
    """Maximum-likelihood exponential fit ``beta = Σw x / Σw``.

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations with mean ``suff_stat`` added to the data:
        ``beta = (Σw x + pc * beta0) / (Σw + pc)``.
    suff_stat : float, optional
        Prior scale ``beta0`` (default 1.0 when only ``pseudo_count`` is given).
    min_beta : float
        Scale floor (default 1e-12): data that are all zero keep a finite density.
    keys : str, optional
        Tie this parameter to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or 1.0).
    """

    pseudo_count: float | None = None
    suff_stat: float | None = prior()
    min_beta: float = floor(DEFAULT_MIN_BETA)
    name: str | None = None
    keys: str | None = None

    distribution_class = ExponentialDistribution
    accumulator_class = ExponentialAccumulator
    encoder_class = ExponentialEncoder
    floor_name = "min_beta"
    prior_default = 1.0
