"""Univariate Gaussian: ``GaussianDistribution(mu, sigma2)``.

Records are real numbers. Statistics are accumulated around a shift (the previous model's mean
when there is one) so the variance does not suffer from the cancellation of E[x^2] - E[x]^2 when
the mean is large compared with the spread; ``combine`` re-expresses a value at another shift
exactly, so any split of the data merged in any order gives the same statistics up to rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from mixle_spark.stats._scalar_common import (
    ScalarEncoder,
    ScalarFamily,
    finite,
    floor,
    positive,
    prior_tuple,
)
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Estimator,
    register_distribution,
    register_estimator,
)

__all__ = [
    "GaussianAccumulator",
    "GaussianDistribution",
    "GaussianEncoder",
    "GaussianEstimator",
]

_LOG_2PI = math.log(2.0 * math.pi)


def shift_moments(sw: float, s1: float, s2: float, old: float, new: float) -> tuple[float, float]:
    """Re-express weighted sums of (x - old) and (x - old)^2 as sums of (x - new), (x - new)^2."""
    d = old - new
    return s1 + sw * d, s2 + 2.0 * d * s1 + sw * d * d


class GaussianEncoder(ScalarEncoder):
    """Reads finite numbers (any Arrow integer / floating / decimal column) into a float64 array of
    shape (n,)."""

    estimator_name = "GaussianEstimator"
    schema_expectation = "a numeric column"


@register_distribution("gaussian")
class GaussianDistribution(ScalarFamily):
    """Normal distribution with mean ``mu`` and variance ``sigma2``.

    Examples
    --------
    >>> d = GaussianDistribution(0.0, 1.0)
    >>> round(d.log_density(0.0), 6)
    -0.918939
    """

    parameters = (finite("mu"), positive("sigma2"))
    mu: float
    sigma2: float
    encoder_class = GaussianEncoder

    def __init__(self, mu: float, sigma2: float) -> None:
        self._set_parameters(mu, sigma2)
        self._log_const = -0.5 * (_LOG_2PI + math.log(self.sigma2))

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.normal(self.mu, math.sqrt(self.sigma2), size=size)

    def log_density(self, x: float) -> float:
        return self._log_const - 0.5 * (float(x) - self.mu) ** 2 / self.sigma2

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        d = enc - self.mu
        return self._log_const - (0.5 / self.sigma2) * (d * d)

    # The mixture fast path: log p(x) = [1, x - c, (x - c)^2] @ coefficients, c = the batch mean.
    def feature_key(self) -> Any:
        return ("gaussian",)

    def seq_features(self, enc: np.ndarray) -> np.ndarray:
        c = _center(enc)
        d = enc - c
        return np.column_stack([np.ones_like(d), d, d * d])

    def feature_coefficients(self, enc: np.ndarray) -> np.ndarray:
        m = self.mu - _center(enc)
        a = 0.5 / self.sigma2
        return np.array([self._log_const - a * m * m, 2.0 * a * m, -a])


def _center(enc: np.ndarray) -> float:
    return float(enc.mean()) if len(enc) else 0.0


class GaussianAccumulator(Accumulator):
    """Sums ``sw = Σw``, ``s1 = Σw(x - shift)``, ``s2 = Σw(x - shift)^2``; value ``(sw, s1, s2, shift)``."""

    model_class: ClassVar[type[Distribution]] = GaussianDistribution
    """The model whose mean a fresh accumulator's statistics are centred on."""
    encoder_class: ClassVar[type[ScalarEncoder]] = GaussianEncoder

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sw = 0.0
        self.s1 = 0.0
        self.s2 = 0.0
        self.shift = 0.0

    def _shift_from(self, estimate: Any) -> None:
        # The first batch of a fresh accumulator fixes the shift: the current model's mean.
        if self.sw == 0.0 and isinstance(estimate, self.model_class):
            self.shift = estimate.mu  # type: ignore[attr-defined]

    def seq_update(self, enc: np.ndarray, weights: np.ndarray, estimate: Any) -> None:
        self._shift_from(estimate)
        d = enc - self.shift
        wd = weights * d
        self.sw += float(weights.sum())
        self.s1 += float(wd.sum())
        self.s2 += float(np.dot(wd, d))
        return None

    def add_feature_sums(self, sums: np.ndarray, enc: np.ndarray, estimate: Any) -> None:
        """Add ``sums = Σ w [1, x - c, (x - c)^2]`` computed by the mixture fast path."""
        self._shift_from(estimate)
        c = _center(enc)
        s1, s2 = shift_moments(float(sums[0]), float(sums[1]), float(sums[2]), c, self.shift)
        self.sw += float(sums[0])
        self.s1 += s1
        self.s2 += s2

    def combine(self, value: Any) -> GaussianAccumulator:
        sw, s1, s2, shift = value
        if self.sw == 0.0:
            self.shift = shift
        s1, s2 = shift_moments(sw, s1, s2, shift, self.shift)
        self.sw += sw
        self.s1 += s1
        self.s2 += s2
        return self

    def value(self) -> tuple[float, float, float, float]:
        return (self.sw, self.s1, self.s2, self.shift)

    def _scale(self, factor: float) -> None:
        # The shift is where the sums are taken, not a sum: it stays.
        self.sw *= factor
        self.s1 *= factor
        self.s2 *= factor

    def from_value(self, value: Any) -> GaussianAccumulator:
        self.sw, self.s1, self.s2, self.shift = (float(v) for v in value)
        return self


@register_estimator("gaussian")
@dataclass(eq=False, repr=False)
class GaussianEstimator(Estimator):
    """Maximum-likelihood (or, with ``pseudo_count``, MAP-like) Gaussian fit.

    Parameters
    ----------
    pseudo_count : float, optional
        Weight of the prior ``suff_stat = (mu0, sigma2_0)``; without ``suff_stat`` only the
        variance is shrunk towards ``sigma2_0 = 1``.
    suff_stat : (float, float), optional
        Prior mean and variance.
    min_var : float
        Variance floor (default 1e-8): a component that collapses onto one value keeps a finite
        density instead of becoming NaN.
    keys : str, optional
        Tie this Gaussian's parameters to every other site with the same key.
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda mu0, var0: var0 > 0, "a pair (mu0, sigma2_0) of finite numbers with sigma2_0 > 0"
    )
    min_var: float = floor(1e-8)
    name: str | None = None
    keys: str | None = None

    accumulator_class = GaussianAccumulator
    encoder_class = GaussianEncoder

    def estimate(self, nobs: float | None, value: Any) -> GaussianDistribution:
        sw, s1, s2, shift = value
        pc = self.pseudo_count or 0.0
        if sw <= 0.0 and (pc == 0.0 or self.suff_stat is None):
            mu0, var0 = self.suff_stat if self.suff_stat is not None else (shift, 1.0)
            return GaussianDistribution(mu0, max(var0, self.min_var))
        mean_d = s1 / sw if sw > 0 else 0.0
        ss = max(s2 - sw * mean_d * mean_d, 0.0)  # Σw(x - mean)^2
        if self.suff_stat is not None and pc > 0:
            mu0, var0 = self.suff_stat
            d0 = mu0 - shift
            mean_all = (sw * mean_d + pc * d0) / (sw + pc)
            ss += sw * (mean_d - mean_all) ** 2 + pc * (var0 + (d0 - mean_all) ** 2)
            mu, var = shift + mean_all, ss / (sw + pc)
        else:
            mu, var = shift + mean_d, (ss + pc) / (sw + pc)
        if not math.isfinite(var):
            var = self.min_var
        return GaussianDistribution(mu, max(var, self.min_var))
