"""What the diagonal and full-covariance Gaussian estimators share: options, scan, spec."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from mixle_spark.stats._vector import parameter_vector
from mixle_spark.stats.base import (
    AccumulatorFactory,
    Distribution,
    Encoder,
    Estimator,
    check_parameter,
    check_pseudo_count,
    check_spec_keys,
    drop_none,
)

_OPTIONS = ("pseudo_count", "suff_stat", "min_covar", "ridge", "dim", "center", "name", "keys")


class VectorGaussianEstimator(Estimator):
    """Base of DiagonalGaussianEstimator and MultivariateGaussianEstimator (see their docstrings).

    Subclasses set the classes they build and implement ``estimate``.
    """

    distribution_class: ClassVar[Any]
    factory_class: ClassVar[Any]
    encoder_class: ClassVar[Any]

    def __init__(
        self,
        pseudo_count: float | None = None,
        suff_stat: tuple[Any, Any] | None = None,
        min_covar: float = 1e-8,
        ridge: float = 1e-6,
        dim: int | None = None,
        center: Sequence[float] | np.ndarray | None = None,
        name: str | None = None,
        keys: str | None = None,
    ) -> None:
        fam = type(self).__name__
        check_pseudo_count(fam, pseudo_count)
        check_parameter(min_covar > 0, fam, "min_covar", min_covar, "positive")
        check_parameter(ridge >= 0, fam, "ridge", ridge, "non-negative")
        check_parameter(
            dim is None or (isinstance(dim, int) and dim > 0), fam, "dim", dim, "a positive integer"
        )
        self.pseudo_count = pseudo_count
        self.suff_stat: tuple[np.ndarray, np.ndarray] | None = None
        if suff_stat is not None:
            prior = self.distribution_class(suff_stat[0], suff_stat[1])
            self.suff_stat = (prior.mu, prior.covar)
            dim = prior.dim if dim is None else dim
            check_parameter(prior.dim == dim, fam, "suff_stat", suff_stat, f"of dimension {dim}")
        self.center = None if center is None else parameter_vector(center, fam, "center")
        if self.center is not None:
            dim = len(self.center) if dim is None else dim
            check_parameter(len(self.center) == dim, fam, "center", center, f"of length {dim}")
        self.dim = dim
        self.min_covar = float(min_covar)
        self.ridge = float(ridge)
        self.name = name
        self.keys = keys

    def accumulator_factory(self) -> AccumulatorFactory:
        return self.factory_class(self.dim, self.keys)  # type: ignore[no-any-return]

    def encoder(self) -> Encoder:
        return self.encoder_class(self.dim, self.center)  # type: ignore[no-any-return]

    def with_scan(self, scan: Any) -> VectorGaussianEstimator:
        """Fix the dimension and the centre (the data mean) learnt by the scan."""
        if scan is None:
            return self
        count, total = scan
        center = np.asarray(total, dtype=np.float64) / float(count)
        return type(self)(
            self.pseudo_count,
            self.suff_stat,
            self.min_covar,
            self.ridge,
            len(center),
            center,
            self.name,
            self.keys,
        )

    def fallback(self, d: int, value_center: np.ndarray, covar: np.ndarray) -> Distribution:
        """The model for zero total weight: the prior, else ``covar`` around the best centre known."""
        if self.suff_stat is not None:
            return self.distribution_class(*self.suff_stat)  # type: ignore[no-any-return]
        if len(value_center) == d:
            center = value_center
        else:
            center = self.center if self.center is not None else np.zeros(d)
        return self.distribution_class(center, covar)  # type: ignore[no-any-return]

    def to_dict(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"type": self.family}
        prior = None if self.suff_stat is None else [self.suff_stat[0].tolist(), self.suff_stat[1].tolist()]
        center = None if self.center is None else self.center.tolist()
        spec.update(
            drop_none(
                pseudo_count=self.pseudo_count,
                suff_stat=prior,
                dim=self.dim,
                center=center,
                name=self.name,
                keys=self.keys,
            )
        )
        if self.min_covar != 1e-8:
            spec["min_covar"] = self.min_covar
        if self.ridge != 1e-6:
            spec["ridge"] = self.ridge
        return spec

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> VectorGaussianEstimator:
        check_spec_keys(spec, cls.family, optional=_OPTIONS)
        return cls(**{k: v for k, v in spec.items() if k != "type"})
