"""Generalized extreme value: ``GeneralizedExtremeValueDistribution(xi, mu, sigma)`` with shape ``xi``,
location ``mu`` and scale ``sigma`` (``scipy.stats.genextreme(c=-xi, loc=mu, scale=sigma)``: scipy's ``c``
is minus the usual shape).

Records are real numbers; with ``z = (x - mu) / sigma`` the support is ``1 + xi z > 0`` (bounded below
for ``xi > 0``, above for ``xi < 0``, the real line at ``xi = 0``, the Gumbel limit) and, with
``H = log(1 + xi z) / xi`` (``z`` at ``xi = 0``, taken without cancellation through ``log1p(v) / v``),
``log p(x) = -log sigma - (1 + xi) H - exp(-H)`` and ``log P(X <= x) = -exp(-H)`` (Coles, *An Introduction
to Statistical Modeling of Extreme Values*, Springer 2001, sections 3.1.3 and 3.3.2). A value outside the
support has density 0 (``-inf``). The encoded batch is the values.

Estimation is a generalized EM: each pass sums statistics at the current model (the anchor) and the
M-step moves one block, whichever gains more, by a step that never lowers the weighted log-likelihood
(block-coordinate ascent, Meng & Rubin 1993, Biometrika 80, "Maximum likelihood estimation via the ECM
algorithm"):

1. The shape, location and scale kept: the pass sums the exact log-likelihood at the candidate shapes
   ``xi0 ± 0.5 * 2^-j`` (``j < 30``) and the weight each leaves outside its support; the best candidate
   in ``[min_xi, max_xi]`` with every row inside is taken when it beats the anchor. The best of a
   geometric ladder is within a constant factor of the conditional optimum at every scale, so the block
   converges linearly to it.
2. The shape kept, location and scale by a minorize-maximize step (Lange, *MM Optimization Algorithms*,
   SIAM 2016, ch. 4: a quadratic lower bound from a curvature bound). The new model's standardized values
   are ``z' = alpha + beta z`` (``sigma = sigma0 / beta``, ``mu = mu0 - alpha sigma``), its log-likelihood
   ``Σw [log beta - log sigma0 + psi(z')]`` with ``psi(z) = -(1 + xi) H - exp(-H)``, whose second
   derivative is ``psi'' = (1 + xi) u^-2 (xi - exp(-H))`` (``u = 1 + xi z``). On the region
   ``|z' - z| <= d u / kappa`` of every row (``kappa = max(1, |xi|)``, ``0 < d < 1``) ``u`` stays within
   ``u (1 ± d)`` and ``H`` moves by at most ``d / (kappa (1 - d))``, so
   ``psi'' >= -m = -(1 + xi) u^-2 [(1 - d)^-2 (exp(-H) exp(d / (kappa (1 - d))) + max(-xi, 0))
   - [xi > 0] xi (1 + d)^-2]`` there (the last term dropped as well, a second valid bound), and Taylor's
   theorem gives ``psi(z') >= psi(z) + psi'(z) dz - m dz^2 / 2``. Summed, with ``dz = alpha + (beta - 1) z``,
   the minorizer needs ``Σw psi' (1, z)``, ``Σw u^-2 (1, z, z^2)`` and ``Σw exp(-H) u^-2 (1, z, z^2)`` at
   the anchor; ``log beta`` is kept exactly. Its maximiser is a quadratic's root; shrunk towards the anchor
   into the region (which, ``dz`` being linear in ``z``, binds at the least and largest values), the
   minorizer, concave, stays at least its anchor value. The best of nested regions ``d = 2^-1 .. 2^-39``
   is taken: narrow regions make the bound nearly exact near the maximum.

Each step never lowers the log-likelihood, so neither does the pass. The first pass (no current model)
sums the moments for the Gumbel start ``sigma = sqrt(6 var) / pi``, ``mu = mean - 0.5772 sigma``,
``xi = 0`` (every value inside its support). The likelihood has no maximum below ``xi = -1`` (it grows
without bound as the upper end nears the largest value) and the MLE's usual theory needs ``xi > -1/2``
(Smith 1985, Biometrika 72, "Maximum likelihood estimation in a class of nonregular cases"), hence
``min_xi = -0.5`` by default; ``max_xi = 1`` by default (no mean beyond it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._cdf import log1m_exp
from mixle_spark.stats._gev_step import WIDTH, anchor_sums, location_scale_step, shape_step
from mixle_spark.stats._scalar_common import ScalarEncoder, ScalarFamily, finite, positive, prior_tuple
from mixle_spark.stats._special import _ZETA, _lgamma1p_series, gammaln
from mixle_spark.stats._validate import check_range
from mixle_spark.stats.base import Accumulator, Estimator, option, register_distribution, register_estimator

__all__ = [
    "GeneralizedExtremeValueAccumulator",
    "GeneralizedExtremeValueDistribution",
    "GeneralizedExtremeValueEncoder",
    "GeneralizedExtremeValueEstimator",
]

DEFAULT_MIN_XI = -0.5
DEFAULT_MAX_XI = 1.0
_EULER = 0.57721566490153286061
_SMALL_XI = 0.1
_ROUNDING = 1e-16
"""A shape move must gain more than this times ``|Σw psi| + Σw`` (its row-by-row sum's rounding)."""
_VARIANCE_SERIES = np.array([0.0, 0.0] + [_ZETA[k] * (2.0**k - 2.0) / k for k in range(2, len(_ZETA))])
"""``log Gamma(1 - 2 xi) - 2 log Gamma(1 - xi) = Σ_k zeta(k) (2^k - 2) xi^k / k`` (from the Taylor series
of ``log Gamma(1 + e)``): the variance's ``g2 - g1^2`` without cancellation near ``xi = 0``."""
_LEGENDRE_NODES, _LEGENDRE_WEIGHTS = np.polynomial.legendre.leggauss(128)
_PRIOR_PROBABILITIES, _PRIOR_WEIGHTS = (_LEGENDRE_NODES + 1.0) / 2.0, _LEGENDRE_WEIGHTS / 2.0
"""The prior's pseudo-observations: its quantiles at the 128 Gauss-Legendre nodes in the probability
``F(x)`` on (0, 1), so their weighted sums are the prior's expectations (the log-density's logarithmic
ends make Gauss-Laguerre in ``-log F`` far less accurate: its maximiser misses the prior by 5e-2 in the
shape where this one misses by ~1e-4)."""


class GeneralizedExtremeValueEncoder(ScalarEncoder):
    """Reads finite numbers into a float64 array of shape (n,)."""

    estimator_name = "GeneralizedExtremeValueEstimator"
    expectation = "a finite number"

    def validate(self, x: np.ndarray) -> None:
        check_range(x, self.expected)


@register_distribution("generalized_extreme_value")
class GeneralizedExtremeValueDistribution(ScalarFamily):
    """Generalized extreme value distribution with shape ``xi``, location ``mu`` and scale ``sigma``:
    ``xi = 0`` is the Gumbel (maximum), ``xi > 0`` the Frechet type (heavy upper tail, bounded below),
    ``xi < 0`` the reversed Weibull type (bounded above).

    Examples
    --------
    >>> GeneralizedExtremeValueDistribution(0.0, 0.0, 1.0).log_density(0.0) == -1.0
    True
    >>> GeneralizedExtremeValueDistribution(-0.5, 0.0, 1.0).log_density(2.5)
    -inf
    """

    parameters = (finite("xi"), finite("mu"), positive("sigma"))
    encoder_class = GeneralizedExtremeValueEncoder
    xi: float
    mu: float
    sigma: float

    def __init__(self, xi: float, mu: float, sigma: float) -> None:
        self._set_parameters(xi, mu, sigma)
        self._log_sigma = math.log(self.sigma)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return self.at_exponential(rng.standard_exponential(size))

    def log_density(self, x: float) -> float:
        return float(self.seq_log_density(np.array([float(x)]))[0])

    def _hazard(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(inside, H, log u)`` at ``x`` (``H = 0`` outside the support)."""
        z = (np.asarray(x, dtype=np.float64) - self.mu) / self.sigma
        with np.errstate(divide="ignore", invalid="ignore"):
            inside = 1.0 + self.xi * z > 0
            h = z if self.xi == 0 else np.log1p(self.xi * z) / self.xi  # log1p: exact for a small xi z
        if not inside.all():
            h = np.where(inside, h, 0.0)
        return inside, h, self.xi * h

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        inside, h, _ = self._hazard(enc)
        with np.errstate(over="ignore"):
            out = -self._log_sigma - (1.0 + self.xi) * h - np.exp(-h)
        return np.where(inside, out, -np.inf)  # type: ignore[no-any-return]

    def moments(self) -> tuple[float, float]:
        xi = self.xi
        if abs(xi) < _SMALL_XI:
            g1 = float(_lgamma1p_series(np.array([-xi]))[0])  # 1 - xi would round a tiny xi away
            mean_excess = _EULER if xi == 0 else math.expm1(g1) / xi
            series = float(np.polynomial.polynomial.polyval(xi, _VARIANCE_SERIES))
            spread = math.pi**2 / 6.0 if xi == 0 else math.exp(2.0 * g1) * math.expm1(series) / xi**2
            return self.mu + self.sigma * mean_excess, self.sigma**2 * spread
        mean = self.mu + self.sigma * math.expm1(float(gammaln(1.0 - xi))) / xi if xi < 1 else math.inf
        if xi >= 0.5:
            return mean, math.inf
        g1, g2 = float(gammaln(1.0 - xi)), float(gammaln(1.0 - 2.0 * xi))
        return mean, self.sigma**2 * math.exp(2.0 * g1) * math.expm1(g2 - 2.0 * g1) / xi**2

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        inside, h, _ = self._hazard(x)
        with np.errstate(over="ignore"):
            out = -np.exp(-h)
        beyond = np.where(self.xi > 0, -np.inf, 0.0)  # below the lower end, or above the upper end
        return np.where(inside, out, beyond)  # type: ignore[no-any-return]

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        inside, h, _ = self._hazard(x)
        with np.errstate(over="ignore"):
            out = log1m_exp(np.exp(-h))
        beyond = np.where(self.xi > 0, 0.0, -np.inf)
        return np.where(inside, out, beyond)  # type: ignore[no-any-return]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return self.at_exponential(-np.log(np.asarray(p, dtype=np.float64)))

    def at_exponential(self, s: np.ndarray) -> np.ndarray:
        """The value with ``-log P(X <= x) = s`` (``s >= 0``): ``mu + sigma (s^-xi - 1) / xi``, written as
        ``mu + sigma L expm1(xi L) / (xi L)`` with ``L = -log s`` so that ``xi = 0`` is the Gumbel's."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            big_l = -np.log(np.asarray(s, dtype=np.float64))
            v = self.xi * big_l
            ratio = np.where(v == 0.0, 1.0, np.expm1(v) / np.where(v == 0.0, 1.0, v))
            out = self.mu + self.sigma * np.where(np.isinf(big_l), np.sign(big_l) * np.inf, big_l * ratio)
            if self.xi != 0:
                end = self.mu - self.sigma / self.xi
                out = np.where(np.isinf(big_l) & (big_l * self.xi < 0), end, out)
            return out  # type: ignore[no-any-return]


_EMPTY = np.zeros(WIDTH)


class GeneralizedExtremeValueAccumulator(Accumulator):
    """Statistics ``(Σw, Σw x, Σw x^2, min x, max x, anchor, sums)``: the moments and the extreme values of
    positive weight, the current model's ``(xi, mu, sigma)`` (``sigma = 0``: no model) and the sums taken
    at it (:mod:`mixle_spark.stats._gev_step`). Statistics taken at two different models cannot be added
    exactly: combining them keeps the moments and extremes only, so the next estimate restarts from them."""

    encoder_class = GeneralizedExtremeValueEncoder

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sw = 0.0
        self.sx = 0.0
        self.sx2 = 0.0
        self.min_x = math.inf
        self.max_x = -math.inf
        self._reset(np.zeros(3))

    def _reset(self, anchor: np.ndarray) -> None:
        self.anchor = np.array(anchor, dtype=np.float64)
        self.sums = _EMPTY.copy()

    def seq_update(self, enc: np.ndarray, weights: np.ndarray, estimate: Any) -> None:
        if estimate is not None and not isinstance(estimate, GeneralizedExtremeValueDistribution):
            raise SpecError(
                "GeneralizedExtremeValueAccumulator.seq_update needs the current "
                f"GeneralizedExtremeValueDistribution (or None on the first pass), got {estimate!r}"
            )
        x = np.asarray(enc, dtype=np.float64)
        weights = np.asarray(weights, dtype=np.float64)
        anchor = np.zeros(3) if estimate is None else np.array([estimate.xi, estimate.mu, estimate.sigma])
        if not np.array_equal(anchor, self.anchor):
            self._reset(anchor if self.sw == 0.0 else np.zeros(3))
        wx = weights * x
        self.sw += float(weights.sum())
        self.sx += float(wx.sum())
        self.sx2 += float(np.dot(wx, x))
        seen = x[weights > 0]
        if seen.size:
            self.min_x = min(self.min_x, float(seen.min()))
            self.max_x = max(self.max_x, float(seen.max()))
        if self.anchor[2] > 0:
            self.sums += anchor_sums(x, weights, *(float(v) for v in self.anchor))
        return None

    def combine(self, value: Any) -> GeneralizedExtremeValueAccumulator:
        sw, sx, sx2, min_x, max_x, anchor, sums = value
        if float(sw) != 0.0:
            if self.sw == 0.0:
                self._reset(np.asarray(anchor))
            elif not np.array_equal(np.asarray(anchor, dtype=np.float64), self.anchor):
                self._reset(np.zeros(3))
            if self.anchor[2] > 0:
                self.sums += np.asarray(sums, dtype=np.float64)
        self.sw += float(sw)
        self.sx += float(sx)
        self.sx2 += float(sx2)
        self.min_x = min(self.min_x, float(min_x))
        self.max_x = max(self.max_x, float(max_x))
        return self

    def value(self) -> tuple[Any, ...]:
        return (self.sw, self.sx, self.sx2, self.min_x, self.max_x, self.anchor.copy(), self.sums.copy())

    def _scale(self, factor: float) -> None:
        if factor == 0.0:  # no row keeps a positive weight: no extremes either
            self.min_x, self.max_x = math.inf, -math.inf
        self.sw *= factor  # otherwise the extremes and the anchor are not weighted sums: kept
        self.sx *= factor
        self.sx2 *= factor
        self.sums *= factor

    def from_value(self, value: Any) -> GeneralizedExtremeValueAccumulator:
        sw, sx, sx2, min_x, max_x, anchor, sums = value
        self.sw, self.sx, self.sx2 = float(sw), float(sx), float(sx2)
        self.min_x, self.max_x = float(min_x), float(max_x)
        self.anchor = np.array(anchor, dtype=np.float64)
        self.sums = np.array(sums, dtype=np.float64)
        return self


@register_estimator("generalized_extreme_value")
@dataclass(eq=False, repr=False)
class GeneralizedExtremeValueEstimator(Estimator):
    """Generalized extreme value fit by monotone block steps (shape by exact candidate log-likelihoods,
    location and scale by a curvature-bounded minorizer; see the module docstring), from sums at the
    current model.

    Parameters
    ----------
    pseudo_count : float, optional
        Weight of pseudo-observations from ``GeneralizedExtremeValue(xi0, mu0, sigma0)`` = ``suff_stat`` at
        the 128 Gauss-Legendre nodes of its probability ``F`` on (0, 1), added to the data's statistics
        at every pass: the fit maximises the data's log-likelihood plus ``pseudo_count`` times the prior's
        expected log-likelihood (to quadrature accuracy). The pseudo-observations are points, so the
        fit's support must cover them: a prior bounded above (``xi0 < 0``) keeps the fit's upper end
        beyond its own largest quantile.
    suff_stat : (float, float, float), optional
        Prior shape, location and scale (default (0, 0, 1) when only ``pseudo_count`` is given).
    min_xi, max_xi : float
        The shape's range: ``min_xi`` in (-1, 0) (default -0.5; below -1 the likelihood has no maximum),
        ``max_xi`` positive (default 1).
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or xi = 0, mu = 0, sigma = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float, float] | None = prior_tuple(
        lambda xi0, mu0, sigma0: sigma0 > 0, "a triple (xi0, mu0, sigma0) of finite numbers with sigma0 > 0"
    )
    min_xi: float = option(DEFAULT_MIN_XI, lambda v: -1.0 < v < 0.0, "a number in (-1, 0)", read=float)
    max_xi: float = option(DEFAULT_MAX_XI, lambda v: 0.0 < v < math.inf, "a positive number", read=float)
    name: str | None = None
    keys: str | None = None

    accumulator_class = GeneralizedExtremeValueAccumulator
    encoder_class = GeneralizedExtremeValueEncoder

    def _prior(self) -> GeneralizedExtremeValueDistribution:
        xi0, mu0, sigma0 = (0.0, 0.0, 1.0) if self.suff_stat is None else self.suff_stat
        return GeneralizedExtremeValueDistribution(min(max(xi0, self.min_xi), self.max_xi), mu0, sigma0)

    def _with_prior(self, value: Any) -> tuple[Any, ...]:
        pc = self.pseudo_count or 0.0
        if pc <= 0:
            return tuple(value)
        points = self._prior().quantile(_PRIOR_PROBABILITIES)
        w = pc * _PRIOR_WEIGHTS
        anchor = np.asarray(value[5], dtype=np.float64)
        sums = anchor_sums(points, w, *(float(v) for v in anchor)) if anchor[2] > 0 else _EMPTY.copy()
        moments = (pc, float(np.dot(w, points)), float(np.dot(w, points * points)))
        pseudo = (*moments, float(points.min()), float(points.max()), anchor, sums)
        return GeneralizedExtremeValueAccumulator().from_value(value).combine(pseudo).value()

    def estimate(self, nobs: float | None, value: Any) -> GeneralizedExtremeValueDistribution:
        if not float(value[0]) > 0:
            return self._prior()
        sw, sx, sx2, min_x, max_x, anchor, sums = self._with_prior(value)
        xi0, mu0, sigma0 = (float(v) for v in anchor)
        if not (sigma0 > 0 and sums[0] == 0 and math.isfinite(float(sums[1]))):
            return self._start(sw, sx, sx2)
        floor = _ROUNDING * (abs(float(sums[1])) + sw)
        shape_gain, xi = shape_step(sums, xi0, self.min_xi, self.max_xi, floor)
        z_ends = ((min_x - mu0) / sigma0, (max_x - mu0) / sigma0)
        scale_gain, alpha, beta = location_scale_step(sw, sums, xi0, *z_ends)
        if shape_gain >= scale_gain:
            return GeneralizedExtremeValueDistribution(xi, mu0, sigma0)
        sigma = sigma0 / beta
        return GeneralizedExtremeValueDistribution(xi0, mu0 - alpha * sigma, sigma)

    def _start(self, sw: float, sx: float, sx2: float) -> GeneralizedExtremeValueDistribution:
        """The Gumbel moment start (module docstring); the prior when the moments are not usable."""
        mean = sx / sw
        var = sx2 / sw - mean * mean
        if not (var > 0 and math.isfinite(var)):
            return self._prior()
        sigma = math.sqrt(6.0 * var) / math.pi
        xi = min(max(0.0, self.min_xi), self.max_xi)
        return GeneralizedExtremeValueDistribution(xi, mean - _EULER * sigma, sigma)
