"""SequenceDistribution / SequenceEstimator: list columns with a length model."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError, DataValueError, SchemaError, SpecError
from mixle_spark.stats.base import RowRandom, distribution_from_dict, estimator_from_dict
from mixle_spark.stats.gaussian import GaussianDistribution, GaussianEstimator
from mixle_spark.stats.mixture import MixtureDistribution
from mixle_spark.stats.optional import OptionalDistribution
from mixle_spark.stats.poisson import PoissonDistribution, PoissonEstimator
from mixle_spark.stats.record import RecordDistribution
from mixle_spark.stats.sequence import SequenceDistribution, SequenceEncoded, SequenceEstimator

G = GaussianDistribution(1.0, 2.0)
P = PoissonDistribution(3.0)
RECORDS = [[0.5, 1.5], [], [2.0, -1.0, 4.0], np.array([3.0])]


def by_hand(r: list, with_len: bool = True) -> float:
    return sum(G.log_density(x) for x in r) + (P.log_density(len(r)) if with_len else 0.0)


def test_log_density_by_hand() -> None:
    d = SequenceDistribution(G, P)
    expected = [by_hand(r) for r in RECORDS]
    np.testing.assert_allclose([d.log_density(r) for r in RECORDS], expected, rtol=1e-15)
    enc = d.encoder().encode(RECORDS)
    assert isinstance(enc, SequenceEncoded)
    assert enc.lengths.tolist() == [2, 0, 3, 1] and enc.owner.tolist() == [0, 0, 2, 2, 2, 3]
    np.testing.assert_allclose(d.seq_log_density(enc), expected, rtol=1e-15)
    no_len = SequenceDistribution(G)
    np.testing.assert_allclose(
        no_len.seq_log_density(no_len.encoder().encode(RECORDS)),
        [by_hand(r, False) for r in RECORDS],
        rtol=1e-15,
    )
    # a model with len_dist scores an encoding made without a length encoder
    np.testing.assert_allclose(d.seq_log_density(no_len.encoder().encode(RECORDS)), expected, rtol=1e-15)


def test_arrow_list_large_list_sliced_zero_copy() -> None:
    d = SequenceDistribution(G, P)
    expected = [by_hand(r) for r in RECORDS]
    lists = pa.array([[9.0, 9.0], *[list(map(float, r)) for r in RECORDS]])
    sliced = lists.slice(1)
    enc = d.encoder().from_arrow(sliced)
    np.testing.assert_allclose(d.seq_log_density(enc), expected, rtol=1e-15)
    # the element values are a view of the Arrow buffer, not a copy
    values_buffer = lists.values.buffers()[1]
    assert np.shares_memory(enc.values, np.frombuffer(values_buffer, dtype=np.float64))
    large = pa.array([list(map(float, r)) for r in RECORDS], type=pa.large_list(pa.float64()))
    np.testing.assert_allclose(d.seq_log_density(d.encoder().from_arrow(large)), expected, rtol=1e-15)
    d.encoder().check_arrow_type(large.type)
    with pytest.raises(
        SchemaError, match=r"expected a list column for SequenceEstimator, got Arrow type double"
    ):
        d.encoder().check_arrow_type(pa.float64())
    with pytest.raises(SchemaError, match=r"list element: expected a numeric column .*string"):
        d.encoder().check_arrow_type(pa.list_(pa.string()))


def test_null_lists_and_bad_elements() -> None:
    d = RecordDistribution({"tags": SequenceDistribution(G)})
    with pytest.raises(
        DataValueError, match=r"column 'tags': .*OptionalEstimator\), got null \(row 2 of 3\)"
    ):
        d.encoder().from_arrow(pa.table({"tags": pa.array([[1.0], None, [2.0]])}))
    with pytest.raises(
        DataValueError, match=r"column 'tags': .*OptionalEstimator\), got null \(row 1 of 1\)"
    ):
        d.encoder().encode([{"tags": None}])
    with pytest.raises(DataTypeError, match=r"column 'tags': expected a finite number .*'x' \(row 3 of 3\)"):
        d.encoder().encode([{"tags": [1.0]}, {"tags": []}, {"tags": [2.0, "x"]}])
    with pytest.raises(DataValueError, match=r"column 'tags': expected a finite number .*inf \(row 2 of 2\)"):
        d.encoder().from_arrow(
            pa.table({"tags": pa.array([[1.0, 2.0], [], [float("inf")]]).slice(0, 3).take([0, 2])})
        )
    with pytest.raises(
        DataTypeError, match=r"expected a sequence \(list or array\) of elements, got string 'ab'"
    ):
        SequenceDistribution(G).encoder().encode(["ab"])
    # an optional list column: nulls go to Optional, the rest to the sequence
    od = OptionalDistribution(SequenceDistribution(G, P), 0.5)
    enc = od.encoder().from_arrow(pa.array([[1.0], None, [2.0, 3.0]]))
    np.testing.assert_allclose(
        od.seq_log_density(enc), [od.log_density(r) for r in ([1.0], None, [2.0, 3.0])]
    )


def test_recovery_from_samples() -> None:
    truth = SequenceDistribution(GaussianDistribution(-2.0, 0.5), PoissonDistribution(4.0))
    records = truth.sampler(3).sample(5000)
    assert all(isinstance(r, list) for r in records)
    est = SequenceEstimator(GaussianEstimator(), PoissonEstimator())
    acc = est.accumulator_factory().make()
    acc.seq_update(est.encoder().encode(records), np.ones(len(records)), None)
    fit = est.estimate(len(records), acc.value())
    assert abs(fit.len_dist.lam - 4.0) < 0.1
    assert abs(fit.dist.mu + 2.0) < 0.02 and abs(fit.dist.sigma2 - 0.5) < 0.02
    assert fit.len_dist.lam == pytest.approx(sum(map(len, records)) / 5000, rel=1e-12)


def test_splits_weights_initialize_and_ll_by_product() -> None:
    d = SequenceDistribution(G, P)
    records = d.sampler(6).sample(300)
    est = d.estimator()
    enc = est.encoder()
    w = np.random.default_rng(2).uniform(0.5, 2.0, 300)

    def value(recs: list, weights: np.ndarray) -> tuple:
        acc = est.accumulator_factory().make()
        acc.seq_update(enc.encode(recs), weights, None)
        return acc.value()

    def flat(v: tuple) -> np.ndarray:
        return np.hstack([v[0], v[1], *v[2], np.hstack(v[3])])

    merged = est.accumulator_factory().make()
    for idx in (slice(250, 300), slice(0, 120), slice(120, 250)):
        merged.combine(value(records[idx], w[idx]))
    np.testing.assert_allclose(flat(merged.value()), flat(value(records, w)), rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(
        flat(value(records[:4], np.array([2.0, 1, 1, 1]))),
        flat(value(records[:4] + records[:1], np.ones(5))),
        rtol=1e-12,
    )
    one = est.accumulator_factory().make()
    one.seq_initialize(enc.encode(records), w, RowRandom.for_rows(4, 0, 300))
    split = est.accumulator_factory().make()
    for start, stop in ((0, 99), (99, 300)):
        part = est.accumulator_factory().make()
        part.seq_initialize(
            enc.encode(records[start:stop]), w[start:stop], RowRandom.for_rows(4, start, stop - start)
        )
        split.combine(part.value())
    np.testing.assert_allclose(flat(split.value()), flat(one.value()), rtol=1e-10)
    # with a mixture over elements, the update's log-likelihood is the model's
    mix = SequenceDistribution(
        MixtureDistribution([GaussianDistribution(0.0, 1.0), GaussianDistribution(4.0, 1.0)], [0.5, 0.5]), P
    )
    menc = mix.encoder().encode(records)
    ll = mix.estimator().accumulator_factory().make().seq_update(menc, np.ones(300), mix)
    np.testing.assert_allclose(ll, [mix.log_density(r) for r in records], rtol=1e-12)


def test_sampler_needs_len_dist_and_json_round_trip() -> None:
    with pytest.raises(SpecError, match=r"sampling needs len_dist .*got None"):
        SequenceDistribution(G).sampler(1)
    for d in (SequenceDistribution(G, P), SequenceDistribution(G)):
        assert distribution_from_dict(json.loads(json.dumps(d.to_dict()))) == d
    assert SequenceDistribution(G).to_dict() == {"type": "sequence", "dist": G.to_dict()}
    est = SequenceEstimator(GaussianEstimator(), PoissonEstimator(), name="s", keys="k")
    assert estimator_from_dict(json.loads(json.dumps(est.to_dict()))) == est
    with pytest.raises(
        SpecError, match=r"SequenceDistribution: len_dist must be a Distribution or None, got 3"
    ):
        SequenceDistribution(G, 3)
