"""Beta, negative binomial, von Mises and Student-t: densities against closed forms written here
independently (math.lgamma, power series), M-step solvers at their documented tolerance, parameter
recovery, extremes, sampler moments, JSON and bad input. The contract suite covers the rest."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError, DataValueError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.stats._special import digamma, i1_over_i0, log_minus_digamma, one_minus_i1_over_i0
from mixle_spark.stats.base import distribution_from_dict, estimator_from_dict
from mixle_spark.stats.beta import BETA_RTOL, BetaDistribution, BetaEncoder, BetaEstimator, solve_beta
from mixle_spark.stats.gaussian import GaussianDistribution
from mixle_spark.stats.mixture import MixtureDistribution, MixtureEstimator
from mixle_spark.stats.negative_binomial import (
    NegativeBinomialAccumulator,
    NegativeBinomialDistribution,
    NegativeBinomialEncoder,
    NegativeBinomialEstimator,
    solve_r,
)
from mixle_spark.stats.student_t import (
    StudentTAccumulator,
    StudentTDistribution,
    StudentTEncoder,
    StudentTEstimator,
)
from mixle_spark.stats.von_mises import VonMisesDistribution, VonMisesEncoder, VonMisesEstimator, solve_kappa

N = 20_000


def _fit(est, records, model=None, weights=None):
    """One M-step from the statistics of ``records`` (E-step against ``model``)."""
    enc = est.encoder().encode(records)
    acc = est.accumulator_factory().make()
    w = np.ones(len(records)) if weights is None else weights
    acc.seq_update(enc, w, model)
    return est.estimate(float(w.sum()), acc.value())


def _em(est, records, its):
    """``its`` EM steps from the first-pass model; returns the model and the log-likelihoods."""
    x = np.asarray(records, dtype=np.float64)
    model = _fit(est, x)
    lls = []
    for _ in range(its):
        lls.append(float(model.seq_log_density(x).sum()))
        model = _fit(est, x, model)
    return model, np.array(lls)


def _json_round_trip(dist, est):
    assert distribution_from_dict(json.loads(json.dumps(dist.to_dict()))).to_dict() == dist.to_dict()
    again = estimator_from_dict(json.loads(json.dumps(est.to_dict())))
    assert again == est and again.to_dict() == est.to_dict()


# -- beta ----------------------------------------------------------------------------------------


def _beta_logpdf(a, b, x):
    return (
        math.lgamma(a + b)
        - math.lgamma(a)
        - math.lgamma(b)
        + (a - 1) * math.log(x)
        + (b - 1) * math.log1p(-x)
    )


@pytest.mark.parametrize(("a", "b"), [(2.0, 5.0), (0.3, 0.6), (1.0, 1.0), (40.0, 0.7)])
def test_beta_log_density_closed_form(a, b):
    x = [1e-9, 0.01, 0.3, 0.5, 0.77, 0.999999]
    dist = BetaDistribution(a, b)
    got = dist.seq_log_density(dist.encoder().encode(x))
    np.testing.assert_allclose(got, [_beta_logpdf(a, b, v) for v in x], rtol=1e-12, atol=1e-12)
    assert dist.log_density(0.0) == dist.log_density(1.0) == dist.log_density(2.0) == -math.inf


def test_beta_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    x = np.linspace(0.001, 0.999, 50)
    dist = BetaDistribution(0.4, 3.5)
    np.testing.assert_allclose(dist.seq_log_density(dist.encoder().encode(x)), stats.beta.logpdf(x, 0.4, 3.5))


@pytest.mark.parametrize(("a", "b", "tol"), [(2.0, 5.0, 0.05), (0.3, 0.6, 0.05), (50.0, 20.0, 0.06)])
def test_beta_recovery_and_gradient_at_the_solution(a, b, tol):
    """n = 20 000: both shapes within ``tol`` relative (about 4 standard errors); the likelihood
    equations hold at the estimate to rounding."""
    x = BetaDistribution(a, b).sampler(1).sample(N)
    fit = _fit(BetaEstimator(), list(x))
    assert fit.alpha == pytest.approx(a, rel=tol)
    assert fit.beta == pytest.approx(b, rel=tol)
    s1, s2 = np.mean(np.log(x)), np.mean(np.log1p(-x))
    psi_ab = digamma(fit.alpha + fit.beta)
    assert abs(s1 - digamma(fit.alpha) + psi_ab) < 1e-12 * max(1.0, abs(s1))
    assert abs(s2 - digamma(fit.beta) + psi_ab) < 1e-12 * max(1.0, abs(s2))


def test_beta_solver_tolerance_and_extremes():
    assert BETA_RTOL == 1e-12
    # exact inputs from known shapes (digamma differences) give the shapes back
    for a, b in [(1e-3, 5.0), (0.5, 0.5), (7.0, 2e3)]:
        s1, s2 = digamma(a) - digamma(a + b), digamma(b) - digamma(a + b)
        got = solve_beta(s1, s2)
        assert got == pytest.approx((a, b), rel=1e-8)
    # (nearly) constant data: the larger shape hits max_shape, the mean stays right
    a, b = solve_beta(math.log(0.3), math.log(0.7), max_shape=1e6)
    assert max(a, b) == 1e6 and a / (a + b) == pytest.approx(0.3, rel=1e-5)
    dist = _fit(BetaEstimator(max_shape=1e6), [0.3] * 10)
    assert math.isfinite(dist.log_density(0.3)) and math.isfinite(dist.log_density(0.9))


def test_beta_prior_and_zero_weight():
    est = BetaEstimator(pseudo_count=5.0, suff_stat=(2.0, 3.0))
    only_prior = est.estimate(0.0, (0.0, 0.0, 0.0))
    assert (only_prior.alpha, only_prior.beta) == pytest.approx((2.0, 3.0), rel=1e-12)
    assert _fit(
        BetaEstimator(pseudo_count=1.0, suff_stat=(2.0, 3.0)), [0.4] * 3, weights=np.zeros(3)
    ).alpha == (pytest.approx(2.0, rel=1e-9))
    strong = _fit(BetaEstimator(pseudo_count=1e9, suff_stat=(2.0, 3.0)), [0.01, 0.02, 0.9])
    assert (strong.alpha, strong.beta) == pytest.approx((2.0, 3.0), rel=1e-6)
    assert BetaEstimator().estimate(0.0, (0.0, 0.0, 0.0)).to_dict() == BetaDistribution(1.0, 1.0).to_dict()


def test_beta_sampler_moments_and_open_interval():
    a, b = 2.0, 5.0
    x = BetaDistribution(a, b).sampler(3).sample(N)
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    assert np.mean(x) == pytest.approx(mean, abs=4 * math.sqrt(var / N))
    assert np.var(x) == pytest.approx(var, rel=0.05)
    tiny = BetaDistribution(0.02, 0.02).sampler(4).sample(5000)  # many draws round to 0 or 1
    assert np.all((tiny > 0) & (tiny < 1))
    assert np.all(np.isfinite(BetaDistribution(0.02, 0.02).seq_log_density(BetaEncoder().encode(tiny))))
    assert isinstance(BetaDistribution(a, b).sampler(1).sample(), float)


def test_beta_json_and_errors():
    _json_round_trip(
        BetaDistribution(0.25, 7.0),
        BetaEstimator(pseudo_count=2.0, suff_stat=(1.5, 2.5), min_shape=1e-6, max_shape=1e5, keys="b"),
    )
    enc = BetaEncoder()
    for bad, shown in [
        ([0.5, 1.0], r"1.0 \(row 2 of 2\)"),
        ([0.0], r"0.0 \(row 1 of 1\)"),
        ([0.2, 1.5], "1.5"),
    ]:
        with pytest.raises(DataValueError, match=r"strictly between 0 and 1 for BetaEstimator, got " + shown):
            enc.encode(bad)
        with pytest.raises(DataValueError, match=shown):
            enc.from_arrow(pa.array(bad, type=pa.float64()))
    with pytest.raises(DataValueError, match="got nan"):
        enc.encode([0.5, math.nan])
    with pytest.raises(DataTypeError, match="string 'x'"):
        enc.encode([0.5, "x"])
    with pytest.raises(SpecError, match="BetaDistribution: alpha must be a positive finite number, got -1"):
        BetaDistribution(-1, 2.0)
    with pytest.raises(SpecError, match=r"BetaEstimator: suff_stat must be .*got \(1.0, 0.0\)"):
        BetaEstimator(suff_stat=(1.0, 0.0))
    with pytest.raises(SpecError, match=r"\(min_shape, max_shape\).*got \(2.0, 1.0\)"):
        BetaEstimator(min_shape=2.0, max_shape=1.0)


# -- negative binomial ---------------------------------------------------------------------------


def _nb_logpmf(r, p, k):
    return math.lgamma(k + r) - math.lgamma(r) - math.lgamma(k + 1) + r * math.log(p) + k * math.log1p(-p)


@pytest.mark.parametrize(("r", "p"), [(1.0, 0.25), (0.3, 0.05), (7.5, 0.6), (250.0, 0.99)])
def test_negative_binomial_log_density_closed_form(r, p):
    k = [0, 1, 2, 5, 17, 300]
    dist = NegativeBinomialDistribution(r, p)
    got = dist.seq_log_density(dist.encoder().encode(k))
    np.testing.assert_allclose(got, [_nb_logpmf(r, p, v) for v in k], rtol=1e-11, atol=1e-11)
    assert dist.log_density(-1) == dist.log_density(2.5) == dist.log_density(math.inf) == -math.inf


def test_negative_binomial_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    k = np.arange(0, 60)
    dist = NegativeBinomialDistribution(2.7, 0.15)
    np.testing.assert_allclose(
        dist.seq_log_density(dist.encoder().encode(k)), stats.nbinom.logpmf(k, 2.7, 0.15)
    )


def test_negative_binomial_huge_r_is_poisson():
    """NB(r, p) -> Poisson(m), m = r (1 - p) / p: log-pmf difference ((k - m)^2 - k) / (2 r) + O(r^-2).

    ``m`` is taken from the stored ``p`` (1 - p is exact in floats), whose rounding moves the mean by
    ~1e-16 r / m relative."""
    r = 1e9
    k = np.arange(0, 30, dtype=np.float64)
    nb = NegativeBinomialDistribution(r, r / (r + 4.0))
    m = r * (1.0 - nb.p) / nb.p
    poisson = np.array([v * math.log(m) - m - math.lgamma(v + 1) for v in k])
    diff = nb.seq_log_density(nb.encoder().encode(k)) - poisson
    np.testing.assert_allclose(diff, ((k - m) ** 2 - k) / (2 * r), atol=2e-12)


def _profile_score(r, values, weights):
    """d/dr of the profile log-likelihood from sums of 1 / (r + i) (integer counts), in plain Python."""
    mean = math.fsum(values * weights) / math.fsum(weights)
    terms = [
        w * math.fsum(1.0 / (r + i) for i in range(int(v))) for v, w in zip(values, weights, strict=True)
    ]
    return math.fsum(terms) - math.fsum(weights) * math.log1p(mean / r)


@pytest.mark.parametrize(("r", "p", "tol"), [(3.0, 0.4, 0.06), (0.5, 0.05, 0.05), (40.0, 0.8, 0.3)])
def test_negative_binomial_recovery_and_score_at_the_solution(r, p, tol):
    """n = 20 000: r within ``tol`` relative (about 4 standard errors), the mean within 2%; the
    profile score vanishes at the estimate (its scale: Σw / r)."""
    x = NegativeBinomialDistribution(r, p).sampler(2).sample(N)
    fit = _fit(NegativeBinomialEstimator(), list(x))
    assert fit.r == pytest.approx(r, rel=tol)
    assert fit.mean == pytest.approx(np.mean(x), rel=1e-9)
    assert fit.mean == pytest.approx(r * (1 - p) / p, rel=0.02)
    values, counts = np.unique(x, return_counts=True)
    score = _profile_score(fit.r, values.astype(float), counts.astype(float))
    assert abs(score) < 1e-7 * N / fit.r


def test_negative_binomial_underdispersed_data_give_max_r():
    underdispersed = np.random.default_rng(5).binomial(10, 0.5, 2000)  # variance 2.5 < mean 5
    values, counts = np.unique(underdispersed, return_counts=True)
    assert solve_r(values, counts.astype(float), max_r=1e7) == 1e7
    constant = _fit(NegativeBinomialEstimator(max_r=1e6), [2, 2, 2, 2])
    assert constant.r == 1e6 and constant.mean == pytest.approx(2.0, rel=1e-9)
    zeros = _fit(NegativeBinomialEstimator(), [0, 0, 0])
    assert zeros.p == 1.0 - 1e-12 and math.isfinite(zeros.log_density(3))


def test_negative_binomial_histogram_statistics_merge():
    x = np.array([0, 3, 3, 1, 70_000, 2, 70_000], dtype=np.float64)  # one batch takes np.unique's path
    w = np.array([1.0, 0.5, 0.5, 2.0, 1.0, 0.0, 3.0])
    enc = NegativeBinomialEncoder()
    whole = NegativeBinomialAccumulator()
    whole.seq_update(enc.encode(x), w, None)
    values, weights = whole.value()
    assert values.tolist() == [0.0, 1.0, 3.0, 70_000.0] and weights.tolist() == [1.0, 2.0, 1.0, 4.0]
    parts = [NegativeBinomialAccumulator() for _ in range(2)]
    parts[0].seq_update(enc.encode(x[:4]), w[:4], None)
    parts[1].seq_update(enc.encode(x[4:]), w[4:], None)
    merged = NegativeBinomialAccumulator().combine(parts[1].value()).combine(parts[0].value())
    for a, b in zip(merged.value(), whole.value(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_negative_binomial_prior_sampler_json_and_errors():
    est = NegativeBinomialEstimator(pseudo_count=1e6, suff_stat=(2.0, 0.3))
    strong = _fit(est, [0, 50, 3])
    assert (strong.r, strong.p) == pytest.approx((2.0, 0.3), rel=0.01)
    empty = NegativeBinomialEstimator(suff_stat=(2.0, 0.3)).estimate(0.0, (np.zeros(0), np.zeros(0)))
    assert empty.to_dict() == NegativeBinomialDistribution(2.0, 0.3).to_dict()
    r, p = 2.5, 0.3
    draws = NegativeBinomialDistribution(r, p).sampler(6).sample(N)
    mean, var = r * (1 - p) / p, r * (1 - p) / p**2
    assert np.mean(draws) == pytest.approx(mean, abs=4 * math.sqrt(var / N))
    assert np.var(draws) == pytest.approx(var, rel=0.06)
    _json_round_trip(
        NegativeBinomialDistribution(0.125, 0.875),
        NegativeBinomialEstimator(pseudo_count=1.0, suff_stat=(3.0, 0.5), min_r=1e-3, max_r=1e5, min_p=1e-6),
    )
    enc = NegativeBinomialEncoder()
    expected = r"expected a non-negative integer count for NegativeBinomialEstimator, got "
    with pytest.raises(DataValueError, match=expected + r"-1.0 \(row 2 of 2\)"):
        enc.encode([1, -1])
    with pytest.raises(DataValueError, match=expected + r"2.5 \(row 1 of 2\)"):
        enc.from_arrow(pa.array([2.5, 1.0]))
    with pytest.raises(DataValueError, match=expected + "inf"):
        enc.encode([math.inf])
    with pytest.raises(
        SpecError, match=r"NegativeBinomialDistribution: p must be a probability in \(0, 1\), got 1.0"
    ):
        NegativeBinomialDistribution(1.0, 1.0)
    with pytest.raises(SpecError, match="r must be a positive finite number, got 0"):
        NegativeBinomialDistribution(0, 0.5)
    with pytest.raises(SpecError, match=r"suff_stat must be .*got \(1.0, 1.5\)"):
        NegativeBinomialEstimator(suff_stat=(1.0, 1.5))


# -- von Mises -----------------------------------------------------------------------------------


def _log_i0_series(k):
    """log I0(k) by its power series (all terms positive; fine in floats for k <= 50)."""
    term, total, j = 1.0, 1.0, 0
    while term > 1e-17 * total:
        j += 1
        term *= (k / 2) ** 2 / (j * j)
        total += term
    return math.log(total)


@pytest.mark.parametrize(("mu", "kappa"), [(0.0, 0.0), (1.0, 2.0), (-2.5, 0.01), (3.1, 40.0)])
def test_von_mises_log_density_closed_form(mu, kappa):
    x = [-3.0, -1.0, 0.0, 0.5, 2.9, 10.0]
    dist = VonMisesDistribution(mu, kappa)
    expected = [kappa * math.cos(v - mu) - math.log(2 * math.pi) - _log_i0_series(kappa) for v in x]
    np.testing.assert_allclose(
        dist.seq_log_density(dist.encoder().encode(x)), expected, rtol=1e-12, atol=1e-12
    )
    # angles are taken modulo 2 pi
    assert dist.log_density(0.5 + 4 * math.pi) == pytest.approx(dist.log_density(0.5), abs=1e-12)


def test_von_mises_large_kappa_density_and_scipy():
    kappa = 1e4
    dist = VonMisesDistribution(0.3, kappa)
    # at mu: log I0(k) = k - log(2 pi k) / 2 + log(1 + 1/(8k) + 9/(128k^2) + ...)
    log_i0 = kappa - 0.5 * math.log(2 * math.pi * kappa) + math.log1p(1 / (8 * kappa) + 9 / (128 * kappa**2))
    assert dist.log_density(0.3) == pytest.approx(kappa - math.log(2 * math.pi) - log_i0, rel=1e-12)
    stats = pytest.importorskip("scipy.stats")
    x = np.linspace(0.25, 0.35, 11)
    np.testing.assert_allclose(
        dist.seq_log_density(dist.encoder().encode(x)), stats.vonmises.logpdf(x, kappa, loc=0.3)
    )


@pytest.mark.parametrize(("mu", "kappa", "tol"), [(1.0, 2.0, 0.04), (-3.1, 1e4, 0.04), (0.5, 0.3, 0.15)])
def test_von_mises_recovery_and_solver(mu, kappa, tol):
    """n = 20 000: kappa within ``tol`` relative (about 4 standard errors), mu within 4 standard
    errors; A(kappa) equals the mean resultant length at the estimate to 1e-12 relative (in 1 - A)."""
    x = VonMisesDistribution(mu, kappa).sampler(7).sample(N)
    assert np.all((x >= -math.pi) & (x < math.pi))
    fit = _fit(VonMisesEstimator(), list(x))
    assert fit.kappa == pytest.approx(kappa, rel=tol)
    gap = math.remainder(fit.mu - mu, 2 * math.pi)
    assert abs(gap) < 4 / math.sqrt(N * kappa * float(i1_over_i0(kappa)))
    rbar = math.hypot(np.mean(np.cos(x)), np.mean(np.sin(x)))
    assert float(one_minus_i1_over_i0(fit.kappa)) == pytest.approx(1 - rbar, rel=1e-9)


def test_von_mises_extremes():
    assert solve_kappa(0.0) == 0.0
    assert solve_kappa(1.0, max_kappa=1e6) == 1e6
    for kappa in (1e-9, 0.7, 30.0, 1e5):
        assert solve_kappa(float(i1_over_i0(kappa))) == pytest.approx(kappa, rel=1e-9)
    # kappa ~ 0: uniform
    uniform = VonMisesDistribution(1.0, 1e-12)
    assert uniform.log_density(2.0) == pytest.approx(-math.log(2 * math.pi), abs=1e-11)
    spread = uniform.sampler(1).sample(N)
    assert abs(np.mean(np.cos(spread))) < 4 / math.sqrt(2 * N)
    # opposite angles cancel: zero resultant -> uniform
    half = _fit(VonMisesEstimator(), [0.0, math.pi])
    assert half.kappa < 1e-8
    # all at one angle: kappa capped, density finite
    same = _fit(VonMisesEstimator(max_kappa=1e6), [0.4] * 5)
    assert same.kappa == 1e6 and same.mu == pytest.approx(0.4) and math.isfinite(same.log_density(0.0))


def test_von_mises_sampler_moments_prior_json_and_errors():
    mu, kappa = -2.0, 3.0
    x = VonMisesDistribution(mu, kappa).sampler(8).sample(N)
    a = float(i1_over_i0(kappa))
    assert np.mean(np.cos(x - mu)) == pytest.approx(a, abs=4 / math.sqrt(N))
    assert abs(np.mean(np.sin(x - mu))) < 4 / math.sqrt(N)
    wrapped = VonMisesDistribution(0.0, 4e6).sampler(2).sample(N)  # wrapped-normal branch
    assert np.std(wrapped) == pytest.approx(1 / math.sqrt(4e6), rel=0.03)
    strong = _fit(VonMisesEstimator(pseudo_count=1e9, suff_stat=(1.0, 5.0)), [0.0, 2.0, -1.0])
    assert (strong.mu, strong.kappa) == pytest.approx((1.0, 5.0), rel=1e-6)
    assert (
        VonMisesEstimator().estimate(0.0, (0.0, 0.0, 0.0)).to_dict() == VonMisesDistribution(0, 0).to_dict()
    )
    assert VonMisesDistribution(7.0, 1.0).mu == pytest.approx(7.0 - 2 * math.pi)
    _json_round_trip(
        VonMisesDistribution(-math.pi, 123.5),
        VonMisesEstimator(pseudo_count=3.0, suff_stat=(0.5, 2.0), max_kappa=1e5, name="angle"),
    )
    enc = VonMisesEncoder()
    with pytest.raises(
        DataValueError, match=r"expected a finite angle in radians for VonMisesEstimator, got inf"
    ):
        enc.encode([0.1, math.inf])
    with pytest.raises(DataValueError, match=r"got nan \(row 1 of 1\)"):
        enc.from_arrow(pa.array([math.nan]))
    with pytest.raises(DataTypeError, match="string 'north'"):
        enc.encode(["north"])
    with pytest.raises(SpecError, match=r"kappa must be a non-negative finite number, got -1\.0"):
        VonMisesDistribution(0.0, -1.0)
    with pytest.raises(SpecError, match="mu must be a finite number, got nan"):
        VonMisesDistribution(math.nan, 1.0)


# -- Student-t -----------------------------------------------------------------------------------


def _t_logpdf(mu, sigma, dof, x):
    z = (x - mu) / sigma
    return (
        math.lgamma((dof + 1) / 2)
        - math.lgamma(dof / 2)
        - 0.5 * math.log(dof * math.pi)
        - math.log(sigma)
        - (dof + 1) / 2 * math.log1p(z * z / dof)
    )


@pytest.mark.parametrize(
    ("mu", "sigma", "dof"), [(0.0, 1.0, 1.0), (2.0, 0.5, 3.5), (-1e3, 40.0, 0.3), (5.0, 2.0, 80)]
)
def test_student_t_log_density_closed_form(mu, sigma, dof):
    x = [-1e6, -3.0, 0.0, 1.0, 2.0, 7.5, 1e12]
    dist = StudentTDistribution(mu, sigma, dof)
    got = dist.seq_log_density(dist.encoder().encode(x))
    np.testing.assert_allclose(got, [_t_logpdf(mu, sigma, dof, v) for v in x], rtol=1e-12, atol=1e-12)
    assert dist.log_density(math.nan) == -math.inf
    assert math.isfinite(dist.log_density(1e300))  # far tails: no overflow


def test_student_t_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    x = np.linspace(-30, 30, 61)
    dist = StudentTDistribution(1.5, 2.0, 3.0)
    np.testing.assert_allclose(
        dist.seq_log_density(dist.encoder().encode(x)), stats.t.logpdf(x, 3.0, loc=1.5, scale=2.0), rtol=1e-13
    )


@pytest.mark.parametrize("dof", [1e4, 1e6, 1e9])
def test_student_t_large_dof_approaches_the_gaussian(dof):
    """log t - log N = (z^4 - 2 z^2 - 1) / (4 dof) + O(dof^-2): the normaliser and the kernel keep their
    accuracy for a large dof (the difference is far below either term)."""
    z = np.linspace(-4.0, 4.0, 17)
    dist = StudentTDistribution(0.0, 1.0, dof)
    gauss = -0.5 * z * z - 0.5 * math.log(2 * math.pi)
    diff = dist.seq_log_density(z) - gauss
    np.testing.assert_allclose(diff * dof, (z**4 - 2 * z**2 - 1) / 4, rtol=2e-3, atol=1e-5)


def test_student_t_em_never_decreases_and_recovers():
    """n = 20 000, 150 EM steps: the log-likelihood never decreases (beyond rounding); mu within 0.05,
    sigma within 4%, dof within 12% (about 4 standard errors)."""
    x = StudentTDistribution(1.5, 2.0, 4.0).sampler(11).sample(N)
    fit, lls = _em(StudentTEstimator(), x, 150)
    assert np.all(np.diff(lls) >= -1e-10 * np.abs(lls[1:]))
    assert lls[-1] - lls[-2] < 1e-6  # converged
    assert fit.mu == pytest.approx(1.5, abs=0.05)
    assert fit.sigma == pytest.approx(2.0, rel=0.04)
    assert fit.dof == pytest.approx(4.0, rel=0.12)


def test_student_t_m_step_solves_the_dof_equation():
    """The dof of the M-step solves log(v/2) - digamma(v/2) = -mean(E[log tau - tau | x] + 1) to the
    documented 1e-12 (gamma's shape solver); the sums are recomputed here from their definition."""
    x = StudentTDistribution(0.0, 1.0, 2.5).sampler(12).sample(5000)
    model = StudentTDistribution(0.1, 1.2, 3.0)
    fit = _fit(StudentTEstimator(), list(x), model)
    z2 = ((x - model.mu) / model.sigma) ** 2
    u = (model.dof + 1) / (model.dof + z2)
    h = (model.dof + 1) / 2
    e_log_tau_minus_tau = np.log(u) - u + digamma(h) - math.log(h)
    rhs = -np.mean(e_log_tau_minus_tau + 1)
    assert float(log_minus_digamma(fit.dof / 2)) == pytest.approx(rhs, rel=1e-11)
    assert fit.mu == pytest.approx(np.sum(u * x) / np.sum(u), rel=1e-12, abs=1e-14)
    assert fit.sigma**2 == pytest.approx(np.sum(u * (x - fit.mu) ** 2) / len(x), rel=1e-11)


def test_student_t_first_pass_fixed_dof_and_gaussian_data():
    x = np.random.default_rng(13).normal(3.0, 2.0, N)
    first = _fit(StudentTEstimator(), list(x))  # no model: Gaussian moments, dof = init_dof = 4
    assert first.dof == 4.0 and first.mu == pytest.approx(np.mean(x), rel=1e-12)
    assert first.sigma**2 * 4 / 2 == pytest.approx(np.var(x), rel=1e-12)  # the variance matches
    assert _fit(StudentTEstimator(init_dof=1.5), list(x)).sigma == pytest.approx(np.std(x), rel=1e-12)
    fixed, _ = _em(StudentTEstimator(dof=7.0), x, 20)
    assert fixed.dof == 7.0
    # Gaussian data: the dof grows without bound (slowly: EM), the fit approaches the Gaussian one.
    gaussian_like, lls = _em(StudentTEstimator(), x, 60)
    assert gaussian_like.dof > 10 and np.all(np.diff(lls) > 0)
    gauss_ll = np.sum(-0.5 * ((x - np.mean(x)) ** 2 / np.var(x) + math.log(2 * math.pi * np.var(x))))
    assert 0 < gauss_ll - lls[-1] < 0.005 * N


def test_student_t_heavy_tails_and_far_outliers():
    """dof 0.7 with three absurd outliers (their squares overflow): the E-step stays finite (bounded
    terms in 1 / |z|), the likelihood never decreases, and EM still finds the bulk."""
    x = StudentTDistribution(-4.0, 0.5, 0.7).sampler(14).sample(5000)
    x[:3] = [1e200, -1e250, 1e300]
    start = StudentTDistribution(0.0, 1.0, 2.0)
    acc = StudentTAccumulator()
    acc.seq_update(x, np.ones(len(x)), start)
    assert all(math.isfinite(v) for v in acc.value())
    model, lls = start, []
    for _ in range(100):
        lls.append(float(model.seq_log_density(x).sum()))
        model = _fit(StudentTEstimator(), x, model)
    assert np.all(np.isfinite(lls)) and np.all(np.diff(lls) >= -1e-10 * np.abs(lls[1:]))
    # the three outliers make the tails heavier: dof below the truth
    assert model.mu == pytest.approx(-4.0, abs=0.05) and 0.3 < model.dof < 0.7
    # From the first pass, whose moments overflow: a very wide start that EM narrows.
    first = _fit(StudentTEstimator(), x)
    assert first.sigma == pytest.approx(1e150 * math.sqrt(0.5), rel=1e-15) and math.isfinite(
        first.log_density(1e300)
    )
    fit, lls = _em(StudentTEstimator(), x, 150)
    assert np.all(np.diff(lls) >= -1e-10 * np.abs(lls[1:]))
    assert fit.mu == pytest.approx(model.mu, abs=1e-3) and fit.dof == pytest.approx(model.dof, rel=0.01)


def test_student_t_mixture_threads_the_component_models():
    truth = MixtureDistribution(
        [StudentTDistribution(-4.0, 1.0, 3.0), StudentTDistribution(3.0, 0.5, 8.0)], [0.4, 0.6]
    )
    x = list(truth.sampler(15).sample(5000))
    fit = optimize(
        x, MixtureEstimator([StudentTEstimator()] * 2), max_its=60, delta=None, seed=3, print_iter=0
    )
    comps = sorted(fit.components, key=lambda c: c.mu)
    assert comps[0].mu == pytest.approx(-4.0, abs=0.1) and comps[1].mu == pytest.approx(3.0, abs=0.05)
    assert comps[0].sigma == pytest.approx(1.0, rel=0.1) and comps[1].sigma == pytest.approx(0.5, rel=0.1)
    assert sorted(fit.w) == pytest.approx([0.4, 0.6], abs=0.02)


def test_student_t_prior_and_zero_weight():
    est = StudentTEstimator(pseudo_count=2.0, suff_stat=(1.0, 3.0, 5.0))
    only_prior = est.estimate(0.0, (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
    assert (only_prior.mu, only_prior.sigma) == pytest.approx((1.0, 3.0), rel=1e-12)
    strong = StudentTEstimator(pseudo_count=1e9, suff_stat=(1.0, 3.0, 5.0))
    fit = _fit(strong, [0.0, 10.0, -4.0], StudentTDistribution(0.0, 1.0, 2.0))
    assert (fit.mu, fit.sigma, fit.dof) == pytest.approx((1.0, 3.0, 5.0), rel=1e-6)
    empty = StudentTEstimator().estimate(0.0, (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
    assert empty.to_dict() == StudentTDistribution(0.0, 1.0, 4.0).to_dict()


def test_student_t_sampler_moments_json_and_errors():
    mu, sigma, dof = 2.0, 1.5, 8.0
    x = StudentTDistribution(mu, sigma, dof).sampler(16).sample(N)
    var = sigma**2 * dof / (dof - 2)
    assert np.mean(x) == pytest.approx(mu, abs=4 * math.sqrt(var / N))
    assert np.var(x) == pytest.approx(var, rel=0.06)
    _json_round_trip(
        StudentTDistribution(-0.5, 0.25, 2.5),
        StudentTEstimator(
            init_dof=10.0,
            pseudo_count=1.0,
            suff_stat=(0.0, 1.0, 3.0),
            min_sigma=1e-3,
            min_dof=0.5,
            max_dof=1e4,
        ),
    )
    _json_round_trip(StudentTDistribution(0.0, 1.0, 1e8), StudentTEstimator(dof=3.0, keys="t"))
    enc = StudentTEncoder()
    with pytest.raises(
        DataValueError, match=r"expected a finite number for StudentTEstimator, got nan \(row 2 of 2\)"
    ):
        enc.encode([1.0, math.nan])
    with pytest.raises(DataValueError, match=r"got -inf \(row 1 of 1\)"):
        enc.from_arrow(pa.array([-math.inf]))
    with pytest.raises(DataTypeError, match="string 'abc'"):
        enc.encode(["abc"])
    with pytest.raises(
        SpecError, match=r"StudentTDistribution: sigma must be a positive finite number, got 0\.0"
    ):
        StudentTDistribution(0.0, 0.0, 1.0)
    with pytest.raises(SpecError, match="dof must be a positive finite number, got inf"):
        StudentTDistribution(0.0, 1.0, math.inf)
    with pytest.raises(SpecError, match=r"init_dof must be a number in \[min_dof, max_dof\].*got 1000.0"):
        StudentTEstimator(init_dof=1000.0, max_dof=100.0)
    with pytest.raises(SpecError, match=r"suff_stat must be a triple .*got \(0.0, 1.0\)"):
        StudentTEstimator(suff_stat=(0.0, 1.0))
    with pytest.raises(SpecError, match=r"StudentTEstimator: dof must be None .*got -2"):
        StudentTEstimator(dof=-2)
    with pytest.raises(SpecError, match=r"needs the current StudentTDistribution.*GaussianDistribution"):
        StudentTAccumulator().seq_update(np.zeros(2), np.ones(2), GaussianDistribution(0.0, 1.0))


def test_no_warnings_from_the_new_families_on_extreme_inputs():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StudentTDistribution(0.0, 1e-4, 0.01).seq_log_density(np.array([1e308, -1e308, 0.0]))
        BetaDistribution(1e-8, 1e8).seq_log_density(BetaEncoder().encode([5e-324, 0.5]))
        VonMisesDistribution(0.0, 1e8).seq_log_density(VonMisesEncoder().encode([math.pi, 1e300]))
        NegativeBinomialDistribution(1e-8, 1e-12).seq_log_density(NegativeBinomialEncoder().encode([0, 1e15]))
