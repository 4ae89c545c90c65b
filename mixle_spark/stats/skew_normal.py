"""Skew normal: ``SkewNormalDistribution(xi, omega, alpha)`` = ``scipy.stats.skewnorm(alpha, loc=xi,
scale=omega)``, with ``log p(x) = log 2 - log omega + log phi(z) + log Phi(alpha z)``,
``z = (x - xi) / omega`` (A. Azzalini with A. Capitanio, *The Skew-Normal and Related Families*, 2014,
ch. 2). Records are finite real numbers; the encoded batch is the values themselves.

Estimation: EM on the stochastic representation ``x = xi + Delta tau + eps``, ``tau ~ |N(0, 1)|``,
``eps ~ N(0, Gamma)`` with ``Delta = omega delta``, ``Gamma = omega^2 (1 - delta^2)``, ``delta = alpha /
sqrt(1 + alpha^2)`` (Azzalini & Capitanio 2014, section 3.1.4; T. I. Lin, J. C. Lee, S. Y. Yen, "Finite
mixture modelling using the skew normal distribution", *Statistica Sinica* 17, 2007). Given ``x`` at
the current parameters, ``tau`` is normal ``N(delta z, 1 - delta^2)`` truncated to ``(0, inf)``, so with
``r = phi(alpha z) / Phi(alpha z)`` (:func:`~mixle_spark.stats._normal_cdf.mills_ratio`, no underflow)

    t1 = E[tau | x] = delta z + sqrt(1 - delta^2) r,
    t2 = E[tau^2 | x] = delta^2 z^2 + (1 - delta^2) + delta z sqrt(1 - delta^2) r.

The accumulator (:class:`~mixle_spark.stats._latent_sums.LatentSumsAccumulator`) sums ``Σw``, ``Σw c``,
``Σw c^2``, ``Σw t1``, ``Σw t2``, ``Σw t1 c`` with ``c = x - shift`` (the current ``xi``: a function of the
model, the same on every partition), merged by addition. The
M-step maximizes the expected complete-data log-likelihood exactly: ``(xi, Delta)`` by the weighted least
squares of ``c`` on ``(1, tau)`` (its normal equations), then ``Gamma`` = the expected residual square
``(Σw c^2 - a Σw c - Delta Σw t1 c) / Σw``; so each pass is an EM step and the likelihood never
decreases (Dempster, Laird & Rubin 1977). Back: ``omega^2 = Gamma + Delta^2``, ``alpha = Delta /
sqrt(Gamma)``.

The boundary ``alpha -> inf`` (half-normal data) is where the likelihood may increase without bound in
``alpha``: ``|alpha|`` is kept at most ``max_alpha`` (``Gamma >= Delta^2 / max_alpha^2``), where the
density equals the half-normal one to ``1 / max_alpha^2``. EM moves slowly there (expect hundreds of
iterations for ``|alpha| > 10``).

First pass (no current model): the method-of-moments start, ``delta`` from the sample skewness
(Azzalini & Capitanio 2014, section 3.1.2), the sums of ``c``, ``c^2``, ``c^3`` taken about the first
value seen (re-expressed exactly on merging).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._latent_sums import LatentSumsAccumulator
from mixle_spark.stats._normal_cdf import log_ndtr, mills_ratio
from mixle_spark.stats._scalar_common import ScalarEncoder, ScalarFamily, finite, floor, positive, prior_tuple
from mixle_spark.stats.base import (
    Estimator,
    register_distribution,
    register_estimator,
)

__all__ = [
    "SkewNormalAccumulator",
    "SkewNormalDistribution",
    "SkewNormalEncoder",
    "SkewNormalEstimator",
]

DEFAULT_MIN_OMEGA = 1e-8
DEFAULT_MAX_ALPHA = 1e4
_LOG_2_OVER_SQRT_2PI = math.log(2.0) - 0.5 * math.log(2.0 * math.pi)
_B = math.sqrt(2.0 / math.pi)  # E|N(0, 1)|
_MAX_SKEWNESS = 0.99  # the skew normal's |skewness| is below 0.9953: the moment start clips here


class SkewNormalEncoder(ScalarEncoder):
    """Reads finite real numbers into a float64 array of shape (n,)."""

    estimator_name = "SkewNormalEstimator"
    expectation = "a finite number"


@register_distribution("skew_normal")
class SkewNormalDistribution(ScalarFamily):
    """Skew normal distribution: location ``xi``, scale ``omega``, shape ``alpha`` (``alpha = 0`` is the
    normal ``N(xi, omega^2)``; ``alpha -> +-inf`` a half-normal).

    Examples
    --------
    >>> d = SkewNormalDistribution(0.0, 1.0, 0.0)
    >>> round(d.log_density(0.0), 6)  # the standard normal's
    -0.918939
    """

    parameters = (finite("xi"), positive("omega"), finite("alpha"))
    xi: float
    omega: float
    alpha: float
    encoder_class = SkewNormalEncoder

    def __init__(self, xi: float, omega: float, alpha: float) -> None:
        self._set_parameters(xi, omega, alpha)
        self._log_const = _LOG_2_OVER_SQRT_2PI - math.log(self.omega)
        self.delta = self.alpha / math.sqrt(1.0 + self.alpha * self.alpha)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        u = rng.standard_normal(size=(2,) if size is None else (2, size))
        x = self.xi + self.omega * (self.delta * np.abs(u[0]) + math.sqrt(1.0 - self.delta**2) * u[1])
        return float(x) if size is None else x

    def log_density(self, x: float) -> float:
        value = float(x)
        if not math.isfinite(value):
            return -math.inf
        return float(self.seq_log_density(np.array([value]))[0])

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        z = enc - self.xi
        z *= 1.0 / self.omega
        out = log_ndtr(self.alpha * z)
        with np.errstate(over="ignore"):
            z *= z
        z *= 0.5
        out -= z
        out += self._log_const
        return out  # type: ignore[no-any-return]

    def moments(self) -> tuple[float, float]:
        """Mean ``xi + omega delta sqrt(2 / pi)``, variance ``omega^2 (1 - 2 delta^2 / pi)``."""
        mu_z = _B * self.delta
        return self.xi + self.omega * mu_z, self.omega**2 * (1.0 - mu_z * mu_z)

    def posterior_moments(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(E[tau | x], E[tau^2 | x])`` for the rows ``x`` (module docstring), arrays of shape (n,)."""
        z = (np.asarray(x, dtype=np.float64) - self.xi) / self.omega
        s = 1.0 / math.sqrt(1.0 + self.alpha * self.alpha)  # sqrt(1 - delta^2)
        mu = self.delta * z
        sr = s * mills_ratio(self.alpha * z)
        return mu + sr, mu * mu + s * s + mu * sr


class SkewNormalAccumulator(LatentSumsAccumulator):
    """The EM sums about the current ``xi`` (see :mod:`~mixle_spark.stats._latent_sums`)."""

    model_class = SkewNormalDistribution
    location = "xi"
    encoder_class = SkewNormalEncoder


@register_estimator("skew_normal")
@dataclass(eq=False, repr=False)
class SkewNormalEstimator(Estimator):
    """Skew normal fit by EM on the stochastic representation (one EM step per pass; see the module
    docstring for the statistics, the M-step and the first-pass start).

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations from ``SkewNormal(xi0, omega0, alpha0)`` = ``suff_stat``: they add
        their expected complete-data statistics (``tau ~ |N(0, 1)|``: ``E tau = sqrt(2 / pi)``, ``E tau^2 =
        1``), so the estimate tends to ``suff_stat`` as ``pseudo_count`` grows. Without ``suff_stat`` they
        shrink only ``Gamma`` = ``omega^2 (1 - delta^2)`` towards 1. Not used by the first-pass start.
    suff_stat : (float, float, float), optional
        Prior ``(xi0, omega0, alpha0)``.
    min_omega : float
        Scale floor (default 1e-8): a component collapsing onto one value keeps a finite density.
    max_alpha : float
        Bound on ``|alpha|`` (default 1e4; see the module docstring).
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or ``(0, 1, 0)``).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float, float] | None = prior_tuple(
        lambda xi0, omega0, alpha0: omega0 > 0,
        "a triple (xi0, omega0, alpha0) of finite numbers with omega0 > 0",
    )
    min_omega: float = floor(DEFAULT_MIN_OMEGA)
    max_alpha: float = floor(DEFAULT_MAX_ALPHA)
    name: str | None = None
    keys: str | None = None

    accumulator_class = SkewNormalAccumulator
    encoder_class = SkewNormalEncoder

    def _fallback(self) -> SkewNormalDistribution:
        xi0, omega0, alpha0 = self.suff_stat if self.suff_stat is not None else (0.0, 1.0, 0.0)
        alpha0 = min(max(alpha0, -self.max_alpha), self.max_alpha)
        return SkewNormalDistribution(xi0, max(omega0, self.min_omega), alpha0)

    def estimate(self, nobs: float | None, value: Any) -> SkewNormalDistribution:
        sw, s1, s2, s3, t1, t2, t1c, shift, sw_em, _ = (float(v) for v in value)
        if not (sw > 0 and all(math.isfinite(v) for v in (s1, s2, s3, t1, t2, t1c, shift))):
            return self._fallback()
        if not sw_em > 0:
            return self._moment_start(sw, s1, s2, s3, shift)
        pc = self.pseudo_count or 0.0
        extra = 0.0
        if pc > 0 and self.suff_stat is not None:
            xi0, omega0, alpha0 = self.suff_stat
            delta0 = alpha0 / math.sqrt(1.0 + alpha0 * alpha0)
            big0, gamma0, d0 = omega0 * delta0, omega0 * omega0 / (1.0 + alpha0 * alpha0), xi0 - shift
            sw, s1, t1, t2 = sw + pc, s1 + pc * (d0 + big0 * _B), t1 + pc * _B, t2 + pc
            s2 += pc * (d0 * d0 + 2.0 * d0 * big0 * _B + big0 * big0 + gamma0)
            t1c += pc * (d0 * _B + big0)
        elif pc > 0:
            extra = pc
        det = sw * t2 - t1 * t1  # > 0: Cauchy-Schwarz, with E[tau^2 | x] > E[tau | x]^2
        if not det > 0:
            return self._fallback()
        a = (s1 * t2 - t1 * t1c) / det
        big = (sw * t1c - t1 * s1) / det
        gamma = (max(s2 - a * s1 - big * t1c, 0.0) + extra) / (sw + extra)
        return self._from_representation(shift + a, big, gamma)

    def _from_representation(self, xi: float, big: float, gamma: float) -> SkewNormalDistribution:
        """``(xi, Delta, Gamma)`` -> ``(xi, omega, alpha)`` within the floors."""
        gamma = max(gamma, big * big / (self.max_alpha * self.max_alpha))
        omega = math.sqrt(gamma + big * big)
        if not (math.isfinite(omega) and omega > 0):
            return self._fallback()
        alpha = big / math.sqrt(gamma) if gamma > 0 else math.copysign(self.max_alpha, big)
        return SkewNormalDistribution(xi, max(omega, self.min_omega), alpha)

    def _moment_start(
        self, sw: float, s1: float, s2: float, s3: float, shift: float
    ) -> SkewNormalDistribution:
        """Method of moments: ``delta`` from the sample skewness (``gamma_1 = (4 - pi) / 2 mu_z^3 /
        (1 - mu_z^2)^(3/2)``, ``mu_z = delta sqrt(2 / pi)``), clipped to ``|gamma_1| <= 0.99``."""
        m = s1 / sw
        var = max(s2 / sw - m * m, 0.0)
        if not var > 0:
            return SkewNormalDistribution(shift + m, self.min_omega, 0.0)
        mu3 = s3 / sw - 3.0 * m * (s2 / sw) + 2.0 * m**3
        skew = min(max(mu3 / var**1.5, -_MAX_SKEWNESS), _MAX_SKEWNESS)
        r = (2.0 * abs(skew) / (4.0 - math.pi)) ** (1.0 / 3.0)
        mu_z = math.copysign(r / math.sqrt(1.0 + r * r), skew)
        delta = mu_z / _B
        omega = math.sqrt(var / (1.0 - mu_z * mu_z))
        alpha = delta / math.sqrt(1.0 - delta * delta)
        alpha = min(max(alpha, -self.max_alpha), self.max_alpha)
        return SkewNormalDistribution(shift + m - omega * mu_z, max(omega, self.min_omega), alpha)
