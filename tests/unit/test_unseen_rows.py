"""Rows holding a label outside a fitted vocabulary: ``Encoder.with_unseen`` / ``Encoder.unseen_rows``.

Scoring with ``on_unseen="null"`` encodes with ``with_unseen("zero")`` and nulls the rows
``unseen_rows`` marks; these tests pin the mask for every family with a vocabulary and every
combinator that can hold one, and that ``with_unseen("error")`` makes each of them raise, naming the
label and the row.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import UnseenLabelError
from mixle_spark.stats import (
    CategoricalDistribution,
    GaussianDistribution,
    HiddenMarkovDistribution,
    MixtureDistribution,
    MultinomialDistribution,
    OptionalDistribution,
    PoissonDistribution,
    RecordDistribution,
    SequenceDistribution,
)
from mixle_spark.stats.markov_chain import MarkovChainDistribution

AB = CategoricalDistribution({"a": 0.25, "b": 0.75})
CHAIN = MarkovChainDistribution(
    {"a": 0.5, "b": 0.5}, {"a": {"a": 0.5, "b": 0.5}, "b": {"a": 0.5, "b": 0.5}}, PoissonDistribution(2.0)
)
HMM = HiddenMarkovDistribution(
    [AB, CategoricalDistribution({"a": 0.9, "b": 0.1})], [0.5, 0.5], [[0.9, 0.1], [0.1, 0.9]]
)
LENGTHS = CategoricalDistribution({1: 0.5, 2: 0.5})  # a length model with a vocabulary of its own

# model, its input column(s) with the unseen rows, the expected mask
CASES: dict[str, tuple[Any, Any, list[bool]]] = {
    "categorical": (AB, pa.array(["a", "z", "b", "b", "y"]), [False, True, False, False, True]),
    "integer-labels": (
        CategoricalDistribution({1: 0.5, 2: 0.5}),
        pa.array([1, 2, 3], pa.int64()),
        [False, False, True],
    ),
    "optional": (
        OptionalDistribution(AB, p=0.3),
        pa.array([None, "q", "a", None]),
        [False, True, False, False],
    ),
    "sequence": (
        SequenceDistribution(AB, len_dist=PoissonDistribution(2.0)),
        pa.array([["a", "b"], [], ["b", "x", "a"], ["x", "y"]]),
        [False, False, True, True],
    ),
    "sequence-length-vocabulary": (
        SequenceDistribution(AB, len_dist=LENGTHS),
        pa.array([["a"], ["a", "b", "a"], ["b", "b"], ["c"]]),
        [False, True, False, True],
    ),
    "markov-chain": (
        CHAIN,
        pa.array([["a", "b", "a"], ["a", "c"], [], ["c"], ["b"]]),
        [False, True, False, True, False],
    ),
    "multinomial": (
        MultinomialDistribution({"a": 0.5, "b": 0.5}, PoissonDistribution(3.0)),
        pa.array([["a", "b"], ["a", "zz", "zz"], ["b"], []]),
        [False, True, False, False],
    ),
    "hidden-markov": (
        HMM,
        pa.array([["a", "b", "a"], ["a", "d"], ["b"]]),
        [False, True, False],
    ),
    "record-of-everything": (
        RecordDistribution(
            {
                "x": GaussianDistribution(0.0, 1.0),
                "c": AB,
                "o": OptionalDistribution(AB, p=0.5),
                "s": SequenceDistribution(AB, len_dist=PoissonDistribution(1.0)),
            }
        ),
        pa.table(
            {
                "x": [0.1, 0.2, 0.3, 0.4, 0.5],
                "c": ["a", "b", "u", "a", "b"],
                "o": [None, "v", "a", None, "b"],
                "s": [["a"], [], ["b"], ["w"], ["a", "b"]],
            }
        ),
        [False, True, True, True, False],
    ),
}
CASES["mixture"] = (MixtureDistribution([AB, CategoricalDistribution({"b": 0.5, "c": 0.5})], [0.5, 0.5]),
                    pa.array(["a", "c", "d", "b"]), [False, False, True, False])  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_unseen_rows_marks_exactly_the_rows_holding_an_unseen_label(name: str) -> None:
    model, data, expect = CASES[name]
    encoder = model.encoder().with_unseen("zero")
    enc = encoder.from_arrow(data)
    assert encoder.unseen_rows(enc).tolist() == expect
    ll = model.seq_log_density(enc)
    assert np.isneginf(ll[np.array(expect)]).all()
    assert np.isfinite(ll[~np.array(expect)]).all()  # the other rows score as without the unseen ones


@pytest.mark.parametrize("name", list(CASES))
def test_with_unseen_error_raises_naming_the_first_unseen_row(name: str) -> None:
    model, data, expect = CASES[name]
    with pytest.raises(UnseenLabelError) as info:
        model.encoder().with_unseen("error").from_arrow(data)
    err, n = info.value, len(expect)
    # the first unseen row and the number of such rows; the first part of the row that holds one
    # reports (a record's first field, a sequence's elements before its length), and under a sequence
    # the count is of elements, not rows, so none is given
    expected = {
        "record-of-everything": (2, 1),  # column c
        "sequence": (2, None),
        "sequence-length-vocabulary": (3, None),  # the element 'c' before the length 3
        "hidden-markov": (1, None),
    }.get(name, (expect.index(True), sum(expect)))
    assert (err.row, err.count) == expected
    assert re.search(rf"row {err.row + 1} of {n}\)$", str(err))


def test_encoders_without_a_vocabulary_have_no_unseen_rows() -> None:
    model = RecordDistribution({"x": GaussianDistribution(0.0, 1.0), "n": PoissonDistribution(2.0)})
    encoder = model.encoder()
    assert encoder.with_unseen("zero") is encoder and encoder.with_unseen("error") is encoder
    assert encoder.unseen_rows(encoder.from_arrow(pa.table({"x": [0.5], "n": [3]}))) is None


def test_with_unseen_keeps_the_encoding_of_seen_rows() -> None:
    model = CASES["record-of-everything"][0]
    seen = pa.table({"x": [0.1, 0.5], "c": ["a", "b"], "o": [None, "b"], "s": [["a"], ["a", "b"]]})
    zero, strict = model.encoder().with_unseen("zero"), model.encoder().with_unseen("error")
    np.testing.assert_array_equal(
        model.seq_log_density(zero.from_arrow(seen)), model.seq_log_density(strict.from_arrow(seen))
    )
