"""One pass over a table's Arrow batches: each column's exact profile and a bounded uniform sample of rows.

A profile (:class:`ColumnProfile`) counts rows, nulls (NaN counts as null in a float column), zeros
and negative values, keeps the least and greatest value, whether every value is whole, and the distinct
values up to a cap; a list column also profiles its lengths and, as a column of their own, its
elements. Profiles merge by addition (sums, min / max, set union), so partitions are profiled apart
and merged in any order.

The sample is bottom-k sampling: every row carries a uniform random key and the ``k`` rows of least
key are kept; the merge of two samples keeps the ``k`` least keys of both, so the merged sample is a
uniform sample without replacement of the whole table, however it was split (Cohen and Kaplan,
"Summarizing data using bottom-k sketches", PODC 2007).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["DISTINCT_CAP", "ColumnProfile", "TableProfile", "column_kind", "profile_table"]

DISTINCT_CAP = 1000
"""Distinct values a profile keeps per column; past it the column has "more than" this many."""

_NUMERIC = ("float", "integer")


def column_kind(data_type: pa.DataType) -> str:
    """``"float"``, ``"integer"``, ``"boolean"``, ``"string"``, ``"list"`` or ``"other"``."""
    if pa.types.is_dictionary(data_type):
        return column_kind(data_type.value_type)
    if pa.types.is_floating(data_type) or pa.types.is_decimal(data_type):
        return "float"
    if pa.types.is_integer(data_type):
        return "integer"
    if pa.types.is_boolean(data_type):
        return "boolean"
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return "string"
    if (
        pa.types.is_list(data_type)
        or pa.types.is_large_list(data_type)
        or pa.types.is_fixed_size_list(data_type)
    ):
        return "list"
    return "other"


@dataclass
class ColumnProfile:
    """What one pass learns of a column exactly (see the module docstring)."""

    kind: str
    rows: int = 0
    nulls: int = 0
    zeros: int = 0
    negatives: int = 0
    nonfinite: int = 0
    low: float = float("inf")
    high: float = float("-inf")
    whole: bool = True
    total: float = 0.0
    distinct: set[Any] | None = field(default_factory=set)
    lengths: ColumnProfile | None = None
    elements: ColumnProfile | None = None

    @property
    def values(self) -> int:
        """Rows with a value (not null, not NaN)."""
        return self.rows - self.nulls

    @property
    def n_distinct(self) -> int | None:
        """The number of distinct values, or None when past :data:`DISTINCT_CAP`."""
        return None if self.distinct is None else len(self.distinct)

    @property
    def mean(self) -> float:
        return self.total / self.values if self.values else float("nan")

    def merge(self, other: ColumnProfile) -> ColumnProfile:
        """The profile of both parts (the same column of two parts of a table)."""
        kind = self.kind if self.kind == other.kind else "other"
        distinct = None
        if self.distinct is not None and other.distinct is not None:
            distinct = self.distinct | other.distinct
            distinct = distinct if len(distinct) <= DISTINCT_CAP else None
        return ColumnProfile(
            kind=kind,
            rows=self.rows + other.rows,
            nulls=self.nulls + other.nulls,
            zeros=self.zeros + other.zeros,
            negatives=self.negatives + other.negatives,
            nonfinite=self.nonfinite + other.nonfinite,
            low=min(self.low, other.low),
            high=max(self.high, other.high),
            whole=self.whole and other.whole,
            total=self.total + other.total,
            distinct=distinct,
            lengths=_merge_optional(self.lengths, other.lengths),
            elements=_merge_optional(self.elements, other.elements),
        )

    def to_dict(self) -> dict[str, Any]:
        """The profile as JSON-able numbers (the distinct values counted, not listed)."""
        out: dict[str, Any] = {"kind": self.kind, "rows": self.rows, "nulls": self.nulls}
        if self.kind in _NUMERIC and self.values:
            out.update(zeros=self.zeros, min=self.low, max=self.high, whole=self.whole, mean=self.mean)
        out["distinct"] = self.n_distinct if self.distinct is not None else f"> {DISTINCT_CAP}"
        if self.lengths is not None:
            out["lengths"] = self.lengths.to_dict()
        if self.elements is not None:
            out["elements"] = self.elements.to_dict()
        return out


def _merge_optional(a: ColumnProfile | None, b: ColumnProfile | None) -> ColumnProfile | None:
    if a is None or b is None:
        return a if b is None else b
    return a.merge(b)


def _distinct(values: pa.Array) -> set[Any] | None:
    unique = pc.unique(values)
    if len(unique) > DISTINCT_CAP:
        return None
    return set(unique.to_pylist())


def profile_array(values: pa.Array | pa.ChunkedArray, distinct: bool = True) -> ColumnProfile:
    """The profile of one column's values (one batch of it); ``distinct=False`` when the column is
    already known to have more than :data:`DISTINCT_CAP` values (they are not looked up again)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    kind = column_kind(values.type)
    profile = ColumnProfile(kind=kind, rows=len(values), nulls=values.null_count)
    present = pc.drop_null(values)
    if kind in _NUMERIC:
        x = present.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        nan = np.isnan(x)
        x = x[~nan]
        finite = np.isfinite(x)
        profile.nulls += int(nan.sum())
        profile.nonfinite = int((~finite).sum())
        x = x[finite]
        if len(x):
            profile.zeros = int(np.count_nonzero(x == 0.0))
            profile.negatives = int(np.count_nonzero(x < 0.0))
            profile.low, profile.high = float(x.min()), float(x.max())
            profile.whole = bool(np.all(x == np.floor(x)))
            profile.total = float(x.sum())
        if not distinct:
            profile.distinct = None
        else:
            profile.distinct = _distinct(pa.array(x)) if kind == "float" else _distinct(present)
    elif kind == "list":
        profile.lengths = profile_array(pc.list_value_length(present))
        profile.elements = profile_array(pc.list_flatten(present), distinct)
        profile.distinct = None
    elif kind in ("boolean", "string"):
        profile.distinct = _distinct(present) if distinct else None
    else:
        profile.distinct = None
    return profile


@dataclass
class TableProfile:
    """Every column's profile and a uniform sample of at most ``capacity`` rows (with their keys)."""

    columns: dict[str, ColumnProfile]
    sample: pa.Table
    keys: np.ndarray
    capacity: int

    @property
    def rows(self) -> int:
        first = next(iter(self.columns.values()), None)
        return 0 if first is None else first.rows

    def merge(self, other: TableProfile | None) -> TableProfile:
        """The profile and sample of both parts of the table."""
        if other is None:
            return self
        columns = {name: p.merge(other.columns[name]) for name, p in self.columns.items()}
        sample = pa.concat_tables([self.sample, other.sample.cast(self.sample.schema)])
        keys = np.concatenate([self.keys, other.keys])
        sample, keys = _least_keys(sample, keys, self.capacity)
        return dataclasses.replace(self, columns=columns, sample=sample, keys=keys)

    def add(self, table: pa.Table | pa.RecordBatch, keys: np.ndarray) -> TableProfile:
        """This profile and sample with the rows of ``table`` (keyed by ``keys``) added: the rows
        whose key cannot enter the full sample are not copied, and a column already past
        :data:`DISTINCT_CAP` distinct values is not looked up again."""
        counted = {name for name, p in self.columns.items() if _counts_distinct(p)}
        part = profile_table(table, keys, self.capacity, counted, self.threshold)
        return self.merge(part)

    @property
    def threshold(self) -> float:
        """The key a row must be below to enter the sample (1.0, every key, while it is not full)."""
        return float(self.keys[-1]) if len(self.keys) >= self.capacity else 1.0


def _counts_distinct(profile: ColumnProfile) -> bool:
    elements = profile.elements
    return profile.distinct is not None or (elements is not None and elements.distinct is not None)


def _least_keys(table: pa.Table, keys: np.ndarray, capacity: int) -> tuple[pa.Table, np.ndarray]:
    """The rows of ``table`` with the ``capacity`` least keys (all of them when there are fewer), in
    the order of their keys, so the sample's order does not depend on how the table was split."""
    if len(keys) > capacity:
        keep = np.argpartition(keys, capacity - 1)[:capacity]
        table, keys = table.take(keep), keys[keep]
    order = np.argsort(keys, kind="stable")
    return table.take(order), keys[order]


def profile_table(
    table: pa.Table | pa.RecordBatch,
    keys: np.ndarray,
    capacity: int,
    counted: Collection[str] | None = None,
    below: float = 1.0,
) -> TableProfile:
    """Profile every column of ``table`` (one part of a table) and keep the rows of least ``keys``
    (one uniform random number per row in [0, 1)) as its sample of at most ``capacity`` rows;
    ``counted``: the columns whose distinct values are looked up (None: all), ``below``: only rows
    of lesser key may enter the sample."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    columns = {
        name: profile_array(table.column(name), counted is None or name in counted)
        for name in table.column_names
    }
    keys = np.asarray(keys, dtype=np.float64)
    if below < 1.0:
        entering = keys < below
        table, keys = table.filter(pa.array(entering)), keys[entering]
    sample, kept = _least_keys(table, keys, capacity)
    return TableProfile(columns=columns, sample=sample, keys=kept, capacity=capacity)


def merge_all(parts: Mapping[int, TableProfile] | list[TableProfile]) -> TableProfile | None:
    """The merge of several parts' profiles (None when there are none)."""
    merged: TableProfile | None = None
    for part in parts.values() if isinstance(parts, Mapping) else parts:
        merged = part if merged is None else merged.merge(part)
    return merged
