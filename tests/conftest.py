"""Shared fixtures: one session-scoped local SparkSession (with Delta) for every `spark` test."""

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
