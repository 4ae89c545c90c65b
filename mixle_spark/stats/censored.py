"""Values capped at a bound: ``CensoredDistribution(dist, low, high)``.

A value at or below ``low`` is censored there: all that is known is ``X <= low``, and its likelihood is
the tail mass ``P(X <= low)``; a value at or beyond ``high`` likewise has ``P(X >= high)`` (a session
timeout's durations, a capped measurement: a value beyond the cap is read as censored at it, not as an
error). Values strictly between the bounds score ``f(x)``. For a count family ``P(X >= high)`` is
``P(X > ceil(high) - 1)``. Either bound may be absent.

EM (Dempster, Laird & Rubin 1977, §4.6; the censored values as missing data): at the current
parameters each censored row adds its tail's expected statistics to the inner family's
(:mod:`~mixle_spark.stats._tails`), beside the observed rows' own; the statistics merge by addition and
each step never lowers the censored likelihood. The first pass (no current model) fits the uncensored
rows alone.
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
    log_tail,
    require_tails,
)
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
    "CensoredAccumulator",
    "CensoredDistribution",
    "CensoredEncoder",
    "CensoredEstimator",
]

INSIDE, LOW, HIGH = 0, 1, 2


class CensoredEncoder(SplitEncoder):
    """Group 0: values strictly between the bounds (read by the inner family); 1: at or below ``low``;
    2: at or beyond ``high``."""

    combinator = "CensoredEstimator"
    groups = 3

    def __init__(self, child: Any, low: float | None = None, high: float | None = None) -> None:
        super().__init__(child)
        self.low, self.high = low, high

    def classify(self, x: np.ndarray) -> np.ndarray:
        codes = np.zeros(len(x), dtype=np.int64)
        if self.low is not None:
            codes[x <= self.low] = LOW
        if self.high is not None:
            codes[x >= self.high] = HIGH
        return codes

    def __repr__(self) -> str:
        return f"CensoredEncoder({self.child!r}, low={self.low!r}, high={self.high!r})"


@register_distribution("censored")
class CensoredDistribution(Distribution):
    """``dist`` observed through censoring at ``low`` and / or ``high`` (module doc).

    Parameters
    ----------
    dist : Distribution
        A scalar family that gives its ``log_cdf`` and ``log_survival`` (and ``quantile`` when continuous).
    low, high : float, optional
        The censoring bounds; either may be absent, not both.
    """

    parameters = (part("dist"), Parameter("low", default=None), Parameter("high", default=None))

    def __init__(self, dist: Distribution, low: float | None = None, high: float | None = None) -> None:
        check_bounds_order("CensoredDistribution", low, high)
        if low is None and high is None:
            raise SpecError("CensoredDistribution: give low, high or both")
        require_tails(dist.family, "censored", continuous_quantile=False)
        self.dist = dist
        self.low = None if low is None else float(low)
        self.high = None if high is None else float(high)
        self._upper = (
            None if self.high is None else (math.ceil(self.high) - 1.0 if is_count(dist) else self.high)
        )
        self._log_low = log_tail(dist, self.low, False)
        self._log_high = log_tail(dist, self._upper, True)

    def sampling_parts(self) -> list[Distribution]:
        return [self.dist]

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """A draw of ``dist``, moved to the bound it is at or beyond."""
        (child,) = sampler.parts
        x = np.asarray(child.sample(1 if size is None else int(size)), dtype=np.float64)
        x = np.clip(
            x, -math.inf if self.low is None else self.low, math.inf if self.high is None else self.high
        )
        values: list[Any] = [int(v) for v in x.tolist()] if is_count(self.dist) else x.tolist()
        return values[0] if size is None else values

    def log_density(self, x: Any) -> float:
        return float(self.seq_log_density(self.encoder().encode([x]))[0])

    def seq_log_density(self, enc: SplitEncoded) -> np.ndarray:
        out = np.empty(enc.n)
        inside, low, high = enc.rows
        if len(inside):
            out[inside] = self.dist.seq_log_density(enc.child[INSIDE])
        out[low] = self._log_low
        out[high] = self._log_high
        return out

    def estimator(self, pseudo_count: float | None = None) -> CensoredEstimator:
        return CensoredEstimator(self.dist.estimator(pseudo_count), low=self.low, high=self.high)

    def encoder(self) -> CensoredEncoder:
        return CensoredEncoder(self.dist.encoder(), self.low, self.high)

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


class CensoredAccumulator(BoundedAccumulator):
    """The inner family's statistics of the uncensored rows and of the censored rows' expected values.
    Value: the inner accumulator's value."""

    def seq_update(self, enc: SplitEncoded, weights: np.ndarray, estimate: Any) -> np.ndarray | None:
        inside, low, high = enc.rows
        if estimate is None:
            self.child.seq_update(enc.child[INSIDE], weights[inside], None)
            return None
        ll = np.empty(enc.n)
        ll[inside] = seq_update_with_ll(self.child, enc.child[INSIDE], weights[inside], estimate.dist)
        ll[low], ll[high] = estimate._log_low, estimate._log_high
        dist = estimate.dist
        add_tail_statistics(self.child, dist, estimate.low, False, float(weights[low].sum()), self._nodes)
        add_tail_statistics(self.child, dist, estimate._upper, True, float(weights[high].sum()), self._nodes)
        return ll

    def seq_initialize(self, enc: SplitEncoded, weights: np.ndarray, rng: RowRandom) -> None:
        inside = enc.rows[INSIDE]
        self.child.seq_initialize(enc.child[INSIDE], weights[inside], rng.take(inside))


@register_estimator("censored")
@dataclass(eq=False, repr=False)
class CensoredEstimator(BoundedEstimator):
    """Fits ``estimator``'s family to data censored at ``low`` and / or ``high`` by the EM of the
    module doc; the options (``estimator``, ``low``, ``high``, ``name``, ``keys``) are those of
    :class:`~mixle_spark.stats._bounded.BoundedEstimator`."""

    wrapper = "censored"
    distribution_class = CensoredDistribution
    accumulator_class = CensoredAccumulator
    encoder_class = CensoredEncoder
