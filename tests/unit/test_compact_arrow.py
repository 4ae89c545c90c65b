"""``Encoder.compact_arrow``: the cached form of encoded data (labels -> int codes) reads back to the
same encoding, through every combinator, sliced or not."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import SpecError, UnseenLabelError
from mixle_spark.stats import (
    CategoricalDistribution,
    CategoricalEncoder,
    CompositeDistribution,
    GaussianDistribution,
    MixtureDistribution,
    OptionalDistribution,
    RecordDistribution,
    SequenceDistribution,
)
from mixle_spark.stats._labels import CODES_FIELD
from mixle_spark.stats.base import Distribution
from tests.unit.test_contracts import CASES, IDS, _accumulate, _bind, _records, _stats_equal

CHANNEL = CategoricalDistribution({"web": 0.5, "store": 0.3, "phone": 0.2})


def _same_encoding(dist: Distribution, data: Any) -> Any:
    """Assert that ``dist``'s encoder reads ``compact_arrow(data)`` like ``data``; return the compact."""
    encoder = dist.encoder()
    compact = encoder.compact_arrow(data)
    np.testing.assert_array_equal(
        dist.seq_log_density(encoder.from_arrow(compact)), dist.seq_log_density(encoder.from_arrow(data))
    )
    return compact


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_family_reads_its_compact_form_back(case: Any) -> None:
    records = _records(case, 60, seed=11)
    arrow = case.to_arrow(records) if case.to_arrow is not None else pa.array(records)
    est, encoder = _bind(case.estimator, records)
    compact = encoder.compact_arrow(arrow)
    if not encoder.compacts:
        assert compact is arrow
    via_compact, via_arrow = encoder.from_arrow(compact), encoder.from_arrow(arrow)
    np.testing.assert_array_equal(
        case.dist.seq_log_density(via_compact), case.dist.seq_log_density(via_arrow)
    )
    w = np.linspace(0.5, 2.0, len(records))
    _stats_equal(
        _accumulate(est, via_compact, w, case.dist).value(),
        _accumulate(est, via_arrow, w, case.dist).value(),
        rtol=0.0,
    )


def test_categorical_labels_become_int32_codes_in_a_marked_struct() -> None:
    labels = pa.array(["store", "web", "phone", "web"])
    compact = _same_encoding(CHANNEL, labels)
    assert compact.type == pa.struct([pa.field(CODES_FIELD, pa.int32())])
    # codes index the sorted vocabulary ("phone", "store", "web")
    assert compact.field(0).to_pylist() == [1, 2, 0, 2]
    assert CHANNEL.encoder().compact_arrow(compact) is compact  # idempotent


def test_integer_and_boolean_labels_are_not_confused_with_codes() -> None:
    ints = CategoricalDistribution({10: 0.5, 20: 0.25, 30: 0.25})
    compact = _same_encoding(ints, pa.array([30, 10, 20], pa.int64()))
    assert compact.field(0).to_pylist() == [2, 0, 1]
    flags = CategoricalDistribution({True: 0.9, False: 0.1})
    assert _same_encoding(flags, pa.array([True, False, True])).field(0).to_pylist() == [1, 0, 1]


def test_optional_keeps_nulls_where_values_are_missing() -> None:
    dist = OptionalDistribution(CHANNEL, p=0.2)
    data = pa.array(["web", None, "phone", None, "store"])
    compact = _same_encoding(dist, data)
    assert compact.is_null().to_pylist() == [False, True, False, True, False]
    assert _same_encoding(dist, data.slice(1, 3)).null_count == 2


def test_sequences_of_labels_keep_their_lists_even_when_sliced() -> None:
    dist = SequenceDistribution(CHANNEL, None)
    data = pa.array([["web", "web"], [], ["phone", "store", "web"], ["store"]])
    compact = _same_encoding(dist, data)
    assert compact.value_lengths().to_pylist() == [2, 0, 3, 1]
    sliced = _same_encoding(dist, data.slice(2, 2))
    assert sliced.value_lengths().to_pylist() == [3, 1]
    assert sliced.flatten().field(0).to_pylist() == [0, 1, 2, 1]


def test_records_and_composites_compact_only_their_label_fields() -> None:
    rec = RecordDistribution({"amount": GaussianDistribution(1.0, 2.0), "channel": CHANNEL})
    batch = pa.RecordBatch.from_pydict({"amount": [0.5, 1.5, 2.5], "channel": ["web", "phone", "web"]})
    compact = _same_encoding(rec, batch)
    assert compact.schema.names == ["amount", "channel"]
    assert compact.column(0).equals(batch.column(0))
    assert _same_encoding(rec, pa.Table.from_batches([batch])).column("channel").type.num_fields == 1
    struct = pa.StructArray.from_arrays([batch.column(1), batch.column(0)], names=["channel", "amount"])
    assert _same_encoding(rec, struct).type.names == ["amount", "channel"]
    comp = CompositeDistribution((CHANNEL, GaussianDistribution(0.0, 1.0)))
    pair = pa.StructArray.from_arrays([batch.column(1), batch.column(0)], names=["a", "b"])
    assert _same_encoding(comp, pair).type.names == ["a", "b"]


def test_mixture_of_records_compacts_through_the_union_encoder() -> None:
    a = RecordDistribution({"channel": CHANNEL})
    b = RecordDistribution({"channel": CategoricalDistribution({"phone": 0.1, "web": 0.9})})
    mix = MixtureDistribution([a, b], [0.4, 0.6])
    _same_encoding(mix, pa.RecordBatch.from_pydict({"channel": ["web", "store", "phone"]}))


def test_codes_from_another_vocabulary_are_refused() -> None:
    codes = pa.StructArray.from_arrays([pa.array([0, 5], pa.int32())], names=[CODES_FIELD])
    with pytest.raises(SpecError, match=r"codes outside \[-1, 3\)"):
        CHANNEL.encoder().from_arrow(codes)


def test_unseen_labels_compact_to_minus_one_only_when_allowed() -> None:
    encoder = CategoricalEncoder(["a", "b"], unseen="zero")
    compact = encoder.compact_arrow(pa.array(["a", "zzz"]))
    assert compact.field(0).to_pylist() == [0, -1]
    assert encoder.from_arrow(compact).codes.tolist() == [0, -1]
    with pytest.raises(UnseenLabelError):
        CategoricalEncoder(["a", "b"]).from_arrow(compact)
