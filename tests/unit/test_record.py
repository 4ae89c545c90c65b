"""RecordDistribution / RecordEstimator: named fields as columns, nested records as struct columns."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError, DataValueError, SchemaError, SpecError
from mixle_spark.stats.base import RowRandom, distribution_from_dict, estimator_from_dict
from mixle_spark.stats.categorical import CategoricalEstimator
from mixle_spark.stats.gaussian import GaussianDistribution, GaussianEstimator
from mixle_spark.stats.mixture import MixtureDistribution
from mixle_spark.stats.record import RecordDistribution, RecordEncoder, RecordEstimator


def nested_model() -> RecordDistribution:
    return RecordDistribution(
        {
            "amount": GaussianDistribution(3.0, 2.0),
            "outer": RecordDistribution({"inner": GaussianDistribution(-1.0, 0.5)}),
        }
    )


def nested_estimator() -> RecordEstimator:
    return RecordEstimator(
        {"amount": GaussianEstimator(), "outer": RecordEstimator({"inner": GaussianEstimator()})}
    )


RECORDS = [
    {"amount": 1.0, "outer": {"inner": 0.5}},
    {"amount": 2.5, "outer": {"inner": -1.0}, "extra": "ignored"},
    {"amount": 4.0, "outer": {"inner": 2.0}},
]


def by_hand(r: dict) -> float:
    return GaussianDistribution(3.0, 2.0).log_density(r["amount"]) + GaussianDistribution(
        -1.0, 0.5
    ).log_density(r["outer"]["inner"])


def test_log_density_is_the_sum_over_fields() -> None:
    d = nested_model()
    expected = np.array([by_hand(r) for r in RECORDS])
    np.testing.assert_allclose([d.log_density(r) for r in RECORDS], expected, rtol=1e-15)
    np.testing.assert_allclose(d.seq_log_density(d.encoder().encode(RECORDS)), expected, rtol=1e-15)


def test_nested_record_from_arrow_table_with_struct_column() -> None:
    table = pa.table(
        {
            "id": pa.array([1, 2, 3]),
            "outer": pa.array([r["outer"] for r in RECORDS]),
            "amount": pa.array([r["amount"] for r in RECORDS]),
        }
    )
    assert pa.types.is_struct(table.schema.field("outer").type)
    d = nested_model()
    d.encoder().check_arrow_type(table.schema)
    got = d.seq_log_density(d.encoder().from_arrow(table))
    np.testing.assert_allclose(got, [by_hand(r) for r in RECORDS], rtol=1e-15)
    # the same from a RecordBatch, and from a sliced struct array of whole records
    batch = table.to_batches()[0]
    np.testing.assert_allclose(d.seq_log_density(d.encoder().from_arrow(batch)), got, rtol=0)
    sliced = pa.array(
        [{"amount": 0.0, "outer": {"inner": 0.0}}, *[{k: r[k] for k in ("amount", "outer")} for r in RECORDS]]
    ).slice(1)
    np.testing.assert_allclose(d.seq_log_density(d.encoder().from_arrow(sliced)), got, rtol=0)


def test_nested_record_from_pandas_dataframe() -> None:
    df = pd.DataFrame(
        {
            "amount": [r["amount"] for r in RECORDS],
            "outer": [r["outer"] for r in RECORDS],
            "label": ["a", "b", "c"],
        }
    )
    d = nested_model()
    table = pa.Table.from_pandas(df)
    got = d.seq_log_density(d.encoder().from_arrow(table))
    np.testing.assert_allclose(got, [by_hand(r) for r in RECORDS], rtol=1e-15)
    # encode() accepts the DataFrame itself
    np.testing.assert_allclose(d.seq_log_density(d.encoder().encode(df)), got, rtol=0)


def test_bad_value_in_nested_field_names_the_path_and_value() -> None:
    bad = [dict(RECORDS[0]), {"amount": 1.0, "outer": {"inner": "12.5x"}}]
    with pytest.raises(DataTypeError, match=r"column 'outer.inner': expected .*'12.5x' \(row 2 of 2\)"):
        nested_model().encoder().encode(bad)
    table = pa.table({"amount": [1.0, 2.0], "outer": pa.array([{"inner": "0.5"}, {"inner": "12.5x"}])})
    # the same for Arrow text: the cell that does not read as a number, not the first one ('0.5')
    with pytest.raises(DataTypeError, match=r"column 'outer.inner': expected .*'12.5x' \(row 2 of 2\)"):
        nested_model().encoder().from_arrow(table)


def test_nan_without_optional_names_the_column() -> None:
    with pytest.raises(
        DataValueError, match=r"column 'amount': expected a finite number .*nan \(row 2 of 3\)"
    ):
        nested_model().encoder().encode([RECORDS[0], {**RECORDS[0], "amount": float("nan")}, RECORDS[2]])


def test_missing_key_names_the_column() -> None:
    with pytest.raises(
        DataValueError, match=r"column 'amount': missing from the record .*'outer'.*\(row 2 of 2\)"
    ):
        nested_model().encoder().encode([RECORDS[0], {"outer": {"inner": 1.0}}])
    with pytest.raises(DataTypeError, match=r"expected a dict .*list \[1.0, 2.0\]"):
        nested_model().encoder().encode([[1.0, 2.0]])


def test_missing_column_lists_the_available_ones() -> None:
    table = pa.table({"amt": [1.0], "outer": pa.array([{"inner": 1.0}])})
    found = r"column 'amount': not found \(did you mean 'amt'\?\); available columns: amt, outer$"
    with pytest.raises(SchemaError, match=found):
        nested_model().encoder().from_arrow(table)
    with pytest.raises(SchemaError, match=found):
        nested_model().encoder().check_arrow_type(table.schema)
    table = pa.table({"amount": [1.0], "outer": pa.array([{"innr": 1.0}])})
    with pytest.raises(
        SchemaError,
        match=r"column 'outer.inner': not found \(did you mean 'innr'\?\); available fields: innr$",
    ):
        nested_model().encoder().from_arrow(table)
    table = pa.table({"total": [1.0], "outer": pa.array([{"inner": 1.0}])})
    with pytest.raises(SchemaError, match=r"^column 'amount': not found; available columns: total, outer$"):
        nested_model().encoder().from_arrow(table)  # nothing like it: no suggestion


def test_a_misspelt_column_suggests_the_closest() -> None:
    """The sample's columns, and a spec naming 'chanel': the message names 'channel'."""
    table = pa.table(
        {
            "amount": [1.0],
            "channel": ["web"],
            "n_items": [1],
            "tags": pa.array([["a"]], pa.list_(pa.string())),
        }
    )
    record = RecordEstimator({"amount": GaussianEstimator(), "chanel": CategoricalEstimator()})
    want = (
        "column 'chanel': not found (did you mean 'channel'?); "
        "available columns: amount, channel, n_items, tags"
    )
    with pytest.raises(SchemaError) as caught:
        record.encoder().from_arrow(table)
    assert str(caught.value) == want


def test_check_arrow_type_prefixes_child_errors() -> None:
    schema = pa.schema([("amount", pa.string()), ("outer", pa.struct([("inner", pa.float64())]))])
    with pytest.raises(SchemaError, match=r"column 'amount': expected a numeric column .*string"):
        nested_model().encoder().check_arrow_type(schema)
    schema = pa.schema([("amount", pa.float64()), ("outer", pa.struct([("inner", pa.string())]))])
    with pytest.raises(SchemaError, match=r"column 'outer.inner': expected a numeric column .*string"):
        nested_model().encoder().check_arrow_type(schema)
    schema = pa.schema([("amount", pa.float64()), ("outer", pa.float64())])
    with pytest.raises(SchemaError, match=r"column 'outer': expected a schema or a struct type .*double"):
        nested_model().encoder().check_arrow_type(schema)


def test_null_struct_needs_optional() -> None:
    table = pa.table({"amount": [1.0, 2.0], "outer": pa.array([{"inner": 1.0}, None])})
    with pytest.raises(
        DataValueError, match=r"column 'outer': .*OptionalEstimator\), got null \(row 2 of 2\)"
    ):
        nested_model().encoder().from_arrow(table)


def test_recovery_from_samples() -> None:
    truth = nested_model()
    records = truth.sampler(1).sample(20000)
    assert isinstance(records[0], dict) and set(records[0]) == {"amount", "outer"}
    est = nested_estimator()
    acc = est.accumulator_factory().make()
    acc.seq_update(est.encoder().encode(records), np.ones(len(records)), None)
    fit = est.estimate(len(records), acc.value())
    assert abs(fit.fields["amount"].mu - 3.0) < 0.05
    assert abs(fit.fields["amount"].sigma2 - 2.0) < 0.08
    assert abs(fit.fields["outer"].fields["inner"].mu + 1.0) < 0.03
    assert abs(fit.fields["outer"].fields["inner"].sigma2 - 0.5) < 0.03


def test_split_combine_weights_and_initialize() -> None:
    truth = nested_model()
    records = truth.sampler(2).sample(200)
    est = nested_estimator()
    enc = est.encoder()
    w = np.random.default_rng(0).uniform(0.5, 2.0, 200)
    whole = est.accumulator_factory().make()
    whole.seq_update(enc.encode(records), w, None)
    merged = est.accumulator_factory().make()
    for idx in (slice(120, 200), slice(0, 50), slice(50, 120)):
        part = est.accumulator_factory().make()
        part.seq_update(enc.encode(records[idx]), w[idx], None)
        merged.combine(part.value())
    np.testing.assert_allclose(
        np.hstack(merged.value()[0] + merged.value()[1][0]),
        np.hstack(whole.value()[0] + whole.value()[1][0]),
        rtol=1e-10,
        atol=1e-9,
    )
    # weight 2 == the record twice
    a = est.accumulator_factory().make()
    a.seq_update(enc.encode(records[:5]), np.array([2.0, 1, 1, 1, 1]), None)
    b = est.accumulator_factory().make()
    b.seq_update(enc.encode(records[:5] + records[:1]), np.ones(6), None)
    np.testing.assert_allclose(a.value()[0], b.value()[0], rtol=1e-12)
    # seq_initialize split == whole
    one = est.accumulator_factory().make()
    one.seq_initialize(enc.encode(records), w, RowRandom.for_rows(5, 0, 200))
    two = est.accumulator_factory().make()
    for start, stop in ((0, 77), (77, 200)):
        part = est.accumulator_factory().make()
        part.seq_initialize(
            enc.encode(records[start:stop]), w[start:stop], RowRandom.for_rows(5, start, stop - start)
        )
        two.combine(part.value())
    np.testing.assert_allclose(two.value()[0], one.value()[0], rtol=1e-10)


def test_seq_update_returns_summed_log_likelihood_with_mixture_inside() -> None:
    mix = MixtureDistribution([GaussianDistribution(0.0, 1.0), GaussianDistribution(5.0, 1.0)], [0.3, 0.7])
    d = RecordDistribution({"a": mix, "b": GaussianDistribution(1.0, 2.0)})
    records = d.sampler(3).sample(100)
    enc = d.encoder().encode(records)
    acc = d.estimator().accumulator_factory().make()
    ll = acc.seq_update(enc, np.ones(100), d)
    np.testing.assert_allclose(ll, d.seq_log_density(enc), rtol=1e-12)
    np.testing.assert_allclose(ll, [d.log_density(r) for r in records], rtol=1e-12)
    plain = RecordDistribution({"b": GaussianDistribution(1.0, 2.0)})
    acc = plain.estimator().accumulator_factory().make()
    assert acc.seq_update(plain.encoder().encode([{"b": 1.0}]), np.ones(1), None) is None


def test_tied_fields_pool_their_statistics() -> None:
    est = RecordEstimator({"a": GaussianEstimator(keys="k"), "b": GaussianEstimator(keys="k")})
    acc = est.accumulator_factory().make()
    acc.seq_update(est.encoder().encode([{"a": 0.0, "b": 2.0}, {"a": 1.0, "b": 3.0}]), np.ones(2), None)
    stats: dict = {}
    acc.key_merge(stats)
    acc.key_replace(stats)
    fit = est.estimate(2.0, acc.value())
    assert fit.fields["a"] == fit.fields["b"]
    assert fit.fields["a"].mu == pytest.approx(1.5)


def test_json_round_trip_preserves_field_order() -> None:
    d = RecordDistribution({"z": GaussianDistribution(1.0, 2.0), "a": GaussianDistribution(0.1, 0.3)})
    spec = json.loads(json.dumps(d.to_dict()))
    assert spec == {
        "type": "record",
        "fields": {
            "z": {"type": "gaussian", "mu": 1.0, "sigma2": 2.0},
            "a": {"type": "gaussian", "mu": 0.1, "sigma2": 0.3},
        },
    }
    back = distribution_from_dict(spec)
    assert back == d and list(back.fields) == ["z", "a"]
    est = RecordEstimator({"z": GaussianEstimator(), "a": GaussianEstimator(min_var=0.1)}, name="r", keys="t")
    assert estimator_from_dict(json.loads(json.dumps(est.to_dict()))) == est
    assert d.encoder() == RecordEncoder(
        {"z": GaussianDistribution(0, 1).encoder(), "a": GaussianEstimator().encoder()}
    )


def test_spec_errors() -> None:
    with pytest.raises(SpecError, match=r"RecordDistribution: fields must be a non-empty dict.*\{\}"):
        RecordDistribution({})
    with pytest.raises(SpecError, match=r"field 'a' must be a Distribution, got 3"):
        RecordDistribution({"a": 3})
    with pytest.raises(SpecError, match=r"unknown key 'feilds' in record spec"):
        distribution_from_dict({"type": "record", "feilds": {}})
    with pytest.raises(SchemaError, match=r"expected a table, record batch or struct column .*double"):
        nested_model().encoder().from_arrow(pa.array([1.0]))


def test_scans_pass_through_nested_combinators() -> None:
    from mixle_spark.errors import UnseenLabelError
    from mixle_spark.stats.categorical import CategoricalEstimator
    from mixle_spark.stats.composite import CompositeEstimator
    from mixle_spark.stats.optional import OptionalEstimator
    from mixle_spark.stats.sequence import SequenceEstimator

    est = RecordEstimator(
        {
            "ch": OptionalEstimator(CategoricalEstimator()),
            "tags": SequenceEstimator(CategoricalEstimator()),
            "pair": CompositeEstimator([CategoricalEstimator(), GaussianEstimator()]),
        }
    )
    first = [
        {"ch": "web", "tags": ["a", "b"], "pair": ("x", 1.0)},
        {"ch": None, "tags": [], "pair": ("y", 2.0)},
    ]
    second = pa.Table.from_pylist([{"ch": "shop", "tags": ["c"], "pair": {"0": "x", "1": 3.0}}])
    enc = est.encoder()
    assert enc.needs_scan
    scan = enc.merge_scans(enc.scan(first), enc.scan_arrow(second))
    bound = est.with_scan(scan)
    assert not bound.encoder().needs_scan
    assert bound.to_dict()["fields"]["tags"]["estimator"]["labels"] == ["a", "b", "c"]
    acc = bound.accumulator_factory().make()
    acc.seq_update(bound.encoder().encode(first), np.ones(2), None)
    acc.seq_update(bound.encoder().from_arrow(second), np.ones(1), None)
    fit = bound.estimate(3.0, acc.value())
    assert fit.fields["ch"].p == pytest.approx(1 / 3)
    with pytest.raises(UnseenLabelError, match=r"column 'tags': label 'q' .*\(row 1 of 1\)"):
        bound.encoder().encode([{"ch": "web", "tags": ["a", "q"], "pair": ("x", 1.0)}])


def test_em_on_list_table_and_dataframe_agree() -> None:
    from mixle_spark.estimation import optimize
    from mixle_spark.stats.mixture import MixtureEstimator
    from mixle_spark.stats.optional import OptionalDistribution, OptionalEstimator

    truth = MixtureDistribution(
        [
            RecordDistribution(
                {"a": GaussianDistribution(0, 1), "b": OptionalDistribution(GaussianDistribution(0, 1), 0.2)}
            ),
            RecordDistribution(
                {"a": GaussianDistribution(6, 1), "b": OptionalDistribution(GaussianDistribution(5, 1), 0.5)}
            ),
        ],
        [0.4, 0.6],
    )
    data = truth.sampler(1).sample(2000)
    est = MixtureEstimator(
        [RecordEstimator({"a": GaussianEstimator(), "b": OptionalEstimator(GaussianEstimator())})] * 2
    )
    assert est.encoder().column_names() == ["a", "b"]
    from_list = optimize(data, est, max_its=20, seed=1, print_iter=0)
    df = pd.DataFrame(data)  # missing "b" becomes NaN
    from_table = optimize(pa.Table.from_pandas(df), est, max_its=20, seed=1, print_iter=0)
    from_frame = optimize(df, est, max_its=20, seed=1, print_iter=0)
    assert from_table == from_list and from_frame == from_list
    big = int(np.argmax(from_list.w))
    assert abs(from_list.w[big] - 0.6) < 0.03
    assert abs(from_list.components[big].fields["b"].p - 0.5) < 0.04
