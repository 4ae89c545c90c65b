"""Student-t: ``StudentTDistribution(mu, sigma, dof)``, the location-scale t distribution.

``log p(x) = log Gamma((dof + 1) / 2) - log Gamma(dof / 2) - log(pi dof) / 2 - log sigma
- (dof + 1) / 2 log(1 + z^2 / dof)`` with ``z = (x - mu) / sigma``. Records are finite real numbers;
the encoded batch is the values themselves. As ``dof -> inf`` it tends to the Gaussian N(mu, sigma^2)
(the Gamma ratio is a rising factorial, accurate for a large ``dof``).

Estimation: EM on the scale-mixture form ``x | tau ~ N(mu, sigma^2 / tau)``, ``tau ~ Gamma(dof / 2,
rate dof / 2)`` (Liu & Rubin 1995), one EM step per pass, so the statistics stay single-pass and
merge by addition. The accumulator reads the *current model* (``seq_update``'s ``estimate``) for the
posterior expectations ``u = E[tau | x] = (dof + 1) / (dof + z^2)`` and ``E[log tau - tau | x] =
log u - u + digamma(h) - log h`` (``h = (dof + 1) / 2``), and sums ``Σw``, ``Σw u``, ``Σw u (x - c)``,
``Σw u (x - c)^2`` (about the current ``mu``, ``c``; 0 on a first pass, as the Gaussian does) and
``Σw (E[log tau - tau | x] + 1)`` with its weight. The M-step is ``mu = Σw u x / Σw u``,
``sigma^2 = Σw u (x - mu)^2 / Σw`` and ``dof`` solving ``log(dof / 2) - digamma(dof / 2) =
-mean(E[log tau - tau | x] + 1)``, the gamma-shape equation, solved by
:func:`~mixle_spark.stats.gamma.solve_shape` to ``1e-12`` relative (:data:`DOF_RTOL`) within
``[min_dof, max_dof]``. Given ``u``, the complete-data log-likelihood separates into a (mu, sigma)
part and a dof part, so this is an exact EM step and the log-likelihood never decreases. (ECME,
maximising the observed likelihood over ``dof``, would need the data again for every trial ``dof``.)

Numerics: ``E[log tau - tau | x] + 1 = [log u - u + 1] - [log h - digamma(h)]`` with the first
bracket from ``log1p(d) - d``, ``d = u - 1 = (1 - z^2) / (dof + z^2)``: every term is <= 0, so a large
``dof`` (u near 1) loses nothing to cancellation. Rows with ``|z| > 1`` are handled in ``1 / |z|``
(``u (x - mu)^2 = sigma^2 (dof + 1) / (dof / z^2 + 1)`` is bounded), so a far outlier cannot overflow.

First pass (no current model: ``seq_initialize``, or ``seq_update(..., None)``): ``u = 1``, i.e.
Gaussian moments. Their estimate has ``dof = init_dof`` (default 4; the fixed ``dof`` when given) and
``sigma^2 = variance (dof - 2) / dof`` when ``dof > 2`` (the starting model has the data's variance),
else the variance; values beyond ~1e154 overflow these moments and the start is then ``sigma = 1e150``.
First-pass rows carry no information on ``dof``. EM for the t converges linearly and slowly when the
dof is large (Gaussian-like data drift towards ``max_dof``): expect ~50-150 iterations to 1e-8.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._scalar_common import (
    ScalarEncoder,
    ScalarFamily,
    bound,
    check_bounds,
    finite,
    positive,
    prior_tuple,
)
from mixle_spark.stats._special import log1p_minus_identity, log_minus_digamma, log_rising_factorial
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Estimator,
    check_parameter,
    option,
    register_distribution,
    register_estimator,
)
from mixle_spark.stats.gamma import SHAPE_RTOL, solve_shape
from mixle_spark.stats.gaussian import shift_moments

__all__ = [
    "StudentTAccumulator",
    "StudentTDistribution",
    "StudentTEncoder",
    "StudentTEstimator",
]

DOF_RTOL = SHAPE_RTOL
"""Relative change of ``dof`` at which the M-step's Newton iteration stops (that of gamma's shape)."""
DEFAULT_MIN_DOF = 1e-2
DEFAULT_MAX_DOF = 1e8
DEFAULT_INIT_DOF = 4.0
DEFAULT_MIN_SIGMA = 1e-4
_LOG_PI = math.log(math.pi)
_HUGE_Z = 1e150  # |z| / sqrt(dof) beyond this: log1p(a^2) = 2 log a to double precision (no overflow)
_LOG_2 = math.log(2.0)
_MAX_SIGMA = 1e150  # first pass only: a variance that overflowed (|x| > ~1e154) starts from here


_MIN_G = 1e-300  # 1 / |z| is kept above this (a row beyond 1e300 scales counts as at 1e300)


def _scaled_posterior(c: np.ndarray, sigma: float, dof: float) -> tuple[np.ndarray, ...]:
    """``(u, d, u z, u z^2, log u)`` for ``z = c / sigma``: ``u = (dof + 1) / (dof + z^2)``, ``d = u - 1``.

    No overflow for any ``c``: rows with ``|z| > 1`` are written in ``g = 1 / |z|``
    (``u = (dof + 1) g^2 / (dof g^2 + 1)``, ``u z^2 = (dof + 1) / (dof g^2 + 1)``), so ``u z`` and
    ``u z^2`` (at most ``dof + 1``) stay exact for a far outlier, and ``log u`` stays finite where
    ``u`` underflows. Arrays of shape (n,).
    """
    with np.errstate(over="ignore"):
        z = c / sigma
    far = ~(np.abs(z) <= 1.0)
    zs = np.where(far, 0.0, z)
    z2 = zs * zs
    denom = dof + z2
    u = (dof + 1.0) / denom
    d = (1.0 - z2) / denom
    uz = u * zs
    uz2 = u * z2
    log_u = np.log(u)
    if far.any():
        cf = c[far]
        g = np.maximum(sigma / np.abs(cf), _MIN_G)
        g2 = g * g
        gden = dof * g2 + 1.0
        u[far] = (dof + 1.0) * g2 / gden
        d[far] = (g2 - 1.0) / gden
        uz[far] = np.sign(cf) * (dof + 1.0) * g / gden
        uz2[far] = (dof + 1.0) / gden
        log_u[far] = math.log(dof + 1.0) + 2.0 * np.log(g) - np.log(gden)
    return u, d, uz, uz2, log_u


def _log_u_minus_d(log_u: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``log u - u + 1`` (<= 0) with ``d = u - 1``: by :func:`log1p_minus_identity` near ``u = 1`` (no
    cancellation), as ``log u - d`` elsewhere."""
    out = log_u - d
    near = np.abs(d) <= 0.5
    if near.any():
        out[near] = log1p_minus_identity(d[near])
    return out


class StudentTEncoder(ScalarEncoder):
    """Reads finite real numbers into a float64 array of shape (n,)."""

    estimator_name = "StudentTEstimator"
    expectation = "a finite number"


@register_distribution("student_t")
class StudentTDistribution(ScalarFamily):
    """Location-scale Student-t distribution: location ``mu``, scale ``sigma``, degrees of freedom ``dof``.

    The variance is ``sigma^2 dof / (dof - 2)`` for ``dof > 2``; ``dof = 1`` is the Cauchy distribution.

    Examples
    --------
    >>> d = StudentTDistribution(0.0, 1.0, 1.0)  # Cauchy: 1 / (pi (1 + x^2))
    >>> round(d.log_density(1.0), 12) == round(-math.log(2 * math.pi), 12)
    True
    """

    parameters = (finite("mu"), positive("sigma"), positive("dof"))
    mu: float
    sigma: float
    dof: float
    encoder_class = StudentTEncoder

    def __init__(self, mu: float, sigma: float, dof: float) -> None:
        self._set_parameters(mu, sigma, dof)
        # log Gamma((v + 1) / 2) - log Gamma(v / 2) as a rising factorial: accurate for a large dof.
        self._log_const = (
            float(log_rising_factorial(0.5 * self.dof, 0.5))
            - 0.5 * (_LOG_PI + math.log(self.dof))
            - math.log(self.sigma)
        )
        self._inv_scale = 1.0 / (self.sigma * math.sqrt(self.dof))

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return self.mu + self.sigma * rng.standard_t(self.dof, size=size)

    def log_density(self, x: float) -> float:
        value = float(x)
        if not math.isfinite(value):
            return -math.inf
        return float(self.seq_log_density(np.array([value]))[0])

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        # a = |z| / sqrt(dof); log(1 + a^2) = 2 log a beyond 1e150 (no overflow of a^2, nor of a).
        with np.errstate(over="ignore"):
            a = np.abs(enc - self.mu) * self._inv_scale
        big = a > _HUGE_Z
        out = np.log1p(np.where(big, 0.0, a) ** 2)
        if big.any():
            half = np.abs(0.5 * enc[big] - 0.5 * self.mu)  # |x - mu| / 2: finite for finite x and mu
            out[big] = 2.0 * (np.log(half) + _LOG_2 + math.log(self._inv_scale))
        return self._log_const - (0.5 * (self.dof + 1.0)) * out

    def posterior_weights(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(u, d)``: ``u = E[tau | x] = (dof + 1) / (dof + z^2)`` and ``d = u - 1`` (computed as
        ``(1 - z^2) / (dof + z^2)``, exact also when ``u`` is near 1), shape (n,) each."""
        with np.errstate(over="ignore"):
            c = x - self.mu
        u, d = _scaled_posterior(c, self.sigma, self.dof)[:2]
        return u, d


class StudentTAccumulator(Accumulator):
    """EM statistics of the scale mixture; value ``(sw, su, s1, s2, shift, sw_dof, s_dof)``.

    ``sw = Σw``, ``su = Σw u``, ``s1 = Σw u (x - shift)``, ``s2 = Σw u (x - shift)^2``; ``sw_dof`` and
    ``s_dof = Σw (E[log tau - tau | x] + 1)`` over the rows updated with a current model (see the
    module docstring). ``combine`` re-expresses a value at this accumulator's shift exactly.
    """

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sw = 0.0
        self.su = 0.0
        self.s1 = 0.0
        self.s2 = 0.0
        self.shift = 0.0
        self.sw_dof = 0.0
        self.s_dof = 0.0

    def seq_update(self, enc: np.ndarray, weights: np.ndarray, estimate: Distribution | None) -> None:
        x = np.asarray(enc, dtype=np.float64)
        weights = np.asarray(weights, dtype=np.float64)
        if x.size == 0:
            return None
        if estimate is not None and not isinstance(estimate, StudentTDistribution):
            raise SpecError(
                "StudentTAccumulator.seq_update needs the current StudentTDistribution (or None on the "
                f"first pass), got {estimate!r}"
            )
        total = float(weights.sum())
        if estimate is None:
            self._add_moments(x, weights, total)
            return None
        if self.sw == 0.0 and self.su == 0.0:
            self.shift = estimate.mu  # a function of the model only: every partition agrees
        elif self.shift != estimate.mu:
            self._reshift(estimate.mu)
        with np.errstate(over="ignore"):
            c = x - estimate.mu
        u, d, uz, uz2, log_u = _scaled_posterior(c, estimate.sigma, estimate.dof)
        h = 0.5 * (estimate.dof + 1.0)
        self.sw += total
        self.su += float(np.dot(weights, u))
        # Σw u (x - mu) = sigma Σw u z and Σw u (x - mu)^2 = sigma^2 Σw u z^2: bounded terms.
        self.s1 += estimate.sigma * float(np.dot(weights, uz))
        self.s2 += estimate.sigma**2 * float(np.dot(weights, uz2))
        self.sw_dof += total
        self.s_dof += float(np.dot(weights, _log_u_minus_d(log_u, d))) - total * float(log_minus_digamma(h))
        return None

    def _add_moments(self, x: np.ndarray, weights: np.ndarray, total: float) -> None:
        """First pass (no model): u = 1, plain weighted moments about the shift (0 unless combined)."""
        with np.errstate(over="ignore", invalid="ignore"):
            c = x - self.shift
            wc = weights * c
            self.s1 += float(wc.sum())
            self.s2 += float(np.dot(wc, c))  # inf when |x| > ~1e154: the estimate then caps sigma
        self.sw += total
        self.su += total

    def _reshift(self, new: float) -> None:
        self.s1, self.s2 = shift_moments(self.su, self.s1, self.s2, self.shift, new)
        self.shift = new

    def combine(self, value: Any) -> StudentTAccumulator:
        sw, su, s1, s2, shift, sw_dof, s_dof = (float(v) for v in value)
        if self.sw == 0.0 and self.su == 0.0:
            self.shift = shift
        s1, s2 = shift_moments(su, s1, s2, shift, self.shift)
        self.sw += sw
        self.su += su
        self.s1 += s1
        self.s2 += s2
        self.sw_dof += sw_dof
        self.s_dof += s_dof
        return self

    def value(self) -> tuple[float, float, float, float, float, float, float]:
        return (self.sw, self.su, self.s1, self.s2, self.shift, self.sw_dof, self.s_dof)

    def _scale(self, factor: float) -> None:
        # Every field but the shift (where s1 and s2 are taken) is a sum over rows of w times a
        # per-row term, s_dof included: all scale.
        self.sw *= factor
        self.su *= factor
        self.s1 *= factor
        self.s2 *= factor
        self.sw_dof *= factor
        self.s_dof *= factor

    def from_value(self, value: Any) -> StudentTAccumulator:
        self.sw, self.su, self.s1, self.s2, self.shift, self.sw_dof, self.s_dof = (float(v) for v in value)
        return self

    encoder_class = StudentTEncoder


@register_estimator("student_t")
@dataclass(eq=False, repr=False)
class StudentTEstimator(Estimator):
    """Student-t fit by EM on the scale-mixture representation (one EM step per pass; see the module
    docstring for the statistics, the dof equation and the first-pass start).

    Parameters
    ----------
    dof : float, optional
        Fixed degrees of freedom; None (default) estimates them.
    init_dof : float
        Degrees of freedom of the model built from first-pass statistics (default 4).
    pseudo_count : float, optional
        Number of pseudo-observations distributed as ``t(mu0, sigma0, dof0)`` = ``suff_stat``: they add
        their expected complete-data statistics (``pc`` to Σw and Σw u, ``pc mu0`` to Σw u x,
        ``pc (mu0^2 + sigma0^2)`` to Σw u x^2, ``pc (digamma(dof0 / 2) - log(dof0 / 2))`` to the dof
        sum). As ``pc`` grows the estimate tends to ``suff_stat``. Without ``suff_stat`` they shrink
        only the scale (towards 1: ``pc`` to Σw and to the scatter) and the dof (towards ``init_dof``,
        or the fixed ``dof``). On the first pass of a fit only the location and scale use them.
    suff_stat : (float, float, float), optional
        Prior ``(mu0, sigma0, dof0)``.
    min_sigma : float
        Scale floor (default 1e-4, the square root of the Gaussian's variance floor): a component that
        collapses onto one value keeps a finite density.
    min_dof, max_dof : float
        Bounds of the estimated dof (defaults 0.01 and 1e8). Gaussian-like data drift towards
        ``max_dof`` (EM moves the dof slowly when it is large; the model is then practically Gaussian).
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or mu = 0, sigma = 1, dof = init_dof).
    """

    dof: float | None = option(
        None,
        lambda v: isinstance(v, numbers.Real) and 0 < float(v) < math.inf,
        "None (estimate it) or a positive finite number",
        read=float,
    )
    init_dof: float = option(DEFAULT_INIT_DOF, lambda v: isinstance(v, numbers.Real), "a number", read=float)
    pseudo_count: float | None = None
    suff_stat: tuple[float, float, float] | None = prior_tuple(
        lambda mu0, sigma0, dof0: sigma0 > 0 and dof0 > 0,
        "a triple (mu0, sigma0, dof0) of finite numbers with sigma0 > 0 and dof0 > 0",
    )
    min_sigma: float = option(
        DEFAULT_MIN_SIGMA, lambda v: math.isfinite(v) and v > 0, "a positive finite number", read=float
    )
    min_dof: float = bound(DEFAULT_MIN_DOF)
    max_dof: float = bound(DEFAULT_MAX_DOF)
    name: str | None = None
    keys: str | None = None

    accumulator_class = StudentTAccumulator
    encoder_class = StudentTEncoder

    def check(self) -> None:
        check_bounds(self, "min_dof", "max_dof")
        check_parameter(
            self.min_dof <= self.init_dof <= self.max_dof,
            "StudentTEstimator",
            "init_dof",
            self.init_dof,
            f"a number in [min_dof, max_dof] = [{self.min_dof}, {self.max_dof}]",
        )

    def _free_parameters(self, model: Distribution, tied: set[Any]) -> int:
        return model.n_free_parameters() - (self.dof is not None)  # a given dof is not estimated

    def _with_prior(self, value: Any) -> tuple[float, ...]:
        """The statistics with the pseudo-observations added (see the class docstring)."""
        sw, su, s1, s2, shift, sw_dof, s_dof = (float(v) for v in value)
        pc = self.pseudo_count or 0.0
        if pc <= 0:
            return sw, su, s1, s2, shift, sw_dof, s_dof
        if self.suff_stat is None:
            # Scale towards 1 and dof towards init_dof; the location is left to the data (a prior
            # at the accumulator's shift would depend on how the first pass was partitioned).
            s2 += pc
            sw += pc
            dof0 = self.dof or self.init_dof
        else:
            mu0, sigma0, dof0 = self.suff_stat
            d0 = mu0 - shift
            sw, su, s1, s2 = sw + pc, su + pc, s1 + pc * d0, s2 + pc * (d0 * d0 + sigma0 * sigma0)
        return sw, su, s1, s2, shift, sw_dof + pc, s_dof - pc * float(log_minus_digamma(0.5 * dof0))

    def _solve_dof(self, sw_dof: float, s_dof: float) -> float:
        """The M-step's dof from the dof sums (see the module docstring)."""
        if self.dof is not None:
            return self.dof
        if not (sw_dof > 0 and math.isfinite(s_dof)):
            return self.init_dof
        # Jensen: E[log tau - tau] <= -1, so the right-hand side is >= 0 (0 only from rounding).
        rhs = max(-s_dof / sw_dof, 0.0)
        return 2.0 * solve_shape(rhs, 0.5 * self.min_dof, 0.5 * self.max_dof)

    def _fallback(self, shift: float) -> StudentTDistribution:
        if self.suff_stat is not None:
            mu0, sigma0, dof0 = self.suff_stat
        else:
            mu0, sigma0, dof0 = (shift if math.isfinite(shift) else 0.0), 1.0, self.dof or self.init_dof
        dof0 = min(max(dof0, self.min_dof), self.max_dof) if self.dof is None else self.dof
        return StudentTDistribution(mu0, max(sigma0, self.min_sigma), dof0)

    def estimate(self, nobs: float | None, value: Any) -> StudentTDistribution:
        # Data rows, none of them updated with a current model: the start of a fit.
        first_pass = float(value[0]) > 0 and not float(value[5]) > 0
        sw, su, s1, s2, shift, sw_dof, s_dof = self._with_prior(value)
        if not (sw > 0 and su > 0 and math.isfinite(s1) and (math.isfinite(s2) or first_pass)):
            return self._fallback(shift)
        if first_pass:
            dof = self.init_dof if self.dof is None else self.dof
        else:
            dof = self._solve_dof(sw_dof, s_dof)
        mean_c = s1 / su
        if first_pass and not math.isfinite(s2):
            sigma2 = _MAX_SIGMA**2  # the moments overflowed: start very wide, EM narrows it
        else:
            sigma2 = max(s2 - s1 * mean_c, 0.0) / sw
        if first_pass and dof > 2.0:
            sigma2 *= (dof - 2.0) / dof  # the starting model has the data's variance
        sigma = min(max(math.sqrt(sigma2), self.min_sigma), _MAX_SIGMA)
        return StudentTDistribution(shift + mean_c, sigma, dof)
