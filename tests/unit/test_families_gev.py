"""The generalized extreme value family (issue 54) against scipy.stats.genextreme (whose ``c`` is minus
the usual shape ``xi``): fit, density, tails, mixture, weights, wrappings, the monotone GEM step."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import mpmath
import numpy as np
import pyarrow as pa
import pytest
import scipy.optimize as so
import scipy.stats as st

from mixle_spark.errors import DataValueError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.profile import field_cell
from mixle_spark.report.separation import separation
from mixle_spark.stats import (
    GeneralizedExtremeValueDistribution,
    GeneralizedExtremeValueEstimator,
    MixtureEstimator,
    OptionalEstimator,
    PoissonEstimator,
    RecordEstimator,
    SequenceEstimator,
    distribution_from_dict,
    estimator_from_dict,
)
from mixle_spark.stats.criteria import count_free_parameters

GEV = GeneralizedExtremeValueDistribution
N = 20_000


def _ref(p: tuple[float, float, float]) -> Any:
    return st.genextreme(-p[0], loc=p[1], scale=p[2])


def _tight(func: Callable[..., float], x0: Any, args: tuple[Any, ...] = (), disp: int = 0) -> Any:
    """scipy's default Nelder-Mead stops at ~1e-5 relative of the parameters; this one runs to ~1e-12."""
    return so.fmin(func, x0, args=args, xtol=1e-12, ftol=1e-13, maxiter=10_000, maxfun=10_000, disp=0)


def _params(model: Any) -> np.ndarray:
    return np.array([model.xi, model.mu, model.sigma])


def _ll(model: Any, x: np.ndarray, w: np.ndarray | None = None) -> float:
    ll = model.seq_log_density(x)
    return float(ll.sum() if w is None else np.dot(w, ll))


def _fit(est: Any, x: np.ndarray, w: np.ndarray | None = None, its: int = 400) -> Any:
    """The estimator's own passes until the parameters stop moving."""
    w = np.ones(len(x)) if w is None else w
    model = None
    for _ in range(its):
        acc = est.accumulator_factory().make()
        acc.seq_update(x, w, model)
        new = est.estimate(float(w.sum()), acc.value())
        if model is not None and np.allclose(_params(new), _params(model), rtol=1e-14, atol=0):
            break
        model = new
    return new


@pytest.mark.parametrize(
    ("truth", "seed"), [((0.2, 1.0, 2.0), 54_501), ((-0.3, 5.0, 0.5), 54_502), ((0.45, -40.0, 8.0), 54_503)]
)
def test_the_fit_matches_scipy_and_beats_the_true_parameters(
    truth: tuple[float, float, float], seed: int
) -> None:
    x = _ref(truth).rvs(size=N, random_state=np.random.default_rng(seed))
    fit = optimize(list(x), GeneralizedExtremeValueEstimator(), max_its=500, delta=1e-13, print_iter=0)
    c, loc, scale = st.genextreme.fit(x, optimizer=_tight)
    np.testing.assert_allclose(_params(fit), [-c, loc, scale], rtol=1e-6)
    assert _ll(fit, x) >= _ll(GEV(*truth), x)
    assert _ll(fit, x) >= _ll(GEV(-c, loc, scale), x) - 1e-9
    np.testing.assert_allclose(_params(fit), truth, rtol=0.05, atol=0.02)


@pytest.mark.parametrize(
    "params",
    [
        (0.2, 1.0, 2.0),
        (0.0, 0.0, 1.0),
        (1e-12, 3.0, 1.0),
        (-1e-12, 3.0, 1.0),
        (-0.45, -7.0, 1e-3),
        (0.9, 1e4, 50.0),
    ],
)
def test_seq_log_density_and_tails_are_scipys(params: tuple[float, float, float]) -> None:
    d, ref = GEV(*params), _ref(params)
    p = np.concatenate(
        [np.geomspace(1e-300, 1e-3, 60), np.linspace(0.01, 0.99, 99), 1 - np.geomspace(1e-3, 1e-15, 40)]
    )
    x = ref.ppf(p)
    np.testing.assert_allclose(d.seq_log_density(x), ref.logpdf(x), rtol=1e-12)
    assert [d.log_density(v) for v in x[::20]] == pytest.approx(list(ref.logpdf(x[::20])), rel=1e-12)
    np.testing.assert_allclose(d.log_cdf(x), ref.logcdf(x), rtol=1e-12)
    np.testing.assert_allclose(d.log_survival(x), ref.logsf(x), rtol=1e-12)
    np.testing.assert_allclose(d.quantile(p), x, rtol=1e-12, atol=1e-12 * abs(params[1]))
    mpmath.mp.dps = 50
    xi, mu, sigma = (mpmath.mpf(v) for v in params)  # scipy's moments lose digits at a tiny shape
    g1, g2 = mpmath.gamma(1 - xi), mpmath.gamma(1 - 2 * xi)
    mean, var = d.moments()
    if params[0] == 0:
        assert (mean, var) == pytest.approx((0.5772156649015329, math.pi**2 / 6), rel=1e-15)
    elif params[0] < 0.5:
        assert mean == pytest.approx(float(mu + sigma * (g1 - 1) / xi), rel=1e-13)
        assert var == pytest.approx(float(sigma**2 * (g2 - g1**2) / xi**2), rel=1e-13)
    else:
        assert mean == pytest.approx(ref.mean(), rel=1e-12) and var == math.inf


def test_the_deep_upper_tail_and_support_ends() -> None:
    d = GEV(0.3, 0.0, 1.0)
    x = np.array([1e3, 1e6, 1e12])
    mpmath.mp.dps = 40
    want = [
        float(mpmath.log(-mpmath.expm1(-((1 + mpmath.mpf(0.3) * v) ** (-1 / mpmath.mpf(0.3)))))) for v in x
    ]
    np.testing.assert_allclose(d.log_survival(x), want, rtol=1e-12)
    below = np.array([-1 / 0.3 - 1.0])  # under the lower end of a Frechet-type law
    assert d.seq_log_density(below)[0] == -math.inf and d.log_cdf(below)[0] == -math.inf
    assert d.log_survival(below)[0] == 0.0 and d.quantile(np.array([0.0]))[0] == pytest.approx(-1 / 0.3)
    bounded = GEV(-0.5, 0.0, 1.0)  # upper end mu + sigma / 0.5 = 2
    above = np.array([2.5])
    assert bounded.seq_log_density(above)[0] == -math.inf and bounded.log_survival(above)[0] == -math.inf
    assert bounded.log_cdf(above)[0] == 0.0 and bounded.quantile(np.array([1.0]))[0] == pytest.approx(2.0)
    assert GEV(1.5, 0.0, 1.0).moments() == (math.inf, math.inf)
    assert GEV(0.0, 0.0, 1.0).moments() == pytest.approx((0.5772156649015329, math.pi**2 / 6), rel=1e-15)


def test_a_two_component_mixture_recovers_its_components() -> None:
    pair = ((0.1, 0.0, 1.0), (-0.2, 20.0, 3.0))
    rng = np.random.default_rng(54_504)
    x = rng.permutation(
        np.concatenate(
            [_ref(pair[0]).rvs(20_000, random_state=rng), _ref(pair[1]).rvs(30_000, random_state=rng)]
        )
    )
    est = MixtureEstimator([GeneralizedExtremeValueEstimator(), GeneralizedExtremeValueEstimator()])
    fit = optimize(list(x), est, max_its=300, delta=1e-9, seed=54_505, print_iter=0)
    comps = sorted(fit.components, key=lambda c: c.mu)
    for comp, truth in zip(comps, pair, strict=True):
        np.testing.assert_allclose(_params(comp), truth, rtol=0.05, atol=0.02)  # atol: a shape near 0
    assert sorted(fit.w) == pytest.approx([0.4, 0.6], abs=0.02)
    assert count_free_parameters(fit) == 1 + 2 * 3


def test_a_value_that_is_not_a_finite_number_is_one_error_naming_column_row_and_value() -> None:
    """Every finite number is in the support of some GEV; inf and NaN are not numbers it reads."""
    table = pa.table({"peak": [1.0, 2.0, math.inf, -math.inf]})
    est = RecordEstimator({"peak": GeneralizedExtremeValueEstimator()})
    with pytest.raises(
        DataValueError,
        match=r"^column 'peak': expected a finite number for GeneralizedExtremeValueEstimator, got inf "
        r"\(2 bad rows, first at row 3 of 4\)$",
    ):
        est.encoder().from_arrow(table)
    with pytest.raises(DataValueError, match=r"got nan \(row 2 of 2"):
        GeneralizedExtremeValueEstimator().encoder().encode([1.0, math.nan])


def test_weights_count_as_repeated_rows_and_statistics_merge() -> None:
    truth = (0.15, 2.0, 1.5)
    x = _ref(truth).rvs(size=300, random_state=np.random.default_rng(54_506))
    counts = np.random.default_rng(54_507).integers(0, 4, size=300)
    weighted = _fit(GeneralizedExtremeValueEstimator(), x, counts.astype(np.float64))
    repeated = _fit(GeneralizedExtremeValueEstimator(), np.repeat(x, counts))
    # both stop where no step gains beyond the sums' rounding: the same optimum to ~1e-8
    np.testing.assert_allclose(_params(weighted), _params(repeated), rtol=1e-7)
    model, est = GEV(*truth), GeneralizedExtremeValueEstimator()
    whole = est.accumulator_factory().make()
    whole.seq_update(x, np.ones(300), model)
    halves = est.accumulator_factory().make()
    halves.seq_update(x[:77], np.ones(77), model)
    other = est.accumulator_factory().make()
    other.seq_update(x[77:], np.ones(223), model)
    for a, b in zip(halves.combine(other.value()).value(), whole.value(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_statistics_of_two_models_keep_the_moments() -> None:
    x = _ref((0.1, 0.0, 1.0)).rvs(300, random_state=np.random.default_rng(54_508))
    est = GeneralizedExtremeValueEstimator()
    a = est.accumulator_factory().make()
    a.seq_update(x, np.ones(300), GEV(0.1, 0.0, 1.0))
    b = est.accumulator_factory().make()
    b.seq_update(x, np.ones(300), GEV(0.1, 0.0, 1.1))
    doubled = est.accumulator_factory().make()
    doubled.seq_update(x, np.full(300, 2.0), None)
    for got, want in zip(a.combine(b.value()).value(), doubled.value(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13)
    with pytest.raises(
        SpecError, match=r"needs the current GeneralizedExtremeValueDistribution.*'not a model'"
    ):
        a.seq_update(x, np.ones(300), "not a model")


def test_json_round_trip_and_priors() -> None:
    truth = (0.1, 3.0, 2.0)
    model = GEV(*truth)
    spec = json.loads(json.dumps(model.to_dict()))
    assert spec["type"] == "generalized_extreme_value"
    assert distribution_from_dict(spec).to_dict() == model.to_dict()
    est = GeneralizedExtremeValueEstimator(pseudo_count=2.0, suff_stat=truth, min_xi=-0.8, max_xi=0.6)
    again = estimator_from_dict(json.loads(json.dumps(est.to_dict())))
    assert again == est and again.to_dict() == est.to_dict()
    assert model.estimator(pseudo_count=2.0) == GeneralizedExtremeValueEstimator(
        pseudo_count=2.0, suff_stat=truth
    )
    only_prior = est.estimate(0.0, est.accumulator_factory().make().value())
    np.testing.assert_allclose(_params(only_prior), truth, rtol=1e-12)
    strong = GeneralizedExtremeValueEstimator(pseudo_count=1e12, suff_stat=truth)
    x = _ref((-0.2, 10.0, 1.0)).rvs(size=50, random_state=np.random.default_rng(54_509))
    np.testing.assert_allclose(_params(_fit(strong, x, its=1000)), truth, rtol=1e-3, atol=1e-3)
    assert count_free_parameters(model) == 3
    with pytest.raises(SpecError, match=r"min_xi.*-1.5"):
        GeneralizedExtremeValueEstimator(min_xi=-1.5)
    with pytest.raises(SpecError, match=r"max_xi.*-0.2"):
        GeneralizedExtremeValueEstimator(max_xi=-0.2)


def test_optional_and_sequence_wrappings_fit() -> None:
    rng = np.random.default_rng(54_510)
    x = _ref((0.1, 1.0, 2.0)).rvs(size=4000, random_state=rng)
    records = [None if m else float(v) for v, m in zip(x, rng.random(4000) < 0.25, strict=True)]
    est = GeneralizedExtremeValueEstimator()
    fit = optimize(records, OptionalEstimator(est), max_its=400, delta=1e-13, print_iter=0)
    present = np.array([r for r in records if r is not None])
    np.testing.assert_allclose(_params(fit.dist), _params(_fit(est, present)), rtol=1e-6)
    assert fit.p == pytest.approx(0.25, abs=0.02)
    lists = [list(x[i : i + n]) for i, n in zip(range(0, 4000, 8), rng.integers(0, 8, size=500), strict=True)]
    fit = optimize(lists, SequenceEstimator(est, PoissonEstimator()), max_its=400, delta=1e-13, print_iter=0)
    flat = np.array([v for row in lists for v in row])
    np.testing.assert_allclose(_params(fit.dist), _params(_fit(est, flat)), rtol=1e-6)


def test_profile_quartiles_and_separation() -> None:
    truth = (0.1, 1.0, 2.0)
    ref = _ref(truth)
    cell = field_cell(GEV(*truth).to_dict())
    assert cell["mean"] == pytest.approx(ref.mean(), rel=1e-12)
    assert cell["sd"] == pytest.approx(ref.std(), rel=1e-10)
    assert [cell["q1"], cell["median"], cell["q3"]] == pytest.approx(
        list(ref.ppf([0.25, 0.5, 0.75])), rel=1e-9
    )
    specs = [GEV(*p).to_dict() for p in ((0.1, 0.0, 1.0), (-0.2, 20.0, 3.0))]
    apart = separation(specs, [0.4, 0.6])
    assert apart is not None and 0.3 < apart <= 1.0
    assert separation([specs[0], specs[0]], [0.4, 0.6]) == 0.0


@pytest.mark.parametrize(
    ("truth", "start"),
    [
        ((0.25, 1.0, 2.0), (0.25, 1.0, 2.0)),
        ((0.25, 1.0, 2.0), (-0.3, 0.0, 100.0)),
        ((-0.3, 5.0, 0.5), (0.2, 5.0, 2.0)),
        ((-0.3, 5.0, 0.5), (0.0, 20.0, 50.0)),
        ((0.01, 0.0, 1.0), (-0.01, 0.5, 1.0)),
    ],
    ids=["heavy", "heavy-from-bounded", "bounded-from-heavy", "bounded-from-far", "near-gumbel"],
)
def test_the_step_never_lowers_the_log_likelihood(
    truth: tuple[float, float, float], start: tuple[float, float, float]
) -> None:
    """From starts on either side of xi = 0 (every row inside the start's support) to the weighted MLE."""
    x = _ref(truth).rvs(5000, random_state=np.random.default_rng(54_511))
    w = np.random.default_rng(54_512).uniform(0.1, 2.0, len(x))
    begin = GEV(*start)
    assert np.isfinite(begin.seq_log_density(x)).all()
    est = GeneralizedExtremeValueEstimator()
    model, lls = begin, [_ll(begin, x, w)]
    for _ in range(60):
        acc = est.accumulator_factory().make()
        acc.seq_update(x, w, model)
        model = est.estimate(float(w.sum()), acc.value())
        lls.append(_ll(model, x, w))
    assert np.all(np.diff(lls) >= -1e-13 * abs(lls[-1]))
    assert lls[-1] > lls[0] or start == truth
    fit = _fit(est, x, w, its=2000)
    nll = lambda p: -float(np.dot(w, _ref(p).logpdf(x)))  # noqa: E731
    best = so.minimize(nll, _params(fit), method="Nelder-Mead", options={"xatol": 1e-12, "fatol": 1e-12})
    assert _ll(fit, x, w) >= -best.fun - 1e-7
    np.testing.assert_allclose(_params(fit), best.x, rtol=1e-5, atol=1e-7)
    assert _ll(fit, x, w) >= _ll(GEV(*truth), x, w)


def test_below_min_xi_the_fit_stays_at_the_bound() -> None:
    x = _ref((-0.8, 0.0, 1.0)).rvs(5000, random_state=np.random.default_rng(54_513))
    fit = _fit(GeneralizedExtremeValueEstimator(), x, its=2000)
    assert fit.xi == pytest.approx(-0.5, abs=1e-8) and np.isfinite(fit.seq_log_density(x)).all()
    free = _fit(GeneralizedExtremeValueEstimator(min_xi=-0.95), x, its=2000)
    assert free.xi < -0.7 and _ll(free, x) > _ll(fit, x)
    heavy = _ref((1.4, 0.0, 1.0)).rvs(5000, random_state=np.random.default_rng(54_514))
    assert _fit(GeneralizedExtremeValueEstimator(), heavy, its=2000).xi == pytest.approx(1.0, abs=1e-8)
