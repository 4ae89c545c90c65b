"""``mpi_out`` under mpiexec: an SPMD fit's progress is printed by the root rank only."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.parallel.backends.mpi import MPIEncodedData, mpi_out
from mixle_spark.stats import GaussianEstimator, MixtureEstimator
from tests.mpi._launch import spmd

pytestmark = [pytest.mark.mpi, spmd]


@pytest.mark.filterwarnings("ignore::mixle_spark.errors.ConvergenceWarning")
def test_only_the_root_prints_the_progress(comm: Any, capsys: pytest.CaptureFixture[str]) -> None:
    rank = comm.Get_rank()
    x = np.random.default_rng(3).normal(size=400).tolist()
    out = mpi_out(comm)
    assert (out is sys.stdout) == (rank == 0)
    with MPIEncodedData(x, MixtureEstimator([GaussianEstimator()] * 2), comm=comm) as handle:
        model = optimize(handle, MixtureEstimator([GaussianEstimator()] * 2), max_its=4, seed=0, out=out)
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if line.startswith("iteration")]
    counts = comm.allgather(len(lines))
    assert counts[0] >= 4 and all(c == 0 for c in counts[1:])
    mus = comm.allgather([c.mu for c in model.components])
    assert all(m == mus[0] for m in mus)  # every rank still returns the same model
    moved = mpi_out(comm, root=comm.Get_size() - 1)
    assert (moved is sys.stdout) == (rank == comm.Get_size() - 1)
