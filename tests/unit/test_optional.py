"""OptionalDistribution / OptionalEstimator: missing values (None, NaN, Arrow nulls)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError, SpecError
from mixle_spark.stats.base import RowRandom, distribution_from_dict, estimator_from_dict
from mixle_spark.stats.gaussian import GaussianDistribution, GaussianEstimator
from mixle_spark.stats.optional import OptionalDistribution, OptionalEncoded, OptionalEstimator
from mixle_spark.stats.record import RecordDistribution

G = GaussianDistribution(2.0, 1.0)


def test_log_density_with_p_and_marginalized() -> None:
    d = OptionalDistribution(G, p=0.25)
    records = [1.0, None, float("nan"), 3.0]
    expected = [
        math.log(0.75) + G.log_density(1.0),
        math.log(0.25),
        math.log(0.25),
        math.log(0.75) + G.log_density(3.0),
    ]
    np.testing.assert_allclose([d.log_density(r) for r in records], expected, rtol=1e-15)
    enc = d.encoder().encode(records)
    assert isinstance(enc, OptionalEncoded) and enc.n == 4 and enc.present_index.tolist() == [0, 3]
    np.testing.assert_allclose(d.seq_log_density(enc), expected, rtol=1e-15)
    m = OptionalDistribution(G)
    np.testing.assert_allclose(m.seq_log_density(enc), [G.log_density(1.0), 0.0, 0.0, G.log_density(3.0)])
    assert OptionalDistribution(G, p=0.0).log_density(None) == -math.inf
    assert OptionalDistribution(G, p=1.0).log_density(1.0) == -math.inf


def test_arrow_nulls_and_nan_sliced_and_chunked() -> None:
    d = OptionalDistribution(G, p=0.25)
    arr = pa.array([5.0, 1.0, None, float("nan"), 3.0]).slice(1)
    enc = d.encoder().from_arrow(arr)
    assert enc.present_index.tolist() == [0, 3]
    np.testing.assert_allclose(
        d.seq_log_density(enc), d.seq_log_density(d.encoder().encode([1.0, None, None, 3.0]))
    )
    chunked = pa.chunked_array([[1.0, None], [3, None]], type=pa.float64())
    assert d.encoder().from_arrow(chunked).present_index.tolist() == [0, 2]
    ints = d.encoder().from_arrow(pa.array([1, None, 2]))
    assert ints.present_index.tolist() == [0, 2]
    # a pandas column with NaN for missing, through Arrow and directly as numpy
    s = pd.Series([1.0, np.nan, 2.0])
    assert d.encoder().from_arrow(pa.Array.from_pandas(s)).present_index.tolist() == [0, 2]
    assert d.encoder().encode(s.to_numpy()).present_index.tolist() == [0, 2]


def test_child_errors_point_at_the_enclosing_row() -> None:
    d = RecordDistribution({"amount": OptionalDistribution(G, 0.1)})
    with pytest.raises(
        DataTypeError, match=r"column 'amount': expected a finite number .*'12.5x' \(row 4 of 4\)"
    ):
        d.encoder().encode([{"amount": None}, {"amount": 1.0}, {"amount": None}, {"amount": "12.5x"}])
    arr = pa.array([None, None, "a", "12.5x"])
    with pytest.raises(DataTypeError, match=r"'a' \(row 3 of 4\)"):
        OptionalDistribution(G, 0.1).encoder().from_arrow(arr)


def test_nested_record_under_optional_null_struct() -> None:
    inner = RecordDistribution({"x": G})
    d = RecordDistribution({"outer": OptionalDistribution(inner, 0.5)})
    table = pa.table({"outer": pa.array([{"x": 1.0}, None, {"x": 3.0}])})
    got = d.seq_log_density(d.encoder().from_arrow(table))
    np.testing.assert_allclose(
        got,
        [d.log_density({"outer": {"x": 1.0}}), math.log(0.5), d.log_density({"outer": {"x": 3.0}})],
        rtol=1e-15,
    )


def test_p_recovery_and_marginalization() -> None:
    truth = OptionalDistribution(GaussianDistribution(-3.0, 2.0), p=0.3)
    records = truth.sampler(4).sample(20000)
    missing = sum(r is None for r in records)
    est = OptionalEstimator(GaussianEstimator())
    acc = est.accumulator_factory().make()
    acc.seq_update(est.encoder().encode(records), np.ones(len(records)), None)
    fit = est.estimate(len(records), acc.value())
    assert fit.p == pytest.approx(missing / 20000, rel=1e-12)
    assert abs(fit.p - 0.3) < 0.015
    assert abs(fit.dist.mu + 3.0) < 0.05 and abs(fit.dist.sigma2 - 2.0) < 0.1
    # pseudo_count shrinks towards 1/2
    pc_fit = OptionalEstimator(GaussianEstimator(), pseudo_count=10.0).estimate(None, acc.value())
    assert pc_fit.p == pytest.approx((missing + 5.0) / 20010.0)
    # marginalized: p is None and missing rows leave the child unchanged and score 0
    marg = OptionalEstimator(GaussianEstimator(), model_missing=False).estimate(None, acc.value())
    assert marg.p is None and marg.dist == fit.dist
    present = [r for r in records if r is not None]
    assert marg.seq_log_density(marg.encoder().encode(records)).sum() == pytest.approx(
        sum(fit.dist.log_density(r) for r in present), rel=1e-12
    )
    # zero weight: documented fallback p = 1/2
    empty = OptionalEstimator(GaussianEstimator()).accumulator_factory().make()
    assert OptionalEstimator(GaussianEstimator()).estimate(0.0, empty.value()).p == 0.5


def test_seq_update_ll_split_weights_initialize() -> None:
    d = OptionalDistribution(G, p=0.2)
    records = d.sampler(5).sample(300)
    est = d.estimator()
    enc = est.encoder()
    w = np.random.default_rng(1).uniform(0.5, 2.0, 300)
    acc = est.accumulator_factory().make()
    ll = acc.seq_update(enc.encode(records), w, d)
    np.testing.assert_allclose(ll, [d.log_density(r) for r in records], rtol=1e-12)
    merged = est.accumulator_factory().make()
    for idx in (slice(100, 300), slice(0, 100)):
        part = est.accumulator_factory().make()
        part.seq_update(enc.encode(records[idx]), w[idx], None)
        merged.combine(part.value())
    whole = est.accumulator_factory().make()
    whole.seq_update(enc.encode(records), w, None)
    a, b = merged.value(), whole.value()
    np.testing.assert_allclose([a[0], a[1], *a[2]], [b[0], b[1], *b[2]], rtol=1e-10, atol=1e-9)
    none_row = records.index(None)
    two = est.accumulator_factory().make()
    two.seq_update(enc.encode([records[0], records[none_row]]), np.array([2.0, 2.0]), None)
    four = est.accumulator_factory().make()
    four.seq_update(enc.encode([records[0], records[none_row]] * 2), np.ones(4), None)
    assert two.value()[:2] == four.value()[:2]
    np.testing.assert_allclose(two.value()[2], four.value()[2], rtol=1e-12)
    one = est.accumulator_factory().make()
    one.seq_initialize(enc.encode(records), w, RowRandom.for_rows(9, 0, 300))
    split = est.accumulator_factory().make()
    for start, stop in ((0, 150), (150, 300)):
        part = est.accumulator_factory().make()
        part.seq_initialize(
            enc.encode(records[start:stop]), w[start:stop], RowRandom.for_rows(9, start, stop - start)
        )
        split.combine(part.value())
    np.testing.assert_allclose(split.value()[2], one.value()[2], rtol=1e-10)


def test_json_round_trip_and_spec_errors() -> None:
    for d in (OptionalDistribution(G, 0.1), OptionalDistribution(G)):
        assert distribution_from_dict(json.loads(json.dumps(d.to_dict()))) == d
    assert "p" not in OptionalDistribution(G).to_dict()
    est = OptionalEstimator(GaussianEstimator(), pseudo_count=1.0, model_missing=False, name="o", keys="k")
    assert estimator_from_dict(json.loads(json.dumps(est.to_dict()))) == est
    with pytest.raises(
        SpecError, match=r"OptionalDistribution: p must be a probability in \[0, 1\] or None, got 1.5"
    ):
        OptionalDistribution(G, 1.5)
    with pytest.raises(SpecError, match=r"pseudo_count must be a non-negative number, got -1"):
        OptionalEstimator(GaussianEstimator(), pseudo_count=-1)
