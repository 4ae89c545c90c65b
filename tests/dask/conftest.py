"""A session-scoped local Dask cluster (2 worker processes, 1 thread each) for every `dask` test: the
cluster a ``--backend dask`` job starts (loopback, TLS with a credential of its own, no dashboard)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def dask_client() -> Iterator[Any]:
    pytest.importorskip("distributed")
    from mixle_spark.cli._runtimes import start_local_dask

    session = start_local_dask(2, silence_logs=40)
    yield session.client
    session.stop()
