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
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from mixle_spark.errors import ConvergenceWarning, NonFiniteLikelihoodError, TooFewRowsError
from mixle_spark.stats._random import RowRandom, seed_to_int
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["FitResult", "IterationRecord", "best_of", "init_fraction", "initialize", "iterate", "optimize"]

logger = logging.getLogger("mixle_spark.estimation")

DECREASE_RTOL = 1e-9
"""A log-likelihood drop smaller than this (relative to |ll|, or absolute below 1) is rounding."""


@dataclass(frozen=True)
class IterationRecord:
    """One scored model: ``iteration`` counts the M-steps that produced it (0 = initial model)."""

    iteration: int
    log_likelihood: float
    gain: float | None
    nobs: float
    seconds: float


@dataclass
class FitResult:
    """What ``optimize`` did; attached to the returned model as ``model.fit_result``."""

    converged: bool
    n_iter: int
    log_likelihood: float
    seed: int
    delta: float | None
    max_its: int
    history: list[IterationRecord] = field(default_factory=list)
    validation_log_likelihood: float | None = None
    seconds: float = 0.0
    stopped_because: str = ""


def _handle(data: Any, estimator: Estimator | None, options: dict[str, Any]) -> tuple[Any, bool]:
    """(handle, created_here) for ``data``: an existing handle is used as it is."""
    from mixle_spark.parallel import encoded_data, is_encoded_data_handle

    if is_encoded_data_handle(data):
        return _begin(encoded_data(data, **options)), False
    return _begin(encoded_data(data, estimator, **options)), True


def _begin(handle: Any) -> Any:
    """Tell a handle a fit starts (backends may then keep long-lived workers, e.g. resident tasks)."""
    begin = getattr(handle, "begin_fit", None)
    if begin is not None:
        begin()
    return handle


def _release(handle: Any, owned: bool) -> None:
    """Tell a handle the fit ended (freeing long-lived workers); close it if this call built it."""
    if handle is None:
        return
    end = getattr(handle, "end_fit", None)
    if end is not None:
        end()
    if owned:
        handle.close()


def _check_rows(handle: Any, estimator: Estimator) -> None:
    need = estimator.min_rows()
    if len(handle) < need:
        raise TooFewRowsError(
            f"{type(estimator).__name__} needs at least {need} rows (for example one per mixture "
            f"component), but the data has {len(handle)}"
        )


def initialize(
    data: Any, estimator: Estimator, *, seed: int | None = None, p: float = 0.1, **backend_options: Any
) -> Distribution:
    """An initial model: rows kept with probability ``p`` (by a hash of seed and row id) and
    randomised statistics (mixtures: random responsibilities) from the same row-keyed stream."""
    handle, owned = _handle(data, estimator, backend_options)
    try:
        _check_rows(handle, estimator)
        return handle.pysp_seq_initialize(
            estimator, seed_to_int(seed), init_fraction(p, estimator, len(handle))
        )
    finally:
        _release(handle, owned)


def init_fraction(init_p: float | None, estimator: Estimator, n: int) -> float:
    """The row-selection probability for the initial model.

    ``init_p`` (values <= 0 or None mean the default 0.1; values >= 1 mean every row), bounded by
    the estimator's preferred initial sample size when it has one (mixtures: a few rows per
    component, so the starting components differ).
    """
    p = 0.1 if init_p is None or init_p <= 0 else min(float(init_p), 1.0)
    bounds = estimator.init_sample_size()
    if bounds is not None:
        fewest, most = bounds
        p = min(max(p, fewest / n), most / n, 1.0)
    return p


def _em_step(handle: Any, estimator: Estimator, model: Distribution) -> tuple[float, float, Distribution]:
    step = getattr(handle, "pysp_em_step", None)
    if step is not None:
        return step(estimator, model)
    # A reference-style handle without the fused pass: score, then estimate (two passes).
    nobs, ll = handle.pysp_seq_log_density_sum(model)
    return nobs, ll, handle.pysp_seq_estimate(estimator, model)


def _nonfinite_error(iteration: int, ll: float, model: Distribution, handle: Any) -> NonFiniteLikelihoodError:
    parts = [f"log-likelihood is {ll} at iteration {iteration}"]
    bad = model.nonfinite_parameters()
    if bad:
        parts.append(f"non-finite parameters: {', '.join(bad[:5])}")
    finder = getattr(handle, "first_nonfinite_row", None)
    found = finder(model) if finder is not None else None
    if found is not None:
        parts.append(
            f"row {found[0] + 1} has log-density {found[1]} under the model "
            "(zero density under every component)"
        )
    return NonFiniteLikelihoodError("; ".join(parts))


class _Progress:
    def __init__(self, out: IO[str] | None, print_iter: int, label: str = "") -> None:
        self.out = out
        self.print_iter = max(int(print_iter or 0), 0)
        self.label = label

    def __call__(self, rec: IterationRecord, note: str = "") -> None:
        gain = "" if rec.gain is None else f"  gain {rec.gain:.6g}"
        line = (
            f"{self.label}iteration {rec.iteration:4d}  log-likelihood {rec.log_likelihood:.12g}"
            f"{gain}  rows {rec.nobs:g}  {rec.seconds:.3f}s{note}"
        )
        logger.info(line)
        if self.out is not None and self.print_iter and (rec.iteration % self.print_iter == 0 or note):
            self.out.write(line + "\n")
            self.out.flush()


def _converged(gain: float | None, ll: float, delta: float) -> bool:
    """``0 <= gain < delta``, a drop within rounding counting as 0."""
    return gain is not None and -DECREASE_RTOL * max(1.0, abs(ll)) <= gain < delta


def _decreased(ll: float, best_ll: float) -> bool:
    return ll < best_ll - DECREASE_RTOL * max(1.0, abs(best_ll))


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
        Fraction of rows used for the random initial model (ignored with ``prev_estimate``).
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
    """
    if max_its < 0:
        raise ValueError(f"max_its must be >= 0, got {max_its}")
    if delta is not None and not (delta >= 0):
        raise ValueError(f"delta must be >= 0 or None, got {delta}")
    started = time.perf_counter()
    handle, owned = _handle(data, estimator, backend_options)
    vhandle, vowned = (None, False) if vdata is None else _handle(vdata, estimator, {})
    try:
        return _fit(
            handle,
            vhandle,
            estimator,
            max_its,
            delta,
            init_p,
            seed_to_int(seed),
            prev_estimate,
            init_estimator,
            _Progress(out, print_iter),
            started,
        )
    finally:
        _release(handle, owned)
        _release(vhandle, vowned)


def _fit(
    handle: Any,
    vhandle: Any,
    estimator: Estimator,
    max_its: int,
    delta: float | None,
    init_p: float,
    seed: int,
    prev_estimate: Distribution | None,
    init_estimator: Estimator | None,
    progress: _Progress,
    started: float,
) -> Distribution:
    _check_rows(handle, estimator)
    model = prev_estimate
    if model is None:
        init_est = init_estimator or estimator
        model = handle.pysp_seq_initialize(init_est, seed, init_fraction(init_p, init_est, len(handle)))
    history: list[IterationRecord] = []
    best: tuple[float, float, Distribution] | None = None  # (selection score, ll, model)
    iteration = 0
    converged = False
    stopped = "max_its"

    def score(ll: float, nobs: float, secs: float, it: int, mdl: Distribution) -> bool:
        """Record a scored model; returns False when the run must stop (a decrease)."""
        nonlocal best
        if not math.isfinite(ll):
            if it == 0 and prev_estimate is None and not math.isnan(ll):
                rec = IterationRecord(it, ll, None, nobs, secs)
                history.append(rec)
                progress(rec, "  (initial model gives some rows zero density)")
                return True
            raise _nonfinite_error(it, ll, mdl, handle)
        last = next((r.log_likelihood for r in reversed(history) if math.isfinite(r.log_likelihood)), None)
        gain = None if last is None else ll - last
        rec = IterationRecord(it, ll, gain, nobs, secs)
        history.append(rec)
        progress(rec)
        sel = ll if vhandle is None else vhandle.pysp_seq_log_density_sum(mdl)[1]
        if best is not None and delta is not None and _decreased(ll, best[1]) and vhandle is None:
            warnings.warn(
                f"EM log-likelihood decreased at iteration {it} ({best[1]:.12g} -> {ll:.12g}); "
                "returning the best model seen",
                ConvergenceWarning,
                stacklevel=4,
            )
            return False
        if best is None or sel >= best[0]:
            best = (sel, ll, mdl)
        return True

    for _ in range(max_its):
        t0 = time.perf_counter()
        nobs, ll, nxt = _em_step(handle, estimator, model)
        if not score(ll, nobs, time.perf_counter() - t0, iteration, model):
            stopped = "decrease"
            break
        gain = history[-1].gain
        model, iteration = nxt, iteration + 1
        if delta is not None and _converged(gain, history[-1].log_likelihood, delta):
            converged, stopped = True, "converged"
            break
    if stopped != "decrease":
        t0 = time.perf_counter()
        nobs, ll = handle.pysp_seq_log_density_sum(model)
        if not score(ll, nobs, time.perf_counter() - t0, iteration, model):
            stopped = "decrease"
        elif not converged and delta is not None:
            # The last model's gain is known too: a run that reached max_its exactly as the
            # gain fell below delta has converged.
            last_gain = history[-1].gain
            if _converged(last_gain, history[-1].log_likelihood, delta):
                converged, stopped = True, "converged"
    if best is None:  # only the initial model was scored and it had -inf rows
        raise _nonfinite_error(iteration, history[-1].log_likelihood, model, handle)
    final = best[2] if (delta is not None or vhandle is not None) else model
    final_ll = best[1] if final is best[2] else history[-1].log_likelihood
    if delta is not None and not converged and stopped == "max_its":
        last_gain = history[-1].gain
        warnings.warn(
            f"EM did not converge in {max_its} iterations (delta={delta}, last gain={last_gain}); "
            "raise max_its or delta",
            ConvergenceWarning,
            stacklevel=3,
        )
    final.fit_result = FitResult(
        converged=converged,
        n_iter=iteration,
        log_likelihood=final_ll,
        seed=seed,
        delta=delta,
        max_its=max_its,
        history=history,
        validation_log_likelihood=None if vhandle is None else best[0],
        seconds=time.perf_counter() - started,
        stopped_because=stopped,
    )
    return final


def iterate(data: Any, estimator: Estimator, max_its: int = 10, **kwargs: Any) -> Distribution:
    """Exactly ``max_its`` EM iterations (``optimize`` with ``delta=None``)."""
    kwargs.pop("delta", None)
    return optimize(data, estimator, max_its=max_its, delta=None, **kwargs)


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
    **backend_options: Any,
) -> tuple[float, Distribution]:
    """Run ``trials`` EM restarts with distinct seeds derived from ``seed``; return the best
    ``(log_likelihood, model)``, scored on ``vdata`` when given, else on ``data``.

    The data (and ``vdata``) are encoded once and shared by every trial.
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    handle, owned = _handle(data, estimator, backend_options)
    vhandle, vowned = (None, False) if vdata is None else _handle(vdata, estimator, {})
    best: tuple[float, Distribution] | None = None
    try:
        for k, trial_seed in enumerate(trial_seeds(seed, trials)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                model = _fit(
                    handle,
                    None,
                    estimator,
                    max_its,
                    delta,
                    init_p,
                    trial_seed,
                    None,
                    init_estimator,
                    _Progress(out, print_iter, f"trial {k}: "),
                    time.perf_counter(),
                )
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
