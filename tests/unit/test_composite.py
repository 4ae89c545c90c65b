"""CompositeDistribution / CompositeEstimator: positional tuples."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError, SchemaError, SpecError
from mixle_spark.stats.base import RowRandom, distribution_from_dict, estimator_from_dict
from mixle_spark.stats.composite import CompositeDistribution, CompositeEstimator
from mixle_spark.stats.gaussian import GaussianDistribution, GaussianEstimator
from mixle_spark.stats.record import RecordDistribution


def model() -> CompositeDistribution:
    return CompositeDistribution((GaussianDistribution(0.0, 1.0), GaussianDistribution(10.0, 4.0)))


def estimator() -> CompositeEstimator:
    return CompositeEstimator([GaussianEstimator(), GaussianEstimator()])


def test_log_density_by_hand_and_arrow_positional() -> None:
    d = model()
    records = [(0.5, 9.0), (-1.0, 12.0), [2.0, 10.0]]
    expected = [
        GaussianDistribution(0.0, 1.0).log_density(a) + GaussianDistribution(10.0, 4.0).log_density(b)
        for a, b in records
    ]
    np.testing.assert_allclose([d.log_density(r) for r in records], expected, rtol=1e-15)
    np.testing.assert_allclose(d.seq_log_density(d.encoder().encode(records)), expected, rtol=1e-15)
    struct = pa.StructArray.from_arrays(
        [pa.array([0.5, -1.0, 2.0]), pa.array([9.0, 12.0, 10.0])], names=["x", "y"]
    )
    np.testing.assert_allclose(d.seq_log_density(d.encoder().from_arrow(struct)), expected, rtol=1e-15)
    batch = pa.RecordBatch.from_arrays([pa.array([0.5, -1.0, 2.0]), pa.array([9, 12, 10])], names=["p", "q"])
    np.testing.assert_allclose(d.seq_log_density(d.encoder().from_arrow(batch)), expected, rtol=1e-15)
    d.encoder().check_arrow_type(batch.schema)


def test_errors_name_the_position_and_value() -> None:
    with pytest.raises(DataTypeError, match=r"column '1': expected a finite number .*'oops' \(row 2 of 2\)"):
        model().encoder().encode([(1.0, 2.0), (1.0, "oops")])
    with pytest.raises(
        DataTypeError, match=r"expected a tuple of 2 values, got tuple \(1.0,\) \(row 1 of 1\)"
    ):
        model().encoder().encode([(1.0,)])
    nested = RecordDistribution({"pair": model()})
    with pytest.raises(DataTypeError, match=r"column 'pair.0': expected a finite number .*'x'"):
        nested.encoder().encode([{"pair": ("x", 1.0)}])
    with pytest.raises(SchemaError, match=r"column 'pair.1': expected a numeric column .*string"):
        nested.encoder().check_arrow_type(
            pa.schema([("pair", pa.struct([("a", pa.float64()), ("b", pa.string())]))])
        )
    with pytest.raises(
        SchemaError, match=r"expected a struct of 2 fields for CompositeEstimator, got struct<a: double>"
    ):
        model().encoder().from_arrow(pa.array([{"a": 1.0}]))


def test_recovery_split_weights_initialize() -> None:
    records = model().sampler(1).sample(20000)
    assert isinstance(records[0], tuple) and len(records[0]) == 2
    est = estimator()
    enc = est.encoder()
    acc = est.accumulator_factory().make()
    acc.seq_update(enc.encode(records), np.ones(len(records)), None)
    fit = est.estimate(len(records), acc.value())
    assert abs(fit.components[0].mu) < 0.03 and abs(fit.components[1].mu - 10.0) < 0.06
    assert abs(fit.components[1].sigma2 - 4.0) < 0.15
    w = np.random.default_rng(0).uniform(0.5, 2, 300)
    small = records[:300]
    whole = est.accumulator_factory().make()
    whole.seq_update(enc.encode(small), w, None)
    merged = est.accumulator_factory().make()
    for idx in (slice(200, 300), slice(0, 200)):
        merged.combine(
            est.accumulator_factory().make().combine(_value(est, enc.encode(small[idx]), w[idx])).value()
        )
    np.testing.assert_allclose(np.hstack(merged.value()), np.hstack(whole.value()), rtol=1e-10, atol=1e-9)
    a = _value(est, enc.encode(small[:3]), np.array([2.0, 1.0, 1.0]))
    b = _value(est, enc.encode(small[:3] + small[:1]), np.ones(4))
    np.testing.assert_allclose(np.hstack(a), np.hstack(b), rtol=1e-12)
    one = est.accumulator_factory().make()
    one.seq_initialize(enc.encode(small), w, RowRandom.for_rows(3, 0, 300))
    two = est.accumulator_factory().make()
    for start, stop in ((0, 100), (100, 300)):
        part = est.accumulator_factory().make()
        part.seq_initialize(
            enc.encode(small[start:stop]), w[start:stop], RowRandom.for_rows(3, start, stop - start)
        )
        two.combine(part.value())
    np.testing.assert_allclose(np.hstack(two.value()), np.hstack(one.value()), rtol=1e-10)


def _value(est: CompositeEstimator, enc: tuple, w: np.ndarray) -> tuple:
    acc = est.accumulator_factory().make()
    acc.seq_update(enc, w, None)
    return acc.value()


def test_json_round_trip_and_spec_errors() -> None:
    d = model()
    spec = json.loads(json.dumps(d.to_dict()))
    assert spec["type"] == "composite" and len(spec["components"]) == 2
    assert distribution_from_dict(spec) == d
    est = CompositeEstimator([GaussianEstimator(), GaussianEstimator(pseudo_count=1.0)], keys="c")
    assert estimator_from_dict(json.loads(json.dumps(est.to_dict()))) == est
    with pytest.raises(SpecError, match=r"components\[1\] must be a Distribution, got 'x'"):
        CompositeDistribution((GaussianDistribution(0, 1), "x"))
    with pytest.raises(SpecError, match=r"components must be a non-empty tuple .*\(\)"):
        CompositeDistribution(())
