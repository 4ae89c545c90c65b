"""A session-scoped local Dask cluster (2 worker processes, 1 thread each) for every `dask` test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def dask_client() -> Iterator[Any]:
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    )
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()
