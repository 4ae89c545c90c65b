"""A session-scoped local Ray runtime (2 CPU slots, no dashboard) for every `ray` test: the runtime a
``--backend ray`` job starts (a token of its own, its files in a private directory)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_runtime() -> Iterator[Any]:
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
