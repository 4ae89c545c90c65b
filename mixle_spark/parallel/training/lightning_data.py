"""A Lightning DataModule over a dataset's rows, and mini-batch EM driven by it.

:func:`encoded_datamodule` builds an :class:`EncodedDataModule` (a ``lightning.LightningDataModule``):
its ``train_dataloader`` yields, per global mini-batch, this rank's rows of it. Global mini-batch
``b`` of epoch ``e`` is the slice ``[b * batch_size, (b + 1) * batch_size)`` of a permutation drawn
from ``(seed, e)``; rank ``r`` of ``w`` reads its rows ``r::w``. So the mini-batches of an epoch
partition the data, with no row repeated or dropped (unlike a padding ``DistributedSampler``), and
a batch holds the same rows whatever the number of ranks. (Give a ``Trainer`` that uses the module
``use_distributed_sampler=False``: the ranks are already split.)

:func:`mixle_spark.em.minibatch.minibatch_em` runs stepwise (online) EM over the same global
mini-batches with the incremental-update machinery of :func:`mixle_spark.em.incremental.update`
(``method="stepwise"``, Cappe & Moulines): the first mini-batch is fitted from scratch (statistics
kept), each later one moves the kept statistics towards its own by ``(k + 2) ** -alpha``. Under
``torchrun`` each global mini-batch goes through the ``torchrun`` backend: each rank runs the E-step
of its contiguous share and the backend's reduction combines the statistics, so every rank gets the
same model, equal to one process running the same mini-batches.

Needs ``lightning`` and ``torch`` (the ``lightning`` extra), imported when a module is built.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from mixle_spark.errors import describe_value
from mixle_spark.parallel.training._optional import group_rank_world, require, require_torch
from mixle_spark.parallel.training._records import exact_int

__all__ = ["encoded_datamodule", "global_batch_rows", "take_rows"]

_WHAT = "lightning_data"


def take_rows(data: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` of ``data``: a numpy array, a pandas DataFrame, a pyarrow Table or a list."""
    if isinstance(data, np.ndarray):
        return data[rows]
    if hasattr(data, "iloc"):
        return data.iloc[rows]
    if hasattr(data, "take") and hasattr(data, "num_rows"):
        return data.take(rows)
    if isinstance(data, (list, tuple)):
        return [data[int(i)] for i in rows]
    raise TypeError(
        "data must be a numpy array, a pandas DataFrame, a pyarrow Table or a list of rows, got "
        f"{describe_value(data)}"
    )


def _length(data: Any) -> int:
    return int(data.num_rows) if hasattr(data, "num_rows") else len(data)


def global_batch_rows(
    n: int, batch_size: int, seed: int, epoch: int, *, shuffle: bool = True
) -> list[np.ndarray]:
    """The global mini-batches of ``epoch``: slices of one permutation of ``range(n)`` drawn from
    ``(seed, epoch)``, or (``shuffle=False``) of ``range(n)`` itself, the rows in order."""
    if shuffle:
        order = np.random.default_rng([int(seed), int(epoch)]).permutation(int(n))
    else:
        order = np.arange(int(n), dtype=np.int64)
    return [order[i : i + batch_size] for i in range(0, int(n), batch_size)]


def encoded_datamodule(
    data: Any,
    *,
    batch_size: int | None = None,
    seed: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    shuffle: bool = True,
) -> Any:
    """An :class:`EncodedDataModule` over ``data`` (default ``batch_size``: a tenth of the rows;
    ``shuffle=False``: the mini-batches are the rows in order, the same every epoch)."""
    lightning = require("lightning", extra="lightning", what=_WHAT)
    torch = require_torch(_WHAT)
    n = _length(data)
    if n < 1:
        raise ValueError("data has no rows")
    size = max(1, n // 10) if batch_size is None else exact_int("batch_size", batch_size, 1)
    if type(shuffle) is not bool:
        raise TypeError(f"shuffle must be True or False, got {describe_value(shuffle)}")
    if rank is None or world_size is None:
        rank, world_size = group_rank_world(_WHAT)
    rank, world = int(rank), int(world_size)
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}), got {rank}")

    class _RankBatches(torch.utils.data.Sampler):  # type: ignore[misc, name-defined]
        """This rank's indices of each global mini-batch of the current epoch."""

        def __init__(self) -> None:
            self.epoch = 0

        def __iter__(self) -> Iterator[list[int]]:
            for rows in global_batch_rows(n, size, seed, self.epoch, shuffle=shuffle):
                yield rows[rank::world].tolist()

        def __len__(self) -> int:
            return -(-n // size)

    class EncodedDataModule(lightning.LightningDataModule):  # type: ignore[misc, name-defined]
        """Per global mini-batch, this rank's rows of ``data``."""

        def __init__(self) -> None:
            super().__init__()
            self.data, self.batch_size, self.seed = data, size, seed
            self.rank, self.world_size, self.rows = rank, world, n
            self.sampler = _RankBatches()

        def set_epoch(self, epoch: int) -> None:
            self.sampler.epoch = int(epoch)

        def train_dataloader(self) -> Any:
            indices = torch.utils.data.TensorDataset(torch.arange(n))
            return torch.utils.data.DataLoader(
                indices,
                batch_sampler=self.sampler,
                collate_fn=lambda items: take_rows(
                    data, np.asarray([int(i[0]) for i in items], dtype=np.int64)
                ),
            )

        def minibatches(self, epoch: int) -> Iterator[Any]:
            """This rank's rows of each global mini-batch of ``epoch``."""
            self.set_epoch(epoch)
            yield from self.train_dataloader()

        def global_minibatches(self, epoch: int) -> Iterator[Any]:
            """The rows of each global mini-batch of ``epoch`` (every rank's)."""
            for rows in global_batch_rows(n, size, seed, epoch, shuffle=shuffle):
                yield take_rows(data, rows)

    return EncodedDataModule()
