"""The handles a fit runs over: made from the data, told when a fit begins and ends, shared by fits.

What ``estimation`` (``optimize``, ``best_of``, ``initialize``) and ``model_selection`` (``select_k``)
do around the EM loop, in one place: encode the data once (:func:`open_handle`), tell the backend a
fit starts and ends (:func:`begin_fit`, :func:`release`), run one fit from the data to the model
(:func:`fit_data`), advance several fits together over one handle (:func:`fit_together`), derive the
restarts' seeds (:func:`trial_seeds`) and warn about the fitted model (:func:`warn_model_size`, from
:mod:`mixle_spark.em._one_fit`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from mixle_spark._frames import frame_engine
from mixle_spark.em._lockstep import can_share_passes, run_together
from mixle_spark.em._one_fit import warn_model_size
from mixle_spark.em.routine import finished_fit, fit_routine
from mixle_spark.parallel.backends.contract import EncodedData, FitSession
from mixle_spark.parallel.backends.registry import data_identity, encoded_data, is_encoded_data_handle
from mixle_spark.stats._random import RowRandom, seed_to_int
from mixle_spark.stats.base import Distribution, Estimator

if TYPE_CHECKING:
    from mixle_spark.em.options import FitOptions

__all__ = [
    "begin_fit",
    "data_identity_of",
    "fit_data",
    "fit_together",
    "open_handle",
    "release",
    "row_count",
    "trial_seeds",
    "warn_model_size",
]

logger = logging.getLogger("mixle_spark.estimation")


def open_handle(
    data: Any,
    estimator: Estimator | None,
    options: dict[str, Any],
    on_encoded: Callable[[EncodedData], None] | None = None,
) -> tuple[EncodedData, bool]:
    """``(handle, created_here)`` for ``data``, the fit begun on it (:func:`begin_fit`): an existing
    handle is used as it is, anything else encoded with ``encoded_data(data, estimator, **options)``.
    ``on_encoded`` gets the handle before the fit begins (so the encoding it times ends there)."""
    owned = not is_encoded_data_handle(data)
    handle: EncodedData = encoded_data(data, estimator, **options) if owned else encoded_data(data, **options)
    if on_encoded is not None:
        try:
            on_encoded(handle)
        except BaseException:
            if owned:
                handle.close()
            raise
    return begin_fit(handle), owned


def row_count(data: Any) -> int | None:
    """Rows of ``data`` without encoding it (a Spark DataFrame: ``count()``, which reads only metadata
    for Parquet and Delta); None for what cannot be counted so."""
    engine = frame_engine(data)
    if engine == "spark":
        return int(data.count())
    if engine is not None:  # Dask, Ray: counting would read every partition; the handle counts
        return None
    if hasattr(data, "num_rows"):  # pyarrow Table / RecordBatch
        return int(data.num_rows)
    if hasattr(data, "__len__") and not isinstance(data, (str, bytes)):
        return len(data)
    return None


def begin_fit(handle: EncodedData) -> EncodedData:
    """Tell a handle a fit starts (backends may then keep long-lived workers, e.g. resident tasks)."""
    if isinstance(handle, FitSession):
        handle.begin_fit()
    return handle


def release(handle: EncodedData | None, owned: bool) -> None:
    """Tell a handle the fit ended (freeing long-lived workers); close it if this fit built it
    (``owned``). None (no handle was made) is nothing to release."""
    if handle is None:
        return
    if isinstance(handle, FitSession):
        handle.end_fit()
    if owned:
        handle.close()


def data_identity_of(fit: FitOptions, data: Any, backend_options: dict[str, Any]) -> str | None:
    """The identity of ``data`` (:func:`~mixle_spark.parallel.backends.registry.data_identity`)
    when the fit checkpoints (its checkpoints record it), else None: no pass is spent on it."""
    if fit.checkpoint_dir is None:
        return None
    return data_identity(data, backend_options.get("weights"))


def fit_data(
    data: Any,
    estimator: Estimator,
    fit: FitOptions,
    backend_options: dict[str, Any],
    *,
    prev_estimate: Distribution | None = None,
    vdata: Any = None,
    on_encoded: Callable[[EncodedData], None] | None = None,
    started: float | None = None,
) -> tuple[Distribution, int | None]:
    """``(model, rows)``: one EM fit of ``estimator`` to ``data`` as ``fit`` says, over a handle made
    (and released) here unless ``data`` is one; ``rows`` is None when the finished fit came back from
    its checkpoint without the data being read. What ``optimize`` runs (and an update's refit); the
    caller warns about the model (:func:`warn_model_size`), so that the warnings name its caller."""
    identity = data_identity_of(fit, data, backend_options)
    if vdata is None and fit.checkpoint_dir is not None and fit.resume and not is_encoded_data_handle(data):
        rows = row_count(data)
        done = (
            None
            if rows is None
            else finished_fit(fit, estimator, rows, prev_estimate=prev_estimate, data=identity)
        )
        if done is not None:  # a finished fit of this data: returned without encoding it
            return done, None
    handle, owned = open_handle(data, estimator, backend_options, on_encoded)
    vhandle, vowned = (None, False) if vdata is None else open_handle(vdata, estimator, {})
    try:
        run = fit_routine(
            fit, estimator, prev_estimate=prev_estimate, vhandle=vhandle, started=started, data=identity
        )
        return run(handle), len(handle)
    finally:
        release(handle, owned)
        release(vhandle, vowned)


def fit_together(
    handle: EncodedData, runs: list[Callable[[Any], Distribution]], shared: bool = True
) -> list[Distribution]:
    """The models of ``runs`` (fits over ``handle``), advanced together with one pass over the data
    per step for every fit still running (:mod:`mixle_spark.em._lockstep`) when the backend runs row
    passes and ``shared``; else one after the other. Either way each model equals its fit run alone."""
    if shared and len(runs) > 1 and can_share_passes(handle):
        models, passes = run_together(handle, runs)
        logger.info(f"{len(runs)} fits advanced together in {passes} passes over the data")
        return models
    return [run(handle) for run in runs]


def trial_seeds(seed: int | str | None, trials: int) -> list[int]:
    """Distinct, reproducible seeds for ``trials`` restarts derived from one seed."""
    bits = RowRandom(seed_to_int(seed), np.arange(trials, dtype=np.uint64)).child("best_of").bits()
    return [int(b) for b in bits]
