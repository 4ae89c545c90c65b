"""Covariance forms of a Gaussian mixture (``MixtureEstimator(covariance=...)``): scikit-learn's four
from the same start to 1e-9, each M-step the maximum of its constrained likelihood, free-parameter
counts (scikit-learn's and mclust's), JSON, refits and one-line errors."""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np
import pytest

from mixle_spark.errors import ModelFormatError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.spec import estimator_from_spec, model_from_dict, model_to_dict
from mixle_spark.stats import (
    DiagonalGaussianDistribution,
    DiagonalGaussianEstimator,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    MultivariateGaussianDistribution,
    MultivariateGaussianEstimator,
)
from mixle_spark.stats._covariance import (
    DIAGONAL_FORMS,
    FORMS,
    constrained_covariances,
    covariance_form,
    covariance_parameters,
)
from mixle_spark.summary import count_free_parameters

SKLEARN_FORMS = ("full", "diag", "tied", "spherical")


def blobs(seed: int = 1, d: int = 3, k: int = 3, per: int = 200) -> np.ndarray:
    """``k`` correlated, shifted Gaussian clouds of ``per`` rows in ``d`` dimensions."""
    rng = np.random.default_rng(seed)
    return np.concatenate(
        [rng.normal(size=(per, d)) @ rng.normal(size=(d, d)) + 4 * rng.normal(size=d) for _ in range(k)]
    )


def sklearn_start(x: np.ndarray, form: str, k: int = 3, seed: int = 2) -> tuple[Any, MixtureDistribution]:
    """A starting point in scikit-learn's terms (weights, means, precisions shaped for ``form``) and
    the same model as a mixture: k rows as means, the data's covariance (its diagonal, or its mean
    variance, as the form has it) for every component, equal weights."""
    rng = np.random.default_rng(seed)
    d = x.shape[1]
    means = x[rng.choice(len(x), k, replace=False)]
    cov = np.cov(x.T)
    weights = np.full(k, 1.0 / k)
    if form == "full":
        precisions: Any = np.array([np.linalg.inv(cov)] * k)
        covs = [cov] * k
    elif form == "tied":
        precisions, covs = np.linalg.inv(cov), [cov] * k
    elif form == "diag":
        precisions, covs = np.array([1.0 / np.diag(cov)] * k), [np.diag(np.diag(cov))] * k
    else:
        v = float(np.diag(cov).mean())
        precisions, covs = np.full(k, 1.0 / v), [v * np.eye(d)] * k
    start = MixtureDistribution(
        [MultivariateGaussianDistribution(m, c) for m, c in zip(means, covs, strict=True)], weights
    )
    return (weights, means, precisions), start


def sklearn_fit(x: np.ndarray, form: str, k: int = 3, its: int = 20) -> Any:
    """scikit-learn's GaussianMixture of ``form`` after ``its`` EM iterations from :func:`sklearn_start`
    (no covariance regularization: ours adds a floor of 1e-300)."""
    mixture = pytest.importorskip("sklearn.mixture")
    (weights, means, precisions), _start = sklearn_start(x, form, k)
    gm = mixture.GaussianMixture(
        k, covariance_type=form, max_iter=its, tol=0.0, reg_covar=0.0,
        weights_init=weights, means_init=means, precisions_init=precisions,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tol=0 never converges
        gm.fit(x)
    return gm


def unfloored(form: str, k: int = 3, component: Any = None) -> MixtureEstimator:
    """A ``form`` mixture of ``k`` full-covariance components whose floor adds (almost) nothing."""
    comp = component or MultivariateGaussianEstimator(min_covar=1e-300, ridge=0.0)
    return MixtureEstimator([comp] * k, covariance=form)


def assert_same_as_sklearn(model: Any, gm: Any, form: str, rtol: float = 1e-9) -> None:
    """``model`` (a mixture of ``form``) is scikit-learn's fitted ``gm`` to ``rtol``."""
    k, d = gm.means_.shape
    covs = {
        "full": lambda: gm.covariances_,
        "tied": lambda: [gm.covariances_] * k,
        "diag": lambda: [np.diag(c) for c in gm.covariances_],
        "spherical": lambda: [c * np.eye(d) for c in gm.covariances_],
    }[form]()
    np.testing.assert_allclose(model.w, gm.weights_, rtol=rtol)
    for comp, mean, cov in zip(model.components, gm.means_, covs, strict=True):
        covar = comp.covar if comp.covar.ndim == 2 else np.diag(comp.covar)
        np.testing.assert_allclose(comp.mu, mean, rtol=rtol, atol=rtol * np.abs(gm.means_).max())
        np.testing.assert_allclose(covar, cov, rtol=rtol, atol=rtol * np.abs(cov).max())


@pytest.mark.parametrize("form", SKLEARN_FORMS)
def test_each_sklearn_form_equals_sklearn_after_20_iterations(form: str) -> None:
    x = blobs()
    gm = sklearn_fit(x, form)
    _, start = sklearn_start(x, form)
    got = optimize(x, unfloored(form), max_its=20, delta=None, prev_estimate=start)
    assert got.fit_result.n_iter == 20 == gm.n_iter_
    assert got.covariance == covariance_form(form)
    assert_same_as_sklearn(got, gm, form)
    # the same log-likelihood, and scikit-learn's free-parameter count
    assert got.seq_log_density(got.encoder().encode(list(x))).mean() == pytest.approx(gm.score(x), rel=1e-9)
    assert count_free_parameters(got) == gm._n_parameters()
    assert got.bic(list(x)) == pytest.approx(gm.bic(x), rel=1e-9)


@pytest.mark.parametrize("form", ["diag", "spherical"])
def test_diagonal_components_fit_the_diagonal_forms_as_full_ones_do(form: str) -> None:
    x = blobs(seed=4)
    _, start = sklearn_start(x, form)
    diag_start = MixtureDistribution(
        [DiagonalGaussianDistribution(c.mu, np.diag(c.covar)) for c in start.components], start.w
    )
    comp = DiagonalGaussianEstimator(min_covar=1e-300, ridge=0.0)
    got = optimize(x, unfloored(form, component=comp), max_its=20, delta=None, prev_estimate=diag_start)
    assert all(isinstance(c, DiagonalGaussianDistribution) for c in got.components)
    assert_same_as_sklearn(got, sklearn_fit(x, form), form)


# -- each M-step maximizes its constrained expected log-likelihood ------------------------------------
def _q(counts: np.ndarray, scatters: list[np.ndarray], covs: list[np.ndarray]) -> float:
    """``-1/2 Σ_k [n_k log|Σ_k| + tr(W_k Σ_k^-1)]``: what the covariance M-step maximizes."""
    return -0.5 * sum(
        n * np.linalg.slogdet(c)[1] + np.trace(np.linalg.solve(c, w))
        for n, w, c in zip(counts, scatters, covs, strict=True)
    )


def _scatters(seed: int, k: int = 3, d: int = 4) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    counts = rng.uniform(20.0, 200.0, k)
    scatters = []
    for n in counts:
        a = rng.normal(size=(d, d)) * rng.uniform(0.2, 3.0, d)
        scatters.append(n * (a @ a.T + 0.1 * np.eye(d)))
    return counts, scatters


def _family(form: str, theta: np.ndarray, k: int, d: int) -> list[np.ndarray]:
    """The covariances of ``form`` from free values ``theta`` (logs of volumes and shapes)."""
    if form == "VEI":  # log λ_k, then log B with Σ log B = 0
        shape = np.exp(np.append(theta[k:], -theta[k:].sum()))
        return [math.exp(v) * np.diag(shape) for v in theta[:k]]
    if form == "EVI":  # log λ, then each log B_k with Σ log B_k = 0
        rows = theta[1:].reshape(k, d - 1)
        return [math.exp(theta[0]) * np.diag(np.exp(np.append(r, -r.sum()))) for r in rows]
    if form == "EEI":
        return [np.diag(np.exp(theta))] * k
    if form == "VII":
        return [math.exp(v) * np.eye(d) for v in theta]
    if form == "EII":
        return [math.exp(theta[0]) * np.eye(d)] * k
    if form == "VVI":
        return [np.diag(np.exp(r)) for r in theta.reshape(k, d)]
    raise AssertionError(form)


@pytest.mark.parametrize("form", sorted(DIAGONAL_FORMS))
def test_each_diagonal_form_m_step_is_the_maximum_a_numerical_search_finds(form: str) -> None:
    scipy_optimize = pytest.importorskip("scipy.optimize")
    counts, scatters = _scatters(seed=7)
    k, d = len(counts), scatters[0].shape[0]
    got = constrained_covariances(form, counts, scatters, full=True)
    best = _q(counts, scatters, got)  # type: ignore[arg-type]
    size = {"VEI": k + d - 1, "EVI": 1 + k * (d - 1), "EEI": d, "VII": k, "EII": 1, "VVI": k * d}[form]
    assert size == covariance_parameters(form, k, d)  # the search's free values are the form's count
    found = scipy_optimize.minimize(
        lambda t: -_q(counts, scatters, _family(form, t, k, d)), np.zeros(size), method="BFGS",
        options={"gtol": 1e-10, "maxiter": 10_000},
    )  # fmt: skip
    assert -found.fun <= best + 1e-7 * abs(best)  # nothing in the family is better ...
    assert -found.fun == pytest.approx(best, rel=1e-9)  # ... and the search reaches ours
    for ours, searched in zip(got, _family(form, found.x, k, d), strict=True):
        np.testing.assert_allclose(ours, searched, rtol=1e-4)  # type: ignore[arg-type]


@pytest.mark.parametrize("form", ["EEE", "VVV"])
def test_the_full_forms_m_steps_beat_every_nearby_covariance(form: str) -> None:
    counts, scatters = _scatters(seed=8)
    got = constrained_covariances(form, counts, scatters, full=True)
    best = _q(counts, scatters, got)  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    for _ in range(50):
        step = rng.normal(size=got[0].shape) * 1e-3  # type: ignore[union-attr]
        step = step + step.T
        tied = form == "EEE"
        moved = [c + (step if tied else step * (j == 0)) for j, c in enumerate(got)]  # type: ignore[operator]
        assert _q(counts, scatters, moved) < best
    if form == "EEE":
        assert all(np.array_equal(c, got[0]) for c in got)  # type: ignore[arg-type]


def test_diagonal_scatters_give_the_same_covariances_as_the_full_ones() -> None:
    counts, scatters = _scatters(seed=9)
    for form in sorted(DIAGONAL_FORMS):
        full = constrained_covariances(form, counts, scatters, full=True)
        diag = constrained_covariances(form, counts, [np.diag(w).copy() for w in scatters], full=False)
        for a, b in zip(full, diag, strict=True):
            np.testing.assert_allclose(np.diag(a), b, rtol=1e-12)  # type: ignore[arg-type]
            np.testing.assert_array_equal(a, np.diag(np.diag(a)))  # type: ignore[arg-type]


def test_a_component_without_weight_shares_the_tied_covariance_and_falls_back_otherwise() -> None:
    counts, scatters = _scatters(seed=10)
    counts = np.append(counts, 0.0)
    scatters = [*scatters, None]
    tied = constrained_covariances("EEE", counts, scatters, full=True)
    np.testing.assert_array_equal(tied[-1], tied[0])  # type: ignore[arg-type]
    assert constrained_covariances("VVV", counts, scatters, full=True)[-1] is None
    assert constrained_covariances("VEI", counts, scatters, full=True)[-1] is None


# -- free parameters ----------------------------------------------------------------------------------
def test_free_parameter_counts_are_mclusts() -> None:
    # mclust's nVarParams for d = 4, G = 3 (volume, shape, orientation: E counts once, V per component)
    want = {"EII": 1, "VII": 3, "EEI": 4, "VEI": 6, "EVI": 10, "VVI": 12, "EEE": 10, "VVV": 30}
    assert {f: covariance_parameters(f, 3, 4) for f in FORMS} == want
    x = blobs(d=4, seed=3)
    for form in FORMS:
        model = optimize(x, unfloored(form), max_its=3, delta=None, seed=1)
        assert count_free_parameters(model) == 2 + 3 * 4 + want[form], form
        assert model.n_free_parameters() == 2 + 3 * 4 + want[form], form


# -- names, JSON, refits, errors ----------------------------------------------------------------------
def test_forms_are_named_by_mclust_or_sklearn_in_any_case() -> None:
    assert covariance_form("tied") == "EEE" and covariance_form("eee") == "EEE"
    assert covariance_form(" Full ") == "VVV" and covariance_form("tied_diag") == "EEI"
    assert covariance_form("spherical") == "VII" and covariance_form("tied_spherical") == "EII"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"type": "mixture", "k": 2, "component": "multivariate_gaussian", "covariance": "banded"},
            "MixtureEstimator: covariance must be one of EII, VII, EEI, VEI, EVI, VVI, EEE, VVV or full, "
            "tied, diag, spherical, tied_diag, tied_spherical, got 'banded'",
        ),
        (
            {"type": "mixture", "k": 2, "component": "multivariate_gaussian", "covariance": 3},
            "MixtureEstimator: covariance must be one of EII",
        ),
        (
            {"type": "mixture", "k": 2, "component": "diagonal_gaussian", "covariance": "tied"},
            "MixtureEstimator: covariance='EEE' needs full covariances, but component 0 is "
            "DiagonalGaussianEstimator (variances only); use multivariate_gaussian components, or a "
            "diagonal form (EEI, EII, EVI, VEI, VII, VVI)",
        ),
        (
            {"type": "mixture", "k": 2, "component": "gaussian", "covariance": "VII"},
            "MixtureEstimator: covariance='VII' ties Gaussian covariances, but component 0 is "
            "GaussianEstimator; use multivariate_gaussian (or, for a diagonal form, diagonal_gaussian) "
            "components",
        ),
    ],
)
def test_bad_covariance_options_are_one_line_errors_naming_the_value(spec: Any, message: str) -> None:
    with pytest.raises(SpecError) as err:
        estimator_from_spec(spec)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_bad_covariance_in_a_model_file_names_it() -> None:
    model = MixtureDistribution([MultivariateGaussianDistribution([0.0], [[1.0]])], [1.0], covariance="tied")
    dumped = model_to_dict(model)
    assert dumped["model"]["covariance"] == "EEE"
    dumped["model"]["covariance"] = "XYZ"
    with pytest.raises(
        ModelFormatError,
        match=r"^invalid model: MixtureDistribution: covariance must be one of .* got 'XYZ'$",
    ):
        model_from_dict(dumped)


def test_a_form_model_round_trips_json_and_refits_under_its_form() -> None:
    x = blobs(seed=5)
    spec = {"type": "mixture", "k": 3, "component": "multivariate_gaussian", "covariance": "tied"}
    est = estimator_from_spec(spec)
    assert est.covariance == "EEE" and estimator_from_spec(est.to_dict()).covariance == "EEE"
    model = optimize(x, est, max_its=10, delta=None, seed=3)
    back = model_from_dict(json.loads(json.dumps(model_to_dict(model))))
    assert back.covariance == "EEE" and model_to_dict(back) == model_to_dict(model)
    assert back.estimator().covariance == "EEE"
    refit = optimize(x, back.estimator(), max_its=5, delta=None, prev_estimate=back)
    assert all(np.array_equal(c.covar, refit.components[0].covar) for c in refit.components)
    # models without a form load as before and write no covariance key
    plain = optimize(
        x, MixtureEstimator([MultivariateGaussianEstimator()] * 2), max_its=2, delta=None, seed=1
    )
    assert "covariance" not in model_to_dict(plain)["model"] and plain.covariance is None
    assert model_from_dict(model_to_dict(plain)).covariance is None


def test_unconstrained_estimates_are_unchanged_by_the_moments_split() -> None:
    # VectorGaussianEstimator.estimate now goes through moments(): the same numbers, prior or not
    x = blobs(seed=6, k=1)
    for est in (
        MultivariateGaussianEstimator(),
        MultivariateGaussianEstimator(pseudo_count=3.0),
        MultivariateGaussianEstimator(pseudo_count=3.0, suff_stat=(np.ones(3), 2 * np.eye(3))),
        DiagonalGaussianEstimator(pseudo_count=2.0, suff_stat=(np.zeros(3), np.ones(3))),
    ):
        enc = est.encoder()
        scanned = est.with_scan(enc.scan(list(x)))
        acc = scanned.accumulator_factory().make()
        acc.seq_update(scanned.encoder().encode(list(x)), np.ones(len(x)), None)
        weight, mu, scatter = scanned.moments(acc.value())  # type: ignore[misc]
        got = scanned.estimate(None, acc.value())
        np.testing.assert_array_equal(got.mu, mu)
        np.testing.assert_array_equal(got.covar, scanned.floored(scatter / weight))
    with pytest.raises(SpecError):
        MixtureEstimator([GaussianEstimator()] * 2, covariance="EII")
