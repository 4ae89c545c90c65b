"""A line on stderr while a long step before the first EM iteration runs (encoding the input, seeding
the starting model), so that a fit of a large table does not sit silent for minutes.

Nothing is printed for a step shorter than :data:`EVERY` seconds (no noise on small fits); after that,
one line every :data:`EVERY` seconds with the step, its seconds so far and, on Spark, the tasks its
jobs have completed and their rate, read from the driver's status tracker (no extra job, no
accumulator on the executors: the counts Spark keeps anyway)::

    em_fit: encoding for 30s; Spark tasks 34 of 80 done (1.1/s)

The rows done are not known to the driver until a pass ends (each task reports its rows when it
completes, with its statistics), so the Spark tasks stand for them.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import IO, Any

__all__ = ["EVERY", "StepWatch", "last_job", "spark_tasks"]

EVERY = 30.0
"""Seconds a step runs before its first line, and between lines."""


def _tracker() -> Any:
    """The running Spark application's status tracker, or None (no Spark imported or running)."""
    pyspark = sys.modules.get("pyspark")
    context = getattr(getattr(pyspark, "SparkContext", None), "_active_spark_context", None)
    return None if context is None else context.statusTracker()


def _job_ids(tracker: Any) -> set[int]:
    return {int(j) for j in tracker.getJobIdsForGroup()} | {int(j) for j in tracker.getActiveJobsIds()}


def last_job() -> int:
    """The newest Spark job's id (-1: none, or no Spark): a step's jobs are the ones after it."""
    tracker = _tracker()
    return max(_job_ids(tracker), default=-1) if tracker is not None else -1


def spark_tasks(seen: dict[int, tuple[int, int]], after_job: int = -1) -> tuple[int, int] | None:
    """``(tasks done, tasks)`` of the stages of the Spark jobs after ``after_job`` (the jobs of no job
    group, and the active ones), or None without Spark or such a job. ``seen`` keeps each stage's
    last counts, for a stage the tracker has let go of."""
    tracker = _tracker()
    if tracker is None:
        return None
    for job in sorted(j for j in _job_ids(tracker) if j > after_job):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            stage_info = tracker.getStageInfo(stage)
            if stage_info is not None:
                seen[int(stage)] = (int(stage_info.numCompletedTasks), int(stage_info.numTasks))
    if not seen:
        return None
    return sum(d for d, _ in seen.values()), sum(t for _, t in seen.values())


class StepWatch:
    """Watches the named step set by :meth:`step` from a daemon thread and writes its lines to
    ``out`` (prefixed ``prog: ``) while it runs longer than ``every`` seconds; :meth:`stop` ends it.
    A context manager."""

    def __init__(self, out: IO[str], prog: str, every: float = EVERY) -> None:
        self.out, self.prog, self.every = out, prog, every
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._name: str | None = None
        self._started = 0.0
        self._due = every
        self._after_job = -1
        self._seen: dict[int, tuple[int, int]] = {}
        self._thread = threading.Thread(target=self._run, name=f"{prog}-progress", daemon=True)

    def __enter__(self) -> StepWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def step(self, name: str) -> None:
        """``name`` (``encoding``, ``seeding``) starts now."""
        try:
            after = last_job()
        except Exception:  # a session stopping: no task counts
            after = -1
        with self._lock:
            self._name, self._started, self._due, self._seen = name, time.monotonic(), self.every, {}
            self._after_job = after

    def stop(self) -> None:
        """No more lines (the fit's own progress has started, or it ended)."""
        self._stopped.set()
        with self._lock:
            self._name = None

    def line(self, now: float) -> str | None:
        """The line for the step at ``now`` (None when there is no step)."""
        with self._lock:
            name, started, seen, after = self._name, self._started, self._seen, self._after_job
        if name is None:
            return None
        seconds = now - started
        text = f"{self.prog}: {name} for {seconds:.0f}s"
        try:
            tasks = spark_tasks(seen, after)
        except Exception:  # a session stopping under us: the seconds alone
            tasks = None
        if tasks is not None:
            done, total = tasks
            text += f"; Spark tasks {done} of {total} done ({done / max(seconds, 1e-9):.1f}/s)"
        return text

    def _run(self) -> None:
        while not self._stopped.wait(min(1.0, self.every / 4)):
            with self._lock:
                name, started, due = self._name, self._started, self._due
            if name is None or time.monotonic() - started < due:
                continue
            text = self.line(time.monotonic())
            with self._lock:
                if text is None or self._name != name or self._started != started:
                    continue  # the step changed meanwhile
                self._due = due + self.every
                self.out.write(text + "\n")
                self.out.flush()
