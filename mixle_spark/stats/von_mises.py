"""Von Mises: ``VonMisesDistribution(mu, kappa)``, the circular normal distribution of an angle.

Records are angles in radians, any finite real: angles are taken modulo 2π (``x`` and ``x + 2πk``
score the same; ``mu`` is stored reduced to [-π, π] by the exact IEEE remainder). With
``c = (cos x, sin x)`` and ``m = (cos mu, sin mu)``,
``log p(x) = kappa cos(x - mu) - log(2π I0(kappa))
= -kappa |c - m|^2 / 2 - log 2π - log(e^-kappa I0(kappa))``; the chord form keeps full accuracy for
a large ``kappa`` (no cancellation of ``kappa cos`` against ``log I0(kappa) ~ kappa``).
``kappa = 0`` is the uniform distribution on the circle.

The encoded batch is ``(cos x, sin x)`` and the statistics ``(Σw, Σw cos x, Σw sin x)``. The M-step is
``mu = atan2(Σw sin x, Σw cos x)`` and ``kappa`` solving ``A(kappa) = I1(kappa) / I0(kappa) = Rbar``
(the mean resultant length) by Newton's method inside a shrinking bracket, with bisection when a step
leaves it, stopping when a step changes ``kappa`` by at most ``1e-12`` relative
(:data:`KAPPA_RTOL`; see :func:`solve_kappa`). ``Rbar = 0`` gives ``kappa = 0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._scalar_common import (
    FeatureSumAccumulator,
    Parameter,
    ScalarEncoder,
    ScalarFamily,
    finite,
    prior_tuple,
)
from mixle_spark.stats._special import i1_over_i0, log_i0e, one_minus_i1_over_i0
from mixle_spark.stats.base import (
    Estimator,
    option,
    register_distribution,
    register_estimator,
)

__all__ = [
    "VonMisesAccumulator",
    "VonMisesDistribution",
    "VonMisesEncoder",
    "VonMisesEstimator",
]

DEFAULT_MAX_KAPPA = 1e8
KAPPA_RTOL = 1e-12
"""Relative change of ``kappa`` at which the Newton iteration of :func:`solve_kappa` stops."""
_MAX_ITERATIONS = 300
_LOG_2PI = math.log(2.0 * math.pi)
_TWO_PI = 2.0 * math.pi
_WRAPPED_NORMAL_FROM = 1e6  # the sampler's normal approximation: its error is O(1 / kappa)
_UNIFORM_BELOW = 1e-8  # the sampler draws uniformly below this kappa (density within 2e-8 of uniform)


def _a_prime(kappa: float, q: float) -> float:
    """d A / d kappa = 1 - A / kappa - A^2 (1/2 at kappa = 0), from ``q = 1 - A``.

    Written as ``q (2 - q) - (1 - q) / kappa`` so that a large ``kappa`` (``A`` near 1, derivative
    ~1 / (2 kappa^2)) does not lose everything to ``1 - A^2`` computed from a rounded ``A``.
    """
    return 0.5 if kappa == 0.0 else q * (2.0 - q) - (1.0 - q) / kappa


def solve_kappa(rbar: float, max_kappa: float = DEFAULT_MAX_KAPPA) -> float:
    """The ``kappa`` in ``[0, max_kappa]`` with ``I1(kappa) / I0(kappa) = rbar``.

    ``A = I1 / I0`` increases from 0 to 1, so the root is unique for ``0 < rbar < 1``. Newton steps from
    the Banerjee et al. (2005) start ``rbar (2 - rbar^2) / (1 - rbar^2)`` are kept inside a shrinking
    bracket and replaced by bisection when they leave it; the residual is formed as
    ``(1 - rbar) - (1 - A(kappa))`` with ``1 - A`` computed without cancellation, so concentrated data
    (``rbar`` near 1) keep their accuracy. Stops when a step changes ``kappa`` by at most
    :data:`KAPPA_RTOL` relative. Returns 0 for ``rbar <= 0`` and ``max_kappa`` when ``rbar`` is at or
    above ``A(max_kappa)`` (data all at one angle, up to rounding).
    """
    rbar = float(rbar)
    if not rbar > 0.0:
        return 0.0
    gap = 1.0 - rbar
    if not gap > float(one_minus_i1_over_i0(max_kappa)):
        return max_kappa
    lo, hi = 0.0, max_kappa
    kappa = min(rbar * (2.0 - rbar * rbar) / ((1.0 - rbar) * (1.0 + rbar)), max_kappa)
    for _ in range(_MAX_ITERATIONS):
        q = float(one_minus_i1_over_i0(kappa))
        f = gap - q  # = A(kappa) - rbar, increasing in kappa
        if f < 0:
            lo = kappa
        elif f > 0:
            hi = kappa
        else:
            return kappa
        slope = _a_prime(kappa, q)
        new = kappa - f / slope if slope > 0 else math.nan
        if not (lo < new < hi):
            new = math.sqrt(lo * hi) if 0.0 < 4.0 * lo < hi else 0.5 * (lo + hi)
        if abs(new - kappa) <= KAPPA_RTOL * kappa:
            return new
        kappa = new
    return kappa


def _reduce_angle(mu: float) -> float:
    """mu modulo 2π in [-π, π]: exact (IEEE remainder), and the identity on [-π, π]."""
    return math.remainder(mu, _TWO_PI)


class VonMisesEncoder(ScalarEncoder):
    """Reads finite angles (radians, any real) into ``(cos x, sin x)``, two float64 arrays of shape (n,)."""

    computes_float32 = True

    def embedding_scales(self) -> np.ndarray:
        return np.zeros(2, dtype=bool)  # a point on the unit circle: (cos, sin)

    def embed(self, enc: Any) -> np.ndarray:
        return np.column_stack([enc[0], enc[1]])

    estimator_name = "VonMisesEstimator"
    expectation = "a finite angle in radians"

    def pack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.cos(x), np.sin(x)


@register_distribution("von_mises")
class VonMisesDistribution(ScalarFamily):
    """Von Mises distribution with mean direction ``mu`` (radians) and concentration ``kappa >= 0``.

    Examples
    --------
    >>> round(VonMisesDistribution(0.0, 0.0).log_density(1.0), 12) == round(-math.log(2 * math.pi), 12)
    True
    """

    parameters = (
        finite("mu"),
        Parameter("kappa", lambda k: math.isfinite(k) and k >= 0, "a non-negative finite number"),
    )
    mu: float
    kappa: float
    encoder_class = VonMisesEncoder

    def __init__(self, mu: float, kappa: float) -> None:
        self._set_parameters(mu, kappa)
        self.mu = _reduce_angle(self.mu)
        self._cos_mu = math.cos(self.mu)
        self._sin_mu = math.sin(self.mu)
        self._log_const = -_LOG_2PI - float(log_i0e(self.kappa))

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        """Angles in [-π, π) by Best & Fisher's algorithm (vectorized over the whole sample).

        ``kappa < 1e-8`` draws uniformly (the density is within ``2 kappa`` relative of uniform there,
        and Best & Fisher's constants overflow as kappa -> 0; numpy's sampler does the same). Above
        ``kappa = 1e6`` (circular standard deviation below 1e-3) the wrapped normal ``N(mu, 1 / kappa)``
        is used, whose density differs from the von Mises by O(1 / kappa) (numpy makes the same switch).
        """
        n = 1 if size is None else int(size)
        kappa = self.kappa
        if kappa < _UNIFORM_BELOW:
            offset = rng.uniform(-math.pi, math.pi, size=n)
        elif kappa > _WRAPPED_NORMAL_FROM:
            offset = rng.normal(0.0, 1.0 / math.sqrt(kappa), size=n)
        else:
            offset = _best_fisher(rng, kappa, n)
        draws = np.mod(self.mu + offset + math.pi, _TWO_PI) - math.pi
        return float(draws[0]) if size is None else draws

    def log_density(self, x: float) -> float:
        x = float(x)
        if not math.isfinite(x):
            return -math.inf
        dc, ds = math.cos(x) - self._cos_mu, math.sin(x) - self._sin_mu
        return self._log_const - 0.5 * self.kappa * (dc * dc + ds * ds)

    def seq_log_density(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        cos_x, sin_x = enc
        dc = cos_x - self._cos_mu
        ds = sin_x - self._sin_mu
        return self._log_const - (0.5 * self.kappa) * (dc * dc + ds * ds)

    # Mixture fast path: log p(x) = [1, cos x, sin x] @ [const - kappa, kappa cos mu, kappa sin mu].
    def feature_key(self) -> Any:
        return ("von_mises",)

    def seq_features(self, enc: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        cos_x, sin_x = enc
        return np.column_stack([np.ones_like(cos_x), cos_x, sin_x])

    def feature_coefficients(self, enc: Any) -> np.ndarray:
        k = self.kappa
        return np.array([self._log_const - k, k * self._cos_mu, k * self._sin_mu])


def _best_fisher(rng: np.random.Generator, kappa: float, n: int) -> np.ndarray:
    """n draws of the angle from the mean direction, by Best & Fisher's (1979) rejection sampler.

    Every round draws for all rows still rejected (acceptance is above 65% for every kappa), so the
    work is a handful of vectorized passes. ``rho = 2 kappa / (tau + sqrt(2 tau))`` is the
    cancellation-free form of Best & Fisher's ``(tau - sqrt(2 tau)) / (2 kappa)``.
    """
    tau = 1.0 + math.sqrt(1.0 + 4.0 * kappa * kappa)
    rho = 2.0 * kappa / (tau + math.sqrt(2.0 * tau))
    r = (1.0 + rho * rho) / (2.0 * rho)
    f = np.empty(n)
    pending = np.arange(n)
    while pending.size:
        m = pending.size
        z = np.cos(math.pi * rng.random(m))
        fz = (1.0 + r * z) / (r + z)
        c = kappa * (r - fz)
        u2 = rng.random(m)
        with np.errstate(divide="ignore"):
            accept = (c * (2.0 - c) - u2 > 0) | (np.log(c / u2) + 1.0 - c >= 0)
        f[pending[accept]] = fz[accept]
        pending = pending[~accept]
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return sign * np.arccos(np.clip(f, -1.0, 1.0))


class VonMisesAccumulator(FeatureSumAccumulator):
    """Sums ``(Σw, Σw cos x, Σw sin x)`` (the encoder's two arrays)."""

    features = 2

    encoder_class = VonMisesEncoder


@register_estimator("von_mises")
@dataclass(eq=False, repr=False)
class VonMisesEstimator(Estimator):
    """Maximum-likelihood von Mises fit: ``mu = atan2(Σw sin x, Σw cos x)``, ``kappa`` by
    :func:`solve_kappa`.

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations drawn "on average" from ``VonMises(mu0, kappa0)`` =
        ``suff_stat``: they add ``pc`` to Σw and ``pc * A(kappa0) * (cos mu0, sin mu0)`` to
        (Σw cos x, Σw sin x). Without ``suff_stat`` the pseudo-observations are uniform
        (``kappa0 = 0``): they only shrink ``kappa`` towards 0.
    suff_stat : (float, float), optional
        Prior mean direction and concentration.
    max_kappa : float
        Cap of the concentration (default 1e8, a circular standard deviation of 1e-4): data all at
        one angle keep a finite density.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight (or a zero resultant) the estimate is ``suff_stat`` (or the uniform
    distribution, mu = 0 and kappa = 0).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda mu0, kappa0: kappa0 >= 0, "a pair (mu0, kappa0) of finite numbers with kappa0 >= 0"
    )
    max_kappa: float = option(
        DEFAULT_MAX_KAPPA, lambda v: 0 < v < math.inf, "a positive finite number", read=float
    )
    name: str | None = None
    keys: str | None = None

    accumulator_class = VonMisesAccumulator
    encoder_class = VonMisesEncoder

    def estimate(self, nobs: float | None, value: Any) -> VonMisesDistribution:
        sw, scos, ssin = value
        pc = self.pseudo_count or 0.0
        mu0, kappa0 = (0.0, 0.0) if self.suff_stat is None else self.suff_stat
        if pc > 0:
            a0 = float(i1_over_i0(kappa0))
            sw, scos, ssin = sw + pc, scos + pc * a0 * math.cos(mu0), ssin + pc * a0 * math.sin(mu0)
        resultant = math.hypot(scos, ssin)
        if not (sw > 0 and resultant > 0 and math.isfinite(resultant)):
            return VonMisesDistribution(mu0, min(kappa0, self.max_kappa))
        rbar = min(resultant / sw, 1.0)
        return VonMisesDistribution(math.atan2(ssin, scos), solve_kappa(rbar, self.max_kappa))
