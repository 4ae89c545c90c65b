"""Models that keep learning: fold new rows into a fitted model without reading the old ones.

A model fitted with ``keep_statistics=True`` carries the sufficient statistics it was estimated from
(``model.statistics``, a :class:`~mixle_spark.em.statistics.Statistics`, saved inside its JSON).
:func:`update` runs E-steps over the new rows only, adds their statistics to the kept ones and
re-estimates. Two methods, as the literature gives them:

``"incremental"`` (Neal & Hinton 1998, incremental EM)
    The old statistics are held fixed (decayed once); up to ``max_its`` passes over the new rows each
    re-run their E-step under the current model and re-estimate from ``old + new``. Converges to what a
    batch fit over the old rows (frozen at their last E-step) and the new ones gives. Use it for a
    pipeline stage that adds a day to a year: the result is within a fraction of a percent of a refit.
``"stepwise"`` (Cappé & Moulines 2009, online EM; Liang & Klein 2009, stepwise EM)
    One pass per batch; the kept statistics per row move towards the batch's by a step
    ``eta_k = (k + 2) ** -alpha`` (``k`` the update's number, ``alpha`` in (0.5, 1], default 0.7).
    Use it for a stream learned from scratch in small batches, where each batch should be read once.

Decay down-weights the past as MLlib's ``StreamingKMeans`` spells it: a ``decay`` factor per batch
(``time_unit="batches"``) or per row (``"points"``: the factor to the power of the batch's rows), or a
``half_life`` in those units (``decay = 0.5 ** (1 / half_life)``). ``decay=1`` (default) forgets
nothing.

Each update reports drift (:class:`UpdateResult`): the new rows' mean log-likelihood under the model
before the update against the kept statistics' own, and how far the mixture weights moved.

Where the new rows live decides how the passes run. A backend that can hand small rows whole to one
function where they are (:class:`~mixle_spark.parallel.backends.contract.OneTask`: Spark, for rows
its optimizer sizes at most ``ONE_TASK_BYTES`` and no ``num_chunks``) runs the whole update there,
with the local backend, in one job: the same model the local backend gives on those rows, and the
rows never reach the driver. Otherwise each pass is a pass of the backend (on classic Spark the
encoding and the passes share one barrier job; see ``defer_encoding``).

No component is lost in an update: ``decay`` is above 0, so every component keeps a share of its
kept weight and statistics, and a component the new rows pull onto a few identical values gets the
estimators' variance floor, as in a fit. (A fit's ``on_degenerate`` does not apply.) An M-step that
still fails (a custom estimator's :class:`~mixle_spark.errors.DegenerateComponentError`) stops the
update: nothing is updated, and the error names the pass and carries the model as ``last_model``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mixle_spark._checks import Check, integer, number, one_of
from mixle_spark.em._one_fit import run_fit, warn_model_size
from mixle_spark.em._records import TOL
from mixle_spark.em._run import FitInputs
from mixle_spark.em.options import FitOptions
from mixle_spark.em.statistics import Statistics, collect_statistics
from mixle_spark.em.update_record import UpdateResult
from mixle_spark.errors import DegenerateComponentError, MixleError, SpecError
from mixle_spark.parallel.backends.contract import Accumulate, EncodedData, FitSession, OneTask, RowPasses
from mixle_spark.parallel.backends.registry import data_identity, encoded_data, is_encoded_data_handle
from mixle_spark.stats.base import Distribution, Estimator

__all__ = [
    "METHODS",
    "TIME_UNITS",
    "UPDATE_CHECKS",
    "DriftError",
    "UpdateResult",
    "collect_statistics",
    "decay_factor",
    "update",
]

METHODS = ("incremental", "stepwise")
TIME_UNITS = ("batches", "points")

UPDATE_CHECKS: dict[str, Check] = {
    "decay": number(0, 1, low_open=True),
    "half_life": number(0, low_open=True, optional=True),
    "alpha": number(0.5, 1, low_open=True),
    "method": one_of(METHODS),
    "time_unit": one_of(TIME_UNITS),
    "max_its": integer(1),
    "delta": number(0, optional=True),
    "tol": number(0, optional=True),
    "max_drop": number(0, optional=True),
    "on_drift": one_of(("warn", "raise", "refit")),
    "batch_id": Check("None or an integer", lambda v: v is None or integer(0).kind(v), normal=lambda v: v),
}
"""The declared check of each :func:`update` option (the fit job's update flags run them too)."""
_DECAY, _HALF_LIFE, _ALPHA = UPDATE_CHECKS["decay"], UPDATE_CHECKS["half_life"], UPDATE_CHECKS["alpha"]
_METHOD, _TIME_UNIT, _MAX_ITS = UPDATE_CHECKS["method"], UPDATE_CHECKS["time_unit"], UPDATE_CHECKS["max_its"]
_DELTA, _MAX_DROP, _ON_DRIFT = UPDATE_CHECKS["delta"], UPDATE_CHECKS["max_drop"], UPDATE_CHECKS["on_drift"]
_BATCH, _TOL = UPDATE_CHECKS["batch_id"], UPDATE_CHECKS["tol"]


def _stop_rule(delta: Any, tol: Any) -> tuple[float | None, float | None]:
    """``(delta, tol)`` of an update, checked: at most one given; neither: ``tol`` at its default."""
    delta, tol = _DELTA(delta, "delta"), _TOL(tol, "tol")
    if delta is not None and tol is not None:
        raise SpecError(
            f"give one stopping rule: tol={tol!r} (a gain per row) or delta={delta!r} "
            "(a gain relative to the new rows' log-likelihood), not both"
        )
    return delta, (TOL if delta is None and tol is None else tol)


class DriftError(MixleError, ValueError):
    """New rows fit the model worse than ``max_drop`` allows (``update(..., on_drift="raise")``)."""

    def __init__(self, message: str, result: UpdateResult) -> None:
        super().__init__(message)
        self.result = result


def decay_factor(
    decay: float = 1.0, half_life: float | None = None, time_unit: str = "batches", rows: int = 0
) -> float:
    """The factor the kept statistics are multiplied by for one batch of ``rows`` rows."""
    unit = _TIME_UNIT(time_unit, "time_unit")
    if half_life is not None:
        if decay != 1.0:
            raise SpecError("give decay or half_life, not both")
        base = 0.5 ** (1.0 / _HALF_LIFE(half_life, "half_life"))
    else:
        base = _DECAY(decay, "decay")
    return base if unit == "batches" else base**rows


def _weights(model: Distribution) -> np.ndarray | None:
    w = getattr(model, "w", None)
    return None if w is None else np.asarray(w, dtype=np.float64)


class _ScoreSums:
    """A row task's statistics: (weight of rows with a finite log-density, their weighted
    log-likelihood, weight of the other rows)."""

    def __init__(self, sums: np.ndarray | None = None) -> None:
        self.sums = np.zeros(3) if sums is None else np.array(sums, dtype=np.float64)

    def make(self) -> _ScoreSums:
        return _ScoreSums()

    def combine(self, value: Any) -> _ScoreSums:
        self.sums += np.asarray(value, dtype=np.float64)
        return self

    def value(self) -> np.ndarray:
        return self.sums.copy()

    def from_value(self, value: Any) -> _ScoreSums:
        self.sums = np.array(value, dtype=np.float64)
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ScoreSums)

    def __hash__(self) -> int:
        return hash("_ScoreSums")


@dataclass(frozen=True, eq=False)
class _FiniteScore:
    """The row task scoring the rows under ``model``, finite and not apart."""

    model: Distribution

    def fold(self, acc: _ScoreSums, enc: Any, w: np.ndarray, ids: np.ndarray) -> None:
        ll = self.model.seq_log_density(enc)
        ok = np.isfinite(ll)
        acc.sums += (float(w[ok].sum()), float(np.dot(w[ok], ll[ok])), float(w[~ok].sum()))


def _widened(kept: Statistics, bound: Estimator) -> Any:
    """The kept statistics laid out over ``bound``'s vocabularies (new labels at 0)."""
    if bound.to_dict() == kept.estimator.to_dict():
        return kept.value
    old = kept.estimator.accumulator_factory().make().from_value(kept.value)
    return old.widened(bound.accumulator_factory().make())


def _scaled(bound: Estimator, value: Any, factor: float) -> Any:
    return bound.accumulator_factory().make().from_value(value).scale(factor).value()


def _added(bound: Estimator, a: Any, b: Any) -> Any:
    return bound.accumulator_factory().make().from_value(a).combine(b).value()


def update(
    model: Distribution,
    data: Any,
    estimator: Estimator | None = None,
    *,
    statistics: Statistics | None = None,
    method: str = "incremental",
    decay: float = 1.0,
    half_life: float | None = None,
    time_unit: str = "batches",
    max_its: int = 5,
    delta: float | None = None,
    tol: float | None = None,
    alpha: float = 0.7,
    batch_id: int | None = None,
    max_drop: float | None = None,
    on_drift: str = "warn",
    refit_options: Mapping[str, Any] | None = None,
    out: Callable[[str], None] | None = None,
    **backend: Any,
) -> Distribution:
    """Fold ``data`` (new rows) into ``model`` and return the updated model.

    Parameters
    ----------
    model : Distribution
        A model with ``model.statistics`` (fitted with ``keep_statistics=True``, or loaded from a
        file saved so), or pass ``statistics``.
    data : the new rows (anything ``encoded_data`` reads, or an encoded-data handle).
    estimator : Estimator, optional
        What the new rows are read with; default: the estimator the fit was given (kept with the
        statistics). A label the fit did not see extends the vocabularies: it is not an error in an
        update. The rows that carry it score -inf under the old model (``unseen_rows``; the mean
        log-likelihood before the update leaves them out), and the label gets the probability the
        new rows give it. (A vocabulary fixed by ``labels=`` in the estimator stays fixed: a label
        outside it is refused, naming it, as in a fit.)
    method : {"incremental", "stepwise"}
        See the module docstring.
    decay, half_life, time_unit : how the kept statistics are down-weighted first (module docstring).
    max_its, tol, delta : passes over the new rows (incremental): at most ``max_its``, stopping when
        the new rows' log-likelihood gains less than ``tol`` per unit of their weight (per row;
        default 1e-6, :data:`~mixle_spark.em.options.TOL`: the kept statistics hold the model in
        place, so a few passes settle the new rows' responsibilities), or, when ``delta`` is given
        instead, less than ``delta`` times its size (the earlier rule, kept for calls that give it).
    alpha : stepwise step-size exponent, in (0.5, 1].
    batch_id : int, optional
        The micro-batch's id: recorded as ``statistics.last_batch``; a batch id at or below the
        model's ``last_batch`` has been folded already and is skipped (the model returned as is).
    max_drop, on_drift : when the new rows' mean log-likelihood is more than ``max_drop`` nats per
        row below the kept statistics' (``UpdateResult.drift``): ``"warn"`` (one line to ``out`` and
        the log), ``"raise"`` (:class:`DriftError`, nothing updated) or ``"refit"`` (the new rows are
        fitted from scratch by ``optimize``, with statistics kept, and ``refit_options``: its
        keywords, e.g. ``{"max_its": 200, "seed": 1}``).
    out : callable, optional
        Gets the one-line summary of the update (and of drift).
    **backend : ``encoded_data`` keywords (``backend``, ``num_chunks``, ...).
    """
    started = time.perf_counter()
    kept = statistics if statistics is not None else getattr(model, "statistics", None)
    if not isinstance(kept, Statistics):
        raise SpecError(
            "update needs the statistics the model was estimated from: fit it with "
            "keep_statistics=True (or load a model file saved from such a fit), or pass statistics="
        )
    method = _METHOD(method, "method")
    max_its = _MAX_ITS(max_its, "max_its")
    delta, tol = _stop_rule(delta, tol)
    alpha = _ALPHA(alpha, "alpha")
    max_drop = _MAX_DROP(max_drop, "max_drop")
    on_drift = _ON_DRIFT(on_drift, "on_drift")
    batch_id = _BATCH(batch_id, "batch_id")
    if batch_id is not None and kept.last_batch is not None and batch_id <= kept.last_batch:
        return model  # folded already (a replayed micro-batch)
    template = estimator if estimator is not None else kept.template or kept.estimator
    est = kept.estimator  # its vocabularies, with the new rows' labels added by the handle's bind
    owned = not is_encoded_data_handle(data)
    # a few passes at once: a backend may encode the rows in the first (Spark: in the resident session)
    handle = encoded_data(data, template, **{"defer_encoding": True, **backend}) if owned else data
    whole = handle if owned and isinstance(handle, OneTask) else None
    fitting = False
    try:
        if whole is not None:  # small new rows: the whole update where they are, in one task
            options = dict(
                statistics=statistics, method=method, decay=decay, half_life=half_life, time_unit=time_unit,
                max_its=max_its, delta=delta, tol=tol, alpha=alpha, batch_id=batch_id, max_drop=max_drop,
                on_drift=on_drift, refit_options=refit_options,
            )  # fmt: skip
            folded = _in_one_task(whole, model, estimator, options, out, started)
            if folded is not None:
                return folded
        if isinstance(handle, FitSession):
            handle.begin_fit()  # a few passes in a row: the backend may keep its workers (resident tasks)
            fitting = True
        if not isinstance(handle, Accumulate):
            raise TypeError(f"{type(handle).__name__} cannot run an update (it has no pysp_accumulate pass)")
        bound = handle.bind(est) if hasattr(handle, "bind") else est
        old = _widened(kept, bound)
        history: list[float] = []
        seconds: list[float] = []  # each pass's wall time (E-step, merge, M-step)
        clock = time.perf_counter()
        nobs, ll, value = handle.pysp_accumulate(est, model)
        rows = len(handle)  # type: ignore[arg-type]  # after the first pass, which may encode them
        gamma = decay_factor(decay, half_life, time_unit, rows)
        first_ll, first_nobs = float(ll), float(nobs)
        unseen, scored, scored_ll = 0.0, first_nobs, first_ll
        if not math.isfinite(first_ll) and isinstance(handle, RowPasses):
            # rows the old model gives zero density (new labels): counted apart, one more pass
            _total, sums = handle.pysp_row_pass(_ScoreSums(), _FiniteScore(model))
            scored, scored_ll, unseen = (float(v) for v in sums)
        before = scored_ll / scored if scored > 0 else -math.inf
        reference = kept.mean_log_likelihood
        drift = None if reference is None else reference - before
        result_base = dict(
            rows=rows,
            weight=first_nobs,
            method=method,
            decay=gamma,
            mean_log_likelihood_before=before,
            reference_mean_log_likelihood=reference,
            drift=drift,
            unseen_rows=unseen,
        )
        if max_drop is not None and drift is not None and drift > max_drop:
            line = f"drift {drift:.4g} nats/row exceeds max_drop {max_drop:g}"
            if on_drift == "raise":
                raise DriftError(
                    f"update: the new rows' mean log-likelihood {before:.6g} is {drift:.4g} nats/row "
                    f"below the model's {reference:.6g} (max_drop {max_drop:g}); nothing was updated",
                    _result(result_base, 0, model, model, started, history, seconds),
                )
            if on_drift == "refit":
                refit = dict(refit_options or {})
                return _refit(handle, template, model, result_base, started, batch_id, out, line, refit)
            if out is not None:
                out(f"warning: {line}")
        base_weight = gamma * kept.weight
        if method == "stepwise":
            k = kept.updates
            eta = (k + 2.0) ** -alpha
            total = base_weight + first_nobs
            old_factor = (1.0 - eta) * total / kept.weight if kept.weight > 0 else 0.0
            new_value = _added(
                bound,
                _scaled(bound, old, old_factor),
                _scaled(bound, value, eta * total / max(first_nobs, 1e-300)),
            )
            history.append(float(ll))
            merged, weight, passes = new_value, total, 1
            new_model = _estimate(bound, weight, merged, 1, model)
            seconds.append(time.perf_counter() - clock)
        else:
            fixed = _scaled(bound, old, gamma)
            weight = base_weight + first_nobs
            merged = _added(bound, fixed, value)
            new_model = _estimate(bound, weight, merged, 1, model)
            history.append(float(ll))
            seconds.append(time.perf_counter() - clock)
            passes = 1
            while passes < max_its:
                clock = time.perf_counter()
                nobs, ll, value = handle.pysp_accumulate(est, new_model)
                passes += 1
                previous = history[-1]
                history.append(float(ll))
                merged = _added(bound, fixed, value)
                weight = base_weight + float(nobs)
                last, new_model = new_model, _estimate(bound, weight, merged, passes, model)
                seconds.append(time.perf_counter() - clock)
                gain = float(ll) - previous
                if new_model.to_dict() == last.to_dict():
                    break  # a fixed point (a model without latent variables gets there at once)
                enough = tol * float(nobs) if tol is not None else (delta or 0.0) * max(abs(previous), 1.0)
                if math.isfinite(previous) and 0 <= gain < enough:
                    break
        new_ll_total = None if kept.log_likelihood is None else gamma * kept.log_likelihood + scored_ll
        new_model.statistics = Statistics(
            bound,
            merged,
            float(weight),
            kept.rows + rows,
            kept.updates + 1,
            batch_id if batch_id is not None else kept.last_batch,
            log_likelihood=new_ll_total,
            scored_weight=None if kept.scored_weight is None else gamma * kept.scored_weight + scored,
        )
        result = _result(result_base, passes, model, new_model, started, history, seconds)
        new_model.update_result = result
        if out is not None:
            out(result.summary())
        return new_model
    finally:
        if fitting:
            handle.end_fit()
        if owned:
            handle.close()


def _in_one_task(
    handle: OneTask,
    model: Distribution,
    estimator: Estimator | None,
    options: dict[str, Any],
    out: Callable[[str], None] | None,
    started: float,
) -> Distribution | None:
    """The update run whole by the local backend inside one task of ``handle``'s backend (new rows
    small and not yet encoded: :class:`~mixle_spark.parallel.backends.contract.OneTask`): one job
    instead of the encoding and a job or request per pass, and the same model as the local backend
    on those rows. Its lines for ``out`` are said here; None when the backend did not take it (or
    the update raised there: the passes then run as usual and raise it here)."""

    def fold(table: Any, read: dict[str, Any]) -> tuple[Distribution, list[str]]:
        lines: list[str] = []
        new = update(model, table, estimator, out=lines.append, backend="local", **options, **read)
        return new, lines

    done, result = handle.in_one_task(fold)
    if not done or result is None:  # None only when not done (fold returns a pair)
        return None
    new, lines = result
    if getattr(new, "update_result", None) is not None:
        new.update_result = replace(new.update_result, seconds=time.perf_counter() - started)
    if out is not None:
        for line in lines:
            out(line)
    return new


def _estimate(
    estimator: Estimator, weight: float, merged: Any, passes: int, model: Distribution
) -> Distribution:
    """The M-step of pass ``passes``; a degenerate component stops the update (``model`` unchanged)."""
    try:
        return estimator.estimate(weight, merged)
    except DegenerateComponentError as err:
        which = ", ".join(f"component {j} ({why})" for j, why in err.failures)
        raised = DegenerateComponentError(
            err.failures,
            err.components,
            err.weights,
            message=f"update, pass {passes}: the M-step could not build {which}; nothing was updated "
            "(err.last_model is the model as it was)",
        )
        raised.last_model = model
        raise raised from err


def _result(
    base: dict[str, Any],
    passes: int,
    before: Distribution,
    after: Distribution,
    started: float,
    history: list[float],
    pass_seconds: list[float],
) -> UpdateResult:
    w0, w1 = _weights(before), _weights(after)
    shift = None if w0 is None or w1 is None or w0.shape != w1.shape else 0.5 * float(np.abs(w1 - w0).sum())
    return UpdateResult(
        passes=passes,
        weights_before=None if w0 is None else w0.tolist(),
        weights_after=None if w1 is None else w1.tolist(),
        weight_shift=shift,
        seconds=time.perf_counter() - started,
        history=history,
        pass_seconds=pass_seconds,
        **base,
    )


def _refit(
    handle: EncodedData,
    estimator: Estimator,
    model: Distribution,
    base: dict[str, Any],
    started: float,
    batch_id: int | None,
    out: Callable[[str], None] | None,
    line: str,
    options: dict[str, Any],
) -> Distribution:
    if out is not None:
        out(f"{line}: refitting the new rows from scratch")
    fit, backend_options = FitOptions.gather(None, {"print_iter": 0, **options, "keep_statistics": True})
    if backend_options:  # the rows are encoded already: encoding options cannot apply to them
        encoded_data(handle, **backend_options)  # raises EncodedDataControlConflictError naming them
    identity = None if fit.checkpoint_dir is None else data_identity(handle)
    fresh = run_fit(handle, estimator, fit, FitInputs(started=time.perf_counter(), data=identity))
    warn_model_size(fresh, len(handle))
    if batch_id is not None:
        fresh.statistics = fresh.statistics.with_value(
            fresh.statistics.value, fresh.statistics.weight, fresh.statistics.rows, last_batch=batch_id
        )
    fresh.update_result = UpdateResult(
        passes=fresh.fit_result.n_iter,
        weights_before=None if _weights(model) is None else _weights(model).tolist(),  # type: ignore[union-attr]
        weights_after=None if _weights(fresh) is None else _weights(fresh).tolist(),  # type: ignore[union-attr]
        weight_shift=None,
        seconds=time.perf_counter() - started,
        refitted=True,
        **base,
    )
    return fresh
