"""The EM driver: ``initialize``, ``iterate``, ``optimize`` and ``best_of`` over any encoded-data handle.

One iteration is one pass over the data: the handle's E-step fold returns the statistics for the
next model *and* the log-likelihood of the current one (``pysp_em_step``), so convergence is judged
without a second scoring pass. A final pass scores the last model, so the returned model's
log-likelihood is always known.

Rules (see ``FitResult``):

* a step is accepted only when its log-likelihood is finite; the initial model may score -inf (a
  sample can miss a rare label), every later model must not: a NaN / -inf log-likelihood raises
  :class:`~mixle_spark.errors.NonFiniteLikelihoodError` naming the iteration, the non-finite
  parameters (and so the component) and a row with zero density;
* EM stops when ``0 <= gain < delta``, where a drop within rounding (``DECREASE_RTOL``) counts as a
  gain of 0 (pseudo-counts make the M-step MAP, whose plain log-likelihood can dip by ~1e-10
  relative near the optimum); ``delta=None`` runs exactly ``max_its`` iterations;
* a decrease beyond rounding (``1e-9`` relative) stops the run and the best model seen is returned;
* not converging within ``max_its`` emits a :class:`~mixle_spark.errors.ConvergenceWarning`.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from mixle_spark.em._lockstep import can_share_passes, run_together
from mixle_spark.em._records import (
    DECREASE_RTOL,
    FLOOR_WEIGHT,
    MAX_RESEEDS,
    ON_DEGENERATE,
    FitResult,
    IterationRecord,
    Progress,
    check_rows,
    init_fraction,
)
from mixle_spark.em._run import EMRun, Settings, start_model
from mixle_spark.em.seeding import Seeding
from mixle_spark.errors import ConvergenceWarning
from mixle_spark.parallel.backends.contract import FitSession
from mixle_spark.stats._random import RowRandom, seed_to_int
from mixle_spark.stats.base import Distribution, Estimator

__all__ = [
    "DECREASE_RTOL",
    "FLOOR_WEIGHT",
    "MAX_RESEEDS",
    "ON_DEGENERATE",
    "FitResult",
    "IterationRecord",
    "best_of",
    "init_fraction",
    "initialize",
    "iterate",
    "optimize",
]

logger = logging.getLogger("mixle_spark.estimation")


def _handle(data: Any, estimator: Estimator | None, options: dict[str, Any]) -> tuple[Any, bool]:
    """(handle, created_here) for ``data``: an existing handle is used as it is."""
    from mixle_spark.parallel import encoded_data, is_encoded_data_handle

    if is_encoded_data_handle(data):
        return _begin(encoded_data(data, **options)), False
    return _begin(encoded_data(data, estimator, **options)), True


def _begin(handle: Any) -> Any:
    """Tell a handle a fit starts (backends may then keep long-lived workers, e.g. resident tasks)."""
    if isinstance(handle, FitSession):
        handle.begin_fit()
    return handle


def _release(handle: Any, owned: bool) -> None:
    """Tell a handle the fit ended (freeing long-lived workers); close it if this call built it."""
    if handle is None:
        return
    if isinstance(handle, FitSession):
        handle.end_fit()
    if owned:
        handle.close()


def initialize(
    data: Any,
    estimator: Estimator,
    *,
    seed: int | None = None,
    p: float = 0.1,
    init: str | Seeding = "kmeans||",
    init_steps: int | None = None,
    **backend_options: Any,
) -> Distribution:
    """The model ``optimize`` would start from: seeded by k-means|| (``init="kmeans||"``, mixtures and
    hidden Markov models; see :mod:`mixle_spark.em.seeding`), or (``init="random"``, and models with no
    clusters to seed) rows kept with probability ``p`` (by a hash of seed and row id) and randomised
    statistics (mixtures: random responsibilities) from the same row-keyed stream."""
    seeding = Seeding.build(init, init_steps)
    handle, owned = _handle(data, estimator, backend_options)
    try:
        check_rows(handle, estimator)
        return start_model(handle, estimator, seed_to_int(seed), p, seeding)
    finally:
        _release(handle, owned)


def optimize(
    data: Any,
    estimator: Estimator,
    max_its: int = 10,
    delta: float | None = 1e-9,
    init_p: float = 0.1,
    seed: int | None = None,
    prev_estimate: Distribution | None = None,
    init_estimator: Estimator | None = None,
    vdata: Any = None,
    out: IO[str] | None = None,
    print_iter: int = 1,
    *,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 1,
    resume: bool = True,
    on_degenerate: str = "stop",
    audit: Any = None,
    trace_path: str | os.PathLike[str] | None = None,
    mlflow: bool | None = None,
    init: str | Seeding = "kmeans||",
    init_steps: int | None = None,
    **backend_options: Any,
) -> Distribution:
    """Fit ``estimator`` to ``data`` by EM and return the model (with ``model.fit_result``).

    Parameters
    ----------
    data : encoded-data handle, list, numpy array, pandas / Spark DataFrame or pyarrow Table
        Anything else than a handle is encoded with ``encoded_data(data, estimator, **backend_options)``.
    estimator : Estimator
        What to fit.
    max_its : int
        Most EM iterations (each one E-step and one M-step, one pass over the data).
    delta : float or None
        Stop when the log-likelihood gain is in ``[0, delta)``; None runs exactly ``max_its``.
    init_p : float
        Fraction of rows used for a random initial model (``init="random"``).
    seed : int, optional
        Seed of the initialization (None means 0: an unseeded fit is deterministic).
    prev_estimate : Distribution, optional
        Start from this model instead of initializing.
    init_estimator : Estimator, optional
        Estimator used only for the initial model (e.g. one with pseudo-counts).
    vdata : optional
        Validation data: the model with the best validation log-likelihood is returned.
    out : text stream, optional
        Where per-iteration progress lines go (they are always logged at INFO too).
    print_iter : int
        Print every ``print_iter``-th iteration.
    checkpoint_dir : path or URI, optional
        Write a checkpoint there every ``checkpoint_every`` iterations and resume from the newest
        valid one (:mod:`mixle_spark.em.resilient`): an interrupted fit re-run with the
        same arguments continues where it stopped and gives the uninterrupted run's estimates.
    checkpoint_every : int
        Iterations between checkpoints (>= 1).
    resume : bool
        False ignores and replaces existing checkpoints in ``checkpoint_dir``.
    on_degenerate : {"stop", "floor", "reseed"}
        When an M-step cannot build a mixture component (its statistics are NaN or infinite, e.g.
        squares that overflowed) — caught at that iteration, never passed on:
        ``stop`` raises :class:`~mixle_spark.errors.DegenerateComponentError` naming the iteration
        and the component (``err.last_model`` is the model it started from); ``floor`` keeps the
        component's previous parameters with at least :data:`FLOOR_WEIGHT` weight; ``reseed``
        restarts it from a fresh random sample of rows (drawn from the seed, the iteration and the
        component) with weight ``1/K``, at most :data:`MAX_RESEEDS` times per component (then the
        fit stops as with ``stop``: the data does not support that many components). A component
        left with weight 0 (no rows) is reported in the trace; ``floor`` gives it
        :data:`FLOOR_WEIGHT`, ``reseed`` restarts it.
    audit : SDCAudit or True, optional
        Silent-corruption audit (:class:`~mixle_spark.em.sdc_audit.SDCAudit`; True = defaults):
        recompute a sample of partitions by an independent pass and compare.
    trace_path : path, optional
        Write the EM trace there as JSON lines while the fit runs (one line per iteration).
    mlflow : bool, optional
        Log per-iteration metrics to MLflow; None (default) does when mlflow is installed and a run
        is active.
    init : {"kmeans||", "random"} or Seeding
        How the starting model is made when ``prev_estimate`` is not given (:mod:`mixle_spark.em.seeding`).
        ``"kmeans||"`` (default) seeds mixtures and hidden Markov models by distributed k-means||
        over a numeric embedding of the records, then builds each component from the rows nearest
        its centre (a few passes over the data); ``"random"`` uses random responsibilities over a
        row sample of fraction ``init_p``. Other models start alike either way.
    init_steps : int, optional
        k-means|| rounds (pyspark.ml ``initSteps``; default 2).

    The per-iteration trace (:class:`~mixle_spark.em.observability.EMTrace`: log-likelihood,
    gain, rows, seconds, rows/s, bytes of statistics merged, partition time skew, component
    weights, events) is returned as ``model.fit_result.trace``.
    """
    if max_its < 0:
        raise ValueError(f"max_its must be >= 0, got {max_its}")
    if delta is not None and not (delta >= 0):
        raise ValueError(f"delta must be >= 0 or None, got {delta}")
    settings = Settings.build(
        checkpoint_dir, checkpoint_every, resume, on_degenerate, audit, trace_path, mlflow, init, init_steps
    )
    started = time.perf_counter()
    handle, owned = _handle(data, estimator, backend_options)
    vhandle, vowned = (None, False) if vdata is None else _handle(vdata, estimator, {})
    try:
        return EMRun(
            handle,
            vhandle,
            estimator,
            max_its,
            delta,
            init_p,
            seed_to_int(seed),
            prev_estimate,
            init_estimator,
            Progress(out, print_iter),
            started,
            settings,
        ).run()
    finally:
        _release(handle, owned)
        _release(vhandle, vowned)


def iterate(data: Any, estimator: Estimator, max_its: int = 10, **kwargs: Any) -> Distribution:
    """Exactly ``max_its`` EM iterations (``optimize`` with ``delta=None``)."""
    kwargs.pop("delta", None)
    return optimize(data, estimator, max_its=max_its, delta=None, **kwargs)


def _em_run(
    estimator: Estimator,
    max_its: int,
    delta: float | None,
    init_p: float,
    seed: int,
    init_estimator: Estimator | None,
    progress: Progress,
    settings: Settings,
) -> Callable[[Any], Distribution]:
    """One fit from scratch (no starting model, no validation data) over the handle it is given."""

    def run(handle: Any) -> Distribution:
        started = time.perf_counter()
        return EMRun(
            handle,
            None,
            estimator,
            max_its,
            delta,
            init_p,
            seed,
            None,
            init_estimator,
            progress,
            started,
            settings,
        ).run()

    return run


def fit_together(
    handle: Any, runs: list[Callable[[Any], Distribution]], shared: bool = True
) -> list[Distribution]:
    """The models of ``runs`` (fits over ``handle``), advanced together with one pass over the data
    per step for every fit still running (:mod:`mixle_spark.em._lockstep`) when the backend runs row
    passes and ``shared``; else one after the other. Either way each model equals its fit run alone."""
    if shared and len(runs) > 1 and can_share_passes(handle):
        models, passes = run_together(handle, runs)
        logger.info(f"{len(runs)} fits advanced together in {passes} passes over the data")
        return models
    return [run(handle) for run in runs]


def trial_seeds(seed: int | None, trials: int) -> list[int]:
    """Distinct, reproducible seeds for ``trials`` restarts derived from one seed."""
    bits = RowRandom(seed_to_int(seed), np.arange(trials, dtype=np.uint64)).child("best_of").bits()
    return [int(b) for b in bits]


def best_of(
    data: Any,
    estimator: Estimator,
    trials: int = 5,
    max_its: int = 10,
    init_p: float = 0.1,
    delta: float | None = 1e-9,
    seed: int | None = None,
    vdata: Any = None,
    init_estimator: Estimator | None = None,
    out: IO[str] | None = None,
    print_iter: int = 1,
    *,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 1,
    resume: bool = True,
    on_degenerate: str = "stop",
    audit: Any = None,
    trace_path: str | os.PathLike[str] | None = None,
    mlflow: bool | None = None,
    init: str | Seeding = "kmeans||",
    init_steps: int | None = None,
    **backend_options: Any,
) -> tuple[float, Distribution]:
    """Run ``trials`` EM restarts with distinct seeds derived from ``seed``; return the best
    ``(log_likelihood, model)``, scored on ``vdata`` when given, else on ``data``.

    The data (and ``vdata``) are encoded once and shared by every trial, and the trials advance
    together: each pass over the data (one Spark job, or one resident request) makes the next step of
    every trial still running (a converged one drops out), with the same models as trials run one by
    one (an audited fit, ``audit=``, runs its trials one by one). The reliability and trace options are
    ``optimize``'s; each trial checkpoints under ``checkpoint_dir/trial-K`` and writes its trace to
    ``NAME.trial-K.jsonl`` next to ``trace_path``, so an interrupted ``best_of`` resumes trial by trial
    (finished trials return at once).
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    settings = Settings.build(
        checkpoint_dir, checkpoint_every, resume, on_degenerate, audit, trace_path, mlflow, init, init_steps
    )
    handle, owned = _handle(data, estimator, backend_options)
    vhandle, vowned = (None, False) if vdata is None else _handle(vdata, estimator, {})
    best: tuple[float, Distribution] | None = None
    try:
        runs = [
            _em_run(
                estimator,
                max_its,
                delta,
                init_p,
                trial_seed,
                init_estimator,
                Progress(out, print_iter, f"trial {k}: "),
                settings.for_trial(k),
            )
            for k, trial_seed in enumerate(trial_seeds(seed, trials))
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            models = fit_together(handle, runs, shared=settings.audit is None)
        for k, model in enumerate(models):
            ll = (
                model.fit_result.log_likelihood
                if vhandle is None
                else vhandle.pysp_seq_log_density_sum(model)[1]
            )
            line = f"trial {k}: {'validation ' if vhandle is not None else ''}log-likelihood {ll:.12g}"
            logger.info(line)
            if out is not None:
                out.write(line + "\n")
            if best is None or ll > best[0]:
                best = (ll, model)
    finally:
        _release(handle, owned)
        _release(vhandle, vowned)
    assert best is not None
    return best
