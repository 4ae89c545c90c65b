"""Full-covariance Gaussian: ``MultivariateGaussianDistribution(mu, covar)``.

Records are 1-D float sequences of length ``d`` (lists or numpy arrays; in Arrow a ``list``,
``large_list`` or ``fixed_size_list`` of numbers). Densities are computed in log space from the
Cholesky factor ``L`` of ``covar`` (``log p = const - |L^-1 (x - mu)|^2 / 2``), so high dimensions do
not underflow. Statistics ``(sw, Σw y, Σw y y^T, centre)`` use centred data ``y = x - centre``
(the data mean learnt by the encoder's scan), and ``combine`` re-expresses them at a common centre
exactly.

Mixture fast path: features ``[1, y, upper triangle of y y^T]`` (``m = 1 + d + d(d+1)/2``) cached on
the encoded batch, with coefficients from the precision matrix ``P``:
``log p = const - 1/2 m^T P m + (P m)^T y - 1/2 y^T P y`` with ``m = mu - centre``.

Estimator floors (documented defaults), relative to each coordinate's own scale so that a fit does
not depend on the units of measurement: the covariance is symmetrized, a variance at or below its
floor ``min_covar * s_i`` is raised by the floor, and the result is kept (the maximum-likelihood
estimate where no floor binds, so that EM never lowers the likelihood) when its correlation matrix
has no eigenvalue below ``ridge``; otherwise ``diag(eps)`` is added,
``eps_i = max(min_covar * s_i, ridge * covar_ii)``, ``s_i`` the coordinate's variance in the data
(the estimator's ``scale``, from the scan; ``min_covar = 1e-8``, ``ridge = 1e-6``). Where no ``s_i``
is known (no scan, a coordinate constant in the data) ``eps_i = max(min_covar, ridge * trace / d)``,
the rule of earlier releases. If the Cholesky factorization still fails, ``eps`` grows tenfold up to
12 times, and a diagonal covariance is the last resort. Zero total weight gives the prior
``suff_stat`` or ``N(centre, I)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._vector import (
    VectorBatch,
    VectorEncoder,
    parameter_vector,
    triangle_indices,
)
from mixle_spark.stats._vector_estimator import VectorGaussianEstimator
from mixle_spark.stats._vector_moments import MomentAccumulator, conditional_fill, marginal_log_density
from mixle_spark.stats.base import (
    Distribution,
    Parameter,
    check_parameter,
    register_distribution,
    register_estimator,
)

__all__ = [
    "MultivariateGaussianAccumulator",
    "MultivariateGaussianDistribution",
    "MultivariateGaussianEncoder",
    "MultivariateGaussianEstimator",
]

_LOG_2PI = math.log(2.0 * math.pi)
_FAMILY = "MultivariateGaussianDistribution"


def _cholesky(covar: np.ndarray) -> np.ndarray | None:
    try:
        return np.linalg.cholesky(covar)
    except np.linalg.LinAlgError:
        return None


@register_distribution("multivariate_gaussian")
class MultivariateGaussianDistribution(Distribution):
    """Gaussian over vectors of length ``d`` with mean ``mu`` (d,) and covariance ``covar`` (d, d).

    ``covar`` must be symmetric (to 1e-10 relative) and positive definite.

    Examples
    --------
    >>> d = MultivariateGaussianDistribution([0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]])
    >>> round(d.log_density([0.0, 0.0]), 6)
    -1.837877
    """

    parameters = (Parameter("mu"), Parameter("covar"))

    def __init__(
        self, mu: Sequence[float] | np.ndarray, covar: Sequence[Sequence[float]] | np.ndarray
    ) -> None:
        mu = parameter_vector(mu, _FAMILY, "mu")
        d = len(mu)
        try:
            c = np.array(covar, dtype=np.float64)
        except (TypeError, ValueError):
            c = np.full((0, 0), np.nan)
        check_parameter(
            c.shape == (d, d) and bool(np.all(np.isfinite(c))),
            _FAMILY,
            "covar",
            covar,
            f"a finite {d}x{d} matrix",
        )
        scale = float(np.abs(c).max())
        check_parameter(bool(np.all(np.abs(c - c.T) <= 1e-10 * scale)), _FAMILY, "covar", covar, "symmetric")
        c = 0.5 * (c + c.T)
        try:
            chol = np.linalg.cholesky(c)
        except np.linalg.LinAlgError:
            raise SpecError(f"{_FAMILY}: covar must be positive definite, got {covar!r}") from None
        self.mu = mu
        self.covar = c
        self.dim = d
        self._chol = chol
        self._chol_inv = np.linalg.solve(chol, np.eye(d))
        self._precision = self._chol_inv.T @ self._chol_inv
        self._log_const = -0.5 * d * _LOG_2PI - float(np.log(np.diag(chol)).sum())

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        """``mu + L z``: one record is a 1-D array, a batch a list of them."""
        z = rng.standard_normal((1 if size is None else size, self.dim))
        draws = self.mu + z @ self._chol.T
        return draws[0] if size is None else list(draws)

    def log_density(self, x: Any) -> float:
        try:
            v = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            return -math.inf
        if v.shape != (self.dim,) or bool(np.any(np.isinf(v))):
            return -math.inf
        if np.isnan(v).any():  # missing coordinates: the density of the observed ones
            return float(marginal_log_density(VectorBatch(v[None, :], self.mu), self.mu, self.covar)[0])
        z = (v - self.mu) @ self._chol_inv.T
        return float(self._log_const - 0.5 * (z @ z))

    def seq_log_density(self, enc: VectorBatch) -> np.ndarray:
        if enc.has_missing:
            return marginal_log_density(enc, self.mu, self.covar)
        z = (enc.x - self.mu) @ self._chol_inv.T
        return self._log_const - 0.5 * np.einsum("ij,ij->i", z, z)

    def seq_impute(self, enc: VectorBatch) -> np.ndarray:
        """The vectors with every missing (NaN) coordinate replaced by its conditional mean given the
        row's observed coordinates (``mu_m + covar_mo covar_oo^-1 (x_o - mu_o)``), shape (n, d)."""
        return conditional_fill(enc, self.mu, self.covar)[0]

    # -- mixture fast path ----------------------------------------------------------------------
    def feature_key(self) -> Any:
        return ("multivariate_gaussian", self.dim)

    def seq_features(self, enc: VectorBatch) -> np.ndarray:
        return enc.full_features()

    def feature_coefficients(self, enc: VectorBatch) -> np.ndarray:
        p = self._precision
        m = self.mu - enc.c
        pm = p @ m
        quad = -p.copy()
        quad.flat[:: self.dim + 1] *= 0.5  # y_i^2 appears once, y_i y_j (i < j) stands for two terms
        iu, ju = triangle_indices(self.dim)
        return np.concatenate(([self._log_const - 0.5 * float(m @ pm)], pm, quad[iu, ju]))

    def estimator(self, pseudo_count: float | None = None) -> MultivariateGaussianEstimator:
        if pseudo_count is None:
            return MultivariateGaussianEstimator(dim=self.dim)
        return MultivariateGaussianEstimator(
            pseudo_count=pseudo_count, suff_stat=(self.mu, self.covar), dim=self.dim
        )

    def encoder(self) -> MultivariateGaussianEncoder:
        return MultivariateGaussianEncoder(self.dim, self.mu)

    def n_free_parameters(self) -> int:
        d = len(self.mu)
        return d + d * (d + 1) // 2  # the covariance is symmetric


class MultivariateGaussianEncoder(VectorEncoder):
    """Reads vectors of length ``dim`` into a :class:`~mixle_spark.stats._vector.VectorBatch`."""

    family = "MultivariateGaussianEstimator"


class MultivariateGaussianAccumulator(MomentAccumulator):
    """Σw, Σw y, Σw y y^T around a centre; value ``(sw, s1, s2, center)``."""

    diagonal = False

    encoder_class = MultivariateGaussianEncoder


@register_estimator("multivariate_gaussian")
class MultivariateGaussianEstimator(VectorGaussianEstimator):
    """Full-covariance Gaussian fit; the options are :class:`VectorGaussianEstimator`'s:
    ``suff_stat`` is ``(mu0, covar0)`` (shapes (d,) and (d, d)) and
    ``eps_i = max(min_covar * scale_i, ridge * covar_ii)`` is added to the diagonal (ten times more
    until the covariance is positive definite; see the module docstring for a coordinate without a
    ``scale``).
    """

    distribution_class = MultivariateGaussianDistribution
    accumulator_class = MultivariateGaussianAccumulator
    encoder_class = MultivariateGaussianEncoder

    def unit(self, d: int) -> np.ndarray:
        return np.eye(d)

    def outer(self, a: np.ndarray) -> np.ndarray:
        return np.outer(a, a)

    def _well_conditioned(self, covar: np.ndarray) -> bool:
        """Whether ``covar`` needs no ridge: positive definite, and its correlation matrix (the
        covariance in each coordinate's own units) has no eigenvalue below ``ridge``."""
        variances = np.diag(covar)
        if not np.all(variances > 0):
            return False
        s = np.sqrt(variances)
        lowest = float(np.linalg.eigvalsh(covar / np.outer(s, s))[0])
        return lowest > 0.0 and lowest >= self.ridge and _cholesky(covar) is not None

    def floored(self, covar: np.ndarray) -> np.ndarray:
        d = covar.shape[0]
        covar = 0.5 * (covar + covar.T)
        if not np.all(np.isfinite(covar)):
            return np.eye(d)
        variances = np.maximum(np.diag(covar), 0.0)
        reference = self.floor_reference(d)
        unscaled = max(self.min_covar, self.ridge * float(np.trace(covar)) / d)  # no reference known
        floor = np.where(np.isnan(reference), unscaled, self.min_covar * reference)
        raised = covar + np.diag(np.where(variances > floor, 0.0, floor))  # only variances on the floor
        if self._well_conditioned(raised):
            return raised  # otherwise the maximum-likelihood covariance itself: EM stays monotone
        eps = np.where(
            np.isnan(reference), unscaled, np.maximum(self.min_covar * reference, self.ridge * variances)
        )
        for _ in range(12):
            candidate = covar + np.diag(eps)
            if _cholesky(candidate) is not None:
                return candidate
            eps = eps * 10.0
        return np.diag(np.maximum(variances, eps))
