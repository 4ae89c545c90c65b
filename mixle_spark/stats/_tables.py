"""In-memory data as rows to encode: the rules every in-process encoding follows.

A Python list of records, a numpy array, a pandas DataFrame or a pyarrow Table / RecordBatch / Array
becomes :class:`TableRows`: its row count, its per-row weights (an array or a weight column), and the
source an encoder reads (the whole table for a Record model, else the one column it reads). Rows are
cut into contiguous chunks and encoded chunk by chunk; a bad value is reported at its row in the
whole data set. The in-process backends (local, mp) and the models' scikit-learn-style methods
(``MixtureDistribution.score_samples``, ``predict``, ...) all encode through here, so they accept the
same data and report the same errors.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.errors import EmptyDataError, FieldError, SchemaError, did_you_mean
from mixle_spark.stats._validate import check_weights
from mixle_spark.stats.base import Encoder, Estimator

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "TableRows",
    "as_table",
    "chunk_bounds",
    "encode_rows",
    "one_column_error",
    "repeated_columns",
    "split",
]

DEFAULT_CHUNK_SIZE = 262_144
"""Rows per encoded chunk: large enough for efficient matrix products, small enough that the
n x k temporaries of a mixture E-step stay in memory comfortably."""


def split(start: int, stop: int, pieces: int) -> list[tuple[int, int]]:
    """``[start, stop)`` cut into ``pieces`` near-equal contiguous ranges (empty ones dropped)."""
    edges = np.linspace(start, stop, pieces + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges) if b > a]


def chunk_bounds(
    n: int, chunk_size: int | None = None, num_chunks: int | None = None
) -> list[tuple[int, int]]:
    """``[0, n)`` as chunks of ``chunk_size`` rows (default :data:`DEFAULT_CHUNK_SIZE`), or as
    ``num_chunks`` near-equal chunks."""
    if chunk_size is not None and num_chunks is not None:
        raise ValueError("pass chunk_size or num_chunks, not both")
    if num_chunks is not None:
        if num_chunks < 1:
            raise ValueError(f"num_chunks must be >= 1, got {num_chunks}")
        edges = np.linspace(0, n, min(num_chunks, n) + 1).round().astype(int)
    else:
        size = DEFAULT_CHUNK_SIZE if chunk_size is None else chunk_size
        if size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {size}")
        edges = np.append(np.arange(0, n, size), n)
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges) if b > a]


def as_table(data: Any) -> pa.Table | None:
    """``data`` as a pyarrow Table when it is a table (pyarrow or pandas); None for records / arrays."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        if not data.columns.has_duplicates:
            return pa.Table.from_pandas(data, preserve_index=False)
        # Arrow takes a repeated name, pandas' converter does not: convert by position, so that the
        # columns read are checked as a pyarrow Table's are (repeated_columns)
        names = [str(name) for name in data.columns]
        by_position = data.set_axis([f"_{i}" for i in range(len(names))], axis=1)
        return pa.Table.from_pandas(by_position, preserve_index=False).rename_columns(names)
    return None


_READ_BY_NAME = "the columns read are found by name, so each must appear once: rename or drop the copies"


def repeated_columns(
    columns: Sequence[str],
    read: Iterable[str] | None = None,
    why: str = _READ_BY_NAME,
    where: str = "the data",
) -> SchemaError | None:
    """The error for the names among ``read`` (every name when None) that ``columns`` (those of
    ``where``) holds more than once, saying ``why`` that matters; None when there are none.

    >>> print(repeated_columns(["x", "y", "x"], ["x"], why="rename one"))
    column 'x' appears 2 times in the data (its columns: ['x', 'y', 'x']); rename one
    >>> repeated_columns(["x", "y", "x"], ["y"]) is None
    True
    """
    counts = Counter(columns)
    wanted = set(counts if read is None else read)
    repeated = [(name, times) for name, times in counts.items() if times > 1 and name in wanted]
    if not repeated:
        return None
    if len(repeated) == 1:
        what = f"column {repeated[0][0]!r} appears {repeated[0][1]} times"
    else:
        what = "columns " + ", ".join(f"{n!r} ({t} times)" for n, t in repeated) + " appear more than once"
    return SchemaError(f"{what} in {where} (its columns: {list(columns)}); {why}")


def one_column_error(columns: list[str]) -> SchemaError:
    return SchemaError(
        f"the model reads one column but the data has {len(columns)}: {columns}; "
        "pass column=NAME or use a RecordEstimator"
    )


class TableRows:
    """In-memory data as rows: ``n``, ``weights`` (float64, checked) and the encoders' source.

    Parameters
    ----------
    data : list, numpy array, pandas DataFrame, pyarrow Table, RecordBatch or Array
    weights : array-like or str, optional
        Per-row non-negative weights, or the name of a weight column (dropped from the table).
    column : str, optional
        The column a non-Record model reads from a multi-column table.
    """

    def __init__(self, data: Any, weights: Any = None, column: str | None = None) -> None:
        table = as_table(data)
        if table is None and isinstance(data, pa.ChunkedArray | pa.Array):
            table = pa.table({column or "value": data})
        n = table.num_rows if table is not None else len(data)
        if n == 0:
            raise EmptyDataError("no rows to encode: the data is empty")
        self.n = n
        self.weights = self._weights(weights, table, n)
        if table is not None and isinstance(weights, str):
            table = table.drop_columns([weights])
        self.table = table
        self.data = data
        self.column = column
        self.read_column: str | None = None
        """The one column the encoder reads (named in its errors), once :meth:`source` chose it."""

    @property
    def arrow(self) -> bool:
        """True when the rows are Arrow columns (encoded by ``from_arrow``), False for records."""
        return self.table is not None

    @staticmethod
    def _weights(weights: Any, table: pa.Table | None, n: int) -> np.ndarray:
        if weights is None:
            return np.ones(n)
        nulls = None
        if isinstance(weights, str):
            if table is None or weights not in table.column_names:
                names = [] if table is None else table.column_names
                raise SchemaError(f"weight column {weights!r} not found{did_you_mean(weights, names)}")
            repeated = repeated_columns(table.column_names, [weights])
            if repeated is not None:
                raise repeated
            column = table.column(weights)
            w = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
            if column.null_count:
                nulls = np.asarray(column.is_null().to_numpy(zero_copy_only=False))
        else:
            w = np.asarray(weights, dtype=np.float64)
        if w.shape != (n,):
            raise ValueError(f"weights must have one entry per row ({n}), got shape {w.shape}")
        return check_weights(w, name=weights if isinstance(weights, str) else None, nulls=nulls)

    def source(self, encoder: Encoder) -> Any:
        """What ``encoder`` reads: the table (a Record model names its columns), the one column, or
        the records themselves."""
        if self.table is None:
            return self.data
        table = self.table
        names = encoder.column_names()
        read = names if names is not None else [] if self.column is None else [self.column]
        repeated = repeated_columns(table.column_names, read)
        if repeated is not None:
            raise repeated
        if names is not None:
            return table
        if self.column is not None:
            if self.column not in table.column_names:
                raise SchemaError(
                    f"column {self.column!r} not found{did_you_mean(self.column, table.column_names)}; "
                    f"the data has columns {table.column_names}"
                )
            self.read_column = self.column
            return table.column(self.column)
        if table.num_columns != 1:
            raise one_column_error(table.column_names)
        self.read_column = table.column_names[0]
        return table.column(0)

    def piece(self, source: Any, start: int, stop: int) -> Any:
        """Rows ``[start, stop)`` of ``source``."""
        return source.slice(start, stop - start) if self.arrow else source[start:stop]

    def scanned(
        self, encoder: Encoder, estimator: Estimator | None, source: Any, bounds: list[tuple[int, int]]
    ) -> tuple[Any, Encoder]:
        """``(scan, encoder)``: the estimator's vocabularies / ranges scanned chunk by chunk over
        ``source`` and the encoder they fix; ``(None, encoder)`` when nothing needs a scan."""
        if estimator is None or not encoder.needs_scan:
            return None, encoder
        state: Any = None
        for i, (start, stop) in enumerate(bounds):
            scan = encoder.scan_arrow if self.arrow else encoder.scan
            part = located(scan, self.piece(source, start, stop), start, stop, self.n, self.read_column)
            state = part if i == 0 else encoder.merge_scans(state, part)
        return state, estimator.with_scan(state).encoder()

    def encode(
        self, encoder: Encoder, source: Any, bounds: list[tuple[int, int]]
    ) -> list[tuple[int, int, Any]]:
        """``(start, stop, encoded)`` of every chunk of ``bounds``."""
        encode = encoder.from_arrow if self.arrow else encoder.encode
        return [
            (
                start,
                stop,
                located(encode, self.piece(source, start, stop), start, stop, self.n, self.read_column),
            )
            for start, stop in bounds
        ]


def located(
    fn: Callable[[Any], Any], piece: Any, start: int, stop: int, n: int, column: str | None = None
) -> Any:
    """``fn(piece)`` for rows ``[start, stop)`` of ``n``; a bad value is reported at its row in the
    whole data set (and in ``column``, the one column a non-record model reads)."""
    try:
        return fn(piece)
    except FieldError as err:
        located_err = err.in_rows(np.arange(start, stop), n)
        raise (located_err.at(column) if column and not err.path else located_err) from None


def encode_rows(data: Any, encoder: Encoder) -> list[Any]:
    """``data`` encoded for ``encoder`` (no scan: a fitted model's encoder), chunk by chunk."""
    rows = TableRows(data)
    source = rows.source(encoder)
    return [enc for _start, _stop, enc in rows.encode(encoder, source, chunk_bounds(rows.n))]
