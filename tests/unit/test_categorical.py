"""Categorical: vocabularies, Arrow encoding, unseen labels, estimation, JSON."""

import json
import math

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import (
    DataTypeError,
    DataValueError,
    EmptyDataError,
    SchemaError,
    SpecError,
    UnseenLabelError,
)
from mixle_spark.stats.base import distribution_from_dict, estimator_from_dict
from mixle_spark.stats.categorical import (
    CategoricalAccumulator,
    CategoricalDistribution,
    CategoricalEncoder,
    CategoricalEstimator,
    sorted_labels,
)

P = {"a": 0.5, "b": 0.3, "c": 0.2}


def _fit(est, records, w=None):
    enc = est.encoder()
    if enc.needs_scan:
        est = est.with_scan(enc.scan(records))
    acc = est.accumulator_factory().make()
    acc.seq_update(est.encoder().encode(records), np.ones(len(records)) if w is None else np.asarray(w), None)
    return est.estimate(None, acc.value())


def test_log_density_and_seq_agree():
    d = CategoricalDistribution(P)
    recs = ["a", "c", "b", "a"]
    expect = [math.log(P[r]) for r in recs]
    assert [d.log_density(r) for r in recs] == pytest.approx(expect, rel=1e-15)
    np.testing.assert_allclose(d.seq_log_density(d.encoder().encode(recs)), expect, rtol=1e-15)
    assert d.log_density("zz") == -math.inf
    assert d.log_density(["unhashable"]) == -math.inf
    assert d.log_density(None) == -math.inf


def test_vocabulary_order_is_deterministic_across_types():
    assert sorted_labels(["b", 3, "a", True, 1.5, 2, np.str_("c")]) == (True, 1.5, 2, 3, "a", "b", "c")
    assert CategoricalEncoder(["b", "a"]) == CategoricalEncoder(("a", "b"))
    assert CategoricalEncoder(["b", "a"]).union(CategoricalEncoder(["c"])).labels == ("a", "b", "c")


def test_seq_log_density_aligns_to_any_vocabulary():
    d = CategoricalDistribution(P)
    batch = CategoricalEncoder(["c", "x", "a"]).encode(["x", "a", "c"])  # vocabulary (a, c, x)
    np.testing.assert_allclose(d.seq_log_density(batch), [-math.inf, math.log(0.5), math.log(0.2)])
    np.testing.assert_allclose(d.seq_log_density(batch), d.seq_log_density(batch))  # cached path


@pytest.mark.parametrize(
    "array",
    [
        pa.array(["c", "a", "b", "a"]),
        pa.array(["c", "a", "b", "a"], type=pa.large_string()),
        pa.array(["c", "a", "b", "a"]).dictionary_encode(),
        pa.chunked_array([["c", "a"], ["b", "a"]]),
    ],
)
def test_arrow_string_types(array):
    batch = CategoricalEncoder(P).from_arrow(array)
    assert batch.codes.tolist() == [2, 0, 1, 0] and batch.labels == ("a", "b", "c")


def test_arrow_integer_and_bool():
    assert CategoricalEncoder([10, 20, 30]).from_arrow(
        pa.array([30, 10], type=pa.int16())
    ).codes.tolist() == [2, 0]
    assert CategoricalEncoder([True, False]).from_arrow(pa.array([True, False, True])).codes.tolist() == [
        1,
        0,
        1,
    ]
    mixed = CategoricalEncoder(["a", 1, 2])  # vocabulary (1, 2, 'a'): integer column maps to positions 0, 1
    assert mixed.from_arrow(pa.array([2, 1])).codes.tolist() == [1, 0]


def test_unseen_label_errors_name_label_row_and_vocabulary():
    enc = CategoricalEncoder(["a", "b", "c"])
    msg = r"label 'zz' is not in the model's vocabulary of 3 labels \('a', 'b', 'c'\) \(row 2 of 3\)"
    with pytest.raises(UnseenLabelError, match=msg):
        enc.encode(["a", "zz", "b"])
    with pytest.raises(UnseenLabelError, match=r"label 'zz'.*\(2 bad rows, first at row 2 of 4\)"):
        enc.from_arrow(pa.array(["a", "zz", "b", "zz"]))
    with pytest.raises(UnseenLabelError, match=r"label 'q' .*\(row 1 of 1\)"):
        enc.from_arrow(pa.array(["q"]).dictionary_encode())
    big = CategoricalEncoder([f"l{i:02d}" for i in range(12)])
    with pytest.raises(UnseenLabelError, match=r"vocabulary of 12 labels \('l00', .*'l09', \.\.\.\)"):
        big.encode(["nope"])


def test_unseen_zero_policy_scores_minus_inf_and_is_ignored_by_statistics():
    enc = CategoricalEncoder(["a", "b"], unseen="zero")
    batch = enc.from_arrow(pa.array(["a", "zz", "b"]))
    assert batch.codes.tolist() == [0, -1, 1]
    d = CategoricalDistribution({"a": 0.25, "b": 0.75})
    np.testing.assert_allclose(d.seq_log_density(batch), [math.log(0.25), -math.inf, math.log(0.75)])
    acc = CategoricalAccumulator(("a", "b"))
    acc.seq_update(batch, np.ones(3), None)
    assert acc.value().tolist() == [1.0, 1.0]
    with pytest.raises(SpecError, match="unseen must be 'error' or 'zero', got 'skip'"):
        CategoricalEncoder(["a"], unseen="skip")


def test_nulls_and_bad_types():
    enc = CategoricalEncoder(["a"])
    with pytest.raises(DataValueError, match=r"needs OptionalEstimator\), got null \(row 2 of 2\)"):
        enc.from_arrow(pa.array(["a", None]))
    with pytest.raises(DataValueError, match=r"got null \(row 1 of 1\)"):
        enc.encode([None])
    with pytest.raises(DataTypeError, match=r"got list \['x'\] \(row 1 of 1\)"):
        enc.encode([["x"]])
    with pytest.raises(DataTypeError, match=r"Arrow type double\), got 1.5"):
        enc.from_arrow(pa.array([1.5]))
    with pytest.raises(SchemaError, match="got Arrow type double"):
        enc.check_arrow_type(pa.float64())
    enc.check_arrow_type(pa.dictionary(pa.int32(), pa.string()))


def test_scan_and_merge():
    enc = CategoricalEstimator().encoder()
    assert enc.needs_scan
    a = enc.scan(["b", "a", None])
    b = enc.scan_arrow(pa.array(["c", "a", None]).dictionary_encode())
    assert enc.merge_scans(a, b) == enc.merge_scans(b, a) == frozenset("abc")
    est = CategoricalEstimator().with_scan(enc.merge_scans(a, b))
    assert est.labels == ("a", "b", "c") and not est.encoder().needs_scan


def test_recovery_and_whole_vocabulary_with_zero_probabilities():
    recs = CategoricalDistribution(P).sampler(1).sample(20000)
    fit = _fit(CategoricalEstimator(), recs)
    for k, p in P.items():
        assert abs(fit.pmap[k] - p) < 4 * math.sqrt(p * (1 - p) / 20000)
    fit2 = _fit(CategoricalEstimator(labels=["a", "b", "q"]), ["a", "a", "b"])
    assert fit2.pmap == {"a": 2 / 3, "b": 1 / 3, "q": 0.0}
    assert fit2.encoder().labels == ("a", "b", "q")


def test_pseudo_count_prior_min_prob_and_zero_weight():
    est = CategoricalEstimator(pseudo_count=3.0, labels=["a", "b", "c"])
    assert _fit(est, ["a"]).pmap == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.25})
    prior = CategoricalEstimator(pseudo_count=2.0, suff_stat={"a": 0.5, "d": 0.5})
    assert prior.with_scan(frozenset("ab")).labels == ("a", "b", "d")  # the prior's labels join
    assert _fit(prior, ["a", "b"]).pmap == pytest.approx({"a": 0.5, "b": 0.25, "d": 0.25})
    floored = CategoricalEstimator(min_prob=0.1, labels=["a", "b"])
    assert _fit(floored, ["a"]).pmap == pytest.approx({"a": 1 / 1.1, "b": 0.1 / 1.1})
    assert _fit(CategoricalEstimator(labels=["x", "y"]), ["x"], w=[0.0]).pmap == {"x": 0.5, "y": 0.5}
    with pytest.raises(EmptyDataError, match="no labels"):
        CategoricalEstimator(labels=[]).estimate(0.0, np.zeros(0))
    with pytest.raises(SpecError, match="has no vocabulary: give labels"):
        CategoricalEstimator().estimate(0.0, np.zeros(2))
    with pytest.raises(SpecError, match="has no vocabulary: give labels"):
        CategoricalAccumulator().seq_update(CategoricalEncoder().encode(["a"]), np.ones(1), None)


def test_weights_split_combine_and_batches_over_other_vocabularies():
    vocab = ("a", "b", "c")
    recs = ["a", "b", "c", "a", "b"]
    w = np.array([2.0, 0.0, 1.0, 1.0, 3.0])
    whole = CategoricalAccumulator(vocab)
    whole.seq_update(CategoricalEncoder(vocab).encode(recs), w, None)
    np.testing.assert_array_equal(whole.value(), [3.0, 3.0, 1.0])
    left, right = CategoricalAccumulator(vocab), CategoricalAccumulator(vocab)
    left.seq_update(CategoricalEncoder().encode(recs[:2]), w[:2], None)  # batch vocabulary (a, b)
    right.seq_update(CategoricalEncoder(["c", "a", "b", "zz"]).encode(recs[2:]), w[2:], None)  # a superset
    merged = CategoricalAccumulator(vocab).combine(right.value()).combine(left.value())
    np.testing.assert_array_equal(merged.value(), whole.value())
    with pytest.raises(
        UnseenLabelError, match=r"label 'zz' is not in the model's vocabulary of 3 labels.*row 2 of 2"
    ):
        CategoricalAccumulator(vocab).seq_update(CategoricalEncoder().encode(["a", "zz"]), np.ones(2), None)
    with pytest.raises(SpecError, match="cannot combine 2 counts into 3"):
        CategoricalAccumulator(vocab).combine(np.ones(2))


def test_parameter_validation():
    with pytest.raises(SpecError, match=r"probabilities summing to 1 \(sum 0.9\)"):
        CategoricalDistribution({"a": 0.5, "b": 0.4})
    with pytest.raises(SpecError, match=r"finite non-negative probabilities, got \{'a': -0.5"):
        CategoricalDistribution({"a": -0.5, "b": 1.5})
    with pytest.raises(SpecError, match=r"non-empty mapping label -> probability, got \{\}"):
        CategoricalDistribution({})
    with pytest.raises(SpecError, match=r"min_prob must be in \[0, 1\), got 1.5"):
        CategoricalEstimator(min_prob=1.5)
    d = CategoricalDistribution({"a": 1 / 3, "b": 2 / 3 + 1e-12})
    assert sum(d.pmap.values()) == pytest.approx(1.0, abs=1e-15)


def test_json_round_trip_keeps_label_types():
    d = CategoricalDistribution({2: 0.25, "1": 0.25, True: 0.25, 2.5: 0.25})
    spec = json.loads(json.dumps(d.to_dict()))
    again = distribution_from_dict(spec)
    assert again == d and set(map(type, again.pmap)) == {int, str, bool, float}
    est = CategoricalEstimator(pseudo_count=1.0, suff_stat={"x": 1.0}, labels=[3, 1], min_prob=0.01, keys="k")
    assert estimator_from_dict(json.loads(json.dumps(est.to_dict()))) == est
    with pytest.raises(SpecError, match="unknown key 'probs'"):
        distribution_from_dict({"type": "categorical", "probs": []})


def test_arrow_encoding_is_vectorized_at_scale():
    labels = [f"label{i}" for i in range(1000)]
    rng = np.random.default_rng(0)
    array = pa.array(np.array(labels, dtype=object)[rng.integers(0, 1000, 200000)])
    batch = CategoricalEncoder(labels).from_arrow(array)
    assert batch.labels[batch.codes[5]] == array[5].as_py()


def test_json_round_trip_is_bit_exact_for_m_step_probabilities() -> None:
    """Renormalising is idempotent, so a model read back from JSON scores exactly like the fitted one
    (a resumed fit repeats an uninterrupted one bit for bit)."""
    from mixle_spark.stats.categorical import CategoricalDistribution as Cat
    from mixle_spark.stats.integer_categorical import IntegerCategoricalDistribution as IntCat

    rng = np.random.default_rng(3)
    for _ in range(200):
        counts = rng.gamma(0.3, size=7) * 1e4
        p = counts / counts.sum()
        cat = Cat(dict(zip("abcdefg", p.tolist(), strict=True)))
        again = Cat.from_dict(json.loads(json.dumps(cat.to_dict())))
        assert list(again.pmap.values()) == list(cat.pmap.values())
        assert math.fsum(cat.pmap.values()) == 1.0
        ints = IntCat(0, p.tolist())
        assert IntCat.from_dict(json.loads(json.dumps(ints.to_dict()))).p_vec.tolist() == ints.p_vec.tolist()
