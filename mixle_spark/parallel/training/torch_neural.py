"""Streaming neural training over rank shards: each rank reads only its own rows.

:class:`ShardedTensorData` holds this rank's shard of a dataset (tensors sharing dim 0) and the
sizes of every rank's shard. Its :meth:`~ShardedTensorData.train` runs epochs of local mini-batches
through a :class:`~mixle_spark.parallel.training.torch_training.TorchDistributedSession`:

* every rank runs the same number of steps: a shard that runs out first pads its batch with
  zero-weight rows (``schedule_receipt`` records how many real rows each rank had per step);
* the global example count of every step follows from the shard sizes, so no step needs an
  accounting collective: the only collective while training is the gradient all-reduce (DDP's);
* each step's gradient is the exact mean over the real rows of all ranks' batches, so the result
  equals one process training on the union of those batches.

Only data parallelism runs here (a ``dp_replicate`` or ``dp_shard`` plan); tensor, pipeline and
context parallelism are refused
(:class:`~mixle_spark.parallel.training.contracts.UnsupportedParallelismError`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import describe_value
from mixle_spark.parallel.training._optional import group_rank_world, require_torch
from mixle_spark.parallel.training._records import StepReceipt, exact_int
from mixle_spark.parallel.training.contracts import ParallelAxis, UnsupportedParallelismError

__all__ = ["ScheduleReceipt", "ShardedTensorData", "shard_bounds"]

_WHAT = "torch_neural"


def shard_bounds(n: int, world: int) -> list[tuple[int, int]]:
    """Contiguous shards of ``range(n)`` over ``world`` ranks, the first ``n % world`` one row longer."""
    base, extra = divmod(int(n), int(world))
    bounds, start = [], 0
    for r in range(world):
        stop = start + base + (1 if r < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


@dataclass(frozen=True)
class ScheduleReceipt:
    """The plan every rank followed: steps per epoch, shard sizes and real rows per rank per step."""

    epochs: int
    steps_per_epoch: int
    shard_sizes: tuple[int, ...]
    batch_size: int
    real_rows: tuple[tuple[int, ...], ...]  # [step within an epoch][rank]

    @property
    def padded_rows(self) -> int:
        """Padding rows a rank added over one epoch, summed over ranks."""
        return self.steps_per_epoch * self.batch_size * len(self.shard_sizes) - sum(self.shard_sizes)


class ShardedTensorData:
    """This rank's rows of a dataset, for data-parallel training in which ranks never exchange rows.

    Parameters
    ----------
    tensors : sequence of tensors
        This rank's shard (tensors sharing dim 0), or with ``shard_by_rank=True`` the whole dataset,
        of which the rank keeps its :func:`shard_bounds` slice.
    shard_sizes : sequence of int
        Every rank's shard size, in rank order. Required when the tensors are this rank's own
        shard; derived with ``shard_by_rank``.
    batch_size : int
        Rows per rank per step.
    rank, world_size : int
        This process's place (defaults: the process group's, else 0 of 1).
    shuffle, seed : bool, int
        Shuffle each shard per epoch with ``(seed, rank, epoch)``.
    """

    def __init__(
        self,
        tensors: Sequence[Any],
        *,
        batch_size: int,
        shard_sizes: Sequence[int] | None = None,
        shard_by_rank: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        torch = require_torch(_WHAT)
        if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
            raise TypeError(
                f"tensors must be a non-empty sequence of torch tensors, got {describe_value(tensors)}"
            )
        rows = {int(t.shape[0]) for t in tensors}
        if len(rows) != 1:
            raise ValueError(f"tensors must share their first dimension, got lengths {sorted(rows)}")
        batch_size = exact_int("batch_size", batch_size, 1)
        if rank is None or world_size is None:
            rank, world_size = group_rank_world(_WHAT)
        self.rank, self.world_size = int(rank), int(world_size)
        if shard_by_rank:
            bounds = shard_bounds(rows.pop(), self.world_size)
            start, stop = bounds[self.rank]
            tensors = [t[start:stop] for t in tensors]
            shard_sizes = [b - a for a, b in bounds]
        if shard_sizes is None:
            raise ValueError(
                "shard_sizes (every rank's shard size, in rank order) is required unless shard_by_rank=True"
            )
        self.shard_sizes = tuple(int(s) for s in shard_sizes)
        if len(self.shard_sizes) != self.world_size:
            raise ValueError(
                f"shard_sizes has {len(self.shard_sizes)} entries for world_size={self.world_size}"
            )
        if self.shard_sizes[self.rank] != int(tensors[0].shape[0]):
            raise ValueError(
                f"rank {self.rank}'s shard has {int(tensors[0].shape[0])} rows, shard_sizes says "
                f"{self.shard_sizes[self.rank]}"
            )
        empty = [r for r, size in enumerate(self.shard_sizes) if size < 1]
        if empty:
            raise ValueError(f"the shards of ranks {empty} are empty: every rank needs at least one row")
        self.tensors = list(tensors)
        self.batch_size, self.shuffle, self.seed = batch_size, bool(shuffle), int(seed)

    @property
    def steps_per_epoch(self) -> int:
        return max(-(-s // self.batch_size) for s in self.shard_sizes)

    def real_rows(self, step: int) -> tuple[int, ...]:
        """Real rows of every rank's batch at ``step`` of an epoch."""
        return tuple(max(0, min(self.batch_size, s - step * self.batch_size)) for s in self.shard_sizes)

    def schedule(self, epochs: int) -> ScheduleReceipt:
        return ScheduleReceipt(
            epochs,
            self.steps_per_epoch,
            self.shard_sizes,
            self.batch_size,
            tuple(self.real_rows(s) for s in range(self.steps_per_epoch)),
        )

    def batches(self, epoch: int) -> list[tuple[list[Any], Any, int]]:
        """This rank's ``(tensors, weights, real rows)`` per step of ``epoch``, padded to ``batch_size``."""
        torch = require_torch(_WHAT)
        n = self.shard_sizes[self.rank]
        order = (
            np.random.default_rng([self.seed, self.rank, epoch]).permutation(n)
            if self.shuffle
            else np.arange(n)
        )
        out = []
        for step in range(self.steps_per_epoch):
            rows = order[step * self.batch_size : (step + 1) * self.batch_size]
            real = len(rows)
            index = torch.as_tensor(
                np.concatenate([rows, np.zeros(self.batch_size - real, dtype=rows.dtype)])
            )
            weights = torch.zeros(self.batch_size, dtype=torch.float64)
            weights[:real] = 1.0
            out.append(([t[index] for t in self.tensors], weights, real))
        return out

    def train(
        self,
        session: Any,
        loss_fn: Callable[[Any, list[Any]], Any],
        *,
        epochs: int = 1,
        on_step: Callable[[StepReceipt], None] | None = None,
    ) -> tuple[list[StepReceipt], ScheduleReceipt]:
        """Train ``session`` for ``epochs``; ``loss_fn(module, tensors)`` returns one loss per row.

        The session's own ``loss_fn`` is replaced for these steps by one that zeroes padding rows.
        """
        epochs = exact_int("epochs", epochs, 1)
        beyond = [
            a for a in session.plan.active_axes if a not in (ParallelAxis.DP_REPLICATE, ParallelAxis.DP_SHARD)
        ]
        if beyond:
            raise UnsupportedParallelismError(
                "torch_neural trains data-parallel only; the plan asks for "
                + ", ".join(a.value for a in beyond),
                beyond,
            )
        if session.world_size != self.world_size:
            raise ValueError(f"the session has world_size={session.world_size}, the data {self.world_size}")

        def masked(module: Any, batch: Any) -> Any:
            tensors, weights = batch
            losses = loss_fn(module, tensors)
            return losses * weights.to(losses.dtype)

        previous, session.loss_fn = session.loss_fn, masked
        receipts = []
        try:
            for epoch in range(epochs):
                for step, (tensors, weights, real) in enumerate(self.batches(epoch)):
                    receipt = session.step(
                        (tensors, weights), examples=real, global_examples=sum(self.real_rows(step))
                    )
                    receipts.append(receipt)
                    if on_step is not None:
                        on_step(receipt)
        finally:
            session.loss_fn = previous
        return receipts, self.schedule(epochs)
