"""Skellam: ``SkellamDistribution(mu1, mu2)``, the difference ``N1 - N2`` of independent Poisson counts
with means ``mu1`` and ``mu2`` (``scipy.stats.skellam(mu1, mu2)``), on all integers.

``P(k) = e^{-(mu1 + mu2)} (mu1 / mu2)^{k / 2} I_|k|(z)``, ``z = 2 sqrt(mu1 mu2)`` (J. G. Skellam, "The
frequency distribution of the difference between two Poisson variates", JRSS A 109, 1946), computed as
``-(sqrt mu1 - sqrt mu2)^2 + (k / 2) ln(mu1 / mu2) + ln(e^-z I_|k|(z))`` so that no large terms cancel.
The model has one ``z``, so a batch needs ``I_v(z)`` only at the integer orders ``v`` up to its largest
``|k|``: :func:`log_bessel_ive_orders` gives them all at once, ``ln(e^-z I_0(z))`` from
:func:`~mixle_spark.stats._special.log_i0e` times the ratios ``I_v / I_(v-1)`` from the backward
recurrence ``r_v = 1 / (2 v / z + r_(v+1))`` (the continued fraction of Gauss; Abramowitz & Stegun
9.6.26, stable downwards, started ``~6 sqrt(z)`` orders above the largest needed from Amos's bound
``z / (v + sqrt(v^2 + z^2))``, so the start's error has died out: it shrinks by ``r_v^2`` per order).
A batch is then scored by a lookup in the table of its range of ``k``.

Estimation: EM on the latent pair (``k = N1 - N2``). Given ``k``, ``E[N2 | k] = sqrt(mu1 mu2)
I_(|k|+1)(z) / I_|k|(z) + max(-k, 0)`` and ``E[N1 | k] = E[N2 | k] + k`` (the posterior of ``N2`` is
proportional to the terms of the power series of ``I_|k|``, Abramowitz & Stegun 9.6.10, whose mean is
that ratio), and the complete-data M-step of Dempster, Laird & Rubin (1977) is ``mu2 = Σw E[N2 | k] /
Σw`` and ``mu1 = mu2 + Σw k / Σw``: an exact EM step (the likelihood never decreases). The accumulator
reads the current model (``seq_update``'s ``estimate``) and sums ``Σw``, ``Σw k``, ``Σw k^2`` (the first
pass's moments: ``mu1 + mu2`` is the variance, ``mu1 - mu2`` the mean) and, over the rows updated with a
model, ``Σw`` and ``Σw E[N2 | k]``; merged by addition. EM converges linearly, slowly when both means
are large (expect hundreds of passes to 1e-8).

The cdf and survival function are log-sum-exp accumulations of the pmf over a window holding the
mean +- 40 sd, the values asked for and a margin past both (each from the side where it is the smaller
sum); the quantile searches the same cumulative sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._cdf import log1m_exp
from mixle_spark.stats._scalar_common import (
    ScalarEncoder,
    ScalarFamily,
    floor,
    positive,
    prior_tuple,
)
from mixle_spark.stats._special import log_i0e
from mixle_spark.stats._validate import check_integer, check_range
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Estimator,
    register_distribution,
    register_estimator,
)

__all__ = [
    "SkellamAccumulator",
    "SkellamDistribution",
    "SkellamEncoder",
    "SkellamEstimator",
    "bessel_ratios",
    "log_bessel_ive_orders",
]

DEFAULT_MIN_MU = 1e-8
_LN2 = math.log(2.0)
_TABLE_ROWS = 4  # a batch is scored through a table of its k range when that is <= 4 rows per row + 1024


def bessel_ratios(z: float, top: int) -> np.ndarray:
    """``I_v(z) / I_(v-1)(z)`` for ``v = 1..top``, shape (top,), by the backward recurrence of the module
    docstring (``z > 0``)."""
    start = top + 16 + int(6.0 * math.sqrt(z))
    v = start + 1
    r = z / (v + math.sqrt(v * v + z * z))
    out = np.empty(start)
    two_over_z = 2.0 / z
    for order in range(start, 0, -1):  # over orders, not rows: its length is set by z and the top order
        r = 1.0 / (order * two_over_z + r)
        out[order - 1] = r
    return out[:top]


def log_bessel_ive_orders(z: float, top: int) -> np.ndarray:
    """``ln(e^-z I_v(z))`` for ``v = 0..top``, shape (top + 1,) (``z > 0``)."""
    out = np.empty(top + 1)
    out[0] = float(log_i0e(z))
    if top:
        out[1:] = out[0] + np.cumsum(np.log(bessel_ratios(z, top)))
    return out


class SkellamEncoder(ScalarEncoder):
    """Reads integers (of any sign) into a float64 array of shape (n,)."""

    estimator_name = "SkellamEstimator"
    expectation = "an integer"

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected)
        check_integer(x, self.expected)


@register_distribution("skellam")
class SkellamDistribution(ScalarFamily):
    """Skellam distribution of ``N1 - N2``, ``N1 ~ Poisson(mu1)`` and ``N2 ~ Poisson(mu2)`` independent.

    Examples
    --------
    >>> d = SkellamDistribution(1.0, 1.0)  # P(0) = e^-2 I_0(2)
    >>> round(math.exp(d.log_density(0)), 12)
    0.308508322554
    """

    parameters = (positive("mu1"), positive("mu2"))
    encoder_class = SkellamEncoder
    record_type = int
    mu1: float
    mu2: float

    def __init__(self, mu1: float, mu2: float) -> None:
        self._set_parameters(mu1, mu2)
        self._z = 2.0 * math.sqrt(self.mu1 * self.mu2)
        self._base = -((math.sqrt(self.mu1) - math.sqrt(self.mu2)) ** 2)
        self._half_log_ratio = 0.5 * (math.log(self.mu1) - math.log(self.mu2))

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.poisson(self.mu1, size=size) - rng.poisson(self.mu2, size=size)

    def log_pmf_range(self, low: int, high: int) -> np.ndarray:
        """``ln P(k)`` for ``k = low..high``, shape (high - low + 1,)."""
        k = np.arange(low, high + 1, dtype=np.float64)
        top = int(max(abs(low), abs(high)))
        log_ive = log_bessel_ive_orders(self._z, top)
        return self._base + self._half_log_ratio * k + log_ive[np.abs(k).astype(np.int64)]  # type: ignore[no-any-return]

    def log_density(self, x: int) -> float:
        value = float(x)
        if not (math.isfinite(value) and value == math.floor(value)):
            return -math.inf
        return float(self.log_pmf_range(int(value), int(value))[0])

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        if enc.size == 0:
            return np.zeros(0)
        low, high = int(enc.min()), int(enc.max())
        if high - low + 1 <= _TABLE_ROWS * enc.size + 1024:
            return self.log_pmf_range(low, high)[(enc - low).astype(np.int64)]  # type: ignore[no-any-return]
        top = int(np.abs(enc).max())
        log_ive = log_bessel_ive_orders(self._z, top)
        return self._base + self._half_log_ratio * enc + log_ive[np.abs(enc).astype(np.int64)]  # type: ignore[no-any-return]

    def expected_n2(self, enc: np.ndarray) -> np.ndarray:
        """``E[N2 | k]`` per row, shape (n,) (see the module docstring)."""
        top = int(np.abs(enc).max()) + 1 if enc.size else 1
        ratios = bessel_ratios(self._z, top)  # ratios[v] = I_(v+1) / I_v
        k = np.asarray(enc, dtype=np.float64)
        return 0.5 * self._z * ratios[np.abs(k).astype(np.int64)] + np.maximum(-k, 0.0)  # type: ignore[no-any-return]

    def moments(self) -> tuple[float, float]:
        return self.mu1 - self.mu2, self.mu1 + self.mu2

    def _tail_tables(self, x: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """``(low, ln P(X <= k), ln P(X > k))`` for ``k = low..high``: a window holding every finite
        ``x``, the mean +- 40 sd, and a margin past both beyond which the pmf has decayed by far more than
        the float precision (it falls faster than geometrically there)."""
        mean, var = self.moments()
        sd = math.sqrt(var)
        finite = x[np.isfinite(x)]
        margin = 64 + int(4.0 * sd)
        low = math.floor(min(mean - 40.0 * sd, float(finite.min()) if finite.size else mean)) - margin
        high = math.ceil(max(mean + 40.0 * sd, float(finite.max()) if finite.size else mean)) + margin
        log_pmf = self.log_pmf_range(low, high)
        log_cdf = np.logaddexp.accumulate(log_pmf)
        log_sf = np.append(np.logaddexp.accumulate(log_pmf[::-1])[::-1][1:], -np.inf)
        # each from the complement where that is the smaller sum (fewer digits lost to the additions)
        with np.errstate(divide="ignore"):
            log_cdf, log_sf = (
                np.where(log_cdf > -_LN2, log1m_exp(-log_sf), log_cdf),
                np.where(log_sf > -_LN2, log1m_exp(-log_cdf), log_sf),
            )
        return low, log_cdf, log_sf

    def _lookup(self, x: np.ndarray, which: int) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        low, *tables = self._tail_tables(x.reshape(-1))
        table = tables[which]
        k = np.floor(np.nan_to_num(x, posinf=low + table.size, neginf=low - 1.0)) - low
        inside = np.clip(k, 0, table.size - 1).astype(np.int64)
        below, above = (-math.inf, 0.0) if which == 0 else (0.0, -math.inf)
        return np.where(k < 0, below, np.where(k >= table.size, above, table[inside]))

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        """``ln P(X <= x)``: log-sum-exp of the pmf over a window that holds ``x`` (see ``_tail_tables``)."""
        return self._lookup(x, 0)

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        """``ln P(X > x)``, summed from the upper side (accurate deep in the upper tail)."""
        return self._lookup(x, 1)

    def quantile(self, p: np.ndarray) -> np.ndarray:
        """The least integer ``k`` with ``P(X <= k) >= p`` (``-inf`` at 0, ``inf`` at 1)."""
        p = np.asarray(p, dtype=np.float64)
        low, log_cdf, log_sf = self._tail_tables(np.zeros(0))
        cdf = np.maximum.accumulate(np.where(log_cdf < -_LN2, np.exp(log_cdf), -np.expm1(log_sf)))
        k = low + np.searchsorted(cdf, p * (1.0 - 1e-14), side="left").astype(np.float64)
        return np.where(p <= 0.0, -math.inf, np.where(p >= 1.0, math.inf, k))


class SkellamAccumulator(Accumulator):
    """Statistics ``(sw, sk, skk, sw_em, s_n2)``: ``Σw``, ``Σw k``, ``Σw k^2`` over every row and, over
    the rows updated with a current model, ``Σw`` and ``Σw E[N2 | k]``; merged by addition."""

    encoder_class = SkellamEncoder

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sums = [0.0] * 5

    def seq_update(self, enc: np.ndarray, weights: np.ndarray, estimate: Distribution | None) -> None:
        if enc.size == 0:
            return None
        total = float(weights.sum())
        self.sums[0] += total
        self.sums[1] += float(np.dot(weights, enc))
        self.sums[2] += float(np.dot(weights, enc * enc))
        if estimate is None:
            return None
        if not isinstance(estimate, SkellamDistribution):
            raise SpecError(
                "SkellamAccumulator.seq_update needs the current SkellamDistribution (or None on the first "
                f"pass), got {estimate!r}"
            )
        self.sums[3] += total
        self.sums[4] += float(np.dot(weights, estimate.expected_n2(enc)))
        return None

    def combine(self, value: Any) -> SkellamAccumulator:
        for j, v in enumerate(value):
            self.sums[j] += float(v)
        return self

    def value(self) -> tuple[float, ...]:
        return tuple(self.sums)

    def _scale(self, factor: float) -> None:
        self.sums = [factor * s for s in self.sums]

    def from_value(self, value: Any) -> SkellamAccumulator:
        self.sums = [float(v) for v in value]
        return self


@register_estimator("skellam")
@dataclass(eq=False, repr=False)
class SkellamEstimator(Estimator):
    """Skellam fit by EM on the latent Poisson pair, one EM step per pass (see the module docstring).

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations from ``Skellam(mu1_0, mu2_0)`` = ``suff_stat``: they add their
        expected complete-data statistics (``pc`` to Σw, ``pc (mu1_0 - mu2_0)`` to Σw k, ``pc mu2_0`` to
        Σw E[N2 | k]); on the first pass the moment estimates and the prior are averaged with weights
        Σw and ``pc``.
    suff_stat : (float, float), optional
        Prior ``(mu1_0, mu2_0)`` (default (1, 1) when only ``pseudo_count`` is given).
    min_mu : float
        Floor of both means (default 1e-8): data that never go below 0 drive ``mu2`` towards it.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    First pass (no current model): the moments, ``mu1 = (var + mean) / 2``, ``mu2 = (var - mean) / 2``,
    the variance raised to ``1.01 |mean| + 0.01`` where it is smaller (a Skellam's variance exceeds
    its absolute mean). With zero total weight the estimate is ``suff_stat`` (or (1, 1)).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda m1, m2: m1 > 0 and m2 > 0, "a pair (mu1_0, mu2_0) of positive finite numbers"
    )
    min_mu: float = floor(DEFAULT_MIN_MU)
    name: str | None = None
    keys: str | None = None

    accumulator_class = SkellamAccumulator
    encoder_class = SkellamEncoder

    def _floored(self, mu1: float, mu2: float) -> SkellamDistribution:
        return SkellamDistribution(max(mu1, self.min_mu), max(mu2, self.min_mu))

    def estimate(self, nobs: float | None, value: Any) -> SkellamDistribution:
        sw, sk, skk, sw_em, s_n2 = (float(v) for v in value)
        pc = self.pseudo_count or 0.0
        m10, m20 = (1.0, 1.0) if self.suff_stat is None else self.suff_stat
        prior = self._floored(m10, m20)
        if sw_em > 0:
            mu2 = (s_n2 + pc * m20) / (sw_em + pc)
            mu1 = mu2 + (sk + pc * (m10 - m20)) / (sw + pc)
            return self._floored(mu1, mu2) if math.isfinite(mu1) and math.isfinite(mu2) else prior
        if not (sw > 0 and math.isfinite(skk)):
            return prior
        mean = sk / sw
        var = max(skk / sw - mean * mean, 1.01 * abs(mean) + 0.01)
        mu1, mu2 = 0.5 * (var + mean), 0.5 * (var - mean)
        return self._floored((sw * mu1 + pc * m10) / (sw + pc), (sw * mu2 + pc * m20) / (sw + pc))
