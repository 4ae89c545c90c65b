"""Univariate Gaussian: ``GaussianDistribution(mu, sigma2)``.

Records are real numbers. Statistics are accumulated around a shift (the previous model's mean
when there is one) so the variance does not suffer from the cancellation of E[x^2] - E[x]^2 when
the mean is large compared with the spread; ``combine`` re-expresses a value at another shift
exactly, so any split of the data merged in any order gives the same statistics up to rounding.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from mixle_spark.stats._normal_cdf import log_ndtr, ndtri
from mixle_spark.stats._parameters import option
from mixle_spark.stats._scalar_common import (
    ScalarEncoder,
    ScalarFamily,
    finite,
    floor,
    positive,
    prior_tuple,
)
from mixle_spark.stats._validate import arrow_float_values, float_values
from mixle_spark.stats._vector import _scan_of, merge_vector_scans
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


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _is_scale(value: Any) -> bool:
    return value is None or (math.isfinite(float(value)) and float(value) >= 0)


def shift_moments(sw: float, s1: float, s2: float, old: float, new: float) -> tuple[float, float]:
    """Re-express weighted sums of (x - old) and (x - old)^2 as sums of (x - new), (x - new)^2."""
    d = old - new
    return s1 + sw * d, s2 + 2.0 * d * s1 + sw * d * d


class GaussianEncoder(ScalarEncoder):
    """Reads finite numbers (any Arrow integer / floating / decimal column) into a float64 array of
    shape (n,).

    An estimator's encoder before its scan (``scanning``) asks for one: the values' count, sum and
    squared deviations (as a vector coordinate's), from which the estimator learns the column's
    variance, what its variance floor is relative to. The encoded batch does not depend on the scan.
    """

    computes_float32 = True
    location_family = True

    estimator_name = "GaussianEstimator"
    schema_expectation = "a numeric column"

    def __init__(self, scanning: bool = False) -> None:
        self.scanning = bool(scanning)

    @property
    def needs_scan(self) -> bool:
        return self.scanning

    def scan(self, records: Any) -> Any:
        return _variance_scan(float_values(records, self.expected))

    def scan_arrow(self, data: Any) -> Any:
        return _variance_scan(arrow_float_values(data, self.expected))

    def merge_scans(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        return merge_vector_scans(a, b)

    @property
    def rebases(self) -> bool:
        return True  # the batch is the values whatever the scan

    def __eq__(self, other: object) -> bool:  # a scan or none, the same encoding
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self).__name__)


def _variance_scan(x: np.ndarray) -> Any:
    """``(count, sum, m2)`` of the finite values (one coordinate of :func:`_scan_of`); None when none
    (a bad value is refused when the batch is encoded)."""
    x = x[np.isfinite(x)]
    return _scan_of(x[:, None]) if len(x) else None


def scanned_variance(scan: Any) -> float | None:
    """The column's variance from a merged scan (None when it saw no value)."""
    if scan is None or len(scan) < 3:
        return None
    count = float(np.asarray(scan[0], dtype=np.float64).ravel()[0])
    m2 = float(np.asarray(scan[2], dtype=np.float64).ravel()[0])
    return m2 / count if count > 0 else None


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

    def moments(self) -> tuple[float, float]:
        return self.mu, self.sigma2

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        return log_ndtr((np.asarray(x, dtype=np.float64) - self.mu) / math.sqrt(self.sigma2))  # type: ignore[no-any-return]

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        return log_ndtr((self.mu - np.asarray(x, dtype=np.float64)) / math.sqrt(self.sigma2))  # type: ignore[no-any-return]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        return self.mu + math.sqrt(self.sigma2) * ndtri(np.asarray(p, dtype=np.float64))  # type: ignore[no-any-return]

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
        Variance floor (default 1e-8), relative to the column's variance in the data (``scale``): a
        component that collapses onto one value keeps the variance ``min_var * scale`` and a finite
        density, whatever the unit the column is measured in. Where no ``scale`` is known (no scan,
        a constant column) the floor is ``min_var`` itself, the rule of earlier releases.
    keys : str, optional
        Tie this Gaussian's parameters to every other site with the same key.
    scale : float, optional
        The column's variance in the data, learnt by the scan (:meth:`with_scan`).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda mu0, var0: var0 > 0, "a pair (mu0, sigma2_0) of finite numbers with sigma2_0 > 0"
    )
    min_var: float = floor(1e-8)
    name: str | None = None
    keys: str | None = None
    scale: float | None = option(None, _is_scale, "a finite number >= 0", read=_number)

    accumulator_class = GaussianAccumulator
    encoder_class = GaussianEncoder

    def encoder(self) -> GaussianEncoder:
        return GaussianEncoder(scanning=self.scale is None)

    def with_scan(self, scan: Any) -> GaussianEstimator:
        """This estimator with the column's variance in the data (``scale``) from the scan."""
        variance = scanned_variance(scan)
        if variance is None:
            return self
        bound = copy.copy(self)  # not dataclasses.replace: a subclass may take other arguments
        bound.scale = variance
        return bound

    @property
    def variance_floor(self) -> float:
        """``min_var`` times the column's variance in the data, or ``min_var`` where that is unknown
        or zero."""
        return self.min_var * self.scale if self.scale else self.min_var

    def estimate(self, nobs: float | None, value: Any) -> GaussianDistribution:
        sw, s1, s2, shift = value
        pc = self.pseudo_count or 0.0
        least = self.variance_floor
        if sw <= 0.0 and (pc == 0.0 or self.suff_stat is None):
            mu0, var0 = self.suff_stat if self.suff_stat is not None else (shift, 1.0)
            return GaussianDistribution(mu0, max(var0, least))
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
            var = least
        return GaussianDistribution(mu, max(var, least))
