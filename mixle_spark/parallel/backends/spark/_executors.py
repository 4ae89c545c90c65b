"""How the spark backend runs a pass over its encoded data: one Spark job, or resident tasks.

A :class:`~mixle_spark.parallel.backends.spark.SparkEncodedData` holds one :class:`Executor`, and
its ``_estep(request)`` is ``executor.run(request)``. Both executors fold a partition the same way
(:func:`~mixle_spark.parallel.fold.accumulate_chunks` over its chunks) and merge the partitions'
payloads in partition order, so they give the same model up to rounding.

- :class:`JobExecutor`: one Spark job per pass. Each task folds its partition's chunks, read from
  the executor-local copies when the handle kept them (:mod:`._chunks`; a partition whose
  copies are missing is folded from the cached cells by a second job), else from the cached cells.
  The model travels as a broadcast, or inside the tasks' closure when payloads merge without RDDs
  (Spark Connect, ``merge="dataframe"``); payloads merge with ``treeAggregate`` or rounds of
  DataFrame merges. A task's failure names its partition (:func:`~._task_errors.executor_error`).
- :class:`ResidentExecutor`: while a fit runs (the EM driver's ``begin_fit`` / ``end_fit``), one
  barrier job whose tasks decode their partition once and answer every pass
  (:class:`._resident.ResidentSession`). The encoded data is laid out again when a session
  starts with another number of task slots; a lost task ends the session, the pass is run by the
  :class:`JobExecutor` the handle gave it and the next pass starts a new session (at most
  :data:`MAX_RESIDENT_RESTARTS` times a fit); a session that cannot run leaves one job per pass for
  the rest of the fit. Outside a fit every pass is a job.

Both read the handle's data through one :class:`ChunkFrame` (the resident executor lays it out again
in place, so the jobs read the current layout) and report what happened through one :class:`Events`
(logged, and kept for the EM trace). Resident tasks hold every task slot of the session, so before a
job or a new session :func:`~._slots.claim_slots` stops the sessions that hold them. A handle whose
encoding waits for its first pass holds a :class:`~._deferred.DeferredExecutor` until then.
"""

from __future__ import annotations

import logging
import math
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import pyarrow as pa
from pyspark.broadcast import Broadcast
from pyspark.sql import functions as F

from mixle_spark.errors import EmptyDataError
from mixle_spark.parallel._slots import task_slots
from mixle_spark.parallel.backends.spark._chunks import Layout, MissingCopy
from mixle_spark.parallel.backends.spark._common import (
    _PAYLOAD_SCHEMA,
    _merge_with_dataframes,
    _payload_batch,
)
from mixle_spark.parallel.backends.spark._encoding import ChunkFrame
from mixle_spark.parallel.backends.spark._fused import REPORT, FusedChunks, Settle
from mixle_spark.parallel.backends.spark._resident import ResidentSession, ResidentUnavailable
from mixle_spark.parallel.backends.spark._slots import (
    SHARED_SLOTS,
    claim_slots,
    free_slots,
    hold_slots,
    slots_refused,
)
from mixle_spark.parallel.backends.spark._task_errors import EXECUTOR_NOTE, executor_error
from mixle_spark.parallel.fold import Payload, Request, accumulate_chunks, merge_payloads

__all__ = [
    "MAX_RESIDENT_RESTARTS",
    "Events",
    "Executor",
    "FusedEncoding",
    "JobExecutor",
    "ResidentExecutor",
]

logger = logging.getLogger("mixle_spark.parallel.backends.spark")

Reader = Callable[[Iterable[pa.RecordBatch]], Iterator[Any]]
"""``read(batches) -> chunks``: a partition's chunks ``(encoded, weights, global row ids)``."""
PartReader = Callable[[Iterable[pa.RecordBatch], int], Iterator[Any]]
"""``read(batches, partition id) -> chunks``."""

MAX_RESIDENT_RESTARTS = 3
"""Resident sessions a fit may start again after lost tasks before it runs one job per E-step."""


class Executor(Protocol):
    """How a handle runs its passes (its ``_estep`` is :meth:`run`) and what it holds between them."""

    def run(self, request: Request) -> Payload:
        """The merged payload of one pass over every partition (or the ``options.only`` ones)."""
        ...

    def begin_fit(self) -> None:
        """A fit starts: workers may now be kept between passes."""
        ...

    def end_fit(self) -> None:
        """A fit ends: workers kept for it are released."""
        ...

    def holds_slots(self) -> bool:
        """Whether long-lived tasks of this executor hold task slots now."""
        ...

    def release_workers(self) -> None:
        """End long-lived tasks, if any, freeing their task slots (they start again when needed)."""
        ...

    def close(self) -> None:
        """Release everything; a later pass raises."""
        ...


class Events:
    """What happened to a handle's executors since the EM driver last asked (for the EM trace),
    oldest first; each is logged as it happens."""

    def __init__(self) -> None:
        self._items: list[str] = []

    def add(self, text: str, level: int = logging.INFO) -> None:
        self._items.append(text)
        logger.log(level, text)

    def take(self) -> list[str]:
        items, self._items = self._items, []
        return items


class JobExecutor:
    """One Spark job per pass over ``chunks``.

    Parameters
    ----------
    chunks : ChunkFrame
        The handle's encoded data.
    read_cells : callable
        ``read(batches) -> chunks``: a partition's chunks from the chunk frame's cells.
    read_copies : callable, optional
        ``read_copies(layout) -> read(batches, part)``: a partition's chunks from the executor-local
        copies (:func:`._chunks.copy_reader`; with ``layout`` None the tasks learn their chunks
        from the chunk frame's small columns); None when the handle keeps no copies.
    events : Events
        Where the executor reports that the copies went off.
    merge : {"tree", "dataframe"}
        ``treeAggregate`` of ``depth`` (the model shipped as a broadcast), or rounds of DataFrame
        merges (the model inside the tasks' closure: what Spark Connect can run).
    depth : int
        Depth of either merge.
    """

    def __init__(
        self,
        chunks: ChunkFrame,
        read_cells: Reader,
        read_copies: Callable[[Layout | None], PartReader] | None,
        events: Events,
        *,
        merge: str,
        depth: int,
    ) -> None:
        self.chunks, self.events = chunks, events
        self.read_cells = read_cells
        self.read_copies = read_copies
        self.merge, self.depth = merge, depth
        self.copies = read_copies is not None
        """Whether passes fold the executor-local copies; off for good when a pass finds none."""
        self.copy_parts = 0
        """Partitions passes folded from executor-local copies (the rest read the cached cells)."""
        self._copies_placed = False  # passes over the copies run over the chunk frame's small columns
        self._broadcasts: list[Any] = []
        self._closed = False

    def run(self, request: Request) -> Payload:
        factory, options = request[0], request[3]
        parts = self.chunks.num_partitions
        wanted = range(parts) if options is None or options.only is None else options.only
        cells = _cells(self.read_cells)
        if self.copies:
            merged, missing = self._from_copies(request, wanted)
            if missing:
                merged = merge_payloads(
                    factory, merged, self._job(request, self.chunks.frame, cells, missing)
                )
        else:
            merged = self._job(request, self.chunks.frame, cells, wanted)
        if merged is None:
            raise EmptyDataError("no rows: every partition of the encoded data is empty")
        return merged

    def _from_copies(self, request: Request, wanted: Iterable[int]) -> tuple[Payload | None, list[int]]:
        """The job over the executor-local copies of partitions ``wanted``: the merged payload of
        those found, and the partitions missing. The job runs over a placeholder frame of one row
        per partition (the tasks learn their chunks from the layout) while the copies have been found
        where such tasks run; after a miss, over the chunk frame's small columns (Spark runs those
        tasks where the cached partitions are, beside the copies written there); when that finds
        none, the copies are off for this handle."""
        assert self.read_copies is not None
        wanted = list(wanted)
        parts = self.chunks.num_partitions
        if self._copies_placed:
            frame, read = self.chunks.index, self.read_copies(None)
        else:
            frame = self.chunks.plan.sparkSession.range(0, parts, 1, parts)
            read = self.read_copies(self.chunks.layout)
        merged = self._job(request, frame, read, wanted)
        done = {r.part for r in merged[3]} if merged is not None else set()
        missing = [p for p in wanted if p not in done]
        self.copy_parts += len(wanted) - len(missing)
        if missing and not self._copies_placed:
            self._copies_placed = True
        elif missing and len(missing) == len(wanted):
            self.copies = False
            self.events.add(
                "E-step jobs read the cached chunks: no executor-local copies found "
                f"({len(missing)} partitions)"
            )
        return merged, missing

    def _job(
        self, request: Request, frame: Any, read_chunks: PartReader, parts: Iterable[int]
    ) -> Payload | None:
        """One job over ``frame`` (the chunk frame, or a frame standing for it when the tasks fold
        the local copies), only partitions ``parts`` folding (the others' rows are filtered out
        before they reach Python, and every task reads all its input, so Spark reuses its worker). A
        partition whose copies are missing yields nothing; the merged payload's reports say which
        partitions folded."""
        factory, model, initialize, options = request
        ref = self._ship(model)
        asked = sorted(set(parts))
        if len(asked) < self.chunks.num_partitions:
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
                    note(f"{EXECUTOR_NOTE} {part}")
                raise
            yield _payload_batch(payload)

        return self._run_job(frame.mapInArrow(estep_partition, _PAYLOAD_SCHEMA), factory)

    def _ship(self, model: Any) -> Any:
        """A reference to ``model`` for the tasks: a broadcast, or the model itself (DataFrame merges)."""
        if self.merge == "dataframe":
            return model
        bc = self.chunks.plan.sparkSession.sparkContext.broadcast(model)
        self._broadcasts.append(bc)
        return bc

    def _run_job(self, payloads: Any, factory: Any) -> Payload | None:
        """Run the job yielding ``payloads`` (one pickled payload per partition) and merge them on
        the driver (None when every partition yielded None)."""
        if self._closed:
            raise ValueError("this encoded-data handle is closed")
        claim_slots(self.chunks)  # a job needs task slots that resident tasks would hold
        parts = self.chunks.num_partitions
        try:
            if self.merge == "tree" and _one_level(parts, self.depth):
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
                merged = _merge_with_dataframes(payloads, factory, parts, self.depth)
        except Exception as err:
            failed = executor_error(err)
            if failed is None:
                raise
            raise failed from err
        finally:
            self._release_broadcasts()
        return merged  # type: ignore[no-any-return]

    def collect(
        self, partition_fn: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]
    ) -> list[Any]:
        """One job of ``partition_fn`` over the chunk frame's partitions, each yielding one payload
        batch: their values, in partition order."""
        claim_slots(self.chunks)  # a job needs task slots that resident tasks would hold
        return [
            pickle.loads(r[0]) for r in self.chunks.frame.mapInArrow(partition_fn, _PAYLOAD_SCHEMA).collect()
        ]

    def _release_broadcasts(self) -> None:
        for bc in self._broadcasts:
            bc.unpersist()
        self._broadcasts = []

    def begin_fit(self) -> None:
        """Nothing is kept between jobs."""

    def end_fit(self) -> None:
        """Nothing is kept between jobs."""

    def holds_slots(self) -> bool:
        return False

    def release_workers(self) -> None:
        """Jobs hold no task slots between passes."""

    def close(self) -> None:
        self._closed = True
        self._release_broadcasts()


class ResidentExecutor:
    """Passes served by resident tasks while a fit runs, by ``jobs`` otherwise and when they cannot.

    Parameters
    ----------
    chunks : ChunkFrame
        The handle's encoded data: one resident task per partition.
    jobs : JobExecutor
        What runs the passes resident tasks do not serve.
    decode : callable
        ``decode(batches) -> chunks``, run once in each resident task over its partition.
    events : Events
        Where sessions starting, lost, restarted or off are reported.
    required : bool
        ``resident=True``: every pass through resident tasks (not only during fits), a lost task's
        pass retried on a new session, and anything else that stops them an error.
    auto_layout : bool
        Lay the chunks out again for the task slots a session starts with (one partition each).
    """

    def __init__(
        self,
        chunks: ChunkFrame,
        jobs: JobExecutor,
        decode: Reader,
        events: Events,
        *,
        required: bool,
        auto_layout: bool,
    ) -> None:
        self.chunks, self.jobs, self.decode, self.events = chunks, jobs, decode, events
        self.required, self.auto_layout = required, auto_layout
        self.session: ResidentSession | None = None
        self.steps = 0
        """How many passes resident tasks served (the rest ran as one Spark job each)."""
        self.starts = 0
        """How many resident sessions started (more than one per fit after a lost task)."""
        self.off: str | None = None
        """Why resident passes are off for the current fit (None while they may run)."""
        self._restarts = 0
        self._announce: str | None = None
        self._fitting = 0

    def run(self, request: Request) -> Payload:
        if self.required or self._fitting > 0:
            merged = self._serve(request)
            if merged is not None:
                return merged
        return self.jobs.run(request)

    def _serve(self, request: Request) -> Payload | None:
        """The pass through resident tasks, or None when they cannot serve it (a job runs it instead).

        A lost task ends the session; the pass is recomputed by a job and the next starts a new
        session (at most :data:`MAX_RESIDENT_RESTARTS` times a fit). When ``required`` the pass is
        retried on the new session instead, and anything else that stops resident tasks is an error.
        """
        if self.off is not None:
            return None
        while True:
            try:
                session = self.session or self._start()
                replies = session.request(request)
            except ResidentUnavailable as err:
                self.session = None
                retry = err.retry and self._restarts < MAX_RESIDENT_RESTARTS
                if self.required and not retry:
                    raise ValueError(f"resident=True, but resident E-steps are unavailable: {err}") from err
                if not retry:
                    self.off = str(err)
                    self.events.add(
                        f"resident E-steps off for this fit: {err}; one Spark job per E-step", logging.WARNING
                    )
                    return None
                self._restarts += 1
                self._announce = (
                    f"resident E-steps restarted ({self._restarts} of at most {MAX_RESIDENT_RESTARTS})"
                )
                if self.required:
                    self.events.add(f"resident E-steps lost: {err}; retrying this step on a new session")
                    continue
                self.events.add(
                    f"resident E-steps lost: {err}; this step recomputed by a Spark job", logging.WARNING
                )
                return None
            merged: Payload | None = None
            for payload in replies:
                merged = merge_payloads(request[0], merged, payload)
            if merged is None:
                raise EmptyDataError("no rows: every partition of the encoded data is empty")
            self.steps += 1
            if self._announce is not None:
                self.events.add(f"{self._announce}: {session.describe()}")
                self._announce = None
            return merged

    def _start(self) -> ResidentSession:
        """Start a session, laying the encoded data out for the slots first (auto layout)."""
        chunks = self.chunks
        refused = slots_refused(chunks.plan, chunks)
        if refused is not None:
            raise ResidentUnavailable(refused)
        slots = task_slots(chunks.plan.sparkSession.sparkContext)
        if self.auto_layout and chunks.relayout_wanted(slots):
            self._relayout(slots)
        parts = chunks.num_partitions
        if parts > slots:
            hint = (
                ""
                if self.auto_layout
                else f" (num_chunks={parts}; leave it unset to lay the data out for the slots)"
            )
            raise ResidentUnavailable(
                f"{parts} partitions but {slots} task slots{hint}", retry=self.auto_layout
            )
        session = ResidentSession(chunks.frame, chunks.num_partitions, self.decode, accumulate_chunks)
        session.start()
        self.session = session
        hold_slots(self)
        self.starts += 1
        if self._announce is None:
            self._announce = "resident E-steps started"
        return session

    def adopt(self, session: ResidentSession, how: str) -> None:
        """Serve the passes of the current fit with ``session``, started elsewhere (the encoding
        inside resident tasks: :class:`FusedEncoding`); ``how`` says so in the EM trace."""
        self.session = session
        hold_slots(self)
        self.starts += 1
        self._announce = f"resident E-steps started ({how})"

    def _relayout(self, parts: int) -> None:
        """The cached chunks spread over ``parts`` partitions (row ids travel with the rows)."""
        before = self.chunks.num_partitions
        try:
            self.chunks.spread(parts)
        except Exception as err:  # a lost executor while copying: the old layout stays
            raise ResidentUnavailable(
                f"could not lay the data out for {parts} slots: {err}", retry=True
            ) from err
        self.events.add(f"encoded data laid out again for {parts} task slot(s) (was {before} partitions)")

    def give_up_slots(self) -> bool:
        """Another handle needs the task slots: end the session, and (during a fit) stay off for the
        rest of it (a fit that also scores validation data on Spark alternates two handles; taking
        the slots back and forth would decode the data every iteration). True during a fit."""
        if self.session is None:
            return False
        self.release_workers()
        if self._fitting == 0:
            return False
        self.off = SHARED_SLOTS
        self.events.add(f"resident E-steps off for this fit: {SHARED_SLOTS}")
        return True

    def begin_fit(self) -> None:
        if self._fitting == 0:
            self.off, self._restarts = None, 0
        self._fitting += 1

    def end_fit(self) -> None:
        self._fitting = max(self._fitting - 1, 0)
        if self._fitting == 0:
            self.release_workers()

    def holds_slots(self) -> bool:
        return self.session is not None

    def release_workers(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.session = None
        free_slots(self)

    def close(self) -> None:
        self.release_workers()
        self.jobs.close()


def _cells(read: Reader) -> PartReader:
    return lambda batches, _part: read(batches)


def _one_level(parts: int, depth: int) -> bool:
    """Whether ``treeAggregate(depth=depth)`` over ``parts`` partitions merges on the driver at once
    (its own test): then the payloads are collected instead, which merges them in the same order
    without handing them to a second Python worker through ``DataFrame.rdd``."""
    scale = max(math.ceil(parts ** (1.0 / depth)), 2)
    return parts <= scale + parts / scale


class FusedEncoding:
    """The one-pass encoding run by the barrier tasks of a resident session (:mod:`._fused`):
    :meth:`start` launches it over ``frame`` (the input, ``parts`` partitions; ``write`` encodes one)
    and returns the partitions' reports, :meth:`settle` has the tasks decode their chunks, and
    ``session`` then serves the fit (:meth:`ResidentExecutor.adopt`)."""

    def __init__(self, frame: Any, parts: int, write: Callable[..., Iterator[pa.RecordBatch]]) -> None:
        self.frame, self.parts, self.write = frame, parts, write
        self.session: ResidentSession | None = None

    def start(self) -> list[Any] | str:
        """Each partition's ``(report, chunk layout, digest)`` in partition order, or why resident
        tasks could not encode the data (another handle's fit holds the slots: it keeps them)."""
        refused = slots_refused(self.frame, None)
        if refused is not None:
            return refused
        slots = task_slots(self.frame.sparkSession.sparkContext)
        if self.parts > slots:
            return f"{self.parts} partitions but {slots} task slots"
        holder = FusedChunks(self.write, _fold)  # decode and compute share it in each task
        session = ResidentSession(self.frame, self.parts, holder.decode, holder.compute, setup_requests=2)
        try:
            session.start()
            replies = session.request(REPORT)
        except ResidentUnavailable as err:
            return str(err)
        self.session = session
        return replies

    def settle(self, encoder: Any, offsets: Any, rebase: Any) -> str | None:
        """The tasks decode their chunks (:class:`Settle`); None, or why the session was lost."""
        assert self.session is not None
        try:
            self.session.request(Settle(encoder, offsets, rebase))
        except ResidentUnavailable as err:  # the session is stopped: the fit starts another
            self.session = None
            return str(err)
        return None

    def stop(self, cancel: bool = False) -> None:
        if self.session is not None:
            self.session.stop(cancel=cancel)
            self.session = None


def _fold(chunks: list[Any], request: Any, part: int) -> Payload:
    return accumulate_chunks(chunks, request, part)
