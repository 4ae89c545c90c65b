"""Kept statistics and incremental updates under mpiexec (SPMD: every rank runs every test, in order).

Each test runs on every rank with the local backend and with the mpi backend from the same data and
seed, and requires the same models, statistics and update reports to 1e-9 relative (the local run is
the reference; the scenario is tests/spark/test_incremental_spark.py's), and the same model on every
rank.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mixle_spark.estimation import optimize
from mixle_spark.parallel.backends.mpi import MPIEncodedData
from tests.mpi._launch import spmd
from tests.spark.test_incremental_spark import (
    EST,
    FIT,
    assert_same_model,
    assert_same_update,
    tables,
    updates,
)

pytestmark = [pytest.mark.mpi, spmd]


def _same_on_every_rank(comm: Any, model: Any) -> bool:
    """The parameters and the statistics bit for bit (the model file's update record holds a time)."""
    saved = json.dumps([model.to_dict(), model.statistics.to_dict()])
    return len(set(comm.allgather(saved))) == 1


def test_a_fit_keeps_the_local_statistics(comm: Any) -> None:
    old, _new = tables()
    want = optimize(old, EST, **FIT)
    got = optimize(old, EST, backend="mpi", comm=comm, num_chunks=2, **FIT)
    assert got.statistics.rows == 2000
    assert_same_model(got, want)
    assert _same_on_every_rank(comm, got)


def test_updates_equal_the_local_ones(comm: Any) -> None:
    old, new = tables()
    model = optimize(old, EST, **FIT)
    want = updates(model, new)
    with MPIEncodedData(new, EST, comm=comm) as handle:
        # the new rows are sorted by label: the ranks see different vocabularies, the last "z" only
        seen = comm.allgather(
            sorted(set(new.column("c").to_pylist()[handle.offset : handle.offset + handle.local_rows]))
        )
        assert seen[0] != seen[-1] and "z" in seen[-1]
    got = updates(model, new, backend="mpi", comm=comm, num_chunks=2)
    for method, updated in got.items():
        assert_same_update(updated, want[method])
        assert _same_on_every_rank(comm, updated)
