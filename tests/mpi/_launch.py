"""Where the MPI tests run: the launcher's environment, the mpiexec beside this Python."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")
_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def launched_size() -> int:
    """Ranks in this job according to the launcher's environment (1 when not under mpiexec)."""
    for name in _SIZE_VARIABLES:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


def launched_rank() -> int:
    for name in _RANK_VARIABLES:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def mpiexec() -> str | None:
    """The launcher beside this Python (the ``mpich`` wheel installs it there), else on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


spmd = pytest.mark.skipif(launched_size() < 2, reason="SPMD test: run under mpiexec -n 2 (or more)")

launcher = pytest.mark.skipif(
    launched_size() > 1 or mpiexec() is None,
    reason="needs mpiexec (pip install 'mixle-spark[mpi]'); not run inside an MPI job",
)
