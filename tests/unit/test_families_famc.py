"""Uniform, Laplace, logistic and Gumbel (issue 54): the fit against scipy.stats' maximum-likelihood fit on
fresh draws, densities and tails against scipy's logpdf / logcdf / logsf / ppf, a two-component mixture's
recovery, weights, priors, non-finite input, JSON, the optional / sequence wrappings, the profile and the
monotonicity of the generalized-EM steps. The contract suite (tests/unit/cases_scalar.py) runs them on
the backends."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mpmath
import numpy as np
import pyarrow as pa
import pytest
import scipy.stats as st

from mixle_spark.errors import DataValueError
from mixle_spark.estimation import optimize
from mixle_spark.profile import field_cell
from mixle_spark.report.separation import separation
from mixle_spark.stats import (
    GumbelDistribution,
    GumbelEstimator,
    LaplaceDistribution,
    LaplaceEstimator,
    LogisticDistribution,
    LogisticEstimator,
    MixtureEstimator,
    OptionalEstimator,
    PoissonEstimator,
    RecordEstimator,
    SequenceEstimator,
    UniformDistribution,
    UniformEstimator,
    distribution_from_dict,
    estimator_from_dict,
)
from mixle_spark.stats.criteria import count_free_parameters

N = 20_000


@dataclass
class Family:
    """One family's ties to scipy.stats: ``frozen(params)`` is the scipy distribution, ``scipy_fit(x)``
    scipy's MLE in the family's parameters; ``iterative`` for a generalized-EM M-step."""

    name: str
    make: Callable[..., Any]
    estimator: Callable[..., Any]
    frozen: Callable[[tuple[float, ...]], Any]
    scipy_fit: Callable[[np.ndarray], tuple[float, ...]]
    truth: tuple[float, ...]
    pair: tuple[tuple[float, ...], tuple[float, ...]]
    cdf: Callable[..., Any]
    """``cdf(x, *params)`` in mpmath (50 digits): the reference where scipy's logcdf / logsf round."""
    iterative: bool = False

    def params(self, model: Any) -> tuple[float, ...]:
        return tuple(getattr(model, p.name) for p in model.parameters)


def _uniform_fit(x: np.ndarray) -> tuple[float, float]:
    loc, scale = st.uniform.fit(x)
    return (loc, loc + scale)


FAMILIES = {
    "uniform": Family(
        "uniform",
        UniformDistribution,
        UniformEstimator,
        lambda p: st.uniform(loc=p[0], scale=p[1] - p[0]),
        _uniform_fit,
        (-2.0, 3.5),
        ((0.0, 1.0), (3.0, 5.0)),
        lambda x, low, high: min(max((x - low) / (high - low), mpmath.mpf(0)), mpmath.mpf(1)),
    ),
}
FAMILIES["laplace"] = Family(
    "laplace",
    LaplaceDistribution,
    LaplaceEstimator,
    lambda p: st.laplace(loc=p[0], scale=p[1]),
    lambda x: tuple(st.laplace.fit(x)),
    (1.5, 2.0),
    ((-3.0, 0.5), (6.0, 1.0)),
    lambda x, mu, b: mpmath.exp((x - mu) / b) / 2 if x < mu else 1 - mpmath.exp(-(x - mu) / b) / 2,
    iterative=True,
)
FAMILIES["logistic"] = Family(
    "logistic",
    LogisticDistribution,
    LogisticEstimator,
    lambda p: st.logistic(loc=p[0], scale=p[1]),
    lambda x: tuple(st.logistic.fit(x)),
    (-0.7, 1.3),
    ((-4.0, 0.4), (5.0, 0.8)),
    lambda x, mu, s: 1 / (1 + mpmath.exp(-(x - mu) / s)),
    iterative=True,
)
FAMILIES["gumbel"] = Family(
    "gumbel",
    GumbelDistribution,
    GumbelEstimator,
    lambda p: st.gumbel_r(loc=p[0], scale=p[1]),
    lambda x: tuple(st.gumbel_r.fit(x)),
    (2.0, 1.5),
    ((-5.0, 0.5), (4.0, 1.0)),
    lambda x, mu, beta: mpmath.exp(-mpmath.exp(-(x - mu) / beta)),
    iterative=True,
)
NAMES = sorted(FAMILIES)
ITERATIVE = [name for name in NAMES if FAMILIES[name].iterative]


def _steps(est: Any, x: np.ndarray, weights: np.ndarray | None = None, its: int = 1) -> list[Any]:
    """The models of ``its`` M-steps from the first pass (``seq_update`` with no current model)."""
    enc = est.encoder().encode(list(x))
    w = np.ones(len(x)) if weights is None else weights
    model, models = None, []
    for _ in range(its):
        acc = est.accumulator_factory().make()
        acc.seq_update(enc, w, model)
        model = est.estimate(float(w.sum()), acc.value())
        models.append(model)
    return models


def _fit(est: Any, x: np.ndarray, weights: np.ndarray | None = None) -> Any:
    """The fitted model: one M-step, or for a generalized-EM family 300 of them (to convergence)."""
    its = 300 if FAMILIES[est.to_dict()["type"]].iterative else 1
    return _steps(est, x, weights, its)[-1]


def _log_likelihood(model: Any, x: np.ndarray) -> float:
    return float(model.seq_log_density(model.encoder().encode(list(x))).sum())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", [54_301, 54_302])
def test_the_fit_matches_scipy_and_beats_the_true_parameters(name: str, seed: int) -> None:
    fam = FAMILIES[name]
    x = fam.frozen(fam.truth).rvs(size=N, random_state=np.random.default_rng(seed))
    fit = _fit(fam.estimator(), x)
    np.testing.assert_allclose(fam.params(fit), fam.scipy_fit(x), rtol=1e-6)
    assert _log_likelihood(fit, x) >= _log_likelihood(fam.make(*fam.truth), x)
    np.testing.assert_allclose(fam.params(fit), fam.truth, rtol=0.05, atol=0.02)


@pytest.mark.parametrize("name", NAMES)
def test_weights_count_as_repeated_rows(name: str) -> None:
    fam = FAMILIES[name]
    x = fam.frozen(fam.truth).rvs(size=200, random_state=np.random.default_rng(54_303))
    counts = np.random.default_rng(54_304).integers(0, 4, size=200)
    weighted = _fit(fam.estimator(), x, counts.astype(np.float64))
    repeated = _fit(fam.estimator(), np.repeat(x, counts))
    np.testing.assert_allclose(fam.params(weighted), fam.params(repeated), rtol=1e-10)
    est, model = fam.estimator(), fam.make(*fam.truth)
    current = model if fam.iterative else None
    parts = []
    for rows in (slice(0, 77), slice(77, 200), slice(0, 200)):
        acc = est.accumulator_factory().make()
        acc.seq_update(est.encoder().encode(list(x[rows])), np.ones(len(x[rows])), current)
        parts.append(acc)
    merged = parts[0].combine(parts[1].value())
    a, b = est.estimate(200.0, merged.value()), est.estimate(200.0, parts[2].value())
    np.testing.assert_allclose(fam.params(a), fam.params(b), rtol=1e-13)


@pytest.mark.parametrize("name", NAMES)
def test_seq_log_density_and_tails_are_scipys(name: str) -> None:
    fam = FAMILIES[name]
    for params in (fam.truth, *fam.pair):
        frozen, model = fam.frozen(params), fam.make(*params)
        p = np.concatenate([np.geomspace(1e-15, 0.5, 200), 1.0 - np.geomspace(1e-15, 0.5, 200)])
        x = np.concatenate([frozen.ppf(p), frozen.ppf([0.0, 1.0]) + np.array([-1.0, 1.0]), [params[0] - 1e3]])
        x = x[np.isfinite(x)]
        got = model.seq_log_density(model.encoder().encode(list(x)))
        with np.errstate(over="ignore"):  # scipy's gumbel_r overflows exp far in the left tail
            ref = frozen.logpdf(x)
        # scipy's logpdf underflows to -inf far out (the log of a pdf that rounded to 0): ours is the
        # log-density itself there (finite, or -inf where it is below -1.8e308, as a Gumbel's left tail)
        kept = np.isfinite(ref) | ~((x >= frozen.ppf(0.0)) & (x <= frozen.ppf(1.0)))
        np.testing.assert_allclose(got[kept], ref[kept], rtol=1e-12, atol=1e-300)
        assert np.all(got[~kept] < ref[np.isfinite(ref)].min())
        assert [model.log_density(v) for v in x[::40]] == pytest.approx(list(got[::40]), rel=1e-12)
        lcdf, lsf = model.log_cdf(x), model.log_survival(x)
        with np.errstate(divide="ignore", over="ignore"):
            ref_cdf, ref_sf = frozen.logcdf(x), frozen.logsf(x)
        # scipy where the probability is in [1e-3, 1 - 1e-3] (some of its tails are 1 - cdf, rounded);
        # mpmath everywhere
        for got_tail, ref in ((lcdf, ref_cdf), (lsf, ref_sf)):
            away = (ref >= math.log(1e-3)) & (ref <= math.log1p(-1e-3))
            np.testing.assert_allclose(got_tail[away], ref[away], rtol=1e-12, atol=1e-300)
        with mpmath.workdps(50):
            for v, c, s in zip(x[::3], lcdf[::3], lsf[::3], strict=True):
                exact = fam.cdf(mpmath.mpf(float(v)), *(mpmath.mpf(q) for q in params))
                for got_v, ref_v in ((c, exact), (s, 1 - exact)):
                    want = float(mpmath.log(ref_v)) if ref_v > 0 else -math.inf
                    assert got_v == pytest.approx(want, rel=1e-12, abs=1e-300)
        np.testing.assert_allclose(model.quantile(p), frozen.ppf(p), rtol=1e-12, atol=1e-300)
        mean, var = model.moments()
        assert mean == pytest.approx(frozen.mean(), rel=1e-12, abs=1e-14)
        assert var == pytest.approx(frozen.var(), rel=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_a_two_component_mixture_recovers_its_components(name: str) -> None:
    fam = FAMILIES[name]
    rng = np.random.default_rng(54_305)
    first = fam.frozen(fam.pair[0]).rvs(size=20_000, random_state=rng)
    second = fam.frozen(fam.pair[1]).rvs(size=30_000, random_state=rng)
    x = rng.permutation(np.concatenate([first, second]))
    est = MixtureEstimator([fam.estimator(), fam.estimator()])
    fit = optimize(list(x), est, max_its=300, delta=1e-10, seed=54_306, print_iter=0)
    comps = sorted(fit.components, key=lambda c: fam.frozen(fam.params(c)).mean())
    for comp, truth in zip(comps, fam.pair, strict=True):
        np.testing.assert_allclose(fam.params(comp), truth, rtol=0.05, atol=0.01)
    assert sorted(fit.w) == pytest.approx([0.4, 0.6], abs=0.02)
    assert count_free_parameters(fit) == 1 + 2 * len(fam.truth)


@pytest.mark.parametrize("name", NAMES)
def test_a_non_finite_value_is_one_error_naming_column_row_and_value(name: str) -> None:
    fam = FAMILIES[name]
    good = float(fam.frozen(fam.truth).median())
    est = RecordEstimator({"dur": fam.estimator()})
    estimator_name = type(fam.estimator()).__name__
    table = pa.table({"dur": [good, good, math.inf, -math.inf]})
    with pytest.raises(
        DataValueError,
        match=rf"^column 'dur': expected a finite number for {estimator_name}, got inf "
        rf"\(2 bad rows, first at row 3 of 4\)$",
    ):
        est.encoder().from_arrow(table)
    with pytest.raises(DataValueError, match=r"got nan \(row 2 of 2"):
        fam.estimator().encoder().encode([good, math.nan])


@pytest.mark.parametrize("name", NAMES)
def test_json_round_trip_and_free_parameters(name: str) -> None:
    fam = FAMILIES[name]
    model = fam.make(*fam.truth)
    spec = json.loads(json.dumps(model.to_dict()))
    assert spec["type"] == name
    assert distribution_from_dict(spec).to_dict() == model.to_dict()
    est = fam.estimator(pseudo_count=2.0, suff_stat=fam.truth)
    again = estimator_from_dict(json.loads(json.dumps(est.to_dict())))
    assert again == est and again.to_dict() == est.to_dict()
    only_prior = est.estimate(0.0, est.accumulator_factory().make().value())
    np.testing.assert_allclose(fam.params(only_prior), fam.truth, rtol=1e-12)
    assert count_free_parameters(model) == len(fam.truth)


@pytest.mark.parametrize("name", NAMES)
def test_optional_and_sequence_wrappings_fit(name: str) -> None:
    fam = FAMILIES[name]
    rng = np.random.default_rng(54_308)
    x = fam.frozen(fam.truth).rvs(size=4000, random_state=rng)
    its = 300 if fam.iterative else 3
    records = [None if m else float(v) for v, m in zip(x, rng.random(4000) < 0.25, strict=True)]
    fit = optimize(records, OptionalEstimator(fam.estimator()), max_its=its, delta=1e-12, print_iter=0)
    present = np.array([r for r in records if r is not None])
    # an iterative fit stops on the likelihood's gain, flat (second order) at the maximum: 1e-6
    rtol = 1e-6 if fam.iterative else 1e-12
    np.testing.assert_allclose(fam.params(fit.dist), fam.params(_fit(fam.estimator(), present)), rtol=rtol)
    assert fit.p == pytest.approx(0.25, abs=0.02)
    lists = [list(x[i : i + n]) for i, n in zip(range(0, 4000, 8), rng.integers(0, 8, size=500), strict=True)]
    est = SequenceEstimator(fam.estimator(), PoissonEstimator())
    fit = optimize(lists, est, max_its=its, delta=1e-12, print_iter=0)
    flat = np.array([v for row in lists for v in row])
    np.testing.assert_allclose(fam.params(fit.dist), fam.params(_fit(fam.estimator(), flat)), rtol=rtol)


@pytest.mark.parametrize("name", NAMES)
def test_profile_quartiles_and_separation(name: str) -> None:
    fam = FAMILIES[name]
    frozen = fam.frozen(fam.truth)
    cell = field_cell(fam.make(*fam.truth).to_dict())
    assert cell["mean"] == pytest.approx(frozen.mean(), rel=1e-12, abs=1e-14)
    assert cell["sd"] == pytest.approx(frozen.std(), rel=1e-12)
    quartiles = [cell["q1"], cell["median"], cell["q3"]]
    assert quartiles == pytest.approx(list(frozen.ppf([0.25, 0.5, 0.75])), rel=1e-12, abs=1e-14)
    specs = [fam.make(*p).to_dict() for p in fam.pair]
    apart = separation(specs, [0.4, 0.6])
    assert apart is not None and 0.3 < apart <= 1.0
    assert separation([specs[0], specs[0]], [0.4, 0.6]) == 0.0


def test_uniform_mixture_starts_from_its_clusters_not_the_whole_range() -> None:
    """The k-means|| start gives every row 1e-6 / k on the other components: the first pass's interval
    spans only each component's own (heavy) rows, so the components start apart and EM keeps them."""
    est = UniformEstimator()
    acc = est.accumulator_factory().make()
    x = np.array([0.1, 0.4, 0.9, 5.0, 7.0])
    acc.seq_initialize(est.encoder().encode(list(x)), np.array([1.0, 1.0, 1.0, 5e-7, 5e-7]), None)
    start = est.estimate(None, acc.value())
    assert (start.low, start.high) == (0.1, 0.9)
    acc.seq_update(est.encoder().encode([8.0]), np.array([1e-9]), None)  # an update pass: every row counts
    assert est.estimate(None, acc.value()).high == 0.9
    plain = est.accumulator_factory().make()
    plain.seq_update(est.encoder().encode(list(x)), np.array([1.0, 1.0, 1.0, 5e-7, 5e-7]), None)
    assert (est.estimate(None, plain.value()).low, est.estimate(None, plain.value()).high) == (0.1, 7.0)


def test_uniform_degenerate_data_prior_and_bounds() -> None:
    one = _fit(UniformEstimator(), np.full(3, 2.5))
    assert one.low < 2.5 < one.high and one.high - one.low == pytest.approx(1e-12, rel=1e-3)
    big = _fit(UniformEstimator(), np.full(3, 1e12))
    assert big.low < 1e12 < big.high and math.isfinite(big.log_density(1e12))
    prior = UniformEstimator(pseudo_count=1.0, suff_stat=(-1.0, 1.0))
    assert fam_params(_fit(prior, np.array([0.5, 2.0]))) == (-1.0, 2.0)
    with pytest.raises(Exception, match=r"\(low, high\).*\(2.0, 1.0\)"):
        UniformDistribution(2.0, 1.0)


def fam_params(model: Any) -> tuple[float, ...]:
    return FAMILIES[model.to_dict()["type"]].params(model)


@pytest.mark.parametrize("name", ITERATIVE)
@pytest.mark.parametrize("weighted", [False, True])
def test_the_generalized_em_step_never_lowers_the_likelihood(name: str, weighted: bool) -> None:
    fam = FAMILIES[name]
    rng = np.random.default_rng(54_309)
    # a contaminated sample (far from the family) so the steps have somewhere to go
    x = np.concatenate([fam.frozen(fam.truth).rvs(size=3000, random_state=rng), rng.normal(40.0, 1.0, 300)])
    w = rng.random(len(x)) * 3.0 if weighted else np.ones(len(x))
    lls = [
        float(w @ m.seq_log_density(m.encoder().encode(list(x)))) for m in _steps(fam.estimator(), x, w, 60)
    ]
    gains = np.diff(lls)
    assert np.all(gains >= -1e-12 * abs(lls[-1])), gains.min()
    assert gains[0] > 0 and abs(gains[-1]) <= 1e-9 * abs(lls[-1])


def test_laplace_lands_on_the_weighted_median() -> None:
    x = np.array([0.0, 1.0, 2.0, 3.0, 10.0, 11.0])
    w = np.array([1.0, 1.0, 5.0, 1.0, 1.0, 1.0])
    fit = _steps(LaplaceEstimator(), x, w, 30)[-1]
    assert fit.mu == 2.0 and fit.b == pytest.approx(float(w @ np.abs(x - 2.0)) / w.sum(), rel=1e-14)
    even = _steps(LaplaceEstimator(), np.array([0.0, 1.0, 4.0, 9.0]), None, 30)[-1]
    assert even.mu == 2.5  # the middle of the medians [1, 4], as numpy.median
    prior = LaplaceEstimator(pseudo_count=1e9, suff_stat=(7.0, 3.0))
    assert fam_params(_steps(prior, x, w, 30)[-1]) == pytest.approx((7.0, 3.0), rel=1e-6)


def test_laplace_statistics_at_different_centres_combine_by_the_majorizer() -> None:
    """An incremental update adds new rows' statistics (at the current model) to frozen old ones (at an
    earlier model): the location moves by the Weiszfeld step, which re-expresses exactly at any centre."""
    est = LaplaceEstimator()
    x = np.array([-1.0, 0.5, 2.0, 4.0])
    old, new = est.accumulator_factory().make(), est.accumulator_factory().make()
    old.seq_update(x[:2], np.ones(2), LaplaceDistribution(0.0, 1.0))
    new.seq_update(x[2:], np.ones(2), LaplaceDistribution(1.0, 1.0))
    both = old.combine(new.value())
    u = 1.0 / np.abs(x - np.array([0.0, 0.0, 1.0, 1.0]))
    fit = est.estimate(4.0, both.value())
    assert fit.mu == pytest.approx(float(u @ x) / u.sum(), rel=1e-13)
    assert fit.b == pytest.approx((1.0 + 0.5 + 1.0 + 3.0) / 4.0, rel=1e-13)


def test_logistic_prior_pulls_the_fit_to_it() -> None:
    x = st.logistic(3.0, 2.0).rvs(size=50, random_state=np.random.default_rng(54_310))
    strong = LogisticEstimator(pseudo_count=1e12, suff_stat=(-1.0, 0.5))
    assert fam_params(_steps(strong, x, None, 40)[-1]) == pytest.approx((-1.0, 0.5), rel=1e-6)
    one = _steps(LogisticEstimator(), np.full(5, 2.0), None, 5)[-1]
    assert one.mu == 2.0 and one.s == 1e-12 and math.isfinite(one.log_density(2.0))


def test_gumbel_prior_far_tail_and_frozen_statistics() -> None:
    from mixle_spark.stats.gumbel import PSEUDO_POINTS

    np.testing.assert_allclose(st.gumbel_r.fit(np.array(PSEUDO_POINTS)), (0.0, 1.0), atol=1e-9)
    x = st.gumbel_r(3.0, 2.0).rvs(size=50, random_state=np.random.default_rng(54_311))
    strong = GumbelEstimator(pseudo_count=1e12, suff_stat=(-1.0, 0.5))
    assert fam_params(_steps(strong, x, None, 40)[-1]) == pytest.approx((-1.0, 0.5), rel=1e-6)
    one = _steps(GumbelEstimator(), np.full(5, 2.0), None, 5)[-1]
    assert one.beta == 1e-12 and math.isfinite(one.log_density(2.0))
    far = GumbelDistribution(0.0, 1.0).log_survival(np.array([800.0, 30.0]))
    with mpmath.workdps(60):
        exact = [float(mpmath.log(-mpmath.expm1(-mpmath.exp(-v)))) for v in (800, 30)]
    np.testing.assert_allclose(far, exact, rtol=1e-14)
    # statistics taken at two scales (an incremental update) fall back to the moments
    est = GumbelEstimator()
    old, new = est.accumulator_factory().make(), est.accumulator_factory().make()
    old.seq_update(x[:25], np.ones(25), GumbelDistribution(3.0, 2.0))
    new.seq_update(x[25:], np.ones(25), GumbelDistribution(3.1, 2.2))
    moments = est.estimate(50.0, old.combine(new.value()).value())
    assert moments.beta == pytest.approx(float(np.std(x)) * math.sqrt(6.0) / math.pi, rel=1e-12)
