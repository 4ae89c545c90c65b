"""Fitted mixtures answer scikit-learn's questions (score_samples, predict, predict_proba, bic, aic)
with scikit-learn's numbers for the same Gaussian mixture."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mixle_spark.stats import (
    CategoricalDistribution,
    GaussianDistribution,
    MixtureDistribution,
    MultivariateGaussianDistribution,
    RecordDistribution,
)

RNG = np.random.default_rng(8)
COVS = [np.array([[1.0, 0.3], [0.3, 0.5]]), np.array([[0.4, -0.1], [-0.1, 2.0]]), np.eye(2) * 0.7]
MEANS = [np.array([0.0, 0.0]), np.array([3.0, 1.0]), np.array([-2.0, 4.0])]
W = np.array([0.5, 0.3, 0.2])
MODEL = MixtureDistribution(
    [MultivariateGaussianDistribution(m, c) for m, c in zip(MEANS, COVS, strict=True)], W
)
X = np.asarray(MODEL.sampler(2).sample(500))


def _sklearn_twin() -> object:
    mixture = pytest.importorskip("sklearn.mixture")
    gm = mixture.GaussianMixture(n_components=3, covariance_type="full")
    gm.weights_, gm.means_, gm.covariances_ = W, np.array(MEANS), np.array(COVS)
    gm.precisions_cholesky_ = np.array([np.linalg.cholesky(np.linalg.inv(c)) for c in COVS])
    return gm


def test_scores_and_posteriors_equal_scikit_learn() -> None:
    gm = _sklearn_twin()
    np.testing.assert_allclose(MODEL.score_samples(X), gm.score_samples(X), rtol=1e-12)  # type: ignore[attr-defined]
    np.testing.assert_allclose(MODEL.predict_proba(X), gm.predict_proba(X), atol=1e-12)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(MODEL.predict(X), gm.predict(X))  # type: ignore[attr-defined]
    assert MODEL.score(X) == pytest.approx(gm.score(X), rel=1e-12)  # type: ignore[attr-defined]
    # scikit-learn counts 3 x (2 + 3) + 2 = 17 free parameters, as we do
    assert MODEL.bic(X) == pytest.approx(gm.bic(X), rel=1e-12)  # type: ignore[attr-defined]
    assert MODEL.aic(X) == pytest.approx(gm.aic(X), rel=1e-12)  # type: ignore[attr-defined]


def test_records_read_pandas_columns_and_return_numpy() -> None:
    comps = [
        RecordDistribution(
            {"x": GaussianDistribution(-2.0, 1.0), "c": CategoricalDistribution({"a": 0.9, "b": 0.1})}
        ),
        RecordDistribution(
            {"x": GaussianDistribution(2.0, 1.0), "c": CategoricalDistribution({"a": 0.2, "b": 0.8})}
        ),
    ]
    model = MixtureDistribution(comps, [0.5, 0.5])
    df = pd.DataFrame({"x": [-2.5, 2.2, 0.0], "c": ["a", "b", "b"], "other": [1, 2, 3]})
    proba = model.predict_proba(df)
    assert proba.shape == (3, 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert model.predict(df).tolist() == [0, 1, 1]
    want = [model.log_density({"x": x, "c": c}) for x, c in zip(df["x"], df["c"], strict=True)]
    np.testing.assert_allclose(model.score_samples(df), want, rtol=1e-12)
