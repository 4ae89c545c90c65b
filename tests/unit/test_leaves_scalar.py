"""Scalar leaf families: LogGaussian, Exponential, Gamma, Poisson, Bernoulli, Binomial, Geometric."""

import json
import math

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError, DataValueError, SchemaError, SpecError
from mixle_spark.stats._special import log_minus_digamma, trigamma
from mixle_spark.stats.base import distribution_from_dict, estimator_from_dict
from mixle_spark.stats.bernoulli import BernoulliDistribution, BernoulliEncoder, BernoulliEstimator
from mixle_spark.stats.binomial import BinomialDistribution, BinomialEncoder, BinomialEstimator
from mixle_spark.stats.exponential import ExponentialDistribution, ExponentialEstimator
from mixle_spark.stats.gamma import GammaDistribution, GammaEstimator, solve_shape
from mixle_spark.stats.geometric import GeometricDistribution, GeometricEstimator
from mixle_spark.stats.log_gaussian import LogGaussianDistribution, LogGaussianEstimator
from mixle_spark.stats.poisson import PoissonDistribution, PoissonEncoder, PoissonEstimator

N = 20000
DISTS = [
    LogGaussianDistribution(1.0, 0.5),
    ExponentialDistribution(2.5),
    GammaDistribution(2.5, 1.5),
    GammaDistribution(0.4, 3.0),
    PoissonDistribution(3.5),
    BernoulliDistribution(0.3),
    BinomialDistribution(0.3, 10),
    GeometricDistribution(0.2),
]
FAST_PATH = [d for d in DISTS if hasattr(d, "feature_key")]


def _fit(est, records, weights=None):
    enc = est.encoder().encode(records)
    acc = est.accumulator_factory().make()
    acc.seq_update(enc, np.ones(len(records)) if weights is None else np.asarray(weights, float), None)
    return est.estimate(None, acc.value()), acc


def _sample(dist, n=N, seed=1):
    return list(dist.sampler(seed).sample(n))


# -- recovery: within 4 standard errors --------------------------------------------------------


def test_log_gaussian_recovery():
    fit, _ = _fit(LogGaussianEstimator(), _sample(LogGaussianDistribution(1.0, 0.5)))
    assert abs(fit.mu - 1.0) < 4 * math.sqrt(0.5 / N)
    assert abs(fit.sigma2 - 0.5) < 4 * 0.5 * math.sqrt(2.0 / N)


def test_exponential_recovery():
    fit, _ = _fit(ExponentialEstimator(), _sample(ExponentialDistribution(2.5)))
    assert abs(fit.beta - 2.5) < 4 * 2.5 / math.sqrt(N)


@pytest.mark.parametrize(("k", "theta"), [(2.5, 1.5), (0.4, 3.0), (30.0, 0.01)])
def test_gamma_recovery(k, theta):
    fit, _ = _fit(GammaEstimator(), _sample(GammaDistribution(k, theta)))
    se_k = math.sqrt(k / (N * (k * trigamma(k) - 1.0)))  # inverse Fisher information of the shape
    assert abs(fit.k - k) < 4 * se_k
    assert abs(fit.k * fit.theta - k * theta) < 4 * math.sqrt(k) * theta / math.sqrt(N)


def test_poisson_recovery():
    fit, _ = _fit(PoissonEstimator(), _sample(PoissonDistribution(3.5)))
    assert abs(fit.lam - 3.5) < 4 * math.sqrt(3.5 / N)


def test_bernoulli_recovery():
    fit, _ = _fit(BernoulliEstimator(), _sample(BernoulliDistribution(0.3)))
    assert abs(fit.p - 0.3) < 4 * math.sqrt(0.3 * 0.7 / N)


def test_binomial_recovery_with_and_without_scan():
    records = _sample(BinomialDistribution(0.7, 5))
    fit, _ = _fit(BinomialEstimator(n=5), records)
    assert fit.n == 5 and abs(fit.p - 0.7) < 4 * math.sqrt(0.21 / (5 * N))
    est = BinomialEstimator()
    scanned = est.with_scan(est.encoder().scan(records))
    assert scanned.n == 5 and est.n is None
    assert _fit(scanned, records)[0] == fit


def test_geometric_recovery():
    fit, _ = _fit(GeometricEstimator(), _sample(GeometricDistribution(0.2)))
    assert abs(fit.p - 0.2) < 4 * 0.2 * math.sqrt(0.8 / N)


# -- closed forms ------------------------------------------------------------------------------


def test_poisson_log_pmf_closed_form():
    d = PoissonDistribution(4.2)
    for x in [0, 1, 7, 30, 2000]:
        assert d.log_density(x) == pytest.approx(x * math.log(4.2) - 4.2 - math.lgamma(x + 1), rel=1e-13)
    enc = d.encoder().encode([0, 1, 7, 30, 2000])
    assert d.seq_log_density(enc) == pytest.approx([d.log_density(x) for x in [0, 1, 7, 30, 2000]], rel=1e-13)
    assert math.fsum(math.exp(d.log_density(x)) for x in range(200)) == pytest.approx(1.0, rel=1e-13)


def test_other_closed_forms():
    assert ExponentialDistribution(2.0).log_density(3.0) == pytest.approx(-math.log(2.0) - 1.5, rel=1e-15)
    g = GammaDistribution(3.0, 2.0)  # x^2 e^{-x/2} / (2! 2^3)
    assert g.log_density(1.5) == pytest.approx(2 * math.log(1.5) - 0.75 - math.log(16.0), rel=1e-14)
    ln = LogGaussianDistribution(0.5, 2.0)
    y = math.log(3.0)
    expected = -0.5 * math.log(2 * math.pi * 2.0) - (y - 0.5) ** 2 / 4.0 - y
    assert ln.log_density(3.0) == pytest.approx(expected, rel=1e-14)
    b = BinomialDistribution(0.3, 10)
    assert b.log_density(4) == pytest.approx(math.log(math.comb(10, 4) * 0.3**4 * 0.7**6), rel=1e-13)
    assert math.fsum(math.exp(b.log_density(x)) for x in range(11)) == pytest.approx(1.0, rel=1e-14)
    assert GeometricDistribution(0.25).log_density(3) == pytest.approx(math.log(0.75**2 * 0.25), rel=1e-14)
    assert BernoulliDistribution(0.25).log_density(False) == pytest.approx(math.log(0.75), rel=1e-15)


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: repr(d))
def test_seq_log_density_matches_log_density(dist):
    records = _sample(dist, 500, seed=3)
    enc = dist.encoder().encode(records)
    seq = dist.seq_log_density(enc)
    one = np.array([dist.log_density(x) for x in records])
    assert np.all(np.isfinite(seq))
    assert np.allclose(seq, one, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    ("dist", "outside"),
    [
        (LogGaussianDistribution(0.0, 1.0), [0.0, -1.0, math.inf, math.nan]),
        (ExponentialDistribution(1.0), [-1e-9, math.inf, math.nan]),
        (GammaDistribution(0.5, 1.0), [0.0, -2.0, math.nan]),
        (PoissonDistribution(2.0), [-1, 1.5, math.nan, math.inf]),
        (BernoulliDistribution(0.5), [2, -1, 0.5, "yes", math.nan]),
        (BinomialDistribution(0.5, 3), [4, -1, 1.5, math.nan]),
        (GeometricDistribution(0.5), [0, -1, 2.5, math.nan]),
    ],
)
def test_log_density_is_minus_inf_outside_the_support(dist, outside):
    for x in outside:
        assert dist.log_density(x) == -math.inf


def test_degenerate_probabilities_never_give_nan():
    for p in (0.0, 1.0):
        b = BernoulliDistribution(p)
        enc = b.encoder().encode([0, 1])
        assert not np.isnan(b.seq_log_density(enc)).any()
        assert b.log_density(int(p)) == 0.0 and b.log_density(1 - int(p)) == -math.inf
        bn = BinomialDistribution(p, 3)
        vals = bn.seq_log_density(bn.encoder().encode([0, 1, 3]))
        assert not np.isnan(vals).any() and vals[0 if p == 0 else 2] == 0.0
        assert np.allclose(vals, [bn.log_density(x) for x in [0, 1, 3]])
    g = GeometricDistribution(1.0)
    assert list(g.seq_log_density(g.encoder().encode([1, 2]))) == [0.0, -math.inf]
    assert g.log_density(1) == 0.0


def test_binomial_scores_batches_encoded_for_another_n():
    small, large = BinomialDistribution(0.4, 3), BinomialDistribution(0.4, 6)
    enc = large.encoder().encode([0, 2, 3, 5])
    got = small.seq_log_density(enc)
    assert np.allclose(got[:3], [small.log_density(x) for x in [0, 2, 3]]) and got[3] == -math.inf
    enc_unscanned = BinomialEncoder(None).encode([0, 2, 6])
    assert np.allclose(large.seq_log_density(enc_unscanned), [large.log_density(x) for x in [0, 2, 6]])


# -- estimators: pseudo-counts, floors, zero weight ---------------------------------------------


def test_pseudo_counts_follow_their_documented_formulas():
    assert _fit(PoissonEstimator(pseudo_count=2.0, suff_stat=5.0), [1, 1])[0].lam == pytest.approx(3.0)
    assert _fit(PoissonEstimator(pseudo_count=2.0), [3, 3])[0].lam == pytest.approx(2.0)  # lam0 = 1
    assert _fit(ExponentialEstimator(pseudo_count=1.0, suff_stat=4.0), [1.0])[0].beta == pytest.approx(2.5)
    assert _fit(BernoulliEstimator(pseudo_count=2.0), [1, 1])[0].p == pytest.approx(0.75)
    assert _fit(BinomialEstimator(n=4, pseudo_count=1.0, suff_stat=0.0), [4])[0].p == pytest.approx(0.5)
    # geometric: (Σw + pc) / (Σw x + pc / p0) = (2 + 1) / (6 + 1 / 0.5)
    assert _fit(GeometricEstimator(pseudo_count=1.0, suff_stat=0.5), [2, 4])[0].p == pytest.approx(3 / 8)
    lg = _fit(LogGaussianEstimator(pseudo_count=1.0, suff_stat=(0.0, 1.0)), [math.e])[0]
    assert lg.mu == pytest.approx(0.5)


def test_gamma_pseudo_count_adds_prior_expected_statistics():
    prior = GammaDistribution(2.0, 3.0)
    est = prior.estimator(pseudo_count=1e6)
    fit, _ = _fit(est, [0.1, 50.0])
    assert fit.k == pytest.approx(2.0, rel=1e-4) and fit.theta == pytest.approx(3.0, rel=1e-4)


def test_distribution_estimator_uses_parameters_as_prior():
    assert PoissonDistribution(7.0).estimator(pseudo_count=3.0).to_dict() == {
        "type": "poisson",
        "pseudo_count": 3.0,
        "suff_stat": 7.0,
    }
    assert BinomialDistribution(0.2, 9).estimator().n == 9


def test_floors_and_caps():
    assert _fit(PoissonEstimator(), [0, 0, 0])[0].lam == 1e-12
    assert _fit(ExponentialEstimator(), [0.0, 0.0])[0].beta == 1e-12
    assert _fit(BernoulliEstimator(), [1, 1])[0].p == 1.0 - 1e-12
    assert _fit(BernoulliEstimator(min_p=0), [1, 1])[0].p == 1.0
    assert _fit(BinomialEstimator(n=3), [0, 0])[0].p == 1e-12
    assert _fit(GeometricEstimator(), [1, 1])[0].p == 1.0 - 1e-12
    assert _fit(GeometricEstimator(min_p=0), [1, 1])[0].p == 1.0
    assert _fit(LogGaussianEstimator(), [2.0, 2.0])[0].sigma2 == 1e-8
    fit, _ = _fit(GammaEstimator(), [3.0, 3.0, 3.0])
    assert fit.k == 1e8 and fit.theta == pytest.approx(3e-8, rel=1e-12)
    assert math.isfinite(fit.log_density(3.0)) and math.isfinite(fit.log_density(3.1))
    assert _fit(GammaEstimator(max_k=1e3), [3.0, 3.0])[0].k == 1e3


@pytest.mark.parametrize(
    ("est", "expected"),
    [
        (LogGaussianEstimator(), LogGaussianDistribution(0.0, 1.0)),
        (ExponentialEstimator(), ExponentialDistribution(1.0)),
        (GammaEstimator(), GammaDistribution(1.0, 1.0)),
        (GammaEstimator(suff_stat=(2.0, 5.0)), GammaDistribution(2.0, 5.0)),
        (PoissonEstimator(suff_stat=3.0), PoissonDistribution(3.0)),
        (BernoulliEstimator(), BernoulliDistribution(0.5)),
        (BinomialEstimator(n=4), BinomialDistribution(0.5, 4)),
        (GeometricEstimator(), GeometricDistribution(0.5)),
    ],
)
def test_zero_weight_fallback(est, expected):
    acc = est.accumulator_factory().make()
    assert est.estimate(0.0, acc.value()) == expected
    acc.seq_update(est.encoder().encode([1, 1]), np.zeros(2), None)
    assert est.estimate(0.0, acc.value()) == expected


def test_solve_shape_inverts_log_minus_digamma():
    for k in [1e-3, 0.05, 0.7, 1.0, 3.3, 55.0, 1e4, 1e7]:
        assert solve_shape(log_minus_digamma(k)) == pytest.approx(k, rel=1e-10)
    assert solve_shape(0.0) == 1e8 and solve_shape(-1e-17) == 1e8
    assert solve_shape(1e9, min_k=1e-8) == 1e-8


def test_binomial_estimate_without_n_raises():
    with pytest.raises(SpecError, match="n is unknown"):
        BinomialEstimator().estimate(1.0, (1.0, 1.0))


# -- accumulators: weights, splits, combine ------------------------------------------------------


def _estimator(dist):
    return dist.estimator()


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: repr(d))
def test_weights_and_combine_of_random_splits(dist):
    rng = np.random.default_rng(5)
    records = _sample(dist, 1000, seed=7)
    est = _estimator(dist)
    w = rng.uniform(0.0, 2.0, size=len(records))
    whole = est.accumulator_factory().make()
    whole.seq_update(est.encoder().encode(records), w, None)
    cut = np.sort(rng.choice(np.arange(1, len(records)), size=3, replace=False))
    parts = []
    for idx in np.split(np.arange(len(records)), cut):
        acc = est.accumulator_factory().make()
        acc.seq_update(est.encoder().encode([records[i] for i in idx]), w[idx], None)
        parts.append(acc.value())
    merged = est.accumulator_factory().make()
    for v in reversed(parts):
        merged.combine(v)
    assert np.allclose(merged.value(), whole.value(), rtol=1e-12)
    # weight 2 equals the record twice; weight 0 is a no-op
    a = est.accumulator_factory().make()
    a.seq_update(est.encoder().encode(records[:3]), np.array([2.0, 0.0, 1.0]), None)
    b = est.accumulator_factory().make()
    b.seq_update(est.encoder().encode([records[0], records[0], records[2]]), np.ones(3), None)
    assert np.allclose(a.value(), b.value(), rtol=1e-14)
    # from_value copies; update (one record) agrees with seq_update
    c = est.accumulator_factory().make().from_value(whole.value())
    assert c.value() == whole.value()
    d = est.accumulator_factory().make()
    d.update(records[0], 2.0, None)
    assert np.allclose(d.value(), _single(est, records[0], 2.0), rtol=1e-14)


def _single(est, x, w):
    acc = est.accumulator_factory().make()
    acc.seq_update(est.encoder().encode([x]), np.array([w]), None)
    return acc.value()


# -- mixture fast path ---------------------------------------------------------------------------


@pytest.mark.parametrize("dist", FAST_PATH, ids=lambda d: repr(d))
def test_fast_path_features_and_sums(dist):
    records = _sample(dist, 400, seed=11)
    est = _estimator(dist)
    enc = est.encoder().encode(records)
    phi = dist.seq_features(enc)
    assert phi.shape[0] == len(records)
    scored = phi @ dist.feature_coefficients(enc)
    assert np.allclose(scored, dist.seq_log_density(enc), rtol=1e-11, atol=1e-11)
    w = np.random.default_rng(2).uniform(size=len(records))
    direct = est.accumulator_factory().make()
    direct.seq_update(enc, w, dist)
    fast = est.accumulator_factory().make()
    fast.add_feature_sums(w @ phi, enc, dist)
    assert np.allclose(fast.value(), direct.value(), rtol=1e-11, atol=1e-9)
    fd, dd = est.estimate(None, fast.value()).to_dict(), est.estimate(None, direct.value()).to_dict()
    assert all(fd[k] == pytest.approx(dd[k], rel=1e-10) for k in fd if k != "type")


def test_fast_path_with_degenerate_probabilities_has_no_nan():
    for dist, recs in [
        (BernoulliDistribution(1.0), [0, 1]),
        (BernoulliDistribution(0.0), [0, 1]),
        (GeometricDistribution(1.0), [1, 3]),
    ]:
        enc = dist.encoder().encode(recs)
        ll = dist.seq_features(enc) @ dist.feature_coefficients(enc)
        exact = dist.seq_log_density(enc)
        assert not np.isnan(ll).any()
        assert np.all((ll == exact) | ((exact == -np.inf) & (ll <= -1e299)))


# -- encoders: Arrow input and errors ----------------------------------------------------------


@pytest.mark.parametrize("typ", [pa.int8(), pa.uint16(), pa.int32(), pa.int64(), pa.float32(), pa.float64()])
def test_arrow_numeric_types_are_read(typ):
    arr = pa.array([0, 3, 5], type=typ)
    x, log_fact = PoissonEncoder().from_arrow(arr)
    assert list(x) == [0.0, 3.0, 5.0] and log_fact[2] == pytest.approx(math.log(120))
    PoissonEncoder().check_arrow_type(typ)
    chunked = pa.chunked_array([pa.array([1], type=typ), pa.array([2], type=typ)])
    assert list(PoissonEncoder().from_arrow(chunked)[0]) == [1.0, 2.0]


def test_arrow_float64_is_zero_copy_for_continuous_families():
    arr = pa.array([0.5, 1.5, 2.0])
    x = ExponentialDistribution(1.0).encoder().from_arrow(arr)
    assert np.shares_memory(x, arr.to_numpy())
    x_gamma, _ = GammaDistribution(1.0, 1.0).encoder().from_arrow(arr)
    assert np.shares_memory(x_gamma, arr.to_numpy())


def test_bernoulli_reads_booleans():
    enc = BernoulliEncoder()
    assert list(enc.from_arrow(pa.array([True, False, True]))) == [1.0, 0.0, 1.0]
    assert list(enc.encode([True, 0, 1.0])) == [1.0, 0.0, 1.0]
    enc.check_arrow_type(pa.bool_())
    with pytest.raises(SchemaError, match="bool"):
        PoissonEncoder().check_arrow_type(pa.bool_())


def test_poisson_errors_name_value_and_row():
    expected = r"expected a non-negative integer count for PoissonEstimator, got -3.0 \(row 3 of 4\)"
    with pytest.raises(DataValueError, match=expected):
        PoissonEncoder().encode([1, 2, -3.0, 4])
    with pytest.raises(DataValueError, match=r"got 2.5 \(row 2 of 2\)"):
        PoissonEncoder().encode([1, 2.5])
    with pytest.raises(DataValueError, match=r"got -3.0 \(row 2 of 3\)"):
        PoissonEncoder().from_arrow(pa.array([1, -3, 2]))


@pytest.mark.parametrize(
    ("encoder", "bad", "value"),
    [
        (LogGaussianDistribution(0, 1).encoder(), [1.0, -2.0], r"-2.0 \(row 2 of 2\)"),
        (LogGaussianDistribution(0, 1).encoder(), [0.0], r"0.0 \(row 1 of 1\)"),
        (ExponentialDistribution(1).encoder(), [1.0, -0.5], r"-0.5 \(row 2 of 2\)"),
        (ExponentialDistribution(1).encoder(), [math.inf], r"inf \(row 1 of 1\)"),
        (GammaDistribution(1, 1).encoder(), [2.0, 0.0], r"0.0 \(row 2 of 2\)"),
        (
            BernoulliEncoder(),
            [0, 1, 2],
            r"expected 0, 1 or a boolean for BernoulliEstimator, got 2.0 \(row 3 of 3\)",
        ),
        (
            BinomialEncoder(10),
            [3, 11],
            r"expected an integer count in \[0, 10\] for BinomialEstimator, got 11.0",
        ),
        (BinomialEncoder(None), [3, -1], r"non-negative integer count for BinomialEstimator, got -1.0"),
        (
            GeometricDistribution(0.5).encoder(),
            [1, 0],
            r"integer >= 1 .*GeometricEstimator, got 0.0 \(row 2 of 2\)",
        ),
        (GeometricDistribution(0.5).encoder(), [1.5], r"got 1.5"),
    ],
)
def test_out_of_support_values_are_data_value_errors(encoder, bad, value):
    with pytest.raises(DataValueError, match=value):
        encoder.encode(bad)
    with pytest.raises(DataValueError, match=value):
        encoder.from_arrow(pa.array(bad, type=pa.float64()))


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: repr(d))
def test_strings_and_nulls(dist):
    enc = dist.encoder()
    with pytest.raises(DataTypeError, match="string '12x'"):
        enc.encode([1, "12x"])
    with pytest.raises(DataTypeError, match="string '12x'"):
        enc.from_arrow(pa.array(["12x"]))
    with pytest.raises(DataValueError, match=r"OptionalEstimator\), got null \(row 2 of 3\)"):
        enc.encode([1, None, 2])
    with pytest.raises(DataValueError, match="OptionalEstimator"):
        enc.from_arrow(pa.array([1, None], type=pa.int64()))
    with pytest.raises(SchemaError, match="string"):
        enc.check_arrow_type(pa.string())


def test_binomial_scan_and_merge():
    enc = BinomialEncoder()
    assert enc.needs_scan and not BinomialEncoder(4).needs_scan
    assert enc.scan([1, 7, 3]) == 7 and enc.scan([]) is None
    assert enc.scan_arrow(pa.array([2, 9], type=pa.int32())) == 9
    assert enc.merge_scans(7, 9) == 9 and enc.merge_scans(None, 4) == 4
    assert enc.merge_scans(None, None) is None
    with pytest.raises(DataValueError, match=r"got -2\.0"):
        enc.scan([1, -2])
    est = BinomialEstimator(pseudo_count=1.0)
    fixed = est.with_scan(enc.merge_scans(enc.scan([1, 2]), enc.scan([6])))
    assert fixed.n == 6 and fixed.pseudo_count == 1.0
    assert BinomialEstimator(n=3).with_scan(10).n == 3
    assert enc.union(BinomialEncoder(3)) == BinomialEncoder(None)
    assert BinomialEncoder(2).union(BinomialEncoder(5)) == BinomialEncoder(5)


# -- parameters and JSON -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: LogGaussianDistribution(0.0, -1.0), "sigma2 must be a positive finite number, got -1.0"),
        (lambda: ExponentialDistribution(0.0), "beta must be a positive finite number, got 0.0"),
        (lambda: GammaDistribution(-2.0, 1.0), "k must be a positive finite number, got -2.0"),
        (lambda: GammaDistribution(2.0, math.inf), "theta must be a positive finite number, got inf"),
        (lambda: PoissonDistribution(-1.0), "lam must be a positive finite number, got -1.0"),
        (lambda: BernoulliDistribution(1.5), "p must be a probability in \\[0, 1\\], got 1.5"),
        (lambda: BinomialDistribution(0.5, -3), "n must be a non-negative integer, got -3"),
        (lambda: BinomialDistribution(0.5, 2.5), "n must be a non-negative integer, got 2.5"),
        (lambda: GeometricDistribution(0.0), "p must be a probability in \\(0, 1\\], got 0.0"),
        (lambda: PoissonEstimator(pseudo_count=-1.0), "pseudo_count must be a non-negative number, got -1.0"),
        (lambda: LogGaussianEstimator(pseudo_count=-2.0), "LogGaussianEstimator: pseudo_count .* got -2.0"),
        (lambda: BernoulliEstimator(min_p=0.7), "min_p must be in \\[0, 0.5\\), got 0.7"),
        (lambda: GammaEstimator(min_k=10.0, max_k=1.0), "got \\(10.0, 1.0\\)"),
        (lambda: distribution_from_dict({"type": "poisson", "lam": 1.0, "mu": 2}), "unknown key 'mu'"),
        (lambda: distribution_from_dict({"type": "gamma", "k": 1.0}), "missing required key 'theta'"),
        (lambda: estimator_from_dict({"type": "binomial", "trials": 3}), "unknown key 'trials'"),
    ],
)
def test_parameter_and_spec_errors(make, match):
    with pytest.raises(SpecError, match=match):
        make()


@pytest.mark.parametrize("dist", [*DISTS, LogGaussianDistribution(1e-300, 1.0 / 3.0)], ids=lambda d: repr(d))
def test_json_round_trips(dist):
    spec = json.loads(json.dumps(dist.to_dict()))
    back = distribution_from_dict(spec)
    assert back == dist and type(back) is type(dist)
    for est in (dist.estimator(), dist.estimator(pseudo_count=0.5)):
        est_spec = json.loads(json.dumps(est.to_dict()))
        assert estimator_from_dict(est_spec) == est


def test_estimator_specs_are_compact_and_keep_options():
    assert GammaEstimator().to_dict() == {"type": "gamma"}
    assert GammaEstimator(max_k=50.0).to_dict() == {"type": "gamma", "max_k": 50.0}
    assert BinomialEstimator(n=3, min_p=0.0).to_dict() == {"type": "binomial", "n": 3, "min_p": 0.0}
    spec = LogGaussianEstimator(pseudo_count=1.0, suff_stat=(0.0, 2.0), name="amount", keys="k").to_dict()
    assert spec == {
        "type": "log_gaussian",
        "pseudo_count": 1.0,
        "suff_stat": [0.0, 2.0],
        "name": "amount",
        "keys": "k",
    }


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: repr(d))
def test_samplers_are_seeded_and_shaped(dist):
    a = dist.sampler(3).sample(50)
    b = dist.sampler(3).sample(50)
    assert len(a) == 50 and np.array_equal(a, b)
    one = dist.sampler(3).sample()
    assert np.isscalar(one) and math.isfinite(dist.log_density(one))
