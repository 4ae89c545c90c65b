"""MPI tests. Tests marked ``mpi`` and needing several ranks run only under a launcher::

    mpiexec -n 2 python -m pytest tests/mpi -m mpi -q -p no:cacheprovider

(every rank runs the same tests in the same order, so their collective calls match); in a plain
``pytest`` run they are skipped. Ranks other than 0 report quietly (failures are still shown).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mpi._launch import launched_rank, launched_size


def pytest_configure(config: pytest.Config) -> None:
    if launched_size() > 1 and launched_rank() > 0:
        config.option.verbose = -2
        config.option.reportchars = ""


@pytest.fixture()
def comm() -> Any:
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.fixture()
def shared_dir(comm: Any) -> Iterator[Path]:
    """A directory every rank sees (made by rank 0, removed after the test once all ranks are done)."""
    path = comm.bcast(tempfile.mkdtemp(prefix="mixle-mpi-") if comm.Get_rank() == 0 else None, root=0)
    yield Path(path)
    comm.Barrier()
    if comm.Get_rank() == 0:
        shutil.rmtree(path, ignore_errors=True)
