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

**Executor-local copies** (the job path): a Spark job that reads the chunk cells pays for Spark handing
every byte of them to the Python worker on every pass, which costs about as much as the fold itself.
So when the handle asks for them, the writing task also keeps each chunk as a file in its executor's
Spark local directory (``SPARK_LOCAL_DIRS``, where Spark keeps its own shuffle and cache blocks, and
which it deletes when the executor stops), under ``mixle-chunks-<token>/<first row id>.chunk``, written
to a temporary name and renamed, so a file is whole or absent. A copy keeps the chunk's arrays out of
the pickle stream, aligned, so a reading task maps them from the file without copying them; it
carries two HMAC-SHA256s under a key the handle draws and ships in the tasks' closures (as Spark
ships everything a task runs): one of the header and pickle stream, checked on every read before
anything is unpickled, so a file planted or changed in that directory is never unpickled, only counted
missing; one of the arrays' bytes, checked when a Python worker first reads the file and again only
if the file has changed since (:data:`_VERIFIED`). An E-step job then runs over a placeholder frame
(or, after a miss, over the chunk frame's two small columns, whose tasks Spark places where the cached
partitions are) and each task folds its partition's files; a task that misses one reports the
partition missing, and the handle folds those partitions from the cached cells in a second job
(:class:`~._executors.JobExecutor`). Turn them off with ``MIXLE_SPARK_CHUNK_COPIES=0`` in the
driver's environment.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import mmap
import os
import pickle
import shutil
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.engines import Compute, narrow_encoded
from mixle_spark.parallel.backends.spark._common import ROW_ID_COLUMN, _global_ids, _weights

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_ROWS",
    "CHUNK_SCHEMA",
    "COPIES_ENV",
    "Chunk",
    "CopyKey",
    "Layout",
    "MissingCopy",
    "Rebase",
    "chunk_batches",
    "chunk_cell",
    "chunk_layout",
    "chunk_reader",
    "chunk_row",
    "chunk_writer",
    "copies_wanted",
    "copy_place",
    "copy_reader",
    "decode_chunks",
    "layout_of",
    "load_chunk",
    "persist_chunks",
    "remove_copies",
    "spread_chunks",
    "stored_chunks",
]

CHUNK_SCHEMA = "first long, rows int, chunk binary"
"""One row per chunk: its first row's input id (chunks sort by it, as by the global row ids), its
row count, the pickled chunk. A chunk stores its rows' input ids (``monotonically_increasing_id``):
the encoding pass writes chunks before it knows how many rows earlier partitions hold, and readers
map them to global row ids with the handle's per-partition offsets (:func:`~._common._global_ids`).
The one-pass encoding also leaves one report row per partition (``rows`` -1) that readers skip."""
CHUNK_ROWS = 65_536
"""Most rows in a chunk: a fold scores one chunk at once (see the memory bound, ``fold_rows``)."""
CHUNK_BYTES = 32 * 2**20
"""Input bytes a chunk aims at (wide rows make chunks of fewer rows)."""

Chunk = tuple[Any, np.ndarray, np.ndarray]
"""``(encoded rows, weights, global row ids)``: what
:func:`mixle_spark.parallel.fold.accumulate_chunks` folds."""
Offsets = np.ndarray | None
"""A handle's first global row of each input partition; None keeps the stored input ids."""
COPIES_ENV = "MIXLE_SPARK_CHUNK_COPIES"
"""Driver environment variable: ``0`` keeps no executor-local copies of the chunks."""
_COPY_DIR = "mixle-chunks-"
_MAGIC = b"MXCHUNK2"
"""A copy file: this magic, the pickle stream's length, the number of out-of-band buffers and each
one's length (little-endian 8-byte integers); an HMAC-SHA256 of that header and the stream, one of
the buffers; the stream; the buffers, each starting at a multiple of :data:`_ALIGN`."""
_MAC = 32
_DATA = b"mixle-chunk-buffers"  # the buffers' MAC is keyed alike but over a distinct prefix
_ALIGN = 64
CopyKey = tuple[str, bytes]
"""``(token, key)``: the handle's folder name (a uuid hex) and its 32-byte MAC key."""


def copies_wanted() -> bool:
    """Whether executor-local copies are on (``MIXLE_SPARK_CHUNK_COPIES`` is not ``0``)."""
    return os.environ.get(COPIES_ENV, "1").strip() != "0"


def copy_place() -> str | None:
    """This executor's first Spark local directory, from a Python worker's environment (None when
    Spark gave it none)."""
    first = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return first or None


def _copy_folder(root: str, token: str) -> str:
    if not token.isalnum():  # a uuid hex: never a path of its own
        raise ValueError(f"bad chunk-copy token {token!r}")
    return os.path.join(root, _COPY_DIR + token)


def _pad(size: int) -> int:
    return -size % _ALIGN


def _copy_parts(key: bytes, obj: Any, shared: list[Any]) -> list[Any]:
    """The pieces of a copy file holding ``obj`` (see :data:`_MAGIC`): header, MACs, the pickle
    stream, then every contiguous array's bytes out of band, each aligned to :data:`_ALIGN` bytes so
    a reader maps them without a copy."""
    out = io.BytesIO()
    buffers: list[pickle.PickleBuffer] = []
    _ChunkPickler(out, shared, buffers.append).dump(obj)
    stream = out.getvalue()
    views = [b.raw() for b in buffers]
    head = _MAGIC + struct.pack(f"<QQ{len(views)}Q", len(stream), len(views), *(v.nbytes for v in views))
    stream_mac = hmac.new(key, head, hashlib.sha256)
    stream_mac.update(stream)
    data_mac = hmac.new(key, _DATA, hashlib.sha256)
    for v in views:
        data_mac.update(v)
    parts: list[Any] = [head, stream_mac.digest(), data_mac.digest(), stream]
    at = len(head) + 2 * _MAC + len(stream)
    for v in views:
        parts.append(bytes(_pad(at)))
        at += _pad(at)
        parts.append(v)
        at += v.nbytes
    return parts


def _keep_copy(copies: CopyKey, first: int, obj: Any, shared: list[Any]) -> None:
    """Keep ``obj`` (chunk ``first``) as this executor's local copy; any file-system failure leaves
    no copy (the E-step then reads the cached cell) and is not an error."""
    root = copy_place()
    if root is None:
        return
    token, key = copies
    folder = _copy_folder(root, token)
    path = os.path.join(folder, f"{int(first)}.chunk")
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if os.path.islink(folder) or not os.path.isdir(folder):
            return
        with open(tmp, "wb") as f:
            for part in _copy_parts(key, obj, shared):
                f.write(part)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


_VERIFIED: dict[str, tuple[int, ...]] = {}
"""This Python worker's copies whose array bytes matched their MAC: path -> the file's identity and
times (``st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns``) then. Spark reuses its Python workers
between tasks, so a later pass skips hashing the arrays of a copy that has not changed since; a
write to the file changes its ctime (which no user can set back), and an entry is kept only for a
file last changed over a second before it was checked. The pickle stream's MAC is checked on every
read whatever this says, so what is unpickled is always the handle's own."""
_VERIFIED_MAX = 1 << 16


def _load_copy(path: str, key: bytes, shared: list[Any]) -> Any:
    """The chunk kept in the copy file ``path``, its arrays mapped from the file read-only (no
    copy); raises :class:`MissingCopy` when the file is absent, not whole, or either MAC fails."""
    try:
        with open(path, "rb") as f:
            stat = os.fstat(f.fileno())
            size = stat.st_size
            fixed = len(_MAGIC) + 16
            if size < fixed + 2 * _MAC:
                raise MissingCopy(path)
            view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as err:
        raise MissingCopy(path) from err
    data = memoryview(view)
    if bytes(data[: len(_MAGIC)]) != _MAGIC:
        raise MissingCopy(path)
    stream_len, count = struct.unpack_from("<QQ", data, len(_MAGIC))
    head_len = fixed + 8 * count
    if count > size // 8 or head_len + 2 * _MAC + stream_len > size:
        raise MissingCopy(path)
    lengths = struct.unpack_from(f"<{count}Q", data, fixed)
    # private copies of what decides what runs: the header and the pickle stream
    head = bytes(data[:head_len])
    macs = bytes(data[head_len : head_len + 2 * _MAC])
    at = head_len + 2 * _MAC
    stream = bytes(data[at : at + stream_len])
    at += stream_len
    stream_mac = hmac.new(key, head, hashlib.sha256)
    stream_mac.update(stream)
    if not hmac.compare_digest(macs[:_MAC], stream_mac.digest()):
        raise MissingCopy(path)  # not written by this handle's tasks: never unpickled
    views = []
    for length in lengths:
        at += _pad(at)
        views.append(data[at : at + length])
        at += length
    if at != size:
        raise MissingCopy(path)
    identity = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if _VERIFIED.get(path) != identity:
        data_mac = hmac.new(key, _DATA, hashlib.sha256)
        for v in views:
            data_mac.update(v)
        if not hmac.compare_digest(macs[_MAC:], data_mac.digest()):
            raise MissingCopy(path)
        if time.time_ns() - stat.st_ctime_ns > 1_000_000_000:
            if len(_VERIFIED) >= _VERIFIED_MAX:
                _VERIFIED.clear()
            _VERIFIED[path] = identity
    return _ChunkUnpickler(io.BytesIO(stream), shared, views).load()


def remove_copies(root: str, token: str) -> bool:
    """Delete the copies of handle ``token`` under ``root`` (its own folder only, never through a
    symlink); True when there was one."""
    folder = _copy_folder(root, token)
    if os.path.islink(folder) or not os.path.isdir(folder):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


class MissingCopy(Exception):
    """A partition's local copy is absent or not whole (the task reports the partition missing)."""


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
    def __init__(
        self, file: io.BytesIO, shared: list[Any], buffers: Callable[[Any], Any] | None = None
    ) -> None:
        super().__init__(file, protocol=5, buffer_callback=buffers)
        self._ids = {id(obj): i for i, obj in enumerate(shared)}

    def persistent_id(self, obj: Any) -> int | None:
        return self._ids.get(id(obj))


class _ChunkUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, shared: list[Any], buffers: Iterable[Any] | None = None) -> None:
        super().__init__(file, buffers=buffers)
        self._shared = shared

    def persistent_load(self, pid: Any) -> Any:
        return self._shared[pid]


def chunk_cell(
    chunk: tuple[Any, Any, np.ndarray], shared: list[Any], copies: CopyKey | None
) -> pa.RecordBatch:
    """The row of :data:`CHUNK_SCHEMA` for ``chunk`` (encoded rows, weights or None, input row ids),
    pickled against ``shared`` (see :func:`_shared`: the writing encoder's); with ``copies`` (the
    handle's token and MAC key) also kept as an executor-local copy."""
    ids = chunk[2]
    out = io.BytesIO()
    _ChunkPickler(out, shared).dump(chunk)
    if copies is not None:
        _keep_copy(copies, int(ids[0]), chunk, shared)
    return chunk_row(int(ids[0]), len(ids), out.getvalue())


def chunk_row(first: int, rows: int, blob: bytes) -> pa.RecordBatch:
    """One row of :data:`CHUNK_SCHEMA`."""
    return pa.RecordBatch.from_pydict(
        {
            "first": pa.array([first], pa.int64()),
            "rows": pa.array([rows], pa.int32()),
            "chunk": pa.array([blob], pa.binary()),
        }
    )


def chunk_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[list[pa.RecordBatch]]:
    """A partition's input batches regrouped as chunks: lists of consecutive slices holding up to
    the chunk size in rows (fixed by the first batch's bytes per row, see :func:`_chunk_rows`)."""
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
                yield pending
                pending, rows = [], 0
    if pending:
        yield pending


def input_ids(batch: pa.RecordBatch) -> np.ndarray:
    """The input row ids of ``batch`` (its ``monotonically_increasing_id`` column), int64."""
    return np.asarray(batch.column(ROW_ID_COLUMN).to_numpy(), dtype=np.int64)


def chunk_writer(
    encoder: Any,
    read: Callable[[pa.RecordBatch], Any],
    has_weights: bool,
    copies: CopyKey | None = None,
    compute: Compute | None = None,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that turns a partition of the validated input frame (its columns,
    the row-id column, the weight column if any) into chunk rows of :data:`CHUNK_SCHEMA`, stored at
    ``compute``'s precision; with ``copies`` (the handle's token and MAC key) each chunk is also kept
    as an executor-local copy."""

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        shared = _shared(encoder)
        for pieces in chunk_batches(batches):
            batch = concat_batches(pieces)
            weights = _weights(batch, True) if has_weights else None
            enc = narrow_encoded(encoder, encoder.from_arrow(read(batch)), compute)
            yield chunk_cell((enc, weights, input_ids(batch)), shared, copies)

    return write


def concat_batches(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch of ``batches``' rows (the batch itself when there is one)."""
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches).combine_chunks()
    return table.to_batches()[0]


def _weighted(stored: tuple[Any, np.ndarray | None, np.ndarray], offsets: Offsets) -> Chunk:
    """A stored chunk as folded: weights 1 when the data has none (none are stored then), global
    row ids by ``offsets``."""
    enc, weights, ids = stored
    ids = ids if offsets is None else _global_ids(ids, offsets)
    return enc, (np.ones(len(ids)) if weights is None else weights), ids


def stored_chunks(batch: pa.RecordBatch) -> Iterator[tuple[int, int, bytes]]:
    """``(first, rows, pickled chunk)`` of each chunk in a batch of the chunk frame (report rows,
    ``rows`` -1, skipped)."""
    columns = (batch.column(name).to_pylist() for name in ("first", "rows", "chunk"))
    for first, rows, blob in zip(*columns, strict=True):
        if rows >= 0:
            yield first, rows, blob


class Rebase:
    """Chunks the one-pass encoding wrote under a scan of their own rows, re-expressed by the merged
    ``encoder`` each time they are read (:mod:`._encoding` decides when that is cheaper than
    rewriting them): ``todo`` maps such a chunk's first input row id to its scan, from which
    ``estimator`` builds the encoder that wrote it (whose containers the chunk's pickle refers to).
    A rebased chunk is kept at ``compute``'s precision, as it was stored."""

    def __init__(
        self, encoder: Any, estimator: Any, todo: dict[int, Any], compute: Compute | None = None
    ) -> None:
        self.encoder, self.estimator, self.todo, self.compute = encoder, estimator, todo, compute

    def shared(self, first: int, default: list[Any]) -> list[Any]:
        """The containers chunk ``first`` was pickled against (``default``: the merged encoder's)."""
        if first not in self.todo:
            return default
        return _shared(self.estimator.with_scan(self.todo[first]).encoder())

    def apply(self, first: int, stored: tuple[Any, Any, np.ndarray]) -> tuple[Any, Any, np.ndarray]:
        if first not in self.todo:
            return stored
        enc, weights, ids = stored
        return narrow_encoded(self.encoder, self.encoder.rebase(enc), self.compute), weights, ids


def chunk_reader(
    encoder: Any, offsets: Offsets = None, rebase: Rebase | None = None
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[Chunk]]:
    """``read(batches)``: the chunks of a partition of the persisted encoded frame, in order (weights
    1 when the data has none); ``encoder`` is the one that wrote them (or, for the chunks of
    ``rebase``, the one they are rebased to), ``offsets`` the handle's (without them the chunks keep
    their input row ids)."""

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[Chunk]:
        stored = (chunk for batch in batches if batch.num_rows for chunk in stored_chunks(batch))
        return decode_chunks(stored, encoder, offsets, rebase)

    return read


def decode_chunks(
    stored: Iterable[tuple[int, int, bytes]],
    encoder: Any,
    offsets: Offsets = None,
    rebase: Rebase | None = None,
) -> Iterator[Chunk]:
    """The chunks of ``(first, rows, pickled chunk)`` triples, as :func:`chunk_reader` reads them."""
    shared = None
    for first, _rows, blob in stored:
        shared = _shared(encoder) if shared is None else shared
        if rebase is None:
            yield _weighted(load_chunk(blob, shared), offsets)
        else:
            chunk = load_chunk(blob, rebase.shared(first, shared))
            yield _weighted(rebase.apply(first, chunk), offsets)


def load_chunk(blob: bytes, shared: list[Any]) -> Any:
    """One pickled chunk as stored (input row ids), against its writer's ``shared``."""
    return _ChunkUnpickler(io.BytesIO(blob), shared).load()


def copy_reader(
    encoder: Any,
    copies: CopyKey,
    offsets: Offsets,
    layout: dict[int, list[tuple[int, int]]] | None = None,
    rebase: Rebase | None = None,
) -> Callable[[Iterable[pa.RecordBatch], int], Iterator[Chunk]]:
    """``read(batches, part)``: the chunks of partition ``part`` from this executor's local copies.
    Which chunks: ``layout[part]`` (``(first row id, rows)`` per chunk, in order; ``batches`` are
    then a placeholder frame's and only drained), or without ``layout`` the partition's rows of the
    chunk frame's ``first`` and ``rows`` columns in ``batches``. Raises :class:`MissingCopy` before
    yielding anything when a copy is absent, and while reading when one is not whole or not the
    chunk it names, or its MAC does not check (the caller then discards its partial fold)."""
    token, key = copies

    def read(batches: Iterable[pa.RecordBatch], part: int) -> Iterator[Chunk]:
        wanted: list[tuple[int, int]] = []
        for batch in batches:  # the whole (small) input is read: Spark reuses the worker only then
            if layout is None:
                firsts, rows = batch.column("first").to_pylist(), batch.column("rows").to_pylist()
                wanted.extend((f, r) for f, r in zip(firsts, rows, strict=True) if r >= 0)
        if layout is not None:
            wanted = layout.get(part, [])
        if not wanted:
            return
        root = copy_place()
        if root is None:
            raise MissingCopy("no Spark local directory on this executor")
        folder = _copy_folder(root, token)
        paths = [os.path.join(folder, f"{first}.chunk") for first, _rows in wanted]
        if os.path.islink(folder) or not all(os.path.isfile(p) for p in paths):
            raise MissingCopy(folder)
        shared = _shared(encoder)
        for path, (first, rows) in zip(paths, wanted, strict=True):
            stored = _load_copy(path, key, shared if rebase is None else rebase.shared(first, shared))
            ids = stored[2]
            if len(ids) != rows or (rows and int(ids[0]) != first):
                raise MissingCopy(path)
            yield _weighted(stored if rebase is None else rebase.apply(first, stored), offsets)

    return read


Layout = dict[int, list[tuple[int, int]]]
"""``{partition: [(first input row id, rows) of each chunk, in order]}`` of a chunk frame."""


def layout_of(rows: Iterable[tuple[int, int, int]]) -> Layout:
    """The layout of ``(partition, first, rows)`` triples (report rows, ``rows`` < 0, left out)."""
    layout: Layout = {}
    for part, first, count in sorted(rows):
        if count >= 0:
            layout.setdefault(int(part), []).append((int(first), int(count)))
    return layout


def chunk_layout(frame: Any) -> Layout:
    """The layout of a chunk frame: one small row per chunk reaches the driver (computing the
    frame's cache when it is not yet)."""
    return layout_of(frame.selectExpr("spark_partition_id() AS p", "first", "rows").collect())


def persist_chunks(frame: Any, level: Any) -> tuple[Any, Layout]:
    """A chunk frame persisted at ``level`` and computed by the one job that collects its layout;
    nothing is left persisted on failure."""
    laid = frame.persist(level)
    try:
        layout = chunk_layout(laid)
    except BaseException:
        laid.unpersist()
        raise
    return laid, layout


def spread_chunks(frame: Any, parts: int, level: Any) -> tuple[Any, Layout]:
    """``frame``'s chunks shuffled into ``parts`` partitions, each in row order, persisted at
    ``level`` (:func:`persist_chunks`; the caller releases ``frame``)."""
    return persist_chunks(frame.repartition(parts).sortWithinPartitions("first"), level)
