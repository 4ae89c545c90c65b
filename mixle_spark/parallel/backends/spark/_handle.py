"""The ``spark`` backend's handle: :class:`SparkEncodedData` (encoded data as a persisted Spark
DataFrame of encoded chunks, its passes run by the executor it holds) and the registry's factory,
:func:`make_spark`. The package's docstring (:mod:`mixle_spark.parallel.backends.spark`) tells how a
handle is built and how a pass runs."""

from __future__ import annotations

import logging
import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from mixle_spark.engines import Compute
from mixle_spark.errors import SchemaError, did_you_mean
from mixle_spark.parallel.backends._handle import bind_estimator, machine_memory
from mixle_spark.parallel.backends._scoring import data_columns, reader
from mixle_spark.parallel.backends.controls import check_control, take_controls
from mixle_spark.parallel.backends.spark._chunks import (
    Rebase,
    chunk_reader,
    copies_wanted,
)
from mixle_spark.parallel.backends.spark._common import (
    ROW_ID_COLUMN,
    WEIGHT_COLUMN,
    _check_schema,
    _vector_columns_to_arrays,
    is_spark_connect,
    plan_bytes,
    resident_blocker,
    same_scan,
    session_parallelism,
    slots_for_layout,
    whole_table_task,
)
from mixle_spark.parallel.backends.spark._copies import ChunkCopies
from mixle_spark.parallel.backends.spark._deferred import DeferredExecutor
from mixle_spark.parallel.backends.spark._encoding import (
    ChunkFrame,
    PendingChunks,
    Settled,
    Validation,
    rebase_chunks,
    unbalanced,
    write_chunks,
)
from mixle_spark.parallel.backends.spark._executors import (
    Events,
    Executor,
    FusedEncoding,
    JobExecutor,
    ResidentExecutor,
)
from mixle_spark.parallel.backends.spark._scores import first_nonfinite
from mixle_spark.parallel.backends.spark._slots import claim_slots
from mixle_spark.parallel.fold import Payload, PayloadHandle, Request
from mixle_spark.stats.base import Distribution, Encoder, Estimator

__all__ = ["SPARK_CONTROLS", "SparkEncodedData", "make_spark"]

logger = logging.getLogger("mixle_spark.parallel.backends.spark")

_T = TypeVar("_T")

ONE_TASK_BYTES = 32 * 2**20
"""Data still to be encoded whose plan is estimated at most this many bytes may be handed whole to
one task (``in_one_task``: an update of a small batch runs there, in one job)."""

REBASE_ON_READ_BYTES = 256 * 1024
"""Chunks encoded under their own scan are rebased as they are read while the scans of all of them
pickle to at most this many bytes (they travel in every pass's closure); above it, once, by a pass
that rewrites them."""


class SparkEncodedData(PayloadHandle):
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
        requested over an authenticated socket; see :mod:`mixle_spark.parallel.backends.spark._executors`).
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
    defer_encoding : bool
        Encode the data in its first pass instead of now, where it can run inside the resident
        session of a fit (:mod:`._fused`: a classic session with resident tasks, the layout
        left to the backend, a one-pass encoding, no more input partitions than task slots): the
        encoding and the session's start are one Spark job, for a handle that serves a few passes
        at once (``update``, a streaming micro-batch). A bad value then raises at that pass. Where
        the encoding cannot run there, a job encodes the data when it is first needed. The encoded
        chunks live in the resident tasks only: if a job needs them later (a lost task, a second
        fit), it reads the input again, and raises :class:`~mixle_spark.errors.InputChangedError` if
        that gives other rows (persist a non-deterministic DataFrame first). Default False: encoded
        (and checked) now.
    compute : Compute, optional
        The engine and precision asked for (``engine`` / ``precision``): the chunks are stored at that
        precision (float32 halves the cached cells, the local copies and what resident tasks hold),
        narrowed where they are encoded, and every pass runs its E-steps on that engine.
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
        defer_encoding: bool = False,
        compute: Compute | None = None,
    ) -> None:
        if estimator is None and model is None and encoder is None:
            raise TypeError("SparkEncodedData needs an estimator, a model or an encoder")
        depth = check_control("depth", depth)
        if merge not in ("auto", "tree", "dataframe"):
            raise ValueError(f"merge must be 'auto', 'tree' or 'dataframe', got {merge!r}")
        num_chunks = check_control("num_chunks", num_chunks)
        self._whole_ok = num_chunks is None  # in_one_task: no layout was asked for
        num_workers = check_control("num_workers", num_workers)
        self.connect = is_spark_connect(data)
        if merge == "tree" and self.connect:
            raise ValueError("merge='tree' needs RDDs, which Spark Connect does not have; use 'dataframe'")
        self.merge = ("dataframe" if self.connect else "tree") if merge == "auto" else merge
        self.num_workers, self.depth, self.compute = num_workers, depth, compute
        if resident and self.connect:
            raise ValueError(
                "resident=True needs a classic Spark session (Spark Connect has no SparkContext)"
            )
        self._token = uuid.uuid4().hex
        blocker = resident_blocker(data)
        self._copies = ChunkCopies(
            self._token, copies_wanted() and (resident is False or self.connect or blocker is not None)
        )
        """The executor-local copies of the chunks E-step jobs fold (on the job path)."""
        self._closed = False
        base = encoder or (estimator.encoder() if estimator is not None else model.encoder())  # type: ignore[union-attr]
        frame, schema_error = self._select(data, base, column, weights)
        self._storage_level = storage_level or StorageLevel.MEMORY_AND_DISK
        self.auto_layout = num_chunks is None and resident is not False and blocker is None
        """The backend lays the encoded data out for the task slots (one partition each), again
        whenever a resident session starts with another number of slots."""
        self.one_pass = estimator is None or not base.needs_scan or base.rebases
        """Whether the encoding pass also wrote the chunks (:mod:`._encoding`); else the
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
        self.rebased_chunks = 0
        """Chunks the one-pass encoding wrote under a scan of their own rows that differs from the
        whole data's (a vocabulary the chunk did not see whole, a vector centre), re-expressed
        under the merged scan as they are read or by a pass over the cached chunks."""
        self._rebase_on_read: Rebase | None = None
        validation = Validation(base, estimator, reader(self.columns, self.reads_table), weights, compute)
        column = None if self.reads_table else self.columns[0]
        self._events = Events()
        self._resident = resident
        self._resident_executor: ResidentExecutor | None = None
        self._pending: PendingChunks | None = None
        self._broken: tuple[BaseException, PendingChunks] | None = None
        if defer_encoding and self.one_pass:
            # encoded by the first pass: inside the resident session of a fit (``_deferrable_parts``
            # decides then), else by a job; or, small, handed whole to one task (``in_one_task``)
            self._pending = PendingChunks(
                frame, validation, schema_error, column, self._storage_level, self._copies.pair
            )
            self.encoder = base  # the merged scan's when it is settled
            self._scan = None
            self._slots, self._estimator = tasks, estimator
            self._deferred = DeferredExecutor(self._settle_deferred)
            self.executor: Executor = self._deferred
            return
        settled, self.encoder, self.chunks = write_chunks(
            frame,
            validation,
            schema_error,
            column,
            one_pass=self.one_pass,
            level=self._storage_level,
            copies=self._copies.pair,
        )
        self._encoded(settled, estimator, tasks)

    def _deferrable_parts(self, frame: DataFrame, slots: int) -> int:
        """The input's partitions when the encoding can run inside the first resident session
        (``defer_encoding``: a classic session that runs resident tasks, the layout left to the
        backend, a one-pass encoding (:mod:`._encoding`), no more input partitions than task
        slots), else 0."""
        if self.connect or not self.auto_layout:  # auto_layout: resident tasks can run, no num_chunks
            return 0
        if not self.one_pass or slots <= 0:
            return 0
        parts = int(frame._jdf.rdd().getNumPartitions())  # two calls: .rdd converts the rows for Python
        return parts if parts <= slots else 0

    def _settle_deferred(self, fused: bool) -> Executor:
        """Encode the deferred data (inside a resident session when ``fused``: a fit runs; else by a
        job) and return the executor that runs the passes from then on."""
        pending, self._pending = self._pending, None
        assert pending is not None
        try:
            return self._settle_pending(pending, fused)
        except BaseException as err:  # a bad value (located), a failed job: raised again if asked again
            self._broken = (err, pending)
            raise

    def _settle_pending(self, pending: PendingChunks, fused: bool) -> Executor:
        fusing, settled = None, None
        parts = self._deferrable_parts(pending.input, self._slots) if fused else 0
        if parts:  # the tasks encode their input partitions
            fusing = FusedEncoding(pending.input, parts, pending.write)
            replies = fusing.start()
            if isinstance(replies, str):
                self._events.add(f"the data encoded by a job: resident tasks could not encode it ({replies})")
                fusing = None
            else:
                try:
                    settled, self.chunks = pending.settle_reports(replies, lambda: claim_slots(self._chunks))
                    rewrite = self._rebase_plan(settled)[1]  # rewriting chunks is a job: it needs the slots
                except BaseException:
                    fusing.stop(cancel=True)
                    raise
                if rewrite:
                    fusing.stop()
                    fusing = None
        if settled is None:
            settled, self.chunks = pending.settle_by_job()
        self.encoder = pending.validation.encoder_of(settled.scan)
        self._encoded(settled, self._estimator, 0 if fusing is not None else self._slots)
        if fusing is not None:
            lost = fusing.settle(self.encoder, settled.offsets, self._rebase_on_read)
            if lost is not None:
                self._events.add(f"resident tasks lost while decoding the data they encoded ({lost})")
        executor = self.executor
        for _ in range(self._deferred.fitting):
            executor.begin_fit()
        if fusing is not None and fusing.session is not None:
            assert self._resident_executor is not None
            self._resident_executor.adopt(fusing.session, "encoding the data in the same job")
        return executor

    def in_one_task(self, fn: Callable[[pa.Table, dict[str, Any]], _T]) -> tuple[bool, _T | None]:
        """``fn(table, options)`` over all the rows in one Spark task (:class:`~.contract.OneTask`):
        when the data is still to be encoded (``defer_encoding``), no ``num_chunks`` was asked for
        and the optimizer estimates it at most :data:`ONE_TASK_BYTES`. One job: the rows are read
        into the task in their order (``coalesce(1)``), and only ``fn``'s pickled result comes
        back. ``(False, None)`` otherwise, or when ``fn`` raised there (the first pass then encodes
        the data as usual)."""
        pending = self._pending
        if pending is None or self._broken is not None or not self._whole_ok:
            return False, None
        size = plan_bytes(pending.input)
        if size is None or size > ONE_TASK_BYTES:
            return False, None
        options: dict[str, Any] = {}
        if not self.reads_table:
            options["column"] = self.columns[0]
        if self.has_weights:
            options["weights"] = WEIGHT_COLUMN
        task = whole_table_task(fn, options)
        rows = pending.input.coalesce(1).mapInArrow(task, "payload binary").collect()
        reply: tuple[str, Any] = pickle.loads(rows[0][0]) if rows else ("failed", "no rows")
        if reply[0] != "ok":
            logger.debug("in_one_task: %s; the data is encoded as usual", reply[1])
            return False, None
        return True, reply[1]

    def _settle(self) -> None:
        """Encode the deferred data now, when something needs what the encoding learns (inside a
        resident session during a fit, else by a job)."""
        if self._broken is not None:
            raise self._broken[0]
        if self._pending is not None:
            self._deferred.settled(fused=True)

    @property
    def n(self) -> int:  # type: ignore[override]
        """Rows of the encoded data."""
        self._settle()
        return self._n

    @property
    def offsets(self) -> np.ndarray:
        """Each input partition's first global row."""
        self._settle()
        return self._offsets

    @property
    def chunks(self) -> ChunkFrame:
        """The persisted encoded chunks every pass reads."""
        self._settle()
        return self._chunks

    @chunks.setter
    def chunks(self, value: ChunkFrame) -> None:
        self._chunks = value

    @property
    def jobs(self) -> JobExecutor:
        """Runs every pass as one Spark job, and the passes resident tasks do not serve."""
        self._settle()
        return self._jobs

    def _encoded(self, settled: Settled, estimator: Estimator | None, tasks: int) -> None:
        """The encoding pass's results kept, and the executors made."""
        self._scan, self._offsets, self._n = settled.scan, settled.offsets, settled.n
        self._copies.places |= settled.places
        if self.one_pass:
            self._rebase(settled, estimator)
        chunks = self._chunks
        if unbalanced(chunks.layout, tasks) or (self.auto_layout and chunks.relayout_wanted(tasks)):
            chunks.spread(tasks)
        self._jobs = JobExecutor(
            chunks,
            self._chunk_reader(),
            self._copies.reader(self.encoder, self._offsets, self._rebase_on_read),
            self._events,
            merge=self.merge,
            depth=self.depth,
        )
        if self._resident is not False and not self.connect:
            self._resident_executor = ResidentExecutor(
                chunks,
                self._jobs,
                self._chunk_reader(),
                self._events,
                required=self._resident is True,
                auto_layout=self.auto_layout,
            )
        self.executor = self._resident_executor or self._jobs
        """What runs each pass (:meth:`_estep`): resident tasks while a fit runs (with the jobs
        behind them), or jobs only (``resident=False``, Spark Connect)."""

    def _select(
        self, data: DataFrame, base: Encoder, column: str | None, weights: str | None
    ) -> tuple[DataFrame, SchemaError | None]:
        """The columns ``base`` reads (and the weights as a double) with each row's input id, and the
        schema check's error (None when the columns' types read; else the encoding pass finds the
        first bad value and its row)."""
        if weights is not None and weights not in data.columns:
            raise SchemaError(
                f"weight column {weights!r} not found{did_you_mean(weights, data.columns)}; "
                f"the DataFrame has columns {data.columns}"
            )
        self.columns = data_columns(data.columns, base, column, weights)
        self.reads_table = base.column_names() is not None
        self.has_weights = weights is not None
        self.weight_name = weights or ""
        selected = _vector_columns_to_arrays(data, self.columns)
        try:
            _check_schema(selected, base, self.columns)
            schema_error: SchemaError | None = None
        except SchemaError as err:
            schema_error = err
        cols = [F.col(c) for c in self.columns]
        if weights is not None:
            cols.append(F.col(weights).cast("double").alias(WEIGHT_COLUMN))
        frame = selected.select(*cols, F.monotonically_increasing_id().alias(ROW_ID_COLUMN))
        # Spark shares one cache entry between plans that compare equal, so two handles over one
        # DataFrame would share their caches, and closing one would drop the other's: a filter that
        # names this handle (always true; the optimizer removes it) keeps every plan its own
        return frame.where(F.lit(self._token).isNotNull()), schema_error

    @staticmethod
    def _rebase_plan(settled: Settled) -> tuple[dict[int, Any], bool]:
        """The chunks encoded under a scan other than the merged one (first input row id -> scan),
        and whether they are rewritten by a pass (else rebased as they are read)."""
        todo = {first: scan for first, scan in settled.chunk_scans if not same_scan(scan, settled.scan)}
        return todo, bool(todo) and len(pickle.dumps(todo, protocol=5)) > REBASE_ON_READ_BYTES

    def _rebase(self, settled: Settled, estimator: Estimator | None) -> None:
        """Chunks encoded under a scan other than the merged one re-expressed by the merged encoder:
        as they are read, when their scans are small enough to ship in every pass's closure (a
        vector column's centre, a few labels), else in one pass over the cached chunks (a
        vocabulary of many labels: that pass builds each chunk's encoder once)."""
        todo, rewrite = self._rebase_plan(settled)
        self.rebased_chunks = len(todo)
        if not todo:
            return
        if not rewrite:
            self._rebase_on_read = Rebase(self.encoder, estimator, todo, self.compute)
            return
        rebase_chunks(self._chunks, self.encoder, estimator, todo, self._copies.renew(), self.compute)

    def _chunk_reader(self) -> Callable[[Iterable[pa.RecordBatch]], Iterator[Any]]:
        """``read(batches)``: a partition's chunks from the cached cells (what resident tasks decode)."""
        return chunk_reader(self.encoder, self._offsets, self._rebase_on_read)

    # -- what the executors hold ----------------------------------------------------------------
    @property
    def frame(self) -> DataFrame:
        """The persisted encoded DataFrame: one row per chunk (:mod:`._chunks`)."""
        frame: DataFrame = self.chunks.frame
        return frame

    @property
    def num_partitions(self) -> int:
        """Partitions of the encoded DataFrame (each folded by one task a pass)."""
        return self.chunks.num_partitions

    @property
    def copies(self) -> bool:
        """Whether E-step jobs fold executor-local copies of the chunks (:mod:`._chunks`): on the
        job path (``resident=False``, Spark Connect, dynamic allocation); off again for this handle when
        a pass finds none of them."""
        return self.jobs.copies

    @copies.setter
    def copies(self, on: bool) -> None:
        self.jobs.copies = on and self.jobs.read_copies is not None

    @property
    def copy_parts(self) -> int:
        """Partitions E-step jobs folded from executor-local copies (the rest read the cached cells)."""
        return self.jobs.copy_parts

    @property
    def resident_steps(self) -> int:
        """How many E-steps resident tasks served (the rest ran as one Spark job each)."""
        return 0 if self._resident_executor is None else self._resident_executor.steps

    @property
    def resident_starts(self) -> int:
        """How many resident sessions started (more than one per fit after a lost task)."""
        return 0 if self._resident_executor is None else self._resident_executor.starts

    @property
    def resident_off(self) -> str | None:
        """Why resident E-steps are off for the current fit (None while they may run)."""
        return None if self._resident_executor is None else self._resident_executor.off

    # -- the handle contract ------------------------------------------------------------------
    def _estep(self, request: Request) -> Payload:
        return self.executor.run(request)

    def begin_fit(self) -> None:
        """Called by the EM driver when a fit starts: E-steps may now use resident tasks."""
        self.executor.begin_fit()

    def end_fit(self) -> None:
        """Called by the EM driver when a fit ends: resident tasks are released."""
        self.executor.end_fit()

    def release_workers(self) -> None:
        """End the resident tasks, if any, freeing their task slots for other Spark jobs (they start
        again on the next E-step). The EM driver calls this when a fit ends; while resident tasks run
        they hold every task slot, so other jobs on the session would wait."""
        self.executor.release_workers()

    def take_events(self) -> list[str]:
        """What happened to the resident engine and the E-step jobs since the last call (for the EM
        trace), oldest first."""
        return self._events.take()

    def close(self) -> None:
        """Release the resident tasks, unpersist the encoded DataFrame and drop broadcasts (idempotent)."""
        if not self._closed:
            self._closed = True
            self.executor.close()
            pending = self._pending or (self._broken[1] if self._broken is not None else None)
            if pending is not None and not hasattr(self, "_chunks"):  # never encoded (or it failed)
                pending.out.unpersist()
                self._pending = None
                return
            self._copies.drop(self._chunks)
            self._chunks.release()

    def bind(self, estimator: Estimator) -> Estimator:
        """``estimator`` with this data's scanned vocabularies / ranges fixed (its E-step threaded
        over ``num_workers`` threads per task when that was asked for)."""
        self._settle()
        return bind_estimator(estimator, self._scan, self.encoder, self.num_workers)

    def partition_ids(self) -> range:
        """The ids partitions report in ``last_parts``: the encoded DataFrame's partitions."""
        return range(self.num_partitions)

    def fold_rows(self) -> int:
        """The most rows one chunk of the encoded data holds (each chunk is folded at once)."""
        return max((rows for chunks in self.chunks.layout.values() for _first, rows in chunks), default=0)

    def worker_memory(self) -> int | None:
        """This machine's memory under a local master (the tasks run here); unknown on a cluster."""
        if self.connect:
            return None
        local = (self.chunks.plan.sparkSession.sparkContext.master or "").startswith("local")
        return machine_memory() if local else None

    def first_nonfinite_row(self, estimate: Distribution) -> tuple[int, float] | None:
        """(global row index, value) of the first row whose log-density is NaN or infinite, if any."""
        return first_nonfinite(self._chunk_reader(), estimate, self.jobs.collect)


SPARK_CONTROLS = (
    "encoder",
    "num_chunks",
    "resources",
    "engine",
    "precision",
    "num_workers",
    "defer_encoding",
)


def make_spark(data: Any, estimator: Any = None, model: Any = None, **options: Any) -> SparkEncodedData:
    """Registry factory of the ``spark`` backend.

    Honours :data:`SPARK_CONTROLS`: ``num_chunks`` repartitions; ``resources`` (without
    ``num_chunks``) asks for one partition per resource slot; ``num_workers`` threads each task's
    E-step (:class:`~mixle_spark.parallel.backends.model_parallel.ModelParallelEstimator`); ``engine``
    and ``precision`` store the chunks at that precision and run the E-steps on that engine. Row
    placements and ``sub_chunks`` are Spark's to decide (Arrow batches split partitions), so they are
    refused.
    """
    controls = take_controls("spark", options, SPARK_CONTROLS, computes=True)
    resources = controls.pop("resources", None)
    if resources is not None and controls.get("num_chunks") is None:
        controls["num_chunks"] = len(resources.devices)
    return SparkEncodedData(data, estimator=estimator, model=model, **controls, **options)
