"""Uniform: ``UniformDistribution(low, high)``, constant density ``1 / (high - low)`` on ``[low, high]``
(``scipy.stats.uniform(loc=low, scale=high - low)``) and 0 (``log p = -inf``) outside it, as a Pareto's
below its scale.

Records are finite real numbers; the encoded batch is the values themselves. The statistics are
``(Σw, min x, max x)`` over the rows of positive weight: the sum merges by addition and the extremes by
``min`` / ``max``, all associative and exact, so every partitioning gives the same statistics. The
M-step is the maximum-likelihood interval ``[min x, max x]``.

In a mixture, a component's support never grows by EM: a row outside it gets responsibility exactly 0
(unless no component can explain it, when the mixture spreads it by the weights and every component
widens to cover it), so a mixture of uniforms keeps the partition it starts from, and the start must
not be one interval for all. The default start (``init="kmeans||"``) gives every row weight ``1 - eps``
on its nearest centre and ``eps / k`` (1e-6 / k) on the others: taken at face value every component
would start as the whole range. So the first pass (``seq_initialize``) also keeps the weight and the extremes
of each weight class (``floor(log2 w)``, clipped to :data:`WEIGHT_CLASSES`; merged by addition and
min / max, exact), and
the initial interval spans the rows whose class is within :data:`INIT_CLASS_SPAN` of the heaviest
(weights above ~1/2048 of it): each component starts as the range of its own cluster, and every row is
inside its own cluster's range, so no row is impossible. Random responsibilities
(``init="random"``) are spread over all rows and start every component near the whole range: use
the default start (or other fields of a record) for a mixture of uniforms. The width floor
(``min_width``) keeps a component on one repeated value from an infinite density.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._scalar_common import ScalarEncoder, ScalarFamily, finite, floor, prior_tuple
from mixle_spark.stats.base import (
    Accumulator,
    Estimator,
    check_parameter,
    register_distribution,
    register_estimator,
)

__all__ = ["UniformAccumulator", "UniformDistribution", "UniformEncoder", "UniformEstimator"]

DEFAULT_MIN_WIDTH = 1e-12
WEIGHT_CLASSES = (-100, 27)
"""The range of a first-pass row's weight class ``floor(log2 w)`` (clipped into it)."""
INIT_CLASS_SPAN = 10
"""First pass: the interval spans the rows whose weight class is at least the heaviest's minus this."""
_ULPS = 64.0 * np.finfo(np.float64).eps
"""The width floor is also at least this times the bounds' magnitude (so the bounds stay distinct
floats whatever the data's scale)."""


class UniformEncoder(ScalarEncoder):
    """Reads finite real numbers into a float64 array of shape (n,) (a value outside a model's interval
    is valid data: its density is 0)."""

    estimator_name = "UniformEstimator"
    expectation = "a finite number"


@register_distribution("uniform")
class UniformDistribution(ScalarFamily):
    """Uniform distribution on ``[low, high]`` (``low < high``).

    Examples
    --------
    >>> UniformDistribution(1.0, 5.0).log_density(2.0) == -math.log(4.0)
    True
    >>> UniformDistribution(1.0, 5.0).log_density(5.5)
    -inf
    """

    parameters = (finite("low"), finite("high"))
    encoder_class = UniformEncoder
    low: float
    high: float

    def __init__(self, low: float, high: float) -> None:
        self._set_parameters(low, high)
        width = self.high - self.low
        check_parameter(
            width > 0 and math.isfinite(width),
            "UniformDistribution",
            "(low, high)",
            (self.low, self.high),
            "finite with low < high",
        )
        self._width = width
        self._log_density = -math.log(width)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.uniform(self.low, self.high, size=size)

    def log_density(self, x: float) -> float:
        x = float(x)
        return self._log_density if self.low <= x <= self.high else -math.inf

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        inside = (enc >= self.low) & (enc <= self.high)
        return np.where(inside, self._log_density, -np.inf)

    def moments(self) -> tuple[float, float]:
        return 0.5 * (self.low + self.high), self._width * self._width / 12.0

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return self._log_share(x - self.low, self.high - x)

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return self._log_share(self.high - x, x - self.low)

    def _log_share(self, near: np.ndarray, far: np.ndarray) -> np.ndarray:
        """``log(near / width)`` (``near + far = width``, both clipped into ``[0, width]``): within the
        first half as it is, beyond as ``log1p(-far / width)``, ``far`` taken from the other bound (no
        cancellation where the share is near 1)."""
        near, far = np.clip(near, 0.0, self._width), np.clip(far, 0.0, self._width)
        with np.errstate(divide="ignore"):
            out = np.where(near <= far, np.log(near / self._width), np.log1p(-far / self._width))
        return out  # type: ignore[no-any-return]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        # from the nearer end, so p near 1 keeps its digits and the ends are exact
        return np.where(p <= 0.5, self.low + p * self._width, self.high - (1.0 - p) * self._width)  # type: ignore[no-any-return]


class UniformAccumulator(Accumulator):
    """``(Σw, min x, max x)`` over the rows of positive weight (``inf``, ``-inf`` with none), and on a
    first pass (:meth:`seq_initialize`) per weight class (see the module docstring) the class's weight
    and extremes, three arrays over :data:`WEIGHT_CLASSES` (extremes 0 where a class is empty); value
    ``(sw, min_x, max_x, class_w, class_min, class_max)``.
    """

    encoder_class = UniformEncoder
    _classes = WEIGHT_CLASSES[1] - WEIGHT_CLASSES[0] + 1

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sw = 0.0
        self.min_x = math.inf
        self.max_x = -math.inf
        self.class_w = np.zeros(self._classes)
        self.class_min = np.zeros(self._classes)
        self.class_max = np.zeros(self._classes)

    def seq_update(self, enc: np.ndarray, weights: np.ndarray, estimate: Any) -> None:
        self.sw += float(weights.sum())
        seen = enc[weights > 0]
        if seen.size:
            self.min_x = min(self.min_x, float(seen.min()))
            self.max_x = max(self.max_x, float(seen.max()))

    def seq_initialize(self, enc: np.ndarray, weights: np.ndarray, rng: Any) -> None:
        self.seq_update(enc, weights, None)
        positive = weights > 0
        w = weights[positive]
        if not w.size:
            return
        classes = np.clip(np.floor(np.log2(w)), *WEIGHT_CLASSES).astype(np.int64) - WEIGHT_CLASSES[0]
        low, high = np.full(self._classes, math.inf), np.full(self._classes, -math.inf)
        np.minimum.at(low, classes, enc[positive])
        np.maximum.at(high, classes, enc[positive])
        self._merge_classes(np.bincount(classes, weights=w, minlength=self._classes), low, high)

    def _merge_classes(self, class_w: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
        """Fold another set of per-class weights and extremes in (extremes of empty classes ignored)."""
        mine, theirs = self.class_w > 0, class_w > 0
        self.class_min = np.where(mine & theirs, np.minimum(self.class_min, low), self.class_min)
        self.class_min = np.where(theirs & ~mine, low, self.class_min)
        self.class_max = np.where(mine & theirs, np.maximum(self.class_max, high), self.class_max)
        self.class_max = np.where(theirs & ~mine, high, self.class_max)
        self.class_w = self.class_w + class_w

    def initial_range(self) -> tuple[float, float] | None:
        """The first pass's interval over the heaviest weight classes, None without first-pass rows."""
        filled = np.flatnonzero(self.class_w > 0)
        if not filled.size:
            return None
        top = filled[filled >= filled[-1] - INIT_CLASS_SPAN]
        return float(self.class_min[top].min()), float(self.class_max[top].max())

    def combine(self, value: Any) -> UniformAccumulator:
        sw, min_x, max_x, class_w, class_min, class_max = value
        self.sw += float(sw)
        self.min_x = min(self.min_x, float(min_x))
        self.max_x = max(self.max_x, float(max_x))
        self._merge_classes(*(np.asarray(v, dtype=np.float64) for v in (class_w, class_min, class_max)))
        return self

    def value(self) -> tuple[float, float, float, np.ndarray, np.ndarray, np.ndarray]:
        return (
            self.sw,
            self.min_x,
            self.max_x,
            self.class_w.copy(),
            self.class_min.copy(),
            self.class_max.copy(),
        )

    def _scale(self, factor: float) -> None:
        # the extremes are not weighted sums: decaying old rows keeps them (and a class stays filled)
        self.sw *= factor
        self.class_w = np.where(self.class_w > 0, np.maximum(factor * self.class_w, 1e-300), 0.0)

    def from_value(self, value: Any) -> UniformAccumulator:
        sw, min_x, max_x, class_w, class_min, class_max = value
        self.sw, self.min_x, self.max_x = float(sw), float(min_x), float(max_x)
        self.class_w, self.class_min, self.class_max = (
            np.array(v, dtype=np.float64) for v in (class_w, class_min, class_max)
        )
        return self


@register_estimator("uniform")
@dataclass(eq=False, repr=False)
class UniformEstimator(Estimator):
    """Maximum-likelihood uniform fit: ``low = min x``, ``high = max x`` over the rows of positive weight
    (the likelihood ``(high - low)^(-Σw)`` is largest for the narrowest interval holding every row;
    Johnson, Kotz & Balakrishnan, *Continuous Univariate Distributions* vol. 2, 2nd ed., ch. 26, and
    ``scipy.stats.uniform.fit``).

    Parameters
    ----------
    pseudo_count : float, optional
        With ``suff_stat``: the interval always holds the prior interval ``[low0, high0]`` (the mode of
        the conjugate bilateral Pareto prior, DeGroot, *Optimal Statistical Decisions* (1970) 9.7, whose
        mode does not depend on its count): ``low = min(min x, low0)``, ``high = max(max x, high0)``.
    suff_stat : (float, float), optional
        Prior interval ``(low0, high0)`` (default (0, 1) when only ``pseudo_count`` is given).
    min_width : float
        Width floor (default 1e-12, and at least 64 ulps of the bounds): data on one value give an
        interval of this width centred on it rather than an infinite density.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or low = 0, high = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda low0, high0: low0 < high0, "a pair (low0, high0) of finite numbers with low0 < high0"
    )
    min_width: float = floor(DEFAULT_MIN_WIDTH)
    name: str | None = None
    keys: str | None = None

    accumulator_class = UniformAccumulator
    encoder_class = UniformEncoder

    def estimate(self, nobs: float | None, value: Any) -> UniformDistribution:
        start = UniformAccumulator().from_value(value).initial_range()
        sw, low, high = float(value[0]), *(start or (float(value[1]), float(value[2])))
        prior = (0.0, 1.0) if self.suff_stat is None else self.suff_stat
        if not (sw > 0 and low <= high):
            low, high = prior
        elif (self.pseudo_count or 0.0) > 0:
            low, high = min(low, prior[0]), max(high, prior[1])
        width = max(self.min_width, _ULPS * max(abs(low), abs(high)))
        if high - low < width:
            centre = 0.5 * (low + high)
            low, high = min(low, centre - 0.5 * width), max(high, centre + 0.5 * width)
        return UniformDistribution(low, high)
