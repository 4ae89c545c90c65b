"""Point mass: ``PointMassDistribution(value)`` puts all its probability on one number.

``log p(x) = 0`` at ``x == value`` and ``-inf`` elsewhere (a discrete family: a probability, not a
density). Records are finite numbers; the statistics are ``(Σw, min x, max x)`` over the rows of
positive weight, merged by addition, ``min`` and ``max`` (associative and exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import DataValueError
from mixle_spark.stats._scalar_common import ScalarEncoder, ScalarFamily, finite, prior
from mixle_spark.stats.base import Accumulator, Estimator, register_distribution, register_estimator

__all__ = ["PointMassAccumulator", "PointMassDistribution", "PointMassEncoder", "PointMassEstimator"]


class PointMassEncoder(ScalarEncoder):
    """Reads finite numbers into a float64 array of shape (n,)."""

    estimator_name = "PointMassEstimator"
    expectation = "a finite number"


@register_distribution("point_mass")
class PointMassDistribution(ScalarFamily):
    """All probability on ``value``.

    Examples
    --------
    >>> PointMassDistribution(0.0).log_density(0.0), PointMassDistribution(0.0).log_density(1.0)
    (0.0, -inf)
    """

    parameters = (finite("value"),)
    encoder_class = PointMassEncoder
    value: float

    def __init__(self, value: float) -> None:
        self._set_parameters(value)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return self.value if size is None else np.full(size, self.value)

    def log_density(self, x: float) -> float:
        return 0.0 if float(x) == self.value else -math.inf

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        return np.where(enc == self.value, 0.0, -np.inf)


class PointMassAccumulator(Accumulator):
    """``(Σw, min x, max x)`` over the rows of positive weight (``(inf, -inf)`` with none)."""

    encoder_class = PointMassEncoder

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sw = 0.0
        self.low = math.inf
        self.high = -math.inf

    def seq_update(self, enc: np.ndarray, weights: np.ndarray, estimate: Any) -> None:
        self.sw += float(weights.sum())
        seen = enc[weights > 0]
        if seen.size:
            self.low = min(self.low, float(seen.min()))
            self.high = max(self.high, float(seen.max()))

    def combine(self, value: Any) -> PointMassAccumulator:
        sw, low, high = value
        self.sw += float(sw)
        self.low = min(self.low, float(low))
        self.high = max(self.high, float(high))
        return self

    def value(self) -> tuple[float, float, float]:
        return (self.sw, self.low, self.high)

    def _scale(self, factor: float) -> None:
        self.sw *= factor  # the values seen are not weighted sums: decaying old rows keeps them

    def from_value(self, value: Any) -> PointMassAccumulator:
        self.sw, self.low, self.high = (float(v) for v in value)
        return self


@register_estimator("point_mass")
@dataclass(eq=False, repr=False)
class PointMassEstimator(Estimator):
    """Maximum-likelihood point mass: the one value the rows of positive weight hold (the likelihood
    ``prod_i [x_i == v]^(w_i)`` is 1 at that value and 0 at any other: the degenerate distribution's
    MLE, e.g. N. L. Johnson, A. W. Kemp, S. Kotz, *Univariate Discrete Distributions*, 3rd ed., Wiley
    2005, section 1.2.3). Rows of positive weight holding two different values have no maximum: a
    :class:`~mixle_spark.errors.DataValueError` names the least and the greatest of them.

    Parameters
    ----------
    pseudo_count : float, optional
        Weight of pseudo-observations at ``suff_stat`` (rows like any other: they must agree with the
        data); without ``suff_stat`` it has no effect.
    suff_stat : float, optional
        The value when there is no row of positive weight (default 0.0).
    keys : str, optional
        Tie this parameter to every other site with the same key.
    """

    pseudo_count: float | None = None
    suff_stat: float | None = prior(math.isfinite, "a finite number")
    name: str | None = None
    keys: str | None = None

    accumulator_class = PointMassAccumulator
    encoder_class = PointMassEncoder

    def estimate(self, nobs: float | None, value: Any) -> PointMassDistribution:
        _, low, high = value  # the total weight does not enter: one value, or none
        if self.suff_stat is not None and (self.pseudo_count or 0.0) > 0:
            low, high = min(low, self.suff_stat), max(high, self.suff_stat)
        if low > high:  # no row of positive weight
            return PointMassDistribution(0.0 if self.suff_stat is None else self.suff_stat)
        if low != high:
            raise DataValueError(
                f"PointMassEstimator: the rows of positive weight hold different values, {low!r} to "
                f"{high!r}; a point mass fits data that are all one value"
            )
        return PointMassDistribution(low)
