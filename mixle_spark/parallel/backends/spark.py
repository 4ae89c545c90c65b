"""The ``spark`` backend: encoded data as a persisted Spark DataFrame of encoded chunks.

Building a handle (:class:`SparkEncodedData`) reads the selected columns once (:mod:`._spark_encoding`):
each task learns its partition's vocabularies / ranges (the encoders' scans), validates every value
with a batch-local encoder (so a string in a numeric column, a null without Optional, NaN, a negative
count... are reported before any EM iteration, with the column, the value, the global row and the
count of bad rows), counts its rows and writes what every later pass consumes (:mod:`._spark_chunks`):
the encoder's output for chunks of rows, with their weights and row ids, one binary cell per chunk,
persisted (``MEMORY_AND_DISK``). Chunks whose own scan differs from the merged one are then rebased
in a pass over the cached chunks, which reads no input. (A family that cannot rebase its batches
caches the input columns, scans them, then encodes from the cache.) So the data is read from its
source once, and validated, looked up and converted once.

Each EM iteration is one pass: resident tasks that hold their decoded partition (when the session can
run them, :mod:`._resident_policy`), else one Spark job that unpickles each chunk and folds it. In the
job, the model travels as a broadcast (or, under Spark Connect, inside the function's closure);
``mapInArrow`` yields one small payload per partition (total weight, log-likelihood of the current
model, statistics); payloads merge with ``treeAggregate`` (``depth``, default 2) or, without RDDs
(Spark Connect, or ``merge="dataframe"``), with rounds of ``repartition`` + ``mapInArrow`` merges
whose last few rows are collected. On the job path the encoded data is laid out with at most one
partition per task the session runs at once (one wave of tasks a pass). Only statistics reach the
driver. The E-step has no side effects, so task retries and speculative execution do not change the
result.

Rows keep a stable global id (their index in the input DataFrame's order, from
``monotonically_increasing_id`` and per-partition counts), so initialization selects the same rows
and draws the same random responsibilities as the local backend for one seed, whatever
``num_chunks`` is.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import re
import socket
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.broadcast import Broadcast
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from mixle_spark.errors import EmptyDataError, ExecutorError, FieldError, SchemaError, did_you_mean
from mixle_spark.parallel._slots import task_slots
from mixle_spark.parallel.backends._handle import bind_estimator, check_engine_and_precision, machine_memory
from mixle_spark.parallel.backends._resident_policy import ResidentPolicy, resident_blocker, slots_for_layout
from mixle_spark.parallel.backends._scoring import BatchScorer, data_columns, reader
from mixle_spark.parallel.backends._spark_chunks import (
    CHUNK_SCHEMA,
    MissingCopy,
    Rebase,
    chunk_layout,
    chunk_reader,
    chunk_writer,
    copies_wanted,
    copy_place,
    copy_reader,
    layout_of,
    remove_copies,
    spread_chunks,
)
from mixle_spark.parallel.backends._spark_common import (
    _PAYLOAD_SCHEMA,
    _SCAN_SCHEMA,
    ROW_ID_COLUMN,
    WEIGHT_COLUMN,
    _check_schema,
    _merge_with_dataframes,
    _payload_batch,
    _vector_columns_to_arrays,
    is_spark_connect,
    unreadable_cell,
)
from mixle_spark.parallel.backends._spark_encoding import (
    Settled,
    Validation,
    one_pass_writer,
    rebase_writer,
    same_scan,
    scan_writer,
    settle,
)
from mixle_spark.parallel.backends.registry import CONTROL_DEFAULTS, refuse_controls
from mixle_spark.parallel.fold import Payload, PayloadHandle, Request, accumulate_chunks, merge_payloads
from mixle_spark.stats.base import Distribution, Encoder, Estimator

__all__ = [
    "ROW_ID_COLUMN",
    "WEIGHT_COLUMN",
    "SparkEncodedData",
    "add_scores",
    "is_spark_connect",
    "make_spark",
]

logger = logging.getLogger("mixle_spark.parallel.backends.spark")

REBASE_ON_READ_BYTES = 256 * 1024
"""Chunks encoded under their own scan are rebased as they are read while the scans of all of them
pickle to at most this many bytes (they travel in every pass's closure); above it, once, by a pass
that rewrites them."""


class SparkEncodedData(ResidentPolicy, PayloadHandle):
    """Encoded data held by Spark; implements the encoded-data handle contract.

    Parameters
    ----------
    data : pyspark.sql.DataFrame
        The records. A Record model reads the columns its fields name (nested Record = struct
        column); any other model reads a DataFrame of one column, or the one named by ``column``.
    estimator : Estimator, optional
        What will be fitted (its encoders' scans run in the encoding pass).
    model : Distribution, optional
        Encode for scoring with this model instead.
    num_chunks : int, optional
        Repartition the encoded data into this many partitions (row ids are assigned before). By
        default (unless ``resident=False`` or the session cannot run resident tasks) the backend lays
        the data out itself, one partition per task slot the session really has (executors' cores /
        ``spark.task.cpus``), whatever the input's partitioning, and lays it out again when a resident
        session starts with another number of slots (after a lost executor). With ``resident=False``,
        under Spark Connect or with dynamic allocation (the job path) the input's partitions are
        coalesced (no shuffle) to at most one per task the session runs at once, or the encoded chunks
        spread over that many when the input has fewer partitions.
    weights : str, optional
        Name of a non-negative weight column.
    depth : int
        ``treeAggregate`` depth for merging partition payloads (>= 1).
    resident : bool, optional
        Keep decoded partitions in long-lived tasks for the whole fit (one barrier job, E-steps
        requested over an authenticated socket; see :mod:`mixle_spark.parallel.backends._spark_resident`).
        None (default) uses them during fits run by :mod:`mixle_spark.estimation` whenever the session
        can (classic Spark without dynamic allocation, partitions <= task slots); a lost task ends the
        session, the step is recomputed by a Spark job and the next step starts a new session (both
        recorded in the EM trace); a session that cannot start, or keeps failing, leaves one job per
        E-step for the rest of the fit. Resident tasks hold every task slot of the session while a fit
        runs (direct ``pysp_*`` calls outside a fit run ordinary jobs). True requires them for every
        E-step (until ``release_workers`` / ``close``); False never uses them: use it on a cluster
        shared with other jobs.
    merge : {"auto", "tree", "dataframe"}
        ``tree`` uses ``treeAggregate`` (needs RDDs), ``dataframe`` rounds of repartition +
        ``mapInArrow`` merges (works under Spark Connect); ``auto`` picks ``dataframe`` under
        Spark Connect and ``tree`` otherwise.
    storage_level : pyspark.StorageLevel
        How the encoded DataFrame is persisted (default ``MEMORY_AND_DISK``).
    num_workers : int, optional
        Thread each task's E-step over this many threads (a mixture's components or row blocks, a
        record's fields; see :mod:`mixle_spark.parallel.backends.model_parallel`), e.g. ``spark.task.cpus``.
    """

    def __init__(
        self,
        data: DataFrame,
        estimator: Estimator | None = None,
        model: Distribution | None = None,
        *,
        num_chunks: int | None = None,
        column: str | None = None,
        weights: str | None = None,
        depth: int = 2,
        merge: str = "auto",
        storage_level: StorageLevel | None = None,
        encoder: Encoder | None = None,
        resident: bool | None = None,
        num_workers: int | None = None,
    ) -> None:
        if estimator is None and model is None and encoder is None:
            raise TypeError("SparkEncodedData needs an estimator, a model or an encoder")
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
        if merge not in ("auto", "tree", "dataframe"):
            raise ValueError(f"merge must be 'auto', 'tree' or 'dataframe', got {merge!r}")
        if num_chunks is not None and (not isinstance(num_chunks, int) or num_chunks < 1):
            raise ValueError(f"num_chunks must be a positive integer, got {num_chunks!r}")
        if num_workers is not None and (type(num_workers) is not int or num_workers < 1):
            raise ValueError(f"num_workers must be None or an integer >= 1, got {num_workers!r}")
        self.connect = is_spark_connect(data)
        if merge == "tree" and self.connect:
            raise ValueError("merge='tree' needs RDDs, which Spark Connect does not have; use 'dataframe'")
        self.merge = ("dataframe" if self.connect else "tree") if merge == "auto" else merge
        self.num_workers = num_workers
        self.depth = depth
        if resident and self.connect:
            raise ValueError(
                "resident=True needs a classic Spark session (Spark Connect has no SparkContext)"
            )
        self._init_resident(resident)
        self._broadcasts: list[Any] = []
        self._closed = False
        self._token = uuid.uuid4().hex
        self._copy_key = os.urandom(32)  # authenticates the copies' contents (see ._spark_chunks)
        self.copies = copies_wanted() and (
            resident is False or self.connect or resident_blocker(data) is not None
        )
        """Whether E-step jobs fold executor-local copies of the chunks (:mod:`._spark_chunks`): on the
        job path (``resident=False``, Spark Connect, dynamic allocation); off again for this handle when
        a pass finds none of them."""
        self.copy_parts = 0
        """Partitions E-step jobs folded from executor-local copies (the rest read the cached cells)."""
        self._copies_placed = False  # the copies E-step runs over the chunk frame's small columns
        self._wrote_copies = self.copies  # the encoding pass keeps them (close deletes them)
        self._copy_places: set[tuple[str, str]] = set()
        self._copies_moved = False  # copies rewritten by a pass whose tasks' places are unknown
        base = encoder or (estimator.encoder() if estimator is not None else model.encoder())  # type: ignore[union-attr]
        if weights is not None and weights not in data.columns:
            raise SchemaError(
                f"weight column {weights!r} not found{did_you_mean(weights, data.columns)}; "
                f"the DataFrame has columns {data.columns}"
            )
        self.columns = data_columns(data.columns, base, column, weights)
        self.reads_table = base.column_names() is not None
        selected = _vector_columns_to_arrays(data, self.columns)
        try:
            _check_schema(selected, base, self.columns)
            schema_error: SchemaError | None = None
        except SchemaError as err:  # the encoding pass below finds the first bad value and its row
            schema_error = err
        cols = [F.col(c) for c in self.columns]
        if weights is not None:
            cols.append(F.col(weights).cast("double").alias(WEIGHT_COLUMN))
        self.has_weights = weights is not None
        self.weight_name = weights or ""
        frame = selected.select(*cols, F.monotonically_increasing_id().alias(ROW_ID_COLUMN))
        # Spark shares one cache entry between plans that compare equal, so two handles over one
        # DataFrame would share their caches, and closing one would drop the other's: a filter that
        # names this handle (always true; the optimizer removes it) keeps every plan its own
        frame = frame.where(F.lit(self._token).isNotNull())
        self._storage_level = storage_level or StorageLevel.MEMORY_AND_DISK
        self.auto_layout = num_chunks is None and resident is not False and resident_blocker(data) is None
        """The backend lays the encoded data out for the task slots (one partition each), again
        whenever a resident session starts with another number of slots."""
        self.one_pass = estimator is None or not base.needs_scan or base.rebases
        """Whether the encoding pass also wrote the chunks (:mod:`._spark_encoding`); else the
        input columns were cached, validated, then encoded from the cache."""
        tasks = 0
        if self.auto_layout:
            slots = slots_for_layout(data.sparkSession.sparkContext)
            if slots and not self.one_pass:
                num_chunks = slots  # rows spread over the slots before they are encoded
            tasks = slots or 0  # else the chunks are spread after (no executors yet: at the first start)
        elif num_chunks is None:  # the job path: at most one partition per task the session runs at once
            tasks = session_parallelism(data)
            if tasks > 0:  # no shuffle, rows stay in order (and their ids with them)
                frame = frame.coalesce(tasks)
        if num_chunks is not None:
            # rows stay in global order within a partition, so the first bad row a partition reports
            # is its lowest, as without repartitioning
            frame = frame.repartition(num_chunks).sortWithinPartitions(ROW_ID_COLUMN)
        self._held: DataFrame | None = None  # the persisted frame behind self.frame, when they differ
        self.rebased_chunks = 0
        """Chunks the one-pass encoding wrote under a scan of their own rows that differs from the
        whole data's (a vocabulary the chunk did not see whole, a vector centre), re-expressed
        under the merged scan as they are read or by a pass over the cached chunks."""
        self._rebase_on_read: Rebase | None = None
        validation = Validation(base, estimator, reader(self.columns, self.reads_table), weights)
        column = None if self.reads_table else self.columns[0]
        if self.one_pass:
            settled = self._encode_once(frame, validation, schema_error, column)
        else:
            settled = self._encode_twice(frame, validation, schema_error, column)
        self._scan, self.offsets, self.n = settled.scan, settled.offsets, settled.n
        self.num_partitions = settled.partitions
        self._copy_places |= settled.places
        if self.one_pass:
            self._rebase(settled, estimator)
        if _unbalanced(self._layout, tasks) or (self.auto_layout and self._relayout_wanted(tasks)):
            self._spread(tasks)

    # -- the encoding pass (see ._spark_encoding) ----------------------------------------------
    def _encode_once(
        self, frame: DataFrame, validation: Validation, schema_error: SchemaError | None, column: str | None
    ) -> Settled:
        """One pass over the input: every chunk encoded and written as it is validated; the
        partitions' reports come back with the chunk layout from the job that fills the cache."""
        write = one_pass_writer(validation, self._copy_pair if self.copies else None)
        out = frame.mapInArrow(write, CHUNK_SCHEMA).persist(self._storage_level)

        def run() -> Settled:
            report = F.when(F.col("rows") < 0, F.col("chunk"))
            rows = out.select(F.spark_partition_id().alias("p"), "first", "rows", report.alias("r")).collect()
            reports = [pickle.loads(r[3]) for r in sorted(rows, key=lambda r: r[0]) if r[2] < 0]
            self._layout = layout_of((r[0], r[1], r[2]) for r in rows)
            return settle(reports, validation.encoder, schema_error, column)

        settled = _settled(run, out.unpersist, schema_error)
        self.encoder = validation.encoder_of(settled.scan)
        self.frame, self._held = out.where(F.col("rows") >= 0), out
        return settled

    def _rebase(self, settled: Settled, estimator: Estimator | None) -> None:
        """Chunks encoded under a scan other than the merged one re-expressed by the merged encoder:
        as they are read, when their scans are small enough to ship in every pass's closure (a
        vector column's centre, a few labels), else in one pass over the cached chunks (a
        vocabulary of many labels: that pass builds each chunk's encoder once)."""
        todo = {first: scan for first, scan in settled.chunk_scans if not same_scan(scan, settled.scan)}
        self.rebased_chunks = len(todo)
        if not todo:
            return
        if len(pickle.dumps(todo, protocol=5)) <= REBASE_ON_READ_BYTES:
            self._rebase_on_read = Rebase(self.encoder, estimator, todo)
            return
        copies = None
        if self.copies:  # a new key: a first-pass copy of a rebased chunk is never read again
            self._copy_key = os.urandom(32)
            copies = (self._token, self._copy_key)
            self._copies_moved = True
        write = rebase_writer(self.encoder, estimator, todo, copies)
        laid = self.frame.mapInArrow(write, CHUNK_SCHEMA).persist(self._storage_level)
        try:
            self._layout = chunk_layout(laid)
        except BaseException:
            laid.unpersist()
            raise
        self._release_frame()
        self.frame = laid

    def _encode_twice(
        self, frame: DataFrame, validation: Validation, schema_error: SchemaError | None, column: str | None
    ) -> Settled:
        """The input columns cached and validated (a scan for vocabularies / ranges), then the chunks
        written from that cache (no second read of the source), which is then released."""
        cached = frame.persist(self._storage_level)
        scan = scan_writer(validation)

        def run() -> Settled:
            reports = [pickle.loads(r[0]) for r in cached.mapInArrow(scan, _SCAN_SCHEMA).collect()]
            return settle(reports, validation.encoder, schema_error, column)

        settled = _settled(run, cached.unpersist, schema_error)
        try:
            self.encoder = validation.encoder_of(settled.scan)
            write = chunk_writer(
                self.encoder, validation.read, self.has_weights, self._copy_pair if self.copies else None
            )
            out = cached.mapInArrow(write, CHUNK_SCHEMA).persist(self._storage_level)
            try:
                self._layout = chunk_layout(out)
            except BaseException:
                out.unpersist()
                raise
        finally:
            cached.unpersist()
        self.frame = out
        return settled

    def _release_frame(self) -> None:
        """Unpersist the encoded frame (and the cache it filters, when it is a view of one)."""
        (self._held if self._held is not None else self.frame).unpersist()
        self._held = None

    def _spread(self, tasks: int) -> None:
        """Rows in fewer partitions than tasks the session runs at once, or some partitions holding
        far more rows than others (one Parquet row group read as one partition, skewed input
        partitions), or (resident layout) another number of partitions than task slots: the encoded
        chunks spread over ``tasks`` partitions by a shuffle of the chunks (not of rows), so every
        task slot works."""
        laid, layout = spread_chunks(self.frame, tasks, self._storage_level)
        self._release_frame()
        self.frame, self.num_partitions, self._layout = laid, tasks, layout

    @property
    def _index(self) -> DataFrame:
        """The chunk frame without its cells: what an E-step over the local copies reads (Spark
        runs its tasks where the cached partitions are, and hands them two small columns)."""
        return self.frame.select("first", "rows")

    # -- the handle contract ------------------------------------------------------------------
    def close(self) -> None:
        """Unpersist the encoded DataFrame and drop broadcasts (idempotent)."""
        if not self._closed:
            self._closed = True
            self.release_workers()
            self._release_broadcasts()
            self._drop_copies()
            self._release_frame()

    def _drop_copies(self) -> None:
        """Delete this handle's executor-local copies: directly where the executor's directory is on
        this machine (a local master, a local Connect server), else by a small job over the chunk
        frame (its tasks run where the cached partitions are; Spark deletes the directories of
        executors it stops in any case). Best effort: a session already stopped leaves them to Spark."""
        if not self._wrote_copies:
            return
        here = socket.gethostname()
        elsewhere = False
        for host, root in self._copy_places:
            if host == here:
                remove_copies(root, self._token)
            else:
                elsewhere = True
        if not elsewhere and not self._copies_moved:
            return
        token = self._token

        def remove(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for _batch in batches:
                pass
            root = copy_place()
            yield _payload_batch(root is not None and remove_copies(root, token))

        try:
            self._index.mapInArrow(remove, _PAYLOAD_SCHEMA).collect()
        except Exception as err:  # the session may be gone: Spark removes its local directories
            logger.info("executor-local chunk copies left to Spark's clean-up: %s", err)

    def _release_broadcasts(self) -> None:
        for bc in self._broadcasts:
            bc.unpersist()
        self._broadcasts = []

    def bind(self, estimator: Estimator) -> Estimator:
        """``estimator`` with this data's scanned vocabularies / ranges fixed (its E-step threaded
        over ``num_workers`` threads per task when that was asked for)."""
        return bind_estimator(estimator, self._scan, self.encoder, self.num_workers)

    def partition_ids(self) -> range:
        """The ids partitions report in ``last_parts``: the encoded DataFrame's partitions."""
        return range(self.num_partitions)

    def fold_rows(self) -> int:
        """The most rows one chunk of the encoded data holds (each chunk is folded at once)."""
        return max((rows for chunks in self._layout.values() for _first, rows in chunks), default=0)

    def worker_memory(self) -> int | None:
        """This machine's memory under a local master (the tasks run here); unknown on a cluster."""
        if self.connect:
            return None
        return machine_memory() if self.frame.sparkSession.sparkContext.master.startswith("local") else None

    def _ship(self, model: Any) -> Any:
        """A reference to ``model`` for executors: a broadcast, or the model itself under Connect."""
        if self.merge == "dataframe" or self.connect:
            return model
        bc = self.frame.sparkSession.sparkContext.broadcast(model)
        self._broadcasts.append(bc)
        return bc

    def _run(
        self,
        partition_fn: Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]],
        factory: Any,
        frame: DataFrame,
    ) -> Payload | None:
        """One Spark job: ``partition_fn`` over every partition of ``frame``, payloads merged to the
        driver (None when every partition yielded None)."""
        if self._closed:
            raise ValueError("this encoded-data handle is closed")
        self._claim_slots()  # a job needs task slots that resident tasks would hold
        payloads = frame.mapInArrow(partition_fn, _PAYLOAD_SCHEMA)
        try:
            if self.merge == "tree" and _one_level(self.num_partitions, self.depth):
                merged = None  # as treeAggregate would, without a second Python worker per task
                for row in payloads.collect():
                    merged = merge_payloads(factory, merged, pickle.loads(row[0]))
            elif self.merge == "tree":
                merged = payloads.rdd.map(lambda row: row[0]).treeAggregate(
                    None,
                    lambda acc, blob: merge_payloads(factory, acc, pickle.loads(blob)),
                    lambda a, b: merge_payloads(factory, a, b),
                    depth=self.depth,
                )
            else:
                merged = _merge_with_dataframes(payloads, factory, self.num_partitions, self.depth)
        except Exception as err:
            failed = executor_error(err)
            if failed is None:
                raise
            raise failed from err
        finally:
            self._release_broadcasts()
        return merged  # type: ignore[no-any-return]

    def _estep(self, request: Request) -> Payload:
        factory, options = request[0], request[3]
        use_resident = self._resident_mode is True or (self._resident_mode is None and self._fitting > 0)
        if use_resident and not self.connect:
            merged = self._resident_estep(request)
            if merged is not None:
                return merged
        wanted = range(self.num_partitions) if options is None or options.only is None else options.only
        if self.copies:
            merged, missing = self._estep_from_copies(request, wanted)
            if missing:
                read = _cells(self._chunk_reader())
                rest = self._estep_job(request, self.frame, read, missing)
                merged = merge_payloads(factory, merged, rest)
        else:
            merged = self._estep_job(request, self.frame, _cells(self._chunk_reader()), wanted)
        if merged is None:
            raise EmptyDataError("no rows: every partition of the encoded data is empty")
        return merged

    def _estep_from_copies(self, request: Request, wanted: Iterable[int]) -> tuple[Payload | None, list[int]]:
        """The E-step job over the executor-local copies of partitions ``wanted``: the merged payload
        of those found, and the partitions missing. The job runs over a placeholder frame of one row
        per partition (the tasks learn their chunks from the layout) while the copies have been found
        where such tasks run; after a miss, over the chunk frame's small columns (Spark runs those
        tasks where the cached partitions are, beside the copies written there); when that finds
        none, the copies are off for this handle."""
        wanted = list(wanted)
        if self._copies_placed:
            frame = self._index
            read = copy_reader(self.encoder, self._copy_pair, self.offsets, rebase=self._rebase_on_read)
        else:
            frame = self.frame.sparkSession.range(0, self.num_partitions, 1, self.num_partitions)
            read = copy_reader(
                self.encoder, self._copy_pair, self.offsets, self._layout, self._rebase_on_read
            )
        merged = self._estep_job(request, frame, read, wanted)
        done = {r.part for r in merged[3]} if merged is not None else set()
        missing = [p for p in wanted if p not in done]
        self.copy_parts += len(wanted) - len(missing)
        if missing and not self._copies_placed:
            self._copies_placed = True
        elif missing and len(missing) == len(wanted):
            self.copies = False
            self._event(
                "E-step jobs read the cached chunks: no executor-local copies found "
                f"({len(missing)} partitions)"
            )
        return merged, missing

    def _estep_job(
        self,
        request: Request,
        frame: DataFrame,
        read_chunks: Callable[[Iterable[pa.RecordBatch], int], Iterator[Any]],
        parts: Iterable[int],
    ) -> Payload | None:
        """One E-step job over ``frame`` (the chunk frame, or a frame standing for it when the tasks
        fold the local copies), only partitions ``parts`` folding (the others' rows are filtered out
        before they reach Python, and every task reads all its input, so Spark reuses its worker). A
        partition whose copies are missing yields nothing; the merged payload's reports say which
        partitions folded."""
        factory, model, initialize, options = request
        ref = self._ship(model)
        asked = sorted(set(parts))
        if len(asked) < self.num_partitions:
            frame = frame.where(F.spark_partition_id().isin(asked))
        wanted = frozenset(asked)

        def estep_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            from pyspark import TaskContext

            context = TaskContext.get()
            part = context.partitionId() if context is not None else 0
            if part not in wanted:
                for _batch in batches:  # filtered out: nothing to read, but read to the end
                    pass
                yield _payload_batch(None)
                return
            current = ref.value if isinstance(ref, Broadcast) else ref
            try:
                payload = accumulate_chunks(
                    read_chunks(batches, part), (factory, current, initialize, options), part
                )
            except MissingCopy:
                payload = None  # the driver folds this partition from the cached chunks
            except Exception as err:
                note = getattr(err, "add_note", None)  # Python >= 3.11; the driver names the partition
                if note is not None:
                    note(f"{_EXECUTOR_NOTE} {part}")
                raise
            yield _payload_batch(payload)

        return self._run(estep_partition, factory, frame)

    def _resident_decoder(self) -> Callable[[Iterable[pa.RecordBatch]], Iterator[Any]]:
        return self._chunk_reader()

    def _chunk_reader(self) -> Callable[[Iterable[pa.RecordBatch]], Iterator[Any]]:
        return chunk_reader(self.encoder, self.offsets, self._rebase_on_read)

    @property
    def _copy_pair(self) -> tuple[str, bytes]:
        return self._token, self._copy_key

    def first_nonfinite_row(self, estimate: Distribution) -> tuple[int, float] | None:
        """(global row index, value) of the first row whose log-density is NaN or infinite, if any."""
        read_chunks = self._chunk_reader()

        def find(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            best: tuple[int, float] | None = None
            for enc, weights, row_ids in read_chunks(batches):
                ll = estimate.seq_log_density(enc)
                bad = ~np.isfinite(ll) & (weights > 0)
                if bad.any():
                    ids = row_ids[bad]
                    i = int(np.argmin(ids))
                    if best is None or int(ids[i]) < best[0]:
                        best = (int(ids[i]), float(ll[bad][i]))
            yield _payload_batch(best)

        self._claim_slots()
        found = [pickle.loads(r[0]) for r in self.frame.mapInArrow(find, _PAYLOAD_SCHEMA).collect()]
        found = [f for f in found if f is not None]
        return min(found) if found else None


def _settled(
    run: Callable[[], Settled], release: Callable[[], Any], schema_error: SchemaError | None
) -> Settled:
    """``run()`` (the encoding pass and :func:`._spark_encoding.settle`), ``release()`` called when
    it fails. A bad value raises its located error; any other failure (Spark refusing the column's
    type before a value reached Python), or none, raises ``schema_error`` when the schema check
    found one: every value then read, the column's type is still wrong."""
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


def _unbalanced(layout: dict[int, list[tuple[int, int]]], tasks: int) -> bool:
    """Whether spreading the chunks over ``tasks`` partitions would let more task slots work: some
    slots would get no rows, or one partition holds more than 1.5x its share of the rows (when
    there are at least two chunks to move)."""
    chunks = sum(len(c) for c in layout.values())
    slots = min(tasks, chunks)
    if slots < 2:
        return False
    rows = [sum(r for _f, r in c) for c in layout.values()]
    busy = sum(1 for r in rows if r > 0)
    return busy < slots or max(rows) > 1.5 * sum(rows) / slots


def _one_level(parts: int, depth: int) -> bool:
    """Whether ``treeAggregate(depth=depth)`` over ``parts`` partitions merges on the driver at once
    (its own test): then the payloads are collected instead, which merges them in the same order
    without handing them to a second Python worker through ``DataFrame.rdd``."""
    scale = max(math.ceil(parts ** (1.0 / depth)), 2)
    return parts <= scale + parts / scale


def _cells(
    read: Callable[[Iterable[pa.RecordBatch]], Iterator[Any]],
) -> Callable[[Iterable[pa.RecordBatch], int], Iterator[Any]]:
    return lambda batches, _part: read(batches)


_EXECUTOR_NOTE = "mixle_spark: E-step failed in partition"
_REMOTE_ERROR = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception|Interrupt|Exit)): (.*)$", re.MULTILINE)


def session_parallelism(data: DataFrame) -> int:
    """Tasks the session of ``data`` runs at once: its task slots on a classic session (0 before any
    executor registered), Spark's default parallelism over Spark Connect (the partitions of a range
    without a partition count, counted by one small job: Connect has no SparkContext to ask)."""
    if not is_spark_connect(data):
        return task_slots(data.sparkSession.sparkContext)
    probe = data.sparkSession.range(0, 1 << 16).select(F.spark_partition_id().alias("p"))
    return int(probe.agg(F.countDistinct("p")).collect()[0][0])


def executor_error(err: BaseException) -> ExecutorError | None:
    """An :class:`~mixle_spark.errors.ExecutorError` for a Spark job that failed in our E-step (the
    partition from the note the task added, the remote error from its traceback), else None."""
    text = str(err)
    where = re.search(re.escape(_EXECUTOR_NOTE) + r" (\d+)", text)
    if where is None:
        return None
    before = text[: where.start()]
    found = _REMOTE_ERROR.findall(before)
    remote_type, remote_message = found[-1] if found else ("Error", "")
    remote_type = remote_type.rsplit(".", 1)[-1]
    part = int(where.group(1))
    return ExecutorError(
        f"E-step failed in partition {part} (after Spark's task retries): {remote_type}: "
        f"{remote_message.strip()}; the fit stopped (checkpoints written before this iteration stay valid)",
        partition=part,
        remote_type=remote_type,
        remote_message=remote_message.strip(),
    )


SPARK_CONTROLS = ("encoder", "num_chunks", "resources", "engine", "precision", "num_workers")


def make_spark(data: Any, estimator: Any = None, model: Any = None, **options: Any) -> SparkEncodedData:
    """Registry factory of the ``spark`` backend.

    Honours :data:`SPARK_CONTROLS`: ``num_chunks`` repartitions; ``resources`` (without
    ``num_chunks``) asks for one partition per resource slot; ``num_workers`` threads each task's
    E-step (:class:`~mixle_spark.parallel.backends.model_parallel.ModelParallelEstimator`). Row placements
    and ``sub_chunks`` are Spark's to decide (Arrow batches split partitions), so they are refused.
    """
    controls = {k: options.pop(k) for k in list(options) if k in CONTROL_DEFAULTS}
    refuse_controls("spark", controls, SPARK_CONTROLS)
    check_engine_and_precision("spark", controls.pop("engine", None), controls.pop("precision", None))
    resources = controls.pop("resources", None)
    if resources is not None and controls.get("num_chunks") is None:
        controls["num_chunks"] = len(resources.devices)
    return SparkEncodedData(data, estimator=estimator, model=model, **controls, **options)


def add_scores(df: DataFrame, scorer: BatchScorer, column: str | None) -> DataFrame:
    """``df`` with ``scorer``'s columns added lazily through ``mapInArrow``, keeping every input
    column (:func:`mixle_spark.scoring.score`); ML Vector input columns are read as array<double>
    (and returned as such). A bad cell raises naming its partition and its row there."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import ArrayType, DoubleType, IntegerType, StructField, StructType

    encoder = scorer.encoder
    columns = scorer.read_columns(df.columns, column)
    df = _vector_columns_to_arrays(df, columns)
    try:
        _check_schema(df, encoder, columns)
    except SchemaError as err:  # name the first cell that does not read, where there is one
        raise unreadable_cell(df, encoder, columns) or err from None
    spark_types = {pa.float64(): DoubleType(), pa.int32(): IntegerType()}
    added = [
        StructField(
            name,
            spark_types[typ] if typ in spark_types else ArrayType(spark_types[typ.value_type], False),
            scorer.nulls,
        )
        for name, typ in scorer.added
    ]
    out_schema = StructType(list(df.schema.fields) + added)
    arrow_schema = to_arrow_schema(out_schema)

    def partition() -> str:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return "the input" if ctx is None else f"partition {ctx.partitionId()}"

    def score_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = 0  # rows of this partition before the batch, so errors name the partition's row
        for batch in batches:
            if batch.num_rows == 0:
                yield pa.RecordBatch.from_pylist([], schema=arrow_schema)
                continue
            enc = scorer.encode(batch, first, partition)
            first += batch.num_rows
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, *scorer.scores(batch, enc)], schema=arrow_schema
            )

    return df.mapInArrow(score_partition, out_schema)
