"""Geometric: ``GeometricDistribution(p)``, the number of trials up to and including the first success.

Records are integers ``x >= 1``; ``P(x) = (1 - p)^(x - 1) p``. Statistics ``(Σw, Σw x)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._cdf import log1m_exp
from mixle_spark.stats._scalar_common import (
    OneParameterEstimator,
    Parameter,
    ScalarEncoder,
    ScalarFamily,
    SumAccumulator,
    check_counts,
    floor,
    prior,
    safe_log,
)
from mixle_spark.stats.base import register_distribution, register_estimator

__all__ = [
    "GeometricAccumulator",
    "GeometricDistribution",
    "GeometricEncoder",
    "GeometricEstimator",
]

DEFAULT_MIN_P = 1e-12


class GeometricEncoder(ScalarEncoder):
    """Reads integers >= 1 into a float64 array of shape (n,)."""

    computes_float32 = True

    embedding = "count"

    estimator_name = "GeometricEstimator"
    expectation = "an integer >= 1 (trials up to the first success)"

    def validate(self, x: np.ndarray) -> None:
        check_counts(x, self.expected, low=1.0)


@register_distribution("geometric")
class GeometricDistribution(ScalarFamily):
    """Geometric distribution on ``{1, 2, ...}`` with success probability ``p`` in (0, 1].

    Examples
    --------
    >>> GeometricDistribution(0.25).log_density(1) == math.log(0.25)
    True
    """

    parameters = (Parameter("p", lambda p: 0.0 < p <= 1.0, "a probability in (0, 1]"),)
    encoder_class = GeometricEncoder
    record_type = int
    p: float

    def __init__(self, p: float) -> None:
        self._set_parameters(p)
        self._log_p = math.log(self.p)
        self._log_q = math.log1p(-self.p) if self.p < 1.0 else -math.inf

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.geometric(self.p, size=size)

    def log_density(self, x: int) -> float:
        value = float(x)
        if not (1.0 <= value < math.inf and value == math.floor(value)):
            return -math.inf
        if value == 1.0:  # avoids 0 * -inf when p = 1
            return self._log_p
        return self._log_p + (value - 1.0) * self._log_q

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        if self.p == 1.0:
            return np.where(enc == 1.0, 0.0, -np.inf)
        return self._log_p + (enc - 1.0) * self._log_q

    def moments(self) -> tuple[float, float]:
        return 1.0 / self.p, (1.0 - self.p) / (self.p * self.p)

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        """``ln P(X > x) = floor(x) ln(1 - p)`` for ``x >= 1`` (0 below the support)."""
        k = np.floor(np.maximum(np.asarray(x, dtype=np.float64), 0.0))
        with np.errstate(invalid="ignore"):
            return np.where(k > 0, k * self._log_q, 0.0)  # type: ignore[no-any-return]

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        k = np.floor(np.maximum(np.asarray(x, dtype=np.float64), 0.0))
        with np.errstate(invalid="ignore"):  # p = 1: 0 * -inf below, masked
            return np.where(k > 0, log1m_exp(-k * self._log_q), -np.inf)  # type: ignore[no-any-return]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        """``ceil(ln(1 - p) / ln(1 - q))``, at least 1 (``p`` = 1 gives ``inf``)."""
        p = np.asarray(p, dtype=np.float64)
        if self.p == 1.0:
            return np.ones_like(p)
        with np.errstate(divide="ignore"):
            k = np.ceil(np.log1p(-p) / self._log_q - 1e-12)
        return np.maximum(k, 1.0)

    # Mixture fast path: log p(x) = [1, x] @ [log p - log(1 - p), log(1 - p)].
    def feature_key(self) -> Any:
        return ("geometric",)

    def seq_features(self, enc: np.ndarray) -> np.ndarray:
        return np.column_stack([np.ones_like(enc), enc])

    def feature_coefficients(self, enc: Any) -> np.ndarray:
        log_q = safe_log(1.0 - self.p) if self.p == 1.0 else self._log_q
        return np.array([self._log_p - log_q, log_q])


class GeometricAccumulator(SumAccumulator):
    """Sums ``(Σw, Σw x)``; its own factory."""

    encoder_class = GeometricEncoder


@register_estimator("geometric")
@dataclass(eq=False, repr=False)
class GeometricEstimator(OneParameterEstimator):
    """Maximum-likelihood geometric fit ``p = Σw / Σw x``, clipped to ``[min_p, 1 - min_p]``.

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations with mean ``1 / p0`` trials:
        ``p = (Σw + pc) / (Σw x + pc / p0)``.
    suff_stat : float, optional
        Prior probability ``p0`` (default 0.5 when only ``pseudo_count`` is given).
    min_p : float
        Clip (default 1e-12): a component that saw only ones keeps a finite density for x > 1.
        ``min_p=0`` gives the plain MLE (p = 1 possible).
    keys : str, optional
        Tie this parameter to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or 0.5).
    """

    pseudo_count: float | None = None
    suff_stat: float | None = prior(lambda v: 0.0 < v <= 1.0, "a probability in (0, 1]")
    min_p: float = floor(DEFAULT_MIN_P, lambda v: 0.0 <= v < 0.5, "in [0, 0.5)")
    name: str | None = None
    keys: str | None = None

    distribution_class = GeometricDistribution
    accumulator_class = GeometricAccumulator
    encoder_class = GeometricEncoder
    floor_name = "min_p"
    prior_default = 0.5

    def point_estimate(self, sw: float, sx: float, pc: float, prior: float) -> float:
        # pc pseudo-observations with mean 1 / prior trials each.
        trials = sx + pc / prior
        return (sw + pc) / trials if sw + pc > 0 and trials > 0 else prior

    def apply_floor(self, value: float) -> float:
        # The clip keeps p > 0 even with min_p = 0 (the constructor needs p > 0).
        return min(max(value, self.floor, 1e-300), 1.0 - self.floor)
