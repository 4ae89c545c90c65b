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
import time
import warnings
from typing import Any

from mixle_spark.em._records import (
    DECREASE_RTOL,
    FLOOR_WEIGHT,
    MAX_RESEEDS,
    ON_DEGENERATE,
    FitResult,
    IterationRecord,
    check_memory,
    check_rows,
    init_fraction,
    unconverged_message,
)
from mixle_spark.em._run import start_model
from mixle_spark.em.handles import (
    data_identity_of,
    fit_data,
    fit_together,
    open_handle,
    release,
    trial_seeds,
    warn_model_size,
)
from mixle_spark.em.handles import row_count as row_count  # importable here as before
from mixle_spark.em.incremental import update
from mixle_spark.em.options import FitOptions, check_trials
from mixle_spark.em.routine import fit_routine
from mixle_spark.em.seeding import Seeding
from mixle_spark.em.statistics import collect_statistics
from mixle_spark.errors import ConvergenceWarning
from mixle_spark.stats._random import seed_to_int
from mixle_spark.stats.base import Distribution, Estimator

__all__ = [
    "DECREASE_RTOL",
    "FLOOR_WEIGHT",
    "MAX_RESEEDS",
    "ON_DEGENERATE",
    "FitOptions",
    "FitResult",
    "IterationRecord",
    "best_of",
    "init_fraction",
    "initialize",
    "iterate",
    "optimize",
    "update",
]

logger = logging.getLogger("mixle_spark.estimation")


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
    handle, owned = open_handle(data, estimator, backend_options)
    try:
        check_rows(handle, estimator)
        check_memory(handle, estimator)
        return start_model(handle, estimator, seed_to_int(seed), p, seeding)
    finally:
        release(handle, owned)


_OPTIMIZE_POSITIONAL = (
    "max_its", "delta", "init_p", "seed", "prev_estimate", "init_estimator", "vdata", "out", "print_iter",
)  # fmt: skip
_BEST_OF_POSITIONAL = (
    "trials", "max_its", "init_p", "delta", "seed", "vdata", "init_estimator", "out", "print_iter",
)  # fmt: skip


def _keywords(
    fn: str, names: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """``kwargs`` with the positional ``args`` named (the positional order users relied on)."""
    if len(args) > len(names):
        raise TypeError(f"{fn}() takes at most {len(names) + 2} positional arguments ({len(args) + 2} given)")
    for name, value in zip(names, args, strict=False):
        if name in kwargs:
            raise TypeError(f"{fn}() got multiple values for argument {name!r}")
        kwargs[name] = value
    return kwargs


def optimize(
    data: Any, estimator: Estimator, *args: Any, options: FitOptions | None = None, **kwargs: Any
) -> Distribution:
    """Fit ``estimator`` to ``data`` by EM and return the model (with ``model.fit_result``).

    ``optimize(data, estimator, max_its=10, delta=1e-9, init_p=0.1, seed=None, prev_estimate=None,
    init_estimator=None, vdata=None, out=None, print_iter=1, *, options=None, **keywords)``

    Parameters
    ----------
    data : encoded-data handle, list, numpy array, pandas / Spark DataFrame or pyarrow Table
        Anything else than a handle is encoded with ``encoded_data(data, estimator, **backend_options)``.
    estimator : Estimator
        What to fit.
    prev_estimate : Distribution, optional
        Start from this model instead of initializing.
    vdata : optional
        Validation data: the model with the best validation log-likelihood is returned.
    options : FitOptions, optional
        How the fit runs (:class:`~mixle_spark.em.options.FitOptions`: ``max_its``, ``delta``,
        ``seed``, ``init``, checkpoints, ``on_degenerate``, ``audit``, the trace, ...). Each of its
        fields may be given as a keyword instead (or to override it).
    on_encoded : callable, optional
        Called with the encoded-data handle once ``data`` is encoded, before the fit starts (a job
        times the encoding and reports the row count with it). Not called when a finished fit is
        returned from its checkpoint: the data is not read then.
    **keywords
        FitOptions fields; the others are the backend's (``backend``, ``num_chunks``, ...), passed
        to ``encoded_data``.

    The per-iteration trace (:class:`~mixle_spark.em.observability.EMTrace`: log-likelihood,
    gain, rows, seconds, rows/s, bytes of statistics merged, partition time skew, component
    weights, events) is returned as ``model.fit_result.trace``.
    """
    keywords = _keywords("optimize", _OPTIMIZE_POSITIONAL, args, kwargs)
    prev_estimate = keywords.pop("prev_estimate", None)
    vdata = keywords.pop("vdata", None)
    on_encoded = keywords.pop("on_encoded", None)
    fit, backend_options = FitOptions.gather(options, keywords)
    model, rows = fit_data(
        data,
        estimator,
        fit,
        backend_options,
        prev_estimate=prev_estimate,
        vdata=vdata,
        on_encoded=on_encoded,
        started=time.perf_counter(),
    )
    if rows is not None:  # not when a finished fit came back from its checkpoint
        warn_model_size(model, rows)
    return model


def iterate(data: Any, estimator: Estimator, max_its: int = 10, **kwargs: Any) -> Distribution:
    """Exactly ``max_its`` EM iterations (``optimize`` with ``delta=None``)."""
    kwargs.pop("delta", None)
    return optimize(data, estimator, max_its=max_its, delta=None, **kwargs)


def best_of(
    data: Any, estimator: Estimator, *args: Any, options: FitOptions | None = None, **kwargs: Any
) -> tuple[float, Distribution]:
    """Run ``trials`` EM restarts with distinct seeds derived from ``seed``; return the best
    ``(log_likelihood, model)``, scored on ``vdata`` when given, else on ``data`` (of trials equal
    within rounding, 1e-9 relative, the first: the same trial on every backend).

    ``best_of(data, estimator, trials=5, max_its=10, init_p=0.1, delta=1e-9, seed=None, vdata=None,
    init_estimator=None, out=None, print_iter=1, *, options=None, **keywords)``: ``options``,
    ``on_encoded`` and the keywords as :func:`optimize`'s; each restart is ``optimize``'s fit routine
    (:func:`~mixle_spark.em.routine.fit_routine`) from its own seed.

    The data (and ``vdata``) are encoded once and shared by every trial, and the trials advance
    together: each pass over the data (one Spark job, or one resident request) makes the next step of
    every trial still running (a converged one drops out), with the same models as trials run one by
    one (an audited fit, ``audit=``, runs its trials one by one). Each trial checkpoints under
    ``checkpoint_dir/trial-K`` and writes its trace to ``NAME.trial-K.jsonl`` next to ``trace_path``,
    so an interrupted ``best_of`` resumes trial by trial (finished trials return at once). When the
    returned trial stopped at ``max_its`` without converging, one ConvergenceWarning names it (the
    other trials' are not raised: their models are not returned).
    """
    keywords = _keywords("best_of", _BEST_OF_POSITIONAL, args, kwargs)
    trials = keywords.pop("trials", 5)
    vdata = keywords.pop("vdata", None)
    on_encoded = keywords.pop("on_encoded", None)
    trials = check_trials(trials)
    fit, backend_options = FitOptions.gather(options, keywords)
    identity = data_identity_of(fit, data, backend_options)
    handle, owned = open_handle(data, estimator, backend_options, on_encoded)
    vhandle, vowned = (None, False) if vdata is None else open_handle(vdata, estimator, {})
    best: tuple[float, Distribution] | None = None
    try:
        runs = [
            fit_routine(fit.for_trial(k, trial_seed), estimator, label=f"trial {k}: ", data=identity)
            for k, trial_seed in enumerate(trial_seeds(fit.seed, trials))
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            models = fit_together(handle, runs, shared=fit.sdc_audit is None)
        for k, model in enumerate(models):
            ll = (
                model.fit_result.log_likelihood
                if vhandle is None
                else vhandle.pysp_seq_log_density_sum(model)[1]
            )
            line = f"trial {k}: {'validation ' if vhandle is not None else ''}log-likelihood {ll:.12g}"
            logger.info(line)
            if fit.out is not None:
                fit.out.write(line + "\n")
            # a later trial wins only when better beyond rounding: trials that reach one optimum
            # (often with the components in another order) must not be chosen by the last bits of
            # their sums, which differ across backends and partitionings
            if best is None or ll > best[0] + DECREASE_RTOL * max(1.0, abs(best[0])):
                best = (ll, model)
        assert best is not None
        message = unconverged_message(best[1].fit_result)
        if message is not None:  # the trials' own warnings were silenced: say it of the one returned
            chosen = next(k for k, model in enumerate(models) if model is best[1])
            warnings.warn(
                f"trial {chosen} (the best of {trials}): {message}", ConvergenceWarning, stacklevel=2
            )
        if fit.keep_statistics:
            best[1].statistics = collect_statistics(handle, estimator, best[1])
        warn_model_size(best[1], len(handle))
    finally:
        release(handle, owned)
        release(vhandle, vowned)
    return best
