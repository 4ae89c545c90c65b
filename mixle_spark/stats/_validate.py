"""Shared conversions from records / Arrow columns to numpy, with errors that name the bad value.

Every leaf encoder goes through these so that the same bad input produces the same message whether
it arrived as a Python list, a pandas column or an Arrow array. Errors carry no column name: the
enclosing Record / Optional / Sequence adds the path (see :class:`mixle_spark.errors.FieldError`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mixle_spark.errors import DataTypeError, DataValueError

__all__ = [
    "arrow_float_values",
    "as_arrow_array",
    "check_finite",
    "check_integer",
    "check_range",
    "check_weights",
    "first_true",
    "float_values",
    "unit_sum",
]

_NUMERIC_KINDS = "biuf"


def first_true(mask: np.ndarray) -> int:
    """Index of the first True entry of a boolean array (which must have one)."""
    return int(np.flatnonzero(mask)[0])


def float_values(records: Sequence[Any] | np.ndarray, expected: str) -> np.ndarray:
    """Python scalars -> float64 array of shape (n,); strings, None and containers are errors.

    Parameters
    ----------
    records : sequence of scalars
    expected : str
        Message fragment, e.g. ``"expected a number for GaussianEstimator"``.
    """
    arr = np.asarray(records) if not isinstance(records, np.ndarray) else records
    if arr.ndim == 1 and arr.dtype.kind in _NUMERIC_KINDS:
        return arr.astype(np.float64, copy=False)
    n = len(records)
    for i, value in enumerate(records):
        if value is None:
            raise DataValueError(
                expected + " (a missing value needs OptionalEstimator)", value=None, row=i, n_rows=n
            )
        if isinstance(value, (str, bytes)) or not isinstance(value, (int, float, np.number, np.bool_)):
            raise DataTypeError(expected, value=value, row=i, n_rows=n)
    return np.asarray(records, dtype=np.float64)


def as_arrow_array(data: Any) -> pa.Array:
    """One contiguous Arrow array from an Array, ChunkedArray or a one-column Table/RecordBatch."""
    if isinstance(data, pa.ChunkedArray):
        if data.num_chunks == 1:
            return data.chunk(0)
        return data.combine_chunks() if data.num_chunks else pa.array([], type=data.type)
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        if data.num_columns != 1:
            raise TypeError(f"expected one column, got {data.num_columns}: {data.schema.names}")
        return as_arrow_array(data.column(0))
    if isinstance(data, pa.Array):
        return data
    return pa.array(data)


def _first_valid(array: pa.Array) -> tuple[int, Any]:
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False))
    i = first_true(valid) if valid.any() else 0
    return i, array[i].as_py()


def _first_non_number(array: pa.Array) -> tuple[int, Any, int]:
    """``(row, value, unreadable cells)``: the first value of a text column that does not read as a
    number (a CSV column with one bad cell is read as text: the cell to report is that one, not the
    first), and how many do not; else the first value and 0."""
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        import pandas as pd

        text = array.to_pandas()
        spelled_nan = text.str.strip().str.lower().isin(("nan", "+nan", "-nan")).to_numpy()
        unreadable = pd.to_numeric(text, errors="coerce").isna().to_numpy() & text.notna().to_numpy()
        unreadable &= ~spelled_nan
        if unreadable.any():
            i = first_true(unreadable)
            return i, array[i].as_py(), int(unreadable.sum())
    row, value = _first_valid(array)
    return row, value, 0


def unreadable_cells(err: BaseException) -> int | None:
    """For a text column where numbers were expected: how many cells of the batch behind ``err`` do
    not read as numbers (0: every cell reads, only the column's type is wrong); None for any other
    error. A caller choosing which error to report prefers cells that do not read."""
    cells = getattr(err, "unreadable_cells", None)
    return None if cells is None else int(cells)


def arrow_float_values(data: Any, expected: str) -> np.ndarray:
    """A numeric Arrow column -> float64 numpy array (zero-copy for float64 without nulls).

    Nulls are an error here (missing values are the business of OptionalEncoder), as is any
    non-numeric Arrow type.
    """
    array = as_arrow_array(data)
    typ = array.type
    if not (
        pa.types.is_integer(typ)
        or pa.types.is_floating(typ)
        or pa.types.is_boolean(typ)
        or pa.types.is_decimal(typ)
        or pa.types.is_null(typ)
    ):
        row, value, cells = _first_non_number(array)
        err = DataTypeError(f"{expected} (Arrow type {typ})", value=value, row=row, n_rows=len(array))
        err.unreadable_cells = cells  # type: ignore[attr-defined]
        raise err
    if array.null_count:
        mask = np.asarray(array.is_null().to_numpy(zero_copy_only=False))
        raise DataValueError(
            expected + " (a missing value needs OptionalEstimator)",
            value=None,
            row=first_true(mask),
            n_rows=len(array),
            count=int(mask.sum()),
        )
    if pa.types.is_decimal(typ) or pa.types.is_boolean(typ) or pa.types.is_null(typ):
        array = pc.cast(array, pa.float64())
    return np.asarray(array.to_numpy(zero_copy_only=False)).astype(np.float64, copy=False)


def check_finite(x: np.ndarray, expected: str) -> None:
    """Raise DataValueError naming the first NaN / inf entry of ``x`` (shape (n,) or (n, d))."""
    bad = ~np.isfinite(x)
    if bad.any():
        rows = bad if bad.ndim == 1 else bad.any(axis=1)
        i = first_true(rows)
        value = x[i] if x.ndim == 1 else x[i][bad[i]][0]
        raise DataValueError(expected, value=float(value), row=i, n_rows=len(x), count=int(rows.sum()))


def check_range(
    x: np.ndarray,
    expected: str,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> None:
    """Raise DataValueError for the first entry of ``x`` outside ``[low, high]`` (``(low, high]``)."""
    check_finite(x, expected)
    if low is None and high is None:
        return
    bad = np.zeros(x.shape, dtype=bool)
    if low is not None:
        bad |= (x <= low) if low_open else (x < low)
    if high is not None:
        bad |= x > high
    if bad.any():
        i = first_true(bad)
        raise DataValueError(expected, value=float(x[i]), row=i, n_rows=len(x), count=int(bad.sum()))


def check_integer(x: np.ndarray, expected: str) -> None:
    """Raise DataValueError for the first non-integral (or non-finite) entry of ``x``."""
    check_finite(x, expected)
    bad = x != np.floor(x)
    if bad.any():
        i = first_true(bad)
        raise DataValueError(expected, value=float(x[i]), row=i, n_rows=len(x), count=int(bad.sum()))


def unit_sum(p: np.ndarray) -> np.ndarray:
    """``p`` (non-negative, summing to about 1) rescaled so that ``math.fsum(p) == 1.0`` exactly.

    The rounding residual of the division goes into the largest entry. Exactness makes this
    idempotent, so a distribution built from its own JSON (``from_dict(to_dict())``) has bit-identical
    probabilities — which a resumed fit relies on to repeat an uninterrupted one exactly. A plain
    ``p / p.sum()`` is not idempotent: it can move entries by an ulp each time it is applied.
    """
    arr = np.array(p, dtype=np.float64)
    total = math.fsum(arr)
    if total == 1.0 or arr.size == 0:
        return arr
    arr = arr / total
    j = int(np.argmax(arr))
    for _ in range(8):
        residual = 1.0 - math.fsum(arr)
        if residual == 0.0:
            break
        arr[j] = max(arr[j] + residual, 0.0)
    return arr


def check_weights(
    w: np.ndarray,
    *,
    name: str | None = None,
    nulls: np.ndarray | None = None,
    first_row: int = 0,
    n_rows: int | None = None,
) -> np.ndarray:
    """``w`` (float64), or a DataValueError naming the first null, NaN, infinite or negative weight.

    ``name`` is the weight column (the message starts ``column 'w': ``); ``nulls`` marks rows whose
    weight was null (they read as NaN in ``w``); ``first_row`` and ``n_rows`` place a slice in the
    whole table (an MPI rank's rows), so the row reported is the table's. The same message on every
    backend: ``weights must be finite and non-negative, got -0.5 (2 bad rows, first at row 3 of 6)``.
    """
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        i = first_true(bad)
        value = None if nulls is not None and nulls[i] else float(w[i])
        raise DataValueError(
            "weights must be finite and non-negative",
            path=() if name is None else (name,),
            value=value,
            row=first_row + i,
            n_rows=len(w) if n_rows is None else n_rows,
            count=int(bad.sum()),
        )
    return w
