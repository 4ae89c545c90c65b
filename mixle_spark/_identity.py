"""What data a result came from: digests that tell different data apart without keeping it.

A checkpoint records the identity of the data it was computed from, so that a re-run on other data
(tomorrow's table in yesterday's checkpoint folder, an array whose values changed with its length
kept) is never taken for the same fit. (A stream's model versions record their query instead, and
kept statistics their stream: :mod:`mixle_spark.streaming`.) The identity is a digest of the
content, never of the container's name:

- in-memory tables (pandas, pyarrow) and arrays: every row is hashed (64 bits, vectorized by
  :func:`pandas.util.hash_pandas_object` over whole columns), and the rows are combined as a
  multiset (their count, the sum and the xor of their hashes, and the sum of their squares), so the
  same rows in another order or another chunking give the same digest; a Python list of records is
  hashed as its pickle;
- a local Parquet file, Parquet folder or Delta table named by its path (what MPI and torchrun
  processes read): every file under it, with its size and modification time (a Delta commit, a
  rewritten file or a new part file changes it);
- the frames of the engines (Spark, Dask, Ray) have digests of their own, computed where the data
  lives (:func:`mixle_spark.parallel.backends.registry.data_identity`), with the same row multiset.

A digest finds change, not tampering: it is not a MAC (checkpoints carry one under a key).
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "MultisetDigest",
    "content_digest",
    "frame_row_hashes",
    "frame_schema",
    "path_digest",
]

_MASK = (1 << 64) - 1
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: column hashes combined as h * MIX + next (mod 2^64)


def frame_row_hashes(frame: Any) -> np.ndarray:
    """One uint64 hash per row of pandas DataFrame ``frame`` (array of shape ``(n,)``), its columns
    combined in order; a column whose values pandas cannot hash (lists, arrays, dicts) is hashed as
    each value's pickle (numpy arrays as their lists)."""
    import pandas as pd

    rows = np.zeros(len(frame), dtype=np.uint64)
    for position in range(frame.shape[1]):
        column = frame.iloc[:, position]
        try:
            hashed = pd.util.hash_pandas_object(column, index=False).to_numpy()
        except TypeError:  # unhashable cells: lists, arrays, dicts, ...
            hashed = pd.util.hash_pandas_object(column.map(_value_bytes), index=False).to_numpy()
        with np.errstate(over="ignore"):
            rows = rows * _MIX + hashed.astype(np.uint64, copy=False)
    return rows


def _value_bytes(value: Any) -> bytes:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    return pickle.dumps(value, protocol=4)


class MultisetDigest:
    """The digest of a multiset of 64-bit row hashes, built from parts in any order (partitions,
    batches, chunks): ``add`` each part's hashes (or ``merge`` a part's :meth:`state`), then
    :meth:`hexdigest`."""

    def __init__(self) -> None:
        self.rows = 0
        self.total = 0
        self.squares = 0
        self.xor = 0

    def add(self, hashes: np.ndarray) -> MultisetDigest:
        """Fold a part's row hashes (uint64 array) in."""
        h = np.asarray(hashes, dtype=np.uint64)
        with np.errstate(over="ignore"):
            self.merge(
                (
                    int(h.size),
                    int(h.sum(dtype=np.uint64)),
                    int((h * h).sum(dtype=np.uint64)),
                    int(np.bitwise_xor.reduce(h)) if h.size else 0,
                )
            )
        return self

    def state(self) -> tuple[int, int, int, int]:
        """``(rows, sum, sum of squares, xor)``, what a part sends to be merged."""
        return self.rows, self.total, self.squares, self.xor

    def merge(self, state: Sequence[int]) -> MultisetDigest:
        """Fold another part's :meth:`state` in."""
        rows, total, squares, xor = (int(v) for v in state)
        self.rows += rows
        self.total = (self.total + total) & _MASK
        self.squares = (self.squares + squares) & _MASK
        self.xor ^= xor
        return self

    def hexdigest(self, *context: Any) -> str:
        """The digest, with ``context`` (the schema, the weights, ...) hashed in."""
        text = repr((self.rows, self.total, self.squares, self.xor, *context))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _frame_of(data: Any) -> Any:
    """``data`` as a pandas DataFrame when it is a table or a numeric array; None otherwise."""
    import pandas as pd
    import pyarrow as pa

    if isinstance(data, pd.DataFrame):
        return data
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, (pa.Array, pa.ChunkedArray)):
        data = pa.table({"value": data})
    if isinstance(data, pa.Table):
        return data.to_pandas(integer_object_nulls=True)
    if isinstance(data, np.ndarray) and data.dtype != object and data.ndim in (1, 2):
        return pd.DataFrame(data.reshape(len(data), -1))
    return None


def frame_schema(frame: Any) -> str:
    """The column names and types of pandas DataFrame ``frame`` (or of the pyarrow schema ``frame``),
    as a digest's context: alike for the same table held by pandas, pyarrow, Dask or Ray."""
    import pyarrow as pa

    if isinstance(frame, pa.Schema):
        frame = frame.empty_table().to_pandas(integer_object_nulls=True)
    return repr([(str(c), str(t)) for c, t in frame.dtypes.items()])


def content_digest(data: Any, weights: Any = None) -> str:
    """The digest of in-memory ``data`` (a pandas DataFrame, pyarrow Table / RecordBatch / Array, a
    numpy array or a list of records) and of its per-row ``weights`` (an array, or the name of a
    weight column, which is then part of the data already).

    >>> import numpy as np, pandas as pd
    >>> x = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> content_digest(x) == content_digest(x[::-1].copy())   # the same rows, another order
    True
    >>> content_digest(x) == content_digest(x + [[0.0, 0.0], [0.0, 1e-12]])
    False
    """
    frame = _frame_of(data)
    extra: tuple[Any, ...] = ()
    if weights is not None and not isinstance(weights, str):
        w = np.ascontiguousarray(np.asarray(weights, dtype=np.float64))
        extra = (hashlib.sha256(w.tobytes()).hexdigest(),)
    elif isinstance(weights, str):
        extra = (f"weight column {weights}",)
    if frame is None:  # records: order matters here, and so does their text
        payload = pickle.dumps(list(data) if not isinstance(data, list) else data, protocol=4)
        return hashlib.sha256(payload + repr(extra).encode()).hexdigest()[:32]
    return MultisetDigest().add(frame_row_hashes(frame)).hexdigest(frame_schema(frame), *extra)


def path_digest(path: str | os.PathLike[str]) -> str:
    """The digest of the files at local ``path`` (a file, or every file under a folder such as a
    Delta table with its log): their relative names, sizes and modification times (nanoseconds)."""
    root = Path(path)
    found: list[tuple[str, int, int]] = []
    if root.is_file():
        stat = root.stat()
        found.append((root.name, stat.st_size, stat.st_mtime_ns))
    else:
        for file in _files_under(root):
            stat = file.stat()
            found.append((file.relative_to(root).as_posix(), stat.st_size, stat.st_mtime_ns))
    return hashlib.sha256(repr(sorted(found)).encode("utf-8")).hexdigest()[:32]


def _files_under(root: Path) -> Iterable[Path]:
    for folder, _dirs, files in os.walk(root):
        for name in files:
            yield Path(folder) / name
