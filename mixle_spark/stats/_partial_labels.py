"""Partly labelled mixtures: a column saying, for some rows, which component they come from.

``MixtureEstimator(..., label_column="segment")`` reads, besides what its components read, an integer
column holding a component index (0 .. k-1) for the rows whose component is known and null for the
others. In every E-step a labelled row's responsibility is one-hot at its label (its log-likelihood
term is ``log w_y + log p_y(x)``, the complete-data one), the unlabelled rows' are the posterior, as
in semi-supervised EM (Nigam et al. 2000; mclust's ``MclustSSC``); the seeding's and the random
start's assignments keep the labels too. The fitted model is an ordinary mixture: scoring reads no
label column.

The label rides in the encoding (:class:`LabelledEncoder` makes a :class:`LabelledBatch` of the
components' batch and the labels), so every backend reads it with the data and no backend changes.
When the components read one unnamed column (a vector), ``data_column`` names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.errors import DataTypeError, DataValueError, SchemaError, SpecError
from mixle_spark.stats._validate import as_arrow_array, first_true
from mixle_spark.stats.base import Encoder

__all__ = ["LabelledBatch", "LabelledEncoder", "checked_labels", "label_codes"]


class LabelledBatch:
    """The components' encoded batch (``inner``) and each row's label (``labels``: int64, -1 when
    unknown)."""

    __slots__ = ("inner", "labels")

    def __init__(self, inner: Any, labels: np.ndarray) -> None:
        self.inner = inner
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def known(self) -> np.ndarray:
        """Where the component is known, (n,) bool."""
        return self.labels >= 0  # type: ignore[no-any-return]


def checked_labels(labels: np.ndarray, k: int) -> np.ndarray:
    """``labels`` (codes, -1 unknown), refused with SpecError when one names no component of a
    mixture of ``k`` (the encoding bounds them by the largest K a handle serves: ``select_k``)."""
    if len(labels) and int(labels.max()) >= k:
        top = int(labels.max())
        raise SpecError(
            f"label {top} names a component of a mixture of {k} (labels are component indices "
            f"0..{k - 1}); fit at least {top + 1} components"
        )
    return labels


def _expected(column: str, k: int) -> str:
    return f"column {column!r}: expected a component index in 0..{k - 1} or null (unknown)"


def label_codes(values: Any, column: str, k: int) -> np.ndarray:
    """Labels (an Arrow integer column with nulls, or a Python sequence of ints and None) as int64
    codes, -1 where unknown; DataValueError / DataTypeError naming the column, value and row for
    anything else (a float with a fraction, a string, an index outside 0..k-1)."""
    expected = _expected(column, k)
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        array = as_arrow_array(values)
        typ = array.type
        n = len(array)
        if pa.types.is_null(typ):
            return np.full(n, -1, dtype=np.int64)
        if not (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
            valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False))
            i = first_true(valid) if valid.any() else 0
            raise DataTypeError(f"{expected} (Arrow type {typ})", value=array[i].as_py(), row=i, n_rows=n)
        known = np.asarray(array.is_valid().to_numpy(zero_copy_only=False))
        raw = np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.float64)
    else:
        n = len(values)
        known = np.array([v is not None for v in values], dtype=bool)
        for i, v in enumerate(values):
            if v is not None and (
                isinstance(v, (bool, str, bytes)) or not isinstance(v, (int, float, np.number))
            ):
                raise DataTypeError(expected, value=v, row=i, n_rows=n)
        raw = np.array([0.0 if v is None else float(v) for v in values], dtype=np.float64)
    given = known & ~np.isnan(raw)  # NaN (a float column's missing value): unknown
    labelled = given & (raw != -1)  # -1: unknown too
    bad = labelled & ((raw < 0) | (raw != np.floor(raw)) | (raw >= k))
    if bad.any():
        i = first_true(bad)
        value = raw[i]
        raise DataValueError(
            expected, value=int(value) if value == int(value) else float(value), row=i, n_rows=n,
            count=int(bad.sum()),
        )  # fmt: skip
    return np.where(labelled, raw, -1).astype(np.int64)


class LabelledEncoder(Encoder):
    """Reads the components' data (through ``inner``) and the label column ``label``.

    ``data_column`` names the column ``inner`` reads when it reads one unnamed column (a vector);
    for a record ``inner`` its own columns are read. ``k`` bounds the labels.
    """

    def __init__(self, inner: Encoder, label: str, k: int, data_column: str | None = None) -> None:
        self.inner = inner
        self.label = label
        self.k = int(k)
        self.data_column = data_column

    # -- which columns ----------------------------------------------------------------------------
    def _inner_names(self) -> list[str] | None:
        return self.inner.column_names()

    def column_names(self) -> list[str]:
        names = self._inner_names()
        if names is None:
            if self.data_column is None:
                raise SchemaError(
                    f"label_column={self.label!r}: the components read one unnamed column; name it with "
                    "data_column (MixtureEstimator(..., data_column='features'))"
                )
            names = [self.data_column]
        return [*names, self.label]

    def _inner_data(self, data: Any) -> Any:
        names = self._inner_names()
        if names is not None:
            return data.select(names)
        return data.column(self.column_names()[0])

    def _labels(self, data: Any) -> np.ndarray:
        return label_codes(data.column(self.label), self.label, self.k)

    # -- encoding -----------------------------------------------------------------------------------
    def narrow(self, enc: LabelledBatch, dtype: Any) -> LabelledBatch:
        """The components' batch narrowed by their encoder; the labels stay int64."""
        return LabelledBatch(self.inner.narrow(enc.inner, dtype), enc.labels)

    def encode(self, records: Sequence[Any]) -> LabelledBatch:
        """``records``: ``(record, label)`` pairs (label an int or None)."""
        pairs = list(records)
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise DataTypeError(
                    f"expected (record, label) pairs for a mixture with label_column={self.label!r}",
                    value=pair, row=i, n_rows=len(pairs),
                )  # fmt: skip
        inner = self.inner.encode([r for r, _ in pairs])
        return LabelledBatch(inner, label_codes([lab for _, lab in pairs], self.label, self.k))

    def from_arrow(self, data: Any) -> LabelledBatch:
        if not isinstance(data, (pa.Table, pa.RecordBatch)):
            raise SchemaError(
                f"a mixture with label_column={self.label!r} reads a table (its data and label columns), "
                f"got {type(data).__name__}"
            )
        self._require(data.schema.names)
        return LabelledBatch(self.inner.from_arrow(self._inner_data(data)), self._labels(data))

    def _require(self, available: Sequence[str]) -> None:
        for name in self.column_names():
            if name not in available:
                raise SchemaError(f"column {name!r} not found; the table has columns {list(available)}")

    def check_arrow_type(self, arrow_type: Any) -> None:
        if not isinstance(arrow_type, pa.Schema):
            raise SchemaError(f"a mixture with label_column={self.label!r} reads a table, got {arrow_type}")
        self._require(arrow_type.names)
        typ = arrow_type.field(self.label).type
        if not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_null(typ)):
            raise SchemaError(f"{_expected(self.label, self.k)}, got Arrow type {typ}")
        names = self._inner_names()
        if names is not None:
            self.inner.check_arrow_type(arrow_type)
            return
        column = self.column_names()[0]
        try:
            self.inner.check_arrow_type(arrow_type.field(column).type)
        except SchemaError as err:
            raise SchemaError(f"column {column!r}: {err}") from None

    def expected_arrow(self) -> str:
        return f"{self.inner.expected_arrow()} and an integer column {self.label!r} (null: unknown)"

    # -- scans, rebasing, unseen labels, embedding: the components' ----------------------------------
    @property
    def needs_scan(self) -> bool:
        return self.inner.needs_scan

    def scan(self, records: Sequence[Any]) -> Any:
        return self.inner.scan([r for r, _ in records])

    def scan_arrow(self, data: Any) -> Any:
        return self.inner.scan_arrow(self._inner_data(data))

    def merge_scans(self, a: Any, b: Any) -> Any:
        return self.inner.merge_scans(a, b)

    @property
    def rebases(self) -> bool:
        return self.inner.rebases

    def rebase(self, enc: LabelledBatch) -> LabelledBatch:
        return LabelledBatch(self.inner.rebase(enc.inner), enc.labels)

    def with_unseen(self, unseen: str) -> LabelledEncoder:
        return LabelledEncoder(self.inner.with_unseen(unseen), self.label, self.k, self.data_column)

    def unseen_rows(self, enc: LabelledBatch) -> np.ndarray | None:
        return self.inner.unseen_rows(enc.inner)

    def embedding_scales(self) -> np.ndarray:
        return self.inner.embedding_scales()

    def embedding_groups(self) -> np.ndarray:
        return self.inner.embedding_groups()

    def embed(self, enc: LabelledBatch) -> np.ndarray:
        return self.inner.embed(enc.inner)

    def union(self, other: Encoder) -> LabelledEncoder:
        if not (
            isinstance(other, LabelledEncoder)
            and (other.label, other.data_column) == (self.label, self.data_column)
        ):
            raise TypeError(f"cannot combine encoders {self!r} and {other!r}")
        return LabelledEncoder(
            self.inner.union(other.inner), self.label, max(self.k, other.k), self.data_column
        )

    def __eq__(self, other: object) -> bool:
        # k only bounds the labels read (each mixture checks its own K): select_k's candidates share
        # the encoding of the largest
        return (
            isinstance(other, LabelledEncoder)
            and (self.label, self.data_column) == (other.label, other.data_column)
            and self.inner == other.inner
        )

    def __hash__(self) -> int:
        return hash(("LabelledEncoder", self.label, hash(self.inner)))

    def __repr__(self) -> str:
        return f"LabelledEncoder({self.inner!r}, label={self.label!r}, k={self.k})"
