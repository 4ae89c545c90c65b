"""One EM fit as a routine over a handle: what :class:`~mixle_spark.em.options.FitOptions` (pure data)
runs, built by the API (``optimize``, ``best_of``, ``select_k``, an update's refit) and run once per
handle, or in lockstep with others (:mod:`mixle_spark.em._lockstep`).

:func:`fit_routine` returns ``run(handle) -> model``; :func:`finished_fit` answers, without the data,
whether the fit's final checkpoint already holds its model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import cast

from mixle_spark.em._one_fit import run_fit
from mixle_spark.em._run import EMRun, FitInputs
from mixle_spark.em.minibatch import minibatch_fit
from mixle_spark.em.options import FitOptions
from mixle_spark.parallel.backends.contract import EncodedData, MiniBatches
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["finished_fit", "fit_routine"]


def fit_routine(
    options: FitOptions,
    estimator: Estimator,
    *,
    seed: int | None = None,
    prev_estimate: Distribution | None = None,
    vhandle: EncodedData | None = None,
    label: str = "",
    started: float | None = None,
    data: str | None = None,
) -> Callable[[EncodedData], Distribution]:
    """The fit routine: ``run(handle) -> model``, one EM fit of ``estimator`` over ``handle`` as
    ``options`` say: full-data EM, or mini-batch (stepwise) EM when the handle serves mini-batches
    (:class:`~mixle_spark.parallel.backends.contract.MiniBatches`, the ``lightning`` backend:
    :func:`~mixle_spark.em.minibatch.minibatch_fit`).

    ``seed`` overrides the options' seed (a restart's); ``label`` prefixes its progress lines;
    ``started`` is when the fit's clock started (default: when ``run`` is called); ``data`` the
    identity of the data (what its checkpoints record)."""
    chosen = options if seed is None else dataclasses.replace(options, seed=seed)
    inputs = FitInputs(prev_estimate=prev_estimate, vhandle=vhandle, label=label, started=started, data=data)

    def run(handle: EncodedData) -> Distribution:
        if isinstance(handle, MiniBatches):  # the backend serves mini-batches: stepwise EM over them
            return minibatch_fit(handle, estimator, chosen, inputs)
        return run_fit(handle, estimator, chosen, inputs)

    return run


def finished_fit(
    options: FitOptions,
    estimator: Estimator,
    rows: int,
    *,
    prev_estimate: Distribution | None = None,
    data: str | None = None,
) -> Distribution | None:
    """The model of this fit when ``options.checkpoint_dir`` holds its final checkpoint (same
    estimator, options, row count and ``data``, the data's identity), without encoding the data; None
    when the fit has to run."""
    if options.checkpoint_dir is None or not options.resume or options.keep_statistics:
        return None  # keep_statistics: the statistics are a pass over the data
    inputs = FitInputs(prev_estimate=prev_estimate, data=data)
    rows_only = cast(EncodedData, _Rows(rows))  # finished() reads the row count, nothing else
    return EMRun(rows_only, estimator, options, inputs).finished()


class _Rows:
    """What a finished fit's checkpoint is checked against without the data: its row count."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n
