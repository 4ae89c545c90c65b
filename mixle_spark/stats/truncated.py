"""A family renormalized to a range: ``TruncatedDistribution(dist, low, high)``.

``p(x) = f(x) / P(low <= X <= high)`` for ``low <= x <= high`` (either bound may be absent). Both
bounds are inclusive: a count family keeps the integers ``ceil(low) .. floor(high)`` (its mass is
``F(floor(high)) - F(ceil(low) - 1)``); for a continuous family a bound's own point has no mass, so
inclusive and exclusive are the same model. A value outside the bounds is an error naming column, row
and value (truncated data cannot hold one: :mod:`~mixle_spark.stats.censored` reads values at or beyond
a bound instead).

The M-step maximizes the *truncated* likelihood by EM (Dempster, Laird & Rubin 1977, §4.6): each
observed row stands for ``(1 - P) / P`` unobserved draws outside the bounds (``P`` the mass inside at
the current parameters), whose expected statistics (:mod:`~mixle_spark.stats._tails`: the pmf summed
over a count family's tail, tanh-sinh quadrature on a continuous family's quantile) are added to the
inner family's statistics before its own M-step. The statistics are the inner family's, merged by
addition; each step never lowers the truncated likelihood. The first pass (no current model) is the
inner family's untruncated fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._bounded import BoundedAccumulator, BoundedEstimator
from mixle_spark.stats._split import SplitEncoded, SplitEncoder
from mixle_spark.stats._tails import (
    add_tail_statistics,
    check_bounds_order,
    is_count,
    log_between,
    log_tail,
    require_tails,
)
from mixle_spark.stats._validate import check_range
from mixle_spark.stats.base import (
    Distribution,
    Parameter,
    RowRandom,
    Sampler,
    part,
    register_distribution,
    register_estimator,
    seq_update_with_ll,
)

__all__ = [
    "TruncatedAccumulator",
    "TruncatedDistribution",
    "TruncatedEncoder",
    "TruncatedEstimator",
]


def _kept(dist: Any, low: float | None, high: float | None) -> tuple[float | None, float | None]:
    """The kept region as ``a < X <= b`` (a count family's integers ``ceil(low) .. floor(high)``)."""
    if is_count(dist):
        return (None if low is None else math.ceil(low) - 1.0), (None if high is None else math.floor(high))
    return low, high


class TruncatedEncoder(SplitEncoder):
    """One group: every value, checked to lie in ``[low, high]``, read by the inner family."""

    combinator = "TruncatedEstimator"

    def __init__(self, child: Any, low: float | None = None, high: float | None = None) -> None:
        super().__init__(child)
        self.low, self.high = low, high

    def expectation(self) -> str:
        low = "-inf" if self.low is None else repr(self.low)
        high = "inf" if self.high is None else repr(self.high)
        return f"a number in [{low}, {high}]"

    def classify(self, x: np.ndarray) -> np.ndarray:
        check_range(x, self.expected, low=self.low, high=self.high)
        return np.zeros(len(x), dtype=np.int64)

    def __repr__(self) -> str:
        return f"TruncatedEncoder({self.child!r}, low={self.low!r}, high={self.high!r})"


@register_distribution("truncated")
class TruncatedDistribution(Distribution):
    """``dist`` renormalized to ``[low, high]`` (module doc).

    Parameters
    ----------
    dist : Distribution
        A scalar family that gives its ``log_cdf`` and ``log_survival`` (and ``quantile`` when continuous).
    low, high : float, optional
        The inclusive bounds; either may be absent (None), not both.

    Examples
    --------
    >>> from mixle_spark.stats import ExponentialDistribution
    >>> d = TruncatedDistribution(ExponentialDistribution(1.0), low=1.0)
    >>> round(d.log_density(1.0), 12)  # the exponential's memorylessness
    0.0
    """

    parameters = (part("dist"), Parameter("low", default=None), Parameter("high", default=None))

    def __init__(self, dist: Distribution, low: float | None = None, high: float | None = None) -> None:
        check_bounds_order("TruncatedDistribution", low, high)
        if low is None and high is None:
            raise SpecError("TruncatedDistribution: give low, high or both")
        require_tails(dist.family, "truncated", continuous_quantile=False)
        self.dist = dist
        self.low = None if low is None else float(low)
        self.high = None if high is None else float(high)
        self._a, self._b = _kept(dist, self.low, self.high)
        self._log_mass = log_between(dist, self._a, self._b)
        if not self._log_mass > -math.inf:
            raise SpecError(
                f"TruncatedDistribution: {dist.family} gives no probability to [{self.low}, {self.high}]"
            )

    def sampling_parts(self) -> list[Distribution]:
        return [self.dist]

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """The inner quantile of a uniform draw over the kept range of the cdf (inverse transform)."""
        rng = sampler.rng
        n = 1 if size is None else int(size)
        lo = math.exp(log_tail(self.dist, self._a, False))
        hi = -math.expm1(log_tail(self.dist, self._b, True))
        x = np.asarray(self.dist.quantile(lo + (hi - lo) * rng.random(n)), dtype=np.float64)  # type: ignore[attr-defined]
        x = np.clip(
            x, -math.inf if self.low is None else self.low, math.inf if self.high is None else self.high
        )
        if is_count(self.dist):
            values: list[Any] = [int(v) for v in x.tolist()]
        else:
            values = x.tolist()
        return values[0] if size is None else values

    def log_density(self, x: Any) -> float:
        return float(self.seq_log_density(self.encoder().encode([x]))[0])

    def seq_log_density(self, enc: SplitEncoded) -> np.ndarray:
        return self.dist.seq_log_density(enc.child[0]) - self._log_mass  # type: ignore[no-any-return]

    def estimator(self, pseudo_count: float | None = None) -> TruncatedEstimator:
        return TruncatedEstimator(self.dist.estimator(pseudo_count), low=self.low, high=self.high)

    def encoder(self) -> TruncatedEncoder:
        return TruncatedEncoder(self.dist.encoder(), self.low, self.high)

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


class TruncatedAccumulator(BoundedAccumulator):
    """The inner family's statistics of the observed rows and of the expected unobserved draws outside
    the bounds. Value: the inner accumulator's value."""

    def seq_update(self, enc: SplitEncoded, weights: np.ndarray, estimate: Any) -> np.ndarray | None:
        if estimate is None:
            self.child.seq_update(enc.child[0], weights, None)
            return None
        ll = seq_update_with_ll(self.child, enc.child[0], weights, estimate.dist)
        total = float(weights.sum())
        for bound, upper in ((estimate._a, False), (estimate._b, True)):
            per_row = math.exp(log_tail(estimate.dist, bound, upper) - estimate._log_mass)
            add_tail_statistics(self.child, estimate.dist, bound, upper, total * per_row, self._nodes)
        return ll - estimate._log_mass  # type: ignore[no-any-return]

    def seq_initialize(self, enc: SplitEncoded, weights: np.ndarray, rng: RowRandom) -> None:
        self.child.seq_initialize(enc.child[0], weights, rng)


@register_estimator("truncated")
@dataclass(eq=False, repr=False)
class TruncatedEstimator(BoundedEstimator):
    """Fits ``estimator``'s family to data truncated to ``[low, high]`` (inclusive) by the EM of the
    module doc; the options (``estimator``, ``low``, ``high``, ``name``, ``keys``) are those of
    :class:`~mixle_spark.stats._bounded.BoundedEstimator`."""

    wrapper = "truncated"
    distribution_class = TruncatedDistribution
    accumulator_class = TruncatedAccumulator
    encoder_class = TruncatedEncoder
