"""Laplace (double exponential): ``LaplaceDistribution(mu, b)`` with location ``mu`` and scale ``b``
(``scipy.stats.laplace(loc=mu, scale=b)``); ``log p(x) = -log(2 b) - |x - mu| / b``.

Records are finite real numbers; the encoded batch is the values themselves. The maximum-likelihood
``mu`` is a weighted median of the rows and ``b = Σw |x - mu| / Σw`` (Norton, "The double exponential
distribution: using calculus to find a maximum likelihood estimator", Amer. Statist. 38 (1984)); a
median is not an additive statistic, so the fit is a generalized EM (ECM, Meng & Rubin 1993) whose
statistics are taken at the current model ``(c, b_c)`` and merge by addition, ``min`` and ``max``:

* ``Σw``, ``Σw |x - c|``; the weights below, at and above ``c``; the nearest rows below and above ``c``
  (``max`` / ``min`` over rows of positive weight); and the weights of ``|x - c|`` in geometric bins
  (:data:`BINS_PER_OCTAVE` per octave, from ``2^-40 b_c`` to ``2^20 b_c``) on each side of ``c``;
* for a row set whose statistics were taken at different centres (an incremental update's frozen old
  rows beside new ones), the Weiszfeld / IRLS majorizer's ``Σw / |x - c|`` and ``Σw (x - c) / |x - c|``
  (Hunter & Lange, "Quantile regression via an MM algorithm", J. Comput. Graph. Statist. 9 (2000)),
  which re-express exactly about any centre.

The M-step first sets ``b = Σw |x - c| / Σw`` (the exact maximizer at ``mu = c``), then moves ``mu`` from
``c`` towards the median as far as the statistics prove ``f(mu) = Σw |x - mu|`` does not increase: to
the nearest row on the heavier side (``f`` is linear up to it) or to the farthest bin edge below which
less than half the weight lies (``f`` is convex, and non-increasing while less than half the weight is
passed), whichever is farther. Both keep ``f(mu) <= f(c)``, so ``log L(mu, b) >= log L(c, b) >=
log L(c, b_c)``: the likelihood never decreases. The distance to the median shrinks ~20-fold per
step until the median is the nearest row, which the next step lands on exactly; when the weighted
median is an interval (an even count), the step moves to its midpoint, as ``numpy.median`` and
``scipy.stats.laplace.fit`` take it. Where the new ``mu`` is the nearest row (or ``f`` is flat), ``Σw
|x - mu|`` is known exactly there and ``b`` is taken at ``mu`` instead (a further conditional maximization).
The first pass (no current model) takes the weighted mean and
``b = sd / sqrt 2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._cdf import log1m_exp
from mixle_spark.stats._scalar_common import ScalarEncoder, ScalarFamily, finite, floor, positive, prior_tuple
from mixle_spark.stats.base import Accumulator, Estimator, register_distribution, register_estimator

__all__ = ["LaplaceAccumulator", "LaplaceDistribution", "LaplaceEncoder", "LaplaceEstimator"]

BINS_PER_OCTAVE = 8
_LOW_OCTAVES, _HIGH_OCTAVES = 40, 20
_NBINS = BINS_PER_OCTAVE * (_LOW_OCTAVES + _HIGH_OCTAVES)
DEFAULT_MIN_B = 1e-12
_LN2 = math.log(2.0)


def _bin_edges(scale: float) -> np.ndarray:
    """Upper edges of the distance bins (the last one open-ended), shape (NBINS,)."""
    k = np.arange(1, _NBINS + 1) - BINS_PER_OCTAVE * _LOW_OCTAVES
    return scale * np.exp2(k / BINS_PER_OCTAVE)  # type: ignore[no-any-return]


class LaplaceEncoder(ScalarEncoder):
    """Reads finite real numbers into a float64 array of shape (n,)."""

    estimator_name = "LaplaceEstimator"
    expectation = "a finite number"


@register_distribution("laplace")
class LaplaceDistribution(ScalarFamily):
    """Laplace distribution with location ``mu`` (its median) and scale ``b`` (variance ``2 b^2``).

    Examples
    --------
    >>> LaplaceDistribution(1.0, 2.0).log_density(1.0) == -math.log(4.0)
    True
    """

    parameters = (finite("mu"), positive("b"))
    encoder_class = LaplaceEncoder
    mu: float
    b: float

    def __init__(self, mu: float, b: float) -> None:
        self._set_parameters(mu, b)
        self._log_norm = math.log(2.0 * self.b)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.laplace(self.mu, self.b, size=size)

    def log_density(self, x: float) -> float:
        x = float(x)
        if not math.isfinite(x):
            return -math.inf
        return -self._log_norm - abs(x - self.mu) / self.b

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        return -self._log_norm - np.abs(enc - self.mu) / self.b  # type: ignore[no-any-return]

    def moments(self) -> tuple[float, float]:
        return self.mu, 2.0 * self.b * self.b

    def _tails(self, z: np.ndarray) -> np.ndarray:
        """``log P(Z <= z)`` for the standard Laplace: ``z - ln 2`` below 0, ``log(1 - e^-z / 2)``
        above (by ``log1m_exp``, accurate where it is near 0)."""
        with np.errstate(over="ignore"):
            return np.where(z < 0, z - _LN2, log1m_exp(np.maximum(z, 0.0) + _LN2))  # type: ignore[no-any-return]

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        return self._tails((np.asarray(x, dtype=np.float64) - self.mu) / self.b)

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        return self._tails((self.mu - np.asarray(x, dtype=np.float64)) / self.b)

    def quantile(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            low = self.mu + self.b * np.log(2.0 * p)
            high = self.mu - self.b * np.log(2.0 * (1.0 - p))
        return np.where(p <= 0.5, low, high)  # type: ignore[no-any-return]


class LaplaceAccumulator(Accumulator):
    """The statistics at the current model (see the module docstring); value ``(sw, s1, s2, centre,
    unit, s_abs, below, at, above, near_below, near_above, bins_below, bins_above, mm_a, mm_b, mixed)``.

    ``centre`` and ``unit`` are the current model's ``mu`` and ``b`` (the bins' unit); ``s1``, ``s2``
    (the weighted mean and Σw (x - mean)^2, merged pairwise as Chan, Golub & LeVeque do, so values far
    from 0 with a small spread keep their variance however the rows are split) are the first pass's (no
    current model: ``centre = unit = 0``); a ``near_*`` is 0
    while its side's weight is 0; ``mixed`` is 1.0 once statistics at different centres were combined.
    """

    encoder_class = LaplaceEncoder

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sw = self.s1 = self.s2 = 0.0
        self.centre = self.unit = 0.0
        self.s_abs = self.below = self.at = self.above = 0.0
        self.near_below = self.near_above = 0.0
        self.bins_below: np.ndarray = np.zeros(_NBINS)
        self.bins_above: np.ndarray = np.zeros(_NBINS)
        self.mm_a = self.mm_b = 0.0
        self.mixed = False  # statistics taken at different centres were combined

    def seq_update(self, enc: np.ndarray, weights: np.ndarray, estimate: Any) -> None:
        x = np.asarray(enc, dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)
        if estimate is None:
            sw = float(w.sum())
            if sw > 0:
                mean = float(np.dot(w, x)) / sw
                self._moments_in(sw, mean, float(np.dot(w, np.square(x - mean))))
            return
        if not isinstance(estimate, LaplaceDistribution):
            raise SpecError(
                "LaplaceAccumulator.seq_update needs the current LaplaceDistribution (or None on the first "
                f"pass), got {estimate!r}"
            )
        part = LaplaceAccumulator()
        part.centre, part.unit = estimate.mu, estimate.b
        part._add_rows(x, w)
        self.combine(part.value())

    def _moments_in(self, sw: float, mean: float, m2: float) -> None:
        """Fold a part's first-pass moments (weight, mean, Σw (x - mean)^2) into these."""
        if not sw > 0:
            return
        total = self.sw + sw
        if not self.sw > 0:
            self.sw, self.s1, self.s2 = total, mean, m2
            return
        delta = mean - self.s1
        self.s1 += delta * (sw / total)
        self.s2 += m2 + delta * delta * (self.sw * sw / total)
        self.sw = total

    def _add_rows(self, x: np.ndarray, w: np.ndarray) -> None:
        c = self.centre
        d = x - c
        dist = np.abs(d)
        self.sw = float(w.sum())
        self.s_abs = float(np.dot(w, dist))
        lower, upper, same = (d < 0) & (w > 0), (d > 0) & (w > 0), (d == 0) & (w > 0)
        self.below, self.above, self.at = float(w[lower].sum()), float(w[upper].sum()), float(w[same].sum())
        if lower.any():
            self.near_below = float(x[lower].max())
        if upper.any():
            self.near_above = float(x[upper].min())
        apart = dist > 0
        with np.errstate(divide="ignore"):
            k = np.floor(BINS_PER_OCTAVE * np.log2(dist / self.unit)) + BINS_PER_OCTAVE * _LOW_OCTAVES
        k = np.clip(np.where(apart, k, 0), 0, _NBINS - 1).astype(np.int64)
        self.bins_below = np.bincount(k[lower], weights=w[lower], minlength=_NBINS)
        self.bins_above = np.bincount(k[upper], weights=w[upper], minlength=_NBINS)
        inv = np.divide(w, dist, out=np.zeros_like(w), where=apart)
        self.mm_a = float(inv.sum())
        self.mm_b = float(np.dot(inv, d))  # Σw (x - c) / |x - c| over the rows apart from c

    def combine(self, value: Any) -> LaplaceAccumulator:
        other = LaplaceAccumulator().from_value(value) if not isinstance(value, LaplaceAccumulator) else value
        if other.unit == 0.0:  # a first pass
            self._moments_in(other.sw, other.s1, other.s2)
            return self
        self.sw += other.sw
        self.mixed = self.mixed or other.mixed
        if self.unit == 0.0:
            self.centre, self.unit = other.centre, other.unit
        elif (other.centre, other.unit) != (self.centre, self.unit):
            # taken at another model (an incremental update's frozen rows): only the majorizer moves
            self.mixed = True
            shift = other.centre - self.centre
            other.mm_b += other.mm_a * shift  # Σw u (x - c') = Σw u (x - c) + (c - c') Σw u
        self.s_abs += other.s_abs
        self.mm_a += other.mm_a
        self.mm_b += other.mm_b
        if not self.mixed:
            if other.below > 0:
                self.near_below = (
                    other.near_below if self.below == 0 else max(self.near_below, other.near_below)
                )
            if other.above > 0:
                self.near_above = (
                    other.near_above if self.above == 0 else min(self.near_above, other.near_above)
                )
            self.bins_below = self.bins_below + other.bins_below
            self.bins_above = self.bins_above + other.bins_above
        self.below += other.below
        self.at += other.at
        self.above += other.above
        return self

    def value(self) -> tuple[Any, ...]:
        return (
            self.sw,
            self.s1,
            self.s2,
            self.centre,
            self.unit,
            self.s_abs,
            self.below,
            self.at,
            self.above,
            self.near_below,
            self.near_above,
            self.bins_below.copy(),
            self.bins_above.copy(),
            self.mm_a,
            self.mm_b,
            float(self.mixed),
        )

    def _scale(self, factor: float) -> None:
        for name in ("sw", "s2", "s_abs", "below", "at", "above", "mm_a", "mm_b"):  # s1 is a mean
            setattr(self, name, factor * getattr(self, name))
        self.bins_below = factor * self.bins_below
        self.bins_above = factor * self.bins_above

    def from_value(self, value: Any) -> LaplaceAccumulator:
        (sw, s1, s2, centre, scale, s_abs, below, at, above, nb, na, bb, ba, mm_a, mm_b, mixed) = value
        self.sw, self.s1, self.s2, self.centre, self.unit = (float(v) for v in (sw, s1, s2, centre, scale))
        self.s_abs, self.below, self.at, self.above = (float(v) for v in (s_abs, below, at, above))
        self.near_below, self.near_above = float(nb), float(na)
        self.bins_below = np.array(bb, dtype=np.float64)
        self.bins_above = np.array(ba, dtype=np.float64)
        self.mm_a, self.mm_b, self.mixed = float(mm_a), float(mm_b), bool(mixed)
        return self


def _step(s: LaplaceAccumulator, up: bool) -> tuple[float, float | None]:
    """The farthest point on the heavier side of ``c`` that the statistics prove does not raise
    ``f(mu) = Σw |x - mu|``, and ``f`` there when it is known exactly (at the nearest row, no row lies
    between: ``f`` falls linearly with slope ``heavier - lighter - at``)."""
    sign = 1.0 if up else -1.0
    heavier, lighter = (s.above, s.below) if up else (s.below, s.above)
    nearest = s.near_above if up else s.near_below
    bins = s.bins_above if up else s.bins_below
    passed = lighter + s.at + np.cumsum(bins)  # weight short of each bin's far edge
    ok = np.flatnonzero(passed[:-1] <= 0.5 * (s.below + s.at + s.above))
    edge = float(_bin_edges(s.unit)[ok[-1]]) if ok.size else 0.0
    if edge > sign * (nearest - s.centre):
        return s.centre + sign * edge, None
    return nearest, s.s_abs - (heavier - lighter - s.at) * abs(nearest - s.centre)


def median_step(s: LaplaceAccumulator) -> tuple[float, float | None]:
    """The M-step's location from statistics at one centre ``c`` (see the module docstring), and
    ``Σw |x - mu|`` there where the statistics give it exactly (else None)."""
    if s.above - s.below > s.at:
        return _step(s, up=True)
    if s.below - s.above > s.at:
        return _step(s, up=False)
    # c is a weighted median; the medians may extend to the nearest row on a side where the weights
    # balance exactly (f is flat there): take the middle of that interval.
    low = s.near_below if (s.below > 0 and s.below == s.above + s.at) else s.centre
    high = s.near_above if (s.above > 0 and s.above == s.below + s.at) else s.centre
    return 0.5 * (low + high), s.s_abs


@register_estimator("laplace")
@dataclass(eq=False, repr=False)
class LaplaceEstimator(Estimator):
    """Maximum-likelihood Laplace fit by the generalized-EM step of the module docstring (``b`` in closed
    form at the current location, then the location towards the weighted median, never lowering the
    likelihood); at convergence the weighted median and ``b = Σw |x - mu| / Σw``, as
    ``scipy.stats.laplace.fit`` gives for unit weights.

    Parameters
    ----------
    pseudo_count : float, optional
        With ``suff_stat = (mu0, b0)``: ``pc`` pseudo-rows at ``mu0`` that each add ``b0`` to
        ``Σw |x - mu|`` (the prior ``b^-pc exp(-pc (|mu - mu0| + b0) / b)``, whose mode is ``(mu0, b0)``).
    suff_stat : (float, float), optional
        Prior location and scale (default (0, 1) when only ``pseudo_count`` is given).
    min_b : float
        Scale floor (default 1e-12): rows on one value keep a finite density.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or mu = 0, b = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda mu0, b0: b0 > 0, "a pair (mu0, b0) of finite numbers with b0 > 0"
    )
    min_b: float = floor(DEFAULT_MIN_B)
    name: str | None = None
    keys: str | None = None

    accumulator_class = LaplaceAccumulator
    encoder_class = LaplaceEncoder

    def estimate(self, nobs: float | None, value: Any) -> LaplaceDistribution:
        s = LaplaceAccumulator().from_value(value)
        mu0, b0 = (0.0, 1.0) if self.suff_stat is None else self.suff_stat
        pc = self.pseudo_count or 0.0
        if s.unit == 0.0:  # first pass: moments
            s._moments_in(pc, mu0, pc * 2.0 * b0 * b0)  # pc pseudo-rows: mean mu0, variance 2 b0^2
            if not s.sw > 0:
                return LaplaceDistribution(mu0, b0)
            mean = s.s1
            var = max(s.s2 / s.sw, 0.0)
            b = math.sqrt(0.5 * var) if math.isfinite(var) else b0
            return LaplaceDistribution(mean if math.isfinite(mean) else mu0, max(b, self.min_b))
        if pc > 0:
            prior = LaplaceAccumulator()
            prior.centre, prior.unit = s.centre, s.unit
            prior._add_rows(np.array([mu0]), np.array([pc]))
            prior.s_abs += pc * b0
            s.combine(prior.value())
        if not s.sw > 0:
            return LaplaceDistribution(mu0, b0)
        if s.mixed:
            mu = s.centre + s.mm_b / s.mm_a if s.mm_a > 0 else s.centre
            return LaplaceDistribution(mu, max(s.s_abs / s.sw, self.min_b))
        mu, spread = median_step(s)
        # b at mu where Σw |x - mu| is known there (ECM's next conditional step, for free), else at c
        return LaplaceDistribution(mu, max((s.s_abs if spread is None else spread) / s.sw, self.min_b))
