"""Weibull, Nakagami and generalized Pareto (issue 54): the fit against scipy.stats' maximum-likelihood fit
on fresh draws, densities and tails against scipy, a two-component mixture's recovery, weights, priors,
the monotone generalized-EM steps, the out-of-support error, JSON and the optional / sequence wrappings.
The contract suite (tests/unit/cases_scalar.py) runs them on the backends."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import scipy.optimize as so
import scipy.stats as st

from mixle_spark.cli._fixes import fix_for
from mixle_spark.errors import DataValueError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.profile import field_cell
from mixle_spark.report.separation import separation
from mixle_spark.stats import (
    GeneralizedParetoDistribution,
    GeneralizedParetoEstimator,
    MixtureEstimator,
    NakagamiDistribution,
    NakagamiEstimator,
    OptionalEstimator,
    PoissonEstimator,
    RecordEstimator,
    SequenceEstimator,
    WeibullDistribution,
    WeibullEstimator,
    distribution_from_dict,
    estimator_from_dict,
)
from mixle_spark.stats._scalar_common import describes
from mixle_spark.stats.criteria import count_free_parameters

N = 20_000


def _tight(func: Callable[..., float], x0: Any, args: tuple[Any, ...] = (), disp: int = 0) -> Any:
    """scipy's default Nelder-Mead stops at ~1e-5 relative of the parameters; this one runs to ~1e-12."""
    return so.fmin(func, x0, args=args, xtol=1e-12, ftol=1e-13, maxiter=5000, maxfun=5000, disp=0)


@dataclass
class Family:
    """One family's ties to scipy.stats: ``frozen(params)`` is the scipy distribution, ``scipy_fit(x)``
    scipy's MLE with loc (and what the family fixes) fixed, in the family's parameters."""

    name: str
    make: Callable[..., Any]
    estimator: Callable[..., Any]
    frozen: Callable[[tuple[float, ...]], Any]
    scipy_fit: Callable[[np.ndarray], tuple[float, ...]]
    truth: tuple[float, ...]
    pair: tuple[tuple[float, ...], tuple[float, ...]]
    others: tuple[tuple[float, ...], ...]
    outside: float
    expectation: str
    fix: str

    def params(self, model: Any) -> tuple[float, ...]:
        return tuple(getattr(model, p.name) for p in model.parameters)


def _weibull_fit(x: np.ndarray) -> tuple[float, float]:
    c, _, scale = st.weibull_min.fit(x, floc=0, optimizer=_tight)
    return (c, scale)


def _nakagami_fit(x: np.ndarray) -> tuple[float, float]:
    nu, _, scale = st.nakagami.fit(x, floc=0, optimizer=_tight)
    return (nu, scale * scale)


def _genpareto_fit(x: np.ndarray) -> tuple[float, float]:
    c, _, scale = st.genpareto.fit(x, floc=0, optimizer=_tight)
    return (c, scale)


FAMILIES = {
    "generalized_pareto": Family(
        "generalized_pareto",
        GeneralizedParetoDistribution,
        GeneralizedParetoEstimator,
        lambda p: st.genpareto(p[0], scale=p[1]),
        _genpareto_fit,
        (0.3, 2.0),
        ((0.1, 1.0), (0.2, 100.0)),
        ((0.0, 1.0), (1e-9, 5.0), (-1e-9, 5.0), (-0.45, 1e-3), (2.5, 1e4), (-1.0, 2.0)),
        -0.5,
        "a non-negative finite number",
        "filter the rows where dur < 0",
    ),
    "nakagami": Family(
        "nakagami",
        NakagamiDistribution,
        NakagamiEstimator,
        lambda p: st.nakagami(p[0], scale=math.sqrt(p[1])),
        _nakagami_fit,
        (2.5, 9.0),
        ((0.8, 1.0), (6.0, 400.0)),
        ((0.5, 1e-6), (0.2, 3.0), (300.0, 1e4), (1.0, 1.0)),
        0.0,
        "a positive finite number",
        "WHERE dur > 0",
    ),
    "weibull": Family(
        "weibull",
        WeibullDistribution,
        WeibullEstimator,
        lambda p: st.weibull_min(p[0], scale=p[1]),
        _weibull_fit,
        (1.7, 3.0),
        ((4.0, 1.0), (1.5, 40.0)),
        ((0.3, 1e-3), (0.05, 2.0), (25.0, 1e5), (1.0, 1.0)),
        0.0,
        "a positive finite number",
        "WHERE dur > 0",
    ),
}
NAMES = sorted(FAMILIES)


def _fit(est: Any, x: np.ndarray, weights: np.ndarray | None = None, its: int = 300) -> Any:
    """The estimator's own passes: a first pass without a model, then passes at the current model until
    the parameters stop moving (one pass for a closed-form family)."""
    enc = est.encoder().encode(list(x))
    w = np.ones(len(x)) if weights is None else weights
    model = None
    for _ in range(its):
        acc = est.accumulator_factory().make()
        acc.seq_update(enc, w, model)
        new = est.estimate(float(w.sum()), acc.value())
        if model is not None and np.allclose(_params(new), _params(model), rtol=1e-14, atol=0):
            break
        model = new
    return new


def _params(model: Any) -> np.ndarray:
    return np.array([getattr(model, p.name) for p in model.parameters])


def _log_likelihood(model: Any, x: np.ndarray, w: np.ndarray | None = None) -> float:
    ll = model.seq_log_density(model.encoder().encode(list(x)))
    return float(ll.sum() if w is None else np.dot(w, ll))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", [54_401, 54_402])
def test_the_fit_matches_scipy_and_beats_the_true_parameters(name: str, seed: int) -> None:
    fam = FAMILIES[name]
    x = fam.frozen(fam.truth).rvs(size=N, random_state=np.random.default_rng(seed))
    fit = optimize(list(x), fam.estimator(), max_its=500, delta=1e-13, print_iter=0)
    np.testing.assert_allclose(fam.params(fit), fam.scipy_fit(x), rtol=1e-6)
    assert _log_likelihood(fit, x) >= _log_likelihood(fam.make(*fam.truth), x)
    assert _log_likelihood(fit, x) >= _log_likelihood(fam.make(*fam.scipy_fit(x)), x) - 1e-9
    # a shape near 0 (generalized Pareto's xi) has a standard error of ~0.01 at this size: also absolute
    np.testing.assert_allclose(fam.params(fit), fam.truth, rtol=0.05, atol=0.03)


@pytest.mark.parametrize("name", NAMES)
def test_weights_count_as_repeated_rows(name: str) -> None:
    fam = FAMILIES[name]
    x = fam.frozen(fam.truth).rvs(size=200, random_state=np.random.default_rng(54_403))
    counts = np.random.default_rng(54_404).integers(0, 4, size=200)
    weighted = _fit(fam.estimator(), x, counts.astype(np.float64))
    repeated = _fit(fam.estimator(), np.repeat(x, counts))
    np.testing.assert_allclose(fam.params(weighted), fam.params(repeated), rtol=1e-10)
    model = fam.make(*fam.truth)
    enc = fam.estimator().encoder().encode(list(x))
    whole = fam.estimator().accumulator_factory().make()
    whole.seq_update(enc, np.ones(200), model)
    halves = fam.estimator().accumulator_factory().make()
    halves.seq_update(fam.estimator().encoder().encode(list(x[:77])), np.ones(77), model)
    other = fam.estimator().accumulator_factory().make()
    other.seq_update(fam.estimator().encoder().encode(list(x[77:])), np.ones(123), model)
    merged = halves.combine(other.value()).value()
    for a, b in zip(merged, whole.value(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13)


@pytest.mark.parametrize("name", NAMES)
def test_seq_log_density_is_scipys_logpdf(name: str) -> None:
    fam = FAMILIES[name]
    for params in (fam.truth, *fam.pair, *fam.others):
        frozen = fam.frozen(params)
        x = np.concatenate([frozen.ppf(np.linspace(1e-9, 1 - 1e-9, 401)), frozen.ppf([1e-15]) * [0.5, 1e-3]])
        x = x[(x > 0) & np.isfinite(x)]
        model = fam.make(*params)
        got = model.seq_log_density(model.encoder().encode(list(x)))
        np.testing.assert_allclose(got, frozen.logpdf(x), rtol=1e-12, atol=1e-300)
        assert [model.log_density(v) for v in x[::40]] == pytest.approx(list(got[::40]), rel=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_a_two_component_mixture_recovers_its_components(name: str) -> None:
    fam = FAMILIES[name]
    rng = np.random.default_rng(54_405)
    first = fam.frozen(fam.pair[0]).rvs(size=20_000, random_state=rng)
    second = fam.frozen(fam.pair[1]).rvs(size=30_000, random_state=rng)
    x = rng.permutation(np.concatenate([first, second]))
    est = MixtureEstimator([fam.estimator(), fam.estimator()])
    fit = optimize(list(x), est, max_its=300, delta=1e-9, seed=54_406, print_iter=0)
    comps = sorted(fit.components, key=lambda c: fam.frozen(fam.params(c)).median())
    for comp, truth in zip(comps, fam.pair, strict=True):
        np.testing.assert_allclose(fam.params(comp), truth, rtol=0.05, atol=0.03)  # atol: a shape near 0
    assert sorted(fit.w) == pytest.approx([0.4, 0.6], abs=0.02)
    assert count_free_parameters(fit) == 1 + 2 * len(fam.truth)


@pytest.mark.parametrize("name", NAMES)
def test_a_value_outside_the_support_is_one_error_naming_column_row_and_value(name: str) -> None:
    fam = FAMILIES[name]
    good = float(fam.frozen(fam.truth).median())
    table = pa.table({"dur": [good, good, fam.outside, -3.0]})
    est = RecordEstimator({"dur": fam.estimator()})
    estimator_name = type(fam.estimator()).__name__
    with pytest.raises(
        DataValueError,
        match=rf"^column 'dur': expected {fam.expectation} for {estimator_name}, got "
        rf"{fam.outside} \(2 bad rows, first at row 3 of 4\)$",
    ):
        est.encoder().from_arrow(table)
    line = f"column 'dur': expected {fam.expectation} for {estimator_name}, got {fam.outside} (row 3 of 4)"
    assert fam.fix in fix_for(line)
    with pytest.raises(DataValueError, match=r"got -3.0 \(row 2 of 2"):
        fam.estimator().encoder().encode([good, -3.0])
    with pytest.raises(DataValueError, match=r"got inf \(row 1 of 1"):
        fam.estimator().encoder().encode([math.inf])


@pytest.mark.parametrize("name", NAMES)
def test_json_round_trip_and_priors(name: str) -> None:
    fam = FAMILIES[name]
    model = fam.make(*fam.truth)
    spec = json.loads(json.dumps(model.to_dict()))
    assert spec["type"] == name
    assert distribution_from_dict(spec).to_dict() == model.to_dict()
    est = fam.estimator(pseudo_count=2.0, suff_stat=fam.truth)
    again = estimator_from_dict(json.loads(json.dumps(est.to_dict())))
    assert again == est and again.to_dict() == est.to_dict()
    assert model.estimator(pseudo_count=2.0) == est
    # the prior alone (no data) is the prior, and a strong prior pulls the fit to it
    only_prior = est.estimate(0.0, est.accumulator_factory().make().value())
    np.testing.assert_allclose(fam.params(only_prior), fam.truth, rtol=1e-12)
    strong = fam.estimator(pseudo_count=1e12, suff_stat=fam.truth)
    x = fam.frozen(fam.pair[1]).rvs(size=50, random_state=np.random.default_rng(54_407))
    np.testing.assert_allclose(fam.params(_fit(strong, x)), fam.truth, rtol=1e-5)
    assert count_free_parameters(model) == len(fam.truth)


@pytest.mark.parametrize("name", NAMES)
def test_optional_and_sequence_wrappings_fit(name: str) -> None:
    fam = FAMILIES[name]
    rng = np.random.default_rng(54_408)
    x = fam.frozen(fam.truth).rvs(size=4000, random_state=rng)
    records = [None if m else float(v) for v, m in zip(x, rng.random(4000) < 0.25, strict=True)]
    fit = optimize(records, OptionalEstimator(fam.estimator()), max_its=300, delta=1e-13, print_iter=0)
    present = np.array([r for r in records if r is not None])
    np.testing.assert_allclose(fam.params(fit.dist), fam.params(_fit(fam.estimator(), present)), rtol=1e-8)
    assert fit.p == pytest.approx(0.25, abs=0.02)
    lists = [list(x[i : i + n]) for i, n in zip(range(0, 4000, 8), rng.integers(0, 8, size=500), strict=True)]
    est = SequenceEstimator(fam.estimator(), PoissonEstimator())
    fit = optimize(lists, est, max_its=300, delta=1e-13, print_iter=0)
    flat = np.array([v for row in lists for v in row])
    np.testing.assert_allclose(fam.params(fit.dist), fam.params(_fit(fam.estimator(), flat)), rtol=1e-8)


@pytest.mark.parametrize("name", NAMES)
def test_profile_quartiles_and_separation(name: str) -> None:
    fam = FAMILIES[name]
    frozen = fam.frozen(fam.truth)
    cell = field_cell(fam.make(*fam.truth).to_dict())
    assert cell["mean"] == pytest.approx(frozen.mean(), rel=1e-12)
    assert cell["sd"] == pytest.approx(frozen.std(), rel=1e-12)
    specs = [fam.make(*p).to_dict() for p in fam.pair]
    apart = separation(specs, [0.4, 0.6])
    if not describes(fam.make(*fam.truth), "quantile"):  # nakagami: mean and sd, no quartiles or separation
        assert "median" not in cell and apart is None
        return
    quartiles = [cell["q1"], cell["median"], cell["q3"]]
    assert quartiles == pytest.approx(list(frozen.ppf([0.25, 0.5, 0.75])), rel=1e-9)
    assert apart is not None and 0.3 < apart <= 1.0
    assert separation([specs[0], specs[0]], [0.4, 0.6]) == 0.0


def _gem_log_likelihoods(est: Any, start: Any, x: np.ndarray, w: np.ndarray, its: int) -> np.ndarray:
    enc = est.encoder().encode(list(x))
    model, lls = start, [float(np.dot(w, start.seq_log_density(enc)))]
    for _ in range(its):
        acc = est.accumulator_factory().make()
        acc.seq_update(enc, w, model)
        model = est.estimate(float(w.sum()), acc.value())
        lls.append(float(np.dot(w, model.seq_log_density(enc))))
    return np.array(lls)


@pytest.mark.parametrize(
    "start", [(0.05, 1.0), (30.0, 1e4), (0.59, 300.0), (0.6, 1e-3)], ids=["flat", "peaked", "near", "small"]
)
def test_the_weibull_step_never_lowers_the_log_likelihood(start: tuple[float, float]) -> None:
    x = st.weibull_min(0.6, scale=300.0).rvs(20_000, random_state=np.random.default_rng(54_409))
    w = np.random.default_rng(54_410).uniform(0.1, 2.0, len(x))
    lls = _gem_log_likelihoods(WeibullEstimator(), WeibullDistribution(*start), x, w, 25)
    assert np.all(np.diff(lls) >= -1e-12 * abs(lls[-1]))
    assert lls[-1] > lls[0]
    # converged: the weighted MLE's likelihood equations hold (scale exact given k; the shape equation)
    fit = _fit(WeibullEstimator(), x, w)
    y = np.log(x / fit.lam)
    zk = np.exp(fit.k * y)
    assert np.dot(w, zk) / w.sum() == pytest.approx(1.0, rel=1e-10)
    shape_eq = 1.0 / fit.k + np.dot(w, y) / w.sum() - np.dot(w, zk * y) / np.dot(w, zk)
    assert abs(shape_eq) < 1e-10


def test_weibull_tails_match_scipy() -> None:
    for k, lam in [(1.7, 3.0), (0.4, 1e-3), (12.0, 50.0)]:
        d, ref = WeibullDistribution(k, lam), st.weibull_min(k, scale=lam)
        x = np.concatenate([[0.0, -1.0], lam * np.geomspace(1e-6, 1e3, 301)])
        x = x[(ref.sf(x) > 1e-300) | (x <= 0)]
        np.testing.assert_allclose(d.log_cdf(x)[2:], ref.logcdf(x)[2:], rtol=1e-12)
        assert list(d.log_cdf(x[:2])) == [-math.inf, -math.inf]
        np.testing.assert_allclose(d.log_survival(x), ref.logsf(x), rtol=1e-12, atol=1e-300)
        p = np.linspace(0.0, 0.999, 1000)
        np.testing.assert_allclose(d.quantile(p), ref.ppf(p), rtol=1e-12)
        mean, var = d.moments()
        assert mean == pytest.approx(ref.mean(), rel=1e-12) and var == pytest.approx(ref.var(), rel=1e-10)


def test_weibull_statistics_of_two_models_keep_the_log_moments() -> None:
    x = st.weibull_min(2.0, scale=5.0).rvs(300, random_state=np.random.default_rng(54_411))
    est = WeibullEstimator()
    enc = est.encoder().encode(list(x))
    a = est.accumulator_factory().make()
    a.seq_update(enc, np.ones(300), WeibullDistribution(2.0, 5.0))
    b = est.accumulator_factory().make()
    b.seq_update(enc, np.ones(300), WeibullDistribution(2.1, 5.0))
    first = est.accumulator_factory().make()
    first.seq_update(enc, np.ones(300), None)
    doubled = est.accumulator_factory().make()
    doubled.seq_update(enc, np.full(300, 2.0), None)
    mixed = a.combine(b.value()).value()
    for got, want in zip(mixed, doubled.value(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13)
    start = est.estimate(None, first.value())
    assert est.estimate(None, mixed).to_dict() == start.to_dict()
    with pytest.raises(SpecError, match="needs the current WeibullDistribution"):
        a.seq_update(enc, np.ones(300), "not a model")


def test_weibull_degenerate_and_bounds() -> None:
    equal = _fit(WeibullEstimator(), np.full(5, 2.5))
    assert equal.k == 1e4 and equal.lam == pytest.approx(2.5, rel=1e-3)
    assert math.isfinite(equal.log_density(2.5))
    with pytest.raises(SpecError, match=r"\(min_k, max_k\).*\(5.0, 2.0\)"):
        WeibullEstimator(min_k=5.0, max_k=2.0)


@pytest.mark.parametrize("m", [0.3, 1.0, 2.5, 40.0, 1e5])
def test_nakagami_moments_match_scipy(m: float) -> None:
    mean, var = NakagamiDistribution(m, 7.0).moments()
    ref = st.nakagami(m, scale=math.sqrt(7.0))
    assert mean == pytest.approx(ref.mean(), rel=1e-12)
    assert var == pytest.approx(ref.var(), rel=1e-9)  # scipy's own variance loses digits at a large m


def test_nakagami_mixture_fast_path_scores_and_sums_as_the_direct_path() -> None:
    model = NakagamiDistribution(2.5, 9.0)
    x = st.nakagami(2.5, scale=3.0).rvs(size=400, random_state=np.random.default_rng(54_412))
    est = NakagamiEstimator()
    enc = est.encoder().encode(list(x))
    phi = model.seq_features(enc)
    np.testing.assert_allclose(phi @ model.feature_coefficients(enc), model.seq_log_density(enc), rtol=1e-12)
    w = np.random.default_rng(54_413).random(400)
    direct = est.accumulator_factory().make()
    direct.seq_update(enc, w, model)
    fast = est.accumulator_factory().make()
    fast.add_feature_sums(w @ phi, enc, model)
    np.testing.assert_allclose(fast.value(), direct.value(), rtol=1e-12)


def test_nakagami_degenerate_and_bounds() -> None:
    equal = _fit(NakagamiEstimator(), np.full(5, 2.5))
    assert equal.m == 1e8 and equal.omega == pytest.approx(6.25, rel=1e-12)
    assert math.isfinite(equal.log_density(2.5))
    with pytest.raises(SpecError, match=r"\(min_m, max_m\).*\(5.0, 2.0\)"):
        NakagamiEstimator(min_m=5.0, max_m=2.0)


@pytest.mark.parametrize(
    ("xi", "sigma"), [(0.3, 2.0), (1e-12, 1.0), (0.0, 1.0), (-1e-12, 1.0), (-0.4, 5.0), (2.0, 1e-3)]
)
def test_generalized_pareto_tails_match_scipy(xi: float, sigma: float) -> None:
    d, ref = GeneralizedParetoDistribution(xi, sigma), st.genpareto(xi, scale=sigma)
    end = sigma / -xi if xi < 0 else math.inf
    x = np.concatenate([[0.0, -1.0], sigma * np.geomspace(1e-6, 1e4, 301)])
    x = x[x < end * (1 - 1e-9)]
    np.testing.assert_allclose(d.log_cdf(x)[2:], ref.logcdf(x)[2:], rtol=1e-12)
    assert list(d.log_cdf(x[:2])) == [-math.inf, -math.inf]
    np.testing.assert_allclose(d.log_survival(x), ref.logsf(x), rtol=1e-12, atol=1e-300)
    p = np.linspace(0.0, 0.999, 1000)
    np.testing.assert_allclose(d.quantile(p), ref.ppf(p), rtol=1e-12)
    mean, var = d.moments()
    assert mean == pytest.approx(ref.mean(), rel=1e-12) if xi < 1 else mean == math.inf
    assert var == pytest.approx(ref.var(), rel=1e-12) if xi < 0.5 else var == math.inf
    if xi < 0:  # beyond the support's end: density 0, survival 0, cdf 1
        beyond = np.array([end * 1.5])
        assert d.seq_log_density(beyond)[0] == -math.inf and d.log_density(end * 1.5) == -math.inf
        assert d.log_survival(beyond)[0] == -math.inf and d.log_cdf(beyond)[0] == 0.0
        assert d.quantile(np.array([1.0]))[0] == pytest.approx(end, rel=1e-15)


@pytest.mark.parametrize(
    ("truth", "start"),
    [
        ((0.3, 2.0), (0.3, 2.0)),
        ((0.3, 2.0), (-0.3, 20.0)),
        ((-0.3, 2.0), (0.5, 0.1)),
        ((0.02, 1.0), (-0.01, 1.0)),
    ],
    ids=["heavy", "heavy-from-bounded", "bounded-from-heavy", "near-exponential"],
)
def test_the_generalized_pareto_step_never_lowers_the_log_likelihood(
    truth: tuple[float, float], start: tuple[float, float]
) -> None:
    """From either side of xi = 0 (the mirror's sums let a step cross it) to the weighted MLE."""
    x = st.genpareto(truth[0], scale=truth[1]).rvs(5000, random_state=np.random.default_rng(54_414))
    w = np.random.default_rng(54_415).uniform(0.1, 2.0, len(x))
    begin = GeneralizedParetoDistribution(*start)
    if not np.isfinite(begin.seq_log_density(x)).all():
        begin = GeneralizedParetoDistribution(start[0], -start[0] * x.max() * 1.01)  # cover the data
    lls = _gem_log_likelihoods(GeneralizedParetoEstimator(), begin, x, w, 40)
    assert np.all(np.diff(lls) >= -1e-12 * abs(lls[-1]))
    fit = _fit(GeneralizedParetoEstimator(), x, w)
    ll_fit = float(np.dot(w, fit.seq_log_density(x)))
    assert lls[-1] == pytest.approx(ll_fit, rel=1e-9)
    nll = lambda p: -float(np.dot(w, st.genpareto(p[0], scale=p[1]).logpdf(x)))  # noqa: E731
    best = so.minimize(
        nll, [fit.xi, fit.sigma], method="Nelder-Mead", options={"xatol": 1e-12, "fatol": 1e-12}
    )
    assert ll_fit >= -best.fun - 1e-7
    assert np.sign(fit.xi) == np.sign(truth[0]) or abs(fit.xi) < 0.03


def test_generalized_pareto_below_min_xi_stays_at_the_bound() -> None:
    x = st.genpareto(-0.8, scale=1.0).rvs(5000, random_state=np.random.default_rng(54_416))
    fit = _fit(GeneralizedParetoEstimator(), x)
    assert fit.xi == pytest.approx(-0.5, abs=1e-9) and np.isfinite(fit.seq_log_density(x)).all()
    free = _fit(GeneralizedParetoEstimator(min_xi=-0.95), x)
    assert free.xi < -0.7
    assert _log_likelihood(free, x) > _log_likelihood(fit, x)
    with pytest.raises(SpecError, match=r"min_xi.*-1.5"):
        GeneralizedParetoEstimator(min_xi=-1.5)


def test_generalized_pareto_statistics_of_two_models_keep_the_moments() -> None:
    x = st.genpareto(0.2, scale=2.0).rvs(300, random_state=np.random.default_rng(54_417))
    est = GeneralizedParetoEstimator()
    a = est.accumulator_factory().make()
    a.seq_update(x, np.ones(300), GeneralizedParetoDistribution(0.2, 2.0))
    b = est.accumulator_factory().make()
    b.seq_update(x, np.ones(300), GeneralizedParetoDistribution(0.25, 2.0))
    doubled = est.accumulator_factory().make()
    doubled.seq_update(x, np.full(300, 2.0), None)
    mixed = a.combine(b.value()).value()
    for got, want in zip(mixed, doubled.value(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13)
    with pytest.raises(SpecError, match="needs the current GeneralizedParetoDistribution"):
        a.seq_update(x, np.ones(300), "not a model")
