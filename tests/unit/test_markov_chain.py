"""Markov chains over label lists: densities by hand, recovery (one chain and a mixture of two), empty
sequences, unseen labels, bad input, JSON, pseudo-counts and exact merging of partition statistics."""

from __future__ import annotations

import itertools
import json
import math
import pickle
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
from mixle_spark.estimation import optimize
from mixle_spark.spec import model_from_json, model_to_json
from mixle_spark.stats.base import RowRandom, distribution_from_dict, estimator_from_dict
from mixle_spark.stats.gaussian import GaussianDistribution
from mixle_spark.stats.markov_chain import (
    MarkovChainDistribution,
    MarkovChainEncoder,
    MarkovChainEstimator,
)
from mixle_spark.stats.mixture import MixtureEstimator
from mixle_spark.stats.poisson import PoissonDistribution, PoissonEstimator
from tests.unit.cases_markov import CYCLING, PAGES, STICKY

INIT = {"home": 0.8, "cart": 0.2}
TRANS = {"home": {"home": 0.5, "cart": 0.3, "exit": 0.2}, "cart": {"home": 0.9, "exit": 0.1}}


def _by_hand(x: list[str], lam: float | None = None) -> float:
    """log p(x) from the dicts, independent of the module."""
    out = 0.0 if lam is None else len(x) * math.log(lam) - lam - math.lgamma(len(x) + 1)
    if x:
        out += math.log(INIT[x[0]]) + sum(math.log(TRANS[a][b]) for a, b in itertools.pairwise(x))
    return out


def _fit(est: MarkovChainEstimator, records: list[Any], weights: Any = None) -> MarkovChainDistribution:
    est = est.with_scan(est.encoder().scan(records))
    acc = est.accumulator_factory().make()
    w = np.ones(len(records)) if weights is None else np.asarray(weights, dtype=np.float64)
    acc.seq_update(est.encoder().encode(records), w, None)
    return est.estimate(float(w.sum()), acc.value())


def test_log_density_equals_the_hand_computation() -> None:
    records = [["home", "cart", "home", "exit"], ["cart"], [], ["home", "home", "home"], ["cart", "exit"]]
    plain = MarkovChainDistribution(INIT, TRANS)
    with_len = MarkovChainDistribution(INIT, TRANS, PoissonDistribution(3.0))
    for model, lam in ((plain, None), (with_len, 3.0)):
        want = [_by_hand(x, lam) for x in records]
        np.testing.assert_allclose([model.log_density(x) for x in records], want, rtol=1e-13)
        enc = model.encoder().from_arrow(pa.array(records, pa.list_(pa.string())))
        np.testing.assert_allclose(model.seq_log_density(enc), want, rtol=1e-13)
    assert plain.log_density(["home", "cart", "home", "exit"]) == pytest.approx(
        math.log(0.8 * 0.3 * 0.9 * 0.2), rel=1e-14
    )
    assert plain.labels == ("cart", "exit", "home")
    assert plain.initial == {"cart": 0.2, "exit": 0.0, "home": 0.8}
    assert plain.transitions == TRANS  # "exit" has no row: it cannot be left


def test_empty_sequences_score_only_their_length() -> None:
    assert MarkovChainDistribution(INIT, TRANS).log_density([]) == 0.0
    assert MarkovChainDistribution(INIT, TRANS, PoissonDistribution(2.0)).log_density([]) == -2.0
    model = _fit(MarkovChainEstimator(len_estimator=PoissonEstimator()), [[], ["a", "b"], [], ["a"]])
    assert model.initial == {"a": 1.0, "b": 0.0}
    assert model.transitions == {"a": {"b": 1.0}, "b": {"a": 0.5, "b": 0.5}}  # "b" never left: uniform
    assert model.len_dist.lam == pytest.approx(0.75)
    with pytest.raises(EmptyDataError, match="no labels in the data"):
        _fit(MarkovChainEstimator(), [[], []])


def test_unseen_labels_and_impossible_steps_score_minus_inf_without_warnings() -> None:
    model = MarkovChainDistribution(INIT, TRANS)
    records = [["home", "checkout"], ["exit"], ["exit", "home"], ["cart", "cart"], [7], ["home"]]
    with np.errstate(all="raise"):
        enc = model.encoder().encode(records)
        ll = model.seq_log_density(enc)
    np.testing.assert_array_equal(ll[:5], [-np.inf] * 5)  # unseen / zero initial / no row / zero step
    assert ll[5] == pytest.approx(math.log(0.8))
    assert model.log_density(["nowhere"]) == -math.inf
    # the estimator's encoder (fitting) refuses a label outside its vocabulary instead
    est = MarkovChainEstimator(labels=["cart", "home"])
    with pytest.raises(
        UnseenLabelError, match=r"label 'checkout' is not in the model's vocabulary of 2 .*row 2 of 2"
    ):
        est.encoder().encode([["home"], ["home", "checkout"]])


def test_one_chain_is_recovered_from_20000_sequences() -> None:
    records = PAGES.sampler(1).sample(20_000)
    est = MarkovChainEstimator(len_estimator=PoissonEstimator())
    model = optimize(pa.array(records, pa.list_(pa.string())), est, max_its=5, seed=2)
    assert model.fit_result.converged
    assert model.labels == PAGES.labels
    np.testing.assert_allclose(model.initial_vector, PAGES.initial_vector, atol=0.02)
    np.testing.assert_allclose(model.transition_matrix, PAGES.transition_matrix, atol=0.02)
    assert model.len_dist.lam == pytest.approx(6.0, rel=0.02)
    assert model.initial["cart"] == 0.0  # never a first page in the data


def test_a_mixture_of_two_chains_is_recovered_by_em() -> None:
    from mixle_spark.stats.mixture import MixtureDistribution

    truth = MixtureDistribution([STICKY, CYCLING], [0.4, 0.6])
    records = truth.sampler(5).sample(4000)
    est = MixtureEstimator([MarkovChainEstimator(len_estimator=PoissonEstimator())] * 2)
    model = optimize(records, est, max_its=200, delta=1e-8, seed=11)
    assert model.fit_result.converged
    # components are defined up to a permutation: match them by their "a" -> "a" probability
    order = np.argsort([-c.transitions["a"].get("a", 0.0) for c in model.components])
    comps = [model.components[j] for j in order]
    np.testing.assert_allclose(np.asarray(model.w)[order], [0.4, 0.6], atol=0.02)
    for got, want in zip(comps, (STICKY, CYCLING), strict=True):
        np.testing.assert_allclose(got.transition_matrix, want.transition_matrix, atol=0.03)
        np.testing.assert_allclose(got.initial_vector, want.initial_vector, atol=0.04)
        assert got.len_dist.lam == pytest.approx(want.len_dist.lam, rel=0.03)


def test_pseudo_count_is_spread_over_every_count_and_rows_never_left_are_uniform() -> None:
    records = [["a", "b"], ["a", "a", "b"], ["c"]]
    model = _fit(MarkovChainEstimator(pseudo_count=1.0), records)  # 1/3 added to each count
    np.testing.assert_allclose(model.initial_vector, [7 / 12, 1 / 12, 4 / 12])  # counts a 2, b 0, c 1
    np.testing.assert_allclose(model.transition_matrix, [[4 / 12, 7 / 12, 1 / 12], [1 / 3] * 3, [1 / 3] * 3])
    plain = _fit(MarkovChainEstimator(), records)
    np.testing.assert_allclose(plain.transition_matrix, [[1 / 3, 2 / 3, 0.0], [1 / 3] * 3, [1 / 3] * 3])
    assert plain.log_density(["a", "c"]) == -math.inf  # a seen row keeps its zero
    # weights scale counts, not pseudo-counts
    weighted = _fit(MarkovChainEstimator(pseudo_count=1.0), records, weights=[2.0, 0.0, 1.0])
    np.testing.assert_allclose(weighted.initial_vector, [7 / 12, 1 / 12, 4 / 12])
    np.testing.assert_allclose(weighted.transition_matrix[0], [1 / 9, 7 / 9, 1 / 9])
    # a fixed vocabulary (no scan) may name labels the data lacks; the pseudo-count reaches them too
    fixed = _fit(MarkovChainEstimator(pseudo_count=0.5, labels=["z", "c", "b", "a"]), records)
    assert fixed.labels == ("a", "b", "c", "z") and fixed.initial["z"] == pytest.approx(0.125 / 3.5)


def test_statistics_of_two_halves_merge_exactly_even_with_different_vocabularies() -> None:
    records = PAGES.sampler(3).sample(2000)
    w = np.random.default_rng(0).choice([0.5, 1.0, 2.0, 3.0], size=len(records))  # exact sums
    est = MarkovChainEstimator(len_estimator=PoissonEstimator())
    est = est.with_scan(est.encoder().scan(records))
    whole = est.accumulator_factory().make()
    whole.seq_update(est.encoder().encode(records), w, None)
    halves = []
    for part in (slice(0, 700), slice(700, None)):
        acc = est.accumulator_factory().make()
        # each half encoded with its own vocabulary (no scan), as a batch of another partition could be
        enc = MarkovChainEncoder(len_encoder=PoissonEstimator().encoder()).encode(records[part])
        acc.seq_update(enc, w[part], None)
        halves.append(pickle.loads(pickle.dumps(acc.value())))
    for first, second in (halves, halves[::-1]):
        merged = est.accumulator_factory().make().combine(first).combine(second)
        for got, want in zip(merged.value(), whole.value(), strict=True):
            np.testing.assert_array_equal(np.asarray(got, dtype=float), np.asarray(want, dtype=float))
    copy = est.accumulator_factory().make().from_value(whole.value())
    assert est.estimate(None, copy.value()) == est.estimate(None, whole.value())
    with pytest.raises(SpecError, match=r"cannot combine statistics over 2 labels with statistics over 4"):
        whole.combine(MarkovChainEstimator(labels=["a", "b"]).accumulator_factory().make().value())


def test_seq_initialize_counts_the_rows_and_seeds_the_length_model() -> None:
    records = [["a", "b"], ["b"]]
    est = MarkovChainEstimator(len_estimator=PoissonEstimator(), labels=["a", "b"])
    acc = est.accumulator_factory().make()
    acc.seq_initialize(est.encoder().encode(records), np.array([1.0, 0.5]), RowRandom.for_rows(3, 0, 2))
    initial, transitions, len_value, row_weight = acc.value()
    np.testing.assert_array_equal(initial, [1.0, 0.5])
    np.testing.assert_array_equal(transitions, [[0.0, 1.0], [0.0, 0.0]])
    assert row_weight == 1.5 and len_value is not None


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (
            [["a"], ["a", None, "b"], [None]],
            DataValueError,
            r"^expected a label \(string or integer\) in every list element for MarkovChainEstimator "
            r"\(a list cannot hold missing values\), got null \(2 bad rows, first at row 2 of 3\)$",
        ),
        (
            pa.array([["a"], ["b", None]], pa.list_(pa.string())),
            DataValueError,
            r"in every list element .*got null \(row 2 of 2\)$",
        ),
        (
            [["a"], None],
            DataValueError,
            r"^expected a list of labels for MarkovChainEstimator \(a missing list needs "
            r"OptionalEstimator\), got null \(row 2 of 2\)$",
        ),
        (
            pa.array([["a"], None], pa.list_(pa.string())),
            DataValueError,
            r"missing list needs OptionalEstimator\), got null \(row 2 of 2\)$",
        ),
        (
            [["a", "b"], ["a", 1.5]],
            DataTypeError,
            r"^expected a label \(string or integer\) in every list element for MarkovChainEstimator, "
            r"got 1\.5 \(row 2 of 2\)$",
        ),
        ([[1, 2], [True]], DataTypeError, r"in every list element .*got boolean True \(row 2 of 2\)$"),
        (
            pa.array([[1.0], [2.5]], pa.list_(pa.float64())),
            DataTypeError,
            r"for MarkovChainEstimator \(Arrow type list<double>\), got 1\.0 \(row 1 of 2\)$",
        ),
        (
            ["home", ["a"]],
            DataTypeError,
            r"^expected a list \(or 1-D array\) of labels for MarkovChainEstimator, got string 'home' "
            r"\(row 1 of 2\)$",
        ),
        (
            pa.array(["home", "cart"]),
            SchemaError,
            r"^expected a list column of string or integer labels .* for MarkovChainEstimator, "
            r"got Arrow type string$",
        ),
    ],
)
def test_bad_input_names_what_was_found_and_expected(data: Any, error: type, message: str) -> None:
    encoder = MarkovChainEstimator().encoder()
    with pytest.raises(error, match=message):
        if isinstance(data, pa.Array):
            encoder.scan_arrow(data)
            encoder.from_arrow(data)
        else:
            encoder.scan(data)
            encoder.encode(data)


def test_arrow_types_and_the_compact_cache_encode_alike() -> None:
    records = [[3, 7, 7], [], [11, 3]]
    model = MarkovChainDistribution({3: 0.5, 7: 0.5}, {3: {7: 1.0}, 7: {7: 0.5, 11: 0.5}, 11: {3: 1.0}})
    want = model.seq_log_density(model.encoder().encode(records))
    for typ in (pa.int8(), pa.int32(), pa.int64(), pa.uint16()):
        for arr in (pa.array(records, pa.list_(typ)), pa.array(records, pa.large_list(typ))):
            np.testing.assert_array_equal(model.seq_log_density(model.encoder().from_arrow(arr)), want)
    encoder = MarkovChainEstimator(labels=[3, 7, 11]).encoder()
    compact = encoder.compact_arrow(pa.array(records))
    encoder.check_arrow_type(compact.type)
    np.testing.assert_array_equal(model.seq_log_density(encoder.from_arrow(compact)), want)
    sliced = pa.array([[7], *records], pa.list_(pa.int64())).slice(1)
    np.testing.assert_array_equal(model.seq_log_density(model.encoder().from_arrow(sliced)), want)
    mixed = MarkovChainEncoder().encode([["a", 1], [2]])  # a Python column may mix strings and integers
    assert mixed.labels == (1, 2, "a") and mixed.codes.tolist() == [2, 0, 1]


def test_json_round_trips_and_specs_are_validated() -> None:
    model = MarkovChainDistribution(INIT, TRANS, PoissonDistribution(2.5))
    restored = model_from_json(model_to_json(model))
    assert restored == model and restored.to_dict() == model.to_dict()
    np.testing.assert_array_equal(restored.transition_matrix, model.transition_matrix)
    spec = json.loads(json.dumps(model.to_dict()))
    assert spec["transitions"][0] == ["cart", [["exit", 0.1], ["home", 0.9]]]
    assert distribution_from_dict(spec) == model
    ints = MarkovChainDistribution({1: 1.0}, {1: {2: 1.0}, 2: {1: 1.0}})
    assert distribution_from_dict(json.loads(json.dumps(ints.to_dict()))) == ints
    est = MarkovChainEstimator(len_estimator=PoissonEstimator(), pseudo_count=0.5, keys="k", labels=[2, 1])
    assert est.to_dict() == {
        "type": "markov_chain",
        "len_estimator": {"type": "poisson"},
        "pseudo_count": 0.5,
        "keys": "k",
        "labels": [1, 2],
    }
    assert estimator_from_dict(json.loads(json.dumps(est.to_dict()))) == est
    with pytest.raises(SpecError, match=r"unknown key 'pseudocount' in markov_chain spec"):
        estimator_from_dict({"type": "markov_chain", "pseudocount": 1.0})
    with pytest.raises(SpecError, match=r"markov_chain spec is missing required key 'transitions'"):
        distribution_from_dict({"type": "markov_chain", "initial": [["a", 1.0]]})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: MarkovChainDistribution({"a": 1.0}, {"a": {"a": 0.5, "b": 0.6}}),
            r"transitions\['a'\] must be probabilities summing to 1 within 1e-9 \(sum 1\.1\)",
        ),
        (
            lambda: MarkovChainDistribution({"a": 0.5}, {}),
            r"initial must be probabilities summing to 1 within 1e-9 \(sum 0\.5\)",
        ),
        (lambda: MarkovChainDistribution({}, {}), r"initial must be a non-empty mapping"),
        (
            lambda: MarkovChainDistribution({"a": 1.5, "b": -0.5}, {}),
            r"initial must be finite non-negative probabilities",
        ),
        (
            lambda: MarkovChainDistribution({1.5: 1.0}, {}),
            r"initial label must be a string or an integer, got 1\.5",
        ),
        (
            lambda: MarkovChainDistribution({"a": 1.0}, {"a": {"a": 1.0}}).sampler(0),
            r"sampling needs len_dist \(the distribution of the sequence length\), got None",
        ),
        (
            lambda: MarkovChainDistribution(INIT, TRANS, PoissonDistribution(30.0)).sampler(0).sample(50),
            r"cannot sample past label 'exit': it has no transition row",
        ),
        (
            lambda: MarkovChainEstimator(pseudo_count=-1.0),
            r"MarkovChainEstimator: pseudo_count must be a non-negative number, got -1\.0",
        ),
        (
            lambda: (
                MarkovChainEstimator()
                .accumulator_factory()
                .make()
                .seq_update(MarkovChainEncoder().encode([["a"]]), np.ones(1), None)
            ),
            r"MarkovChainEstimator has no vocabulary",
        ),
    ],
)
def test_bad_parameters_name_the_value(build: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        build()


def test_sampling_follows_the_chain() -> None:
    lengths, codes = PAGES.draw_codes(PAGES.sampler(4), 20_000)
    assert lengths.mean() == pytest.approx(6.0, abs=0.1)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])[lengths > 0]
    first = np.bincount(codes[starts], minlength=4) / len(starts)
    np.testing.assert_allclose(first, PAGES.initial_vector, atol=0.015)
    follows = np.ones(len(codes), dtype=bool)
    follows[starts] = False
    pairs = np.bincount(codes[np.flatnonzero(follows) - 1] * 4 + codes[follows], minlength=16).reshape(4, 4)
    np.testing.assert_allclose(pairs / pairs.sum(axis=1, keepdims=True), PAGES.transition_matrix, atol=0.015)
    assert PAGES.sampler(7).sample(3) == PAGES.sampler(7).sample(3)


def _compact_with_codes(codes: list[int]) -> pa.Array:
    struct = pa.StructArray.from_arrays([pa.array(codes, pa.int32())], names=["__mixle_codes"])
    return pa.ListArray.from_arrays(pa.array([0, len(codes)], pa.int32()), struct)


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (
            lambda: MarkovChainEncoder().from_arrow(pa.table({"a": [["x"]], "b": [["y"]]})),
            SchemaError,
            r"expected one list column for MarkovChainEstimator, got \['a', 'b'\]",
        ),
        (
            lambda: MarkovChainEncoder().check_arrow_type(pa.list_(pa.float64())),
            SchemaError,
            r"for MarkovChainEstimator, got Arrow type list<item: double>$",
        ),
        (
            lambda: MarkovChainEncoder(["a"]).from_arrow(pa.array([["a"], ["a", "b"]])),
            UnseenLabelError,
            r"label 'b' is not in the model's vocabulary of 1 labels \('a'\) \(row 2 of 2\)",
        ),
        (
            lambda: MarkovChainEncoder().from_arrow(_compact_with_codes([0, 1])),
            SpecError,
            r"these label codes need the vocabulary they were made with",
        ),
        (
            lambda: MarkovChainEncoder(["a"]).from_arrow(_compact_with_codes([0, 3])),
            SpecError,
            r"label codes outside \[-1, 1\) for a vocabulary of 1 labels",
        ),
        (
            lambda: (
                MarkovChainEstimator(labels=["a"])
                .accumulator_factory()
                .make()
                .seq_update(MarkovChainEncoder().encode([["a"], ["a", "q"]]), np.ones(2), None)
            ),
            UnseenLabelError,
            r"label 'q' is not in the model's vocabulary of 1 labels \('a'\) \(row 2 of 2\)",
        ),
        (
            lambda: MarkovChainEncoder(unseen="skip"),
            SpecError,
            r"unseen must be 'error' or 'zero', got 'skip'",
        ),
        (lambda: MarkovChainEncoder(["a", "a"]), SpecError, r"labels must be free of duplicate labels"),
        (
            lambda: MarkovChainEncoder().union(PoissonEstimator().encoder()),
            TypeError,
            r"cannot combine encoders MarkovChainEncoder",
        ),
        (
            lambda: MarkovChainDistribution({"a": 1.0}, [["a"]]),
            SpecError,
            r"transitions must be a mapping label -> \(mapping label -> probability\)",
        ),
        (
            lambda: MarkovChainDistribution({"a": 1.0}, {}, len_dist="poisson"),
            SpecError,
            r"len_dist must be a Distribution or None, got 'poisson'",
        ),
        (
            lambda: MarkovChainDistribution.from_arrays(["a", "b"], [1.0], [[1.0, 0.0], [0.0, 1.0]]),
            SpecError,
            r"initial must be a vector of shape \(2,\), got \[1\.0\]",
        ),
        (
            lambda: MarkovChainDistribution.from_arrays(["a"], [1.0], [1.0]),
            SpecError,
            r"transitions must be a matrix of shape \(1, 1\), got \[1\.0\]",
        ),
        (
            lambda: (
                MarkovChainDistribution({"a": 1.0}, {"a": {"a": 1.0}}, GaussianDistribution(2.0, 1.0))
                .sampler(0)
                .sample(5)
            ),
            SpecError,
            r"len_dist drew .*, not a non-negative integer length",
        ),
        (
            lambda: MarkovChainEstimator(len_estimator="poisson"),
            SpecError,
            r"len_estimator must be an Estimator or None, got 'poisson'",
        ),
        (
            lambda: MarkovChainEstimator(labels=["a", "b"]).estimate(
                None, (np.ones(3), np.ones((3, 3)), None, 1.0)
            ),
            SpecError,
            r"statistics of shapes \(3,\) and \(3, 3\) for a vocabulary of 2 labels",
        ),
        (
            lambda: MarkovChainEstimator().estimate(None, (np.ones(1), np.ones((1, 1)), None, 1.0)),
            SpecError,
            r"MarkovChainEstimator has no vocabulary",
        ),
    ],
)
def test_every_other_error_names_the_bad_value(build: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        build()


def test_mixture_encoders_union_and_scans_merge() -> None:
    a = MarkovChainDistribution({"a": 1.0}, {"a": {"a": 1.0}}, PoissonDistribution(2.0))
    b = MarkovChainDistribution({"b": 1.0}, {"b": {"b": 1.0}})
    union = a.encoder().union(b.encoder())
    assert union == MarkovChainEncoder(["a", "b"], PoissonDistribution(2.0).encoder(), unseen="zero")
    enc = union.encode([["a", "a"], ["b"], ["c"]])
    np.testing.assert_array_equal(b.seq_log_density(enc), [-np.inf, 0.0, -np.inf])
    encoder = MarkovChainEstimator(len_estimator=PoissonEstimator()).encoder()
    scan = encoder.merge_scans(encoder.scan([["b", "a"]]), encoder.scan_arrow(pa.array([["c"], []])))
    assert scan == (frozenset({"a", "b", "c"}), None)
    assert encoder.merge_scans(None, scan) == scan
    assert MarkovChainEncoder().from_arrow(pa.array([[], []])).labels == ()  # list<null>: all empty


def test_encoders_with_overlapping_vocabularies_union_to_one_copy_of_each_label() -> None:
    union = MarkovChainEncoder(["a", "b"]).union(MarkovChainEncoder(["b", "c"], unseen="zero"))
    assert union == MarkovChainEncoder(["a", "b", "c"], unseen="zero")
    same = MarkovChainEncoder(["b", "a"]).union(MarkovChainEncoder(["a", "b"], unseen="zero"))
    assert same.labels == ("a", "b")
