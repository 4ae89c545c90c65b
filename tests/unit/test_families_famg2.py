"""Dirichlet and Dirichlet-multinomial (issue 54): the fit against a likelihood maximized by hand with
scipy on fresh draws, densities against scipy.stats' logpdf / logpmf, a two-component mixture's
recovery, weights, priors, out-of-support errors, JSON, the optional / sequence wrappings, profiles and
separation. The contract suite (tests/unit/cases_categorical_vector.py) runs them on the backends."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import mpmath as mp
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import scipy.optimize as so
import scipy.special as sp
import scipy.stats as st

from mixle_spark.cli._fixes import fix_for
from mixle_spark.errors import DataValueError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.profile import segment_profile
from mixle_spark.report.separation import separation
from mixle_spark.stats import (
    DirichletDistribution,
    DirichletEstimator,
    DirichletMultinomialDistribution,
    DirichletMultinomialEstimator,
    MixtureDistribution,
    MixtureEstimator,
    OptionalDistribution,
    OptionalEstimator,
    PoissonDistribution,
    PoissonEstimator,
    RecordEstimator,
    SequenceDistribution,
    SequenceEstimator,
    distribution_from_dict,
    estimator_from_dict,
)
from mixle_spark.stats._simplex import inverse_digamma
from mixle_spark.stats.criteria import count_free_parameters
from mixle_spark.stats.dirichlet import fit_alpha

N = 20_000


def _bound(est: Any, records: list[Any]) -> Any:
    enc = est.encoder()
    return est.with_scan(enc.scan(records)) if enc.needs_scan else est


def _fit(est: Any, records: list[Any], weights: np.ndarray | None = None, model: Any = None) -> Any:
    """One M-step of ``est`` from statistics of ``records`` (at ``model`` for a GEM family)."""
    est = _bound(est, records)
    acc = est.accumulator_factory().make()
    w = np.ones(len(records)) if weights is None else weights
    acc.seq_update(est.encoder().encode(records), w, model)
    return est.estimate(float(w.sum()), acc.value())


def _log_likelihood(model: Any, records: list[Any]) -> float:
    return float(model.seq_log_density(model.encoder().encode(records)).sum())


# -- dirichlet ---------------------------------------------------------------------------------------


def _dirichlet_mle(x: np.ndarray) -> np.ndarray:
    """The Dirichlet MLE by hand: scipy's root finder on the score equations
    ``digamma(A) - digamma(alpha_j) + mean(log x_j) = 0`` (in log alpha), from the method of moments."""
    s = np.log(x).mean(axis=0)
    m = x.mean(axis=0)
    start = m * (m[0] * (1 - m[0]) / x[:, 0].var() - 1)

    def score(log_alpha: np.ndarray) -> np.ndarray:
        a = np.exp(log_alpha)
        return sp.digamma(a.sum()) - sp.digamma(a) + s  # type: ignore[no-any-return]

    root = so.root(score, np.log(start), method="hybr", tol=1e-15)
    assert np.max(np.abs(score(root.x))) < 1e-12
    return np.exp(root.x)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("alpha", "seed"), [([2.0, 5.0, 0.7, 1.3], 54_201), ([0.3, 0.45], 54_202), ([40.0, 12.0, 3.0], 54_203)]
)
def test_dirichlet_fit_is_the_maximum_likelihood(alpha: list[float], seed: int) -> None:
    x = st.dirichlet(alpha).rvs(size=N, random_state=np.random.default_rng(seed))
    records = list(x)
    fit = _fit(DirichletEstimator(), records)
    np.testing.assert_allclose(fit.alpha, _dirichlet_mle(x), rtol=1e-6)
    assert _log_likelihood(fit, records) >= _log_likelihood(DirichletDistribution(alpha), records)
    assert _log_likelihood(fit, records) >= st.dirichlet(_dirichlet_mle(x)).logpdf(x.T).sum() - 1e-9
    np.testing.assert_allclose(fit.alpha, alpha, rtol=0.05)
    # the package's own fit path gives the same model
    again = optimize(records, DirichletEstimator(), max_its=3, print_iter=0)
    np.testing.assert_allclose(again.alpha, fit.alpha, rtol=1e-12)


def test_fit_alpha_reaches_the_score_root_from_hard_starts() -> None:
    rng = np.random.default_rng(54_204)
    for _ in range(20):
        d = int(rng.integers(2, 7))
        alpha = np.exp(rng.uniform(-3.0, 5.0, size=d))
        s = sp.digamma(alpha) - sp.digamma(alpha.sum())  # the mean logs whose MLE is alpha exactly
        np.testing.assert_allclose(fit_alpha(s), alpha, rtol=1e-10)
    # rows that are all equal: no finite maximum, the largest alpha at its bound, the shares kept
    top = fit_alpha(np.log([0.2, 0.3, 0.5]), max_alpha=1e6)
    assert top.max() == pytest.approx(1e6) and top / top.sum() == pytest.approx([0.2, 0.3, 0.5])


def test_inverse_digamma_inverts_digamma() -> None:
    x = np.exp(np.linspace(math.log(1e-6), math.log(1e6), 400))
    np.testing.assert_allclose(inverse_digamma(sp.digamma(x)), x, rtol=1e-13)


def test_dirichlet_seq_log_density_is_scipys_logpdf() -> None:
    for alpha, seed in (
        ([2.0, 5.0, 0.7, 1.3], 54_205),
        ([0.05, 0.5, 30.0], 54_206),
        ([600.0, 900.0], 54_207),
    ):
        frozen = st.dirichlet(alpha)
        x = frozen.rvs(size=2000, random_state=np.random.default_rng(seed))
        x = x[np.all(x > 0, axis=1)]
        corners = np.full((len(alpha), len(alpha)), 1e-12)  # deep in each corner of the simplex
        np.fill_diagonal(corners, 1.0 - (len(alpha) - 1) * 1e-12)
        x = np.vstack([x, corners])
        model = DirichletDistribution(alpha)
        got = model.seq_log_density(model.encoder().encode(list(x)))
        want = frozen.logpdf(x.T)
        # 1e-12 relative to the size of the terms the density sums (it crosses zero inside the support)
        size = abs(model.seq_log_density(model.encoder().encode([x[0]]))[0]) + np.abs(
            np.log(x) @ (np.asarray(alpha) - 1)
        )
        assert np.all(np.abs(got - want) <= 1e-12 * np.maximum(np.abs(want), size))
        assert [model.log_density(v) for v in x[::100]] == pytest.approx(list(got[::100]), rel=1e-13)
    assert DirichletDistribution([1.0, 2.0]).log_density([0.5, 0.6]) == -math.inf
    assert DirichletDistribution([1.0, 2.0]).log_density([0.5, 0.5, 0.0]) == -math.inf
    assert DirichletDistribution([1.0, 2.0]).log_density("ab") == -math.inf


def test_a_two_component_dirichlet_mixture_recovers_its_components() -> None:
    rng = np.random.default_rng(54_208)
    pair = (np.array([8.0, 2.0, 1.0]), np.array([1.0, 3.0, 12.0]))
    x = np.vstack(
        [
            st.dirichlet(pair[0]).rvs(20_000, random_state=rng),
            st.dirichlet(pair[1]).rvs(30_000, random_state=rng),
        ]
    )
    x = x[rng.permutation(len(x))]
    fit = optimize(
        list(x),
        MixtureEstimator([DirichletEstimator()] * 2),
        max_its=300,
        delta=1e-10,
        seed=54_209,
        print_iter=0,
    )
    comps = sorted(fit.components, key=lambda c: -c.mean()[0])
    for comp, truth in zip(comps, pair, strict=True):
        np.testing.assert_allclose(comp.alpha, truth, rtol=0.05)
    assert sorted(fit.w) == pytest.approx([0.4, 0.6], abs=0.02)
    assert count_free_parameters(fit) == 1 + 2 * 3


def test_dirichlet_values_outside_the_simplex_are_one_error_naming_column_row_and_value() -> None:
    est = RecordEstimator({"mix": DirichletEstimator()})
    good = [0.2, 0.3, 0.5]
    expected = r"expected a vector of positive numbers summing to 1 for DirichletEstimator"
    frame = pd.DataFrame({"mix": [good, good, [0.0, 0.5, 0.5], [0.5, -0.1, 0.6]]})
    with pytest.raises(
        DataValueError, match=rf"^column 'mix': {expected}, got 0.0 \(2 bad rows, first at row 3 of 4\)$"
    ):
        est.encoder().from_arrow(pa.Table.from_pandas(frame))
    line = f"column 'mix': {expected.replace(chr(92), '')}, got 0.0 (row 3 of 4)"
    assert "every share of mix must be positive" in fix_for(line)
    frame = pd.DataFrame({"mix": [good, [0.4, 0.3, 0.2], good]})
    with pytest.raises(
        DataValueError,
        match=rf"^column 'mix': {expected} \(within 1e-06\), got a vector summing to 0.9 \(row 2 of 3\)$",
    ):
        est.encoder().from_arrow(pa.Table.from_pandas(frame))
    with pytest.raises(DataValueError, match=r"^column 'mix': .* got nan \(row 2 of 2\)$"):
        est.encoder().from_arrow(pa.table({"mix": pa.array([good, [0.5, None, 0.5]])}))
    with pytest.raises(DataValueError, match=r"expected length 3, got length 2 \(row 2 of 2\)"):
        DirichletEstimator(dim=3).encoder().encode([good, [0.5, 0.5]])
    with pytest.raises(DataValueError, match=r"got inf \(row 1 of 1\)"):
        DirichletEstimator().encoder().encode([[math.inf, 0.5]])
    near = [0.2, 0.3, 0.5 + 5e-7]  # within the tolerance: read as given, not renormalized
    enc = DirichletEstimator().encoder().encode([good, near])
    np.testing.assert_allclose(np.exp(enc[:, 1:]), [good, near], rtol=1e-15)


def test_dirichlet_weights_count_as_repeated_rows_and_priors_pull() -> None:
    x = st.dirichlet([2.0, 1.0, 4.0]).rvs(size=300, random_state=np.random.default_rng(54_210))
    counts = np.random.default_rng(54_211).integers(0, 4, size=300)
    weighted = _fit(DirichletEstimator(), list(x), counts.astype(np.float64))
    repeated = _fit(DirichletEstimator(), list(np.repeat(x, counts, axis=0)))
    np.testing.assert_allclose(weighted.alpha, repeated.alpha, rtol=1e-10)
    prior = [3.0, 3.0, 1.0]
    est = DirichletEstimator(pseudo_count=2.0, suff_stat=prior)
    again = estimator_from_dict(json.loads(json.dumps(est.to_dict())))
    assert again == est and again.to_dict() == {
        "type": "dirichlet",
        "pseudo_count": 2.0,
        "suff_stat": prior,
        "dim": 3,
    }
    assert list(est.estimate(0.0, est.accumulator_factory().make().value()).alpha) == prior
    strong = DirichletEstimator(pseudo_count=1e12, suff_stat=prior)
    np.testing.assert_allclose(_fit(strong, list(x[:50])).alpha, prior, rtol=1e-6)
    with pytest.raises(SpecError, match=r"DirichletEstimator: suff_stat must be at least 2 positive"):
        DirichletEstimator(suff_stat=[1.0, -1.0])
    with pytest.raises(
        SpecError,
        match=r"DirichletDistribution: alpha must be at least 2 positive finite numbers, got \[1.0\]",
    ):
        DirichletDistribution([1.0])


def test_dirichlet_json_optional_and_sequence() -> None:
    model = DirichletDistribution([2.0, 5.0, 0.7])
    spec = json.loads(json.dumps(model.to_dict()))
    assert spec == {"type": "dirichlet", "alpha": [2.0, 5.0, 0.7]}
    assert distribution_from_dict(spec) == model and count_free_parameters(model) == 3
    rng = np.random.default_rng(54_212)
    x = model.sampler(54_213).sample(4000)
    records = [None if m else list(v) for v, m in zip(x, rng.random(4000) < 0.25, strict=True)]
    fit = optimize(records, OptionalEstimator(DirichletEstimator()), max_its=3, print_iter=0)
    present = [r for r in records if r is not None]
    np.testing.assert_allclose(fit.dist.alpha, _fit(DirichletEstimator(), present).alpha, rtol=1e-12)
    assert fit.p == pytest.approx(0.25, abs=0.02)
    lists = [
        [list(v) for v in x[i : i + n]]
        for i, n in zip(range(0, 4000, 8), rng.integers(0, 8, size=500), strict=True)
    ]
    fit = optimize(
        lists, SequenceEstimator(DirichletEstimator(), PoissonEstimator()), max_its=3, print_iter=0
    )
    flat = [v for row in lists for v in row]
    np.testing.assert_allclose(fit.dist.alpha, _fit(DirichletEstimator(), flat).alpha, rtol=1e-12)


def test_dirichlet_profile_and_separation() -> None:
    a, b = DirichletDistribution([8.0, 2.0, 1.0]), DirichletDistribution([1.0, 3.0, 12.0])
    profile = segment_profile(MixtureDistribution([a, b], [0.4, 0.6]))
    (row,) = profile["fields"]
    assert row["family"] == "dirichlet" and row["separation"] is None
    assert [c["text"] for c in row["cells"]] == ["alpha [8, 2, 1]", "alpha [1, 3, 12]"]
    assert separation([a.to_dict(), b.to_dict()], [0.4, 0.6]) is None


# -- dirichlet_multinomial ---------------------------------------------------------------------------


def _polya_draws(alpha: Any, totals: np.ndarray, seed: int) -> np.ndarray:
    """Count vectors: shares from scipy.stats.dirichlet, then multinomial counts of each row's total."""
    rng = np.random.default_rng(seed)
    shares = st.dirichlet(alpha).rvs(size=len(totals), random_state=rng)
    return rng.multinomial(totals, shares)  # type: ignore[no-any-return]


def _polya_log_likelihood(alpha: np.ndarray, x: np.ndarray) -> float:
    return float(st.dirichlet_multinomial.logpmf(x, alpha, x.sum(axis=1)).sum())


def _polya_mle(x: np.ndarray, start: Any) -> np.ndarray:
    """The maximum likelihood by hand: scipy's root finder on the score equations
    ``Σ_i [digamma(x_ij + a_j) - digamma(a_j)] = Σ_i [digamma(n_i + A) - digamma(A)]`` (in log alpha)."""
    n = x.sum(axis=1)

    def score(log_alpha: np.ndarray) -> np.ndarray:
        a = np.exp(log_alpha)
        total = a.sum()
        per = (sp.digamma(x + a) - sp.digamma(a)).sum(axis=0) - (
            sp.digamma(n + total) - sp.digamma(total)
        ).sum()
        return a * per / len(x)  # type: ignore[no-any-return]

    root = so.root(score, np.log(start), method="hybr", tol=1e-15)
    assert np.max(np.abs(score(root.x))) < 1e-12
    return np.exp(root.x)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("alpha", "seed"), [([2.0, 0.5, 4.0, 1.5], 54_301), ([0.8, 0.3], 54_302), ([9.0, 14.0, 3.0], 54_303)]
)
def test_dirichlet_multinomial_gem_fit_reaches_the_maximum_likelihood(alpha: list[float], seed: int) -> None:
    """The package's fit (one GEM step per pass) stops when the gain reaches the rounding of the
    log-likelihood: there its parameters agree with the hand-maximized ones to 1e-5 (the likelihood is
    flat to rounding within that); further steps of the same estimator reach 1e-7."""
    totals = np.random.default_rng(seed + 50).integers(0, 60, size=N)
    x = _polya_draws(alpha, totals, seed)
    records = list(x)
    fit = optimize(records, DirichletMultinomialEstimator(), max_its=5000, delta=0.0, print_iter=0)
    hand = _polya_mle(x, alpha)
    np.testing.assert_allclose(fit.alpha, hand, rtol=1e-5)
    assert _log_likelihood(fit, records) >= _log_likelihood(DirichletMultinomialDistribution(alpha), records)
    best = _polya_log_likelihood(hand, x)
    assert _log_likelihood(fit, records) >= best - 1e-12 * abs(best)
    np.testing.assert_allclose(fit.alpha, alpha, rtol=0.1)
    history = [r.log_likelihood for r in fit.fit_result.history]
    assert all(b >= a - 1e-12 * abs(a) for a, b in itertools.pairwise(history))  # the GEM never goes down
    est = _bound(DirichletMultinomialEstimator(), records)
    enc, model = est.encoder().encode(records), fit
    for _ in range(1000):
        acc = est.accumulator_factory().make()
        acc.seq_update(enc, np.ones(N), model)
        model = est.estimate(float(N), acc.value())
    np.testing.assert_allclose(model.alpha, hand, rtol=1e-7)


@pytest.mark.parametrize("pseudo_count", [None, 50.0])
def test_dirichlet_multinomial_mm_step_never_lowers_the_objective(pseudo_count: float | None) -> None:
    """Step by step from the first pass's moment start: the log-likelihood (with a prior, the
    log-posterior of the gamma prior the estimator documents) never decreases, and the steps reach
    the maximum."""
    alpha0 = np.array([1.0, 2.0, 3.0])
    x = _polya_draws([0.7, 3.0, 1.2], np.random.default_rng(54_304).integers(1, 40, size=3000), 54_305)
    est = _bound(DirichletMultinomialEstimator(pseudo_count=pseudo_count, suff_stat=alpha0), list(x))
    enc = est.encoder().encode(list(x))

    def objective(alpha: np.ndarray) -> float:
        prior = 0.0 if pseudo_count is None else pseudo_count * float(np.sum(alpha0 * np.log(alpha) - alpha))
        return _polya_log_likelihood(alpha, x) + prior

    model = None
    values = []
    for _ in range(400):
        acc = est.accumulator_factory().make()
        acc.seq_update(enc, np.ones(len(x)), model)
        model = est.estimate(float(len(x)), acc.value())
        values.append(objective(model.alpha))
    assert all(b >= a - 1e-10 * abs(a) for a, b in itertools.pairwise(values))
    assert values[-1] > values[0] + 1.0
    if pseudo_count is None:
        np.testing.assert_allclose(model.alpha, _polya_mle(x, [0.7, 3.0, 1.2]), rtol=1e-7)


def test_dirichlet_multinomial_seq_log_density_is_scipys_logpmf() -> None:
    for alpha, seed in (([2.0, 0.5, 4.0, 1.5], 54_306), ([0.05, 0.5, 30.0], 54_307), ([0.9, 1.1], 54_308)):
        totals = np.concatenate([np.random.default_rng(seed).integers(0, 80, size=2000), [0, 1, 5000, 5000]])
        x = _polya_draws(alpha, totals, seed + 1)
        x[-1] = [5000] + [0] * (len(alpha) - 1)  # the tail: every count on one coordinate
        model = DirichletMultinomialDistribution(alpha)
        got = model.seq_log_density(model.encoder().encode(list(x)))
        want = st.dirichlet_multinomial.logpmf(x, alpha, x.sum(axis=1))
        assert np.all(np.abs(got - want) <= 1e-12 * np.maximum(np.abs(want), 1.0))
        assert [model.log_density(v) for v in x[::100]] == pytest.approx(
            list(got[::100]), rel=1e-13, abs=1e-13
        )
    # a large alpha, where scipy's log-Gamma differences lose digits, against mpmath; and totals of
    # 250,000, where every log-Gamma near 3e6 carries ~3e-10 of rounding (scipy's too): 1e-10 there
    mp.mp.dps = 40
    for alpha, row, rel in (
        ([3e5, 7e5], [3, 9], 1e-12),
        ([3e5, 7e5], [0, 40], 1e-12),
        ([3e5, 7e5], [1200, 900], 1e-12),
        ([0.9, 1.1], [250_000, 0], 1e-10),
        ([2.0, 0.5, 4.0], [3, 249_990, 7], 1e-10),
    ):
        a, n = [mp.mpf(v) for v in alpha], sum(row)
        exact = (
            mp.loggamma(n + 1)
            - sum(mp.loggamma(c + 1) for c in row)
            + mp.loggamma(sum(a))
            - mp.loggamma(n + sum(a))
            + sum(mp.loggamma(c + aj) - mp.loggamma(aj) for c, aj in zip(row, a, strict=True))
        )
        assert DirichletMultinomialDistribution(alpha).log_density(row) == pytest.approx(
            float(exact), rel=rel
        )
    model = DirichletMultinomialDistribution([1.0, 2.0])
    assert model.log_density([1.5, 2]) == -math.inf and model.log_density([1, 2, 3]) == -math.inf


def test_dirichlet_multinomial_with_a_length_model_scores_and_draws_totals() -> None:
    model = DirichletMultinomialDistribution([1.0, 2.0, 0.5], PoissonDistribution(12.0))
    x = np.array(model.sampler(54_309).sample(5000))
    assert x.dtype.kind == "i" and x.sum(axis=1).mean() == pytest.approx(12.0, abs=0.2)
    got = model.seq_log_density(model.encoder().encode(list(x)))
    n = x.sum(axis=1)
    want = st.dirichlet_multinomial.logpmf(x, [1.0, 2.0, 0.5], n) + st.poisson(12.0).logpmf(n)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    fit = optimize(
        list(x), DirichletMultinomialEstimator(len_estimator=PoissonEstimator()), max_its=300, print_iter=0
    )
    assert fit.len_dist.lam == pytest.approx(n.mean(), rel=1e-12)
    assert count_free_parameters(fit) == 4
    with pytest.raises(SpecError, match=r"sampling needs len_dist \(the distribution of the count total\)"):
        DirichletMultinomialDistribution([1.0, 2.0]).sampler(1)


def test_a_two_component_dirichlet_multinomial_mixture_recovers_its_components() -> None:
    rng = np.random.default_rng(54_310)
    pair = (np.array([8.0, 2.0, 1.0]), np.array([1.0, 3.0, 12.0]))
    first = _polya_draws(pair[0], rng.integers(10, 50, size=20_000), 54_311)
    second = _polya_draws(pair[1], rng.integers(10, 50, size=30_000), 54_312)
    x = np.vstack([first, second])[rng.permutation(50_000)]
    est = MixtureEstimator([DirichletMultinomialEstimator()] * 2)
    fit = optimize(list(x), est, max_its=2000, delta=1e-10, seed=54_313, print_iter=0)
    comps = sorted(fit.components, key=lambda c: -c.mean()[0])
    for comp, truth in zip(comps, pair, strict=True):
        np.testing.assert_allclose(comp.alpha, truth, rtol=0.05)
    assert sorted(fit.w) == pytest.approx([0.4, 0.6], abs=0.02)
    assert count_free_parameters(fit) == 1 + 2 * 3


def test_dirichlet_multinomial_bad_counts_are_one_error_naming_column_row_and_value() -> None:
    est = RecordEstimator({"basket": DirichletMultinomialEstimator()})
    expected = "expected a vector of non-negative integer counts for DirichletMultinomialEstimator"
    frame = pd.DataFrame({"basket": [[1, 2, 0], [0, 0, 0], [3, -1, 2], [2, 2, -4]]})
    with pytest.raises(
        DataValueError, match=rf"^column 'basket': {expected}, got -1.0 \(2 bad rows, first at row 3 of 4\)$"
    ):
        est.encoder().from_arrow(pa.Table.from_pandas(frame))
    assert "must be a count" in fix_for(f"column 'basket': {expected}, got -1.0 (row 3 of 4)")
    assert "must be a count" in fix_for(f"column 'basket': {expected}, got 2.5 (row 1 of 4)")
    frame = pd.DataFrame({"basket": [[1.0, 2.0], [0.5, 1.0]]})
    with pytest.raises(DataValueError, match=rf"^column 'basket': {expected}, got 0.5 \(row 2 of 2\)$"):
        est.encoder().from_arrow(pa.Table.from_pandas(frame))
    with pytest.raises(DataValueError, match=r"got nan \(row 1 of 1\)$"):
        est.encoder().from_arrow(pa.table({"basket": pa.array([[1, None]])}))
    with pytest.raises(DataValueError, match=r"expected length 3, got length 2 \(row 1 of 2\)"):
        DirichletMultinomialEstimator(dim=3).encoder().encode([[1, 2], [1, 2, 3]])


def test_dirichlet_multinomial_weights_json_optional_and_sequence() -> None:
    model = DirichletMultinomialDistribution([2.0, 0.5, 4.0])
    x = _polya_draws(model.alpha, np.random.default_rng(54_314).integers(0, 30, size=300), 54_315)
    counts = np.random.default_rng(54_316).integers(0, 4, size=300)
    for at in (None, model):  # the first pass's moments, and a GEM step
        weighted = _fit(DirichletMultinomialEstimator(), list(x), counts.astype(np.float64), at)
        repeated = _fit(DirichletMultinomialEstimator(), list(np.repeat(x, counts, axis=0)), None, at)
        np.testing.assert_allclose(weighted.alpha, repeated.alpha, rtol=1e-12)
    spec = json.loads(
        json.dumps(DirichletMultinomialDistribution([2.0, 0.5], PoissonDistribution(3.0)).to_dict())
    )
    assert spec == {
        "type": "dirichlet_multinomial",
        "alpha": [2.0, 0.5],
        "len_dist": {"type": "poisson", "lam": 3.0},
    }
    assert distribution_from_dict(spec).to_dict() == spec
    est = DirichletMultinomialEstimator(
        pseudo_count=3.0, suff_stat=[1.0, 2.0, 3.0], len_estimator=PoissonEstimator()
    )
    assert estimator_from_dict(json.loads(json.dumps(est.to_dict()))) == est
    assert list(est.estimate(0.0, est.accumulator_factory().make().value()).alpha) == [1.0, 2.0, 3.0]
    strong = DirichletMultinomialEstimator(pseudo_count=1e12, suff_stat=[1.0, 2.0, 3.0])
    np.testing.assert_allclose(_fit(strong, list(x), None, model).alpha, [1.0, 2.0, 3.0], rtol=1e-6)
    rng = np.random.default_rng(54_317)
    records = [None if m else list(v) for v, m in zip(x, rng.random(300) < 0.25, strict=True)]
    present = [r for r in records if r is not None]
    # one GEM step through the wrapper is the step on the present rows; the wrapped fit runs to the end
    optional = OptionalEstimator(DirichletMultinomialEstimator())
    step = _fit(optional, records, None, OptionalDistribution(model, 0.25))
    np.testing.assert_allclose(
        step.dist.alpha, _fit(DirichletMultinomialEstimator(), present, None, model).alpha, rtol=1e-12
    )
    assert step.p == pytest.approx(1 - len(present) / 300, rel=1e-12)
    fit = optimize(records, optional, max_its=3000, print_iter=0)
    assert fit.fit_result.converged and fit.p == pytest.approx(step.p, rel=1e-12)
    lists = [
        [list(v) for v in x[i : i + n]]
        for i, n in zip(range(0, 300, 6), rng.integers(0, 6, size=50), strict=True)
    ]
    flat = [v for row in lists for v in row]
    sequences = SequenceEstimator(DirichletMultinomialEstimator(), PoissonEstimator())
    step = _fit(sequences, lists, None, SequenceDistribution(model, PoissonDistribution(3.0)))
    np.testing.assert_allclose(
        step.dist.alpha, _fit(DirichletMultinomialEstimator(), flat, None, model).alpha, rtol=1e-12
    )
    fit = optimize(lists, sequences, max_its=3000, print_iter=0)
    assert fit.fit_result.converged and fit.len_dist.lam == pytest.approx(len(flat) / 50, rel=1e-12)


def test_dirichlet_multinomial_profile_and_separation() -> None:
    a = DirichletMultinomialDistribution([8.0, 2.0, 1.0], PoissonDistribution(20.0))
    b = DirichletMultinomialDistribution([1.0, 3.0, 12.0], PoissonDistribution(5.0))
    (alpha_row,) = segment_profile(MixtureDistribution([a, b], [0.4, 0.6]))["fields"]
    assert alpha_row["family"] == "dirichlet_multinomial" and alpha_row["kind"] == "text"
    assert alpha_row["cells"][0]["text"].startswith("alpha [8, 2, 1]")
    assert separation([a.to_dict(), b.to_dict()], [0.4, 0.6]) is None
