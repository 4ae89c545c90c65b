"""How a job runs as several processes (``--backend mpi`` under ``mpiexec``, ``--backend torchrun``
under ``torchrun``): every process runs the same job; :class:`Coordination` says which one writes and
prints, and makes the others agree on what it read or on an error.

A single-process job uses :data:`solo`, for which every method is the plain call.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from mixle_spark.cli._common import error_line, exit_code

__all__ = ["SPMD_BACKENDS", "Coordination", "run_spmd", "solo"]

SPMD_BACKENDS = ("mpi", "torchrun")
_T = TypeVar("_T")


class Coordination:
    """One process: it reads, writes and prints everything itself."""

    is_root = True

    def on_root(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` on the root; its result (or error) on every process."""
        return fn()

    def agree(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` on every process; an error anywhere is raised everywhere."""
        return fn()

    def say(self, line: str) -> None:
        """A progress line on stderr, printed by the root only."""
        if self.is_root:
            print(line, file=sys.stderr)

    def where(self) -> str:
        """How the rows are spread, for the ``encoded N rows`` line."""
        return ""

    def handle_options(self) -> dict[str, Any]:
        """``encoded_data`` options that tie the handle to these processes."""
        return {}

    def summary(self) -> dict[str, Any]:
        """What ``summary.json`` records about the processes."""
        return {}


solo = Coordination()


class _Processes(Coordination):
    """The processes of an MPI communicator (mpi4py's, or the torchrun backend's TorchComm)."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.is_root = comm.Get_rank() == 0

    def on_root(self, fn: Callable[[], _T]) -> _T:
        from mixle_spark.parallel.backends.mpi import on_root

        return on_root(self.comm, 0, fn)  # type: ignore[no-any-return]

    def agree(self, fn: Callable[[], _T]) -> _T:
        from mixle_spark.parallel.backends.mpi import agree

        return agree(self.comm, fn)  # type: ignore[no-any-return]

    def where(self) -> str:
        return f" over {self.comm.Get_size()} ranks"

    def handle_options(self) -> dict[str, Any]:
        return {"comm": self.comm}

    def summary(self) -> dict[str, Any]:
        return {"ranks": self.comm.Get_size()}


def _world(backend: str) -> tuple[Any, Callable[[], None]]:
    """The world communicator of ``backend`` and how to release it at the end of the job."""
    if backend == "torchrun":
        from mixle_spark.parallel.backends.torchrun import world_comm

        comm = world_comm()
        return comm, comm.dist.destroy_process_group
    from mixle_spark.parallel.backends.mpi import require_mpi

    return require_mpi().COMM_WORLD, lambda: None


def run_spmd(prog: str, backend: str, body: Callable[[Coordination], Any]) -> int:
    """Run ``body`` on every process: 0 success, 2 bad arguments or input, 1 other failures.

    Errors the processes agreed on are printed once, by the root. Any other error is printed with its
    traceback by the process that raised it; if the others do not all reach the error handler within
    ``MIXLE_SPARK_MPI_ABORT_SECONDS`` (default 30), the job is aborted (``comm.Abort``).
    """
    comm, release = _world(backend)
    try:
        body(_Processes(comm))
        return 0
    except Exception as err:
        code = exit_code(err)
        if not getattr(err, "mpi_agreed", False):
            print(f"{prog}: error on rank {comm.Get_rank()}: {error_line(err)}", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
            # Did every process fail too? Wait for them without blocking; abort the job if not.
            request = comm.Ibarrier()
            deadline = time.monotonic() + float(os.environ.get("MIXLE_SPARK_MPI_ABORT_SECONDS", "30"))
            while not request.Test():
                if time.monotonic() > deadline:
                    sys.stderr.flush()
                    comm.Abort(code)
                time.sleep(0.01)
        elif comm.Get_rank() == 0:
            print(f"{prog}: error: {error_line(err)}", file=sys.stderr)
            if os.environ.get("MIXLE_SPARK_TRACEBACK"):
                traceback.print_exc(file=sys.stderr)
        return code
    finally:
        release()
