"""Weibull: ``WeibullDistribution(k, lam)`` with shape ``k`` and scale ``lam``
(``scipy.stats.weibull_min(c=k, scale=lam)``, ``loc=0``).

Records are positive real numbers; ``log p(x) = log(k / lam) + (k - 1) log(x / lam) - (x / lam)^k``. A zero
is outside the support: its density is 0 for ``k > 1`` and infinite for ``k < 1``, and ``log x`` (which the
fit needs) does not exist there. The encoded batch is ``(x, log x)``.

Estimation is a generalized EM (monotone minorize-maximize) step on the profile log-likelihood in ``k``.
Given ``k`` the scale is exact, ``lam^k = S(k) / Σw`` with ``S(k) = Σw x^k``, and the profile is
``l(k) = Σw log k - Σw log(S(k) / Σw) + (k - 1) Σw log x - Σw`` (Johnson, Kotz & Balakrishnan,
*Continuous Univariate Distributions* vol. 1, 2nd ed., ch. 21 section 8; Cohen 1965, Technometrics 7,
"Maximum likelihood estimation in the Weibull distribution based on complete and on censored samples").
``S`` is convex in ``k`` and so is ``S''(k) = Σw x^k log^2 x``, so on an interval ``[k0, k1]`` (either
side of the current ``k0``) ``S''`` is at most ``M = max(S''(k0), S''(k1))`` and Taylor's theorem gives
``S(k) <= Q(k) = S(k0) + S'(k0) (k - k0) + M (k - k0)^2 / 2`` there (Lange, *MM Optimization Algorithms*,
SIAM 2016, ch. 4: a quadratic upper bound from a curvature bound). Hence
``l(k) >= m(k) = Σw log k - Σw log(Q(k) / Σw) + (k - 1) Σw log x - Σw``, with equality at ``k0``; and with
``lam^k = Q(k) / Σw`` the full log-likelihood at ``(k, lam)`` is at least ``m(k)`` too (because
``S(k) <= Q(k)``). The pass sums, about the current scale ``s`` (``z = x / s``, so nothing overflows),
``Σw z^k0``, ``Σw z^k0 log z``, ``Σw z^k0 log^2 z`` and ``Σw z^k log^2 z`` at the ends
``k0 exp(±d)`` of nested intervals (``d = 1, 1/4, ..., 4^-7``); the M-step maximises each interval's
``m`` on the side the profile rises (a bisection on ``m'``) and keeps the best, never below ``m(k0) =
l(k0)``: the log-likelihood never decreases, and the narrow intervals make the bound nearly exact near the
maximum (fast final convergence). All sums merge by addition across partitions (they are taken at the
current model, which every partition shares).

The first pass (no current model) sums ``Σw log x`` and ``Σw log^2 x``: the log of a Weibull variable is a
Gumbel (minimum) variable with variance ``pi^2 / (6 k^2)`` and mean ``log lam - gamma / k``, which gives the
start.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._cdf import log1m_exp
from mixle_spark.stats._scalar_common import (
    ScalarEncoder,
    ScalarFamily,
    bound,
    check_bounds,
    positive,
    prior_tuple,
)
from mixle_spark.stats._special import digamma, gammaln, trigamma
from mixle_spark.stats._validate import check_range
from mixle_spark.stats.base import Accumulator, Estimator, register_distribution, register_estimator

__all__ = [
    "WeibullAccumulator",
    "WeibullDistribution",
    "WeibullEncoder",
    "WeibullEstimator",
]

DEFAULT_MIN_K = 1e-2
DEFAULT_MAX_K = 1e4
_EULER = 0.57721566490153286061
_STEPS = np.array([4.0**-j for j in range(8)])
"""Half-widths ``d`` (in log k) of the nested intervals the minorizer's curvature bound is taken on."""
_BISECTIONS = 100


class WeibullEncoder(ScalarEncoder):
    """Reads positive finite numbers into ``(x, log x)``, two float64 arrays of shape (n,)."""

    estimator_name = "WeibullEstimator"
    expectation = "a positive finite number"

    def seed_values(self, enc: Any) -> np.ndarray:
        return np.asarray(enc[1], dtype=np.float64)  # log x: the scale is multiplicative

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected, low=0.0, low_open=True)

    def pack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x, np.log(x)


@register_distribution("weibull")
class WeibullDistribution(ScalarFamily):
    """Weibull distribution with shape ``k`` and scale ``lam`` (``k = 1`` is the exponential of mean
    ``lam``).

    Examples
    --------
    >>> WeibullDistribution(1.0, 2.0).log_density(2.0) == -math.log(2.0) - 1.0
    True
    """

    parameters = (positive("k"), positive("lam"))
    encoder_class = WeibullEncoder
    k: float
    lam: float

    def __init__(self, k: float, lam: float) -> None:
        self._set_parameters(k, lam)
        self._log_lam = math.log(self.lam)
        self._log_const = math.log(self.k) - self._log_lam

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return self.lam * rng.weibull(self.k, size=size)

    def log_density(self, x: float) -> float:
        x = float(x)
        if not (0.0 < x < math.inf):
            return -math.inf
        return float(self.seq_log_density((np.array([x]), np.array([math.log(x)])))[0])

    def seq_log_density(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        log_z = enc[1] - self._log_lam
        with np.errstate(over="ignore"):
            return self._log_const + (self.k - 1.0) * log_z - np.exp(self.k * log_z)  # type: ignore[no-any-return]

    def _power(self, x: np.ndarray) -> np.ndarray:
        """``(x / lam)^k`` for ``x`` clipped at 0 (the cumulative hazard)."""
        z = np.maximum(np.asarray(x, dtype=np.float64), 0.0) / self.lam
        with np.errstate(over="ignore"):
            return z**self.k  # type: ignore[no-any-return]

    def moments(self) -> tuple[float, float]:
        g1 = gammaln(1.0 + 1.0 / self.k)
        mean = self.lam * math.exp(g1)
        # Var = lam^2 (Gamma(1 + 2/k) - Gamma(1 + 1/k)^2), written as mean^2 expm1(difference of gammalns)
        return mean, mean * mean * math.expm1(gammaln(1.0 + 2.0 / self.k) - 2.0 * g1)

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        return log1m_exp(self._power(x))  # type: ignore[no-any-return]

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        return -self._power(x)

    def quantile(self, p: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return self.lam * (-np.log1p(-np.asarray(p, dtype=np.float64))) ** (1.0 / self.k)  # type: ignore[no-any-return]


def _weibull_log_moments(k: float, lam: float) -> tuple[float, float]:
    """``E[log x]`` and ``E[log^2 x]`` under Weibull(k, lam): ``log x`` is Gumbel-minimum with mean
    ``log lam - gamma / k`` and variance ``pi^2 / (6 k^2)``."""
    mean = math.log(lam) - _EULER / k
    return mean, mean * mean + math.pi**2 / (6.0 * k * k)


class WeibullAccumulator(Accumulator):
    """Statistics ``(Σw, Σw log x, Σw log^2 x, k0, s, T, hi, lo)``: the log-moments, then the sums taken
    at the current model's shape ``k0`` about its scale ``s`` (``z = x / s``): ``T = (Σw z^k0,
    Σw z^k0 log z, Σw z^k0 log^2 z)`` and ``Σw z^k log^2 z`` at ``k = k0 exp(+d)`` (``hi``) and
    ``k0 exp(-d)`` (``lo``) for each interval half-width ``d`` (see the module docstring).

    ``k0 = 0`` marks log-moments only (a first pass without a model). Statistics taken at two different
    models cannot be added exactly: combining them keeps the log-moments only, so the next estimate
    restarts from them (an incremental update across models does; a fit never mixes models).
    """

    encoder_class = WeibullEncoder

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sw = 0.0
        self.slog = 0.0
        self.slog2 = 0.0
        self._reset_anchor(0.0, 1.0)

    def _reset_anchor(self, k0: float, s: float) -> None:
        self.k0, self.s = k0, s
        self.t = np.zeros(3)
        self.hi = np.zeros(len(_STEPS))
        self.lo = np.zeros(len(_STEPS))

    def _anchor(self, k0: float, s: float) -> None:
        if (k0, s) == (self.k0, self.s):
            return
        # an empty accumulator takes the model's anchor; a mix of two models keeps the log-moments only
        self._reset_anchor(k0, s) if self.sw == 0.0 else self._reset_anchor(0.0, 1.0)

    def seq_update(self, enc: tuple[np.ndarray, np.ndarray], weights: np.ndarray, estimate: Any) -> None:
        if estimate is not None and not isinstance(estimate, WeibullDistribution):
            raise SpecError(
                "WeibullAccumulator.seq_update needs the current WeibullDistribution (or None on the "
                f"first pass), got {estimate!r}"
            )
        log_x = enc[1]
        weights = np.asarray(weights, dtype=np.float64)
        if estimate is None:
            self._anchor(0.0, 1.0)
        else:
            self._anchor(estimate.k, estimate.lam)
        total = float(weights.sum())
        self.sw += total
        wl = weights * log_x
        self.slog += float(wl.sum())
        self.slog2 += float(np.dot(wl, log_x))
        if self.k0 == 0.0 or log_x.size == 0:
            return None
        y = log_x - math.log(self.s)
        with np.errstate(over="ignore", invalid="ignore"):
            wz = weights * np.exp(self.k0 * y)
            wzy = wz * y
            self.t += [float(wz.sum()), float(wzy.sum()), float(np.dot(wzy, y))]
            wy2 = weights * y * y
            for j, d in enumerate(_STEPS):
                self.hi[j] += float(np.dot(wy2, np.exp(self.k0 * math.exp(d) * y)))
                self.lo[j] += float(np.dot(wy2, np.exp(self.k0 * math.exp(-d) * y)))
        return None

    def combine(self, value: Any) -> WeibullAccumulator:
        sw, slog, slog2, k0, s, t, hi, lo = value
        if float(sw) != 0.0:
            if self.sw == 0.0:
                self._reset_anchor(float(k0), float(s))
            elif (float(k0), float(s)) != (self.k0, self.s):
                self._reset_anchor(0.0, 1.0)
            if self.k0 != 0.0:
                self.t += np.asarray(t, dtype=np.float64)
                self.hi += np.asarray(hi, dtype=np.float64)
                self.lo += np.asarray(lo, dtype=np.float64)
        self.sw += float(sw)
        self.slog += float(slog)
        self.slog2 += float(slog2)
        return self

    def value(self) -> tuple[Any, ...]:
        return (
            self.sw,
            self.slog,
            self.slog2,
            self.k0,
            self.s,
            self.t.copy(),
            self.hi.copy(),
            self.lo.copy(),
        )

    def _scale(self, factor: float) -> None:
        self.sw *= factor  # every sum is a weighted sum; the anchor (k0, s) is kept
        self.slog *= factor
        self.slog2 *= factor
        self.t *= factor
        self.hi *= factor
        self.lo *= factor

    def from_value(self, value: Any) -> WeibullAccumulator:
        sw, slog, slog2, k0, s, t, hi, lo = value
        self.sw, self.slog, self.slog2 = float(sw), float(slog), float(slog2)
        self.k0, self.s = float(k0), float(s)
        self.t = np.array(t, dtype=np.float64)
        self.hi = np.array(hi, dtype=np.float64)
        self.lo = np.array(lo, dtype=np.float64)
        return self


def _best_in_interval(
    m: Callable[[float], float], dm: Callable[[float], float], end: float
) -> tuple[float, float]:
    """``(t, m(t))`` maximising ``m`` on the segment from 0 to ``end`` where ``m'(0)`` points towards
    ``end``: ``end`` itself when ``m`` still rises there, else the root of ``m'`` by bisection."""
    if dm(end) * end >= 0.0:
        return end, m(end)
    a, b = 0.0, end
    for _ in range(_BISECTIONS):
        mid = 0.5 * (a + b)
        if mid in (a, b):
            break
        if dm(mid) * end > 0.0:
            a = mid
        else:
            b = mid
    return a, m(a)


@register_estimator("weibull")
@dataclass(eq=False, repr=False)
class WeibullEstimator(Estimator):
    """Maximum-likelihood Weibull fit by a monotone generalized-EM step in the shape (see the module
    docstring for the statistics and the bound); the scale given the shape is exact.

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations distributed as ``Weibull(k0, lam0)`` = ``suff_stat``: they add their
        expected statistics (``E[z^a log^j z] = (lam0 / s)^a Gamma(1 + a / k0) ...``, with digamma and
        trigamma for ``j = 1, 2``), so the fit maximises the data's log-likelihood plus ``pc`` times the
        expected log-likelihood of ``Weibull(k0, lam0)``; the step stays monotone in that objective.
    suff_stat : (float, float), optional
        Prior shape and scale (default (1, 1) when only ``pseudo_count`` is given).
    min_k, max_k : float
        Bounds of the shape (defaults 0.01 and 1e4). Data that are all equal drift to ``max_k``.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or k = 1, lam = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda k0, lam0: k0 > 0 and lam0 > 0, "a pair (k0, lam0) of positive finite numbers"
    )
    min_k: float = bound(DEFAULT_MIN_K)
    max_k: float = bound(DEFAULT_MAX_K)
    name: str | None = None
    keys: str | None = None

    accumulator_class = WeibullAccumulator
    encoder_class = WeibullEncoder

    def check(self) -> None:
        check_bounds(self, "min_k", "max_k")

    def _prior(self) -> tuple[float, float]:
        return (1.0, 1.0) if self.suff_stat is None else self.suff_stat

    def _with_prior(self, value: Any) -> tuple[Any, ...]:
        """The statistics with the pseudo-observations' expected statistics added."""
        sw, slog, slog2, k0, s, t, hi, lo = value
        t, hi, lo = (np.array(v, dtype=np.float64) for v in (t, hi, lo))
        pc = self.pseudo_count or 0.0
        if pc <= 0:
            return float(sw), float(slog), float(slog2), float(k0), float(s), t, hi, lo
        kp, lamp = self._prior()
        m1, m2 = _weibull_log_moments(kp, lamp)
        sw, slog, slog2 = float(sw) + pc, float(slog) + pc * m1, float(slog2) + pc * m2
        if k0 > 0:
            shift = math.log(lamp / s)

            def moments(a: float) -> tuple[float, float, float]:
                r = 1.0 + a / kp
                e0 = math.exp(a * shift + gammaln(r))
                e1 = shift + digamma(r) / kp
                return e0, e0 * e1, e0 * (e1 * e1 + trigamma(r) / (kp * kp))

            t += pc * np.array(moments(k0))
            hi += pc * np.array([moments(k0 * math.exp(d))[2] for d in _STEPS])
            lo += pc * np.array([moments(k0 * math.exp(-d))[2] for d in _STEPS])
        return sw, slog, slog2, float(k0), float(s), t, hi, lo

    def estimate(self, nobs: float | None, value: Any) -> WeibullDistribution:
        sw, slog, slog2, k0, s, t, hi, lo = self._with_prior(value)
        kp, lamp = self._prior()
        fallback = WeibullDistribution(min(max(kp, self.min_k), self.max_k), lamp)
        if not (sw > 0 and math.isfinite(slog) and math.isfinite(slog2)):
            return fallback
        if k0 == 0.0 or not (t[0] > 0 and np.all(np.isfinite(t))):
            return self._start(sw, slog, slog2) or fallback
        k, log_q = self._shape_step(sw, slog - sw * math.log(s), k0, t, hi, lo)
        lam = s * math.exp((log_q - math.log(sw)) / k)
        if not (math.isfinite(lam) and lam > 0):
            return self._start(sw, slog, slog2) or fallback
        return WeibullDistribution(k, lam)

    def _start(self, sw: float, slog: float, slog2: float) -> WeibullDistribution | None:
        """The log-moment start: ``k = pi / sqrt(6 var(log x))``, ``log lam = mean(log x) + gamma / k``."""
        mean = slog / sw
        var = slog2 / sw - mean * mean
        k = math.pi / math.sqrt(6.0 * var) if var > 0 else self.max_k
        k = min(max(k, self.min_k), self.max_k)
        lam = math.exp(mean + _EULER / k)
        return WeibullDistribution(k, lam) if math.isfinite(lam) and lam > 0 else None

    def _shape_step(
        self, sw: float, lz: float, k0: float, t: np.ndarray, hi: np.ndarray, lo: np.ndarray
    ) -> tuple[float, float]:
        """The new shape and ``log Q(k)`` (``Q`` the bound on ``Σw z^k``) maximising the minorizer over
        the intervals on the side where the profile rises; ``lz = Σw log z``."""
        t0, t1, t2 = (float(v) for v in t)
        slope = sw / k0 - sw * t1 / t0 + lz  # the profile's derivative at k0
        best = (k0, t0, 0.0)  # (k, Q(k), m(k) - m(k0))
        if slope == 0.0 or not math.isfinite(slope):
            return k0, math.log(t0)
        ends, offsets = (hi, _STEPS) if slope > 0 else (lo, -_STEPS)
        for end_value, d in zip(ends, offsets, strict=True):
            k_end = min(max(k0 * math.exp(d), self.min_k), self.max_k)
            big = max(t2, float(end_value))  # the bound on Σw z^k log^2 z over the interval
            if k_end == k0 or not math.isfinite(big):
                continue

            def q(x: float, big: float = big) -> float:
                return t0 + x * (t1 + 0.5 * big * x)

            def m(x: float, big: float = big) -> float:
                # m(k0 + x) - m(k0), written so that a small step's gain is not lost to rounding
                rise = x * (t1 + 0.5 * big * x) / t0
                if not rise > -1.0:
                    return -math.inf
                return sw * (math.log1p(x / k0) - math.log1p(rise)) + x * lz

            def dm(x: float, q: Callable[[float], float] = q, big: float = big) -> float:
                return sw / (k0 + x) - sw * (t1 + big * x) / q(x) + lz

            step, value = _best_in_interval(m, dm, k_end - k0)
            if value > best[2]:
                best = (k0 + step, q(step), value)
        return best[0], math.log(best[1])
