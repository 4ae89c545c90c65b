"""How many tasks a Spark session runs at once: what the spark backend lays its data out for and what
planning reports (``Resources.from_spark``), in one place that is neither (so a fit on Spark loads no
planning code). No pyspark import: the SparkContext is read through its JVM gateway."""

from __future__ import annotations

from typing import Any

__all__ = ["task_slots"]


def task_slots(sc: Any) -> int:
    """Tasks a Spark session can run at once: executors' cores / ``spark.task.cpus`` as Spark's
    scheduler counts them for the default resource profile (not ``spark.default.parallelism``); 0
    before any executor has registered. The spark backend lays its data out for this many tasks."""
    jsc = sc._jsc.sc()
    return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
