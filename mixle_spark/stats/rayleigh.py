"""Rayleigh: ``RayleighDistribution(sigma)`` with ``sigma`` the scale (``scipy.stats.rayleigh`` with
``loc=0``, ``scale=sigma``).

Records are positive real numbers; ``log p(x) = log x - 2 log sigma - x^2 / (2 sigma^2)``. The
encoded batch is ``(x, log x)`` and the statistics ``(Σw, Σw x^2)``, merged by addition; the M-step
is the closed form ``sigma^2 = Σw x^2 / (2 Σw)``.
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
    "RayleighAccumulator",
    "RayleighDistribution",
    "RayleighEncoder",
    "RayleighEstimator",
]

DEFAULT_MIN_SIGMA = 1e-12


class RayleighEncoder(ScalarEncoder):
    """Reads positive finite numbers into ``(x, log x)``, two float64 arrays of shape (n,).

    A zero is outside the support (its density is 0), as it is for the gamma and log-normal."""

    computes_float32 = True

    estimator_name = "RayleighEstimator"
    expectation = "a positive finite number"

    def seed_values(self, enc: Any) -> np.ndarray:
        return np.asarray(enc[1], dtype=np.float64)  # log x: a scale family is multiplicative

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected, low=0.0, low_open=True)

    def pack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x, np.log(x)


@register_distribution("rayleigh")
class RayleighDistribution(ScalarFamily):
    """Rayleigh distribution with scale ``sigma`` (mean ``sigma sqrt(pi / 2)``).

    Examples
    --------
    >>> round(RayleighDistribution(2.0).log_density(2.0), 12) == round(math.log(0.5) - 0.5, 12)
    True
    """

    parameters = (positive("sigma"),)
    encoder_class = RayleighEncoder
    sigma: float

    def __init__(self, sigma: float) -> None:
        self._set_parameters(sigma)
        self._log_sigma2 = 2.0 * math.log(self.sigma)
        self._half_precision = 0.5 / (self.sigma * self.sigma)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.rayleigh(self.sigma, size=size)

    def log_density(self, x: float) -> float:
        x = float(x)
        if not (0.0 < x < math.inf):
            return -math.inf
        return math.log(x) - self._log_sigma2 - x * x * self._half_precision

    def seq_log_density(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x, log_x = enc
        return log_x - self._log_sigma2 - x * x * self._half_precision

    # Mixture fast path: log p(x) = [1, x^2, log x] @ [-2 log sigma, -1 / (2 sigma^2), 1].
    def feature_key(self) -> Any:
        return ("rayleigh",)

    def seq_features(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x, log_x = enc
        return np.column_stack([np.ones_like(x), x * x, log_x])

    def feature_coefficients(self, enc: Any) -> np.ndarray:
        return np.array([-self._log_sigma2, -self._half_precision, 1.0])


class RayleighAccumulator(SumAccumulator):
    """Sums ``(Σw, Σw x^2)``; its own factory."""

    encoder_class = RayleighEncoder

    def values(self, enc: Any) -> np.ndarray:
        x = enc[0]
        return x * x  # type: ignore[no-any-return]


@register_estimator("rayleigh")
@dataclass(eq=False, repr=False)
class RayleighEstimator(OneParameterEstimator):
    """Maximum-likelihood Rayleigh fit ``sigma^2 = Σw x^2 / (2 Σw)`` (the weighted form of the MLE in
    Johnson, Kotz & Balakrishnan, *Continuous Univariate Distributions* vol. 1, 2nd ed., ch. 18, and of
    ``scipy.stats.rayleigh.fit`` with ``floc=0``).

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations drawn "on average" from ``Rayleigh(sigma0)`` (their mean
        square is ``2 sigma0^2``): ``sigma^2 = (Σw x^2 + 2 pc sigma0^2) / (2 (Σw + pc))``.
    suff_stat : float, optional
        Prior scale ``sigma0`` (default 1.0 when only ``pseudo_count`` is given).
    min_sigma : float
        Scale floor (default 1e-12).
    keys : str, optional
        Tie this parameter to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or 1.0).
    """

    pseudo_count: float | None = None
    suff_stat: float | None = prior()
    min_sigma: float = floor(DEFAULT_MIN_SIGMA)
    name: str | None = None
    keys: str | None = None

    distribution_class = RayleighDistribution
    accumulator_class = RayleighAccumulator
    encoder_class = RayleighEncoder
    floor_name = "min_sigma"
    prior_default = 1.0

    def point_estimate(self, sw: float, sx: float, pc: float, prior: float) -> float:
        total = sw + pc
        return math.sqrt((sx + 2.0 * pc * prior * prior) / (2.0 * total)) if total > 0 else prior
