"""What MLlib's ``GaussianMixtureModel`` API asks of a fitted mixle model (:class:`MixleModel
<mixle_spark.ml.MixleModel>`'s ``gaussians``, ``predict`` and ``predictProbability``): each component's
mean and covariance, and one record from an ML Vector, a sequence, a dict or a Row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pyspark.ml.linalg import Vector

from mixle_spark.errors import DataValueError
from mixle_spark.stats import (
    DiagonalGaussianDistribution,
    GaussianDistribution,
    MultivariateGaussianDistribution,
    RecordDistribution,
)
from mixle_spark.stats.base import Distribution

__all__ = ["component_moments", "record_of"]


def component_moments(
    index: int, component: Distribution, input_cols: Sequence[str] | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, covariance)`` of component ``index``: a multivariate or diagonal Gaussian, or a record
    of Gaussian fields (a diagonal covariance in ``input_cols`` order); TypeError otherwise."""
    if isinstance(component, MultivariateGaussianDistribution):
        return np.asarray(component.mu), np.asarray(component.covar)
    if isinstance(component, DiagonalGaussianDistribution):
        return np.asarray(component.mu), np.diag(component.covar)
    if isinstance(component, RecordDistribution) and all(
        isinstance(f, GaussianDistribution) for f in component.fields.values()
    ):
        names = input_cols or list(component.fields)
        fields = [component.fields[name] for name in names]
        return np.array([f.mu for f in fields]), np.diag([f.sigma2 for f in fields])
    raise TypeError(
        f"gaussians needs Gaussian components, but component {index} is {type(component).__name__}; "
        "use model.distribution"
    )


def record_of(reads: Sequence[str] | None, value: Any, input_cols: Sequence[str] | None) -> Any:
    """One record of a model that reads the columns ``reads`` (None: one vector column) from ``value``;
    a sequence's values name the columns in ``input_cols`` order."""
    if reads is None:
        return value.toArray() if isinstance(value, Vector) else value
    if hasattr(value, "asDict"):
        return value.asDict()
    if isinstance(value, Mapping):
        return dict(value)
    values = value.toArray().tolist() if isinstance(value, Vector) else list(value)
    names = list(input_cols or reads)
    if len(values) != len(names):
        raise DataValueError(f"expected {len(names)} values for columns {names}", value=value)
    return dict(zip(names, values, strict=True))
