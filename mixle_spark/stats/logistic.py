"""Logistic: ``LogisticDistribution(mu, s)`` with location ``mu`` and scale ``s``
(``scipy.stats.logistic(loc=mu, scale=s)``); with ``z = (x - mu) / s``,
``log p(x) = -log(4 s) - 2 log cosh(z / 2)`` and variance ``s^2 pi^2 / 3``.

Records are finite real numbers; the encoded batch is the values themselves. The likelihood has no
closed-form maximum: the fit is a minorize-maximize (MM) step. ``log cosh(sqrt v)`` is concave in
``v >= 0``, so its tangent at the current ``v0`` bounds it above (Jaakkola & Jordan, "Bayesian parameter
estimation via variational methods", Statist. Comput. 10 (2000); the sharp quadratic bound of de Leeuw
& Lange, "Sharp quadratic majorization in one dimension", Comput. Statist. Data Anal. 53 (2009), which
improves on Böhning & Lindsay's fixed curvature 1/4, Ann. Inst. Statist. Math. 40 (1988)). With
``v = (x - mu)^2 / (4 s^2)`` this gives, at the current model ``(c, s_c)`` and for every ``(mu, s)``,

    ``log L(mu, s) >= const - Σw log s - Σw lam (x - mu)^2 / (4 s^2)``,
    ``lam = tanh(t) / t``, ``t = (x - c) / (2 s_c)`` (1 at ``t = 0``),

with equality at ``(c, s_c)``: a weighted Gaussian log-likelihood, maximized jointly in closed form by
``mu = Σw lam x / Σw lam`` and ``s^2 = Σw lam (x - mu)^2 / (2 Σw)``. So the likelihood never decreases
and the fixed points are the likelihood equations' (``s = Σw (x - mu) tanh((x - mu) / (2 s)) / Σw``).
The statistics ``Σw``, ``Σw lam``, ``Σw lam (x - k)``, ``Σw lam (x - k)^2`` about a shift ``k`` (the current
``mu``) merge by addition and re-express exactly about any other shift. ``lam (x - c) = 2 s_c tanh(t)``
and ``lam (x - c)^2 = 2 s_c |x - c| tanh|t|`` are summed in those forms (no overflow, no division by a
small ``t``). The first pass (no current model) takes ``lam = 1``: the mean, and ``s = sd sqrt 3 / pi``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._scalar_common import ScalarEncoder, ScalarFamily, finite, floor, positive, prior_tuple
from mixle_spark.stats.base import Accumulator, Estimator, register_distribution, register_estimator
from mixle_spark.stats.gaussian import shift_moments

__all__ = ["LogisticAccumulator", "LogisticDistribution", "LogisticEncoder", "LogisticEstimator"]

DEFAULT_MIN_S = 1e-12
_SMALL_T = 1e-4  # below this tanh(t) / t = 1 - t^2 / 3 to double precision (the next term is 2 t^4 / 15)


class LogisticEncoder(ScalarEncoder):
    """Reads finite real numbers into a float64 array of shape (n,)."""

    estimator_name = "LogisticEstimator"
    expectation = "a finite number"


@register_distribution("logistic")
class LogisticDistribution(ScalarFamily):
    """Logistic distribution with location ``mu`` (mean and median) and scale ``s``.

    Examples
    --------
    >>> LogisticDistribution(0.0, 1.0).log_density(0.0) == -math.log(4.0)
    True
    """

    parameters = (finite("mu"), positive("s"))
    encoder_class = LogisticEncoder
    mu: float
    s: float

    def __init__(self, mu: float, s: float) -> None:
        self._set_parameters(mu, s)
        self._log_s = math.log(self.s)

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        return rng.logistic(self.mu, self.s, size=size)

    def log_density(self, x: float) -> float:
        x = float(x)
        if not math.isfinite(x):
            return -math.inf
        return float(self.seq_log_density(np.array([x]))[0])

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        a = np.abs(enc - self.mu) / self.s  # symmetric: -|z| - 2 log(1 + e^-|z|) never overflows
        return -a - self._log_s - 2.0 * np.log1p(np.exp(-a))  # type: ignore[no-any-return]

    def moments(self) -> tuple[float, float]:
        return self.mu, (math.pi * self.s) ** 2 / 3.0

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x, dtype=np.float64) - self.mu) / self.s
        return -np.logaddexp(0.0, -z)  # type: ignore[no-any-return]

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x, dtype=np.float64) - self.mu) / self.s
        return -np.logaddexp(0.0, z)  # type: ignore[no-any-return]

    def quantile(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        with np.errstate(divide="ignore"):
            return self.mu + self.s * (np.log(p) - np.log1p(-p))  # type: ignore[no-any-return]


class LogisticAccumulator(Accumulator):
    """The MM statistics (see the module docstring); value ``(sw, su, s1, s2, shift, sw_model)``:
    ``Σw``, ``Σw lam``, ``Σw lam (x - shift)``, ``Σw lam (x - shift)^2``, and the weight of the rows
    updated with a current model (0 on a first pass)."""

    encoder_class = LogisticEncoder

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sw = self.su = self.s1 = self.s2 = self.shift = self.sw_model = 0.0

    def seq_update(self, enc: np.ndarray, weights: np.ndarray, estimate: Any) -> None:
        x = np.asarray(enc, dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)
        total = float(w.sum())
        if estimate is None:
            part = (total, total, float(np.dot(w, x - self.shift)), float(np.dot(w, (x - self.shift) ** 2)))
            self.combine((*part, self.shift, 0.0))
            return
        if not isinstance(estimate, LogisticDistribution):
            raise SpecError(
                "LogisticAccumulator.seq_update needs the current LogisticDistribution (or None on the "
                f"first pass), got {estimate!r}"
            )
        c, two_s = estimate.mu, 2.0 * estimate.s
        d = x - c
        t = np.abs(d) / two_s
        tanh_t = np.tanh(t)
        lam = np.where(t < _SMALL_T, 1.0 - t * t / 3.0, tanh_t / np.where(t < _SMALL_T, 1.0, t))
        su = float(np.dot(w, lam))
        s1 = two_s * float(np.dot(w, np.sign(d) * tanh_t))
        s2 = two_s * float(np.dot(w, np.abs(d) * tanh_t))
        self.combine((total, su, s1, s2, c, total))

    def combine(self, value: Any) -> LogisticAccumulator:
        sw, su, s1, s2, shift, sw_model = (float(v) for v in value)
        if self.sw == 0.0 and self.su == 0.0:
            self.shift = shift  # the current model's mu: every partition agrees
        s1, s2 = shift_moments(su, s1, s2, shift, self.shift)
        self.sw += sw
        self.su += su
        self.s1 += s1
        self.s2 += s2
        self.sw_model += sw_model
        return self

    def value(self) -> tuple[float, float, float, float, float, float]:
        return (self.sw, self.su, self.s1, self.s2, self.shift, self.sw_model)

    def _scale(self, factor: float) -> None:
        self.sw *= factor
        self.su *= factor
        self.s1 *= factor
        self.s2 *= factor
        self.sw_model *= factor

    def from_value(self, value: Any) -> LogisticAccumulator:
        self.sw, self.su, self.s1, self.s2, self.shift, self.sw_model = (float(v) for v in value)
        return self


@register_estimator("logistic")
@dataclass(eq=False, repr=False)
class LogisticEstimator(Estimator):
    """Maximum-likelihood logistic fit by the MM step of the module docstring (monotone; iterated by EM
    to the maximum, ``scipy.stats.logistic.fit``'s).

    Parameters
    ----------
    pseudo_count : float, optional
        With ``suff_stat = (mu0, s0)``: ``pc`` pseudo-rows adding ``pc`` to Σw and Σw lam, ``pc mu0`` to
        Σw lam x and ``pc (mu0^2 + 2 s0^2)`` to Σw lam x^2 (a fixed log-prior ``-pc log s - pc ((mu -
        mu0)^2 + 2 s0^2) / (4 s^2)`` beside the bound, so each step still never lowers the posterior; as
        ``pc`` grows the estimate tends to ``(mu0, s0)``).
    suff_stat : (float, float), optional
        Prior location and scale (default (0, 1) when only ``pseudo_count`` is given).
    min_s : float
        Scale floor (default 1e-12): rows on one value keep a finite density.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or mu = 0, s = 1).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[float, float] | None = prior_tuple(
        lambda mu0, s0: s0 > 0, "a pair (mu0, s0) of finite numbers with s0 > 0"
    )
    min_s: float = floor(DEFAULT_MIN_S)
    name: str | None = None
    keys: str | None = None

    accumulator_class = LogisticAccumulator
    encoder_class = LogisticEncoder

    def estimate(self, nobs: float | None, value: Any) -> LogisticDistribution:
        sw, su, s1, s2, shift, sw_model = (float(v) for v in value)
        mu0, s0 = (0.0, 1.0) if self.suff_stat is None else self.suff_stat
        if not sw > 0:
            return LogisticDistribution(mu0, s0)
        pc = self.pseudo_count or 0.0
        if pc > 0:
            d0 = mu0 - shift
            sw, su, s1, s2 = sw + pc, su + pc, s1 + pc * d0, s2 + pc * (d0 * d0 + 2.0 * s0 * s0)
        mean_c = s1 / su
        scatter = max(s2 - s1 * mean_c, 0.0)
        if sw_model > 0:
            s = math.sqrt(scatter / (2.0 * sw))
        else:  # first pass: the moments' scale, variance = s^2 pi^2 / 3
            s = math.sqrt(3.0 * scatter / sw) / math.pi
        mu = shift + mean_c
        if not (math.isfinite(mu) and math.isfinite(s)):
            return LogisticDistribution(mu0, s0)
        return LogisticDistribution(mu, max(s, self.min_s))
