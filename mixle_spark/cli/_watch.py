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

__all__ = ["EVERY", "StepWatch", "spark_tasks"]

EVERY = 30.0
"""Seconds a step runs before its first line, and between lines."""


def spark_tasks(seen: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
    """``(tasks done, tasks)`` of the stages the running Spark application has run since ``seen`` was
    empty (``seen`` keeps each stage's last counts, a finished stage's too); None without Spark."""
    pyspark = sys.modules.get("pyspark")
    context = getattr(getattr(pyspark, "SparkContext", None), "_active_spark_context", None)
    if context is None:
        return None
    tracker = context.statusTracker()
    for stage in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage)
        if info is not None:
            seen[stage] = (int(info.numCompletedTasks), int(info.numTasks))
    for stage in list(seen):
        info = tracker.getStageInfo(stage)
        if info is not None:
            seen[stage] = (int(info.numCompletedTasks), int(info.numTasks))
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
        self._seen: dict[int, tuple[int, int]] = {}
        self._thread = threading.Thread(target=self._run, name=f"{prog}-progress", daemon=True)

    def __enter__(self) -> StepWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def step(self, name: str) -> None:
        """``name`` (``encoding``, ``seeding``) starts now."""
        with self._lock:
            self._name, self._started, self._due, self._seen = name, time.monotonic(), self.every, {}

    def stop(self) -> None:
        """No more lines (the fit's own progress has started, or it ended)."""
        self._stopped.set()
        with self._lock:
            self._name = None

    def line(self, now: float) -> str | None:
        """The line for the step at ``now`` (None when there is no step)."""
        with self._lock:
            name, started, seen = self._name, self._started, self._seen
        if name is None:
            return None
        seconds = now - started
        text = f"{self.prog}: {name} for {seconds:.0f}s"
        try:
            tasks = spark_tasks(seen)
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
