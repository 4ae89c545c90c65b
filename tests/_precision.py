"""What the cross-backend precision tests share: a k=3 full-covariance Gaussian mixture in 3
dimensions, its fixed start, the local backend's fit at a precision, and the comparison of two fits
(log-likelihood and every parameter) to a relative tolerance."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.parallel import encoded_data
from mixle_spark.spec import model_to_dict
from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator
from tests.unit.test_covariance_forms import blobs, sklearn_start

VECTORS = blobs(seed=5, d=3, k=3, per=300)
MVN = MixtureEstimator([MultivariateGaussianEstimator(dim=3)] * 3)
START = sklearn_start(VECTORS, "full")[1]
ITS = 4
TOLERANCE = {"float32": 1e-5, "float64": 1e-9}
"""The cross-backend agreement each precision promises (relative)."""


def numbers(model: Any) -> np.ndarray:
    """Every number of ``model``'s saved form, in order (weights, means, covariances, rates)."""
    found: list[float] = []

    def walk(item: Any) -> None:
        if isinstance(item, dict):
            for key in sorted(item):
                walk(item[key])
        elif isinstance(item, list | tuple):
            for value in item:
                walk(value)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            found.append(float(item))

    walk(model_to_dict(model))
    return np.asarray(found)


def assert_same_fit(got: Any, want: Any, rtol: float, got_ll: float | None = None) -> None:
    """Equal log-likelihoods and parameters to ``rtol`` (relative to each parameter, and to the
    largest for values near 0: an off-diagonal covariance); ``got_ll`` when ``got`` lost its fit
    result (a model read back from JSON)."""
    ll = got.fit_result.log_likelihood if got_ll is None else got_ll
    assert ll == pytest.approx(want.fit_result.log_likelihood, rel=rtol)
    a, b = numbers(got), numbers(want)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * 1e-3 * np.abs(b).max())


def local_fit(data: Any, est: Any, precision: str, **fit: Any) -> Any:
    """The local backend's fit of ``data`` stored at ``precision`` (``ITS`` steps, no stopping)."""
    with encoded_data(data, est, backend="local", precision=precision) as handle:
        return optimize(handle, est, max_its=ITS, delta=None, **fit)


def vector_fit(data: Any, precision: str, **options: Any) -> tuple[Any, Any]:
    """The fit of the mixture from :data:`START` over ``data`` encoded by ``encoded_data(**options)``
    at ``precision``, and the handle (closed)."""
    with encoded_data(data, MVN, precision=precision, **options) as handle:
        return optimize(handle, MVN, max_its=ITS, delta=None, prev_estimate=START), handle
