"""Multivariate Student-t: ``MultivariateStudentTDistribution(mu, sigma, dof)`` (location ``mu`` (d,),
scale matrix ``sigma`` (d, d), degrees of freedom ``dof``), scipy.stats' ``multivariate_t(loc=mu,
shape=sigma, df=dof)``.

``log p(x) = log Gamma((dof + d) / 2) - log Gamma(dof / 2) - d/2 log(pi dof) - 1/2 log|sigma|
- (dof + d) / 2 log(1 + delta / dof)`` with the squared Mahalanobis distance ``delta = |L^-1 (x - mu)|^2``
(``L`` the Cholesky factor of ``sigma``; the Gamma ratio as a rising factorial, accurate for a large
``dof``). Records are 1-D float sequences of one length ``d``, read as the vector Gaussians read them
(:mod:`~mixle_spark.stats._vector`); a missing (NaN) coordinate is refused (a whole missing vector is
OptionalEstimator's).

Estimation: EM on the scale mixture ``x | tau ~ N(mu, sigma / tau)``, ``tau ~ Gamma(dof / 2, rate dof / 2)``
(Liu & Rubin 1995, "ML estimation of the t distribution using EM and its extensions, ECM and ECME",
Statistica Sinica 5, sections 2-3), one EM step per pass. The accumulator reads the current model
(``seq_update``'s ``estimate``) for ``u = E[tau | x] = (dof + d) / (dof + delta)`` and
``E[log tau - tau | x] + 1 = [log u - u + 1] - [log h - digamma(h)]`` (``h = (dof + d) / 2``; the first
bracket from ``log1p(e) - e``, ``e = u - 1 = (d - delta) / (dof + delta)``, without cancellation), and
sums ``Σw``, ``Σw u``, ``Σw u (x - c)``, ``Σw u (x - c)(x - c)^T`` about a centre ``c`` (the current
``mu``: a function of the model, so every partition agrees; ``combine`` re-expresses sums taken about
another centre exactly) and ``Σw (E[log tau - tau | x] + 1)``. The M-step is ``mu = Σw u x / Σw u``,
``sigma = Σw u (x - mu)(x - mu)^T / Σw`` and ``dof`` solving ``log(dof / 2) - digamma(dof / 2) =
-mean(E[log tau - tau | x] + 1)`` (the gamma-shape equation, :func:`~mixle_spark.stats.gamma.solve_shape`,
to 1e-12 relative within ``[min_dof, max_dof]``). Given ``u`` the complete-data log-likelihood
separates into a (mu, sigma) part and a dof part, each maximized exactly, so this is an exact EM step:
the log-likelihood never decreases (Dempster, Laird & Rubin 1977). Liu & Rubin's ECME maximizes the
observed likelihood over ``dof`` instead; it would need the data again for every trial ``dof``.

First pass (no current model): ``u = 1``, Gaussian moments; the starting model has ``dof = init_dof``
(default 4, or the fixed ``dof``) and ``sigma = covariance (dof - 2) / dof`` when ``dof > 2``, so its
covariance is the data's. Floors: a scale matrix that is not positive definite, or whose variance
``i`` is at or below ``min_covar * s_i`` (``s_i`` the coordinate's variance in the data, from the
scan), gets ``diag(eps)`` added, ``eps_i = max(min_covar * s_i, ridge * sigma_ii)``, tenfold more until
its Cholesky factor exists (``min_covar = 1e-8``, ``ridge = 1e-6``); where no floor binds the estimate
is the EM step itself. Mahalanobis distances beyond ~1e300 (values ~1e150 standard deviations out)
overflow and are not supported.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import DataValueError, SpecError
from mixle_spark.stats._scalar_common import bound, check_bounds
from mixle_spark.stats._special import log1p_minus_identity, log_minus_digamma, log_rising_factorial
from mixle_spark.stats._validate import first_true
from mixle_spark.stats._vector import VectorBatch, VectorEncoder, parameter_vector
from mixle_spark.stats._vector_moments import shift_vector_moments
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Estimator,
    Parameter,
    check_parameter,
    option,
    register_distribution,
    register_estimator,
)
from mixle_spark.stats.gamma import solve_shape

__all__ = [
    "MultivariateStudentTAccumulator",
    "MultivariateStudentTDistribution",
    "MultivariateStudentTEncoder",
    "MultivariateStudentTEstimator",
]

_FAMILY = "MultivariateStudentTDistribution"
_LOG_PI = math.log(math.pi)
DEFAULT_INIT_DOF = 4.0
DEFAULT_MIN_DOF = 1e-2
DEFAULT_MAX_DOF = 1e8


def _cholesky(matrix: np.ndarray) -> np.ndarray | None:
    try:
        return np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        return None


def _scale_matrix(value: Any, d: int) -> np.ndarray:
    """``value`` as a finite, symmetric (to 1e-10 relative), positive-definite (d, d) matrix."""
    try:
        c = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        c = np.full((0, 0), np.nan)
    ok = c.shape == (d, d) and bool(np.all(np.isfinite(c)))
    check_parameter(ok, _FAMILY, "sigma", value, f"a finite {d}x{d} matrix")
    top = float(np.abs(c).max())
    check_parameter(bool(np.all(np.abs(c - c.T) <= 1e-10 * top)), _FAMILY, "sigma", value, "symmetric")
    c = 0.5 * (c + c.T)
    if _cholesky(c) is None:
        raise SpecError(f"{_FAMILY}: sigma must be positive definite, got {value!r}")
    return c


@register_distribution("multivariate_student_t")
class MultivariateStudentTDistribution(Distribution):
    """Student-t over vectors of length ``d``: location ``mu`` (d,), scale matrix ``sigma`` (d, d)
    (symmetric positive definite), degrees of freedom ``dof > 0``.

    The covariance is ``sigma dof / (dof - 2)`` for ``dof > 2``; ``d = 1`` is
    :class:`~mixle_spark.stats.student_t.StudentTDistribution` with scale ``sqrt(sigma)``.

    Examples
    --------
    >>> t = MultivariateStudentTDistribution([0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]], 1.0)
    >>> round(t.log_density([0.0, 0.0]), 12) == round(-math.log(2 * math.pi), 12)
    True
    """

    parameters = (Parameter("mu"), Parameter("sigma"), Parameter("dof"))

    def __init__(
        self, mu: Sequence[float] | np.ndarray, sigma: Sequence[Sequence[float]] | np.ndarray, dof: float
    ) -> None:
        mu = parameter_vector(mu, _FAMILY, "mu")
        d = len(mu)
        sigma = _scale_matrix(sigma, d)
        ok = isinstance(dof, numbers.Real) and not isinstance(dof, bool) and 0 < float(dof) < math.inf
        check_parameter(ok, _FAMILY, "dof", dof, "a positive finite number")
        self.mu = mu
        self.sigma = sigma
        self.dof = float(dof)
        self.dim = d
        chol = np.linalg.cholesky(sigma)
        self._chol = chol
        self._whiten = np.linalg.solve(chol, np.eye(d)).T  # z = (x - mu) @ _whiten
        self._half = 0.5 * (self.dof + d)
        self._log_const = (
            float(log_rising_factorial(0.5 * self.dof, 0.5 * d))
            - 0.5 * d * (_LOG_PI + math.log(self.dof))
            - float(np.log(np.diag(chol)).sum())
        )

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        """``mu + L z / sqrt(g)``, ``z`` standard normal, ``g ~ chi2(dof) / dof``: one record is a
        1-D array, a batch a list of them."""
        n = 1 if size is None else size
        z = rng.standard_normal((n, self.dim))
        g = rng.chisquare(self.dof, size=n) / self.dof
        draws = self.mu + (z @ self._chol.T) / np.sqrt(g)[:, None]
        return draws[0] if size is None else list(draws)

    def mahalanobis(self, x: np.ndarray) -> np.ndarray:
        """``delta = (x - mu)^T sigma^-1 (x - mu)`` of every row of ``x`` (n, d), shape (n,)."""
        z = (x - self.mu) @ self._whiten
        return np.einsum("ij,ij->i", z, z)  # type: ignore[no-any-return]

    def log_density(self, x: Any) -> float:
        try:
            v = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            return -math.inf
        if v.shape != (self.dim,) or not bool(np.all(np.isfinite(v))):
            return -math.inf
        return float(self.seq_log_density(VectorBatch(v[None, :], self.mu))[0])

    def seq_log_density(self, enc: VectorBatch) -> np.ndarray:
        delta = self.mahalanobis(enc.x)
        return self._log_const - self._half * np.log1p(delta / self.dof)  # type: ignore[no-any-return]

    def estimator(self, pseudo_count: float | None = None) -> MultivariateStudentTEstimator:
        if pseudo_count is None:
            return MultivariateStudentTEstimator(dim=self.dim)
        return MultivariateStudentTEstimator(
            pseudo_count=pseudo_count, suff_stat=(self.mu, self.sigma, self.dof), dim=self.dim
        )

    def encoder(self) -> MultivariateStudentTEncoder:
        return MultivariateStudentTEncoder(self.dim, self.mu)

    def n_free_parameters(self) -> int:
        d = self.dim
        return d + d * (d + 1) // 2 + 1


class MultivariateStudentTEncoder(VectorEncoder):
    """Reads vectors of length ``dim`` into a :class:`~mixle_spark.stats._vector.VectorBatch`; a
    missing (NaN) coordinate is an error naming the row."""

    family = "MultivariateStudentTEstimator"

    def _batch(self, x: np.ndarray) -> VectorBatch:
        missing = np.isnan(x)
        if missing.any():
            rows = missing.any(axis=1)
            raise DataValueError(
                self._expected + " (no missing coordinate)",
                value=math.nan,
                row=first_true(rows),
                n_rows=len(x),
                count=int(rows.sum()),
            )
        return super()._batch(x)


class MultivariateStudentTAccumulator(Accumulator):
    """EM statistics of the scale mixture; value ``(sw, su, s1, s2, center, s_dof, sw_dof)``:
    ``Σw``, ``Σw u``, ``Σw u (x - center)`` (d,), ``Σw u (x - center)(x - center)^T`` (d, d), the
    centre, ``Σw (E[log tau - tau | x] + 1)`` and its weight (rows updated with a current model)."""

    encoder_class = MultivariateStudentTEncoder

    def __init__(self, dim: int | None = None, keys: Any = None) -> None:
        self.keys = keys
        self.dim = dim
        self.sw = self.su = self.s_dof = self.sw_dof = 0.0
        d = 0 if dim is None else int(dim)
        self.s1 = np.zeros(d)
        self.s2 = np.zeros((d, d))
        self.center = np.zeros(d)

    def _add(self, sums: tuple[float, float, np.ndarray, np.ndarray, np.ndarray, float, float]) -> None:
        sw, su, s1, s2, center, s_dof, sw_dof = sums
        if len(s1) == 0:
            return
        if len(self.s1) != len(s1) or (self.su == 0.0 and self.sw == 0.0):
            if len(self.s1) not in (0, len(s1)):
                raise ValueError(
                    f"{type(self).__name__}: cannot add statistics of dimension {len(s1)} to statistics "
                    f"of dimension {len(self.s1)}"
                )
            self.dim = len(s1)
            self.s1, self.s2, self.center = np.zeros(len(s1)), np.zeros((len(s1), len(s1))), center.copy()
        if not np.array_equal(center, self.center):
            s1, s2 = shift_vector_moments(su, s1, s2, center, self.center)
        self.sw += sw
        self.su += su
        self.s1 = self.s1 + s1
        self.s2 = self.s2 + s2
        self.s_dof += s_dof
        self.sw_dof += sw_dof

    def seq_update(self, enc: VectorBatch, weights: np.ndarray, estimate: Distribution | None) -> None:
        if len(enc) == 0:
            return None
        weights = np.asarray(weights, dtype=np.float64)
        total = float(weights.sum())
        if estimate is None:  # first pass: u = 1, moments about the batch's centre
            y = enc.y
            s2 = y.T @ (y * weights[:, None])
            self._add((total, total, weights @ y, 0.5 * (s2 + s2.T), enc.c, 0.0, 0.0))
            return None
        if not isinstance(estimate, MultivariateStudentTDistribution):
            raise SpecError(
                f"{type(self).__name__}.seq_update needs the current MultivariateStudentTDistribution "
                f"(or None on the first pass), got {estimate!r}"
            )
        center = estimate.mu if (self.sw == 0.0 and self.su == 0.0) or self.dim != enc.dim else self.center
        delta = estimate.mahalanobis(enc.x)
        nu, d = estimate.dof, estimate.dim
        u = (nu + d) / (nu + delta)
        e = (d - delta) / (nu + delta)  # u - 1, exact near u = 1
        log_term = np.log(u) - e
        near = np.abs(e) <= 0.5
        log_term[near] = log1p_minus_identity(e[near])
        wu = weights * u
        y = enc.x - center
        s2 = y.T @ (y * wu[:, None])
        h = 0.5 * (nu + d)
        s_dof = float(weights @ log_term) - total * float(log_minus_digamma(h))
        self._add((total, float(wu.sum()), wu @ y, 0.5 * (s2 + s2.T), np.array(center), s_dof, total))
        return None

    def combine(self, value: Any) -> MultivariateStudentTAccumulator:
        sw, su, s1, s2, center, s_dof, sw_dof = value
        arrays = (np.array(s1, dtype=np.float64), np.array(s2, dtype=np.float64))
        center = np.array(center, dtype=np.float64)
        self._add((float(sw), float(su), arrays[0], arrays[1], center, float(s_dof), float(sw_dof)))
        return self

    def value(self) -> tuple[float, float, np.ndarray, np.ndarray, np.ndarray, float, float]:
        return (self.sw, self.su, self.s1.copy(), self.s2.copy(), self.center.copy(), self.s_dof, self.sw_dof)

    def from_value(self, value: Any) -> MultivariateStudentTAccumulator:
        sw, su, s1, s2, center, s_dof, sw_dof = value
        self.sw, self.su, self.s_dof, self.sw_dof = float(sw), float(su), float(s_dof), float(sw_dof)
        self.s1 = np.array(s1, dtype=np.float64)
        self.s2 = np.array(s2, dtype=np.float64).reshape(len(self.s1), len(self.s1))
        self.center = np.array(center, dtype=np.float64)
        self.dim = len(self.s1) if len(self.s1) else self.dim
        return self

    def _scale(self, factor: float) -> None:
        # Every field but the centre (where s1 and s2 are taken) is a weighted sum over rows.
        self.sw *= factor
        self.su *= factor
        self.s1 = factor * self.s1
        self.s2 = factor * self.s2
        self.s_dof *= factor
        self.sw_dof *= factor

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.dim, self.keys)

    def make_encoder(self) -> MultivariateStudentTEncoder:
        return MultivariateStudentTEncoder(self.dim)


def _positive_dof(value: Any) -> bool:
    return isinstance(value, numbers.Real) and 0 < float(value) < math.inf


@register_estimator("multivariate_student_t")
@dataclass(eq=False, repr=False)
class MultivariateStudentTEstimator(Estimator):
    """Multivariate Student-t fit by EM on the scale mixture (one EM step per pass; see the module
    docstring for the statistics, the dof equation, the start and the floors).

    Parameters
    ----------
    dof : float, optional
        Fixed degrees of freedom; None (default) estimates them.
    init_dof : float
        Degrees of freedom of the model built from first-pass statistics (default 4).
    pseudo_count : float, optional
        Pseudo-observations distributed as ``suff_stat = (mu0, sigma0, dof0)``: they add their expected
        complete-data statistics (``pc`` to Σw and Σw u, ``pc mu0`` to Σw u x, ``pc (mu0 mu0^T + sigma0)``
        to Σw u x x^T, ``pc (digamma(dof0 / 2) - log(dof0 / 2))`` to the dof sum). Without ``suff_stat``
        they shrink the scale towards the identity (``pc I`` added to the scatter) and the dof towards
        ``init_dof`` (or the fixed ``dof``).
    suff_stat : (array, array, float), optional
        Prior ``(mu0, sigma0, dof0)``; also the model for zero total weight.
    min_covar, ridge : float
        The scale matrix's floors (module docstring).
    min_dof, max_dof : float
        Bounds of the estimated dof (defaults 0.01 and 1e8).
    dim : int, optional
        Vector length (learnt by the scan when omitted).
    center, scale : array of shape (d,), optional
        The data's mean and each coordinate's variance (set by :meth:`with_scan`; the floors are
        relative to ``scale``).
    keys : str, optional
        Tie these parameters to every other site with the same key.
    """

    dof: float | None = option(
        None, _positive_dof, "None (estimate it) or a positive finite number", read=float
    )
    init_dof: float = option(DEFAULT_INIT_DOF, _positive_dof, "a positive finite number", read=float)
    pseudo_count: float | None = None
    suff_stat: tuple[Any, Any, float] | None = None
    min_covar: float = option(1e-8, lambda v: v > 0, "positive", read=float)
    ridge: float = option(1e-6, lambda v: v >= 0, "non-negative", read=float)
    min_dof: float = bound(DEFAULT_MIN_DOF)
    max_dof: float = bound(DEFAULT_MAX_DOF)
    dim: int | None = option(None, lambda v: isinstance(v, int) and v > 0, "a positive integer")
    center: Sequence[float] | np.ndarray | None = None
    scale: Sequence[float] | np.ndarray | None = None
    name: str | None = None
    keys: str | None = None

    def check(self) -> None:
        fam = type(self).__name__
        check_bounds(self, "min_dof", "max_dof")
        check_parameter(
            self.min_dof <= self.init_dof <= self.max_dof,
            fam,
            "init_dof",
            self.init_dof,
            f"a number in [min_dof, max_dof] = [{self.min_dof}, {self.max_dof}]",
        )
        dim = self.dim
        if self.suff_stat is not None:
            try:
                mu0, sigma0, dof0 = self.suff_stat
                prior = MultivariateStudentTDistribution(mu0, sigma0, dof0)
            except (TypeError, ValueError):
                raise SpecError(
                    f"{fam}: suff_stat must be (mu0, sigma0, dof0) of a MultivariateStudentTDistribution, "
                    f"got {self.suff_stat!r}"
                ) from None
            dim = prior.dim if dim is None else dim
            check_parameter(prior.dim == dim, fam, "suff_stat", self.suff_stat, f"of dimension {dim}")
            self.suff_stat = (prior.mu, prior.sigma, prior.dof)
        for name in ("center", "scale"):
            if getattr(self, name) is not None:
                v = parameter_vector(getattr(self, name), fam, name)
                dim = len(v) if dim is None else dim
                check_parameter(len(v) == dim, fam, name, getattr(self, name), f"of length {dim}")
                setattr(self, name, v)
        self.dim = dim

    def accumulator_factory(self) -> MultivariateStudentTAccumulator:
        return MultivariateStudentTAccumulator(self.dim, self.keys)

    def encoder(self) -> MultivariateStudentTEncoder:
        return MultivariateStudentTEncoder(self.dim, self.center)

    def with_scan(self, scan: Any) -> MultivariateStudentTEstimator:
        """Fix the dimension, the centre (the data mean) and each coordinate's variance in the data."""
        if scan is None:
            return self
        count = float(np.max(scan[0]))
        total = np.asarray(scan[1], dtype=np.float64)
        center = total / count if count > 0 else np.zeros(len(total))
        scale = np.asarray(scan[2], dtype=np.float64) / count if len(scan) > 2 and count > 0 else None
        return dataclasses.replace(self, dim=len(center), center=center, scale=scale)

    def _free_parameters(self, model: Distribution, tied: set[Any]) -> int:
        return model.n_free_parameters() - (self.dof is not None)

    def _with_prior(
        self, value: Any
    ) -> tuple[float, float, np.ndarray, np.ndarray, np.ndarray, float, float]:
        sw, su, s1, s2, center, s_dof, sw_dof = value
        sw, su, s_dof, sw_dof = float(sw), float(su), float(s_dof), float(sw_dof)
        s1, s2, center = (np.array(a, dtype=np.float64) for a in (s1, s2, center))
        pc = self.pseudo_count or 0.0
        d = len(s1) or (self.dim or 0)
        if pc <= 0 or d == 0:
            return sw, su, s1, s2, center, s_dof, sw_dof
        if len(s1) == 0:
            s1, s2 = np.zeros(d), np.zeros((d, d))
            center = np.zeros(d) if self.center is None else np.asarray(self.center, dtype=np.float64)
        if self.suff_stat is None:
            s2 = s2 + pc * np.eye(d)
            sw += pc
            dof0 = self.dof or self.init_dof
        else:
            mu0, sigma0, dof0 = self.suff_stat
            m = np.asarray(mu0) - center
            sw, su, s1, s2 = sw + pc, su + pc, s1 + pc * m, s2 + pc * (np.outer(m, m) + np.asarray(sigma0))
        return sw, su, s1, s2, center, s_dof - pc * float(log_minus_digamma(0.5 * dof0)), sw_dof + pc

    def floored(self, sigma: np.ndarray) -> np.ndarray:
        """The scale matrix with the floors of the module docstring (unchanged where none binds)."""
        d = len(sigma)
        sigma = 0.5 * (sigma + sigma.T)
        variances = np.maximum(np.diag(sigma), 0.0)
        scale = None if self.scale is None else np.asarray(self.scale, dtype=np.float64)
        reference = scale if scale is not None and len(scale) == d else np.full(d, np.nan)
        reference = np.where(reference > 0, reference, np.nan)
        unscaled = max(self.min_covar, self.ridge * float(variances.sum()) / d)
        floor = np.where(np.isnan(reference), unscaled, self.min_covar * reference)
        if bool(np.all(variances > floor)) and _cholesky(sigma) is not None:
            return sigma
        eps = np.maximum(floor, self.ridge * variances)
        for _ in range(12):
            candidate = sigma + np.diag(eps)
            if _cholesky(candidate) is not None:
                return candidate
            eps = eps * 10.0
        return np.diag(np.maximum(variances, eps))

    def _fallback(self, center: np.ndarray) -> MultivariateStudentTDistribution:
        if self.suff_stat is not None:
            return MultivariateStudentTDistribution(*self.suff_stat)
        d = len(center) or (self.dim or 0)
        if d == 0:
            raise SpecError(f"{type(self).__name__}: no data, and neither dim nor suff_stat to fall back on")
        mu = center if len(center) == d else (np.zeros(d) if self.center is None else np.asarray(self.center))
        return MultivariateStudentTDistribution(mu, np.eye(d), self.dof or self.init_dof)

    def estimate(self, nobs: float | None, value: Any) -> MultivariateStudentTDistribution:
        first_pass = float(value[0]) > 0 and not float(value[6]) > 0  # data, none read with a model
        sw, su, s1, s2, center, s_dof, sw_dof = self._with_prior(value)
        if not float(value[0]) > 0 or not (
            sw > 0 and su > 0 and np.all(np.isfinite(s1)) and np.all(np.isfinite(s2))
        ):
            return self._fallback(center)
        if self.dof is not None:
            dof = self.dof
        elif first_pass or not (sw_dof > 0 and math.isfinite(s_dof)):
            dof = self.init_dof
        else:  # Jensen: E[log tau - tau] <= -1, so the right-hand side is >= 0 (0 only by rounding)
            dof = 2.0 * solve_shape(max(-s_dof / sw_dof, 0.0), 0.5 * self.min_dof, 0.5 * self.max_dof)
        mean_c = s1 / su
        sigma = (s2 - su * np.outer(mean_c, mean_c)) / sw
        if first_pass and dof > 2.0:
            sigma = sigma * ((dof - 2.0) / dof)  # the starting model has the data's covariance
        return MultivariateStudentTDistribution(center + mean_c, self.floored(sigma), dof)
