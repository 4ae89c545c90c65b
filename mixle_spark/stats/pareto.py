"""Pareto (type I): ``ParetoDistribution(x_m, alpha)`` with scale ``x_m`` (the least value) and shape
``alpha``; ``log p(x) = log alpha + alpha log x_m - (alpha + 1) log x`` for ``x >= x_m``, ``-inf`` below.

Records are positive real numbers; the encoded batch is ``(x, log x)``. The statistics are
``(Σw, Σw log x, min x)``, the minimum over the rows of positive weight: sums merge by addition and the
minimum by ``min``, both associative and exact, so every partitioning gives the same statistics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._scalar_common import ScalarEncoder, ScalarFamily, bound, positive, prior_tuple
from mixle_spark.stats._validate import check_range
from mixle_spark.stats.base import Accumulator, Estimator, register_distribution, register_estimator

__all__ = ["ParetoAccumulator", "ParetoDistribution", "ParetoEncoder", "ParetoEstimator"]

DEFAULT_MAX_ALPHA = 1e8


class ParetoEncoder(ScalarEncoder):
    """Reads positive finite numbers into ``(x, log x)``, two float64 arrays of shape (n,)."""

    estimator_name = "ParetoEstimator"
    expectation = "a positive finite number"

    def seed_values(self, enc: Any) -> np.ndarray:
        return np.asarray(enc[1], dtype=np.float64)  # log x: a Pareto's scale is multiplicative

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected, low=0.0, low_open=True)

    def pack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x, np.log(x)


@register_distribution("pareto")
class ParetoDistribution(ScalarFamily):
    """Pareto distribution with scale ``x_m`` (support ``[x_m, inf)``) and shape ``alpha``
    (``scipy.stats.pareto(alpha, scale=x_m)``).

    Examples
    --------
    >>> ParetoDistribution(1.0, 2.0).log_density(1.0) == math.log(2.0)
    True
    >>> ParetoDistribution(1.0, 2.0).log_density(0.5)
    -inf
    """

    parameters = (positive("x_m"), positive("alpha"))
    encoder_class = ParetoEncoder
    x_m: float
    alpha: float

    def __init__(self, x_m: float, alpha: float) -> None:
        self._set_parameters(x_m, alpha)
        self._log_const = math.log(self.alpha) + self.alpha * math.log(self.x_m)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        # numpy's pareto is the Lomax (x / x_m - 1); inversion keeps one uniform per draw
        return self.x_m * (1.0 - rng.random(size)) ** (-1.0 / self.alpha)

    def log_density(self, x: float) -> float:
        x = float(x)
        if not (self.x_m <= x < math.inf):
            return -math.inf
        return self._log_const - (self.alpha + 1.0) * math.log(x)

    def seq_log_density(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x, log_x = enc
        return np.where(x >= self.x_m, self._log_const - (self.alpha + 1.0) * log_x, -np.inf)


class ParetoAccumulator(Accumulator):
    """``(Σw, Σw log x, min x)`` over the rows of positive weight (``min x`` is ``inf`` with none)."""

    encoder_class = ParetoEncoder

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sw = 0.0
        self.slog = 0.0
        self.min_x = math.inf

    def seq_update(self, enc: tuple[np.ndarray, np.ndarray], weights: np.ndarray, estimate: Any) -> None:
        x, log_x = enc
        self.sw += float(weights.sum())
        self.slog += float(np.dot(weights, log_x))
        seen = x[weights > 0]
        if seen.size:
            self.min_x = min(self.min_x, float(seen.min()))

    def combine(self, value: Any) -> ParetoAccumulator:
        sw, slog, min_x = value
        self.sw += float(sw)
        self.slog += float(slog)
        self.min_x = min(self.min_x, float(min_x))
        return self

    def value(self) -> tuple[float, float, float]:
        return (self.sw, self.slog, self.min_x)

    def _scale(self, factor: float) -> None:
        self.sw *= factor  # the minimum is not a weighted sum: decaying old rows keeps it
        self.slog *= factor

    def from_value(self, value: Any) -> ParetoAccumulator:
        self.sw, self.slog, self.min_x = (float(v) for v in value)
        return self


@register_estimator("pareto")
@dataclass(eq=False, repr=False)
class ParetoEstimator(Estimator):
    """Maximum-likelihood Pareto fit: ``x_m = min x`` over the rows of positive weight and
    ``alpha = Σw / Σw log(x / x_m) = Σw / (Σw log x - Σw log x_m)`` (the weighted form of the
    classical MLE: B. C. Arnold, *Pareto Distributions*, 2nd ed., CRC 2015, section 5.2; N. L. Johnson,
    S. Kotz, N. Balakrishnan, *Continuous Univariate Distributions* vol. 1, 2nd ed., ch. 20 section 5).

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations from ``Pareto(x_m0, alpha0)`` = ``suff_stat``, each adding its
        expected ``log(x / x_m) = 1 / alpha0``: ``alpha = (Σw + pc) / (Σw log(x / x_m) + pc / alpha0)``.
        ``x_m`` stays the data's minimum.
    suff_stat : (float, float), optional
        Prior scale and shape (default (1, 1) when only ``pseudo_count`` is given).
    max_alpha : float
        Ceiling of the shape (default 1e8): data that are all equal give ``alpha = max_alpha``.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or x_m = 1, alpha = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda x_m0, alpha0: x_m0 > 0 and alpha0 > 0, "a pair (x_m0, alpha0) of positive finite numbers"
    )
    max_alpha: float = bound(DEFAULT_MAX_ALPHA)
    name: str | None = None
    keys: str | None = None

    accumulator_class = ParetoAccumulator
    encoder_class = ParetoEncoder

    def estimate(self, nobs: float | None, value: Any) -> ParetoDistribution:
        sw, slog, min_x = value
        x_m0, alpha0 = (1.0, 1.0) if self.suff_stat is None else self.suff_stat
        if not (sw > 0 and math.isfinite(min_x)):
            return ParetoDistribution(x_m0, min(alpha0, self.max_alpha))
        pc = self.pseudo_count or 0.0
        spread = max(slog - sw * math.log(min_x), 0.0) + (pc / alpha0 if pc > 0 else 0.0)
        total = sw + pc
        alpha = total / spread if spread > 0 else math.inf
        return ParetoDistribution(min_x, min(alpha, self.max_alpha))
