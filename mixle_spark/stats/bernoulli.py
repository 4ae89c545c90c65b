"""Bernoulli: ``BernoulliDistribution(p)`` with ``p = P(x = 1)``.

Records are 0 / 1 or booleans (Arrow boolean, integer or floating columns holding 0 and 1).
Statistics ``(Σw, Σw x)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import DataValueError
from mixle_spark.stats._scalar_common import (
    OneParameterEstimator,
    Parameter,
    ScalarEncoder,
    ScalarFamily,
    SumAccumulator,
    floor,
    prior,
    safe_log,
)
from mixle_spark.stats._validate import check_finite, first_true
from mixle_spark.stats.base import (
    register_distribution,
    register_estimator,
)

__all__ = [
    "BernoulliAccumulator",
    "BernoulliDistribution",
    "BernoulliEncoder",
    "BernoulliEstimator",
]

DEFAULT_MIN_P = 1e-12


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -math.inf


class BernoulliEncoder(ScalarEncoder):
    """Reads 0 / 1 / booleans into a float64 array of zeros and ones, shape (n,)."""

    computes_float32 = True

    embedding = "binary"

    estimator_name = "BernoulliEstimator"
    expectation = "0, 1 or a boolean"
    accepts_bool = True

    def validate(self, x: np.ndarray) -> None:
        check_finite(x, self.expected)
        bad = (x != 0.0) & (x != 1.0)
        if bad.any():
            i = first_true(bad)
            raise DataValueError(self.expected, value=float(x[i]), row=i, n_rows=len(x), count=int(bad.sum()))


@register_distribution("bernoulli")
class BernoulliDistribution(ScalarFamily):
    """Bernoulli distribution with success probability ``p`` (0 and 1 allowed).

    Examples
    --------
    >>> BernoulliDistribution(0.25).log_density(True) == math.log(0.25)
    True
    """

    parameters = (Parameter("p", lambda p: 0.0 <= p <= 1.0, "a probability in [0, 1]"),)
    p: float
    encoder_class = BernoulliEncoder
    record_type = int

    def __init__(self, p: float) -> None:
        self._set_parameters(p)
        self._log_p = _log(self.p)
        self._log_q = _log(1.0 - self.p)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return np.asarray(rng.random(size=size) < self.p).astype(np.int64)

    def log_density(self, x: Any) -> float:
        if x == 1:
            return self._log_p
        if x == 0:
            return self._log_q
        return -math.inf

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        return np.where(enc == 1.0, self._log_p, self._log_q)

    # Mixture fast path: log p(x) = [1, x] @ [log(1 - p), log p - log(1 - p)]; log 0 is taken as
    # -1e300 there (see _scalar_common.safe_log), which only matters when min_p = 0.
    def feature_key(self) -> Any:
        return ("bernoulli",)

    def seq_features(self, enc: np.ndarray) -> np.ndarray:
        return np.column_stack([np.ones_like(enc), enc])

    def feature_coefficients(self, enc: Any) -> np.ndarray:
        log_p, log_q = safe_log(self.p), safe_log(1.0 - self.p)
        return np.array([log_q, log_p - log_q])


class BernoulliAccumulator(SumAccumulator):
    """Sums ``(Σw, Σw x)``."""

    encoder_class = BernoulliEncoder


@register_estimator("bernoulli")
@dataclass(eq=False, repr=False)
class BernoulliEstimator(OneParameterEstimator):
    """Maximum-likelihood Bernoulli fit ``p = Σw x / Σw``, clipped to ``[min_p, 1 - min_p]``.

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations with mean ``suff_stat``:
        ``p = (Σw x + pc * p0) / (Σw + pc)``.
    suff_stat : float, optional
        Prior probability ``p0`` (default 0.5 when only ``pseudo_count`` is given).
    min_p : float
        Clip (default 1e-12) keeping both outcomes possible, so a component that saw only ones
        does not score a zero as -inf. ``min_p=0`` gives the plain MLE.
    keys : str, optional
        Tie this parameter to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or 0.5).
    """

    pseudo_count: float | None = None
    suff_stat: float | None = prior(lambda v: 0.0 <= v <= 1.0, "a probability in [0, 1]")
    min_p: float = floor(DEFAULT_MIN_P, lambda v: 0.0 <= v < 0.5, "in [0, 0.5)")
    name: str | None = None
    keys: str | None = None

    distribution_class = BernoulliDistribution
    accumulator_class = BernoulliAccumulator
    encoder_class = BernoulliEncoder
    floor_name = "min_p"
    prior_default = 0.5

    def apply_floor(self, value: float) -> float:
        return min(max(value, self.floor), 1.0 - self.floor)
