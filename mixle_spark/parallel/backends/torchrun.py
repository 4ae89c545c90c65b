"""The ``torchrun`` backend: the mpi backend's SPMD handle over ``torch.distributed`` (gloo on CPU).

Every process started by ``torchrun`` builds the handle with the same arguments; rank and world size
come from the torchrun environment (validated by
:meth:`~mixle_spark.parallel.planning.planner.Resources.from_torchrun`), the default process group is
initialised with the ``gloo`` backend when it is not already, and :class:`TorchComm` gives the
handle the few object collectives it needs (allgather, broadcast, scatter, point-to-point for the
binomial reduction tree). Everything else — shares, scans, the E-step, the tree merge in rank order,
the M-step on the root and its broadcast, error agreement — is
:class:`~mixle_spark.parallel.backends.mpi.MPIEncodedData`, so the estimates equal the local backend's.

The fit job runs on it under torchrun::

    torchrun --nproc-per-node 2 -m mixle_spark.cli.fit --backend torchrun \
        --input PATH --model SPEC --output DIR

torch is an optional extra (``pip install 'mixle-spark[torch]'``), imported on first use.
"""

from __future__ import annotations

import os
from typing import Any, TextIO

from mixle_spark.parallel._torch_group import default_group
from mixle_spark.parallel._torch_group import require_torch_distributed as torch_distributed
from mixle_spark.parallel.backends.controls import take_controls
from mixle_spark.parallel.backends.mpi import MPIEncodedData, root_only_output
from mixle_spark.stats.base import Distribution, Estimator

__all__ = [
    "TORCHRUN_CONTROLS",
    "TorchComm",
    "TorchRunEncodedData",
    "make_torchrun",
    "require_torch_distributed",
    "torchrun_out",
]

_WHAT = "the torchrun backend"

TORCHRUN_CONTROLS = ("encoder", "num_chunks", "sub_chunks", "comm", "root", "root_only", "num_workers")


def require_torch_distributed() -> Any:
    """``torch.distributed``, or a one-line ImportError saying how to install it."""
    return torch_distributed(_WHAT)


class _Pending:
    """An mpi4py-style request over a torch async work handle (``Test`` = completed)."""

    def __init__(self, work: Any) -> None:
        self.work = work

    def Test(self) -> bool:
        return bool(self.work is None or self.work.is_completed())


class TorchComm:
    """The mpi4py communicator methods the SPMD handle uses, over a ``torch.distributed`` group.

    Parameters
    ----------
    dist : module
        ``torch.distributed`` (or an object with the same functions).
    group : ProcessGroup, optional
        Default: the world. Ranks given to ``bcast`` / ``send`` / ``recv`` are global ranks.
    """

    def __init__(self, dist: Any, group: Any = None) -> None:
        self.dist = dist
        self.group = group

    def Get_rank(self) -> int:
        return int(self.dist.get_rank(self.group))

    def Get_size(self) -> int:
        return int(self.dist.get_world_size(self.group))

    def allgather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.Get_size()
        self.dist.all_gather_object(out, obj, group=self.group)
        return out

    def bcast(self, obj: Any, root: int = 0) -> Any:
        box = [obj]
        self.dist.broadcast_object_list(box, src=root, group=self.group)
        return box[0]

    def scatter(self, items: Any, root: int = 0) -> Any:
        out: list[Any] = [None]
        self.dist.scatter_object_list(
            out, items if self.Get_rank() == root else None, src=root, group=self.group
        )
        return out[0]

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        # gloo keeps the order of messages between two ranks, which is all the reduction tree needs.
        self.dist.send_object_list([obj], dst=dest, group=self.group)

    def recv(self, source: int, tag: int = 0) -> Any:
        box: list[Any] = [None]
        self.dist.recv_object_list(box, src=source, group=self.group)
        return box[0]

    def Barrier(self) -> None:
        self.dist.barrier(group=self.group)

    def Ibarrier(self) -> _Pending:
        return _Pending(self.dist.barrier(group=self.group, async_op=True))

    def Abort(self, code: int = 1) -> None:
        # torchrun's agent stops the other workers when one exits non-zero.
        os._exit(code)

    def Dup(self) -> TorchComm:
        return self

    def Free(self) -> None:
        """Nothing to free: the process group belongs to the caller (or to the entry point)."""


def world_comm(group: Any = None) -> TorchComm:
    """A :class:`TorchComm` over the default group, initialised with gloo from the torchrun
    environment (rank, world size and topology validated first) when it is not already
    (:func:`~mixle_spark.parallel._torch_group.default_group`, shared with the training package)."""
    dist = default_group(_WHAT, backend="gloo")
    if dist is None:
        raise RuntimeError(
            f"{_WHAT} needs a torch.distributed process group: launch the job with torchrun "
            "(torchrun --nproc-per-node N ...), initialise the default group yourself, or pass comm="
        )
    return TorchComm(dist, group)


class TorchRunEncodedData(MPIEncodedData):
    """Encoded data shared by the processes of a ``torchrun`` job (the ``torchrun`` backend).

    Same parameters as :class:`~mixle_spark.parallel.backends.mpi.MPIEncodedData`; ``comm`` is a
    :class:`TorchComm` (default: the world group, initialised with gloo when needed) or a
    ``torch.distributed`` process group.
    """

    def __init__(
        self,
        data: Any,
        estimator: Estimator | None = None,
        model: Distribution | None = None,
        *,
        comm: Any = None,
        **options: Any,
    ) -> None:
        if not isinstance(comm, TorchComm):
            comm = world_comm(comm)
        super().__init__(data, estimator, model, comm=comm, **options)


def make_torchrun(data: Any, estimator: Any = None, model: Any = None, **options: Any) -> TorchRunEncodedData:
    """Registry factory of the ``torchrun`` backend: honours :data:`TORCHRUN_CONTROLS` (``comm`` =
    a process group or :class:`TorchComm`; ``engine`` / ``precision`` store each process's share at
    that precision, as the ``mpi`` backend does) and refuses the other controls of ``encoded_data``."""
    controls = take_controls("torchrun", options, (*TORCHRUN_CONTROLS, "engine", "precision"), computes=True)
    return TorchRunEncodedData(data, estimator=estimator, model=model, **controls, **options)


def _launch_rank() -> int:
    """This process's rank from the torchrun environment (``RANK``; 0 when unset)."""
    value = os.environ.get("RANK", "").strip()
    if not value:
        return 0
    try:
        rank = int(value)
    except ValueError:
        rank = -1
    if rank < 0:
        raise ValueError(f"RANK: expected a non-negative integer from torchrun, got {value!r}")
    return rank


def torchrun_out(root: int = 0, group: Any = None) -> TextIO:
    """The ``out`` of a torchrun fit, so its progress is printed once: ``sys.stdout`` on rank
    ``root``, a stream that discards on every other rank.

    The rank is the process group's when ``torch.distributed`` is initialised (of ``group``, default
    the world), else the ``RANK`` torchrun sets (0 when absent: one process, or torch not
    installed), so it can be called before the handle initialises the group.
    """
    try:
        dist = torch_distributed(_WHAT)
    except ImportError:
        dist = None
    if dist is not None and dist.is_available() and dist.is_initialized():
        return root_only_output(int(dist.get_rank(group)), root, int(dist.get_world_size(group)))
    return root_only_output(_launch_rank(), root)
