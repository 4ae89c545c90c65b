"""DiagonalGaussian and MultivariateGaussian: recovery, fast path, statistics algebra, Arrow, errors."""

import json
import math

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError, DataValueError, EmptyDataError, SchemaError, SpecError
from mixle_spark.stats.base import distribution_from_dict, estimator_from_dict
from mixle_spark.stats.diagonal_gaussian import (
    DiagonalGaussianAccumulator,
    DiagonalGaussianDistribution,
    DiagonalGaussianEncoder,
    DiagonalGaussianEstimator,
)
from mixle_spark.stats.multivariate_gaussian import (
    MultivariateGaussianAccumulator,
    MultivariateGaussianDistribution,
    MultivariateGaussianEncoder,
    MultivariateGaussianEstimator,
)

COV = np.array([[2.0, 0.6, -0.3], [0.6, 1.0, 0.2], [-0.3, 0.2, 0.5]])
MU = np.array([0.5, -1.0, 3.0])


def _fit(est, x, w=None):
    enc = est.encoder()
    est = est.with_scan(enc.scan(x))
    batch = est.encoder().encode(x)
    acc = est.accumulator_factory().make()
    acc.seq_update(batch, np.ones(len(x)) if w is None else w, None)
    return est.estimate(None, acc.value()), acc


def _logpdf_mvn(x, mu, cov):
    r = x - mu
    _, logdet = np.linalg.slogdet(cov)
    return -0.5 * (len(mu) * math.log(2 * math.pi) + logdet + r @ np.linalg.solve(cov, r))


# -- densities ---------------------------------------------------------------------------------------
def test_mvn_log_density_closed_form_and_seq_agree():
    d = MultivariateGaussianDistribution(MU, COV)
    x = np.array([[1.0, 0.0, 2.5], [0.5, -1.0, 3.0], [-3.0, 4.0, 0.0]])
    expect = [_logpdf_mvn(r, MU, COV) for r in x]
    np.testing.assert_allclose([d.log_density(r) for r in x], expect, rtol=1e-12)
    np.testing.assert_allclose(d.seq_log_density(d.encoder().encode(x)), expect, rtol=1e-12)
    assert d.log_density([1.0, 2.0]) == -math.inf
    assert d.log_density("abc") == -math.inf
    assert d.log_density([1.0, math.inf, 0.0]) == -math.inf
    # a missing (NaN) coordinate is marginalized: the density of the other two
    observed = [0, 2]
    want = _logpdf_mvn(np.array([1.0, 0.0]), MU[observed], COV[np.ix_(observed, observed)])
    assert d.log_density([1.0, math.nan, 0.0]) == pytest.approx(want, rel=1e-12)


def test_diagonal_log_density_matches_mvn_with_diagonal_covariance():
    var = np.array([0.5, 2.0, 1.5])
    dg = DiagonalGaussianDistribution(MU, var)
    mv = MultivariateGaussianDistribution(MU, np.diag(var))
    x = np.random.default_rng(0).normal(size=(50, 3))
    np.testing.assert_allclose(
        dg.seq_log_density(dg.encoder().encode(x)), mv.seq_log_density(mv.encoder().encode(x)), rtol=1e-12
    )
    assert dg.log_density(x[0]) == pytest.approx(mv.log_density(x[0]), rel=1e-12)


def test_high_dimension_log_space_no_underflow():
    d = 50
    dist = MultivariateGaussianDistribution(np.zeros(d), np.eye(d) * 1e-3)
    x = np.full((2, d), 1.0)
    ll = dist.seq_log_density(dist.encoder().encode(x))
    assert np.all(np.isfinite(ll)) and ll[0] < -20000


# -- recovery ----------------------------------------------------------------------------------------
def test_mvn_recovers_mean_and_covariance():
    n = 20000
    x = np.asarray(MultivariateGaussianDistribution(MU, COV).sampler(3).sample(n))
    fit, _ = _fit(MultivariateGaussianEstimator(), x)
    se_mu = np.sqrt(np.diag(COV) / n)
    assert np.all(np.abs(fit.mu - MU) < 4 * se_mu)
    # se of a covariance entry: sqrt((S_ii S_jj + S_ij^2) / n)
    se_cov = np.sqrt((np.outer(np.diag(COV), np.diag(COV)) + COV**2) / n)
    assert np.all(np.abs(fit.covar - COV) < 4 * se_cov)


def test_diagonal_recovers_mean_and_variances_at_large_offset():
    n = 20000
    mu, var = np.array([1e6, -3.0]), np.array([0.25, 4.0])
    x = np.asarray(DiagonalGaussianDistribution(mu, var).sampler(5).sample(n))
    fit, _ = _fit(DiagonalGaussianEstimator(), x)
    assert np.all(np.abs(fit.mu - mu) < 4 * np.sqrt(var / n))
    assert np.all(np.abs(fit.covar - var) < 4 * var * math.sqrt(2 / n))


def test_weights_two_equal_duplicate_rows_and_zero_is_noop():
    x = np.random.default_rng(1).normal(size=(30, 3))
    w = np.r_[np.full(10, 2.0), np.zeros(10), np.ones(10)]
    dup = np.vstack([x[:10], x[:10], x[20:]])
    for est in (MultivariateGaussianEstimator(), DiagonalGaussianEstimator()):
        a, _ = _fit(est, x, w)
        b, _ = _fit(est, dup)
        np.testing.assert_allclose(a.mu, b.mu, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(a.covar, b.covar, rtol=1e-10, atol=1e-13)


# -- mixture fast path -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dist", [MultivariateGaussianDistribution(MU, COV), DiagonalGaussianDistribution(MU, [0.5, 2.0, 1.5])]
)
def test_features_times_coefficients_equal_seq_log_density(dist):
    x = np.random.default_rng(2).normal(loc=10.0, size=(500, 3))
    for enc in (dist.encoder().encode(x), type(dist.encoder())(3).encode(x)):  # centre mu / batch mean
        f = dist.seq_features(enc)
        assert f is dist.seq_features(enc)  # cached on the batch
        np.testing.assert_allclose(f @ dist.feature_coefficients(enc), dist.seq_log_density(enc), rtol=1e-10)
    m = f.shape[1]
    assert m == (1 + 3 + 6 if isinstance(dist, MultivariateGaussianDistribution) else 7)


@pytest.mark.parametrize(
    "acc_cls,enc_cls",
    [
        (MultivariateGaussianAccumulator, MultivariateGaussianEncoder),
        (DiagonalGaussianAccumulator, DiagonalGaussianEncoder),
    ],
)
def test_add_feature_sums_equals_seq_update(acc_cls, enc_cls):
    rng = np.random.default_rng(3)
    x, w = rng.normal(loc=5.0, size=(400, 3)), rng.random(400)
    enc = enc_cls(3).encode(x)
    feats = enc.full_features() if acc_cls is MultivariateGaussianAccumulator else enc.diagonal_features()
    a, b = acc_cls(), acc_cls()
    a.seq_update(enc, w, None)
    b.add_feature_sums(w @ feats, enc, None)
    for u, v in zip(a.value(), b.value(), strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-10)


# -- statistics algebra ------------------------------------------------------------------------------
@pytest.mark.parametrize("est", [MultivariateGaussianEstimator(), DiagonalGaussianEstimator()])
def test_combine_of_splits_at_different_centres_equals_whole(est):
    rng = np.random.default_rng(4)
    x, w = rng.normal(loc=[100.0, -5.0, 0.0], size=(600, 3)), rng.random(600)
    whole = est.accumulator_factory().make()
    whole.seq_update(type(est.encoder())(3, np.zeros(3)).encode(x), w, None)
    parts = []
    for k, idx in enumerate(np.array_split(rng.permutation(600), 3)):
        acc = est.accumulator_factory().make()
        acc.seq_update(type(est.encoder())(3, [k * 50.0, 1.0, -k]).encode(x[idx]), w[idx], None)
        parts.append(acc.value())
    merged = est.accumulator_factory().make().combine(parts[2]).combine(parts[0]).combine(parts[1])
    a, b = est.estimate(None, whole.value()), est.estimate(None, merged.value())
    np.testing.assert_allclose(a.mu, b.mu, rtol=1e-12)
    np.testing.assert_allclose(a.covar, b.covar, rtol=1e-9)
    value = parts[0]
    fresh = est.accumulator_factory().make().combine(value)
    fresh.s1 += 1.0
    assert not np.shares_memory(fresh.s1, value[1])  # combine never aliases its argument


def test_zero_weight_fallbacks_and_prior():
    est = MultivariateGaussianEstimator(dim=2)
    empty = est.accumulator_factory().make().value()
    fit = est.estimate(0.0, empty)
    np.testing.assert_array_equal(fit.covar, np.eye(2))
    prior = MultivariateGaussianEstimator(pseudo_count=1.0, suff_stat=([1.0, 2.0], [[2.0, 0.0], [0.0, 3.0]]))
    np.testing.assert_array_equal(prior.estimate(0.0, empty).mu, [1.0, 2.0])
    with pytest.raises(EmptyDataError, match="no data"):
        MultivariateGaussianEstimator().estimate(0.0, MultivariateGaussianAccumulator().value())
    assert DiagonalGaussianEstimator(dim=3).estimate(
        0.0, DiagonalGaussianAccumulator(3).value()
    ).covar.tolist() == [1.0, 1.0, 1.0]


def test_prior_pulls_estimate_closed_form():
    x = np.array([[1.0, 1.0], [3.0, 3.0]])
    est = DiagonalGaussianEstimator(pseudo_count=2.0, suff_stat=([0.0, 0.0], [1.0, 1.0]))
    fit, _ = _fit(est, x)
    np.testing.assert_allclose(fit.mu, [1.0, 1.0])  # (2 * 2 + 2 * 0) / 4
    # scatter 2 + 2*(2-1)^2 + 2*(1 + (0-1)^2) = 8 -> 8 / 4
    np.testing.assert_allclose(fit.covar, [2.0, 2.0])


def test_floors_keep_collapsed_components_finite():
    x = np.tile([[1.0, 2.0, 3.0]], (5, 1))
    fit, _ = _fit(MultivariateGaussianEstimator(), x)
    assert np.all(np.isfinite(fit.covar)) and np.linalg.eigvalsh(fit.covar).min() >= 1e-8 * 0.999
    rank1 = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])  # singular scatter -> ridge makes it PD
    fit2, _ = _fit(MultivariateGaussianEstimator(), rank1)
    assert np.linalg.eigvalsh(fit2.covar).min() > 0
    fitd, _ = _fit(DiagonalGaussianEstimator(), np.array([[1.0, 5.0], [1.0, 7.0]]))
    assert fitd.covar[0] == pytest.approx(1e-6 * 0.5, rel=1e-9)  # ridge * mean(var) = 1e-6 * (0 + 1) / 2


# -- Arrow ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "typ",
    [pa.list_(pa.float64()), pa.large_list(pa.float32()), pa.list_(pa.int32()), pa.list_(pa.float64(), 3)],
)
def test_arrow_list_types(typ):
    rows = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]
    arr = pa.array(rows, type=typ).slice(1)
    batch = MultivariateGaussianEncoder(3, np.zeros(3)).from_arrow(arr)
    np.testing.assert_array_equal(batch.x, rows[1:])


def test_arrow_float64_is_zero_copy():
    values = pa.array(np.arange(12, dtype=np.float64))
    arr = pa.ListArray.from_arrays(pa.array([0, 3, 6, 9, 12], type=pa.int32()), values)
    batch = DiagonalGaussianEncoder(3, np.zeros(3)).from_arrow(arr)
    assert np.shares_memory(batch.x, np.asarray(values.to_numpy()))


def test_arrow_errors():
    enc = MultivariateGaussianEncoder(3)
    with pytest.raises(DataValueError, match=r"expected length 3, got length 2 \(row 2 of 3\)"):
        enc.from_arrow(pa.array([[1.0, 2.0, 3.0], [1.0, 2.0], [1.0, 2.0, 3.0]]))
    with pytest.raises(DataValueError, match=r"got length 2 \(row 1 of 1\)"):
        enc.from_arrow(pa.array([[1.0, 2.0]], type=pa.list_(pa.float64(), 2)))
    # NaN and null elements are missing coordinates (NaN); an infinity is refused
    got = enc.from_arrow(pa.array([[1.0, 2.0, 3.0], [1.0, math.nan, None]]))
    np.testing.assert_array_equal(np.isnan(got.x), [[False, False, False], [False, True, True]])
    got = enc.from_arrow(pa.array([[1, None, 3]], type=pa.list_(pa.int64(), 3)))
    assert got.x.dtype == np.float64 and np.isnan(got.x[0, 1]) and got.x[0, 2] == 3.0
    with pytest.raises(DataValueError, match=r"got -inf \(row 2 of 2\)"):
        enc.from_arrow(pa.array([[1.0, 2.0, 3.0], [1.0, -math.inf, math.nan]]))
    with pytest.raises(DataValueError, match=r"got inf"):
        enc.from_arrow(pa.array([[1.0, 2.0, math.inf]]))
    with pytest.raises(DataValueError, match=r"OptionalEstimator\), got null \(row 2 of 2\)"):
        enc.from_arrow(pa.array([[1.0, 2.0, 3.0], None]))
    with pytest.raises(DataTypeError, match=r"got string 'x'"):
        enc.from_arrow(pa.array(["x"]))
    with pytest.raises(SchemaError, match="got Arrow type string"):
        enc.check_arrow_type(pa.string())
    with pytest.raises(SchemaError, match=r"length 3.*fixed_size_list<item: double>\[2\]"):
        enc.check_arrow_type(pa.list_(pa.float64(), 2))
    enc.check_arrow_type(pa.large_list(pa.int64()))


def test_a_learned_length_is_the_majoritys_so_the_odd_row_is_named():
    from mixle_spark.stats._vector import arrow_vector_values

    odd_first = pa.array([[1.0], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    with pytest.raises(
        DataValueError, match=r"expected length 2 \(the most common length\), got length 1 \(row 1 of 4\)"
    ):
        arrow_vector_values(odd_first, None, "expected a vector")
    assert arrow_vector_values(pa.array([[1.0, 2.0], [3.0, 4.0]]), None, "expected a vector").shape == (2, 2)


def test_record_errors():
    enc = DiagonalGaussianEncoder(2)
    with pytest.raises(DataValueError, match=r"expected length 2, got length 3 \(row 2 of 2\)"):
        enc.encode([[1.0, 2.0], [1.0, 2.0, 3.0]])
    with pytest.raises(DataTypeError, match=r"got string 'a' \(row 2 of 2\)"):
        enc.encode([[1.0, 2.0], [1.0, "a"]])
    with pytest.raises(DataTypeError, match=r"got string 'ab' \(row 1 of 1\)"):
        enc.encode(["ab"])
    with pytest.raises(DataValueError, match=r"got null \(row 2 of 2\)"):
        enc.encode([[1.0, 2.0], None])
    with pytest.raises(DataValueError, match=r"got inf \(row 1 of 1\)"):
        enc.encode([[math.inf, 2.0]])


def test_scan_learns_dim_and_mean():
    enc = MultivariateGaussianEstimator().encoder()
    assert enc.needs_scan
    a = enc.scan([[1.0, 2.0], [3.0, 4.0]])
    b = enc.scan_arrow(pa.array([[5.0, 6.0]]))
    scan = enc.merge_scans(a, b)
    assert scan[0] == 3.0 and enc.merge_scans(b, a)[1].tolist() == scan[1].tolist()
    est = MultivariateGaussianEstimator().with_scan(scan)
    assert est.dim == 2 and est.center.tolist() == [3.0, 4.0] and not est.encoder().needs_scan
    with pytest.raises(DataValueError, match="lengths 2 and 3"):
        enc.merge_scans(a, enc.scan([[1.0, 2.0, 3.0]]))


# -- parameters and JSON -------------------------------------------------------------------------------
def test_parameter_validation():
    with pytest.raises(SpecError, match=r"covar must be symmetric"):
        MultivariateGaussianDistribution([0.0, 0.0], [[1.0, 0.5], [0.2, 1.0]])
    with pytest.raises(
        SpecError, match=r"covar must be positive definite, got \[\[1.0, 2.0\], \[2.0, 1.0\]\]"
    ):
        MultivariateGaussianDistribution([0.0, 0.0], [[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(SpecError, match=r"covar must be a finite 2x2 matrix"):
        MultivariateGaussianDistribution([0.0, 0.0], [1.0, 1.0])
    with pytest.raises(
        SpecError, match=r"mu must be a non-empty 1-D sequence of finite numbers, got \[nan\]"
    ):
        MultivariateGaussianDistribution([math.nan], [[1.0]])
    with pytest.raises(SpecError, match=r"covar must be 2 positive variances, got \[1.0, -1.0\]"):
        DiagonalGaussianDistribution([0.0, 0.0], [1.0, -1.0])
    with pytest.raises(SpecError, match="min_covar must be positive, got 0"):
        MultivariateGaussianEstimator(min_covar=0)
    with pytest.raises(SpecError, match="unknown key 'sigma'"):
        estimator_from_dict({"type": "diagonal_gaussian", "sigma": 1})


def test_json_round_trip():
    for dist in (
        MultivariateGaussianDistribution(MU, COV),
        DiagonalGaussianDistribution(MU, [0.1, 0.2, 1 / 3]),
    ):
        again = distribution_from_dict(json.loads(json.dumps(dist.to_dict())))
        assert again == dist and np.array_equal(again.covar, dist.covar)
    est = MultivariateGaussianEstimator(
        pseudo_count=2.0, suff_stat=(MU, COV), ridge=1e-4, keys="k"
    ).with_scan((2.0, np.array([1.0, 2.0, 3.0])))
    assert estimator_from_dict(json.loads(json.dumps(est.to_dict()))) == est


def test_sampler_shapes():
    s = MultivariateGaussianDistribution(MU, COV).sampler(0)
    assert s.sample().shape == (3,)
    rows = s.sample(4)
    assert len(rows) == 4 and rows[0].shape == (3,)
    assert pa.array(rows).type == pa.list_(pa.float64())


def test_features_of_a_dropped_batch_are_reused_and_kept_ones_never_are() -> None:
    import weakref

    from mixle_spark.stats._vector import VectorBatch

    rng = np.random.default_rng(4)
    x1, x2, x3 = (rng.normal(size=(500, 3)) for _ in range(3))
    c = np.zeros(3)

    def expected(x: np.ndarray) -> np.ndarray:
        iu, ju = np.triu_indices(3)
        return np.column_stack([np.ones(len(x)), x, x[:, iu] * x[:, ju]])

    kept = VectorBatch(x1, c)
    first = kept.full_features()
    other = VectorBatch(x2, c)
    second = other.full_features()
    assert not np.shares_memory(first, second)  # `kept` still holds its features
    np.testing.assert_allclose(first, expected(x1))
    np.testing.assert_allclose(second, expected(x2))
    memory = weakref.ref(second.base)
    del other, second  # dropped: its array is handed to the next batch of that shape
    third = VectorBatch(x3, c).full_features()
    assert memory() is not None and third.base is memory()
    np.testing.assert_allclose(third, expected(x3))
    np.testing.assert_allclose(first, expected(x1))
    np.testing.assert_allclose(VectorBatch(x3, c).diagonal_features()[:, 4:], x3 * x3)
