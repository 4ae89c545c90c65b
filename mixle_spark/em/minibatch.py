"""Mini-batch (stepwise) EM over the global mini-batches of a data module.

:func:`minibatch_em` takes anything with ``global_minibatches(epoch)`` and ``world_size`` (the
Lightning DataModule of :func:`mixle_spark.parallel.training.lightning_data.encoded_datamodule`) and
runs stepwise EM with :func:`mixle_spark.em.incremental.update` (``method="stepwise"``). Under
``torchrun`` each mini-batch is read through the ``torchrun`` backend: each rank runs the E-step of
its contiguous share and the backend's reduction combines the statistics, so every rank gets the
same model, equal to one process running the same mini-batches.
"""

from __future__ import annotations

import time
from typing import Any

from mixle_spark.em.handles import fit_data, warn_model_size
from mixle_spark.em.incremental import update
from mixle_spark.em.options import FitOptions
from mixle_spark.errors import describe_value
from mixle_spark.parallel.backends.registry import encoded_data
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["minibatch_em"]


def minibatch_em(
    datamodule: Any,
    estimator: Estimator,
    *,
    epochs: int = 5,
    alpha: float = 0.7,
    model: Distribution | None = None,
    seed: int | None = 0,
    distributed: bool | None = None,
    **update_options: Any,
) -> Distribution:
    """Stepwise EM over ``datamodule``'s mini-batches for ``epochs``; the final model (with statistics).

    ``model`` (fitted with ``keep_statistics=True``) continues instead of a fit of the first batch.
    ``distributed`` (default: whether the module has more than one rank) passes each global
    mini-batch through the ``torchrun`` backend, where each rank runs the E-step of its share.
    ``update_options`` go to :func:`~mixle_spark.em.incremental.update`.
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be an integer >= 1, got {describe_value(epochs)}")
    distributed = datamodule.world_size > 1 if distributed is None else distributed

    def rows_of(batch: Any) -> Any:
        if not distributed:
            return batch
        return encoded_data(batch, estimator, backend="torchrun")  # each rank E-steps its contiguous share

    for epoch in range(epochs):
        for batch in datamodule.global_minibatches(epoch):
            data = rows_of(batch)
            try:
                if model is None:  # as optimize(data, estimator, keep_statistics=True, ...) fits it
                    fit, backend_options = FitOptions.gather(
                        None, {"keep_statistics": True, "seed": seed, "print_iter": 0}
                    )
                    model, rows = fit_data(data, estimator, fit, backend_options, started=time.perf_counter())
                    if rows is not None:
                        warn_model_size(model, rows)
                else:
                    model = update(model, data, method="stepwise", alpha=alpha, **update_options)
            finally:
                if data is not batch:
                    data.close()
    assert model is not None
    return model
