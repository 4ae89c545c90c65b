"""The spark backend's encoding pass: every value validated, the scans learnt, rows counted per input
partition and, for the families whose batches can be rebased, the chunks written in the same pass.

**One pass** (every family whose encoder :attr:`~mixle_spark.stats.base.Encoder.rebases`): each task
reads its input partition once. Per chunk of rows (:func:`~._chunks.chunk_batches`) it scans
the chunk, encodes it with the encoder of that scan and writes it (:func:`one_pass_writer`); it ends
with one report row (``rows`` -1): what it scanned, chunk by chunk, the rows it counted and the
first bad value it found. The driver merges the scans; a chunk whose own scan already equals the
merged one (a vocabulary it saw whole, a family without a scan) was encoded as the merged encoder
would, and stays; the others are rebased in one more pass over the cached chunks
(:func:`rebase_writer`), which reads no input. So the input is read once and never cached.

**Two passes** (a family that cannot rebase: a multinomial's or a Markov chain's vocabulary): the
input columns are cached, scanned and validated (:func:`scan_writer`), then encoded from the cache.

Errors are found and reported alike on both ways: the first bad value in the table's order, by a
batch-local encoder, with the count of bad values.

Either way (:func:`write_chunks`) leaves a :class:`ChunkFrame`: the persisted chunks every later pass
reads, which the handle's executors share (:mod:`._executors`).
"""

from __future__ import annotations

import pickle
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.engines import Compute, narrow_encoded
from mixle_spark.errors import EmptyDataError, FieldError, InputChangedError, SchemaError
from mixle_spark.parallel.backends.spark._chunks import (
    CHUNK_SCHEMA,
    CopyKey,
    Layout,
    _shared,
    chunk_batches,
    chunk_cell,
    chunk_row,
    chunk_writer,
    concat_batches,
    copy_place,
    input_ids,
    layout_of,
    load_chunk,
    persist_chunks,
    spread_chunks,
    stored_chunks,
)
from mixle_spark.parallel.backends.spark._common import (
    _LOW_BITS,
    _SCAN_SCHEMA,
    WEIGHT_COLUMN,
    _global_row,
    _payload_batch,
    _weights,
)
from mixle_spark.parallel.backends.spark._fused import DIGEST_SCHEMA, chunk_digests
from mixle_spark.stats._validate import check_weights, unreadable_cells

__all__ = [
    "ChunkFrame",
    "PendingChunks",
    "Settled",
    "Validation",
    "one_pass_writer",
    "rebase_chunks",
    "rebase_writer",
    "report_row",
    "scan_writer",
    "settle",
    "unbalanced",
    "write_chunks",
]


def check_weight_column(column: pa.Array, name: str) -> None:
    """Raise a DataValueError naming the first null, NaN, infinite or negative weight and its row."""
    w = column.to_numpy(zero_copy_only=False).astype(np.float64)  # nulls become NaN
    nulls = np.asarray(column.is_null().to_numpy(zero_copy_only=False)) if column.null_count else None
    check_weights(w, name=name, nulls=nulls)


class Validation:
    """What both ways of the encoding pass check values with: the ``encoder`` before its scan, the
    ``estimator`` that fixes a scan (None: a model's encoder, nothing to learn), how a batch's columns
    are ``read``, the weight column's name (None: no weights), and the ``compute`` the chunks are
    stored for (their floating values narrowed to its precision:
    :func:`~mixle_spark.engines.narrow_encoded`)."""

    def __init__(
        self,
        encoder: Any,
        estimator: Any,
        read: Callable[[pa.RecordBatch], Any],
        weight_name: str | None,
        compute: Compute | None = None,
    ) -> None:
        self.encoder, self.estimator, self.read, self.weight_name = encoder, estimator, read, weight_name
        self.compute = compute
        self.needs_scan = estimator is not None and encoder.needs_scan

    def encoder_of(self, scan: Any) -> Any:
        """The encoder of ``scan`` (the encoder itself when there is nothing to learn)."""
        return self.estimator.with_scan(scan).encoder() if self.needs_scan else self.encoder


class _PartitionCheck:
    """What one task learns of its input partition: rows per input partition (``seen``), the merged
    scan of its good rows, the first bad value (by input row id) and how many bad values."""

    def __init__(self, validation: Validation) -> None:
        self.validation = validation
        self.scan: Any = None
        self.seen: dict[int, int] = {}
        self.error: tuple[int, FieldError] | None = None
        self.error_cells = -1  # cells of the error's batch that do not read (unreadable_cells); -1: n/a
        self.bad = 0

    def count(self, mid: np.ndarray) -> None:
        parts = mid >> 33
        for p in np.unique(parts):
            last = int((mid[parts == p] & _LOW_BITS).max()) + 1
            self.seen[int(p)] = max(self.seen.get(int(p), 0), last)

    def encoder_for(self, batch: pa.RecordBatch, data: Any) -> tuple[Any, Any]:
        """(scan of ``data``, the encoder of that scan), after checking the batch's weights; raises
        the FieldError of a bad value."""
        v = self.validation
        if v.weight_name is not None:
            check_weight_column(batch.column(WEIGHT_COLUMN), v.weight_name)
        local = v.encoder.scan_arrow(data) if v.needs_scan else None
        return local, v.encoder_of(local)

    def failed(self, err: FieldError, mid: np.ndarray) -> None:
        cells = unreadable_cells(err)  # None: not a text-for-numbers error
        self.bad += (err.count or 1) if cells is None else cells
        cells = -1 if cells is None else cells
        if self.error is None or (cells > 0 and self.error_cells <= 0):  # a cell that does not read wins
            row = err.row if err.row is not None else 0
            self.error, self.error_cells = (int(mid[min(row, len(mid) - 1)]), err), cells

    def check(self, batch: pa.RecordBatch, mid: np.ndarray) -> None:
        """Validate one batch (its scan merged when good)."""
        data = self.validation.read(batch)
        try:
            local, checker = self.encoder_for(batch, data)
            checker.from_arrow(data)
        except FieldError as err:
            self.failed(err, mid)
            return
        self.merge(local)

    def merge(self, local: Any) -> None:
        if local is not None:
            self.scan = local if self.scan is None else self.validation.encoder.merge_scans(self.scan, local)

    def report(self, chunk_scans: list[tuple[int, Any]] | None = None) -> tuple[Any, ...]:
        place = (socket.gethostname(), copy_place())
        return (self.scan, self.seen, self.error, self.bad, self.error_cells, place, chunk_scans or [])


def scan_writer(validation: Validation) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The two-pass way's first pass: a partition of the input cache validated batch by batch, its
    report as one payload row."""

    def scan_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        check = _PartitionCheck(validation)
        for batch in batches:
            if batch.num_rows == 0:
                continue
            mid = input_ids(batch)
            check.count(mid)
            check.check(batch, mid)
        yield _payload_batch(check.report())

    return scan_partition


def report_row(report: tuple[Any, ...]) -> pa.RecordBatch:
    """A partition's report as a row of the chunk frame (``first`` and ``rows`` -1)."""
    return chunk_row(-1, -1, pickle.dumps(report, protocol=5))


def one_pass_writer(
    validation: Validation, copies: CopyKey | None
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The one-pass way: a partition of the input into chunk rows, each chunk encoded with the
    encoder of its own scan (pickled against that encoder's containers), then the report row. After
    a bad value the partition writes no more chunks but still validates every batch, to count them.
    A chunk with a bad value is validated again piece by piece (slices of the input batches), so
    the error and the count are those the two-pass way finds."""

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        check = _PartitionCheck(validation)
        scans: list[tuple[int, Any]] = []
        for pieces in chunk_batches(batches):
            mids = [input_ids(p) for p in pieces]
            for mid in mids:
                check.count(mid)
            whole_error: tuple[FieldError, np.ndarray] | None = None
            if check.error is None:
                batch = concat_batches(pieces)
                mid = mids[0] if len(mids) == 1 else np.concatenate(mids)
                data = validation.read(batch)
                try:
                    local, chunk_encoder = check.encoder_for(batch, data)
                    encoded = chunk_encoder.from_arrow(data)
                    encoded = narrow_encoded(chunk_encoder, encoded, validation.compute)
                except FieldError as err:
                    whole_error = (err, mid)
                else:
                    check.merge(local)
                    scans.append((int(mid[0]), local))
                    weights = _weights(batch, True) if validation.weight_name is not None else None
                    yield chunk_cell((encoded, weights, mid), _shared(chunk_encoder), copies)
                    continue
            for piece, piece_mid in zip(pieces, mids, strict=True):
                check.check(piece, piece_mid)
            if whole_error is not None and check.error is None:  # bad only as a whole: that error
                check.failed(*whole_error)
        yield report_row(check.report(scans))

    return write


def rebase_writer(
    encoder: Any, estimator: Any, todo: dict[int, Any], copies: CopyKey | None, compute: Compute | None = None
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The one-pass way's second pass, over the cached chunks: each chunk of ``todo`` (first input
    row id -> the scan it was encoded under) re-expressed by ``encoder`` (the merged scan's), the
    others kept; report rows dropped. With ``copies`` (a new MAC key: the first pass's copies of
    rebased chunks must never be read) every chunk is kept as a local copy again. A rebased chunk is
    stored at ``compute``'s precision again."""

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        shared = _shared(encoder)
        for batch in batches:
            for first, rows, blob in stored_chunks(batch):
                if first not in todo and copies is None:
                    yield chunk_row(first, rows, blob)
                elif first not in todo:
                    yield chunk_cell(load_chunk(blob, shared), shared, copies)
                else:
                    enc, weights, ids = load_chunk(blob, _shared(estimator.with_scan(todo[first]).encoder()))
                    rebased = narrow_encoded(encoder, encoder.rebase(enc), compute)
                    yield chunk_cell((rebased, weights, ids), shared, copies)

    return write


class Settled:
    """The driver's view of the encoding pass: the merged scan, each input partition's first global
    row (``offsets``), rows ``n``, partitions, where copies were written, and every chunk's scan."""

    def __init__(
        self,
        scan: Any,
        offsets: np.ndarray,
        n: int,
        partitions: int,
        places: set[tuple[str, str]],
        chunk_scans: list[tuple[int, Any]],
    ) -> None:
        self.scan, self.offsets, self.n, self.partitions = scan, offsets, n, partitions
        self.places, self.chunk_scans = places, chunk_scans


def settle(
    reports: list[tuple[Any, ...]],
    encoder: Any,
    schema_error: SchemaError | None,
    column: str | None,
) -> Settled:
    """Merge the partitions' reports (in partition order). Raises the first bad value in the table's
    order (a cell that does not read at all first) located at its global row with the count of bad
    values, or ``schema_error`` when no cell is unreadable, or EmptyDataError; ``column`` names a
    one-column model's column in an error without a path."""
    counts: dict[int, int] = {}
    places: set[tuple[str, str]] = set()
    for _scan, seen, *_rest, place, _chunks in reports:
        for p, c in seen.items():
            counts[p] = max(counts.get(p, 0), c)
        if place[1] is not None:
            places.add(place)
    top = max(counts) + 1 if counts else 0
    sizes = np.zeros(top, dtype=np.int64)
    for p, c in counts.items():
        sizes[p] = c
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if top else np.zeros(1, np.int64)
    n = int(sizes.sum())
    if n == 0:
        raise EmptyDataError("no rows to encode: the DataFrame is empty")
    errors = [(e, b, c) for _s, _seen, e, b, c, _place, _chunks in reports if e is not None]
    if errors:
        total_bad = sum(b for _e, b, _c in errors)
        # the first cell that does not read at all, else the first bad row
        (mid, err), _b, cells = min(errors, key=lambda e: (e[2] <= 0, _global_row(e[0][0], offsets)))
        if schema_error is not None and cells <= 0:  # no cell that does not read: the type it is
            raise schema_error
        located = err.located(_global_row(mid, offsets), n, total_bad)
        if column is not None and not located.path:
            located = located.at(column)
        raise located from None
    state: Any = None
    chunk_scans: list[tuple[int, Any]] = []
    for s, *_rest, chunks in reports:
        if s is not None:
            state = s if state is None else encoder.merge_scans(state, s)
        chunk_scans.extend(chunks)
    return Settled(state, offsets, n, len(reports), places, chunk_scans)


class ChunkFrame:
    """The persisted DataFrame of encoded chunks (:mod:`._chunks`) every pass of a handle reads.

    ``frame`` has ``num_partitions`` partitions holding the chunks ``layout`` lists; ``held`` is the
    persisted frame behind it when ``frame`` is a view of one (the one-pass encoding's, whose report
    rows it leaves out). :meth:`spread` lays the chunks out again in place. ``check`` runs (once)
    before ``frame`` is first handed out: a job that computes and verifies it, when resident tasks
    encoded the chunks themselves and the persisted frame has not been computed
    (:meth:`PendingChunks.check_replay`); its error is raised again at every later use.
    """

    def __init__(
        self,
        frame: Any,
        num_partitions: int,
        layout: Layout,
        storage_level: Any,
        held: Any = None,
        check: Callable[[], None] | None = None,
    ) -> None:
        self._frame, self.num_partitions, self.layout = frame, num_partitions, layout
        self.storage_level, self.held = storage_level, held
        self._check = check
        self._error: Exception | None = None
        self._checking = threading.Lock()  # a second reader waits for the check the first one runs

    @property
    def plan(self) -> Any:
        """The chunk DataFrame for its session and settings, never read: no ``check`` runs."""
        return self._frame

    @property
    def frame(self) -> Any:
        """The chunk DataFrame to read (checked first, the first time, when ``check`` was given)."""
        if self._check is not None:
            with self._checking:
                if self._check is not None and self._error is None:
                    try:
                        self._check()
                    except Exception as err:
                        self._error = err
                    self._check = None
        if self._error is not None:
            raise self._error
        return self._frame

    @property
    def index(self) -> Any:
        """The chunk frame without its cells: what a pass over the local copies reads (Spark runs
        its tasks where the cached partitions are, and hands them two small columns)."""
        return self.frame.select("first", "rows")

    def replace(self, frame: Any, layout: Layout, num_partitions: int | None = None) -> None:
        """Hold ``frame`` (laid out as ``layout``) instead of the current frame, which is released."""
        self.release()
        self._frame, self.layout, self._check = frame, layout, None
        if num_partitions is not None:
            self.num_partitions = num_partitions

    def spread(self, parts: int) -> None:
        """The chunks shuffled into ``parts`` partitions (a shuffle of the chunks, not of rows)."""
        laid, layout = spread_chunks(self.frame, parts, self.storage_level)
        self.replace(laid, layout, parts)

    def relayout_wanted(self, slots: int) -> bool:
        """Whether laying the chunks out again would fit ``slots`` task slots better: more partitions
        than slots (a resident task each), or fewer with chunks to spare (a single chunk, or one
        per partition, stays where it is: moving it would keep the same slots busy)."""
        if slots <= 0 or self.num_partitions == slots:
            return False
        chunks = sum(len(c) for c in self.layout.values())
        return self.num_partitions > slots or chunks > self.num_partitions

    def release(self) -> None:
        """Unpersist the frame (and the cache it filters, when it is a view of one)."""
        (self.held if self.held is not None else self._frame).unpersist()
        self.held = None


def unbalanced(layout: Layout, tasks: int) -> bool:
    """Whether spreading the chunks of ``layout`` over ``tasks`` partitions would let more task slots
    work: the rows sit in fewer partitions than tasks the session runs at once, or one partition
    holds more than 1.5x its share of the rows (one Parquet row group read as one partition, skewed
    input partitions), when there are at least two chunks to move."""
    chunks = sum(len(c) for c in layout.values())
    slots = min(tasks, chunks)
    if slots < 2:
        return False
    rows = [sum(r for _f, r in c) for c in layout.values()]
    busy = sum(1 for r in rows if r > 0)
    return busy < slots or max(rows) > 1.5 * sum(rows) / slots


def write_chunks(
    frame: Any,
    validation: Validation,
    schema_error: SchemaError | None,
    column: str | None,
    *,
    one_pass: bool,
    level: Any,
    copies: CopyKey | None,
) -> tuple[Settled, Any, ChunkFrame]:
    """The encoding pass over ``frame`` (the selected input columns and their row ids), one pass or
    two: the partitions' reports settled (:func:`settle`), the encoder of the merged scan, and the
    chunks persisted at ``level`` (each also kept as an executor-local copy under ``copies``).
    ``column`` names a one-column model's column in errors. A bad value raises, located; nothing
    stays persisted then."""
    if not one_pass:
        return _write_twice(frame, validation, schema_error, column, level, copies)
    pending = PendingChunks(frame, validation, schema_error, column, level, copies)
    settled, chunks = pending.settle_by_job()
    return settled, validation.encoder_of(settled.scan), chunks


class PendingChunks:
    """The one-pass encoding planned (its output persisted, not yet computed): settled either by a
    job of its own (:meth:`settle_by_job`, what :func:`write_chunks` does) or from the reports the
    tasks that computed it sent (:meth:`settle_reports`: the encoding inside a resident session,
    :mod:`._fused`)."""

    def __init__(
        self,
        frame: Any,
        validation: Validation,
        schema_error: SchemaError | None,
        column: str | None,
        level: Any,
        copies: CopyKey | None,
    ) -> None:
        self.validation, self.schema_error, self.column, self.level = validation, schema_error, column, level
        self.input, self.write = frame, one_pass_writer(validation, copies)
        """The input (the selected columns with their row ids) and the encoding of one partition."""
        self.out = frame.mapInArrow(self.write, CHUNK_SCHEMA)
        """The output: every chunk row, then each partition's report row (``rows`` -1); persisted
        by the first job that computes it (views made before still read the cache: Spark swaps in
        cached plans when a query runs)."""

    def settle_by_job(self) -> tuple[Settled, ChunkFrame]:
        """One job computes the output (caching it) and brings its reports and layout to the driver."""
        layout: Layout = {}

        def run() -> Settled:
            report = "CASE WHEN rows < 0 THEN chunk END AS r"
            self.out.persist(self.level)
            rows = self.out.selectExpr("spark_partition_id() AS p", "first", "rows", report).collect()
            reports = [pickle.loads(r[3]) for r in sorted(rows, key=lambda r: r[0]) if r[2] < 0]
            layout.update(layout_of((r[0], r[1], r[2]) for r in rows))
            return settle(reports, self.validation.encoder, self.schema_error, self.column)

        settled = _settled(run, self.out.unpersist, self.schema_error)
        return settled, self.chunks(settled, layout)

    def settle_reports(
        self, replies: list[tuple[Any, list[tuple[int, int]], bytes]], claim: Callable[[], Any]
    ) -> tuple[Settled, ChunkFrame]:
        """Settled from each partition's ``(report, [(first, rows) per chunk], digest)``, in partition
        order, sent by the tasks that encoded the input themselves (:mod:`._fused`); a bad value
        raises, located. The persisted output stays uncomputed: the first job that needs it computes
        it from the input again, and it is checked against the digests first (:meth:`check_replay`,
        after ``claim()`` has stopped the resident tasks holding the task slots)."""
        layout = layout_of(
            (p, first, rows) for p, (_r, chunks, _d) in enumerate(replies) for first, rows in chunks
        )

        def run() -> Settled:
            reports = [report for report, _chunks, _digest in replies]
            return settle(reports, self.validation.encoder, self.schema_error, self.column)

        settled = _settled(run, self.out.unpersist, self.schema_error)
        digests = [digest for _r, _c, digest in replies]

        def check() -> None:
            claim()
            self.check_replay(digests)

        return settled, self.chunks(settled, layout, check=check)

    def check_replay(self, digests: list[bytes]) -> None:
        """Compute the persisted output (reading the input a second time) and check each partition's
        chunks are those its resident task encoded (``digests``); else :class:`InputChangedError`."""
        got = dict(self.out.persist(self.level).mapInArrow(chunk_digests, DIGEST_SCHEMA).collect())
        changed = [p for p, digest in enumerate(digests) if got.get(p) != digest]
        if changed:
            self.out.unpersist()
            raise InputChangedError(
                f"the input DataFrame gave other rows when read a second time (partition "
                f"{', '.join(map(str, changed[:5]))}{' ...' if len(changed) > 5 else ''} of {len(digests)}; "
                f"a non-deterministic plan such as an unseeded rand() or sample, or a source that "
                f"changed): persist it before passing it, or encode it with defer_encoding=False"
            )

    def chunks(self, settled: Settled, layout: Layout, check: Callable[[], None] | None = None) -> ChunkFrame:
        return ChunkFrame(
            self.out.where("rows >= 0"), settled.partitions, layout, self.level, held=self.out, check=check
        )


def _write_twice(
    frame: Any,
    validation: Validation,
    schema_error: SchemaError | None,
    column: str | None,
    level: Any,
    copies: CopyKey | None,
) -> tuple[Settled, Any, ChunkFrame]:
    """The input columns cached and validated (a scan for vocabularies / ranges), then the chunks
    written from that cache (no second read of the source), which is then released."""
    cached = frame.persist(level)
    scan = scan_writer(validation)

    def run() -> Settled:
        reports = [pickle.loads(r[0]) for r in cached.mapInArrow(scan, _SCAN_SCHEMA).collect()]
        return settle(reports, validation.encoder, schema_error, column)

    settled = _settled(run, cached.unpersist, schema_error)
    try:
        encoder = validation.encoder_of(settled.scan)
        has_weights = validation.weight_name is not None
        write = chunk_writer(encoder, validation.read, has_weights, copies, validation.compute)
        out, layout = persist_chunks(cached.mapInArrow(write, CHUNK_SCHEMA), level)
    finally:
        cached.unpersist()
    return settled, encoder, ChunkFrame(out, settled.partitions, layout, level)


def _settled(
    run: Callable[[], Settled], release: Callable[[], Any], schema_error: SchemaError | None
) -> Settled:
    """``run()`` (an encoding pass and :func:`settle`), ``release()`` called when it fails. A bad
    value raises its located error; any other failure (Spark refusing the column's type before a
    value reached Python), or none, raises ``schema_error`` when the schema check found one: every
    value then read, the column's type is still wrong."""
    try:
        settled = run()
    except FieldError:
        release()
        raise
    except BaseException:
        release()
        if schema_error is not None:
            raise schema_error from None
        raise
    if schema_error is not None:
        release()
        raise schema_error
    return settled


def rebase_chunks(
    chunks: ChunkFrame,
    encoder: Any,
    estimator: Any,
    todo: dict[int, Any],
    copies: CopyKey | None,
    compute: Compute | None = None,
) -> None:
    """The chunks of ``todo`` rewritten under ``encoder`` by one pass over the cached chunks
    (:func:`rebase_writer`, stored at ``compute``'s precision); ``chunks`` then holds the result."""
    write = rebase_writer(encoder, estimator, todo, copies, compute)
    laid, layout = persist_chunks(chunks.frame.mapInArrow(write, CHUNK_SCHEMA), chunks.storage_level)
    chunks.replace(laid, layout)
