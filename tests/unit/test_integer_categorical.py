"""IntegerCategorical: support, encoding, scans, estimation, JSON."""

import json
import math

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError, DataValueError, EmptyDataError, SchemaError, SpecError
from mixle_spark.stats.base import distribution_from_dict, estimator_from_dict
from mixle_spark.stats.integer_categorical import (
    IntegerCategoricalAccumulator,
    IntegerCategoricalDistribution,
    IntegerCategoricalEncoder,
    IntegerCategoricalEstimator,
)


def _fit(est, records, w=None):
    enc = est.encoder()
    if enc.needs_scan:
        est = est.with_scan(enc.scan(records))
    acc = est.accumulator_factory().make()
    acc.seq_update(est.encoder().encode(records), np.ones(len(records)) if w is None else np.asarray(w), None)
    return est.estimate(None, acc.value())


def test_log_density_support_and_seq_agree():
    d = IntegerCategoricalDistribution(-1, [0.2, 0.3, 0.5])
    recs = [-1, 0, 1, 2, -2, 1.0]
    expect = [math.log(0.2), math.log(0.3), math.log(0.5), -math.inf, -math.inf, math.log(0.5)]
    assert [d.log_density(r) for r in recs] == expect
    assert d.seq_log_density(d.encoder().encode(recs)).tolist() == expect
    assert d.seq_log_density(IntegerCategoricalEncoder(5).encode(recs)).tolist() == expect  # any offset
    assert d.log_density(0.5) == d.log_density("x") == d.log_density(True) == -math.inf


def test_encoding_arrow_and_records():
    enc = IntegerCategoricalEncoder(2, 5)
    b = enc.from_arrow(pa.array([5, 2, 3], type=pa.int8()))
    assert b.codes.tolist() == [3, 0, 1] and b.min_val == 2
    assert enc.from_arrow(pa.array([4.0, 2.0])).codes.tolist() == [2, 0]
    assert enc.encode(np.array([2, 5])).codes.tolist() == [0, 3]
    with pytest.raises(DataValueError, match=r"expected an integer in \[2, 5\].*got 7 \(row 2 of 2\)"):
        enc.encode([3, 7])
    with pytest.raises(DataValueError, match=r"got 2.5 \(row 2 of 2\)"):
        enc.encode([3, 2.5])
    with pytest.raises(DataValueError, match=r"got 2.5 \(row 1 of 1\)"):
        enc.from_arrow(pa.array([2.5]))
    with pytest.raises(DataValueError, match=r"OptionalEstimator\), got null \(row 2 of 2\)"):
        enc.from_arrow(pa.array([3, None]))
    with pytest.raises(DataTypeError, match=r"got string 'a' \(row 1 of 1\)"):
        enc.encode(["a"])
    with pytest.raises(SchemaError, match="got Arrow type string"):
        enc.check_arrow_type(pa.string())


def test_scan_learns_range():
    enc = IntegerCategoricalEstimator().encoder()
    assert enc.needs_scan
    scan = enc.merge_scans(enc.scan([3, 7]), enc.scan_arrow(pa.array([-2, 4])))
    assert scan == (-2, 7) and enc.merge_scans(None, scan) == scan
    est = IntegerCategoricalEstimator(max_val=10).with_scan(scan)
    assert (est.min_val, est.max_val) == (-2, 10) and not est.encoder().needs_scan


def test_recovery_and_closed_forms():
    p = np.array([0.1, 0.0, 0.3, 0.6])
    recs = IntegerCategoricalDistribution(4, p).sampler(2).sample(20000)
    fit = _fit(IntegerCategoricalEstimator(), recs)
    assert fit.min_val == 4 and fit.p_vec[1] == 0.0
    assert np.all(np.abs(fit.p_vec - p) < 4 * np.sqrt(p * (1 - p) / 20000) + 1e-12)
    fixed = _fit(IntegerCategoricalEstimator(0, 3, pseudo_count=4.0), [1, 1])
    np.testing.assert_allclose(fixed.p_vec, [1 / 6, 3 / 6, 1 / 6, 1 / 6])
    prior = _fit(IntegerCategoricalEstimator(pseudo_count=2.0, suff_stat=(0, [0.5, 0.5])), [2])
    assert prior.min_val == 0 and prior.p_vec.tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3])
    zero = _fit(IntegerCategoricalEstimator(1, 4), [2], w=[0.0])
    assert zero.p_vec.tolist() == [0.25] * 4
    with pytest.raises(EmptyDataError, match="no data"):
        IntegerCategoricalEstimator().estimate(0.0, IntegerCategoricalAccumulator().value())


def test_weights_and_combine_over_different_ranges():
    recs, w = np.array([1, 5, 3, 1, 9]), np.array([2.0, 1.0, 0.0, 1.0, 0.5])
    whole = IntegerCategoricalAccumulator()
    whole.seq_update(IntegerCategoricalEncoder().encode(recs), w, None)
    a, b = IntegerCategoricalAccumulator(), IntegerCategoricalAccumulator(0, 2)
    a.seq_update(IntegerCategoricalEncoder(1).encode(recs[:2]), w[:2], None)
    b.seq_update(IntegerCategoricalEncoder().encode(recs[2:]), w[2:], None)
    for merged in (
        IntegerCategoricalAccumulator().combine(a.value()).combine(b.value()),
        IntegerCategoricalAccumulator().combine(b.value()).combine(a.value()),
    ):
        lo, counts = merged.value()
        full = np.zeros(10)
        full[lo : lo + len(counts)] = counts
        ref = np.zeros(10)
        ref[whole.value()[0] : whole.value()[0] + len(whole.value()[1])] = whole.value()[1]
        np.testing.assert_array_equal(full, ref)
    assert whole.value()[0] == 1 and whole.value()[1].tolist() == [3.0, 0, 0, 0, 1.0, 0, 0, 0, 0.5]


def test_parameter_validation_and_json():
    with pytest.raises(SpecError, match=r"min_val must be an integer, got 1.5"):
        IntegerCategoricalDistribution(1.5, [1.0])
    with pytest.raises(SpecError, match=r"p_vec must be probabilities summing to 1 \(sum 0.5\)"):
        IntegerCategoricalDistribution(0, [0.25, 0.25])
    with pytest.raises(SpecError, match=r"non-negative probabilities, got \[1.5, -0.5\]"):
        IntegerCategoricalDistribution(0, [1.5, -0.5])
    with pytest.raises(SpecError, match=r"max_val must be at least min_val = 3, got 1"):
        IntegerCategoricalEstimator(3, 1)
    d = IntegerCategoricalDistribution(-3, [0.1, 0.2, 0.7])
    assert distribution_from_dict(json.loads(json.dumps(d.to_dict()))) == d
    est = IntegerCategoricalEstimator(0, 4, pseudo_count=1.0, suff_stat=(1, [0.5, 0.5]), min_prob=0.01)
    assert estimator_from_dict(json.loads(json.dumps(est.to_dict()))) == est
    with pytest.raises(SpecError, match="unknown key 'low'"):
        estimator_from_dict({"type": "integer_categorical", "low": 0})
