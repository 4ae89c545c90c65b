"""Mini-batch (stepwise) EM over the global mini-batches of a data module or an encoded-data handle.

:func:`minibatch_em` takes anything with ``global_minibatches(epoch)`` and ``world_size`` (the
Lightning DataModule of :func:`mixle_spark.parallel.training.lightning_data.encoded_datamodule`, or a
handle of the ``lightning`` backend) and runs stepwise EM with
:func:`mixle_spark.em.incremental.update` (``method="stepwise"``): the first mini-batch is fitted
from scratch (statistics kept), each later one moves the kept statistics towards its own. Under
``torchrun`` each mini-batch is read through the ``torchrun`` backend: each rank runs the E-step of
its contiguous share and the backend's reduction combines the statistics, so every rank gets the
same model, equal to one process running the same mini-batches.

:func:`minibatch_fit` is the fit routine of a handle that serves mini-batches
(:class:`~mixle_spark.parallel.backends.contract.MiniBatches`): ``optimize``, ``best_of`` and
``select_k`` over such a handle run it instead of full-data EM steps.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator
from typing import Any, cast

from mixle_spark.em._one_fit import run_fit, warn_model_size
from mixle_spark.em._records import FitResult, IterationRecord, nonfinite_error
from mixle_spark.em._run import FitInputs
from mixle_spark.em.incremental import update
from mixle_spark.em.observability import EMTrace, IterationTrace
from mixle_spark.em.options import FitOptions
from mixle_spark.errors import SpecError, describe_value
from mixle_spark.parallel.backends.contract import EncodedData, FitSession, MiniBatches, backend_name
from mixle_spark.parallel.backends.registry import encoded_data, is_encoded_data_handle
from mixle_spark.stats._random import seed_to_int
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["minibatch_em", "minibatch_fit"]


def _fit_first(data: Any, estimator: Estimator, fit: FitOptions, inputs: FitInputs) -> Distribution:
    """The first mini-batch fitted from scratch, as ``optimize(data, estimator, ...)`` fits it."""
    owned = not is_encoded_data_handle(data)
    handle = encoded_data(data, estimator) if owned else data
    session = isinstance(handle, FitSession)
    try:
        if session:
            handle.begin_fit()
        model = run_fit(handle, estimator, fit, inputs)
        rows = len(handle)
    finally:
        if session:
            handle.end_fit()
        if owned:
            handle.close()
    warn_model_size(model, rows)
    return model


def _steps(
    datamodule: Any,
    estimator: Estimator,
    first: FitOptions,
    inputs: FitInputs,
    *,
    epochs: int,
    alpha: float,
    model: Distribution | None,
    distributed: bool,
    update_options: dict[str, Any],
) -> Iterator[tuple[int, Distribution, float, float]]:
    """``(epoch, model, log-likelihood, weight)`` after each mini-batch: the batch's log-likelihood
    under the model before it was folded in (the first, fitted batch: under its fit) and its weight."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be an integer >= 1, got {describe_value(epochs)}")

    def rows_of(batch: Any) -> Any:
        if not distributed:
            return batch
        return encoded_data(batch, estimator, backend="torchrun")  # each rank E-steps its contiguous share

    for epoch in range(epochs):
        for batch in datamodule.global_minibatches(epoch):
            data = rows_of(batch)
            try:
                if model is None:
                    model = _fit_first(data, estimator, first, inputs)
                    ll, weight = model.fit_result.log_likelihood, model.fit_result.history[-1].nobs
                else:
                    model = update(model, data, method="stepwise", alpha=alpha, **update_options)
                    ll, weight = model.update_result.history[0], model.update_result.weight
            finally:
                if data is not batch:
                    data.close()
            yield epoch, model, float(ll), float(weight)


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
    distributed = datamodule.world_size > 1 if distributed is None else distributed
    first, _ = FitOptions.gather(None, {"keep_statistics": True, "seed": seed, "print_iter": 0})
    steps = _steps(
        datamodule, estimator, first, FitInputs(started=time.perf_counter()), epochs=epochs, alpha=alpha,
        model=model, distributed=distributed, update_options=update_options,
    )  # fmt: skip
    for _epoch, stepped, _ll, _weight in steps:
        model = stepped
    assert model is not None
    return model


def _epoch_record(
    epoch: int, ll: float, weight: float, seconds: float, history: list[IterationRecord]
) -> IterationRecord:
    last = history[-1].log_likelihood if history else None
    return IterationRecord(epoch, ll, None if last is None else ll - last, weight, seconds)


def _epoch_trace(record: IterationRecord, batches: int, rows: int, model: Distribution) -> IterationTrace:
    weights = getattr(model, "w", None)
    return IterationTrace.from_pass(
        iteration=record.iteration,
        log_likelihood=record.log_likelihood,
        delta=record.gain,
        weight=record.nobs,
        seconds=record.seconds,
        parts=(),
        rows=rows,
        component_weights=None if weights is None else [float(x) for x in weights],
        events=(f"epoch {record.iteration}: {batches} mini-batches",),
    )


_NOT_FOR_MINIBATCHES = {
    "checkpoint_dir": "checkpoints resume full-data EM iterations",
    "audit": "the audit recomputes the partitions of a full-data E-step",
    "trace_path": "the trace would be the first mini-batch's fit",
}


def minibatch_fit(
    handle: EncodedData, estimator: Estimator, options: FitOptions, inputs: FitInputs | None = None
) -> Distribution:
    """A fit over a handle that serves mini-batches: :func:`minibatch_em` over its global
    mini-batches (``handle.epochs``, ``handle.alpha``), the first mini-batch fitted as ``options``
    say (``max_its``, ``delta``/``tol``, ``init``, ``seed``, ...), then the model scored on every row.

    ``inputs.prev_estimate`` (a model with statistics) continues instead of fitting the first
    mini-batch. ``model.fit_result``: ``log_likelihood`` over every row of ``handle`` (and
    ``validation_log_likelihood`` over ``inputs.vhandle``), one history record per epoch with the
    sum of its mini-batches' log-likelihoods each under the model before it was folded in (each
    row scored once per epoch, by a model that had not yet seen it that epoch), ``n_iter`` the
    epochs and ``stopped_because="epochs"``. ``model.statistics`` (the stepwise statistics an
    :func:`~mixle_spark.em.incremental.update` continues from) only with ``keep_statistics``.
    """
    refused = [name for name in _NOT_FOR_MINIBATCHES if getattr(options, name) not in (None, False)]
    if refused:
        name = refused[0]
        raise SpecError(
            f"{name}={getattr(options, name)!r} cannot apply to a mini-batch fit (backend "
            f"{backend_name(handle)!r}): {_NOT_FOR_MINIBATCHES[name]}"
        )
    batches = cast(MiniBatches, handle)  # the routine runs this fit on such handles only
    inputs = FitInputs() if inputs is None else inputs
    started = time.perf_counter() if inputs.started is None else inputs.started
    first = dataclasses.replace(options, keep_statistics=True)
    seed = seed_to_int(options.seed)
    trace = EMTrace(
        metadata={
            "backend": backend_name(handle),
            "rows": len(handle),
            "estimator": type(estimator).__name__,
            "seed": seed,
            "init": "minibatch",
            "epochs": batches.epochs,
            "alpha": batches.alpha,
        }
    )
    model = inputs.prev_estimate
    history: list[IterationRecord] = []
    epoch_of: dict[int, list[tuple[float, float]]] = {}  # epoch -> (log-likelihood, weight) per batch
    clock = time.perf_counter()

    def close(epoch: int, model: Distribution) -> None:
        nonlocal clock
        seconds, clock = time.perf_counter() - clock, time.perf_counter()
        lls, weights = zip(*epoch_of.pop(epoch), strict=True)
        record = _epoch_record(epoch, sum(lls), sum(weights), seconds, history)
        history.append(record)
        trace.append(_epoch_trace(record, len(lls), len(handle), model))

    steps = _steps(
        batches, estimator, first, FitInputs(label=inputs.label), epochs=batches.epochs,
        alpha=batches.alpha, model=model, distributed=batches.world_size > 1, update_options={},
    )  # fmt: skip
    for epoch, stepped, ll, weight in steps:
        if epoch not in epoch_of and epoch_of:  # the first mini-batch of an epoch: the last one ended
            assert model is not None
            close(epoch - 1, model)
        epoch_of.setdefault(epoch, []).append((ll, weight))
        model = stepped
    assert model is not None
    close(max(epoch_of), model)
    _nobs, total = handle.pysp_seq_log_density_sum(model)  # every row scored
    if not math.isfinite(total):
        raise nonfinite_error(len(history), total, model, handle)
    vll = None if inputs.vhandle is None else inputs.vhandle.pysp_seq_log_density_sum(model)[1]
    if not options.keep_statistics:
        model.statistics = None
    model.update_result = None
    model.fit_result = FitResult(
        converged=False,
        n_iter=len(history),
        log_likelihood=float(total),
        seed=seed,
        delta=options.delta,
        max_its=options.max_its,
        history=history,
        validation_log_likelihood=vll,
        seconds=time.perf_counter() - started,
        stopped_because="epochs",
        trace=trace,
        free_parameters=estimator.n_free_parameters(model),
        tol=options.tol,
    )
    return model
