"""The spark backend's persisted encoded data: what an E-step consumes, written once.

The encoding pass validates every value and learns the vocabularies from the input columns; then
:func:`chunk_writer` turns each partition's rows into *chunks*: the encoder's output for up to
:data:`CHUNK_ROWS` rows (numbers, label codes, offsets: whatever the family's ``from_arrow`` returns),
their weights and their global row ids, pickled (protocol 5) into one binary cell of a row of
:data:`CHUNK_SCHEMA`. The handle persists that DataFrame, so every later pass (an E-step job, a
resident task's first read, a scoring probe) reads a few large binary cells per partition and
:func:`chunk_reader` unpickles them: no validation, label lookup or type conversion after the
encoding pass, for every family alike (composites and sequences included).

The cells are written by this package's own tasks into Spark's cache and read back by its own tasks:
the same trust as the pickled closures Spark ships to run them. A chunk's rows keep the order they
had in the partition, so a pass folds the same rows in the same order on every run.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.parallel.backends._spark_common import WEIGHT_COLUMN, _row_ids

__all__ = ["CHUNK_BYTES", "CHUNK_ROWS", "CHUNK_SCHEMA", "Chunk", "chunk_reader", "chunk_writer"]

CHUNK_SCHEMA = "first long, rows int, chunk binary"
"""One row per chunk: its first global row id (chunks sort by it), its row count, the pickled chunk."""
CHUNK_ROWS = 65_536
"""Most rows in a chunk: a fold scores one chunk at once (see the memory bound, ``fold_rows``)."""
CHUNK_BYTES = 32 * 2**20
"""Input bytes a chunk aims at (wide rows make chunks of fewer rows)."""

Chunk = tuple[Any, np.ndarray, np.ndarray]
"""``(encoded rows, weights, global row ids)``: what :func:`~._handle.accumulate_chunks` folds."""


def _chunk_rows(batch: pa.RecordBatch) -> int:
    """Rows per chunk for rows like ``batch``'s: :data:`CHUNK_BYTES` of them, at most :data:`CHUNK_ROWS`."""
    per_row = max(batch.nbytes / max(batch.num_rows, 1), 1.0)
    return int(min(CHUNK_ROWS, max(1024, CHUNK_BYTES // per_row)))


def _shared(encoder: Any) -> list[Any]:
    """The containers ``encoder`` holds (vocabularies, ranges), in a fixed order: encoded rows refer
    to them (a categorical batch keeps its encoder's label tuple), and a chunk stores a reference to
    one instead of a copy, so a vocabulary of a million labels is not stored again in every chunk.
    Writer and reader walk their own copies of one encoder (shipped in the tasks' closures) alike;
    sets are not walked, their order depends on the process's string hashing."""
    found: list[Any] = []
    seen: set[int] = set()
    pending = [encoder]
    while pending:
        item = pending.pop()
        if id(item) in seen or isinstance(item, str | bytes | int | float | bool | set | frozenset):
            continue
        seen.add(id(item))
        if isinstance(item, tuple | list | dict | np.ndarray):
            found.append(item)
            if isinstance(item, np.ndarray):
                continue
            values = item.values() if isinstance(item, dict) else item
            pending.extend(v for v in values if not isinstance(v, str | bytes | int | float | bool))
        elif item is not None:
            slots = getattr(type(item), "__slots__", ())
            names = [slots] if isinstance(slots, str) else list(slots)
            pending.extend(getattr(item, n) for n in names if hasattr(item, n))
            pending.extend(getattr(item, "__dict__", {}).values())
    return found


class _ChunkPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, shared: list[Any]) -> None:
        super().__init__(file, protocol=5)
        self._ids = {id(obj): i for i, obj in enumerate(shared)}

    def persistent_id(self, obj: Any) -> int | None:
        return self._ids.get(id(obj))


class _ChunkUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, shared: list[Any]) -> None:
        super().__init__(file)
        self._shared = shared

    def persistent_load(self, pid: Any) -> Any:
        return self._shared[pid]


def chunk_writer(
    encoder: Any,
    read: Callable[[pa.RecordBatch], Any],
    has_weights: bool,
    offsets: np.ndarray,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that turns a partition of the validated input frame (its columns,
    the row-id column, the weight column if any) into chunk rows of :data:`CHUNK_SCHEMA`."""

    def encode(batches: list[pa.RecordBatch], shared: list[Any]) -> pa.RecordBatch:
        batch = batches[0] if len(batches) == 1 else _concat(batches)
        ids = _row_ids(batch, offsets)
        weights = (
            np.asarray(batch.column(WEIGHT_COLUMN).to_numpy(zero_copy_only=False), dtype=np.float64)
            if has_weights
            else None
        )
        out = io.BytesIO()
        _ChunkPickler(out, shared).dump((encoder.from_arrow(read(batch)), weights, ids))
        return pa.RecordBatch.from_pydict(
            {
                "first": pa.array([int(ids[0])], pa.int64()),
                "rows": pa.array([len(ids)], pa.int32()),
                "chunk": pa.array([out.getvalue()], pa.binary()),
            }
        )

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        shared = _shared(encoder)
        pending: list[pa.RecordBatch] = []
        rows = 0
        limit = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            limit = limit or _chunk_rows(batch)
            while batch.num_rows:
                take = min(batch.num_rows, limit - rows)
                pending.append(batch.slice(0, take))
                rows += take
                batch = batch.slice(take)
                if rows == limit:
                    yield encode(pending, shared)
                    pending, rows = [], 0
        if pending:
            yield encode(pending, shared)

    return write


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    table = pa.Table.from_batches(batches).combine_chunks()
    return table.to_batches()[0]


def chunk_reader(encoder: Any) -> Callable[[Iterable[pa.RecordBatch]], Iterator[Chunk]]:
    """``read(batches)``: the chunks of a partition of the persisted encoded frame, in order (weights
    1 when the data has none); ``encoder`` is the one that wrote them."""

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[Chunk]:
        shared = None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            shared = _shared(encoder) if shared is None else shared
            for blob in batch.column("chunk").to_pylist():
                enc, weights, ids = _ChunkUnpickler(io.BytesIO(blob), shared).load()
                yield enc, (np.ones(len(ids)) if weights is None else weights), ids

    return read
