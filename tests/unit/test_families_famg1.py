"""The multivariate Student-t and von Mises-Fisher families (issue 54). The Student-t: its EM fit against a
likelihood maximized by scipy.optimize and against the scalar Student-t for d = 1, densities against
scipy.stats.multivariate_t, a two-component mixture's recovery, weights, priors, the monotone EM step, the
bad-input errors, JSON and the optional / sequence wrappings. The von Mises-Fisher: its fit against
scipy.stats.vonmises_fisher.fit, densities against scipy's logpdf (mpmath where scipy loses digits), ln
I_v against scipy.special.ive, the concentration of a tight cluster, a mixture (and its fast path), rows
off the sphere, weights, priors, the sampler and the wrappings. The contract suite
(tests/unit/cases_famg1.py) runs both on the backends."""

from __future__ import annotations

import itertools
import json
import math
import warnings
from typing import Any

import mpmath
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import scipy.optimize as so
import scipy.special as sc
import scipy.stats as st

from mixle_spark.cli._fixes import fix_for
from mixle_spark.errors import ConvergenceWarning, DataValueError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.profile import segment_profile
from mixle_spark.report.separation import separation
from mixle_spark.stats import (
    MixtureDistribution,
    MixtureEstimator,
    MultivariateStudentTDistribution,
    MultivariateStudentTEstimator,
    OptionalDistribution,
    OptionalEstimator,
    PoissonDistribution,
    PoissonEstimator,
    RecordEstimator,
    SequenceDistribution,
    SequenceEstimator,
    StudentTEstimator,
    VonMisesFisherDistribution,
    VonMisesFisherEstimator,
    distribution_from_dict,
    estimator_from_dict,
)
from mixle_spark.stats._bessel import bessel_ratio, log_bessel_i
from mixle_spark.stats.criteria import count_free_parameters
from mixle_spark.stats.von_mises_fisher import solve_kappa

MU = np.array([1.0, -2.0, 0.5])
SIGMA = np.array([[2.0, 0.6, -0.3], [0.6, 1.0, 0.2], [-0.3, 0.2, 0.5]])
DOF = 5.0
START = MultivariateStudentTDistribution([0.0, 0.0, 0.0], np.eye(3), 3.0)


def _draws(mu: Any, sigma: Any, dof: float, n: int, seed: int) -> np.ndarray:
    return np.asarray(
        st.multivariate_t(loc=mu, shape=sigma, df=dof).rvs(size=n, random_state=np.random.default_rng(seed))
    ).reshape(n, -1)


def _log_likelihood(model: Any, x: np.ndarray, w: np.ndarray | None = None) -> float:
    ll = model.seq_log_density(model.encoder().encode(x))
    return float(ll.sum() if w is None else w @ ll)


def _em(est: Any, x: np.ndarray, w: np.ndarray, its: int, start: Any = None) -> list[Any]:
    """The models of ``its`` EM steps from ``start`` (None: the first-pass start)."""
    enc = est.encoder().encode(x)
    model = start
    models = []
    for _ in range(its):
        acc = est.accumulator_factory().make()
        acc.seq_update(enc, w, model)
        model = est.estimate(float(w.sum()), acc.value())
        models.append(model)
    return models


def _params(model: Any) -> np.ndarray:
    return np.concatenate([model.mu, model.sigma[np.triu_indices(model.dim)], [model.dof]])


def _scipy_mle(x: np.ndarray, start: Any) -> tuple[np.ndarray, float]:
    """The likelihood maximized by scipy.optimize (BFGS over mu, the Cholesky factor with log diagonal
    and log dof, from a moment start): ``(parameters as _params orders them, log-likelihood)``."""
    d = x.shape[1]
    il = np.tril_indices(d)

    def unpack(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        chol = np.zeros((d, d))
        chol[il] = theta[d : d + len(il[0])]
        chol[np.diag_indices(d)] = np.exp(np.diag(chol))
        return theta[:d], chol @ chol.T, float(np.exp(theta[-1]))

    def loss(theta: np.ndarray) -> float:
        mu, sigma, dof = unpack(theta)
        return -float(st.multivariate_t(loc=mu, shape=sigma, df=dof).logpdf(x).sum()) / len(x)

    chol0 = np.linalg.cholesky(np.cov(x.T).reshape(d, d))
    chol0[np.diag_indices(d)] = np.log(np.diag(chol0))
    theta0 = np.concatenate([np.median(x, axis=0), chol0[il], [math.log(start)]])
    res = so.minimize(loss, theta0, method="BFGS", options={"gtol": 1e-10, "maxiter": 2000})
    mu, sigma, dof = unpack(res.x)
    return np.concatenate([mu, sigma[np.triu_indices(d)], [dof]]), -res.fun * len(x)


@pytest.mark.parametrize("seed", [54_701, 54_702])
def test_the_em_fit_is_the_maximum_likelihood_and_beats_the_true_parameters(seed: int) -> None:
    x = _draws(MU, SIGMA, DOF, 20_000, seed)
    fit = optimize(x, MultivariateStudentTEstimator(), max_its=2000, delta=1e-12, print_iter=0)
    assert fit.fit_result.converged
    truth = MultivariateStudentTDistribution(MU, SIGMA, DOF)
    assert _log_likelihood(fit, x) >= _log_likelihood(truth, x)
    best, best_ll = _scipy_mle(x, 4.0)
    # scipy's optimizer stops at a gradient tolerance: the EM fit is at least as likely, and the same
    # point to the optimizer's precision
    assert _log_likelihood(fit, x) >= best_ll - 1e-6
    np.testing.assert_allclose(_params(fit), best, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_params(fit), _params(truth), rtol=0.1, atol=0.02)


def test_in_one_dimension_it_is_the_scalar_student_t() -> None:
    x = st.t(4.0, loc=3.0, scale=2.0).rvs(size=20_000, random_state=np.random.default_rng(54_703))
    vector = optimize(x[:, None], MultivariateStudentTEstimator(), max_its=3000, delta=1e-13, print_iter=0)
    scalar = optimize(x, StudentTEstimator(), max_its=3000, delta=1e-13, print_iter=0)
    assert vector.fit_result.converged and scalar.fit_result.converged
    np.testing.assert_allclose(
        [vector.mu[0], math.sqrt(vector.sigma[0, 0]), vector.dof],
        [scalar.mu, scalar.sigma, scalar.dof],
        rtol=1e-6,
    )
    same = MultivariateStudentTDistribution([scalar.mu], [[scalar.sigma**2]], scalar.dof)
    np.testing.assert_allclose(
        same.seq_log_density(same.encoder().encode(x[:, None])),
        scalar.seq_log_density(scalar.encoder().encode(x)),
        rtol=1e-12,
    )


def _mpmath_logpdf(x: np.ndarray, mu: Any, sigma: Any, dof: float) -> np.ndarray:
    with mpmath.workdps(40):
        d = len(mu)
        s = mpmath.matrix(np.asarray(sigma).tolist())
        inv, nu = s**-1, mpmath.mpf(dof)
        const = (
            mpmath.loggamma((nu + d) / 2)
            - mpmath.loggamma(nu / 2)
            - d * mpmath.log(nu * mpmath.pi) / 2
            - mpmath.log(mpmath.det(s)) / 2
        )
        out = []
        for row in x:
            r = mpmath.matrix(
                [mpmath.mpf(float(a)) - mpmath.mpf(float(b)) for a, b in zip(row, mu, strict=True)]
            )
            delta = (r.T * inv * r)[0]
            out.append(float(const - (nu + d) / 2 * mpmath.log1p(delta / nu)))
    return np.array(out)


@pytest.mark.parametrize(
    ("mu", "sigma", "dof"),
    [
        (MU, SIGMA, DOF),
        (MU, SIGMA, 0.3),
        (MU, 1e-6 * SIGMA, 1e6),
        ([0.0], [[4.0]], 1.0),
        (np.arange(6.0), np.eye(6) + 0.5, 2.5),
    ],
)
def test_seq_log_density_is_scipys_logpdf_into_the_tails(mu: Any, sigma: Any, dof: float) -> None:
    model = MultivariateStudentTDistribution(mu, sigma, dof)
    d = model.dim
    rng = np.random.default_rng(54_704)
    directions = rng.standard_normal((400, d))
    distances = np.geomspace(1e-6, 1e6, 400)[:, None] * math.sqrt(float(np.max(np.diag(model.sigma))))
    x = model.mu + directions / np.linalg.norm(directions, axis=1, keepdims=True) * distances
    got = model.seq_log_density(model.encoder().encode(x))
    if dof < 1e5:
        expected = st.multivariate_t(loc=mu, shape=sigma, df=dof).logpdf(x)
    else:  # scipy's log Gamma difference loses ~9 digits at dof = 1e6: mpmath at 40 digits
        expected = _mpmath_logpdf(x, mu, sigma, dof)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert [model.log_density(v) for v in x[::50]] == pytest.approx(list(got[::50]), rel=1e-12)


def test_a_two_component_mixture_recovers_its_components() -> None:
    pair = (([0.0, 0.0], [[1.0, 0.3], [0.3, 0.5]], 3.0), ([8.0, -6.0], [[0.5, -0.1], [-0.1, 2.0]], 6.0))
    rng = np.random.default_rng(54_705)
    x = rng.permutation(np.vstack([_draws(*pair[0], 20_000, 54_706), _draws(*pair[1], 30_000, 54_707)]))
    est = MixtureEstimator([MultivariateStudentTEstimator(), MultivariateStudentTEstimator()])
    fit = optimize(x, est, max_its=500, delta=1e-10, seed=54_708, print_iter=0)
    comps = sorted(fit.components, key=lambda c: c.mu[0])
    for comp, (mu, sigma, dof) in zip(comps, pair, strict=True):
        np.testing.assert_allclose(comp.mu, mu, atol=0.05 * 2)
        np.testing.assert_allclose(np.diag(comp.sigma), np.diag(sigma), rtol=0.05)
        assert comp.dof == pytest.approx(dof, rel=0.05)
    assert sorted(fit.w) == pytest.approx([0.4, 0.6], abs=0.01)
    assert count_free_parameters(fit) == 1 + 2 * (2 + 3 + 1)
    profile = segment_profile(fit)
    assert profile["fields"][0]["family"] == "multivariate_student_t"
    assert separation([c.to_dict() for c in fit.components], list(fit.w)) is None


def test_the_em_step_never_lowers_the_likelihood_and_weights_count_as_repeated_rows() -> None:
    x = _draws(MU, SIGMA, 1.5, 3000, 54_709)
    w = np.random.default_rng(54_710).integers(0, 4, size=3000).astype(np.float64)
    models = _em(MultivariateStudentTEstimator(), x, w, 60)
    lls = [_log_likelihood(m, x, w) for m in models]
    assert all(b >= a - 1e-9 * abs(a) for a, b in itertools.pairwise(lls))
    assert lls[-1] - lls[1] > 10.0  # it moved
    repeated = _em(
        MultivariateStudentTEstimator(), np.repeat(x, w.astype(int), axis=0), np.ones(int(w.sum())), 60
    )
    np.testing.assert_allclose(_params(models[-1]), _params(repeated[-1]), rtol=1e-9)
    fixed = _em(MultivariateStudentTEstimator(dof=2.0), x, w, 5)
    assert all(m.dof == 2.0 for m in fixed)
    assert count_free_parameters(fixed[-1]) == 3 + 6 + 1
    assert MultivariateStudentTEstimator(dof=2.0).n_free_parameters(fixed[-1]) == 3 + 6


def test_statistics_merge_scale_and_reshift() -> None:
    x = _draws(MU, SIGMA, DOF, 500, 54_711)
    model = MultivariateStudentTDistribution(MU + 0.1, SIGMA, 4.0)
    est = MultivariateStudentTEstimator()
    enc = est.encoder().encode(x)
    whole = est.accumulator_factory().make()
    whole.seq_update(enc, np.ones(500), model)
    first, second = est.accumulator_factory().make(), est.accumulator_factory().make()
    first.seq_update(est.encoder().encode(x[:123]), np.ones(123), None)  # a first pass: another centre
    first.from_value(est.accumulator_factory().make().value())
    first.seq_update(est.encoder().encode(x[:123]), np.ones(123), model)
    second.seq_update(
        est.encoder().encode(x[123:]), np.ones(377), MultivariateStudentTDistribution(MU, SIGMA, 4.0)
    )
    merged = est.accumulator_factory().make().combine(second.value())
    assert not np.array_equal(merged.value()[4], model.mu)
    # the second half read with another location: its centre differs, combine re-expresses it exactly
    again = est.accumulator_factory().make()
    again.seq_update(est.encoder().encode(x[123:]), np.ones(377), model)
    mixed = est.accumulator_factory().make().combine(first.value()).combine(again.value())
    for a, b in zip(mixed.value(), whole.value(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-9)
    doubled = est.accumulator_factory().make()
    doubled.seq_update(enc, np.full(500, 2.0), model)
    whole.scale(2.0)
    for a, b in zip(whole.value(), doubled.value(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_bad_input_is_one_error_naming_column_row_and_value() -> None:
    frame = pd.DataFrame({"pos": [[0.0, 1.0, 2.0], [1.0, math.nan, 0.0], [1.0, 2.0, math.nan]]})
    est = RecordEstimator({"pos": MultivariateStudentTEstimator(dim=3)})
    with pytest.raises(
        DataValueError,
        match=r"^column 'pos': expected a vector of finite numbers for "
        r"MultivariateStudentTEstimator \(no missing coordinate\), got nan \(2 bad rows, "
        r"first at row 2 of 3\)$",
    ):
        est.encoder().encode(frame.to_dict("records"))
    with pytest.raises(DataValueError, match=r"got inf \(row 2 of 2\)"):
        MultivariateStudentTEstimator().encoder().encode([[0.0, 1.0], [math.inf, 0.0]])
    with pytest.raises(DataValueError, match=r"expected length 2, got length 3 \(row 2 of 2\)"):
        MultivariateStudentTEstimator(dim=2).encoder().encode([[0.0, 1.0], [1.0, 2.0, 3.0]])
    with pytest.raises(
        SpecError, match=r"sigma must be positive definite, got \[\[1.0, 2.0\], \[2.0, 1.0\]\]"
    ):
        MultivariateStudentTDistribution([0.0, 0.0], [[1.0, 2.0], [2.0, 1.0]], 3.0)
    with pytest.raises(SpecError, match=r"dof must be a positive finite number, got -1.0"):
        MultivariateStudentTDistribution([0.0], [[1.0]], -1.0)
    with pytest.raises(SpecError, match=r"init_dof must be .*, got 1000000000.0"):
        MultivariateStudentTEstimator(init_dof=1e9)


def test_json_round_trip_priors_and_the_empty_fit() -> None:
    model = MultivariateStudentTDistribution(MU, SIGMA, DOF)
    spec = json.loads(json.dumps(model.to_dict()))
    assert spec["type"] == "multivariate_student_t"
    assert distribution_from_dict(spec) == model
    est = MultivariateStudentTEstimator(pseudo_count=2.0, suff_stat=(MU, SIGMA, DOF), dof=None)
    again = estimator_from_dict(json.loads(json.dumps(est.to_dict())))
    assert again == est
    empty = est.estimate(0.0, est.accumulator_factory().make().value())
    assert empty == model
    strong = MultivariateStudentTEstimator(pseudo_count=1e12, suff_stat=(MU, SIGMA, DOF))
    x = _draws([5.0, 5.0, 5.0], np.eye(3), 2.0, 50, 54_712)
    np.testing.assert_allclose(_params(_em(strong, x, np.ones(50), 3)[-1]), _params(model), rtol=1e-6)
    assert model.estimator(pseudo_count=1.0).suff_stat[2] == DOF


def test_optional_and_sequence_wrappings_fit() -> None:
    rng = np.random.default_rng(54_713)
    x = _draws(MU, SIGMA, DOF, 4000, 54_714)
    missing = rng.random(4000) < 0.25
    records = [None if m else list(v) for v, m in zip(x, missing, strict=True)]
    with warnings.catch_warnings():  # four EM steps, not a converged fit
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = OptionalEstimator(MultivariateStudentTEstimator())
        fit = optimize(records, est, max_its=4, print_iter=0, prev_estimate=OptionalDistribution(START, 0.5))
    alone = _em(MultivariateStudentTEstimator(), x[~missing], np.ones(int((~missing).sum())), 4, START)[-1]
    np.testing.assert_allclose(_params(fit.dist), _params(alone), rtol=1e-10)
    assert fit.p == pytest.approx(0.25, abs=0.02)
    lengths = rng.integers(0, 8, size=500)
    lists = [[list(v) for v in x[i : i + n]] for i, n in zip(range(0, 4000, 8), lengths, strict=True)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = SequenceEstimator(MultivariateStudentTEstimator(), PoissonEstimator())
        start = SequenceDistribution(START, PoissonDistribution(3.0))
        fit = optimize(lists, est, max_its=4, print_iter=0, prev_estimate=start)
    flat = np.array([v for row in lists for v in row])
    alone = _em(MultivariateStudentTEstimator(), flat, np.ones(len(flat)), 4, START)[-1]
    np.testing.assert_allclose(_params(fit.dist), _params(alone), rtol=1e-10)


def test_a_mixture_of_the_two_scores_as_its_components() -> None:
    a = MultivariateStudentTDistribution([0.0, 0.0], np.eye(2), 3.0)
    b = MultivariateStudentTDistribution([4.0, 0.0], 2.0 * np.eye(2), 7.0)
    mix = MixtureDistribution([a, b], [0.3, 0.7])
    x = np.asarray(mix.sampler(54_715).sample(200))
    enc = mix.encoder().encode(list(x))
    expected = np.logaddexp(
        math.log(0.3) + a.seq_log_density(a.encoder().encode(x)),
        math.log(0.7) + b.seq_log_density(b.encoder().encode(x)),
    )
    np.testing.assert_allclose(mix.seq_log_density(enc), expected, rtol=1e-12)


# -- von Mises-Fisher ---------------------------------------------------------------------------------


def _direction(d: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(d)
    return v / np.linalg.norm(v)


def _sphere_draws(mu: np.ndarray, kappa: float, n: int, seed: int) -> np.ndarray:
    return np.asarray(st.vonmises_fisher(mu, kappa).rvs(n, random_state=np.random.default_rng(seed)))


VMF = [(3, 5.0), (2, 0.7), (10, 300.0), (40, 2e4)]


@pytest.mark.parametrize(("d", "kappa"), VMF)
@pytest.mark.parametrize("seed", [54_801, 54_802])
def test_the_von_mises_fisher_fit_is_scipys_and_beats_the_true_parameters(
    d: int, kappa: float, seed: int
) -> None:
    mu = _direction(d, seed)
    x = _sphere_draws(mu, kappa, 20_000, seed + 10)
    fit = optimize(x, VonMisesFisherEstimator(), max_its=3, print_iter=0)
    scipy_mu, scipy_kappa = st.vonmises_fisher.fit(x)
    np.testing.assert_allclose(fit.mu, scipy_mu, rtol=1e-6, atol=1e-9)
    assert fit.kappa == pytest.approx(scipy_kappa, rel=1e-6)
    assert _log_likelihood(fit, x) >= _log_likelihood(VonMisesFisherDistribution(mu, kappa), x)
    assert fit.kappa == pytest.approx(kappa, rel=0.05)


def _mpmath_sphere_logpdf(x: np.ndarray, mu: np.ndarray, kappa: float) -> np.ndarray:
    with mpmath.workdps(40):
        d = len(mu)
        k, v = mpmath.mpf(kappa), mpmath.mpf(d) / 2 - 1
        const = v * mpmath.log(k) - d * mpmath.log(2 * mpmath.pi) / 2 - mpmath.log(mpmath.besseli(v, k))
        m = [mpmath.mpf(float(b)) for b in mu]
        m_norm = mpmath.sqrt(mpmath.fsum(b * b for b in m))
        out = []
        for row in x:
            r = [mpmath.mpf(float(a)) for a in row]
            cosine = mpmath.fsum(a * b for a, b in zip(r, m, strict=True)) / (
                mpmath.sqrt(mpmath.fsum(a * a for a in r)) * m_norm
            )
            out.append(float(const + k * cosine))
    return np.array(out)


@pytest.mark.parametrize(("d", "kappa"), [*VMF, (3, 0.0), (5, 1e-8), (3, 1e7), (200, 5e5)])
def test_von_mises_fisher_seq_log_density_is_the_exact_logpdf_over_the_sphere(d: int, kappa: float) -> None:
    mu = _direction(d, 54_803)
    model = VonMisesFisherDistribution(mu, kappa)
    rng = np.random.default_rng(54_804)
    angles = np.concatenate([np.geomspace(1e-9, math.pi, 200), [0.0, math.pi]])
    tangent = rng.standard_normal((len(angles), d))
    tangent -= np.outer(tangent @ mu, mu)
    tangent /= np.linalg.norm(tangent, axis=1, keepdims=True)
    x = np.cos(angles)[:, None] * mu + np.sin(angles)[:, None] * tangent
    got = model.seq_log_density(model.encoder().encode(x))
    if kappa == 0.0:
        expected = np.full(len(x), math.lgamma(d / 2) - math.log(2.0) - d / 2 * math.log(math.pi))
    elif kappa < 1e5:
        expected = st.vonmises_fisher(mu, kappa).logpdf(x)
    else:  # scipy loses digits here: mpmath at 40 digits at the exact projections of x and mu
        expected = _mpmath_sphere_logpdf(x, mu, kappa)
    # one rounding of a coordinate of x moves kappa mu^T x by ~kappa * 1e-16: the absolute tolerance
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 + 2e-16 * kappa)
    assert [model.log_density(v) for v in x[::25]] == pytest.approx(list(got[::25]), rel=1e-12, abs=1e-12)


def test_log_bessel_i_is_scipys_ive_and_the_ratio_is_mpmaths() -> None:
    orders = np.concatenate([np.arange(0.0, 60.0, 0.5), [99.0, 250.5, 1000.0, 4999.5]])
    v, x = np.meshgrid(orders, np.geomspace(1e-6, 1e8, 120))
    got = log_bessel_i(v, x)
    with np.errstate(divide="ignore"):
        scaled = np.log(sc.ive(v, x))
    expected = scaled + x
    finite = np.isfinite(expected)
    assert finite.mean() > 0.9
    # log I_v to 1e-13 relative, or I_v itself to 5e-13 relative where log I_v is near 0
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-13, atol=5e-13)
    np.testing.assert_allclose(
        log_bessel_i(v, x, scaled=True)[finite], scaled[finite], rtol=1e-12, atol=5e-13
    )
    assert log_bessel_i(0.0, 0.0) == 0.0 and log_bessel_i(1.5, 0.0) == -math.inf
    with mpmath.workdps(40):
        for order in (0.0, 0.5, 1.0, 4.5, 29.5, 199.0):
            for arg in (1e-3, 1.0, 20.0, 29.9, 30.1, 75.0, 1e3, 1e6):
                a, complement = bessel_ratio(order, arg)
                exact = mpmath.besseli(order + 1, arg) / mpmath.besseli(order, arg)
                assert a == pytest.approx(float(exact), rel=1e-13)
                assert complement == pytest.approx(float(1 - exact), rel=1e-11)


def test_a_tight_cluster_keeps_its_concentration() -> None:
    for d, kappa in [(3, 1e8), (25, 1e6), (4, 1e-6)]:
        _, complement = bessel_ratio(d / 2 - 1, kappa)
        resultant = 1.0 - complement
        assert solve_kappa(d, resultant, complement) == pytest.approx(kappa, rel=1e-9)
    assert solve_kappa(3, 0.0, 1.0) == 0.0
    assert solve_kappa(3, 1.0, 0.0, max_kappa=1e6) == 1e6


def test_a_two_component_von_mises_fisher_mixture_recovers_its_components() -> None:
    pair = ((np.array([1.0, 0.0, 0.0]), 40.0), (np.array([0.0, 0.6, 0.8]), 8.0))
    rng = np.random.default_rng(54_805)
    x = rng.permutation(
        np.vstack([_sphere_draws(*pair[0], 20_000, 54_806), _sphere_draws(*pair[1], 30_000, 54_807)])
    )
    est = MixtureEstimator([VonMisesFisherEstimator(), VonMisesFisherEstimator()])
    fit = optimize(x, est, max_its=300, delta=1e-10, seed=54_808, print_iter=0)
    comps = sorted(fit.components, key=lambda c: -c.mu[0])
    for comp, (mu, kappa) in zip(comps, pair, strict=True):
        assert float(comp.mu @ mu) > math.cos(0.05)
        assert comp.kappa == pytest.approx(kappa, rel=0.05)
    assert sorted(fit.w) == pytest.approx([0.4, 0.6], abs=0.01)
    assert count_free_parameters(fit) == 1 + 2 * 3
    assert segment_profile(fit)["fields"][0]["family"] == "von_mises_fisher"
    assert separation([c.to_dict() for c in fit.components], list(fit.w)) is None
    model, enc = comps[0], comps[0].encoder().encode(x[:400])
    phi = model.seq_features(enc)
    np.testing.assert_allclose(phi @ model.feature_coefficients(enc), model.seq_log_density(enc), rtol=1e-12)
    w = rng.random(400)
    direct, fast = VonMisesFisherEstimator(dim=3).accumulator(), VonMisesFisherEstimator(dim=3).accumulator()
    direct.seq_update(enc, w, model)
    fast.add_feature_sums(w @ phi, enc, model)
    np.testing.assert_allclose(fast.value()[1], direct.value()[1], rtol=1e-12, atol=1e-12)


def _raised(action: Any) -> Exception:
    with pytest.raises(DataValueError) as caught:
        action()
    return caught.value


def test_a_row_off_the_sphere_is_one_error_naming_column_row_and_norm() -> None:
    frame = pd.DataFrame({"dir": [[0.0, 1.0, 0.0], [0.6, 0.8, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 2.0]]})
    est = RecordEstimator({"dir": VonMisesFisherEstimator(dim=3)})
    with pytest.raises(
        DataValueError,
        match=r"^column 'dir': expected a unit vector \(Euclidean norm within 1e-06 of 1\) for "
        r"VonMisesFisherEstimator; the row's norm is 1.4142135623730951 \(2 bad rows, first at row 3 of 4\)$",
    ):
        est.encoder().encode(frame.to_dict("records"))
    line = str(_raised(lambda: est.encoder().from_arrow(pa.Table.from_pandas(frame))))
    assert "(2 bad rows, first at row 3 of 4)" in line
    assert "; fix: divide each vector by its norm (transform(dir, v -> v / sqrt(" in fix_for(line)
    with pytest.raises(DataValueError, match=r"got nan \(row 1 of 1\)"):
        VonMisesFisherEstimator().encoder().encode([[math.nan, 1.0]])
    with pytest.raises(DataValueError, match=r"length >= 2, got length 1"):
        VonMisesFisherEstimator().encoder().encode([[1.0]])
    near = VonMisesFisherEstimator().encoder().encode([[0.0, 1.0 + 5e-7]])
    assert float(np.linalg.norm(near.x[0])) == pytest.approx(1.0, abs=1e-15)
    with pytest.raises(SpecError, match=r"mu must be a unit vector .*, got \[1.0, 1.0\]"):
        VonMisesFisherDistribution([1.0, 1.0], 2.0)
    with pytest.raises(SpecError, match=r"kappa must be a finite number >= 0, got -1.0"):
        VonMisesFisherDistribution([1.0, 0.0], -1.0)


def test_von_mises_fisher_weights_json_priors_sampler_and_wrappings() -> None:
    mu = np.array([0.0, 0.6, 0.8])
    x = _sphere_draws(mu, 6.0, 300, 54_809)
    counts = np.random.default_rng(54_810).integers(0, 4, size=300)
    weighted = _em(VonMisesFisherEstimator(), x, counts.astype(np.float64), 1)[-1]
    repeated = _em(VonMisesFisherEstimator(), np.repeat(x, counts, axis=0), np.ones(int(counts.sum())), 1)[-1]
    np.testing.assert_allclose([*weighted.mu, weighted.kappa], [*repeated.mu, repeated.kappa], rtol=1e-12)
    model = VonMisesFisherDistribution(mu, 6.0)
    assert distribution_from_dict(json.loads(json.dumps(model.to_dict()))) == model
    est = VonMisesFisherEstimator(pseudo_count=3.0, suff_stat=(mu, 6.0))
    assert estimator_from_dict(json.loads(json.dumps(est.to_dict()))) == est
    assert est.estimate(0.0, est.accumulator().value()) == model
    strong = VonMisesFisherEstimator(pseudo_count=1e12, suff_stat=(mu, 6.0))
    pulled = _em(strong, _sphere_draws(np.array([1.0, 0.0, 0.0]), 50.0, 50, 54_811), np.ones(50), 1)[-1]
    np.testing.assert_allclose([*pulled.mu, pulled.kappa], [*mu, 6.0], rtol=1e-6, atol=1e-9)
    assert count_free_parameters(model) == 3
    # our sampler draws the distribution: the mean of mu^T x is A_d(kappa), and it agrees with scipy's
    draws = np.asarray(model.sampler(54_812).sample(40_000))
    cosines = draws @ mu
    expected, _ = bessel_ratio(0.5, 6.0)
    assert float(cosines.mean()) == pytest.approx(expected, abs=4 * float(cosines.std()) / 200)
    assert st.ks_2samp(cosines, _sphere_draws(mu, 6.0, 40_000, 54_813) @ mu).pvalue > 1e-3
    rng = np.random.default_rng(54_814)
    x = _sphere_draws(mu, 6.0, 4000, 54_815)
    missing = rng.random(4000) < 0.25
    records = [None if m else list(v) for v, m in zip(x, missing, strict=True)]
    fit = optimize(records, OptionalEstimator(VonMisesFisherEstimator()), max_its=3, print_iter=0)
    alone = _em(VonMisesFisherEstimator(), x[~missing], np.ones(int((~missing).sum())), 1)[-1]
    np.testing.assert_allclose([*fit.dist.mu, fit.dist.kappa], [*alone.mu, alone.kappa], rtol=1e-12)
    lists = [
        [list(v) for v in x[i : i + n]]
        for i, n in zip(range(0, 4000, 8), rng.integers(0, 8, size=500), strict=True)
    ]
    fit = optimize(
        lists, SequenceEstimator(VonMisesFisherEstimator(), PoissonEstimator()), max_its=3, print_iter=0
    )
    flat = np.array([v for row in lists for v in row])
    alone = _em(VonMisesFisherEstimator(), flat, np.ones(len(flat)), 1)[-1]
    np.testing.assert_allclose([*fit.dist.mu, fit.dist.kappa], [*alone.mu, alone.kappa], rtol=1e-12)
