"""What the diagonal and full-covariance Gaussian estimators share: options, scan, spec, M-step."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from mixle_spark.errors import EmptyDataError
from mixle_spark.stats._vector import parameter_vector
from mixle_spark.stats._vector_moments import moments_about_mean
from mixle_spark.stats.base import (
    AccumulatorFactory,
    Distribution,
    Encoder,
    Estimator,
    check_parameter,
    option,
)


@dataclass(eq=False, repr=False)
class VectorGaussianEstimator(Estimator):
    """Maximum-likelihood (or, with ``pseudo_count``, MAP-like) Gaussian fit of vectors: the base of
    DiagonalGaussianEstimator and MultivariateGaussianEstimator, with the options they share.

    Parameters
    ----------
    pseudo_count : float, optional
        Weight of the prior ``suff_stat = (mu0, covar0)``; without ``suff_stat`` the (co)variance is
        shrunk towards the identity with this weight.
    suff_stat : (array, array), optional
        Prior mean and (co)variance (also the fallback when there is no data).
    min_covar, ridge : float
        The floor of the (co)variance (see each subclass).
    dim : int, optional
        Vector length (learnt by the scan when omitted).
    center : array of shape (d,), optional
        Centre of the statistics (the data mean, set by :meth:`with_scan`).
    scale : array of shape (d,), optional
        Each coordinate's variance in the data (set by :meth:`with_scan`): the floors are relative to
        it, so that a coordinate measured in micrometres is floored as one measured in kilometres.
    keys : str, optional
        Tie this Gaussian's parameters to every other site with the same key.

    Subclasses say the covariance form (:meth:`unit`, :meth:`outer`, :meth:`floored`).
    """

    pseudo_count: float | None = None
    suff_stat: tuple[Any, Any] | None = None
    min_covar: float = option(1e-8, lambda v: v > 0, "positive", read=float)
    ridge: float = option(1e-6, lambda v: v >= 0, "non-negative", read=float)
    dim: int | None = option(None, lambda v: isinstance(v, int) and v > 0, "a positive integer")
    center: Sequence[float] | np.ndarray | None = None
    scale: Sequence[float] | np.ndarray | None = None
    name: str | None = None
    keys: str | None = None

    distribution_class: ClassVar[Any]
    accumulator_class: ClassVar[Any]
    encoder_class: ClassVar[Any]

    def check(self) -> None:
        fam = type(self).__name__
        dim = self.dim
        if self.suff_stat is not None:
            prior = self.distribution_class(self.suff_stat[0], self.suff_stat[1])
            dim = prior.dim if dim is None else dim
            check_parameter(prior.dim == dim, fam, "suff_stat", self.suff_stat, f"of dimension {dim}")
            self.suff_stat = (prior.mu, prior.covar)
        if self.center is not None:
            center = parameter_vector(self.center, fam, "center")
            dim = len(center) if dim is None else dim
            check_parameter(len(center) == dim, fam, "center", self.center, f"of length {dim}")
            self.center = center
        if self.scale is not None:
            scale = parameter_vector(self.scale, fam, "scale")
            dim = len(scale) if dim is None else dim
            check_parameter(
                len(scale) == dim and bool(np.all(scale >= 0)),
                fam,
                "scale",
                self.scale,
                f"{dim} variances >= 0",
            )
            self.scale = scale
        self.dim = dim

    def accumulator_factory(self) -> AccumulatorFactory:
        return self.accumulator_class(self.dim, self.keys)  # type: ignore[no-any-return]

    def encoder(self) -> Encoder:
        return self.encoder_class(self.dim, self.center)  # type: ignore[no-any-return]

    def with_scan(self, scan: Any) -> VectorGaussianEstimator:
        """Fix the dimension, the centre (the data mean) and each coordinate's variance in the data
        (``scale``) learnt by the scan."""
        if scan is None:
            return self
        count, total = scan[0], scan[1]  # count: rows, or per coordinate the rows observing it
        total = np.asarray(total, dtype=np.float64)
        count = np.broadcast_to(np.asarray(count, dtype=np.float64), total.shape)
        center = np.where(count > 0, total / np.maximum(count, 1e-300), 0.0)
        scale = None
        if len(scan) > 2:
            scale = np.where(
                count > 0, np.asarray(scan[2], dtype=np.float64) / np.maximum(count, 1e-300), 0.0
            )
        return dataclasses.replace(self, dim=len(center), center=center, scale=scale)

    def floor_reference(self, d: int) -> np.ndarray:
        """What each coordinate's floor is relative to, shape (d,): its variance in the data
        (``scale``, from the scan) where positive; NaN where unknown (no scan, or a coordinate that is
        constant in the data), where the floors of earlier releases apply."""
        if self.scale is None or len(self.scale) != d:
            return np.full(d, np.nan)
        scale = np.asarray(self.scale, dtype=np.float64)
        return np.where(scale > 0, scale, np.nan)

    def unit(self, d: int) -> np.ndarray:
        """The identity of the covariance form (ones for variances, the identity matrix)."""
        raise NotImplementedError

    def outer(self, a: np.ndarray) -> np.ndarray:
        """``a a^T`` in the covariance form (``a**2`` for variances)."""
        raise NotImplementedError

    def floored(self, covar: np.ndarray) -> np.ndarray:
        """The covariance with the family's floor applied (finite, positive definite)."""
        raise NotImplementedError

    def estimate(self, nobs: float | None, value: Any) -> Distribution:
        moments = self.moments(value)
        if isinstance(moments, Distribution):
            return moments
        weight, mu, scatter = moments
        return self.distribution_class(mu, self.floored(scatter / weight))  # type: ignore[no-any-return]

    def moments(self, value: Any) -> tuple[float, np.ndarray, np.ndarray] | Distribution:
        """``(weight, mean, scatter about the mean)`` of the statistics ``value`` with the prior
        folded in (``pseudo_count`` rows at ``suff_stat``, or the identity's scatter), what the
        M-step divides; the fallback model (:meth:`fallback`) when there is no weight."""
        sw, mean_y, scatter, c = moments_about_mean(value)
        d = len(mean_y) or self.dim
        if not d:
            raise EmptyDataError(
                f"{type(self).__name__}: no data, and neither dim nor suff_stat to fall back on"
            )
        pc = self.pseudo_count or 0.0
        if sw <= 0.0 and (pc == 0.0 or self.suff_stat is None):
            return self.fallback(d, c, self.unit(d))
        if self.suff_stat is not None and pc > 0:
            mu0, covar0 = self.suff_stat
            d0 = mu0 - c
            mean_all = (sw * mean_y + pc * d0) / (sw + pc)
            scatter = scatter + sw * self.outer(mean_y - mean_all) + pc * (covar0 + self.outer(d0 - mean_all))
            return sw + pc, c + mean_all, scatter
        return sw + pc, c + mean_y, scatter + pc * self.unit(d)

    def with_covariance(self, value: Any, covar: np.ndarray | None) -> Distribution:
        """The M-step of ``value`` with the covariance ``covar`` given (a mixture's covariance form
        decided it; None: this estimator's own), floored as :meth:`estimate` floors; without weight,
        the fallback's mean with ``covar``."""
        if covar is None:
            return self.estimate(None, value)
        moments = self.moments(value)
        mu = moments.mu if isinstance(moments, Distribution) else moments[1]  # type: ignore[attr-defined]
        return self.distribution_class(mu, self.floored(covar))  # type: ignore[no-any-return]

    def fallback(self, d: int, value_center: np.ndarray, covar: np.ndarray) -> Distribution:
        """The model for zero total weight: the prior, else ``covar`` around the best centre known."""
        if self.suff_stat is not None:
            return self.distribution_class(*self.suff_stat)  # type: ignore[no-any-return]
        if len(value_center) == d:
            center = value_center
        else:
            center = np.zeros(d) if self.center is None else np.asarray(self.center)
        return self.distribution_class(center, covar)  # type: ignore[no-any-return]
