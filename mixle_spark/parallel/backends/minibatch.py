"""The ``lightning`` backend (aliases ``pl``, ``minibatch``): encoded data fitted by mini-batch EM.

:class:`LightningEncodedData` is the reference's Lightning handle: ``encoded_data(X, estimator,
backend="lightning", batch_size=..., shuffle=True, seed=0)``. It declares
:class:`~mixle_spark.parallel.backends.contract.MiniBatches`, so a fit over it (``optimize``,
``best_of``, ``select_k``) runs mini-batch (stepwise) EM over its global mini-batches
(:func:`~mixle_spark.em.minibatch.minibatch_fit`), never a full-data EM step: global mini-batch ``b``
of epoch ``e`` is the slice ``[b * batch_size, (b + 1) * batch_size)`` of a permutation drawn from
``(seed, e)`` (``shuffle=False``: of the rows in order), the batches of
:func:`~mixle_spark.parallel.training.lightning_data.global_batch_rows`, so the model equals
``minibatch_em(encoded_datamodule(X, batch_size=..., seed=...), estimator)``'s.

The rows are also encoded whole, in this process, as the ``local`` backend holds them (this class is
a :class:`~mixle_spark.parallel.backends.local.LocalEncodedData`, which is why the module belongs to
the local backend): its ``pysp_*`` passes read every row (scoring a model, statistics, seeding), and
so are full-data passes, what scoring over all rows needs. Lightning and torch are not needed: the
mini-batches are cut with numpy; :attr:`LightningEncodedData.datamodule` builds the Lightning
DataModule over the same batches for a ``Trainer`` (that one needs the ``lightning`` extra).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from mixle_spark._checks import Check, integer, number
from mixle_spark.parallel.backends.controls import take_controls
from mixle_spark.parallel.backends.local import LocalEncodedData
from mixle_spark.parallel.training.lightning_data import encoded_datamodule, global_batch_rows, take_rows
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["LIGHTNING_CONTROLS", "LightningEncodedData", "make_lightning"]

_CHECKS: dict[str, Check] = {
    "batch_size": integer(1),
    "shuffle": Check("True or False", lambda v: type(v) is bool),
    "seed": integer(0),
    "epochs": integer(1),
    "alpha": number(0.5, 1, low_open=True),
}


class LightningEncodedData(LocalEncodedData):
    """Rows served as shuffled global mini-batches; fitted by mini-batch (stepwise) EM.

    Parameters
    ----------
    data : list, numpy array, pandas DataFrame or pyarrow Table
        The records (a Record model reads the columns its fields name; any other model a table of
        one column).
    estimator, model : what the rows are encoded for (as the ``local`` backend).
    batch_size : int, optional
        Rows per global mini-batch (the last of an epoch holds the rest); default a tenth of the
        rows (at least 1).
    shuffle : bool
        True (default): each epoch's batches are slices of a permutation of the rows drawn from
        ``(seed, epoch)``; False: slices of the rows in order, the same every epoch.
    seed : int
        The seed of the permutations (>= 0; not the fit's ``seed``, which seeds the first
        mini-batch's fit).
    epochs : int
        Passes over the mini-batches a fit makes (default 5).
    alpha : float
        The stepwise step exponent, in (0.5, 1]: batch ``k`` moves the statistics by
        ``(k + 2) ** -alpha`` (default 0.7).
    num_chunks, sub_chunks, parallel_chunks, chunk_workers, chunk_size :
        How the full-data passes chunk the rows (as the ``local`` backend); the mini-batches are
        unaffected.
    """

    backend_name = "lightning"
    world_size = 1

    def __init__(
        self,
        data: Any,
        estimator: Estimator | None = None,
        model: Distribution | None = None,
        *,
        batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        epochs: int = 5,
        alpha: float = 0.7,
        **options: Any,
    ) -> None:
        given = {"shuffle": shuffle, "seed": seed, "epochs": epochs, "alpha": alpha}
        if batch_size is not None:  # None: a tenth of the rows
            given["batch_size"] = batch_size
        checked = {name: _CHECKS[name](value, name) for name, value in given.items()}
        for name in ("weights", "column", "encoder"):
            if options.get(name) is not None:
                raise ValueError(
                    f"the 'lightning' backend cannot honour {name}={options[name]!r}: its mini-batches are "
                    "the rows as given, read with the estimator's encoder (select the column first; "
                    "mini-batch EM takes no row weights)"
                )
        take_rows(data, np.zeros(0, dtype=np.int64))  # a kind of rows it can cut batches from
        super().__init__(data, estimator=estimator, model=model, **options)
        self._rows = data
        self.batch_size: int = checked.get("batch_size") or max(1, self.n // 10)
        self.shuffle: bool = checked["shuffle"]
        self.seed: int = checked["seed"]
        self.epochs: int = checked["epochs"]
        self.alpha: float = float(checked["alpha"])

    def batch_rows(self, epoch: int) -> list[np.ndarray]:
        """The row indices of each global mini-batch of ``epoch``, in order."""
        return global_batch_rows(self.n, self.batch_size, self.seed, epoch, shuffle=self.shuffle)

    def global_minibatches(self, epoch: int) -> Iterator[Any]:
        """The rows of each global mini-batch of ``epoch`` (of the kind given: array, table, list)."""
        if self._closed:
            raise ValueError("this encoded-data handle is closed")
        for rows in self.batch_rows(epoch):
            yield take_rows(self._rows, rows)

    @property
    def datamodule(self) -> Any:
        """A Lightning DataModule over the same global mini-batches (one rank; needs the
        ``lightning`` extra)."""
        return encoded_datamodule(
            self._rows, batch_size=self.batch_size, seed=self.seed, shuffle=self.shuffle, rank=0, world_size=1
        )

    def close(self) -> None:
        """Release the encoded chunks and the rows (idempotent)."""
        super().close()
        self._rows = None


LIGHTNING_CONTROLS = (
    "batch_size",
    "shuffle",
    "seed",
    "num_chunks",
    "sub_chunks",
    "parallel_chunks",
    "chunk_workers",
    "engine",
    "precision",
)


def make_lightning(
    data: Any, estimator: Any = None, model: Any = None, **options: Any
) -> LightningEncodedData:
    """Registry factory of the ``lightning`` backend: honours :data:`LIGHTNING_CONTROLS` (and its own
    ``epochs``, ``alpha``, ``chunk_size``) and refuses the other controls of ``encoded_data``."""
    controls = take_controls("lightning", options, LIGHTNING_CONTROLS)
    return LightningEncodedData(data, estimator=estimator, model=model, **controls, **options)
