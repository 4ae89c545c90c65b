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
import os
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.parallel.backends._spark_common import WEIGHT_COLUMN, _row_ids

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_ROWS",
    "CHUNK_SCHEMA",
    "WORKER_CACHE_ENV",
    "Chunk",
    "cached_chunks",
    "chunk_reader",
    "chunk_writer",
    "clear_worker_cache",
    "worker_cache_budget",
]

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


def _decode(encoder: Any, batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[Chunk, int]]:
    """The chunks of a partition of the persisted encoded frame with their stored sizes in bytes."""
    shared = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        shared = _shared(encoder) if shared is None else shared
        for blob in batch.column("chunk").to_pylist():
            enc, weights, ids = _ChunkUnpickler(io.BytesIO(blob), shared).load()
            yield (enc, (np.ones(len(ids)) if weights is None else weights), ids), len(blob)


def chunk_reader(encoder: Any) -> Callable[[Iterable[pa.RecordBatch]], Iterator[Chunk]]:
    """``read(batches)``: the chunks of a partition of the persisted encoded frame, in order (weights
    1 when the data has none); ``encoder`` is the one that wrote them."""

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[Chunk]:
        for chunk, _size in _decode(encoder, batches):
            yield chunk

    return read


# -- decoded partitions kept in reused Python workers ---------------------------------------------
#
# A job-path pass reads every partition from Spark's cache into a Python worker and decodes it.
# Spark reuses its Python workers between tasks (spark.python.worker.reuse, on by default), so a
# worker keeps the partitions it decoded, keyed by the encoded frame's token (new for every frame a
# handle persists: a new layout, a new handle) and the partition id, and a later pass over the same
# partition in the same worker folds those instead of decoding its input again (the input is still
# drained: a Python worker that leaves its input unread ends with its task, so nothing it kept would
# last). A task that lands on another worker, a worker that is new, or a frame the
# worker has not seen reads and decodes as before: the result is the same either way, only the
# transfer is saved. A worker holds at most WORKER_CACHE_BYTES (other frames' partitions are dropped
# first, then the least recently used).

WORKER_CACHE_ENV = "MIXLE_SPARK_WORKER_CACHE_BYTES"
"""Environment variable (set on executors, e.g. ``spark.executorEnv.MIXLE_SPARK_WORKER_CACHE_BYTES``)
bounding the bytes of decoded chunks one Python worker keeps; ``0`` turns the cache off."""

_cache: OrderedDict[tuple[str, int], tuple[list[Chunk], int]] = OrderedDict()
_cache_bytes = 0
_cache_lock = threading.Lock()


def worker_cache_budget() -> int:
    """Bytes of decoded chunks this Python worker may keep: :data:`WORKER_CACHE_ENV` if set; else a
    quarter of ``spark.executor.pyspark.memory`` when that bounds the worker; else an eighth of the
    machine's memory per core (all of a machine's workers together: at most about an eighth of it,
    beside Spark's own copy of the encoded data)."""
    configured = os.environ.get(WORKER_CACHE_ENV)
    if configured:
        try:
            return max(int(configured), 0)
        except ValueError:
            return 0  # an unreadable setting: no cache rather than a guess
    pyspark_mb = os.environ.get("PYSPARK_EXECUTOR_MEMORY_MB")
    if pyspark_mb and pyspark_mb.isdigit():
        return int(pyspark_mb) * 2**20 // 4
    from mixle_spark.parallel.backends._handle import machine_memory

    memory = machine_memory()
    return 0 if memory is None else memory // (8 * max(os.cpu_count() or 1, 1))


def cached_chunks(
    encoder: Any, token: str, part: int, batches: Iterable[pa.RecordBatch], budget: int | None = None
) -> tuple[Iterator[Chunk], bool]:
    """``(chunks, hit)``: partition ``part`` of the encoded frame ``token`` from this worker's cache
    (``hit``: ``batches`` are drained, not decoded), or read from ``batches`` and kept when the whole
    partition was read and fits the budget."""
    key = (token, int(part))
    with _cache_lock:
        entry = _cache.get(key)
        if entry is not None:
            _cache.move_to_end(key)
    if entry is not None:
        # a worker whose task leaves input unread is not reused by Spark (nor would its cache be)
        for _batch in batches:
            pass
        return iter(entry[0]), True
    limit = worker_cache_budget() if budget is None else budget
    return _read_and_keep(encoder, key, batches, limit), False


def _read_and_keep(
    encoder: Any, key: tuple[str, int], batches: Iterable[pa.RecordBatch], limit: int
) -> Iterator[Chunk]:
    kept: list[Chunk] | None = [] if limit > 0 else None
    size = 0
    for chunk, nbytes in _decode(encoder, batches):
        if kept is not None:
            size += nbytes
            if size > limit:
                kept = None  # larger than the worker may keep: read every pass
            else:
                kept.append(chunk)
        yield chunk
    if kept is not None:
        _keep(key, kept, size, limit)


def _keep(key: tuple[str, int], chunks: list[Chunk], size: int, limit: int) -> None:
    global _cache_bytes
    with _cache_lock:
        if key in _cache:
            return
        for old in [k for k in _cache if k[0] != key[0]] + [k for k in _cache if k[0] == key[0]]:
            if _cache_bytes + size <= limit:
                break
            _cache_bytes -= _cache.pop(old)[1]
        if _cache_bytes + size <= limit:
            _cache[key] = (chunks, size)
            _cache_bytes += size


def clear_worker_cache() -> None:
    """Drop every decoded partition this process keeps (tests; a worker drops them as it ends)."""
    global _cache_bytes
    with _cache_lock:
        _cache.clear()
        _cache_bytes = 0
