"""Pareto, inverse gamma and point mass (issue 54): fits against scipy.stats' maximum-likelihood fits
on fresh draws, densities against scipy's, two-component mixtures, bad input, JSON and the wrapping
combinators. The contract suite (tests/unit/cases_scalar.py) covers the rest on every backend."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pyarrow as pa
import pytest
import scipy.stats

from mixle_spark.cli._fixes import fix_for
from mixle_spark.errors import ConvergenceWarning, DataValueError, DegenerateComponentError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.profile import field_cell
from mixle_spark.report.separation import separation
from mixle_spark.stats import (
    InverseGammaDistribution,
    InverseGammaEstimator,
    MixtureDistribution,
    MixtureEstimator,
    OptionalEstimator,
    ParetoDistribution,
    ParetoEstimator,
    PointMassDistribution,
    PointMassEstimator,
    PoissonEstimator,
    RecordEstimator,
    SequenceEstimator,
    distribution_from_dict,
    estimator_from_dict,
)
from mixle_spark.stats.criteria import count_free_parameters

N = 20_000


def _fit_once(est, x):
    """One M-step from all rows with weight 1."""
    enc = est.encoder().encode(list(x))
    acc = est.accumulator_factory().make()
    acc.seq_update(enc, np.ones(len(x)), None)
    return est.estimate(float(len(x)), acc.value())


def _loglik(model, x):
    return float(model.seq_log_density(model.encoder().encode(list(x))).sum())


def _json_round_trip(dist, est):
    assert distribution_from_dict(json.loads(json.dumps(dist.to_dict()))).to_dict() == dist.to_dict()
    again = estimator_from_dict(json.loads(json.dumps(est.to_dict())))
    assert again == est and again.to_dict() == est.to_dict()


def _mixture_fit(x, est, start, its=200):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return optimize(list(x), MixtureEstimator([est, est]), max_its=its, delta=1e-10, prev_estimate=start)


# -- pareto --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("x_m", "alpha", "seed"), [(2.0, 3.0, 5401), (0.05, 0.7, 5402), (300.0, 12.0, 5403)])
def test_pareto_fit_matches_scipy(x_m, alpha, seed):
    x = scipy.stats.pareto(alpha, scale=x_m).rvs(N, random_state=np.random.default_rng(seed))
    model = _fit_once(ParetoEstimator(), x)
    b, loc, scale = scipy.stats.pareto.fit(x, floc=0)
    assert loc == 0
    assert model.x_m == pytest.approx(scale, rel=1e-6)
    assert model.alpha == pytest.approx(b, rel=1e-6)
    assert _loglik(model, x) >= _loglik(ParetoDistribution(x_m, alpha), x)


def test_pareto_log_density_matches_scipy():
    dist = ParetoDistribution(1.5, 2.5)
    x = np.concatenate([[1.5, 1.5000001], np.geomspace(1.6, 1e12, 200)])
    expected = scipy.stats.pareto(2.5, scale=1.5).logpdf(x)
    np.testing.assert_allclose(dist.seq_log_density(dist.encoder().encode(list(x))), expected, rtol=1e-12)
    assert [dist.log_density(v) for v in (1.4999, 0.1)] == [-np.inf, -np.inf]
    below = dist.seq_log_density(dist.encoder().encode([1.0, 1.4999999]))
    assert np.all(below == -np.inf)


def test_pareto_weighted_fit_ignores_rows_of_zero_weight():
    est = ParetoEstimator()
    acc = est.accumulator_factory().make()
    x = np.array([0.5, 2.0, 4.0, 8.0])
    acc.seq_update(est.encoder().encode(list(x)), np.array([0.0, 1.0, 2.0, 1.0]), None)
    model = est.estimate(4.0, acc.value())
    assert model.x_m == 2.0
    assert model.alpha == pytest.approx(4.0 / (2 * np.log(2.0) + np.log(4.0)), rel=1e-15)


def test_pareto_statistics_merge_exactly_in_any_order():
    est = ParetoEstimator()
    x = ParetoDistribution(1.0, 2.0).sampler(11).sample(1000)
    parts = []
    for chunk in np.array_split(np.asarray(x), 7):
        acc = est.accumulator_factory().make()
        acc.seq_update(est.encoder().encode(list(chunk)), np.ones(len(chunk)), None)
        parts.append(acc.value())
    forward = est.accumulator_factory().make()
    backward = est.accumulator_factory().make()
    for v in parts:
        forward.combine(v)
    for v in reversed(parts):
        backward.combine(v)
    assert forward.value()[2] == backward.value()[2] == min(x)
    assert forward.value()[0] == pytest.approx(backward.value()[0], rel=1e-12)
    assert forward.value()[1] == pytest.approx(backward.value()[1], rel=1e-12)


def test_pareto_degenerate_and_prior():
    est = ParetoEstimator()
    assert est.estimate(0.0, (0.0, 0.0, np.inf)).to_dict() == {"type": "pareto", "x_m": 1.0, "alpha": 1.0}
    assert _fit_once(est, [3.0, 3.0]).alpha == 1e8  # all equal: the shape's ceiling
    with_prior = _fit_once(ParetoEstimator(pseudo_count=2.0, suff_stat=(1.0, 4.0)), [3.0, 3.0])
    assert with_prior.alpha == pytest.approx(4.0 / (2.0 / 4.0), rel=1e-15)


def test_pareto_mixture_recovers_components():
    """Two Pareto segments, one from 1 and one from 20. A component's scale is the least value of its
    rows of positive weight, so EM only raises it as far as the rows it gives weight reach: the start
    puts each scale at most 5% below the truth (a random start, giving every row some weight in every
    component, leaves both scales at the overall minimum)."""
    rng = np.random.default_rng(5404)
    x = np.concatenate(
        [
            scipy.stats.pareto(4.0, scale=1.0).rvs(30_000, random_state=rng),
            scipy.stats.pareto(6.0, scale=20.0).rvs(20_000, random_state=rng),
        ]
    )
    start = MixtureDistribution([ParetoDistribution(1.0, 2.0), ParetoDistribution(19.0, 2.0)], [0.5, 0.5])
    model = _mixture_fit(x, ParetoEstimator(), start)
    first, second = model.components
    assert model.w[0] == pytest.approx(0.6, rel=0.05)
    assert (first.x_m, first.alpha) == pytest.approx((1.0, 4.0), rel=0.05)
    assert (second.x_m, second.alpha) == pytest.approx((20.0, 6.0), rel=0.05)


def test_pareto_value_outside_the_support_names_column_row_value():
    table = pa.table({"income": pa.array([12.0, 3.5, 0.0, -1.0])})
    with pytest.raises(
        DataValueError,
        match=r"^column 'income': expected a positive finite number for ParetoEstimator, "
        r"got 0.0 \(2 bad rows, first at row 3 of 4\)$",
    ):
        optimize(table, RecordEstimator({"income": ParetoEstimator()}))


def test_pareto_json_and_free_parameters():
    _json_round_trip(ParetoDistribution(2.0, 3.0), ParetoEstimator(pseudo_count=1.0, suff_stat=(1.0, 2.0)))
    _json_round_trip(ParetoDistribution(2.0, 3.0), ParetoEstimator(max_alpha=50.0))
    assert count_free_parameters(ParetoDistribution(2.0, 3.0), ParetoEstimator()) == 2


def test_pareto_inside_optional_and_sequence():
    rng = np.random.default_rng(5405)
    values = scipy.stats.pareto(3.0, scale=2.0).rvs(5000, random_state=rng)
    rows = [None if i % 5 == 0 else v for i, v in enumerate(values)]
    model = optimize(rows, OptionalEstimator(ParetoEstimator()), max_its=5)
    assert model.p == pytest.approx(0.2, rel=1e-12)
    present = values[[i % 5 != 0 for i in range(len(values))]]
    assert model.dist.x_m == present.min()
    assert model.dist.alpha == pytest.approx(scipy.stats.pareto.fit(present, floc=0)[0], rel=1e-9)
    seqs = [list(values[i : i + 5]) for i in range(0, 5000, 5)]
    model = optimize(seqs, SequenceEstimator(ParetoEstimator(), len_estimator=PoissonEstimator()), max_its=5)
    assert model.dist.alpha == pytest.approx(scipy.stats.pareto.fit(values, floc=0)[0], rel=1e-9)


def test_pareto_profile_separation_and_fix():
    cell = field_cell({"type": "pareto", "x_m": 2.0, "alpha": 3.0})
    dist = scipy.stats.pareto(3.0, scale=2.0)
    assert (cell["q1"], cell["median"], cell["q3"]) == pytest.approx(tuple(dist.ppf([0.25, 0.5, 0.75])))
    assert (cell["mean"], cell["sd"]) == pytest.approx((dist.mean(), dist.std()), rel=1e-12)
    assert "mean" not in field_cell({"type": "pareto", "x_m": 2.0, "alpha": 0.9})  # infinite mean
    apart = [{"type": "pareto", "x_m": 1.0, "alpha": 5.0}, {"type": "pareto", "x_m": 1e3, "alpha": 5.0}]
    assert separation(apart, [0.5, 0.5]) == pytest.approx(1.0, abs=1e-3)
    # same scale, shapes 2 and 4: I = sum_k w_k KL(p_k || m) by quadrature in ln x
    close = [{"type": "pareto", "x_m": 1.0, "alpha": 2.0}, {"type": "pareto", "x_m": 1.0, "alpha": 4.0}]
    u = np.linspace(0.0, 40.0, 400_001)
    p = np.array([2.0 * np.exp(-2.0 * u), 4.0 * np.exp(-4.0 * u)])
    m = p.mean(axis=0)
    info = sum(0.5 * np.trapezoid(pk * np.log(pk / m), u) for pk in p)
    assert separation(close, [0.5, 0.5]) == pytest.approx(info / np.log(2.0), rel=1e-4)
    assert "(WHERE x > 0)" in fix_for(
        "column 'x': expected a positive finite number for ParetoEstimator, got 0.0"
    )


# -- inverse gamma -------------------------------------------------------------------------------


@pytest.mark.parametrize(("a", "b", "seed"), [(3.0, 2.0, 5411), (0.6, 50.0, 5412), (40.0, 1e-3, 5413)])
def test_inverse_gamma_fit_matches_scipy(a, b, seed):
    x = scipy.stats.invgamma(a, scale=b).rvs(N, random_state=np.random.default_rng(seed))
    """scipy's ``invgamma.fit`` maximises numerically (Nelder-Mead, parameters to about 1e-5): the fit
    here reaches at least its log-likelihood and agrees within 1e-4; to 1e-9 it equals scipy's exact
    gamma fit of ``1 / x`` (shape ``a``, scale ``1 / b``), the same likelihood equations."""
    model = _fit_once(InverseGammaEstimator(), x)
    a_hat, loc, b_hat = scipy.stats.invgamma.fit(x, floc=0)
    assert loc == 0
    assert (model.a, model.b) == pytest.approx((a_hat, b_hat), rel=1e-4)
    assert _loglik(model, x) >= float(scipy.stats.invgamma(a_hat, scale=b_hat).logpdf(x).sum())
    k, loc, theta = scipy.stats.gamma.fit(1.0 / x, floc=0)
    assert (model.a, model.b) == pytest.approx((k, 1.0 / theta), rel=1e-9)
    assert _loglik(model, x) >= _loglik(InverseGammaDistribution(a, b), x)


def test_inverse_gamma_log_density_matches_scipy():
    for a, b in [(3.0, 2.0), (0.3, 1e-4), (250.0, 7e3)]:
        dist = InverseGammaDistribution(a, b)
        x = np.geomspace(1e-6, 1e8, 300)
        expected = scipy.stats.invgamma(a, scale=b).logpdf(x)
        got = dist.seq_log_density(dist.encoder().encode(list(x)))
        finite = np.isfinite(expected)
        np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-12)
        assert [dist.log_density(v) for v in x[:3]] == pytest.approx(list(got[:3]), rel=1e-13)


def test_inverse_gamma_degenerate_and_prior():
    est = InverseGammaEstimator()
    assert est.estimate(0.0, (0.0, 0.0, 0.0)).to_dict() == {"type": "inverse_gamma", "a": 1.0, "b": 1.0}
    assert _fit_once(est, [3.0, 3.0, 3.0]).a == 1e8  # all equal: the shape's ceiling, mean kept
    assert _fit_once(est, [3.0, 3.0, 3.0]).b / 1e8 == pytest.approx(3.0, rel=1e-12)
    # pseudo-observations at the prior's own expectations leave a fit of the prior's draws near it
    x = InverseGammaDistribution(2.0, 5.0).sampler(3).sample(N)
    fit = _fit_once(InverseGammaEstimator(pseudo_count=10.0, suff_stat=(2.0, 5.0)), x)
    assert (fit.a, fit.b) == pytest.approx((2.0, 5.0), rel=0.05)


def test_inverse_gamma_mixture_recovers_components():
    rng = np.random.default_rng(5414)
    x = np.concatenate(
        [
            scipy.stats.invgamma(8.0, scale=7.0).rvs(25_000, random_state=rng),  # around 1
            scipy.stats.invgamma(5.0, scale=400.0).rvs(25_000, random_state=rng),  # around 100
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = optimize(list(x), MixtureEstimator([InverseGammaEstimator()] * 2), max_its=200, seed=5415)
    order = np.argsort([c.b / c.a for c in model.components])
    (low, high), w = [model.components[i] for i in order], model.w[order]
    assert w == pytest.approx([0.5, 0.5], rel=0.05)
    assert (low.a, low.b) == pytest.approx((8.0, 7.0), rel=0.05)
    assert (high.a, high.b) == pytest.approx((5.0, 400.0), rel=0.05)


def test_inverse_gamma_value_outside_the_support_names_column_row_value():
    table = pa.table({"latency": pa.array([0.3, 1.5, -2.0])})
    with pytest.raises(
        DataValueError,
        match=r"^column 'latency': expected a positive finite number for InverseGammaEstimator, "
        r"got -2.0 \(row 3 of 3\)$",
    ):
        optimize(table, RecordEstimator({"latency": InverseGammaEstimator()}))


def test_inverse_gamma_json_free_parameters_and_fixes():
    _json_round_trip(
        InverseGammaDistribution(2.0, 3.0), InverseGammaEstimator(pseudo_count=1.0, suff_stat=(1.0, 2.0))
    )
    _json_round_trip(InverseGammaDistribution(2.0, 3.0), InverseGammaEstimator(min_a=0.1, max_a=10.0))
    assert count_free_parameters(InverseGammaDistribution(2.0, 3.0), InverseGammaEstimator()) == 2
    line = "column 'x': expected a positive finite number for InverseGammaEstimator, got 0.0"
    assert "(WHERE x > 0)" in fix_for(line)


def test_inverse_gamma_profile_and_separation():
    cell = field_cell({"type": "inverse_gamma", "a": 4.0, "b": 6.0})
    dist = scipy.stats.invgamma(4.0, scale=6.0)
    assert (cell["mean"], cell["sd"]) == pytest.approx((dist.mean(), dist.std()), rel=1e-12)
    assert "mean" not in field_cell({"type": "inverse_gamma", "a": 0.5, "b": 6.0})
    specs = [{"type": "inverse_gamma", "a": 3.0, "b": 2.0}, {"type": "inverse_gamma", "a": 6.0, "b": 30.0}]
    grid = np.geomspace(1e-4, 1e6, 400_001)
    logs = np.array([scipy.stats.invgamma(s["a"], scale=s["b"]).logpdf(grid) for s in specs])
    log_m = np.logaddexp(*logs) + np.log(0.5)
    info = sum(0.5 * np.trapezoid(np.exp(lp) * (lp - log_m), grid) for lp in logs)
    assert separation(specs, [0.5, 0.5]) == pytest.approx(info / np.log(2.0), rel=1e-4)


def test_inverse_gamma_inside_optional_and_sequence():
    rng = np.random.default_rng(5416)
    values = scipy.stats.invgamma(3.0, scale=2.0).rvs(5000, random_state=rng)
    rows = [None if i % 4 == 0 else v for i, v in enumerate(values)]
    model = optimize(rows, OptionalEstimator(InverseGammaEstimator()), max_its=5)
    present = values[[i % 4 != 0 for i in range(len(values))]]
    k, _, theta = scipy.stats.gamma.fit(1.0 / present, floc=0)
    assert model.p == pytest.approx(0.25, rel=1e-12)
    assert (model.dist.a, model.dist.b) == pytest.approx((k, 1.0 / theta), rel=1e-9)
    seqs = [list(values[i : i + 5]) for i in range(0, 5000, 5)]
    est = SequenceEstimator(InverseGammaEstimator(), len_estimator=PoissonEstimator())
    model = optimize(seqs, est, max_its=5)
    k, _, theta = scipy.stats.gamma.fit(1.0 / values, floc=0)
    assert (model.dist.a, model.dist.b) == pytest.approx((k, 1.0 / theta), rel=1e-9)


# -- point mass ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "seed"), [(7, 5421), (-3, 5422)])
def test_point_mass_fit_and_log_pmf_match_scipy(value, seed):
    degenerate = scipy.stats.randint(value, value + 1)  # scipy's one-value discrete distribution
    x = degenerate.rvs(N, random_state=np.random.default_rng(seed)).astype(np.float64)
    model = _fit_once(PointMassEstimator(), x)
    assert model.value == value
    assert _loglik(model, x) == 0.0 == float(degenerate.logpmf(x).sum())
    support = np.arange(value - 5, value + 6, dtype=np.float64)
    got = model.seq_log_density(model.encoder().encode(list(support)))
    np.testing.assert_array_equal(got, degenerate.logpmf(support))
    assert [model.log_density(v) for v in (value, value + 0.5)] == [0.0, -np.inf]


def test_point_mass_of_a_fraction_matches_scipy_rv_discrete():
    dist = PointMassDistribution(2.5)
    ref = scipy.stats.rv_discrete(values=([2.5], [1.0]))
    x = np.array([2.5, 2.4999999999999996, 0.0, -2.5])
    np.testing.assert_array_equal(dist.seq_log_density(dist.encoder().encode(list(x))), ref.logpmf(x))


def test_point_mass_refuses_rows_of_positive_weight_that_differ():
    est = PointMassEstimator()
    acc = est.accumulator_factory().make()
    acc.seq_update(est.encoder().encode([0.0, 4.0, 2.0, 9.0]), np.array([1.0, 0.5, 1.0, 0.0]), None)
    with pytest.raises(DataValueError, match=r"different values, 0\.0 to 4\.0; a point mass fits"):
        est.estimate(2.5, acc.value())
    acc = est.accumulator_factory().make()
    acc.seq_update(est.encoder().encode([0.0, 4.0]), np.array([0.0, 2.0]), None)
    assert est.estimate(2.0, acc.value()).value == 4.0  # rows of zero weight do not count
    assert est.estimate(0.0, (0.0, np.inf, -np.inf)).value == 0.0
    assert PointMassEstimator(suff_stat=5.0).estimate(0.0, (0.0, np.inf, -np.inf)).value == 5.0
    with pytest.raises(DataValueError, match=r"1\.0 to 5\.0"):  # a pseudo-row at 5 disagrees with 1
        _fit_once(PointMassEstimator(pseudo_count=1.0, suff_stat=5.0), [1.0, 1.0])


def test_point_mass_mixture_recovers_components():
    """Two point masses at 0 and 5 (weights 0.3, 0.7) on 50,000 rows. The M-step refuses differing
    values of positive weight, so EM starts from a model (any two values present in the data); then
    each row's responsibility is 1 for its own value's component and the weights are the shares."""
    rng = np.random.default_rng(5423)
    x = np.where(rng.random(50_000) < 0.3, 0.0, 5.0)
    start = MixtureDistribution([PointMassDistribution(0.0), PointMassDistribution(5.0)], [0.5, 0.5])
    model = _mixture_fit(x, PointMassEstimator(), start, its=20)
    assert [c.value for c in model.components] == [0.0, 5.0]
    assert model.w == pytest.approx([np.mean(x == 0.0), np.mean(x == 5.0)], rel=1e-12)
    assert model.w[0] == pytest.approx(0.3, rel=0.05)
    # from a random start every component sees both values: the mixture names each refusing component
    with pytest.raises(
        DegenerateComponentError, match=r"component 0: DataValueError: .*different values, 0\.0 to 5\.0"
    ):
        optimize(list(x), MixtureEstimator([PointMassEstimator()] * 2), max_its=5, seed=1)


def test_point_mass_beside_a_count_family_is_refused_by_the_mixture():
    """A zero-inflated count as mixture(point_mass(0), poisson) is refused today: the mixture's
    components must read one encoding, and a point mass reads plain numbers while a Poisson reads
    counts (with log x!). Issue 54's zero_inflated combinator is the way to that model."""
    with pytest.raises(SpecError, match=r"all components must read one encoding.*PointMassEncoder"):
        MixtureEstimator([PoissonEstimator(), PointMassEstimator()]).encoder()


def test_point_mass_value_outside_the_support_names_column_row_value():
    rows = [{"n": 0.0}, {"n": float("nan")}]
    with pytest.raises(DataValueError, match=r"^column 'n': expected a finite number for PointMassEstimator"):
        optimize(rows, RecordEstimator({"n": PointMassEstimator()}))
    table = pa.table({"n": pa.array([0.0, 1.0, float("inf")])})
    with pytest.raises(
        DataValueError,
        match=r"^column 'n': expected a finite number for PointMassEstimator, got inf \(row 3 of 3\)$",
    ):
        optimize(table, RecordEstimator({"n": PointMassEstimator()}))


def test_point_mass_json_profile_separation_and_wrappers():
    _json_round_trip(PointMassDistribution(-1.5), PointMassEstimator(pseudo_count=1.0, suff_stat=-1.5))
    assert count_free_parameters(PointMassDistribution(0.0), PointMassEstimator()) == 1
    cell = field_cell({"type": "point_mass", "value": 4.0})
    assert (cell["q1"], cell["median"], cell["q3"], cell["mean"], cell["sd"]) == (4.0, 4.0, 4.0, 4.0, 0.0)
    specs = [{"type": "point_mass", "value": 0.0}, {"type": "point_mass", "value": 1.0}]
    assert separation(specs, [0.3, 0.7]) == pytest.approx(1.0, rel=1e-12)
    rows = [None if i % 3 == 0 else 2.0 for i in range(3000)]
    model = optimize(rows, OptionalEstimator(PointMassEstimator()), max_its=3)
    assert (model.p, model.dist.value) == (pytest.approx(1 / 3, rel=1e-12), 2.0)
    seqs = [[2.0] * (i % 4) for i in range(400)]
    model = optimize(
        seqs, SequenceEstimator(PointMassEstimator(), len_estimator=PoissonEstimator()), max_its=3
    )
    assert model.dist.value == 2.0 and model.len_dist.lam == pytest.approx(1.5, rel=1e-12)
