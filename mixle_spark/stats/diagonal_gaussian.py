"""Diagonal-covariance Gaussian: ``DiagonalGaussianDistribution(mu, covar)`` (``covar`` = the variances).

Records are 1-D float sequences of length ``d``, read as for
:mod:`~mixle_spark.stats.multivariate_gaussian`. Statistics ``(sw, Σw y, Σw y^2, centre)`` use centred
data ``y = x - centre`` and combine at a common centre exactly.

Mixture fast path: features ``[1, y, y*y]`` (``m = 2d + 1``) cached on the encoded batch.

Estimator floors (documented defaults), relative to each coordinate's own scale: variance ``i`` is at
least ``min_covar * s_i``, ``s_i`` the coordinate's variance in the data (the estimator's ``scale``,
from the scan; ``min_covar = 1e-8``); where no ``s_i`` is known (no scan, a coordinate constant in
the data), at least ``max(min_covar, ridge * mean(variances))`` (``ridge = 1e-6``), the rule of
earlier releases. Zero total weight gives the prior ``suff_stat`` or unit variances around the centre.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle_spark.stats._vector import (
    VectorBatch,
    VectorEncoder,
    parameter_vector,
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
    "DiagonalGaussianAccumulator",
    "DiagonalGaussianDistribution",
    "DiagonalGaussianEncoder",
    "DiagonalGaussianEstimator",
]

_LOG_2PI = math.log(2.0 * math.pi)
_FAMILY = "DiagonalGaussianDistribution"


@register_distribution("diagonal_gaussian")
class DiagonalGaussianDistribution(Distribution):
    """Gaussian over vectors of length ``d`` with independent coordinates: mean ``mu`` (d,),
    variances ``covar`` (d,).

    Examples
    --------
    >>> d = DiagonalGaussianDistribution([0.0, 0.0], [1.0, 1.0])
    >>> round(d.log_density([0.0, 0.0]), 6)
    -1.837877
    """

    parameters = (Parameter("mu"), Parameter("covar"))

    def __init__(self, mu: Sequence[float] | np.ndarray, covar: Sequence[float] | np.ndarray) -> None:
        mu = parameter_vector(mu, _FAMILY, "mu")
        covar = parameter_vector(covar, _FAMILY, "covar")
        check_parameter(
            len(covar) == len(mu) and bool(np.all(covar > 0)),
            _FAMILY,
            "covar",
            covar.tolist(),
            f"{len(mu)} positive variances",
        )
        self.mu = mu
        self.covar = covar
        self.dim = len(mu)
        self._inv = 1.0 / covar
        self._log_const = -0.5 * (self.dim * _LOG_2PI + float(np.log(covar).sum()))

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        """One record is a 1-D array; a batch a list of them."""
        z = rng.standard_normal((1 if size is None else size, self.dim))
        draws = self.mu + z * np.sqrt(self.covar)
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
        r = v - self.mu
        return float(self._log_const - 0.5 * ((r * r) @ self._inv))

    def seq_log_density(self, enc: VectorBatch) -> np.ndarray:
        if enc.has_missing:
            return marginal_log_density(enc, self.mu, self.covar)
        r = enc.x - self.mu
        return self._log_const - 0.5 * ((r * r) @ self._inv)

    def seq_impute(self, enc: VectorBatch) -> np.ndarray:
        """The vectors with every missing (NaN) coordinate replaced by its conditional mean given the
        row's observed coordinates (``mu_m + covar_mo covar_oo^-1 (x_o - mu_o)``), shape (n, d)."""
        return conditional_fill(enc, self.mu, self.covar)[0]

    # -- mixture fast path ----------------------------------------------------------------------
    def feature_key(self) -> Any:
        return ("diagonal_gaussian", self.dim)

    def seq_features(self, enc: VectorBatch) -> np.ndarray:
        return enc.diagonal_features()

    def feature_coefficients(self, enc: VectorBatch) -> np.ndarray:
        m = self.mu - enc.c
        const = self._log_const - 0.5 * float((m * m) @ self._inv)
        return np.concatenate(([const], m * self._inv, -0.5 * self._inv))

    def estimator(self, pseudo_count: float | None = None) -> DiagonalGaussianEstimator:
        if pseudo_count is None:
            return DiagonalGaussianEstimator(dim=self.dim)
        return DiagonalGaussianEstimator(
            pseudo_count=pseudo_count, suff_stat=(self.mu, self.covar), dim=self.dim
        )

    def encoder(self) -> DiagonalGaussianEncoder:
        return DiagonalGaussianEncoder(self.dim, self.mu)


class DiagonalGaussianEncoder(VectorEncoder):
    """Reads vectors of length ``dim`` into a :class:`~mixle_spark.stats._vector.VectorBatch`."""

    family = "DiagonalGaussianEstimator"


class DiagonalGaussianAccumulator(MomentAccumulator):
    """Σw, Σw y, Σw y^2 around a centre; value ``(sw, s1, s2, center)``."""

    diagonal = True

    encoder_class = DiagonalGaussianEncoder


@register_estimator("diagonal_gaussian")
class DiagonalGaussianEstimator(VectorGaussianEstimator):
    """Diagonal Gaussian fit; the options are :class:`VectorGaussianEstimator`'s: ``suff_stat`` is
    ``(mu0, variances0)`` (two arrays of shape (d,)) and the variance floor is ``min_covar * scale_i``
    (see the module docstring for a coordinate without a ``scale``).
    """

    distribution_class = DiagonalGaussianDistribution
    accumulator_class = DiagonalGaussianAccumulator
    encoder_class = DiagonalGaussianEncoder

    def unit(self, d: int) -> np.ndarray:
        return np.ones(d)

    def outer(self, a: np.ndarray) -> np.ndarray:
        return a**2

    def floored(self, var: np.ndarray) -> np.ndarray:
        var = np.where(np.isfinite(var), var, 1.0)
        reference = self.floor_reference(len(var))
        unscaled = max(self.min_covar, self.ridge * float(var.mean()))  # no reference known
        return np.maximum(var, np.where(np.isnan(reference), unscaled, self.min_covar * reference))
