"""When the spark backend's handle runs its E-steps in resident tasks, and what it does when they fail.

:class:`ResidentPolicy` is the handle's side of :mod:`~mixle_spark.parallel.backends._spark_resident`
(a mixin of :class:`~mixle_spark.parallel.backends.spark.SparkEncodedData`): resident tasks serve
E-steps only while a fit runs (the EM driver's ``begin_fit`` / ``end_fit``); the encoded data is
laid out again when a session starts with another number of task slots; a lost task ends the
session, the step is recomputed by a Spark job and the next step starts a new session (at most
:data:`MAX_RESIDENT_RESTARTS` times a fit); a session that cannot run leaves one job per E-step for
the rest of the fit. Every such event is logged and kept for the EM trace (``take_events``). Since
resident tasks hold every task slot, a handle that needs them (for a job or its own tasks) first
stops any other handle's.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from mixle_spark.errors import EmptyDataError
from mixle_spark.parallel._slots import task_slots
from mixle_spark.parallel.backends._spark_chunks import spread_chunks
from mixle_spark.parallel.backends._spark_common import is_spark_connect
from mixle_spark.parallel.backends._spark_resident import ResidentSession, ResidentUnavailable
from mixle_spark.parallel.fold import Payload, accumulate_chunks, merge_payloads

__all__ = ["EXECUTOR_WAIT", "MAX_RESIDENT_RESTARTS", "ResidentPolicy", "resident_blocker", "slots_for_layout"]

logger = logging.getLogger("mixle_spark.parallel.backends.spark")


class ResidentPolicy:
    """Resident E-steps for a handle that provides ``frame`` (the persisted encoded DataFrame),
    ``num_partitions``, ``auto_layout``, ``_storage_level``, ``_resident_decoder()`` and
    ``_release_frame()``."""

    frame: Any
    num_partitions: int
    auto_layout: bool
    _storage_level: Any
    _layout: dict[int, list[tuple[int, int]]]  # the chunks of each partition (see ._spark_chunks)

    def _init_resident(self, resident: bool | None) -> None:
        self._resident_mode = resident
        self._resident: ResidentSession | None = None
        self.resident_steps = 0
        """How many E-steps resident tasks served (the rest ran as one Spark job each)."""
        self.resident_starts = 0
        """How many resident sessions started (more than one per fit after a lost task)."""
        self.resident_off: str | None = None
        """Why resident E-steps are off for the current fit (None while they may run)."""
        self._restarts = 0
        self._announce: str | None = None
        self._events: list[str] = []
        self._fitting = 0

    def _resident_decoder(self) -> Callable[[Any], Any]:
        """``decode(batches) -> chunks (encoded, weights, row ids)``, run once in a resident task."""
        raise NotImplementedError

    def _release_frame(self) -> None:
        """Unpersist ``frame`` (and whatever cache it is a view of)."""
        raise NotImplementedError

    def begin_fit(self) -> None:
        """Called by the EM driver when a fit starts: E-steps may now use resident tasks."""
        if self._fitting == 0:
            self.resident_off, self._restarts = None, 0
        self._fitting += 1

    def take_events(self) -> list[str]:
        """What happened to the resident engine since the last call (for the EM trace), oldest first."""
        events, self._events = self._events, []
        return events

    def _event(self, text: str, level: int = logging.INFO) -> None:
        self._events.append(text)
        logger.log(level, text)

    def end_fit(self) -> None:
        """Called by the EM driver when a fit ends: resident tasks are released."""
        self._fitting = max(self._fitting - 1, 0)
        if self._fitting == 0:
            self.release_workers()

    def release_workers(self) -> None:
        """End the resident tasks, if any, freeing their task slots for other Spark jobs (they start
        again on the next E-step). The EM driver calls this when a fit ends; while resident tasks run
        they hold every task slot, so other jobs on the session would wait."""
        if self._resident is not None:
            self._resident.stop()
            self._resident = None
        _RESIDENT_HANDLES.discard(self)

    def _claim_slots(self) -> bool:
        """Before this handle runs a job or starts resident tasks: other handles' resident tasks hold
        the session's task slots, so they stop, and stay off for the rest of their fit (a fit that
        also scores validation data on Spark alternates two handles; taking the slots back and forth
        would re-encode the data every iteration). True when it took them from a running fit."""
        self.release_workers()
        taken = False
        for other in list(_RESIDENT_HANDLES):
            if other is not self and other._resident is not None:
                other.release_workers()
                if other._fitting > 0:
                    taken = True
                    other.resident_off = _SHARED_SLOTS
                    other._event(f"resident E-steps off for this fit: {_SHARED_SLOTS}")
        return taken

    def _resident_estep(self, request: Any) -> Payload | None:
        """The E-step through resident tasks, or None when they cannot serve it (a job runs it instead).

        A lost task ends the session; the step is recomputed by a job and the next step starts a new
        session (at most :data:`MAX_RESIDENT_RESTARTS` times a fit). With ``resident=True`` the step is
        retried on the new session instead, and anything else that stops resident tasks is an error.
        """
        if self.resident_off is not None:
            return None
        while True:
            try:
                session = self._resident or self._start_resident()
                replies = session.request(request)
            except ResidentUnavailable as err:
                self._resident = None
                retry = err.retry and self._restarts < MAX_RESIDENT_RESTARTS
                if self._resident_mode is True and not retry:
                    raise ValueError(f"resident=True, but resident E-steps are unavailable: {err}") from err
                if not retry:
                    self.resident_off = str(err)
                    self._event(
                        f"resident E-steps off for this fit: {err}; one Spark job per E-step", logging.WARNING
                    )
                    return None
                self._restarts += 1
                self._announce = (
                    f"resident E-steps restarted ({self._restarts} of at most {MAX_RESIDENT_RESTARTS})"
                )
                if self._resident_mode is True:
                    self._event(f"resident E-steps lost: {err}; retrying this step on a new session")
                    continue
                self._event(
                    f"resident E-steps lost: {err}; this step recomputed by a Spark job", logging.WARNING
                )
                return None
            merged: Payload | None = None
            for payload in replies:
                merged = merge_payloads(request[0], merged, payload)
            if merged is None:
                raise EmptyDataError("no rows: every partition of the encoded data is empty")
            self.resident_steps += 1
            if self._announce is not None:
                self._event(f"{self._announce}: {session.describe()}")
                self._announce = None
            return merged

    def _start_resident(self) -> ResidentSession:
        """Start a resident session, laying the encoded data out for the slots first (auto layout)."""
        blocker = resident_blocker(self.frame)
        if blocker is not None:
            raise ResidentUnavailable(blocker)
        if self._claim_slots():
            raise ResidentUnavailable(_SHARED_SLOTS)
        slots = task_slots(self.frame.sparkSession.sparkContext)
        if self.auto_layout and self._relayout_wanted(slots):
            self._relayout(slots)
        if self.num_partitions > slots:
            hint = (
                ""
                if self.auto_layout
                else f" (num_chunks={self.num_partitions}; leave it unset to lay the data out for the slots)"
            )
            raise ResidentUnavailable(
                f"{self.num_partitions} partitions but {slots} task slots{hint}", retry=self.auto_layout
            )
        session = ResidentSession(
            self.frame, self.num_partitions, self._resident_decoder(), accumulate_chunks
        )
        session.start()
        self._resident = session
        _RESIDENT_HANDLES.add(self)
        self.resident_starts += 1
        if self._announce is None:
            self._announce = "resident E-steps started"
        return session

    def _relayout_wanted(self, slots: int) -> bool:
        """Whether laying the chunks out again would fit ``slots`` task slots better: more partitions
        than slots (a resident task each), or fewer with chunks to spare (a single chunk, or one
        per partition, stays where it is: moving it would keep the same slots busy)."""
        if slots <= 0 or self.num_partitions == slots:
            return False
        chunks = sum(len(c) for c in self._layout.values())
        return self.num_partitions > slots or chunks > self.num_partitions

    def _relayout(self, parts: int) -> None:
        """Repartition the cached encoded data into ``parts`` partitions (row ids travel with the rows)."""
        before = self.num_partitions
        try:
            new, layout = spread_chunks(self.frame, parts, self._storage_level)
        except Exception as err:  # a lost executor while copying: the old layout stays
            raise ResidentUnavailable(
                f"could not lay the data out for {parts} slots: {err}", retry=True
            ) from err
        self._release_frame()
        self.frame, self.num_partitions, self._layout = new, parts, layout
        self._event(f"encoded data laid out again for {parts} task slot(s) (was {before} partitions)")


_RESIDENT_HANDLES: weakref.WeakSet[ResidentPolicy] = weakref.WeakSet()
"""Handles whose resident tasks hold the (one) SparkContext's task slots."""
_SHARED_SLOTS = "another encoded-data handle (e.g. validation data) runs Spark jobs in this fit"
MAX_RESIDENT_RESTARTS = 3
"""Resident sessions a fit may start again after lost tasks before it runs one job per E-step."""
EXECUTOR_WAIT = 30.0
"""Seconds a new handle waits for a cluster's first executors before laying out its data."""


def resident_blocker(data: Any) -> str | None:
    """Why this DataFrame's session can never run resident tasks, or None."""
    if is_spark_connect(data):
        return "Spark Connect has no SparkContext for barrier jobs"
    conf = data.sparkSession.sparkContext.getConf()
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        return "dynamic allocation is on (barrier stages need a fixed set of executors)"
    return None


def slots_for_layout(sc: Any) -> int:
    """Task slots to lay the data out for. A cluster application younger than :data:`EXECUTOR_WAIT`
    seconds may still be registering executors: wait for the first, then until the count has been
    steady for 2 s (at most until the application is EXECUTOR_WAIT old); 0 if none came."""
    slots = task_slots(sc)
    if sc.master.startswith("local"):
        return slots
    settle_by = sc.startTime / 1000.0 + EXECUTOR_WAIT
    steady_since = time.time()
    while time.time() < settle_by and (slots == 0 or time.time() - steady_since < 2.0):
        time.sleep(0.2)
        now = task_slots(sc)
        if now != slots:
            slots, steady_since = now, time.time()
    return slots
