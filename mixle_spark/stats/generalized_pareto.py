"""Generalized Pareto: ``GeneralizedParetoDistribution(xi, sigma)`` with shape ``xi`` and scale ``sigma``,
location 0 (``scipy.stats.genpareto(c=xi, scale=sigma)``).

Records are non-negative real numbers; the support is ``x >= 0``, and ``x <= sigma / |xi|`` when
``xi < 0`` (a value beyond it has density 0: ``-inf``, as a Pareto's below its scale). With ``z = x / sigma``
``log p(x) = -log sigma - (1 + 1/xi) log(1 + xi z)``, the exponential ``-log sigma - z`` at ``xi = 0`` (the
limit, taken without cancellation through ``log1p(xi z) / (xi z)``). The encoded batch is the values.

Estimation (Grimshaw 1993, Technometrics 35, "Computing maximum likelihood estimates for the generalized
Pareto distribution", for the reparametrisation) is an ECM (Meng & Rubin 1993) in ``(xi, theta)`` with
``theta = xi / sigma``: ``l = Σw [log theta - log xi - (1 + 1/xi) log(1 + theta x)]``. At the current
``theta0`` the pass sums ``A = Σw log(1 + theta0 x)``, ``B = Σw x / (1 + theta0 x)`` and
``C = Σw x^2 / (1 + theta0 x)^2`` (and ``C`` at ``theta0 (1 + d)`` for nested ``d``), all merged by addition.

1. Given ``theta0``, ``xi = A / Σw`` exactly (the maximiser in ``xi``; in ``1 / xi`` the objective is
   concave, so clipping ``xi`` to ``min_xi`` keeps the constrained maximum).
2. Given ``xi``, ``theta`` by a minorize-maximize step (Lange, *MM Optimization Algorithms*, SIAM 2016):
   for ``xi > 0`` the term ``-(1 + 1/xi) log(1 + theta x)`` is convex and is minorized by its tangent,
   giving ``theta = Σw / ((1 + 1/xi) B)``; for ``min_xi <= xi < 0`` it is concave and is minorized by
   its second-order expansion with the curvature bound ``C`` taken where ``1 + theta x`` is smallest on the
   step's interval (at ``theta0`` towards 0, at the far end ``theta0 (1 + d)`` away from it), whose
   maximiser is a root of a quadratic; the best interval's is kept.

Each half-step never lowers the log-likelihood, so neither does the pass. ``theta`` keeps its sign (the
objective's ``log theta - log xi`` needs both of one sign): the fit stays on the side of ``xi = 0`` where
it starts, the first pass's moment estimate ``xi = (1 - mean^2 / var) / 2`` (clipped to
``[min_xi, 0.45]``, at least ``1e-3`` away from 0, and, when negative, with the support covering the
largest value). Data from an exponential tail converge towards ``xi = 0`` from that side; the
likelihood's maximum below ``xi = -1`` does not exist (it grows without bound) and the MLE's usual theory
needs ``xi > -1/2`` (Smith 1985, Biometrika 72), hence ``min_xi = -0.5`` by default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._cdf import log1m_exp
from mixle_spark.stats._scalar_common import ScalarEncoder, ScalarFamily, finite, positive, prior_tuple
from mixle_spark.stats._validate import check_range
from mixle_spark.stats.base import Accumulator, Estimator, option, register_distribution, register_estimator

__all__ = [
    "GeneralizedParetoAccumulator",
    "GeneralizedParetoDistribution",
    "GeneralizedParetoEncoder",
    "GeneralizedParetoEstimator",
]

DEFAULT_MIN_XI = -0.5
_STEPS = np.array([4.0**-j for j in range(8)])
"""Relative widths ``d`` of the intervals ``[theta0 (1 + d), theta0]`` a negative ``theta`` may move on."""
_MAX_START_XI = 0.45
_MIN_START_XI = 1e-3
_GOLDEN_STEPS = 120
_PRIOR_HAZARDS, _PRIOR_WEIGHTS = np.polynomial.laguerre.laggauss(32)
"""The prior's pseudo-observations: Gauss-Laguerre nodes in the cumulative hazard ``h = -log(1 - p)`` (which
is exponential), so their weighted sums are the prior's expectations (exact for ``log(1 + theta x)`` at
the prior's own ``theta``, where it is ``xi h``)."""


def _log1p_ratio(u: np.ndarray) -> np.ndarray:
    """``log(1 + u) / u``, 1 at ``u = 0`` (no cancellation for a tiny ``u``)."""
    safe = np.where(u == 0.0, 1.0, u)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(u == 0.0, 1.0, np.log1p(safe) / safe)  # type: ignore[no-any-return]


class GeneralizedParetoEncoder(ScalarEncoder):
    """Reads non-negative finite numbers into a float64 array of shape (n,)."""

    estimator_name = "GeneralizedParetoEstimator"
    expectation = "a non-negative finite number"

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected, low=0.0)


@register_distribution("generalized_pareto")
class GeneralizedParetoDistribution(ScalarFamily):
    """Generalized Pareto distribution with shape ``xi`` and scale ``sigma`` (location 0): ``xi = 0`` is the
    exponential of mean ``sigma``, ``xi > 0`` a power-law tail, ``xi < 0`` a bounded support.

    Examples
    --------
    >>> GeneralizedParetoDistribution(0.0, 2.0).log_density(2.0) == -math.log(2.0) - 1.0
    True
    >>> GeneralizedParetoDistribution(-0.5, 1.0).log_density(2.5)
    -inf
    """

    parameters = (finite("xi"), positive("sigma"))
    encoder_class = GeneralizedParetoEncoder
    xi: float
    sigma: float

    def __init__(self, xi: float, sigma: float) -> None:
        self._set_parameters(xi, sigma)
        self._log_sigma = math.log(self.sigma)
        self._end = self.sigma / -self.xi if self.xi < 0 else math.inf

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return self.quantile(rng.random(size))

    def log_density(self, x: float) -> float:
        x = float(x)
        if not (0.0 <= x < math.inf):
            return -math.inf
        return float(self.seq_log_density(np.array([x]))[0])

    def _cumulative_hazard(self, x: np.ndarray) -> np.ndarray:
        """``(1 / xi) log(1 + xi z)`` (``z`` at ``xi = 0``) for ``0 <= x`` inside the support."""
        z = x / self.sigma
        return z * _log1p_ratio(self.xi * z)

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        x = np.asarray(enc, dtype=np.float64)
        inside = x < self._end
        xs = np.where(inside, x, 0.0)
        out = -self._log_sigma - self._cumulative_hazard(xs) - np.log1p(self.xi * xs / self.sigma)
        if self.xi < 0 and not inside.all():
            at_end = -math.inf if self.xi > -1 else (-self._log_sigma if self.xi == -1 else math.inf)
            out = np.where(inside, out, np.where(x == self._end, at_end, -np.inf))
        return out  # type: ignore[no-any-return]

    def moments(self) -> tuple[float, float]:
        mean = self.sigma / (1.0 - self.xi) if self.xi < 1 else math.inf
        var = self.sigma**2 / ((1.0 - self.xi) ** 2 * (1.0 - 2.0 * self.xi)) if self.xi < 0.5 else math.inf
        return mean, var

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        x = np.maximum(np.asarray(x, dtype=np.float64), 0.0)
        inside = x < self._end
        out = -self._cumulative_hazard(np.where(inside, x, 0.0))
        return np.where(inside, out, -np.inf)  # type: ignore[no-any-return]

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        return log1m_exp(-self.log_survival(x))  # type: ignore[no-any-return]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return self.at_hazard(-np.log1p(-np.asarray(p, dtype=np.float64)))

    def at_hazard(self, h: np.ndarray) -> np.ndarray:
        """The value whose cumulative hazard ``-log P(X > x)`` is ``h`` (``h >= 0``; ``inf`` gives the
        support's end): ``sigma ((1 - p)^(-xi) - 1) / xi = sigma h expm1(xi h) / (xi h)``."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            v = self.xi * h
            ratio = np.where(v == 0.0, 1.0, np.expm1(v) / np.where(v == 0.0, 1.0, v))
            return np.where(np.isinf(h) & (self.xi < 0), self._end, self.sigma * h * ratio)  # type: ignore[no-any-return]


_WIDTH = 4 + 2 * len(_STEPS)
"""One anchor's sums: ``(A, B, C, C_1..C_J)``, then the weight of the rows each leaves outside its support."""


def _anchor_sums(x: np.ndarray, w: np.ndarray, theta: float) -> np.ndarray:
    """``(A, B, C, C_1, ..., C_J)`` at ``theta`` over the rows of positive weight (module docstring), ``C_j``
    at ``theta (1 + d_j)``, followed by ``Σw`` of the rows outside the support (``1 + theta x <= 0``) at
    ``theta`` (for ``A``, ``B``, ``C``) and at each ``theta (1 + d_j)``: those rows add nothing to the sums,
    and a sum with any is not used. Every entry is a finite weighted sum, so merging and scaling are exact."""
    half = 3 + len(_STEPS)
    out = np.zeros(_WIDTH)
    seen = w > 0
    xs, ws = x[seen], w[seen]
    u = 1.0 + theta * xs
    bad = ~(u > 0)
    out[half] = float(ws[bad].sum())
    wg, ug = np.where(bad, 0.0, ws), np.where(bad, 1.0, u)
    wr = wg * xs / ug
    out[:3] = [
        float(np.dot(wg, np.log1p(np.where(bad, 0.0, theta * xs)))),
        float(wr.sum()),
        float(np.dot(wr, xs / ug)),
    ]
    for j, d in enumerate(_STEPS):
        v = 1.0 + theta * (1.0 + d) * xs
        out_j = ~(v > 0)
        out[half + 1 + j] = float(ws[out_j].sum())
        out[3 + j] = float(np.dot(np.where(out_j, 0.0, ws), (xs / np.where(out_j, 1.0, v)) ** 2))
    return out


def _usable(sums: np.ndarray) -> np.ndarray:
    """One anchor's ``(A, B, C, C_1..C_J)`` with ``inf`` for each sum some row's support excludes."""
    half = 3 + len(_STEPS)
    values = np.array(sums[:half], dtype=np.float64)
    values[:3][sums[half] > 0] = math.inf
    values[3:][np.asarray(sums[half + 1 :]) > 0] = math.inf
    return values


_EMPTY = np.zeros(2 * _WIDTH)


class GeneralizedParetoAccumulator(Accumulator):
    """Statistics ``(Σw, Σw x, Σw x^2, max x, theta0, anchored)``: the moments and the largest value of
    positive weight (for the first pass's start), then the sums ``(A, B, C, C_1..C_J)`` at the current
    model's ``theta0 = xi / sigma`` and at its mirror ``-theta0`` (module docstring), concatenated.
    ``theta0 = 0`` marks no current model. Statistics taken at two different models cannot be added
    exactly: combining them keeps the moments only, so the next estimate restarts from them (a fit never
    mixes models)."""

    encoder_class = GeneralizedParetoEncoder

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sw = 0.0
        self.sx = 0.0
        self.sx2 = 0.0
        self.max_x = -math.inf
        self._reset(0.0)

    def _reset(self, theta0: float) -> None:
        self.theta0 = theta0
        self.anchored = _EMPTY.copy()

    def seq_update(self, enc: np.ndarray, weights: np.ndarray, estimate: Any) -> None:
        if estimate is not None and not isinstance(estimate, GeneralizedParetoDistribution):
            raise SpecError(
                "GeneralizedParetoAccumulator.seq_update needs the current GeneralizedParetoDistribution "
                f"(or None on the first pass), got {estimate!r}"
            )
        x = np.asarray(enc, dtype=np.float64)
        weights = np.asarray(weights, dtype=np.float64)
        theta0 = 0.0 if estimate is None else theta_of(estimate)
        if theta0 != self.theta0:
            self._reset(theta0 if self.sw == 0.0 else 0.0)
        wx = weights * x
        self.sw += float(weights.sum())
        self.sx += float(wx.sum())
        self.sx2 += float(np.dot(wx, x))
        seen = x[weights > 0]
        if seen.size:
            self.max_x = max(self.max_x, float(seen.max()))
        if self.theta0 != 0.0:
            self.anchored += np.concatenate(
                [_anchor_sums(x, weights, self.theta0), _anchor_sums(x, weights, -self.theta0)]
            )
        return None

    def combine(self, value: Any) -> GeneralizedParetoAccumulator:
        sw, sx, sx2, max_x, theta0, anchored = value
        if float(sw) != 0.0:
            if self.sw == 0.0:
                self._reset(float(theta0))
            elif float(theta0) != self.theta0:
                self._reset(0.0)
            if self.theta0 != 0.0:
                self.anchored += np.asarray(anchored, dtype=np.float64)
        self.sw += float(sw)
        self.sx += float(sx)
        self.sx2 += float(sx2)
        self.max_x = max(self.max_x, float(max_x))
        return self

    def value(self) -> tuple[Any, ...]:
        return (self.sw, self.sx, self.sx2, self.max_x, self.theta0, self.anchored.copy())

    def _scale(self, factor: float) -> None:
        self.sw *= factor  # the largest value and the anchor are not weighted sums: kept
        self.sx *= factor
        self.sx2 *= factor
        self.anchored *= factor

    def from_value(self, value: Any) -> GeneralizedParetoAccumulator:
        sw, sx, sx2, max_x, theta0, anchored = value
        self.sw, self.sx, self.sx2, self.max_x = float(sw), float(sx), float(sx2), float(max_x)
        self.theta0 = float(theta0)
        self.anchored = np.array(anchored, dtype=np.float64)
        return self


def theta_of(model: GeneralizedParetoDistribution) -> float:
    """The anchor ``theta = xi / sigma`` of a model; at ``xi = 0`` ``1e-6 / sigma`` (its mirror covers the
    other side)."""
    xi = model.xi if model.xi != 0.0 else 1e-6
    return xi / model.sigma


def _golden_max(f: Any, lo: float, hi: float) -> tuple[float, float]:
    """``(t, f(t))`` for the best point a golden-section search of ``f`` on ``[lo, hi]`` visits (the ends
    included)."""
    best = max(((t, f(t)) for t in (lo, hi)), key=lambda p: p[1])
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(_GOLDEN_STEPS):
        if fc >= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
        if not a < c < d < b:
            break
    for t, v in ((c, fc), (d, fd)):
        if v > best[1]:
            best = (t, v)
    return best


@register_estimator("generalized_pareto")
@dataclass(eq=False, repr=False)
class GeneralizedParetoEstimator(Estimator):
    """Generalized Pareto fit by a monotone minorize-maximize step on the profile log-likelihood in
    ``theta = xi / sigma`` (see the module docstring), from sums at the current ``theta`` and its mirror.

    Parameters
    ----------
    pseudo_count : float, optional
        Weight of pseudo-observations from ``GeneralizedPareto(xi0, sigma0)`` = ``suff_stat`` at the 32
        Gauss-Laguerre nodes of its cumulative hazard (an exponential variable), added to the data's
        statistics at every pass: the fit maximises the data's log-likelihood plus ``pseudo_count`` times
        the prior's expected log-likelihood (to quadrature accuracy), so a large ``pseudo_count`` pulls
        it to the prior.
    suff_stat : (float, float), optional
        Prior shape and scale (default (0.1, 1) when only ``pseudo_count`` is given).
    min_xi : float
        Least shape, in (-1, 0) (default -0.5; below -1 the likelihood has no maximum).
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or xi = 0.1, sigma = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda xi0, sigma0: sigma0 > 0, "a pair (xi0, sigma0) of finite numbers with sigma0 > 0"
    )
    min_xi: float = option(DEFAULT_MIN_XI, lambda v: -1.0 < v < 0.0, "a number in (-1, 0)", read=float)
    name: str | None = None
    keys: str | None = None

    accumulator_class = GeneralizedParetoAccumulator
    encoder_class = GeneralizedParetoEncoder

    def _prior(self) -> GeneralizedParetoDistribution:
        xi0, sigma0 = (0.1, 1.0) if self.suff_stat is None else self.suff_stat
        return GeneralizedParetoDistribution(max(xi0, self.min_xi), sigma0)

    def _with_prior(self, value: Any) -> tuple[Any, ...]:
        pc = self.pseudo_count or 0.0
        if pc <= 0:
            return tuple(value)
        points = self._prior().at_hazard(_PRIOR_HAZARDS)
        w = pc * _PRIOR_WEIGHTS
        theta0 = float(value[4])
        anchored = _EMPTY.copy()
        if theta0 != 0.0:
            anchored = np.concatenate([_anchor_sums(points, w, theta0), _anchor_sums(points, w, -theta0)])
        pseudo = (pc, float(np.dot(w, points)), float(np.dot(w, points * points)), float(points.max()))
        return GeneralizedParetoAccumulator().from_value(value).combine((*pseudo, theta0, anchored)).value()

    def _profile(self, sw: float, theta: float, a: float) -> tuple[float, float]:
        """``(log-likelihood, xi)`` at ``theta`` with ``Σw log(1 + theta x) = a`` and the best ``xi`` given
        them (``a / Σw``, at least ``min_xi``); ``-inf`` where ``a`` has not the sign of ``theta``."""
        if not (a * theta > 0 and math.isfinite(a)):
            return -math.inf, math.nan
        xi = max(a / sw, self.min_xi) if theta < 0 else a / sw
        return sw * math.log(theta / xi) - (1.0 + 1.0 / xi) * a, xi

    def _gain(self, sw: float, theta0: float, a0: float, t: float, da: float) -> float:
        """``profile(theta0 + t, a0 + da) - profile(theta0, a0)``; where neither ``xi`` is clipped, written
        with ``log1p`` so that a small step's gain is not lost to rounding."""
        theta, a = theta0 + t, a0 + da
        if not (a * theta > 0 and math.isfinite(a)):
            return -math.inf
        if theta < 0 and min(a, a0) / sw < self.min_xi:
            return self._profile(sw, theta, a)[0] - self._profile(sw, theta0, a0)[0]
        return sw * (math.log1p(t / theta0) - math.log1p(da / a0)) - da

    def _side(self, sw: float, theta: float, sums: np.ndarray) -> tuple[float, float, float]:
        """``(value, theta, xi)`` maximising the minorizer built from the sums at ``theta``: the profile
        with ``A`` replaced by ``A + B t - c t^2 / 2`` (``t`` the move), with ``c`` the curvature bound of
        each interval (module docstring)."""
        a0, b0, c0 = (float(v) for v in sums[:3])
        value, xi = self._profile(sw, theta, a0)
        if not math.isfinite(value):
            return value, theta, xi
        best = (0.0, 0.0, c0)  # (gain, move, curvature)
        intervals = [(c0, -theta * (1.0 - 1e-9))]  # towards 0: the curvature at theta bounds it
        intervals += [(float(c), theta * d) for c, d in zip(sums[3:], _STEPS, strict=True)]
        for c, end in intervals:
            if not math.isfinite(c):
                continue

            def gain(t: float, c: float = c) -> float:
                return self._gain(sw, theta, a0, t, t * (b0 - 0.5 * c * t))

            t, g = _golden_max(gain, min(0.0, end), max(0.0, end))
            if g > best[0]:
                best = (g, t, c)
        g, t, c = best
        return value + g, theta + t, self._profile(sw, theta + t, a0 + t * (b0 - 0.5 * c * t))[1]

    def estimate(self, nobs: float | None, value: Any) -> GeneralizedParetoDistribution:
        if not float(value[0]) > 0:
            return self._prior()
        sw, sx, sx2, max_x, theta0, anchored = self._with_prior(value)
        here_sums, mirror_sums = _usable(anchored[:_WIDTH]), _usable(anchored[_WIDTH:])
        if theta0 == 0.0 or not math.isfinite(float(here_sums[0])):
            return self._start(sw, sx, sx2, max_x)
        here = self._side(sw, theta0, here_sums)
        mirror = self._side(sw, -theta0, mirror_sums)
        _, theta, xi = max(here, mirror, key=lambda p: p[0])
        sigma = xi / theta
        if not (math.isfinite(sigma) and sigma > 0):
            return self._start(sw, sx, sx2, max_x)
        return GeneralizedParetoDistribution(xi, sigma)

    def _start(self, sw: float, sx: float, sx2: float, max_x: float) -> GeneralizedParetoDistribution:
        """The moment start (module docstring); the prior when the moments are not usable."""
        mean = sx / sw
        var = sx2 / sw - mean * mean
        if not (mean > 0 and var > 0 and math.isfinite(var)):
            return self._prior()
        xi = min(max(0.5 * (1.0 - mean * mean / var), self.min_xi), _MAX_START_XI)
        if abs(xi) < _MIN_START_XI:
            xi = _MIN_START_XI
        sigma = mean * (1.0 - xi)
        if xi < 0:
            sigma = max(sigma, -xi * max_x * (1.0 + 1e-6))  # every value inside the support
        return GeneralizedParetoDistribution(xi, sigma)
