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
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from mixle_spark.errors import ConvergenceWarning, NonFiniteLikelihoodError, TooFewRowsError
from mixle_spark.stats._random import RowRandom, seed_to_int
from mixle_spark.stats.base import Distribution, Estimator

__all__ = [
    "FLOOR_WEIGHT",
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
    trace: Any = None
    """The per-iteration :class:`~mixle_spark.parallel.em_observability.EMTrace`."""
    resumed_from: int | None = None
    """The iteration of the checkpoint this fit resumed from, if it did."""


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
    """Per-iteration progress: every line logged at INFO, every ``print_iter``-th written to ``out``."""

    def __init__(self, out: IO[str] | None, print_iter: int, label: str = "") -> None:
        self.out = out
        self.print_iter = max(int(print_iter or 0), 0)
        self.label = label

    def __call__(self, line: str, iteration: int, note: bool = False) -> None:
        line = self.label + line
        logger.info(line)
        if self.out is not None and self.print_iter and (iteration % self.print_iter == 0 or note):
            self.out.write(line + "\n")
            self.out.flush()


def _converged(gain: float | None, ll: float, delta: float) -> bool:
    """``0 <= gain < delta``, a drop within rounding counting as 0."""
    return gain is not None and -DECREASE_RTOL * max(1.0, abs(ll)) <= gain < delta


def _decreased(ll: float, best_ll: float) -> bool:
    return ll < best_ll - DECREASE_RTOL * max(1.0, abs(best_ll))


ON_DEGENERATE = ("stop", "floor", "reseed")
"""What the EM driver does when an M-step degenerates a mixture component (see ``optimize``)."""

FLOOR_WEIGHT = 1e-6
"""The weight a floored component keeps (``on_degenerate="floor"``), before renormalisation."""


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
    checkpoint_dir : path or URI, optional
        Write a checkpoint there every ``checkpoint_every`` iterations and resume from the newest
        valid one (:mod:`mixle_spark.parallel.resilient_em`): an interrupted fit re-run with the
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
        component) with weight ``1/K``. A component left with weight 0 (no rows) is reported in the
        trace; ``floor`` gives it :data:`FLOOR_WEIGHT`, ``reseed`` restarts it.
    audit : SDCAudit or True, optional
        Silent-corruption audit (:class:`~mixle_spark.parallel.sdc_audit.SDCAudit`; True = defaults):
        recompute a sample of partitions by an independent pass and compare.
    trace_path : path, optional
        Write the EM trace there as JSON lines while the fit runs (one line per iteration).
    mlflow : bool, optional
        Log per-iteration metrics to MLflow; None (default) does when mlflow is installed and a run
        is active.

    The per-iteration trace (:class:`~mixle_spark.parallel.em_observability.EMTrace`: log-likelihood,
    gain, rows, seconds, rows/s, bytes of statistics merged, partition time skew, component
    weights, events) is returned as ``model.fit_result.trace``.
    """
    if max_its < 0:
        raise ValueError(f"max_its must be >= 0, got {max_its}")
    if delta is not None and not (delta >= 0):
        raise ValueError(f"delta must be >= 0 or None, got {delta}")
    settings = _Settings.build(
        checkpoint_dir, checkpoint_every, resume, on_degenerate, audit, trace_path, mlflow
    )
    started = time.perf_counter()
    handle, owned = _handle(data, estimator, backend_options)
    vhandle, vowned = (None, False) if vdata is None else _handle(vdata, estimator, {})
    try:
        return _Run(
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
            settings,
        ).run()
    finally:
        _release(handle, owned)
        _release(vhandle, vowned)


@dataclass(frozen=True)
class _Settings:
    """The reliability and observability options of one fit, validated."""

    checkpoint_dir: Any = None
    checkpoint_every: int = 1
    resume: bool = True
    on_degenerate: str = "stop"
    audit: Any = None
    trace_path: Any = None
    mlflow: bool | None = None

    @classmethod
    def build(
        cls,
        checkpoint_dir: Any,
        checkpoint_every: int,
        resume: bool,
        on_degenerate: str,
        audit: Any,
        trace_path: Any,
        mlflow: bool | None,
    ) -> _Settings:
        if type(checkpoint_every) is not int or checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be an integer >= 1, got {checkpoint_every!r}")
        if type(resume) is not bool:
            raise TypeError(f"resume must be True or False, got {resume!r}")
        if on_degenerate not in ON_DEGENERATE:
            raise ValueError(
                f"on_degenerate must be one of {', '.join(map(repr, ON_DEGENERATE))}, got {on_degenerate!r}"
            )
        if audit is True:
            from mixle_spark.parallel.sdc_audit import SDCAudit

            audit = SDCAudit()
        elif audit is False:
            audit = None
        if audit is not None and not (hasattr(audit, "select") and hasattr(audit, "check")):
            raise TypeError(f"audit must be an SDCAudit, True or None, got {audit!r}")
        if mlflow is not None and type(mlflow) is not bool:
            raise TypeError(f"mlflow must be True, False or None, got {mlflow!r}")
        return cls(checkpoint_dir, checkpoint_every, resume, on_degenerate, audit, trace_path, mlflow)

    def for_trial(self, k: int) -> _Settings:
        """Settings of restart ``k`` of ``best_of``: checkpoints and trace files per trial."""
        from dataclasses import replace

        ckpt = None if self.checkpoint_dir is None else f"{str(self.checkpoint_dir).rstrip('/')}/trial-{k}"
        trace = None
        if self.trace_path is not None:
            path = Path(self.trace_path)
            trace = path.with_name(f"{path.stem}.trial-{k}{path.suffix or '.jsonl'}")
        return replace(self, checkpoint_dir=ckpt, trace_path=trace)


def _plain_model(model: Distribution) -> str:
    """The model as saved-model JSON text (a string, so the checkpoint's sorted keys cannot reorder
    a record's fields)."""
    from mixle_spark.spec import model_to_json

    return model_to_json(model)


def _load_model(payload: Any) -> Distribution:
    from mixle_spark.spec import model_from_json

    return model_from_json(payload)


def _mixture_of(estimator: Estimator) -> Any:
    """The MixtureEstimator ``estimator`` is (or threads), else None."""
    from mixle_spark.stats.mixture import MixtureEstimator

    inner = getattr(estimator, "inner", None)
    candidate = estimator if inner is None else inner
    return candidate if isinstance(candidate, MixtureEstimator) else None


class _Run:
    """One EM fit: the loop, its bookkeeping, checkpoints, the degenerate-component policy, audits
    and the trace. ``iteration`` counts M-steps done; ``model`` is the model the next pass scores."""

    def __init__(
        self,
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
        settings: _Settings,
    ) -> None:
        from mixle_spark.parallel.em_observability import EMTrace

        self.handle, self.vhandle, self.estimator = handle, vhandle, estimator
        self.max_its, self.delta, self.init_p, self.seed = max_its, delta, init_p, seed
        self.prev_estimate, self.init_estimator = prev_estimate, init_estimator
        self.progress, self.started, self.settings = progress, started, settings
        self.history: list[IterationRecord] = []
        self.best: tuple[float, float, Distribution] | None = None  # (selection score, ll, model)
        self.iteration = 0
        self.model: Distribution | None = prev_estimate
        self.converged = False
        self.stopped = "max_its"
        self.dead_reported: set[int] = set()
        self.resumed_from: int | None = None
        self.trace = EMTrace(
            metadata={
                "backend": type(handle).__name__,
                "rows": len(handle),
                "estimator": type(estimator).__name__,
                "seed": seed,
                "max_its": max_its,
                "delta": delta,
                "on_degenerate": settings.on_degenerate,
            }
        )
        self.store: Any = None
        self.fingerprint: dict[str, Any] | None = None
        self.sinks: list[Any] = []

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> Distribution:
        _check_rows(self.handle, self.estimator)
        finished = self._restore()
        try:
            self._open_sinks()
            if finished is not None:
                return finished
            if self.model is None:
                init_est = self.init_estimator or self.estimator
                self.model = self.handle.pysp_seq_initialize(
                    init_est, self.seed, init_fraction(self.init_p, init_est, len(self.handle))
                )
            while self.iteration < self.max_its:
                t0 = time.perf_counter()
                nobs, ll, nxt, events = self._step(self.model)
                if not self._score(ll, nobs, time.perf_counter() - t0, self.model, events):
                    self.stopped = "decrease"
                    break
                gain = self.history[-1].gain
                self.model, self.iteration = nxt, self.iteration + 1
                if self.delta is not None and _converged(gain, self.history[-1].log_likelihood, self.delta):
                    self.converged, self.stopped = True, "converged"
                    break
                if self.store is not None and self.iteration % self.settings.checkpoint_every == 0:
                    self._save()
            return self._finish()
        finally:
            for sink in self.sinks:
                close = getattr(sink, "close", None)
                if close is not None:
                    close()

    def _finish(self) -> Distribution:
        assert self.model is not None
        if self.stopped != "decrease":
            t0 = time.perf_counter()
            self._reset_parts()
            nobs, ll = self.handle.pysp_seq_log_density_sum(self.model)
            if not self._score(ll, nobs, time.perf_counter() - t0, self.model, ()):
                self.stopped = "decrease"
            elif not self.converged and self.delta is not None:
                # The last model's gain is known too: a run that reached max_its exactly as the
                # gain fell below delta has converged.
                if _converged(self.history[-1].gain, self.history[-1].log_likelihood, self.delta):
                    self.converged, self.stopped = True, "converged"
        if self.best is None:  # only the initial model was scored and it had -inf rows
            raise _nonfinite_error(self.iteration, self.history[-1].log_likelihood, self.model, self.handle)
        final = self.best[2] if (self.delta is not None or self.vhandle is not None) else self.model
        final_ll = self.best[1] if final is self.best[2] else self.history[-1].log_likelihood
        if self.delta is not None and not self.converged and self.stopped == "max_its":
            warnings.warn(
                f"EM did not converge in {self.max_its} iterations (delta={self.delta}, last gain="
                f"{self.history[-1].gain}); raise max_its or delta",
                ConvergenceWarning,
                stacklevel=4,
            )
        result = FitResult(
            converged=self.converged,
            n_iter=self.iteration,
            log_likelihood=final_ll,
            seed=self.seed,
            delta=self.delta,
            max_its=self.max_its,
            history=self.history,
            validation_log_likelihood=None if self.vhandle is None else self.best[0],
            seconds=time.perf_counter() - self.started,
            stopped_because=self.stopped,
            trace=self.trace,
            resumed_from=self.resumed_from,
        )
        final.fit_result = result
        if self.store is not None:
            self._save(final=(final, result))
        return final

    def _step(self, model: Distribution) -> tuple[float, float, Distribution, list[str]]:
        """One pass and M-step from ``model``, with the audit and the degenerate-component policy."""
        from mixle_spark.errors import DegenerateComponentError

        events: list[str] = []
        audit = self.settings.audit
        audited = frozenset() if audit is None or not audit.due(self.iteration) else self._audit_parts()
        self._reset_parts()
        try:
            if audited:
                from mixle_spark.parallel._handle import PassOptions

                nobs, ll, nxt = self.handle.pysp_em_step(
                    self.estimator, model, options=PassOptions(keep=audited)
                )
                first = {r.part: r.kept for r in self.handle.last_parts if r.kept is not None}
                parts = self.handle.last_parts
                second = self.handle.pysp_partition_payloads(self.estimator, model, audited)
                self.handle.last_parts = parts
                events.append(audit.check(self.iteration, first, second).describe())
            else:
                nobs, ll, nxt = _em_step(self.handle, self.estimator, model)
        except DegenerateComponentError as err:
            nobs, ll = self.handle.pysp_seq_log_density_sum(model)  # the pass's ll went with the M-step
            nxt = self._degenerate(err, model, events)
        else:
            nxt = self._dead_components(nxt, events)
        return nobs, ll, nxt, events

    def _audit_parts(self) -> frozenset[int]:
        if not getattr(self.handle, "supports_pass_options", False):
            raise ValueError(
                f"audit: the {type(self.handle).__name__} backend cannot recompute single partitions; "
                "use the local, spark, mp or mpi backend"
            )
        parts = [r.part for r in getattr(self.handle, "last_parts", ()) if r.rows > 0]
        if not parts:
            parts = list(self.handle.partition_ids())
        return self.settings.audit.select(self.iteration, parts)  # type: ignore[no-any-return]

    def _reset_parts(self) -> None:
        if hasattr(self.handle, "last_parts"):
            self.handle.last_parts = ()

    # -- degenerate components ---------------------------------------------------------------
    def _degenerate(self, err: Any, model: Distribution, events: list[str]) -> Distribution:
        from mixle_spark.errors import DegenerateComponentError
        from mixle_spark.stats.mixture import MixtureDistribution

        policy = self.settings.on_degenerate
        which = ", ".join(f"component {j} ({why})" for j, why in err.failures)
        top = isinstance(model, MixtureDistribution) and err.components is not None
        top = top and len(err.components) == len(model.components)  # type: ignore[attr-defined]
        if policy == "stop" or not top:
            why = (
                f"on_degenerate={policy!r}"
                if top
                else f"the mixture is nested, so on_degenerate={policy!r} cannot replace its component"
            )
            raised = DegenerateComponentError(
                err.failures,
                err.components,
                err.weights,
                message=(
                    f"iteration {self.iteration}: the M-step could not build {which}; stopped ({why}). "
                    "on_degenerate='floor' keeps a component's previous parameters, 'reseed' restarts "
                    "it from random rows; err.last_model is the last good model"
                ),
            )
            raised.iteration, raised.last_model = self.iteration, model
            raise raised from err
        comps = list(err.components)
        w = np.array(err.weights, dtype=np.float64)
        failed = [j for j, _why in err.failures]
        for j in failed:
            comps[j] = model.components[j] if policy == "floor" else self._reseed(j)  # type: ignore[attr-defined]
        events.append(f"{'floored' if policy == 'floor' else 'reseeded'} {which}")
        logger.warning("iteration %d: %s", self.iteration, events[-1])
        return MixtureDistribution(comps, self._fixed_weights(w, failed, policy))

    def _dead_components(self, model: Distribution, events: list[str]) -> Distribution:
        from mixle_spark.stats.mixture import MixtureDistribution

        if not isinstance(model, MixtureDistribution):
            return model
        w = np.asarray(model.w, dtype=np.float64)
        dead = [int(j) for j in np.flatnonzero(w <= 0.0)]
        if not dead:
            return model
        policy = self.settings.on_degenerate
        if policy == "stop":
            new = [j for j in dead if j not in self.dead_reported]
            if new:
                self.dead_reported.update(new)
                events.append(f"component(s) {new} have weight 0 (no rows)")
            return model
        comps = list(model.components)
        if policy == "reseed":
            for j in dead:
                comps[j] = self._reseed(j)
        events.append(f"{'floored' if policy == 'floor' else 'reseeded'} weight-0 component(s) {dead}")
        return MixtureDistribution(comps, self._fixed_weights(w, dead, policy))

    @staticmethod
    def _fixed_weights(w: np.ndarray, changed: list[int], policy: str) -> np.ndarray:
        w = np.where(np.isfinite(w), w, 0.0)
        k = len(w)
        if policy == "floor":
            w[changed] = np.maximum(w[changed], FLOOR_WEIGHT)
            return w / w.sum()
        rest = np.setdiff1d(np.arange(k), changed)
        out = np.zeros(k)
        out[changed] = 1.0 / k
        left = 1.0 - len(changed) / k
        total = float(w[rest].sum())
        out[rest] = w[rest] / total * left if total > 0 else left / max(len(rest), 1)
        return out

    def _reseed(self, j: int) -> Distribution:
        """Component ``j`` of a fresh random initial model (rows and responsibilities drawn from the
        seed, the iteration and ``j``): what the component would have started as."""
        mixture = _mixture_of(self.estimator)
        if mixture is None:
            raise ValueError("on_degenerate='reseed' needs a MixtureEstimator")
        fresh_seed = seed_to_int(f"{self.seed}:reseed:{self.iteration}:{j}")
        fresh = self.handle.pysp_seq_initialize(
            self.estimator, fresh_seed, init_fraction(self.init_p, mixture, len(self.handle))
        )
        return fresh.components[j]  # type: ignore[no-any-return]

    # -- scoring, trace ----------------------------------------------------------------------
    def _score(self, ll: float, nobs: float, secs: float, mdl: Distribution, events: Any) -> bool:
        """Record a scored model; returns False when the run must stop (a decrease)."""
        it = self.iteration
        if not math.isfinite(ll):
            if it == 0 and self.prev_estimate is None and not math.isnan(ll):
                rec = IterationRecord(it, ll, None, nobs, secs)
                self._record(rec, mdl, [*events, "initial model gives some rows zero density"], note=True)
                return True
            raise _nonfinite_error(it, ll, mdl, self.handle)
        last = next(
            (r.log_likelihood for r in reversed(self.history) if math.isfinite(r.log_likelihood)), None
        )
        gain = None if last is None else ll - last
        rec = IterationRecord(it, ll, gain, nobs, secs)
        self._record(rec, mdl, events)
        sel = ll if self.vhandle is None else self.vhandle.pysp_seq_log_density_sum(mdl)[1]
        best = self.best
        if best is not None and self.delta is not None and _decreased(ll, best[1]) and self.vhandle is None:
            warnings.warn(
                f"EM log-likelihood decreased at iteration {it} ({best[1]:.12g} -> {ll:.12g}); "
                "returning the best model seen",
                ConvergenceWarning,
                stacklevel=5,
            )
            return False
        if best is None or sel >= best[0]:
            self.best = (sel, ll, mdl)
        return True

    def _record(self, rec: IterationRecord, mdl: Distribution, events: Any, note: bool = False) -> None:
        from mixle_spark.parallel.em_observability import IterationTrace, PartitionTiming

        self.history.append(rec)
        parts = [
            PartitionTiming(r.part, r.seconds, r.rows, r.stat_bytes)
            for r in getattr(self.handle, "last_parts", ())
        ]
        weights = getattr(mdl, "w", None)
        entry = IterationTrace.from_pass(
            iteration=rec.iteration,
            log_likelihood=rec.log_likelihood,
            delta=rec.gain,
            weight=rec.nobs,
            seconds=rec.seconds,
            parts=parts,
            component_weights=None if weights is None else tuple(float(x) for x in np.asarray(weights)),
            events=tuple(events),
            rows=len(self.handle),
        )
        self.trace.append(entry)
        self.progress(entry.progress_line(), rec.iteration, note=note or bool(events))
        for sink in self.sinks:
            sink(entry)

    def _open_sinks(self) -> None:
        from mixle_spark.parallel.em_observability import JsonLinesSink, MlflowSink

        if self.settings.trace_path is not None:
            path = self.settings.trace_path
            if len(self.trace):  # resumed: the file restarts from the checkpoint's records
                self.trace.to_jsonl(path)
            self.sinks.append(JsonLinesSink(path, self.trace.metadata, append=bool(len(self.trace))))
        use_mlflow = self.settings.mlflow
        if use_mlflow or (use_mlflow is None and MlflowSink.active()):
            self.sinks.append(MlflowSink())

    # -- checkpoints -------------------------------------------------------------------------
    def _restore(self) -> Distribution | None:
        """Load the newest valid checkpoint (when asked); the final model if the fit had finished."""
        if self.settings.checkpoint_dir is None:
            return None
        from mixle_spark.parallel.em_observability import EMTrace
        from mixle_spark.parallel.resilient_em import CheckpointStore, check_fingerprint, fit_fingerprint

        self.store = CheckpointStore(self.settings.checkpoint_dir)
        self.fingerprint = fit_fingerprint(
            self.estimator,
            rows=len(self.handle),
            seed=self.seed,
            init_p=self.init_p,
            delta=self.delta,
            on_degenerate=self.settings.on_degenerate,
            prev_estimate=self.prev_estimate,
            init_estimator=self.init_estimator,
        )
        if not self.settings.resume:
            self.store.clear()
            return None
        found = self.store.latest()
        if found is None:
            return None
        iteration, state = found
        check_fingerprint(state.get("fingerprint", {}), self.fingerprint, str(self.store.directory))
        self.iteration = int(state["iteration"])
        self.model = _load_model(state["model"])
        self.history = [IterationRecord(**r) for r in state["history"]]
        if state.get("best") is not None:
            b = state["best"]
            self.best = (float(b["score"]), float(b["ll"]), _load_model(b["model"]))
        self.trace = EMTrace.from_dict(state["trace"])
        self.dead_reported = set(state.get("dead_reported", []))
        self.converged = bool(state.get("converged", False))
        self.stopped = str(state.get("stopped", "max_its"))
        self.resumed_from = iteration
        logger.info("resuming from checkpoint %s at iteration %d", self.store.directory, iteration)
        final = state.get("final")
        if final is None:
            return None
        if self.stopped == "max_its" and self.max_its > int(final["max_its"]):
            # The finished run stopped at its max_its and more are asked for: go on from its last
            # model, whose final scoring the next pass repeats.
            self.history.pop()
            self.trace.records.pop()
            return None
        model = _load_model(final["model"])
        model.fit_result = FitResult(
            converged=self.converged,
            n_iter=self.iteration,
            log_likelihood=float(final["log_likelihood"]),
            seed=self.seed,
            delta=self.delta,
            max_its=int(final["max_its"]),
            history=self.history,
            validation_log_likelihood=final.get("validation_log_likelihood"),
            seconds=float(final["seconds"]),
            stopped_because=self.stopped,
            trace=self.trace,
            resumed_from=iteration,
        )
        logger.info("the fit in %s had finished; returning its model", self.store.directory)
        return model

    def _save(self, final: tuple[Distribution, FitResult] | None = None) -> None:
        assert self.model is not None
        state: dict[str, Any] = {
            "fingerprint": self.fingerprint,
            "iteration": self.iteration,
            "model": _plain_model(self.model),
            "history": [asdict(r) for r in self.history],
            "best": None
            if self.best is None
            else {"score": self.best[0], "ll": self.best[1], "model": _plain_model(self.best[2])},
            "trace": self.trace.to_dict(),
            "dead_reported": sorted(self.dead_reported),
            "converged": self.converged,
            "stopped": self.stopped,
            "rng": {"seed": self.seed, "streams": "row-keyed hashes of the seed; no other state"},
            "final": None,
        }
        if final is not None:
            model, result = final
            state["final"] = {
                "model": _plain_model(model),
                "log_likelihood": result.log_likelihood,
                "max_its": result.max_its,
                "validation_log_likelihood": result.validation_log_likelihood,
                "seconds": result.seconds,
            }
        path = self.store.save(self.iteration, state)
        logger.info("checkpoint written: %s", path)


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
    *,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 1,
    resume: bool = True,
    on_degenerate: str = "stop",
    audit: Any = None,
    trace_path: str | os.PathLike[str] | None = None,
    mlflow: bool | None = None,
    **backend_options: Any,
) -> tuple[float, Distribution]:
    """Run ``trials`` EM restarts with distinct seeds derived from ``seed``; return the best
    ``(log_likelihood, model)``, scored on ``vdata`` when given, else on ``data``.

    The data (and ``vdata``) are encoded once and shared by every trial. The reliability and trace
    options are ``optimize``'s; each trial checkpoints under ``checkpoint_dir/trial-K`` and writes its
    trace to ``NAME.trial-K.jsonl`` next to ``trace_path``, so an interrupted ``best_of`` resumes
    trial by trial (finished trials return at once).
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    settings = _Settings.build(
        checkpoint_dir, checkpoint_every, resume, on_degenerate, audit, trace_path, mlflow
    )
    handle, owned = _handle(data, estimator, backend_options)
    vhandle, vowned = (None, False) if vdata is None else _handle(vdata, estimator, {})
    best: tuple[float, Distribution] | None = None
    try:
        for k, trial_seed in enumerate(trial_seeds(seed, trials)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                model = _Run(
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
                    settings.for_trial(k),
                ).run()
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
