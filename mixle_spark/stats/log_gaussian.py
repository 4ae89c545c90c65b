"""Log-normal: ``LogGaussianDistribution(mu, sigma2)``, i.e. ``log x ~ N(mu, sigma2)``.

Records are positive real numbers; ``log p(x) = log N(log x; mu, sigma2) - log x``. The encoded batch
is ``log x`` (float64, shape (n,)), which is all the density needs; the statistics and M-step are the
Gaussian ones on ``log x`` (shifted moments, see :mod:`mixle_spark.stats.gaussian`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._normal_cdf import log_ndtr, ndtri
from mixle_spark.stats._scalar_common import (
    ScalarEncoder,
    ScalarFamily,
    finite,
    floor,
    positive,
    prior_tuple,
)
from mixle_spark.stats._validate import check_range
from mixle_spark.stats.base import (
    Estimator,
    register_distribution,
    register_estimator,
)
from mixle_spark.stats.gaussian import (
    GaussianAccumulator,
    GaussianDistribution,
    GaussianEstimator,
)

__all__ = [
    "LogGaussianAccumulator",
    "LogGaussianDistribution",
    "LogGaussianEncoder",
    "LogGaussianEstimator",
]

_LOG_2PI = math.log(2.0 * math.pi)


def _center(enc: np.ndarray) -> float:
    return float(enc.mean()) if len(enc) else 0.0


class LogGaussianEncoder(ScalarEncoder):
    """Reads positive finite numbers into ``log x``, a float64 array of shape (n,)."""

    computes_float32 = True
    location_family = True

    estimator_name = "LogGaussianEstimator"
    expectation = "a positive finite number"

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected, low=0.0, low_open=True)

    def pack(self, x: np.ndarray) -> np.ndarray:
        return np.log(x)


@register_distribution("log_gaussian")
class LogGaussianDistribution(ScalarFamily):
    """Log-normal distribution: ``log x`` is normal with mean ``mu`` and variance ``sigma2``.

    Examples
    --------
    >>> round(LogGaussianDistribution(0.0, 1.0).log_density(1.0), 6)
    -0.918939
    """

    parameters = (finite("mu"), positive("sigma2"))
    mu: float
    sigma2: float
    encoder_class = LogGaussianEncoder

    def __init__(self, mu: float, sigma2: float) -> None:
        self._set_parameters(mu, sigma2)
        self._log_const = -0.5 * (_LOG_2PI + math.log(self.sigma2))

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.lognormal(self.mu, math.sqrt(self.sigma2), size=size)

    def log_density(self, x: float) -> float:
        x = float(x)
        if not (0.0 < x < math.inf):
            return -math.inf
        y = math.log(x)
        return self._log_const - 0.5 * (y - self.mu) ** 2 / self.sigma2 - y

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        d = enc - self.mu
        return self._log_const - (0.5 / self.sigma2) * (d * d) - enc

    def moments(self) -> tuple[float, float]:
        """Mean ``exp(mu + sigma2 / 2)``, variance ``expm1(sigma2) exp(2 mu + sigma2)`` (inf on overflow)."""
        try:
            return math.exp(self.mu + 0.5 * self.sigma2), math.expm1(self.sigma2) * math.exp(
                2.0 * self.mu + self.sigma2
            )
        except OverflowError:
            return math.inf, math.inf

    def _log_z(self, x: np.ndarray, sign: float) -> np.ndarray:
        """``sign (ln x - mu) / sigma`` (``-inf`` for ``x <= 0`` when ``sign`` is 1)."""
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.log(np.maximum(x, 0.0))
        return sign * (y - self.mu) / math.sqrt(self.sigma2)  # type: ignore[no-any-return]

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        return log_ndtr(self._log_z(x, 1.0))  # type: ignore[no-any-return]

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        return log_ndtr(self._log_z(x, -1.0))  # type: ignore[no-any-return]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.exp(self.mu + math.sqrt(self.sigma2) * ndtri(np.asarray(p, dtype=np.float64)))  # type: ignore[no-any-return]

    # Mixture fast path: with y = log x and c the batch mean of y,
    # log p(x) = [1, y - c, (y - c)^2] @ [const - a m^2 - c, 2 a m - 1, -a], a = 1/(2 sigma2), m = mu - c.
    def feature_key(self) -> Any:
        return ("log_gaussian",)

    def seq_features(self, enc: np.ndarray) -> np.ndarray:
        d = enc - _center(enc)
        return np.column_stack([np.ones_like(d), d, d * d])

    def feature_coefficients(self, enc: np.ndarray) -> np.ndarray:
        c = _center(enc)
        m = self.mu - c
        a = 0.5 / self.sigma2
        return np.array([self._log_const - a * m * m - c, 2.0 * a * m - 1.0, -a])


class LogGaussianAccumulator(GaussianAccumulator):
    """The Gaussian statistics of ``log x``: value ``(sw, s1, s2, shift)``, shift on the log scale
    (a fresh accumulator is centred on the current model's log-mean)."""

    model_class = LogGaussianDistribution
    encoder_class = LogGaussianEncoder


@register_estimator("log_gaussian")
@dataclass(eq=False, repr=False)
class LogGaussianEstimator(Estimator):
    """Maximum-likelihood log-normal fit: the Gaussian fit of ``log x``.

    Parameters
    ----------
    pseudo_count, suff_stat, min_var :
        As for :class:`~mixle_spark.stats.gaussian.GaussianEstimator`, on the log scale: ``suff_stat``
        is the prior ``(mu0, sigma2_0)`` of ``log x``; without it ``pseudo_count`` only shrinks the
        variance towards 1; ``min_var`` (default 1e-8) floors ``sigma2``.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or ``mu`` = the accumulator shift, 0 for a
    fresh accumulator, and ``sigma2 = 1``).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda mu0, var0: var0 > 0, "a pair (mu0, sigma2_0) of finite numbers with sigma2_0 > 0"
    )
    min_var: float = floor(1e-8)
    name: str | None = None
    keys: str | None = None

    accumulator_class = LogGaussianAccumulator
    encoder_class = LogGaussianEncoder

    def estimate(self, nobs: float | None, value: Any) -> LogGaussianDistribution:
        # The M-step is the Gaussian one on the log scale.
        gaussian = GaussianEstimator(self.pseudo_count, self.suff_stat, self.min_var)
        fit: GaussianDistribution = gaussian.estimate(nobs, value)
        return LogGaussianDistribution(fit.mu, fit.sigma2)
