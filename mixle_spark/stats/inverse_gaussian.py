"""Inverse Gaussian (Wald): ``InverseGaussianDistribution(mu, lam)`` with mean ``mu`` and shape ``lam``
(``scipy.stats.invgauss(mu / lam, loc=0, scale=lam)``; variance ``mu^3 / lam``).

Records are positive real numbers;
``log p(x) = (log lam - log(2 pi)) / 2 - 3/2 log x - lam (x - mu)^2 / (2 mu^2 x)``. The encoded batch
is ``(x, 1 / x, log x)`` and the statistics ``(Σw, Σw x, Σw / x, Σw log x)``, merged by addition; the
M-step is the closed form ``mu = Σw x / Σw``, ``1 / lam = Σw (1 / x) / Σw - 1 / mu``.
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
from mixle_spark.stats._validate import check_range
from mixle_spark.stats.base import Estimator, register_distribution, register_estimator

__all__ = [
    "InverseGaussianAccumulator",
    "InverseGaussianDistribution",
    "InverseGaussianEncoder",
    "InverseGaussianEstimator",
]

DEFAULT_MIN_LAM_OVER_MU = 1e-8
DEFAULT_MAX_LAM_OVER_MU = 1e8
_HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)


class InverseGaussianEncoder(ScalarEncoder):
    """Reads positive finite numbers into ``(x, 1 / x, log x)``, three float64 arrays of shape (n,)."""

    computes_float32 = True

    estimator_name = "InverseGaussianEstimator"
    expectation = "a positive finite number"

    def seed_values(self, enc: Any) -> np.ndarray:
        return np.asarray(enc[2], dtype=np.float64)  # log x: the family's scale is multiplicative

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected, low=0.0, low_open=True)

    def pack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return x, 1.0 / x, np.log(x)


@register_distribution("inverse_gaussian")
class InverseGaussianDistribution(ScalarFamily):
    """Inverse Gaussian distribution with mean ``mu`` and shape ``lam``.

    Examples
    --------
    >>> d = InverseGaussianDistribution(1.0, 1.0)
    >>> round(d.log_density(1.0), 12) == round(-0.5 * math.log(2 * math.pi), 12)
    True
    """

    parameters = (positive("mu"), positive("lam"))
    encoder_class = InverseGaussianEncoder
    mu: float
    lam: float

    def __init__(self, mu: float, lam: float) -> None:
        self._set_parameters(mu, lam)
        self._log_const = 0.5 * math.log(self.lam) - _HALF_LOG_TWO_PI
        self._scale = 0.5 * self.lam / (self.mu * self.mu)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.wald(self.mu, self.lam, size=size)

    def log_density(self, x: float) -> float:
        x = float(x)
        if not (0.0 < x < math.inf):
            return -math.inf
        d = x - self.mu
        return self._log_const - 1.5 * math.log(x) - self._scale * d * d / x

    def seq_log_density(self, enc: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        x, inv_x, log_x = enc
        d = x - self.mu
        return self._log_const - 1.5 * log_x - self._scale * d * d * inv_x  # type: ignore[no-any-return]

    # Mixture fast path: lam (x - mu)^2 / (2 mu^2 x) = lam x / (2 mu^2) - lam / mu + lam / (2 x), so
    # log p(x) = [1, x, 1 / x, log x] @ [const + lam / mu, -lam / (2 mu^2), -lam / 2, -3/2].
    def feature_key(self) -> Any:
        return ("inverse_gaussian",)

    def seq_features(self, enc: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        x, inv_x, log_x = enc
        return np.column_stack([np.ones_like(x), x, inv_x, log_x])

    def feature_coefficients(self, enc: Any) -> np.ndarray:
        return np.array([self._log_const + self.lam / self.mu, -self._scale, -0.5 * self.lam, -1.5])


class InverseGaussianAccumulator(FeatureSumAccumulator):
    """Sums ``(Σw, Σw x, Σw / x, Σw log x)`` (the encoder's three arrays)."""

    features = 3

    encoder_class = InverseGaussianEncoder


@register_estimator("inverse_gaussian")
@dataclass(eq=False, repr=False)
class InverseGaussianEstimator(Estimator):
    """Maximum-likelihood inverse Gaussian fit, in closed form: ``mu = Σw x / Σw`` and
    ``1 / lam = Σw (1 / x) / Σw - 1 / mu`` (Tweedie, "Statistical properties of inverse Gaussian
    distributions I", Ann. Math. Statist. 28 (1957), section 3; Chhikara & Folks, *The Inverse
    Gaussian Distribution* (1989), ch. 4; with weights, the weighted sums). ``scipy.stats.invgauss.fit``
    with ``floc=0`` gives the same ``(mu / lam, 0, lam)``.

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations drawn "on average" from ``InverseGaussian(mu0, lam0)`` =
        ``suff_stat``: they add ``pc * mu0`` to Σw x and ``pc * (1 / mu0 + 1 / lam0)`` (the mean of
        ``1 / x``) to Σw / x.
    suff_stat : (float, float), optional
        Prior mean and shape (default (1, 1) when only ``pseudo_count`` is given).
    min_lam_over_mu, max_lam_over_mu : float
        Bounds of the dimensionless shape ``lam / mu`` (defaults 1e-8 and 1e8; the squared
        coefficient of variation is ``mu / lam``). Data that are all equal (or nearly so, within
        rounding) give ``lam = max_lam_over_mu * mu``, a very peaked but finite density.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or mu = 1, lam = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda mu0, lam0: mu0 > 0 and lam0 > 0, "a pair (mu0, lam0) of positive finite numbers"
    )
    min_lam_over_mu: float = bound(DEFAULT_MIN_LAM_OVER_MU)
    max_lam_over_mu: float = bound(DEFAULT_MAX_LAM_OVER_MU)
    name: str | None = None
    keys: str | None = None

    accumulator_class = InverseGaussianAccumulator
    encoder_class = InverseGaussianEncoder

    def check(self) -> None:
        check_bounds(self, "min_lam_over_mu", "max_lam_over_mu")

    def estimate(self, nobs: float | None, value: Any) -> InverseGaussianDistribution:
        sw, sx, s_inv, _ = value
        pc = self.pseudo_count or 0.0
        mu0, lam0 = (1.0, 1.0) if self.suff_stat is None else self.suff_stat
        if pc > 0:
            sw, sx, s_inv = sw + pc, sx + pc * mu0, s_inv + pc * (1.0 / mu0 + 1.0 / lam0)
        mu = sx / sw if sw > 0 else math.nan
        if not (math.isfinite(mu) and mu > 0):
            return InverseGaussianDistribution(mu0, lam0)
        inv_lam = s_inv / sw - 1.0 / mu  # >= 0 by Jensen's inequality, up to rounding
        ratio = 1.0 / (mu * inv_lam) if inv_lam > 0 else math.inf
        ratio = min(max(ratio, self.min_lam_over_mu), self.max_lam_over_mu)
        return InverseGaussianDistribution(mu, ratio * mu)
