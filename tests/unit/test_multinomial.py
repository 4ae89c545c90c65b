"""Multinomial (bag of words): closed-form densities, encodings, unseen tokens, bad input, estimation,
JSON, and a topic mixture."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

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
from mixle_spark.estimation import best_of, optimize
from mixle_spark.spec import estimator_from_spec, model_from_json, model_to_json
from mixle_spark.stats import (
    CategoricalDistribution,
    MixtureDistribution,
    MixtureEstimator,
    MultinomialAccumulator,
    MultinomialDistribution,
    MultinomialEncoder,
    MultinomialEstimator,
    PoissonDistribution,
    PoissonEstimator,
    RecordEstimator,
    RowRandom,
    SequenceDistribution,
)
from mixle_spark.stats.base import distribution_from_dict, estimator_from_dict
from tests.unit.cases_text import token_lists, token_maps

P = {"a": 0.5, "b": 0.3, "c": 0.2}
DOCS = [{"a": 2, "b": 1}, {"c": 3}, {}, {"a": 1, "b": 1, "c": 1}]
LISTS = [["a", "b", "a"], ["c", "c", "c"], [], ["c", "a", "b"]]


def _closed_form(
    bag: dict[str, int], p: dict[str, float], coefficient: bool = True, lam: float | None = None
):
    """log Mult(bag | n, p) (+ log Poisson(n | lam)) from math.lgamma, independent of the module."""
    n = sum(bag.values())
    out = sum(c * math.log(p[t]) for t, c in bag.items())
    if coefficient:
        out += math.lgamma(n + 1) - sum(math.lgamma(c + 1) for c in bag.values())
    if lam is not None:
        out += n * math.log(lam) - lam - math.lgamma(n + 1)
    return out


def _fit(est: MultinomialEstimator, records: list[Any], w: Any = None) -> Any:
    enc = est.encoder()
    if enc.needs_scan:
        est = est.with_scan(enc.scan(records))
    acc = est.accumulator_factory().make()
    acc.seq_update(est.encoder().encode(records), np.ones(len(records)) if w is None else np.asarray(w), None)
    return est.estimate(None, acc.value())


# -- densities --------------------------------------------------------------------------------------
@pytest.mark.parametrize("coefficient", [True, False])
@pytest.mark.parametrize("lam", [None, 2.5])
def test_log_density_matches_the_closed_form(coefficient: bool, lam: float | None) -> None:
    d = MultinomialDistribution(P, None if lam is None else PoissonDistribution(lam), coefficient)
    expect = [_closed_form(b, P, coefficient, lam) for b in DOCS]
    assert [d.log_density(b) for b in DOCS] == pytest.approx(expect, rel=1e-13, abs=1e-13)
    assert [d.log_density(x) for x in LISTS] == pytest.approx(expect, rel=1e-13, abs=1e-13)
    for data in (token_lists(DOCS), token_maps(DOCS)):
        got = d.seq_log_density(d.encoder().from_arrow(data))
        np.testing.assert_allclose(got, expect, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(d.seq_log_density(d.encoder().encode(DOCS)), expect, rtol=1e-13, atol=1e-13)


def test_hand_computed_value() -> None:
    # {"a": 2, "b": 1}: 3!/(2! 1!) * 0.5^2 * 0.3 = 0.225
    assert MultinomialDistribution(P).log_density({"a": 2, "b": 1}) == pytest.approx(
        math.log(0.225), rel=1e-14
    )


def test_without_coefficient_a_token_list_scores_like_a_sequence_of_categoricals() -> None:
    d = MultinomialDistribution(P, PoissonDistribution(3.0), include_coefficient=False)
    seq = SequenceDistribution(CategoricalDistribution(P), PoissonDistribution(3.0))
    want = seq.seq_log_density(seq.encoder().encode(LISTS))
    np.testing.assert_allclose(d.seq_log_density(d.encoder().encode(LISTS)), want, rtol=1e-13)


def test_coefficient_is_the_difference_and_changes_no_estimate() -> None:
    with_c, without = MultinomialDistribution(P), MultinomialDistribution(P, include_coefficient=False)
    enc = with_c.encoder().encode(DOCS)
    diff = with_c.seq_log_density(enc) - without.seq_log_density(enc)
    np.testing.assert_allclose(diff, [math.log(3), 0.0, 0.0, math.log(6)], atol=1e-13)
    a = _fit(MultinomialEstimator(), DOCS)
    b = _fit(MultinomialEstimator(include_coefficient=False), DOCS)
    assert a.pmap == b.pmap and a.include_coefficient and not b.include_coefficient


# -- encodings ----------------------------------------------------------------------------------------
def _entries(batch: Any) -> tuple[Any, ...]:
    return (
        batch.row.tolist(),
        batch.codes.tolist(),
        batch.counts.tolist(),
        batch.totals.tolist(),
        batch.log_coef.tolist(),
        batch.labels,
    )


def test_list_and_map_encodings_of_the_same_documents_are_identical() -> None:
    docs = MultinomialDistribution(P, PoissonDistribution(6.0)).sampler(3).sample(200)
    enc = MultinomialEncoder(P)
    want = _entries(enc.encode(docs))
    shuffled = [dict(reversed(list(d.items()))) for d in docs]  # key order does not matter
    token_order = [
        list(np.random.default_rng(i).permutation(x)) for i, x in enumerate(token_lists(docs).to_pylist())
    ]
    variants = [
        enc.from_arrow(token_lists(docs)),
        enc.from_arrow(token_maps(docs)),
        enc.from_arrow(token_maps(shuffled)),
        enc.from_arrow(pa.array(token_order, type=pa.large_list(pa.large_string()))),
        enc.from_arrow(pa.array(token_order, type=pa.list_(pa.dictionary(pa.int32(), pa.string())))),
        enc.from_arrow(pa.array([list(d.items()) for d in docs], type=pa.map_(pa.string(), pa.float64()))),
        enc.from_arrow(pa.chunked_array([token_maps(docs[:70]), token_maps(docs[70:])])),
        enc.from_arrow(pa.table({"doc": token_lists(docs)})),
        enc.encode(token_order),
        enc.encode(shuffled),
    ]
    for batch in variants:
        assert _entries(batch) == want


def test_sliced_arrays_read_their_own_rows() -> None:
    docs = MultinomialDistribution(P, PoissonDistribution(4.0)).sampler(5).sample(30)
    enc = MultinomialEncoder(P)
    for data in (token_lists(docs), token_maps(docs)):
        assert _entries(enc.from_arrow(data.slice(11, 9))) == _entries(enc.encode(docs[11:20]))


def test_integer_tokens_in_lists_and_maps() -> None:
    d = MultinomialDistribution({1: 0.5, 2: 0.25, 40: 0.25})
    docs = [{1: 2, 40: 1}, {2: 1}]
    want = [_closed_form(b, d.pmap) for b in docs]
    for data in (token_lists(docs, pa.int16()), token_maps(docs, pa.int32())):
        np.testing.assert_allclose(d.seq_log_density(d.encoder().from_arrow(data)), want, rtol=1e-13)


def test_zero_counts_are_dropped_and_learn_no_token() -> None:
    est = MultinomialEstimator()
    docs = [{"a": 2, "zzz": 0}, {"b": 1}]
    assert est.encoder().scan(docs) == (frozenset({"a", "b"}), None)
    assert est.encoder().scan_arrow(token_maps(docs)) == (frozenset({"a", "b"}), None)
    model = _fit(est, docs)
    assert model.labels == ("a", "b")
    assert model.log_density(docs[0]) == pytest.approx(math.log(2 / 3) * 2)


def test_compact_form_holds_codes_and_reads_back() -> None:
    d = MultinomialDistribution(P, PoissonDistribution(4.0))
    docs = d.sampler(9).sample(40)
    enc = d.encoder()
    compact = enc.compact_arrow(token_lists(docs))
    assert compact.type == pa.struct([("__mixle_bow_codes", pa.map_(pa.int32(), pa.float64()))])
    assert _entries(enc.from_arrow(compact.slice(5, 20))) == _entries(enc.encode(docs[5:25]))
    enc.check_arrow_type(compact.type)
    with pytest.raises(SpecError, match=r"token codes outside \[-1, 2\) for a vocabulary of 2 tokens"):
        MultinomialEncoder(["a", "b"]).from_arrow(compact)


# -- unseen tokens -----------------------------------------------------------------------------------
def test_unseen_tokens_raise_by_default() -> None:
    enc = MultinomialEncoder(P)
    docs = [["a"], ["b", "x"], {"x": 2, "y": 1}]
    with pytest.raises(
        UnseenLabelError,
        match=r"label 'x' is not in the model's vocabulary of 3 labels.*2 bad rows, first at row 2 of 3",
    ):
        enc.encode(docs)
    with pytest.raises(UnseenLabelError, match=r"label 'x' .*row 2 of 3"):
        enc.from_arrow(token_lists([{"a": 1}, {"b": 1, "x": 1}, {"x": 2}]))


def test_unseen_tokens_zero_score_minus_inf_and_carry_no_statistics() -> None:
    d = MultinomialDistribution(P, PoissonDistribution(2.0))
    docs = [{"a": 1}, {"a": 2, "x": 1}, {"b": 1}]
    assert d.log_density(docs[1]) == -math.inf
    enc = MultinomialEncoder(P, unseen="zero", len_encoder=PoissonDistribution(2.0).encoder())
    for batch in (
        enc.encode(docs),
        enc.from_arrow(token_maps(docs)),
        enc.from_arrow(enc.compact_arrow(token_maps(docs))),
    ):
        ll = d.seq_log_density(batch)
        assert ll[1] == -math.inf and np.isfinite(ll[[0, 2]]).all()
        assert batch.totals.tolist() == [1.0, 3.0, 1.0]  # the unseen token still counts in the length
        est = MultinomialEstimator(labels=P, len_estimator=PoissonEstimator())
        acc = est.accumulator_factory().make()
        acc.seq_update(batch, np.ones(3), None)
        row_weight, counts, len_value = acc.value()
        assert row_weight == 3.0 and counts.tolist() == [3.0, 1.0, 0.0] and len_value == (3.0, 5.0)


def test_a_model_scores_a_batch_encoded_with_another_vocabulary() -> None:
    d = MultinomialDistribution(P)
    batch = MultinomialEncoder(["c", "x", "a"]).encode([{"x": 1}, {"a": 1, "c": 2}])
    want = [-math.inf, _closed_form({"a": 1, "c": 2}, P)]
    np.testing.assert_allclose(d.seq_log_density(batch), want)
    np.testing.assert_allclose(d.seq_log_density(batch), want)  # cached alignment


def test_accumulator_rejects_weighted_tokens_outside_its_vocabulary() -> None:
    acc = MultinomialAccumulator(("a", "b"))
    acc.seq_update(MultinomialEncoder(["a", "b", "c"]).encode([{"a": 1}, {"b": 2}]), np.ones(2), None)
    assert acc.value()[1].tolist() == [1.0, 2.0]
    with pytest.raises(UnseenLabelError, match=r"label 'c' .*row 2 of 2"):
        acc.seq_update(MultinomialEncoder(["a", "b", "c"]).encode([{"a": 1}, {"c": 2}]), np.ones(2), None)


def test_encoder_union_covers_both_vocabularies() -> None:
    a = MultinomialEncoder(["a", "b"], len_encoder=PoissonDistribution(1.0).encoder())
    u = a.union(MultinomialEncoder(["c"], unseen="zero"))
    assert u.labels == ("a", "b", "c") and u.unseen == "zero" and u.len_encoder is not None
    assert MultinomialEncoder().union(a).labels is None
    with pytest.raises(TypeError, match="cannot combine encoders"):
        a.union(CategoricalDistribution(P).encoder())


# -- bad input -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("records", "error", "match"),
    [
        (
            [{"a": 1}, None],
            DataValueError,
            r"expected a bag of words .*missing value needs OptionalEstimator\), got null \(row 2 of 2\)",
        ),
        ([["a"], "a b c"], DataTypeError, r"expected a bag of words .*got string 'a b c' \(row 2 of 2\)"),
        ([["a"], 3], DataTypeError, r"expected a bag of words .*got 3 \(row 2 of 2\)"),
        ([["a", None]], DataValueError, r"expected a token .*\(a null token\), got null \(row 1 of 1\)"),
        ([["a"], [["nested"]]], DataTypeError, r"expected a token .*got list \['nested'\] \(row 2 of 2\)"),
        (
            [{"a": 1}, {"b": -2}],
            DataValueError,
            r"non-negative integer count for MultinomialEstimator \(token 'b'\), got -2 \(row 2 of 2\)",
        ),
        ([{"a": 1.5}], DataValueError, r"\(token 'a'\), got 1.5 \(row 1 of 1\)"),
        ([{"a": float("nan")}], DataValueError, r"\(token 'a'\), got nan"),
        ([{"a": None}], DataValueError, r"\(token 'a'\), got null"),
        ([{"a": "2"}], DataTypeError, r"\(token 'a'\), got string '2'"),
        ([{"a": True}], DataTypeError, r"\(token 'a'\), got boolean True"),
    ],
)
def test_bad_python_records(records: list[Any], error: type, match: str) -> None:
    for encoder in (MultinomialEncoder(), MultinomialEncoder(["a", "b"])):
        with pytest.raises(error, match=match):
            encoder.encode(records)
    with pytest.raises(error, match=match):
        MultinomialEncoder().scan(records)


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (
            pa.array([["a"], None, None], pa.list_(pa.string())),
            DataValueError,
            r"expected a bag of words .*got null \(2 bad rows, first at row 2 of 3\)",
        ),
        (
            pa.array([["a"], ["b", None]], pa.list_(pa.string())),
            DataValueError,
            r"\(a null token\), got null \(row 2 of 2\)",
        ),
        (
            pa.array([[("a", 1)], [("a", 2), ("b", -1)]], pa.map_(pa.string(), pa.int64())),
            DataValueError,
            r"\(token 'b'\), got -1 \(row 2 of 2\)",
        ),
        (
            pa.array([[("a", 0.5)], [("a", 2.5)]], pa.map_(pa.string(), pa.float64())),
            DataValueError,
            r"\(token 'a'\), got 0.5 \(2 bad rows, first at row 1 of 2\)",
        ),
        (
            pa.array([[("a", float("inf"))]], pa.map_(pa.string(), pa.float64())),
            DataValueError,
            r"\(token 'a'\), got inf \(row 1 of 1\)",
        ),
        (
            pa.array([[("a", None)]], pa.map_(pa.string(), pa.int64())),
            DataValueError,
            r"\(token 'a'\), got null \(row 1 of 1\)",
        ),
        (
            pa.array(["a b", "c"]),
            DataTypeError,
            r"expected a bag of words .*\(Arrow type string\), got string 'a b' \(row 1 of 2\)",
        ),
        (
            pa.array([[1.5]], pa.list_(pa.float64())),
            DataTypeError,
            r"expected a token .*\(Arrow type double\), got 1.5",
        ),
        (
            pa.array([[("a", "x")]], pa.map_(pa.string(), pa.string())),
            DataTypeError,
            r"non-negative integer count .*\(Arrow type string\), got string 'x'",
        ),
    ],
)
def test_bad_arrow_columns(data: pa.Array, error: type, match: str) -> None:
    for encoder in (MultinomialEncoder(), MultinomialEncoder(["a", "b"])):
        with pytest.raises(error, match=match):
            encoder.from_arrow(data)
    with pytest.raises(error, match=match):
        MultinomialEncoder().scan_arrow(data)


def test_errors_name_the_column_inside_a_record() -> None:
    table = pa.table({"doc": token_maps([{"a": 1}, {"a": 1}, {"b": 3}]), "x": [1, 2, 3]})
    bad = table.set_column(
        0, "doc", pa.array([[("a", 1)], [("a", 1)], [("b", -3)]], pa.map_(pa.string(), pa.int64()))
    )
    est = RecordEstimator({"doc": MultinomialEstimator()})
    with pytest.raises(
        DataValueError,
        match=r"column 'doc': expected a non-negative integer count .*\(token 'b'\), got -3 \(row 3 of 3\)",
    ):
        optimize(bad.select(["doc"]), est)
    rows = [{"doc": ["a"]}, {"doc": None}]
    with pytest.raises(
        DataValueError, match=r"column 'doc': expected a bag of words .*got null \(row 2 of 2\)"
    ):
        optimize(rows, est)


def test_check_arrow_type() -> None:
    enc = MultinomialEncoder()
    for typ in (
        pa.list_(pa.string()),
        pa.large_list(pa.large_string()),
        pa.list_(pa.int64()),
        pa.map_(pa.string(), pa.int32()),
        pa.map_(pa.int64(), pa.float64()),
    ):
        enc.check_arrow_type(typ)
    for typ in (
        pa.string(),
        pa.list_(pa.float64()),
        pa.map_(pa.string(), pa.string()),
        pa.struct([("a", pa.int64())]),
    ):
        with pytest.raises(SchemaError, match=rf"expected a list column of tokens .* got Arrow type {typ}"):
            enc.check_arrow_type(typ)


def test_log_density_is_minus_inf_for_anything_but_a_bag_of_words() -> None:
    d = MultinomialDistribution(P)
    for x in (None, "abc", 3, {"a": -1}, {"a": 1.5}, [["a"]], [None], {"a": True}):
        assert d.log_density(x) == -math.inf
    assert d.log_density(np.array(["a", "b"])) == pytest.approx(_closed_form({"a": 1, "b": 1}, P))


# -- parameters --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("build", "match"),
    [
        (
            lambda: MultinomialDistribution({}),
            r"MultinomialDistribution: pmap must be a non-empty mapping token -> probability, got \{\}",
        ),
        (lambda: MultinomialDistribution({"a": 0.5, "b": 0.4}), r"probabilities summing to 1 \(sum 0.9\)"),
        (
            lambda: MultinomialDistribution({"a": -0.5, "b": 1.5}),
            r"finite non-negative probabilities, got \{'a': -0.5",
        ),
        (
            lambda: MultinomialDistribution(P, len_dist="poisson"),
            r"len_dist must be a Distribution or None, got 'poisson'",
        ),
        (
            lambda: MultinomialDistribution(P, include_coefficient=1),
            r"include_coefficient must be True or False, got 1",
        ),
        (lambda: MultinomialEncoder(unseen="drop"), r"unseen must be 'error' or 'zero', got 'drop'"),
        (
            lambda: MultinomialEstimator(pseudo_count=-1.0),
            r"pseudo_count must be a non-negative number, got -1.0",
        ),
        (lambda: MultinomialEstimator(min_prob=1.0), r"min_prob must be in \[0, 1\), got 1.0"),
        (
            lambda: MultinomialEstimator(len_estimator="poisson"),
            r"len_estimator must be an Estimator or None, got 'poisson'",
        ),
        (
            lambda: MultinomialEstimator(suff_stat={"a": 2.0}),
            r"MultinomialEstimator suff_stat: pmap must be probabilities summing to 1 \(sum 2.0\)",
        ),
        (
            lambda: MultinomialEstimator(include_coefficient="yes"),
            r"include_coefficient must be True or False, got 'yes'",
        ),
        (lambda: MultinomialDistribution(P).sampler(1), r"sampling needs len_dist .*got None"),
        (
            lambda: estimator_from_dict({"type": "multinomial", "vocab": ["a"]}),
            r"unknown key 'vocab' in multinomial spec",
        ),
        (
            lambda: distribution_from_dict({"type": "multinomial"}),
            r"multinomial spec is missing required key 'pmap'",
        ),
    ],
)
def test_bad_parameters(build: Any, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        build()


def test_estimator_without_a_vocabulary_or_tokens() -> None:
    est = MultinomialEstimator()
    with pytest.raises(SpecError, match=r"MultinomialEstimator has no vocabulary: give labels=\[...\]"):
        est.estimate(1.0, (1.0, np.zeros(0), None))
    with pytest.raises(SpecError, match=r"MultinomialEstimator has no vocabulary"):
        est.accumulator_factory().make().seq_update(
            MultinomialEncoder(["a"]).encode([["a"]]), np.ones(1), None
        )
    with pytest.raises(EmptyDataError, match=r"no tokens in the data and no `labels` given"):
        est.with_scan((frozenset(), None)).estimate(1.0, (1.0, np.zeros(0), None))
    with pytest.raises(SpecError, match=r"3 counts for a vocabulary of 2 tokens"):
        MultinomialEstimator(labels=["a", "b"]).estimate(1.0, (1.0, np.ones(3), None))
    acc = MultinomialEstimator(labels=["a", "b"]).accumulator_factory().make()
    with pytest.raises(SpecError, match=r"cannot combine 3 counts into 2 \(different vocabularies\)"):
        acc.combine((1.0, np.ones(3), None))


# -- estimation ------------------------------------------------------------------------------------------
def test_weighted_counts_and_dirichlet_smoothing() -> None:
    docs = [{"a": 3, "b": 1}, {"b": 2, "c": 1}]
    w = [2.0, 0.5]
    # Weighted counts: a = 6, b = 2 + 1 = 3, c = 0.5; total 9.5.
    assert _fit(MultinomialEstimator(), docs, w).pmap == pytest.approx(
        {"a": 6 / 9.5, "b": 3 / 9.5, "c": 0.5 / 9.5}
    )
    smoothed = _fit(MultinomialEstimator(pseudo_count=3.0), docs, w).pmap
    assert smoothed == pytest.approx({"a": 7 / 12.5, "b": 4 / 12.5, "c": 1.5 / 12.5})
    prior = _fit(MultinomialEstimator(pseudo_count=2.0, suff_stat={"a": 0.5, "z": 0.5}), docs, w).pmap
    assert prior == pytest.approx({"a": 7 / 11.5, "b": 3 / 11.5, "c": 0.5 / 11.5, "z": 1 / 11.5})
    floored = _fit(MultinomialEstimator(labels=["a", "b", "c", "d"], min_prob=0.05), docs, w).pmap
    assert floored["d"] == pytest.approx(0.05 / (1 + 0.05), rel=1e-12)
    uniform = MultinomialEstimator(labels=["a", "b"]).estimate(0.0, (0.0, np.zeros(2), None))
    assert uniform.pmap == {"a": 0.5, "b": 0.5}


def test_fixed_vocabulary() -> None:
    est = MultinomialEstimator(labels=["b", "a", "c"])
    assert not est.encoder().needs_scan and est.encoder().labels == ("a", "b", "c")
    assert _fit(est, [["a", "a"]]).pmap == {"a": 1.0, "b": 0.0, "c": 0.0}
    with pytest.raises(UnseenLabelError, match=r"label 'q' is not in the model's vocabulary of 3 labels"):
        _fit(est, [["a", "q"]])


def test_parameter_recovery_with_a_length_model() -> None:
    truth = MultinomialDistribution(P, PoissonDistribution(7.0))
    docs = truth.sampler(21).sample(4000)  # ~28000 tokens: standard errors below 0.003
    model = optimize(docs, MultinomialEstimator(len_estimator=PoissonEstimator()), max_its=3)
    for token, p in P.items():
        assert model.pmap[token] == pytest.approx(p, abs=0.012)
    assert model.len_dist.lam == pytest.approx(7.0, abs=0.15)
    no_len = optimize(docs, MultinomialEstimator(), max_its=3)
    assert no_len.len_dist is None and no_len.pmap == pytest.approx(model.pmap, rel=1e-12)


def test_seq_initialize_uses_the_length_accumulator() -> None:
    est = MultinomialEstimator(labels=P, len_estimator=PoissonEstimator())
    acc = est.accumulator_factory().make()
    acc.seq_initialize(est.encoder().encode(DOCS), np.ones(4), RowRandom.for_rows(1, 0, 4))
    assert acc.value()[0] == 4.0 and acc.value()[2] == (4.0, 9.0)


def test_keys_tie_token_probabilities() -> None:
    est = MixtureEstimator([MultinomialEstimator(labels=P, keys="shared")] * 2)
    model = optimize([{"a": 3}, {"b": 1, "c": 1}, {"a": 1}] * 5, est, max_its=5, seed=1)
    assert model.components[0].pmap == model.components[1].pmap


# -- JSON --------------------------------------------------------------------------------------------
def test_json_round_trips() -> None:
    d = MultinomialDistribution({"a": 0.1, 3: 0.9}, PoissonDistribution(2.0), include_coefficient=False)
    restored = model_from_json(model_to_json(d))
    assert restored == d and restored.pmap == {"a": 0.1, 3: 0.9} and not restored.include_coefficient
    est = MultinomialEstimator(
        pseudo_count=1.5,
        suff_stat={"a": 0.25, "b": 0.75},
        labels=["b", "c"],
        len_estimator=PoissonEstimator(),
        min_prob=1e-6,
        include_coefficient=False,
        name="words",
        keys="k",
    )
    spec = json.loads(json.dumps(est.to_dict()))
    assert spec["labels"] == ["a", "b", "c"] and spec["len_estimator"] == {"type": "poisson"}
    assert estimator_from_dict(spec) == est
    assert estimator_from_spec({"type": "multinomial", "len_estimator": "poisson"}) == MultinomialEstimator(
        len_estimator=PoissonEstimator()
    )
    assert MultinomialEstimator().to_dict() == {"type": "multinomial"}


def test_distribution_estimator_uses_the_model_as_prior() -> None:
    d = MultinomialDistribution(P, PoissonDistribution(2.0))
    est = d.estimator(pseudo_count=10.0)
    assert est.suff_stat == P and est.pseudo_count == 10.0 and isinstance(est.len_estimator, PoissonEstimator)
    assert d.estimator().to_dict() == {"type": "multinomial", "len_estimator": {"type": "poisson"}}


# -- a topic mixture --------------------------------------------------------------------------------------
def _topics(rng: np.random.Generator, vocab: list[str]) -> list[dict[str, float]]:
    """Three topics over 30 words: each puts 85% of its mass on its own 10 words."""
    topics = []
    for k in range(3):
        weights = rng.uniform(0.5, 1.5, len(vocab))
        own = np.zeros(len(vocab), dtype=bool)
        own[10 * k : 10 * (k + 1)] = True
        p = np.where(own, 0.85 * weights / weights[own].sum(), 0.15 * weights / weights[~own].sum())
        topics.append(dict(zip(vocab, (p / p.sum()).tolist(), strict=True)))
    return topics


def test_mixture_of_multinomials_recovers_three_topics() -> None:
    """600 documents of ~50 tokens from 3 topics over 30 words: after EM (best of 4 restarts), matched by
    the best permutation, every token probability is within 0.02 of the truth (max |p - p_true| over 90
    values; the fit reaches ~0.005) and every weight within 0.05."""
    vocab = [f"w{i:02d}" for i in range(30)]
    topics = _topics(np.random.default_rng(0), vocab)
    truth = MixtureDistribution(
        [MultinomialDistribution(t, PoissonDistribution(50.0)) for t in topics], [0.5, 0.3, 0.2]
    )
    docs = truth.sampler(1).sample(600)
    est = MixtureEstimator([MultinomialEstimator(pseudo_count=1.0)] * 3)
    # Restarts: EM from a single start can merge two topics into one component (a local optimum).
    _, model = best_of(token_lists(docs), est, trials=4, max_its=100, seed=0, print_iter=0)
    assert model.fit_result.converged
    p_true = np.array([[t[v] for v in vocab] for t in topics])
    p_fit = np.array([[c.pmap[v] for v in vocab] for c in model.components])
    best = min(itertools.permutations(range(3)), key=lambda perm: np.abs(p_fit[list(perm)] - p_true).max())
    assert np.abs(p_fit[list(best)] - p_true).max() < 0.02
    np.testing.assert_allclose(model.w[list(best)], truth.w, atol=0.05)
    hard = np.argmax(model.predict_proba(token_lists(docs[:50])), axis=1)
    assert len(set(hard.tolist())) == 3
