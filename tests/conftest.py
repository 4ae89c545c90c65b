"""Shared fixtures: one session-scoped local SparkSession (with Delta) for every `spark` test, and one
local Ray runtime for the `ray` tests and the Ray jobs that join a running cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from mixle_spark.io import spark_session

    session = spark_session(
        "mixle_spark-tests",
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.task.maxFailures": "1",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "1000",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _no_spark_job_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """Warn, naming the test, when a test leaves a Spark job running in the shared session: its tasks
    would hold task slots for the rest of the suite (once an uncancellable MLlib task did, and every
    later resident fit found its slots busy)."""
    yield
    if "spark" not in request.fixturenames:
        return
    import time
    import warnings

    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        return
    tracker = sc.statusTracker()
    deadline = time.monotonic() + 10.0  # a cancelled job's tasks take a moment to go
    while (stages := tracker.getActiveStageIds()) and time.monotonic() < deadline:
        time.sleep(0.25)
    if stages:
        names = [getattr(tracker.getStageInfo(s), "name", "?") for s in stages]
        warnings.warn(
            f"{request.node.nodeid} left Spark stages {list(stages)} running ({names}): they hold task slots",
            pytest.PytestWarning,
            stacklevel=1,
        )


@pytest.fixture(scope="session")
def ray_runtime() -> Iterator[Any]:
    """A local Ray runtime (2 CPU slots, no dashboard): the runtime a ``--backend ray`` job starts (a
    token of its own, in this process's environment, so jobs run from here may join it with
    ``--ray-address``; its files in a private directory)."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    from mixle_spark.cli._runtimes import start_local_ray

    runtime = start_local_ray(
        ray,
        2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        object_store_memory=512 * 1024 * 1024,
    )
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    yield ray
    runtime.stop()
