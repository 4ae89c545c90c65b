"""Beta-binomial, log-series and Skellam (issue 54): the fit against a likelihood maximized by scipy (or
scipy.stats' own fit) on fresh draws, probabilities against scipy's logpmf, tails and moments, a
two-component mixture's recovery, weights, priors, the out-of-support error, JSON, the optional /
sequence wrappings and the monotone EM. The contract suite (tests/unit/cases_scalar.py) runs them on
the backends."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import scipy.optimize as so
import scipy.stats as st
from scipy.special import betaln, logsumexp

from mixle_spark.cli._fixes import fix_for
from mixle_spark.errors import DataValueError
from mixle_spark.estimation import optimize
from mixle_spark.profile import field_cell
from mixle_spark.report.separation import separation
from mixle_spark.stats import (
    BetaBinomialDistribution,
    BetaBinomialEstimator,
    LogSeriesDistribution,
    LogSeriesEstimator,
    MixtureEstimator,
    OptionalEstimator,
    PoissonEstimator,
    RecordEstimator,
    SequenceEstimator,
    SkellamDistribution,
    SkellamEstimator,
    distribution_from_dict,
    estimator_from_dict,
)
from mixle_spark.stats._scalar_common import describes
from mixle_spark.stats.beta_binomial import solve_shapes
from mixle_spark.stats.criteria import count_free_parameters
from mixle_spark.stats.log_series import solve_t
from mixle_spark.stats.skellam import log_bessel_ive_orders

N = 20_000


def _nelder_mead(nll: Callable[[np.ndarray], float], start: np.ndarray) -> np.ndarray:
    """scipy's Nelder-Mead to its tightest tolerances, restarted once from its own answer."""
    opts = {"xatol": 1e-13, "fatol": 1e-13, "maxiter": 20_000, "maxfev": 40_000}
    first = so.minimize(nll, start, method="Nelder-Mead", options=opts)
    return np.asarray(so.minimize(nll, first.x, method="Nelder-Mead", options=opts).x)


def _beta_binomial_reference(n: int) -> Callable[[np.ndarray], tuple[float, ...]]:
    """The beta-binomial MLE by maximizing its log-likelihood (written out with scipy's betaln) in
    ``(log alpha, log beta)``: scipy.stats.betabinom has no fit of its own."""

    def fit(x: np.ndarray) -> tuple[float, ...]:
        def nll(p: np.ndarray) -> float:
            a, b = np.exp(p)
            return -float(np.sum(betaln(x + a, n - x + b) - betaln(a, b)))

        m, v = x.mean(), x.var()
        rho = (v / (m * (1 - m / n)) - 1) / (n - 1)
        s = 1 / rho - 1
        return tuple(np.exp(_nelder_mead(nll, np.log([m / n * s, (1 - m / n) * s]))))

    return fit


def _log_series_reference(x: np.ndarray) -> tuple[float, ...]:
    """The log-series MLE by maximizing scipy's logpmf over p with scipy's bounded Brent search."""

    def nll(p: float) -> float:
        return -float(np.sum(st.logser(p).logpmf(x)))

    found = so.minimize_scalar(nll, bounds=(1e-9, 1 - 1e-9), method="bounded", options={"xatol": 1e-15})
    return (float(found.x),)


def _skellam_reference(x: np.ndarray) -> tuple[float, ...]:
    """The Skellam MLE by maximizing scipy's logpmf (over the distinct values, weighted by their counts)
    in ``(log mu1, log mu2)`` with Nelder-Mead: scipy.stats.skellam has no fit of its own."""
    values, counts = np.unique(x, return_counts=True)

    def nll(p: np.ndarray) -> float:
        return -float(counts @ st.skellam(*np.exp(p)).logpmf(values))

    m, v = x.mean(), x.var()
    return tuple(np.exp(_nelder_mead(nll, np.log([(v + m) / 2, (v - m) / 2]))))


@dataclass
class Family:
    """One family's ties to scipy: ``frozen(params)`` is the scipy distribution, ``reference(x)`` the
    MLE found by scipy (its fit, or its optimizer on a written-out likelihood), in the family's
    parameters (those the estimator fits)."""

    name: str
    make: Callable[..., Any]
    estimator: Callable[..., Any]
    frozen: Callable[[tuple[float, ...]], Any]
    reference: Callable[[np.ndarray], tuple[float, ...]]
    truth: tuple[float, ...]
    pair: tuple[tuple[float, ...], tuple[float, ...]]
    fitted: tuple[str, ...]
    outside: tuple[float, ...]
    expectation: str
    fix: str
    its: int = 5
    mixture_its: int = 300

    def params(self, model: Any) -> tuple[float, ...]:
        return tuple(float(getattr(model, name)) for name in self.fitted)


FAMILIES = {
    "beta_binomial": Family(
        "beta_binomial",
        BetaBinomialDistribution,
        lambda **kw: BetaBinomialEstimator(n=30, **kw),
        lambda p: st.betabinom(int(p[0]), p[1], p[2]),
        _beta_binomial_reference(30),
        (30, 0.8, 1.5),
        ((30, 2.0, 8.0), (30, 9.0, 2.0)),
        ("alpha", "beta"),
        (2.5, 31.0),
        "an integer count in [0, 30]",
        "ROUND(dur)",
    ),
    "log_series": Family(
        "log_series",
        LogSeriesDistribution,
        LogSeriesEstimator,
        lambda p: st.logser(p[0]),
        _log_series_reference,
        (0.9,),
        ((0.3,), (0.99,)),
        ("p",),
        (0.0, 2.5),
        "an integer >= 1",
        "WHERE dur >= 1",
    ),
    "skellam": Family(
        "skellam",
        SkellamDistribution,
        SkellamEstimator,
        lambda p: st.skellam(*p),
        _skellam_reference,
        (4.0, 1.5),
        ((20.0, 8.0), (6.0, 18.0)),
        ("mu1", "mu2"),
        (2.5, -0.5),
        "an integer",
        "ROUND(dur)",
        its=400,
        mixture_its=1500,
    ),
}
NAMES = sorted(FAMILIES)


def _fit(est: Any, x: np.ndarray, weights: np.ndarray | None = None, model: Any = None) -> Any:
    """One M-step from the statistics of ``x`` (with ``model`` the current model where the family's
    accumulator reads one)."""
    enc = est.encoder().encode(list(x))
    acc = est.accumulator_factory().make()
    w = np.ones(len(x)) if weights is None else weights
    acc.seq_update(enc, w, model)
    return est.estimate(float(w.sum()), acc.value())


def _log_likelihood(model: Any, x: np.ndarray) -> float:
    return float(model.seq_log_density(model.encoder().encode(list(x))).sum())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", [54_601, 54_602])
def test_the_fit_matches_scipy_and_beats_the_true_parameters(name: str, seed: int) -> None:
    fam = FAMILIES[name]
    x = fam.frozen(fam.truth).rvs(size=N, random_state=np.random.default_rng(seed))
    fit = optimize(x, fam.estimator(), max_its=fam.its, delta=None, print_iter=0)
    reference = fam.reference(x)
    np.testing.assert_allclose(fam.params(fit), reference, rtol=1e-6)
    ll = _log_likelihood(fit, x)
    assert ll >= _log_likelihood(fam.make(*fam.truth), x)
    assert ll >= _log_likelihood(fam.make(*fam.truth[: -len(reference)], *reference), x) - 1e-9 * abs(ll)
    np.testing.assert_allclose(fam.params(fit), fam.truth[-len(fam.fitted) :], rtol=0.08)


@pytest.mark.parametrize("name", NAMES)
def test_weights_count_as_repeated_rows(name: str) -> None:
    fam = FAMILIES[name]
    x = fam.frozen(fam.truth).rvs(size=200, random_state=np.random.default_rng(54_603))
    counts = np.random.default_rng(54_604).integers(0, 4, size=200)
    current = fam.make(*fam.truth)
    weighted = _fit(fam.estimator(), x, counts.astype(np.float64), current)
    repeated = _fit(fam.estimator(), np.repeat(x, counts), None, current)
    np.testing.assert_allclose(fam.params(weighted), fam.params(repeated), rtol=1e-12)
    est = fam.estimator()
    halves, other, whole = (est.accumulator_factory().make() for _ in range(3))
    halves.seq_update(est.encoder().encode(list(x[:77])), np.ones(77), current)
    other.seq_update(est.encoder().encode(list(x[77:])), np.ones(123), current)
    whole.seq_update(est.encoder().encode(list(x)), np.ones(200), current)
    np.testing.assert_allclose(
        np.hstack(halves.combine(other.value()).value()), np.hstack(whole.value()), rtol=1e-13
    )


@pytest.mark.parametrize("name", NAMES)
def test_a_two_component_mixture_recovers_its_components(name: str) -> None:
    fam = FAMILIES[name]
    rng = np.random.default_rng(54_605)
    first = fam.frozen(fam.pair[0]).rvs(size=20_000, random_state=rng)
    second = fam.frozen(fam.pair[1]).rvs(size=30_000, random_state=rng)
    x = rng.permutation(np.concatenate([first, second]))
    est = MixtureEstimator([fam.estimator(), fam.estimator()])
    fit = optimize(list(x), est, max_its=fam.mixture_its, delta=1e-9, seed=54_606, print_iter=0)
    comps = sorted(fit.components, key=lambda c: c.moments()[0])
    truths = sorted(fam.pair, key=lambda p: fam.frozen(p).mean())
    for comp, truth in zip(comps, truths, strict=True):
        np.testing.assert_allclose(fam.params(comp), truth[-len(fam.fitted) :], rtol=0.05)
    assert [fit.w[fit.components.index(c)] for c in comps] == pytest.approx(
        [0.4 if t == fam.pair[0] else 0.6 for t in truths], abs=0.02
    )
    assert count_free_parameters(fit) == 1 + 2 * len(fam.fitted)


@pytest.mark.parametrize("name", NAMES)
def test_em_never_lowers_the_likelihood(name: str) -> None:
    fam = FAMILIES[name]
    rng = np.random.default_rng(54_607)
    x = np.concatenate(
        [
            fam.frozen(fam.pair[0]).rvs(size=3000, random_state=rng),
            fam.frozen(fam.truth).rvs(size=2000, random_state=rng),
        ]
    )
    est = MixtureEstimator([fam.estimator(), fam.estimator()])
    enc = est.encoder().encode(list(x))
    model = optimize(list(x), est, max_its=1, delta=None, seed=54_608, print_iter=0)
    previous = float(model.seq_log_density(enc).sum())
    for _ in range(40):
        acc = est.accumulator_factory().make()
        acc.seq_update(enc, np.ones(len(x)), model)
        model = est.estimate(float(len(x)), acc.value())
        ll = float(model.seq_log_density(enc).sum())
        assert ll >= previous - 1e-10 * abs(previous)
        previous = ll


@pytest.mark.parametrize("name", NAMES)
def test_a_value_outside_the_support_is_one_error_naming_column_row_and_value(name: str) -> None:
    fam = FAMILIES[name]
    good = float(fam.frozen(fam.truth).median())
    estimator_name = type(fam.estimator()).__name__
    for bad in fam.outside:
        table = pa.table({"dur": [good, good, bad, good]})
        with pytest.raises(
            DataValueError,
            match=rf"^column 'dur': expected {re.escape(fam.expectation)} for {estimator_name}, got "
            rf"{bad} \(row 3 of 4\)$",
        ):
            RecordEstimator({"dur": fam.estimator()}).encoder().from_arrow(table)
    line = f"column 'dur': expected {fam.expectation} for {estimator_name}, got {fam.outside[0]} (row 3 of 4)"
    assert fam.fix in fix_for(line)
    with pytest.raises(DataValueError, match=rf"got {fam.outside[0]} \(row 2 of 2"):
        fam.estimator().encoder().encode([good, fam.outside[0]])
    with pytest.raises(DataValueError, match=r"got inf \(row 1 of 1"):
        fam.estimator().encoder().encode([math.inf])


@pytest.mark.parametrize("name", NAMES)
def test_json_round_trip_and_priors(name: str) -> None:
    fam = FAMILIES[name]
    model = fam.make(*fam.truth)
    spec = json.loads(json.dumps(model.to_dict()))
    assert spec["type"] == name
    assert distribution_from_dict(spec).to_dict() == model.to_dict()
    prior = fam.params(model)
    est = fam.estimator(pseudo_count=2.0, suff_stat=prior[0] if len(prior) == 1 else prior)
    again = estimator_from_dict(json.loads(json.dumps(est.to_dict())))
    assert again == est and again.to_dict() == est.to_dict()
    # the prior alone (no data) is the prior, and a strong prior pulls the fit to it
    only_prior = est.estimate(0.0, est.accumulator_factory().make().value())
    np.testing.assert_allclose(fam.params(only_prior), prior, rtol=1e-12)
    strong = fam.estimator(pseudo_count=1e12, suff_stat=est.suff_stat)
    x = fam.frozen(fam.pair[1]).rvs(size=50, random_state=np.random.default_rng(54_609))
    np.testing.assert_allclose(fam.params(_fit(strong, x, None, model)), prior, rtol=1e-6)
    assert count_free_parameters(model) == len(fam.fitted)


@pytest.mark.parametrize("name", NAMES)
def test_optional_and_sequence_wrappings_fit(name: str) -> None:
    fam = FAMILIES[name]
    rng = np.random.default_rng(54_610)
    x = fam.frozen(fam.truth).rvs(size=4000, random_state=rng)
    records = [None if m else int(v) for v, m in zip(x, rng.random(4000) < 0.25, strict=True)]
    fit = optimize(records, OptionalEstimator(fam.estimator()), max_its=fam.its, delta=None, print_iter=0)
    present = np.array([r for r in records if r is not None])
    alone = optimize(present, fam.estimator(), max_its=fam.its, delta=None, print_iter=0)
    np.testing.assert_allclose(fam.params(fit.dist), fam.params(alone), rtol=1e-9)
    assert fit.p == pytest.approx(0.25, abs=0.02)
    lists = [
        [int(v) for v in x[i : i + n]]
        for i, n in zip(range(0, 4000, 8), rng.integers(0, 8, size=500), strict=True)
    ]
    fit = optimize(
        lists,
        SequenceEstimator(fam.estimator(), PoissonEstimator()),
        max_its=fam.its,
        delta=None,
        print_iter=0,
    )
    flat = np.array([v for row in lists for v in row])
    alone = optimize(flat, fam.estimator(), max_its=fam.its, delta=None, print_iter=0)
    np.testing.assert_allclose(fam.params(fit.dist), fam.params(alone), rtol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_moments_profile_and_separation(name: str) -> None:
    fam = FAMILIES[name]
    frozen = fam.frozen(fam.truth)
    mean, var = fam.make(*fam.truth).moments()
    assert mean == pytest.approx(frozen.mean(), rel=1e-12) and var == pytest.approx(frozen.var(), rel=1e-12)
    cell = field_cell(fam.make(*fam.truth).to_dict())
    assert cell["mean"] == pytest.approx(frozen.mean(), rel=1e-12)
    assert cell["sd"] == pytest.approx(frozen.std(), rel=1e-12)
    if "median" in cell:
        assert [cell["q1"], cell["median"], cell["q3"]] == list(frozen.ppf([0.25, 0.5, 0.75]))
    specs = [fam.make(*p).to_dict() for p in fam.pair]
    if not describes(fam.make(*fam.truth), "quantile"):
        assert separation(specs, [0.4, 0.6]) is None  # no quantile: no grid to integrate over
        return
    apart = separation(specs, [0.4, 0.6])
    assert apart is not None and 0.3 < apart <= 1.0
    assert separation([specs[0], specs[0]], [0.4, 0.6]) == pytest.approx(0.0, abs=1e-12)


# -- beta-binomial -------------------------------------------------------------------------------


@pytest.mark.parametrize("params", [(30, 0.8, 1.5), (30, 2.0, 8.0), (7, 0.05, 40.0), (200, 3.0, 0.4)])
def test_beta_binomial_log_pmf_and_tails_are_scipys(params: tuple[int, float, float]) -> None:
    n, a, b = params
    d, ref = BetaBinomialDistribution(n, a, b), st.betabinom(n, a, b)
    k = np.arange(n + 1, dtype=np.float64)
    np.testing.assert_allclose(d.seq_log_density(d.encoder().encode(list(k))), ref.logpmf(k), rtol=1e-12)
    assert [d.log_density(int(v)) for v in k[:: max(n // 10, 1)]] == pytest.approx(
        list(ref.logpmf(k[:: max(n // 10, 1)])), rel=1e-12
    )
    x = np.concatenate([[-3.0, -0.5], k, k[:-1] + 0.5, [n + 4.0]])
    np.testing.assert_allclose(d.log_cdf(x), ref.logcdf(x), rtol=1e-10, atol=1e-14)
    inside = x < n
    shallow = inside & (ref.logsf(x) > -8.0)
    np.testing.assert_allclose(d.log_survival(x[shallow]), ref.logsf(x[shallow]), rtol=1e-9)
    # scipy's logsf is log(1 - cdf), which loses digits deep in the upper tail, and its logcdf sums
    # many terms near 1: the exact sums of its pmf
    log_pmf = ref.logpmf(k)
    below = (x >= 0) & (x < n)  # (at n the sum of scipy's pmf misses 1 by its rounding)
    lower = [logsumexp(log_pmf[k <= v]) for v in x[below]]
    # atol: an error of 1e-12 in a log near 0 is one of 1e-12 relative in the probability
    np.testing.assert_allclose(d.log_cdf(x[below]), lower, rtol=1e-12, atol=1e-12)
    upper = [logsumexp(log_pmf[k > v]) for v in x[inside]]
    np.testing.assert_allclose(d.log_survival(x[inside]), upper, rtol=1e-12, atol=1e-12)
    assert d.log_survival(np.array([n, n + 4.0])).tolist() == [-math.inf, -math.inf]
    assert d.log_cdf(np.array([n + 4.0]))[0] == 0.0 and d.log_cdf(np.array([-0.5]))[0] == -math.inf
    p = np.linspace(0.001, 0.999, 999)
    q = d.quantile(p)
    # the least k with P(X <= k) >= p: checked by the cdf itself, not by scipy's rounding
    assert np.all(ref.cdf(q) >= p * (1 - 1e-12)) and np.all(ref.cdf(q - 1) < p)


def test_beta_binomial_log_pmf_keeps_its_digits_for_large_shapes() -> None:
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    n, a, b = 40, 2.5e6, 7.0e5
    d = BetaBinomialDistribution(n, a, b)
    k = np.arange(n + 1, dtype=np.float64)
    got = d.seq_log_density(d.encoder().encode(list(k)))

    def exact(v: int) -> float:
        lg = mpmath.loggamma
        value = (
            lg(n + 1)
            - lg(v + 1)
            - lg(n - v + 1)
            + lg(v + a)
            + lg(n - v + b)
            - lg(n + a + b)
            - lg(a)
            - lg(b)
            + lg(a + b)
        )
        return float(value)

    np.testing.assert_allclose(got, [exact(int(v)) for v in k], rtol=1e-12)


def test_beta_binomial_solver_reaches_the_mle_from_far_starts_and_never_descends() -> None:
    x = st.betabinom(12, 0.3, 0.2).rvs(size=5000, random_state=np.random.default_rng(54_611))
    h = np.bincount(x, minlength=13).astype(np.float64)
    best = solve_shapes(12, h, (0.3, 0.2), 1e-8, 1e8)
    for start in [(1e-4, 1e-4), (500.0, 0.01), (30.0, 40.0)]:
        np.testing.assert_allclose(solve_shapes(12, h, start, 1e-8, 1e8), best, rtol=1e-9)
    reference = _beta_binomial_reference(12)(x)
    np.testing.assert_allclose(best, reference, rtol=1e-6)


def test_beta_binomial_scans_n_and_reads_under_a_mixture_of_two_ns() -> None:
    rng = np.random.default_rng(54_612)
    x = st.betabinom(9, 1.5, 1.2).rvs(size=3000, random_state=rng)
    fit = optimize(list(x), BetaBinomialEstimator(), max_its=3, print_iter=0)
    assert fit.n == 9
    np.testing.assert_allclose(fit.to_dict()["alpha"], _fit(BetaBinomialEstimator(n=9), x).alpha, rtol=1e-12)
    # a model of n = 5 scores a count above 5 as impossible, through an encoder of n = 9
    enc = BetaBinomialDistribution(9, 1.0, 1.0).encoder().encode([3, 7])
    got = BetaBinomialDistribution(5, 1.5, 2.0).seq_log_density(enc)
    assert got[1] == -math.inf and got[0] == pytest.approx(st.betabinom(5, 1.5, 2.0).logpmf(3), rel=1e-12)
    # n = 1: only the mean is identified; its MLE with the default precision 2
    bern = _fit(BetaBinomialEstimator(n=1), np.array([0, 1, 1, 1]))
    assert bern.alpha / (bern.alpha + bern.beta) == pytest.approx(0.75, rel=1e-12)


# -- log-series ----------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [1e-9, 1e-4, 0.05, 0.3, 0.9, 0.999, 1 - 1e-9])
def test_log_series_log_pmf_is_exact(p: float) -> None:
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    d = LogSeriesDistribution(p)
    x = np.array([1, 2, 3, 5, 10, 100, 1000, 10**5, 10**7], dtype=np.float64)
    got = d.seq_log_density(d.encoder().encode(list(x)))
    big = mpmath.mpf(p)
    exact = [float(k * mpmath.log(big) - mpmath.log(k) - mpmath.log(-mpmath.log1p(-big))) for k in x]
    np.testing.assert_allclose(got, exact, rtol=1e-14)
    # scipy's logpmf is the log of its pmf: equal where that neither underflows nor cancels
    ref = st.logser(p).logpmf(x)
    usable = np.isfinite(ref) & (ref > -700) & (0.01 < p)
    np.testing.assert_allclose(got[usable], ref[usable], rtol=1e-12)
    assert d.log_density(7) == pytest.approx(float(got[3] + 2 * math.log(p) - math.log(7 / 5)), rel=1e-13)
    a = -1 / mpmath.log1p(-big)
    mean, var = a * big / (1 - big), a * big * (1 - a * big) / (1 - big) ** 2
    np.testing.assert_allclose(d.moments(), [float(mean), float(var)], rtol=1e-13)


def test_log_series_likelihood_equation_is_solved_to_machine_precision() -> None:
    for mean in [1 + 1e-12, 1.0001, 1.5, 3.0, 80.0, 1e6, 1e12]:
        t = solve_t(mean)
        assert math.expm1(t) / t == pytest.approx(mean, rel=4e-15)
    only_ones = _fit(LogSeriesEstimator(), np.ones(50))
    assert only_ones.p == 1e-12
    est = LogSeriesEstimator(min_p=1e-3)
    assert _fit(est, np.ones(50)).p == 1e-3


# -- Skellam -------------------------------------------------------------------------------------


@pytest.mark.parametrize("z", [1e-10, 1e-3, 0.5, 5.0, 24.9, 25.1, 300.0, 1e4, 1e6])
def test_log_bessel_orders_match_scipys_ive(z: float) -> None:
    from scipy.special import ive

    top = int(min(3 * z + 60, 3000))
    got = log_bessel_ive_orders(z, top)
    with np.errstate(divide="ignore"):
        ref = np.log(ive(np.arange(top + 1), z))
    usable = ref > -700  # ive underflows beyond; the log keeps going
    np.testing.assert_allclose(got[usable], ref[usable], rtol=1e-13, atol=1e-13)
    assert np.all(np.diff(got) < 0) and np.isfinite(got).all()


@pytest.mark.parametrize("params", [(4.0, 1.5), (0.2, 7.0), (1e-3, 2e-3), (150.0, 140.0), (1e4, 9e3)])
def test_skellam_log_pmf_is_exact(params: tuple[float, float]) -> None:
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    mu1, mu2 = params
    d, ref = SkellamDistribution(mu1, mu2), st.skellam(mu1, mu2)
    k = np.arange(int(ref.ppf(1e-10)) - 5, int(ref.ppf(1 - 1e-10)) + 6, dtype=np.float64)
    got = d.seq_log_density(d.encoder().encode(list(k)))
    np.testing.assert_allclose(got, ref.logpmf(k), rtol=1e-12)
    m1, m2 = mpmath.mpf(mu1), mpmath.mpf(mu2)
    z = 2 * mpmath.sqrt(m1 * m2)
    step = max(len(k) // 12, 1) if z < 1000 else len(k)  # (mpmath's series stalls at a large z)
    picks = k[::step]
    exact = [
        float(-(m1 + m2) + v / 2 * mpmath.log(m1 / m2) + mpmath.log(mpmath.besseli(abs(v), z))) for v in picks
    ]
    np.testing.assert_allclose(got[::step], exact, rtol=1e-13)
    assert d.log_density(int(k[3])) == pytest.approx(float(got[3]), rel=1e-14)
    # far outside the table's range the direct path (no table) agrees
    sparse = np.array([k[0], k[-1], k[0] - 5000.0])
    direct = d.seq_log_density(d.encoder().encode(list(sparse)))
    np.testing.assert_allclose(direct[:2], [got[0], got[-1]], rtol=1e-14)
    assert direct[2] < got[0]
    np.testing.assert_allclose(d.moments(), [ref.mean(), ref.var()], rtol=1e-14)


def test_skellam_posterior_mean_of_n2_is_the_exact_conditional_mean() -> None:
    mu1, mu2 = 3.0, 5.5
    d = SkellamDistribution(mu1, mu2)
    k = np.arange(-12.0, 9.0)
    n2 = np.arange(0, 200.0)
    # E[N2 | N1 - N2 = k] by summing the joint Poisson probabilities
    joint = st.poisson(mu1).logpmf(k[:, None] + n2[None, :]) + st.poisson(mu2).logpmf(n2[None, :])
    weights = np.exp(joint - logsumexp(joint, axis=1, keepdims=True))
    np.testing.assert_allclose(d.expected_n2(k), weights @ n2, rtol=1e-12)


@pytest.mark.parametrize("params", [(4.0, 1.5), (0.2, 7.0), (150.0, 140.0), (1e-3, 2e-3)])
def test_skellam_tails_are_the_sums_of_its_pmf(params: tuple[float, float]) -> None:
    mu1, mu2 = params
    d, ref = SkellamDistribution(mu1, mu2), st.skellam(mu1, mu2)
    k = np.arange(int(ref.ppf(1e-10)) - 5, int(ref.ppf(1 - 1e-10)) + 6, dtype=np.float64)
    x = np.concatenate([k, k + 0.5])
    wide = np.arange(k[0] - 300, k[-1] + 301)
    log_pmf = ref.logpmf(wide)
    lower = [logsumexp(log_pmf[wide <= v]) for v in x]
    upper = [logsumexp(log_pmf[wide > v]) for v in x]
    # atol: an error of 1e-12 in a log near 0 is one of 1e-12 relative in the probability
    np.testing.assert_allclose(d.log_cdf(x), lower, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(d.log_survival(x), upper, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(d.log_cdf(x), ref.logcdf(x), rtol=1e-9, atol=1e-12)
    # far beyond scipy's underflow: the sum of our own pmf (checked against mpmath above)
    beyond = np.arange(k[-1] + 201.0, k[-1] + 3000.0)
    far = d.log_survival(np.array([k[-1] + 200.0]))[0]
    assert far == pytest.approx(float(logsumexp(d.seq_log_density(beyond))), rel=1e-12)
    assert (
        d.log_cdf(np.array([-math.inf]))[0] == -math.inf
        and d.log_survival(np.array([math.inf]))[0] == -math.inf
    )
    p = np.linspace(0.001, 0.999, 999)
    q = d.quantile(p)
    # the least k with P(X <= k) >= p: checked by the cdf itself, not by scipy's rounding
    assert np.all(ref.cdf(q) >= p * (1 - 1e-12)) and np.all(ref.cdf(q - 1) < p)
    assert d.quantile(np.array([0.0, 1.0])).tolist() == [-math.inf, math.inf]
