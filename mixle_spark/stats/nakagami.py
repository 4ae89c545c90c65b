"""Nakagami: ``NakagamiDistribution(m, omega)`` with shape ``m`` and spread ``omega = E[x^2]``
(``scipy.stats.nakagami(nu=m, scale=sqrt(omega))``, ``loc=0``).

Records are positive real numbers; ``log p(x) = log 2 + m log(m / omega) - lgamma(m) + (2m - 1) log x
- m x^2 / omega``. ``x^2`` is gamma with shape ``m`` and scale ``omega / m`` (Nakagami 1960, "The
m-distribution"), so the maximum-likelihood fit is the gamma's on ``x^2``: ``omega`` is the mean of ``x^2``
and ``m`` solves ``log m - digamma(m) = log(mean x^2) - 2 mean(log x)``. The encoded batch is
``(x^2, log x)`` and the statistics ``(Σw, Σw x^2, Σw log x)``, merged by addition. A zero is outside the
support (``log x`` does not exist there; the density is 0 at 0 for ``m > 1/2``).
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
from mixle_spark.stats._special import digamma, gammaln, log_rising_factorial
from mixle_spark.stats._validate import check_range
from mixle_spark.stats.base import Estimator, register_distribution, register_estimator
from mixle_spark.stats.gamma import DEFAULT_MAX_K, DEFAULT_MIN_K, solve_shape

__all__ = [
    "NakagamiAccumulator",
    "NakagamiDistribution",
    "NakagamiEncoder",
    "NakagamiEstimator",
]

_LOG_2 = math.log(2.0)


class NakagamiEncoder(ScalarEncoder):
    """Reads positive finite numbers into ``(x^2, log x)``, two float64 arrays of shape (n,)."""

    computes_float32 = True

    estimator_name = "NakagamiEstimator"
    expectation = "a positive finite number"

    def seed_values(self, enc: Any) -> np.ndarray:
        return np.asarray(enc[1], dtype=np.float64)  # log x: the scale is multiplicative

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected, low=0.0, low_open=True)

    def pack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x * x, np.log(x)


@register_distribution("nakagami")
class NakagamiDistribution(ScalarFamily):
    """Nakagami distribution with shape ``m`` and spread ``omega`` (``m = 1`` is the Rayleigh with
    ``sigma^2 = omega / 2``; ``m = 1/2`` the half-normal with ``sigma^2 = omega``).

    Examples
    --------
    >>> d = NakagamiDistribution(1.0, 2.0)  # Rayleigh(sigma = 1): log x - x^2 / 2
    >>> round(d.log_density(1.5), 12) == round(math.log(1.5) - 1.125, 12)
    True
    """

    parameters = (positive("m"), positive("omega"))
    encoder_class = NakagamiEncoder
    m: float
    omega: float

    def __init__(self, m: float, omega: float) -> None:
        self._set_parameters(m, omega)
        self._log_const = _LOG_2 + self.m * math.log(self.m / self.omega) - gammaln(self.m)
        self._rate = self.m / self.omega

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return np.sqrt(rng.gamma(self.m, self.omega / self.m, size=size))

    def log_density(self, x: float) -> float:
        x = float(x)
        if not (0.0 < x < math.inf):
            return -math.inf
        return self._log_const + (2.0 * self.m - 1.0) * math.log(x) - self._rate * x * x

    def seq_log_density(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x2, log_x = enc
        return self._log_const + (2.0 * self.m - 1.0) * log_x - self._rate * x2  # type: ignore[no-any-return]

    def moments(self) -> tuple[float, float]:
        # E[x] = sqrt(omega / m) Gamma(m + 1/2) / Gamma(m); Var = omega - E[x]^2, written with expm1 so
        # a large m (Var ~ omega / (4 m)) keeps its digits.
        log_ratio = float(log_rising_factorial(self.m, 0.5))
        mean = math.sqrt(self.omega / self.m) * math.exp(log_ratio)
        return mean, -self.omega * math.expm1(2.0 * log_ratio - math.log(self.m))

    # Mixture fast path: log p(x) = [1, x^2, log x] @ [const, -m / omega, 2m - 1].
    def feature_key(self) -> Any:
        return ("nakagami",)

    def seq_features(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x2, log_x = enc
        return np.column_stack([np.ones_like(x2), x2, log_x])

    def feature_coefficients(self, enc: Any) -> np.ndarray:
        return np.array([self._log_const, -self._rate, 2.0 * self.m - 1.0])


class NakagamiAccumulator(FeatureSumAccumulator):
    """Sums ``(Σw, Σw x^2, Σw log x)`` (the encoder's two arrays)."""

    features = 2

    encoder_class = NakagamiEncoder


@register_estimator("nakagami")
@dataclass(eq=False, repr=False)
class NakagamiEstimator(Estimator):
    """Maximum-likelihood Nakagami fit: ``omega = Σw x^2 / Σw`` and ``m`` from the gamma shape equation
    ``log m - digamma(m) = log(omega) - 2 Σw log x / Σw`` (``x^2`` is Gamma(m, omega / m); Kolar, Jelinek &
    Kolar 2004, "Estimation of the Nakagami-m fading parameter"; T. P. Minka, *Estimating a Gamma
    distribution*, 2002), solved by the gamma's bracketed Newton step
    (:func:`~mixle_spark.stats.gamma.solve_shape`).

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations drawn "on average" from ``Nakagami(m0, omega0)`` = ``suff_stat``:
        they add ``pc * omega0`` to Σw x^2 and ``pc * (digamma(m0) + log(omega0 / m0)) / 2`` to Σw log x.
    suff_stat : (float, float), optional
        Prior shape and spread (default (1, 1) when only ``pseudo_count`` is given).
    min_m, max_m : float
        Bounds of the shape (defaults 1e-8 and 1e8). Data that are all equal give ``m = max_m``.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or m = 1, omega = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda m0, omega0: m0 > 0 and omega0 > 0, "a pair (m0, omega0) of positive finite numbers"
    )
    min_m: float = bound(DEFAULT_MIN_K)
    max_m: float = bound(DEFAULT_MAX_K)
    name: str | None = None
    keys: str | None = None

    accumulator_class = NakagamiAccumulator
    encoder_class = NakagamiEncoder

    def check(self) -> None:
        check_bounds(self, "min_m", "max_m")

    def estimate(self, nobs: float | None, value: Any) -> NakagamiDistribution:
        sw, sx2, slog = value
        pc = self.pseudo_count or 0.0
        m0, omega0 = (1.0, 1.0) if self.suff_stat is None else self.suff_stat
        if pc > 0:
            sw, sx2 = sw + pc, sx2 + pc * omega0
            slog = slog + pc * 0.5 * (digamma(m0) + math.log(omega0 / m0))
        prior = NakagamiDistribution(min(max(m0, self.min_m), self.max_m), omega0)
        if not (sw > 0 and sx2 > 0):
            return prior
        omega = sx2 / sw
        s = math.log(omega) - 2.0 * slog / sw
        m = solve_shape(s, self.min_m, self.max_m) if math.isfinite(s) else self.max_m
        if not (math.isfinite(omega) and omega > 0):
            return prior
        return NakagamiDistribution(m, omega)
