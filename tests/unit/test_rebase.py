"""Encoder.rebase: a batch encoded under the scan of part of the data, re-expressed by the encoder of
the whole data's scan, equals that encoder's own encoding of the same rows (what the Spark backend's
one-pass encoding relies on)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.spec import estimator_from_spec


def _arrays(enc: Any) -> list[Any]:
    """Every array and scalar of an encoded batch, in a fixed order (caches left out)."""
    if isinstance(enc, np.ndarray):
        return [enc]
    if isinstance(enc, tuple | list):
        return [a for item in enc for a in _arrays(item)]
    if enc is None or isinstance(enc, int | float | str):
        return [enc]
    slots = getattr(type(enc), "__slots__", ())
    names = [n for n in slots if n != "_cache"] or sorted(vars(enc))
    return [a for n in names for a in _arrays(getattr(enc, n))]


def _same(a: Any, b: Any) -> None:
    left, right = _arrays(a), _arrays(b)
    assert len(left) == len(right)
    for x, y in zip(left, right, strict=True):
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y


def _check(spec: dict[str, Any], table: pa.Table, cut: int) -> None:
    est = estimator_from_spec(spec)
    base = est.encoder()
    assert base.rebases
    parts = [table.slice(0, cut), table.slice(cut)]
    data = [p if base.column_names() else p.column(0) for p in parts]
    scans = [base.scan_arrow(d) for d in data]
    merged = est.with_scan(base.merge_scans(*scans)).encoder()
    locals_ = [est.with_scan(scan).encoder() for scan in scans]
    assert any(local != merged for local in locals_)  # a part's own scan differs from the whole's
    for local, d in zip(locals_, data, strict=True):
        _same(merged.rebase(local.from_arrow(d)), merged.from_arrow(d))


def test_categorical_codes_move_into_the_merged_vocabulary() -> None:
    table = pa.table({"c": ["b", "d", "b", "a", "c", "a", "e"]})
    _check({"type": "categorical"}, table, 3)
    ints = pa.table({"c": pa.array([3, 1, 3, 7, 2], pa.int64())})
    _check({"type": "categorical"}, ints, 2)
    flags = pa.table({"c": [True, True, False]})
    _check({"type": "categorical"}, flags, 2)


def test_integer_categorical_binomial_and_vectors() -> None:
    _check({"type": "integer_categorical"}, pa.table({"x": [5, 7, 6, 2, 9]}), 3)
    _check({"type": "binomial"}, pa.table({"x": [1.0, 2.0, 0.0, 6.0]}), 2)
    rows = np.arange(12.0).reshape(6, 2) ** 1.5
    for family in ("multivariate_gaussian", "diagonal_gaussian"):
        _check({"type": family}, pa.table({"v": [list(r) for r in rows]}), 2)


def test_composites_rebase_every_field() -> None:
    table = pa.table(
        {
            "amount": [1.5, 2.0, 3.5, 0.5, 4.0],
            "channel": ["web", "web", "shop", "app", "shop"],
            "tags": [["a"], ["a", "b"], [], ["c", "a"], ["d"]],
            "maybe": pa.array([None, None, "x", "y", None], pa.string()),
            "vec": [[0.0, 1.0], [2.0, 1.0], [4.0, 4.0], [1.0, 0.0], [3.0, 3.0]],
        }
    )
    spec = {
        "type": "mixture",
        "k": 2,
        "component": {
            "type": "record",
            "fields": {
                "amount": {"type": "log_gaussian"},
                "channel": {"type": "categorical"},
                "tags": {
                    "type": "sequence",
                    "estimator": {"type": "categorical"},
                    "len_estimator": {"type": "categorical"},
                },
                "maybe": {"type": "optional", "estimator": {"type": "categorical"}},
                "vec": {"type": "diagonal_gaussian"},
            },
        },
    }
    _check(spec, table, 2)  # the first part's optional field is all missing: its child saw nothing


def test_unseen_codes_stay_unseen() -> None:
    est = estimator_from_spec({"type": "categorical"})
    enc = est.with_scan(frozenset({"a", "c"})).encoder().with_unseen("zero")
    batch = enc.from_arrow(pa.array(["c", "z", "a"]))
    merged = est.with_scan(frozenset({"a", "b", "c"})).encoder().with_unseen("zero")
    moved = merged.rebase(batch)
    assert moved.labels is merged.labels and moved.codes.tolist() == [2, -1, 0]


@pytest.mark.parametrize("family", ["multinomial", "markov_chain"])
def test_families_without_rebase_say_so(family: str) -> None:
    spec = {"type": family}
    assert estimator_from_spec(spec).encoder().needs_scan
    assert not estimator_from_spec(spec).encoder().rebases
    record = estimator_from_spec({"type": "record", "fields": {"a": {"type": "categorical"}, "b": spec}})
    assert not record.encoder().rebases
    assert estimator_from_spec({"type": "record", "fields": {"a": {"type": "poisson"}}}).encoder().rebases
