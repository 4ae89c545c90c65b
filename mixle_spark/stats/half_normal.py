"""Half-normal: ``HalfNormalDistribution(sigma)``, the absolute value of a centred Gaussian of standard
deviation ``sigma`` (``scipy.stats.halfnorm`` with ``loc=0``, ``scale=sigma``).

Records are non-negative real numbers; ``log p(x) = log(sqrt(2 / pi)) - log sigma - x^2 / (2 sigma^2)``.
The statistics are ``(Σw, Σw x^2)``, merged by addition; the M-step is the closed form
``sigma^2 = Σw x^2 / Σw``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    "HalfNormalAccumulator",
    "HalfNormalDistribution",
    "HalfNormalEncoder",
    "HalfNormalEstimator",
]

DEFAULT_MIN_SIGMA = 1e-12
_HALF_LOG_TWO_OVER_PI = 0.5 * math.log(2.0 / math.pi)


class HalfNormalEncoder(ScalarEncoder):
    """Reads non-negative finite numbers into a float64 array of shape (n,)."""

    computes_float32 = True

    estimator_name = "HalfNormalEstimator"
    expectation = "a non-negative finite number"

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected, low=0.0)


@register_distribution("half_normal")
class HalfNormalDistribution(ScalarFamily):
    """Half-normal distribution with scale ``sigma`` (mean ``sigma sqrt(2 / pi)``).

    Examples
    --------
    >>> round(HalfNormalDistribution(1.0).log_density(0.0), 12) == round(0.5 * math.log(2 / math.pi), 12)
    True
    """

    parameters = (positive("sigma"),)
    encoder_class = HalfNormalEncoder
    sigma: float

    def __init__(self, sigma: float) -> None:
        self._set_parameters(sigma)
        self._log_const = _HALF_LOG_TWO_OVER_PI - math.log(self.sigma)
        self._half_precision = 0.5 / (self.sigma * self.sigma)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return np.abs(rng.normal(0.0, self.sigma, size=size))

    def log_density(self, x: float) -> float:
        x = float(x)
        if not (0.0 <= x < math.inf):
            return -math.inf
        return self._log_const - x * x * self._half_precision

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        return self._log_const - enc * enc * self._half_precision  # type: ignore[no-any-return]

    # Mixture fast path: log p(x) = [1, x^2] @ [log(sqrt(2 / pi)) - log sigma, -1 / (2 sigma^2)].
    def feature_key(self) -> Any:
        return ("half_normal",)

    def seq_features(self, enc: np.ndarray) -> np.ndarray:
        return np.column_stack([np.ones_like(enc), enc * enc])

    def feature_coefficients(self, enc: np.ndarray) -> np.ndarray:
        return np.array([self._log_const, -self._half_precision])


class HalfNormalAccumulator(SumAccumulator):
    """Sums ``(Σw, Σw x^2)``; its own factory."""

    encoder_class = HalfNormalEncoder

    def values(self, enc: Any) -> np.ndarray:
        return enc * enc  # type: ignore[no-any-return]


@register_estimator("half_normal")
@dataclass(eq=False, repr=False)
class HalfNormalEstimator(OneParameterEstimator):
    """Maximum-likelihood half-normal fit ``sigma^2 = Σw x^2 / Σw`` (the weighted form of the MLE in
    Johnson, Kotz & Balakrishnan, *Continuous Univariate Distributions* vol. 1, 2nd ed., ch. 13, and of
    ``scipy.stats.halfnorm.fit`` with ``floc=0``).

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations drawn "on average" from ``HalfNormal(sigma0)`` (their mean
        square is ``sigma0^2``): ``sigma^2 = (Σw x^2 + pc sigma0^2) / (Σw + pc)``.
    suff_stat : float, optional
        Prior scale ``sigma0`` (default 1.0 when only ``pseudo_count`` is given).
    min_sigma : float
        Scale floor (default 1e-12): data that are all zero keep a finite density.
    keys : str, optional
        Tie this parameter to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or 1.0).
    """

    pseudo_count: float | None = None
    suff_stat: float | None = prior()
    min_sigma: float = floor(DEFAULT_MIN_SIGMA)
    name: str | None = None
    keys: str | None = None

    distribution_class = HalfNormalDistribution
    accumulator_class = HalfNormalAccumulator
    encoder_class = HalfNormalEncoder
    floor_name = "min_sigma"
    prior_default = 1.0

    def point_estimate(self, sw: float, sx: float, pc: float, prior: float) -> float:
        total = sw + pc
        return math.sqrt((sx + pc * prior * prior) / total) if total > 0 else prior
