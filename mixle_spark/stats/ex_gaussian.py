"""Ex-Gaussian (exponentially modified Gaussian): ``ExGaussianDistribution(mu, sigma, tau)``, the sum of a
normal ``N(mu, sigma^2)`` and an independent exponential of mean ``tau`` (``scipy.stats.exponnorm(K=tau /
sigma, loc=mu, scale=sigma)``), a model of reaction and service times.

With ``z = (x - mu) / sigma``, ``k = sigma / tau`` and ``w = z - k``,
``log p(x) = -log tau + k^2 / 2 - k z + log Phi(w)`` (N. L. Johnson, S. Kotz, N. Balakrishnan,
*Continuous Univariate Distributions* vol. 1, 2nd ed., 1994, ch. 18 section 7). For ``w < 0`` it is
written ``-log tau - log 2 - z^2 / 2 + log erfcx(-w / sqrt 2)`` (the exponent's terms cancel exactly), so
the lower tail loses nothing to cancellation. Records are finite real numbers; the encoded batch is the
values themselves.

Estimation: EM with the exponential part ``y`` latent (Dempster, Laird & Rubin 1977). Given ``x``, ``y``
is normal ``N(m, sigma^2)``, ``m = x - mu - sigma^2 / tau``, truncated to ``(0, inf)``, so with ``r =
phi(w) / Phi(w)`` (``m / sigma = w``; :func:`~mixle_spark.stats._normal_cdf.mills_ratio`)

    E[y | x] = m + sigma r,    E[y^2 | x] = m^2 + sigma^2 + m sigma r

(the truncated normal's moments: Johnson, Kotz & Balakrishnan vol. 1, ch. 13 section 10.1). The M-step
maximizes the expected complete-data log-likelihood exactly: ``tau = Σw E[y] / Σw``, ``mu = Σw (x - E[y]) /
Σw``, ``sigma^2 = Σw E[(x - y - mu)^2] / Σw``; each pass is an EM step and the likelihood never decreases.
The statistics (:class:`~mixle_spark.stats._latent_sums.LatentSumsAccumulator`) are sums about the
current ``mu`` that merge by addition. Near ``tau -> 0`` (normal data) EM moves slowly.

First pass (no current model): the method of moments (skewness ``2 tau^3 / (sigma^2 + tau^2)^(3/2)``),
the skewness clipped to ``[0.01, 1.9]``.

``log_cdf`` is ``log(Phi(z) - exp(k^2 / 2 - k z) Phi(w))`` (closed form, the second term in the stable
form above; below ``z = 0`` the log of the ratio of the two terms is ``ln erfcx(-z / sqrt 2) - ln
erfcx(-w / sqrt 2)``, free of the ``z^2`` both carry, and ``log1p(k / |z|)`` beyond ``|z| = 1e4``),
``log_survival`` the log of the sum ``Phi(-z) + exp(...) Phi(w)`` (no cancellation). The ``quantile`` is
solved by safeguarded Newton steps on the log cdf (log survival above the median).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._cdf import log1m_exp
from mixle_spark.stats._latent_sums import LatentSumsAccumulator
from mixle_spark.stats._normal_cdf import erfcx, exp_half_square, log_ndtr, mills_ratio, ndtri
from mixle_spark.stats._scalar_common import ScalarEncoder, ScalarFamily, finite, floor, positive, prior_tuple
from mixle_spark.stats.base import Estimator, register_distribution, register_estimator

__all__ = [
    "ExGaussianAccumulator",
    "ExGaussianDistribution",
    "ExGaussianEncoder",
    "ExGaussianEstimator",
]

DEFAULT_MIN_SIGMA = 1e-8
DEFAULT_MIN_TAU = 1e-8
_LN2 = math.log(2.0)
_SQRT2 = math.sqrt(2.0)
_QUANTILE_STEPS = 60


class ExGaussianEncoder(ScalarEncoder):
    """Reads finite real numbers into a float64 array of shape (n,)."""

    estimator_name = "ExGaussianEstimator"
    expectation = "a finite number"


@register_distribution("ex_gaussian")
class ExGaussianDistribution(ScalarFamily):
    """Normal ``N(mu, sigma^2)`` plus an independent exponential of mean ``tau``.

    Examples
    --------
    >>> d = ExGaussianDistribution(0.0, 1.0, 1.0)
    >>> [round(v, 12) for v in d.moments()]
    [1.0, 2.0]
    """

    parameters = (finite("mu"), positive("sigma"), positive("tau"))
    mu: float
    sigma: float
    tau: float
    encoder_class = ExGaussianEncoder

    def __init__(self, mu: float, sigma: float, tau: float) -> None:
        self._set_parameters(mu, sigma, tau)
        self.k = self.sigma / self.tau
        self._log_tau = math.log(self.tau)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.normal(self.mu, self.sigma, size=size) + rng.exponential(self.tau, size=size)

    def log_density(self, x: float) -> float:
        value = float(x)
        if not math.isfinite(value):
            return -math.inf
        return float(self.seq_log_density(np.array([value]))[0])

    def _log_second(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(log(exp(k^2 / 2 - k z) Phi(w)), w)``: the stable form below ``w = 0`` (module docstring)."""
        w = z - self.k
        e = erfcx(np.abs(w) / _SQRT2)
        with np.errstate(divide="ignore", over="ignore"):
            out = np.log(e) - 0.5 * z * z - _LN2
        pos = w > 0
        if pos.any():
            wp = w[pos]
            out[pos] = self.k * (0.5 * self.k - z[pos]) + np.log1p(-0.5 * e[pos] * exp_half_square(wp))
        return out, w

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        z = enc - self.mu
        z *= 1.0 / self.sigma
        out, _ = self._log_second(z)
        out -= self._log_tau
        return out

    def moments(self) -> tuple[float, float]:
        return self.mu + self.tau, self.sigma**2 + self.tau**2

    def posterior_moments(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(E[y | x], E[y^2 | x])`` of the exponential part (module docstring), arrays of shape (n,)."""
        w = (np.asarray(x, dtype=np.float64) - self.mu) / self.sigma - self.k
        m = self.sigma * w
        sr = self.sigma * mills_ratio(w)
        return m + sr, m * m + self.sigma**2 + m * sr

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x, dtype=np.float64) - self.mu) / self.sigma
        first = log_ndtr(z)
        second, w = self._log_second(z)
        with np.errstate(invalid="ignore", divide="ignore"):
            gap = first - second
            # below 0 both are -z^2 / 2 - ln 2 + ln erfcx(.): their gap without the (huge) z^2 terms
            low = z < 0
            gap[low] = np.log(erfcx(-z[low] / _SQRT2)) - np.log(erfcx(-w[low] / _SQRT2))
            # far below, erfcx(a) ~ 1 / (a sqrt pi) (1 - 1 / (2 a^2)): the gap is log1p(k / |z|) to 2 / z^2
            far = z < -1e4
            gap[far] = np.log1p(self.k / -z[far])
            out = first + log1m_exp(np.maximum(gap, 0.0))
        return np.where(np.isposinf(z), 0.0, np.where(first == -np.inf, -np.inf, out))  # type: ignore[no-any-return]

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x, dtype=np.float64) - self.mu) / self.sigma
        second, _ = self._log_second(z)
        with np.errstate(invalid="ignore"):  # -inf + -inf far above: masked below
            out = np.logaddexp(log_ndtr(-z), second)
        return np.where(np.isposinf(z), -np.inf, np.where(np.isneginf(z), 0.0, out))  # type: ignore[no-any-return]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        """Safeguarded Newton on ``log F(x) = log p`` (``log S(x) = log(1 - p)`` above the median) inside the
        bracket ``[mu + sigma Phi^-1(p), mu + sigma Phi^-1(sqrt p) - tau log(1 - sqrt p)]`` (the normal
        part's quantile; and ``P(N <= a, Y <= b) = sqrt p sqrt p``), bisecting when a step leaves it."""
        p = np.asarray(p, dtype=np.float64)
        flat = np.atleast_1d(p).astype(np.float64)
        ok = (flat > 0) & (flat < 1)
        q = np.where(ok, flat, 0.5)
        root = np.sqrt(q)
        lo = self.mu + self.sigma * ndtri(q)
        hi = self.mu + self.sigma * ndtri(root) - self.tau * np.log1p(-root)
        upper = q > 0.5
        target = np.where(upper, np.log1p(-q), np.log(q))
        x = 0.5 * (lo + hi)
        for _ in range(_QUANTILE_STEPS):
            lc, ls = self.log_cdf(x), self.log_survival(x)
            g = np.where(upper, ls, lc) - target  # increasing in x below the median, decreasing above
            below = np.where(upper, g > 0, g < 0)
            lo, hi = np.where(below, x, lo), np.where(below, hi, x)
            log_pdf = self.seq_log_density(x.copy())
            slope = np.where(upper, -np.exp(log_pdf - ls), np.exp(log_pdf - lc))
            with np.errstate(divide="ignore", invalid="ignore"):
                step = x - g / slope
            inside = (step > lo) & (step < hi) & np.isfinite(step)
            new = np.where(inside, step, 0.5 * (lo + hi))
            if np.all(np.abs(new - x) <= 1e-15 * np.maximum(np.abs(x), self.sigma)):
                x = new
                break
            x = new
        x = np.where(ok, x, np.where(flat == 0, -np.inf, np.where(flat == 1, np.inf, np.nan)))
        return x.reshape(p.shape) if p.ndim else x[0]  # type: ignore[no-any-return]


class ExGaussianAccumulator(LatentSumsAccumulator):
    """The EM sums about the current ``mu`` (see :mod:`~mixle_spark.stats._latent_sums`)."""

    model_class = ExGaussianDistribution
    location = "mu"
    encoder_class = ExGaussianEncoder


@register_estimator("ex_gaussian")
@dataclass(eq=False, repr=False)
class ExGaussianEstimator(Estimator):
    """Ex-Gaussian fit by EM with the exponential part latent (one EM step per pass; see the module
    docstring).

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations from ``ExGaussian(mu0, sigma0, tau0)`` = ``suff_stat``, adding their
        expected complete-data statistics (``E y = tau0``, ``E y^2 = 2 tau0^2``), so the estimate tends to
        ``suff_stat`` as ``pseudo_count`` grows. Without ``suff_stat`` they shrink ``sigma^2`` towards 1. Not
        used by the first-pass start.
    suff_stat : (float, float, float), optional
        Prior ``(mu0, sigma0, tau0)``.
    min_sigma, min_tau : float
        Floors of the normal part's scale and of the exponential mean (defaults 1e-8).
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or ``(0, 1, 1)``).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float, float] | None = prior_tuple(
        lambda mu0, sigma0, tau0: sigma0 > 0 and tau0 > 0,
        "a triple (mu0, sigma0, tau0) of finite numbers with sigma0 > 0 and tau0 > 0",
    )
    min_sigma: float = floor(DEFAULT_MIN_SIGMA)
    min_tau: float = floor(DEFAULT_MIN_TAU)
    name: str | None = None
    keys: str | None = None

    accumulator_class = ExGaussianAccumulator
    encoder_class = ExGaussianEncoder

    def _fallback(self) -> ExGaussianDistribution:
        mu0, sigma0, tau0 = self.suff_stat if self.suff_stat is not None else (0.0, 1.0, 1.0)
        return ExGaussianDistribution(mu0, max(sigma0, self.min_sigma), max(tau0, self.min_tau))

    def _model(self, mu: float, sigma2: float, tau: float) -> ExGaussianDistribution:
        sigma = math.sqrt(max(sigma2, 0.0))
        if not (math.isfinite(mu) and math.isfinite(sigma) and math.isfinite(tau)):
            return self._fallback()
        return ExGaussianDistribution(mu, max(sigma, self.min_sigma), max(tau, self.min_tau))

    def estimate(self, nobs: float | None, value: Any) -> ExGaussianDistribution:
        sw, s1, s2, s3, t1, t2, t1c, shift, sw_em, _ = (float(v) for v in value)
        if not (sw > 0 and all(math.isfinite(v) for v in (s1, s2, s3, t1, t2, t1c, shift))):
            return self._fallback()
        if not sw_em > 0:
            return self._moment_start(sw, s1, s2, s3, shift)
        pc = self.pseudo_count or 0.0
        extra = 0.0
        if pc > 0 and self.suff_stat is not None:
            mu0, sigma0, tau0 = self.suff_stat
            d0 = mu0 - shift  # c = d0 + n + y: E c = d0 + tau0, E c^2 = (d0 + tau0)^2 + sigma0^2 + tau0^2
            sw, s1, t1, t2 = sw + pc, s1 + pc * (d0 + tau0), t1 + pc * tau0, t2 + pc * 2.0 * tau0 * tau0
            s2 += pc * ((d0 + tau0) ** 2 + sigma0 * sigma0 + tau0 * tau0)
            t1c += pc * (d0 * tau0 + 2.0 * tau0 * tau0)
        elif pc > 0:
            extra = pc
        a = (s1 - t1) / sw  # mu - shift
        tau = t1 / sw
        # Σw E[(c - a - y)^2] = Σw c^2 - 2 a Σw c - 2 Σw c y + a^2 Σw + 2 a Σw y + Σw y^2
        rss = s2 - 2.0 * a * s1 - 2.0 * t1c + a * a * sw + 2.0 * a * t1 + t2
        return self._model(shift + a, (max(rss, 0.0) + extra) / (sw + extra), tau)

    def _moment_start(
        self, sw: float, s1: float, s2: float, s3: float, shift: float
    ) -> ExGaussianDistribution:
        """``tau = sd (skewness / 2)^(1/3)``, ``sigma^2 = variance - tau^2``, ``mu = mean - tau``."""
        m = s1 / sw
        var = max(s2 / sw - m * m, 0.0)
        if not var > 0:
            return self._model(shift + m, 0.0, self.min_tau)
        mu3 = s3 / sw - 3.0 * m * (s2 / sw) + 2.0 * m**3
        skew = min(max(mu3 / var**1.5, 0.01), 1.9)
        tau = math.sqrt(var) * (0.5 * skew) ** (1.0 / 3.0)
        return self._model(shift + m - tau, var - tau * tau, tau)
