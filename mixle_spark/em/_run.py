"""The EM loop behind :mod:`mixle_spark.estimation` (private): one fit's iterations, their records,
the degenerate-component policy, the audit and the trace (the records and convergence rules are in
:mod:`mixle_spark.em._records`; checkpoints are a :class:`~mixle_spark.em.resilient.Checkpointer`
the loop holds).

:func:`~mixle_spark.em.routine.fit_routine` builds an :class:`EMRun` per fit
(per trial of ``best_of``, per candidate of ``select_k``); the public names (``FitResult``,
``IterationRecord``, ``init_fraction``, ``ON_DEGENERATE``, ``FLOOR_WEIGHT``) are re-exported by
:mod:`mixle_spark.estimation`.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from mixle_spark.em._records import (
    FLOOR_WEIGHT,
    MAX_RESEEDS,
    FitResult,
    IterationRecord,
    Progress,
    check_memory,
    check_rows,
    em_step,
    has_converged,
    has_decreased,
    init_fraction,
    nonfinite_error,
    not_converged_message,
    rounding_rtol,
)
from mixle_spark.em.observability import EMTrace, IterationTrace, JsonLinesSink, MlflowSink, PartitionTiming
from mixle_spark.em.resilient import Checkpointer, Finished, Snapshot
from mixle_spark.em.seeding import Seeding, kmeans_parallel
from mixle_spark.em.statistics import Statistics, collect_statistics, statistics_of_pass
from mixle_spark.errors import ConvergenceWarning, DegenerateComponentError
from mixle_spark.parallel.backends.contract import (
    Accumulate,
    EncodedData,
    PartitionAudit,
    PartReports,
    SingleWriter,
    WorkerEvents,
    backend_name,
)
from mixle_spark.parallel.fold import PassOptions
from mixle_spark.stats._random import seed_to_int
from mixle_spark.stats.base import Distribution, Estimator
from mixle_spark.stats.mixture import MixtureDistribution, MixtureEstimator

if TYPE_CHECKING:
    from mixle_spark.em.options import FitOptions

__all__ = ["EMRun", "FitInputs", "start_model"]

logger = logging.getLogger("mixle_spark.estimation")


@dataclass(frozen=True)
class FitInputs:
    """What one fit starts from besides its options.

    Attributes
    ----------
    prev_estimate : Distribution, optional
        Start from this model instead of initializing.
    vhandle : encoded-data handle, optional
        Validation data: the model with the best validation log-likelihood is returned.
    label : str
        Prefix of the fit's progress lines (``"trial 2: "``).
    started : float, optional
        When the fit's clock started (``time.perf_counter()``; default: when the run starts).
    data : str, optional
        The identity of the data (a content digest: :func:`mixle_spark.parallel.backends.registry.
        data_identity`), recorded in the fit's checkpoints and compared with theirs.
    """

    prev_estimate: Distribution | None = None
    vhandle: EncodedData | None = None
    label: str = ""
    started: float | None = None
    data: str | None = None


def _mixture_of(estimator: Estimator) -> Any:
    """The MixtureEstimator ``estimator`` is (or threads), else None."""
    inner = getattr(estimator, "inner", None)
    candidate = estimator if inner is None else inner
    return candidate if isinstance(candidate, MixtureEstimator) else None


def start_model(
    handle: EncodedData,
    estimator: Estimator,
    seed: int,
    init_p: float | None,
    seeding: Seeding,
    report: Callable[[str], None] = logger.info,
) -> Distribution:
    """The model a fit starts from: seeded by k-means|| (the default; ``report`` gets its summary
    line), else random responsibilities over a row sample (``init="random"``, and models k-means||
    cannot seed)."""
    if seeding.mode == "kmeans||":
        model = kmeans_parallel(handle, estimator, seed, seeding, report)
        if model is not None:
            return model
    return handle.pysp_seq_initialize(  # type: ignore[no-any-return]
        estimator, seed, init_fraction(init_p, estimator, len(handle))
    )


class EMRun:
    """One EM fit: the loop and all its state (``iteration`` counts M-steps done; ``model`` is the
    model the next pass scores), the degenerate-component policy, audits and the trace; its
    checkpoints go through the :class:`~mixle_spark.em.resilient.Checkpointer` it holds
    (``checkpoints``, None without ``checkpoint_dir``)."""

    def __init__(
        self, handle: EncodedData, estimator: Estimator, options: FitOptions, inputs: FitInputs = FitInputs()
    ) -> None:
        self.handle, self.estimator, self.options, self.vhandle = handle, estimator, options, inputs.vhandle
        self.prev_estimate = inputs.prev_estimate
        self.data = inputs.data
        self.seed = seed_to_int(options.seed)
        self.progress = Progress(options.out, options.print_iter, inputs.label)
        self.started = time.perf_counter() if inputs.started is None else inputs.started
        self.history: list[IterationRecord] = []
        self.best: tuple[float, float, Distribution] | None = None  # (selection score, ll, model)
        self.iteration = 0
        self.model: Distribution | None = inputs.prev_estimate
        self.converged = False
        self.stopped = "max_its"
        self.dead_reported: set[int] = set()
        self.reseeds: dict[int, int] = {}
        self.resumed_from: int | None = None
        self.resumed_written_at: str | None = None
        self.checkpoint_refit: str | None = None
        self.init_events: list[str] = []
        self.seeding_seconds = 0.0
        self.trace = EMTrace(
            metadata={
                "backend": backend_name(handle),
                "rows": len(handle),
                "estimator": type(estimator).__name__,
                "seed": self.seed,
                "init": options.seeding.mode,
                "max_its": options.max_its,
                "delta": options.delta,
                "tol": options.tol,
                "on_degenerate": options.on_degenerate,
            }
        )
        self.checkpoints: Checkpointer | None = None
        self.kept: tuple[Distribution, float, float, Any] | None = None
        """(model, weight, log-likelihood, statistics) of the pass that scored the last model, when
        ``keep_statistics`` (what :meth:`statistics` returns when that model is the fit's)."""
        self.sinks: list[Any] = []

    # -- the loop ----------------------------------------------------------------------------
    def finished(self) -> Distribution | None:
        """The fit's model when its checkpoint directory holds the final checkpoint of this very fit
        (what :meth:`run` would return at once), else None; reads no data but the row count."""
        check_rows(self.handle, self.estimator)
        finished = self._restore(probe=True)
        if finished is not None:
            self._open_sinks()  # a live trace file is rewritten from the checkpoint, as by run()
            self._close_sinks()
        return finished

    def run(self) -> Distribution:
        check_rows(self.handle, self.estimator)
        check_memory(self.handle, self.estimator)
        finished = self._restore()
        try:
            self._open_sinks()
            if finished is not None:
                return finished
            if self.model is None:
                t_seed = time.perf_counter()
                self.model = self._initial_model()
                self.seeding_seconds = time.perf_counter() - t_seed
            while self.iteration < self.options.max_its:
                t0 = time.perf_counter()
                nobs, ll, nxt, events = self._step(self.model)
                if not self._score(ll, nobs, time.perf_counter() - t0, self.model, events):
                    self.stopped = "decrease"
                    break
                gain = self.history[-1].gain
                self.model, self.iteration = nxt, self.iteration + 1
                if self._converged(gain):
                    self.converged, self.stopped = True, "converged"
                    break
                if self.checkpoints is not None and self.checkpoints.due(self.iteration):
                    self._save()
            return self._finish()
        finally:
            self._close_sinks()

    def _converged(self, gain: float | None) -> bool:
        """Whether the last scored model's ``gain`` meets the stopping rule (``tol`` per unit of the
        pass's row weight, or ``delta``)."""
        last = self.history[-1]
        threshold = self.options.stop_gain(last.nobs)
        rtol = rounding_rtol(self.handle)
        return threshold is not None and has_converged(gain, last.log_likelihood, threshold, rtol)

    def _close_sinks(self) -> None:
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if close is not None:
                close()
        self.sinks = []

    def _initial_model(self) -> Distribution:
        """The starting model (:func:`start_model`); the seeding's summary line goes to the progress
        log and is an event of iteration 0."""

        def report(line: str) -> None:
            self.init_events.append(line)
            self.progress(line, 0)

        init_est = self.options.init_estimator or self.estimator
        return start_model(
            self.handle, init_est, self.seed, self.options.init_p, self.options.seeding, report
        )

    def _finish(self) -> Distribution:
        assert self.model is not None
        if self.stopped != "decrease":
            t0 = time.perf_counter()
            self._reset_parts()
            if self.options.keep_statistics and isinstance(self.handle, Accumulate):
                # the pass that scores the last model also keeps its statistics (no pass more)
                nobs, ll, value = self.handle.pysp_accumulate(self.estimator, self.model)
                self.kept = (self.model, nobs, ll, value)
            else:
                nobs, ll = self.handle.pysp_seq_log_density_sum(self.model)
            if not self._score(ll, nobs, time.perf_counter() - t0, self.model, self._backend_events()):
                self.stopped = "decrease"
            elif not self.converged and self._converged(self.history[-1].gain):
                # The last model's gain is known too: a run that reached max_its exactly as the
                # gain fell below the stopping rule's has converged.
                self.converged, self.stopped = True, "converged"
        if self.best is None:  # only the initial model was scored and it had -inf rows
            raise nonfinite_error(self.iteration, self.history[-1].log_likelihood, self.model, self.handle)
        final = self.best[2] if (self.options.stops or self.vhandle is not None) else self.model
        done = Finished(
            model=final,
            log_likelihood=self.best[1] if final is self.best[2] else self.history[-1].log_likelihood,
            max_its=self.options.max_its,
            validation_log_likelihood=None if self.vhandle is None else self.best[0],
            seconds=time.perf_counter() - self.started,
        )
        self._warn_not_converged(done.max_its)
        final.fit_result = self._result(done)
        if self.checkpoints is not None:
            self._save(done)
        return final

    def statistics(self, model: Distribution) -> Statistics:
        """The statistics of ``model``'s E-step (``keep_statistics``): those of the pass that scored
        the last model when ``model`` is it, else one more pass (a fit that returns an earlier,
        better model)."""
        if self.kept is not None and self.kept[0] is model:
            _model, nobs, ll, value = self.kept
            return statistics_of_pass(self.handle, self.estimator, nobs, ll, value)
        return collect_statistics(self.handle, self.estimator, model)

    def _result(self, done: Finished) -> FitResult:
        """The FitResult of the fit that returns ``done.model``."""
        return FitResult(
            converged=self.converged,
            n_iter=self.iteration,
            log_likelihood=done.log_likelihood,
            seed=self.seed,
            delta=self.options.delta,
            tol=self.options.tol,
            max_its=done.max_its,
            history=self.history,
            validation_log_likelihood=done.validation_log_likelihood,
            seconds=done.seconds,
            stopped_because=self.stopped,
            trace=self.trace,
            resumed_from=self.resumed_from,
            resumed_written_at=self.resumed_written_at,
            checkpoint_refit=self.checkpoint_refit,
            seeding_seconds=self.seeding_seconds,
            free_parameters=self.estimator.n_free_parameters(done.model),
        )

    def _warn_not_converged(self, max_its: int) -> None:
        """The ConvergenceWarning of a fit that stopped at ``max_its`` (also when a finished fit is
        returned from its checkpoint: the warning is part of the result)."""
        if self.options.stops and not self.converged and self.stopped == "max_its":
            last = self.history[-1]
            warnings.warn(
                not_converged_message(max_its, self.options.delta, last.gain, self.options.tol, last.nobs),
                ConvergenceWarning,
                stacklevel=5,
            )

    # -- checkpoints -------------------------------------------------------------------------
    def _restore(self, probe: bool = False) -> Distribution | None:
        """Go on from the newest valid checkpoint of this fit (when there is one and ``resume``);
        the final model when the fit had finished. A ``probe`` (:meth:`finished`) says nothing of a
        checkpoint it does not return from: the run that follows resumes from it and says so."""
        if self.options.checkpoint_dir is None:
            return None
        self.checkpoints = Checkpointer(
            self.handle, self.estimator, self.options, self.prev_estimate, data=self.data
        )
        saved = self.checkpoints.restore(probe=probe)
        if saved is None:
            self.checkpoint_refit = self.checkpoints.refit_because
            if self.checkpoint_refit is not None and not probe:
                self.progress(
                    f"checkpoint {self.checkpoints.directory} holds this fit on other data "
                    f"({self.checkpoint_refit}): fitting afresh, replacing it",
                    0,
                    note=True,
                )
            return None
        done = saved.finished
        # A finished run that stopped at its max_its goes on when more are asked for.
        more = done is not None and saved.stopped == "max_its" and self.options.max_its > done.max_its
        if probe and (done is None or more):
            return None
        self.iteration, self.model, self.history, self.best = (
            saved.iteration, saved.model, saved.history, saved.best,
        )  # fmt: skip
        self.trace, self.dead_reported, self.reseeds = saved.trace, saved.dead_reported, saved.reseeds
        self.converged, self.stopped, self.resumed_from = saved.converged, saved.stopped, saved.iteration
        self.resumed_written_at = saved.written_at
        where = self.checkpoints.directory
        self.progress(f"resuming from checkpoint {where} at iteration {saved.iteration}", 0, note=True)
        if done is None:
            return None
        if more:  # from its last model, whose final scoring the next pass repeats
            self.history.pop()
            self.trace.records.pop()
            return None
        done.model.fit_result = self._result(done)
        self.progress(f"the fit in {where} had finished; returning its model", 0, note=True)
        self._warn_not_converged(done.max_its)
        return done.model

    def _save(self, done: Finished | None = None) -> None:
        assert self.model is not None and self.checkpoints is not None
        self.checkpoints.save(
            Snapshot(
                iteration=self.iteration,
                model=self.model,
                history=self.history,
                best=self.best,
                trace=self.trace,
                dead_reported=self.dead_reported,
                reseeds=self.reseeds,
                converged=self.converged,
                stopped=self.stopped,
                finished=done,
            )
        )

    def _step(self, model: Distribution) -> tuple[float, float, Distribution, list[str]]:
        """One pass and M-step from ``model``, with the audit and the degenerate-component policy."""
        events: list[str] = []
        audit = self.options.sdc_audit
        audited = frozenset() if audit is None or not audit.due(self.iteration) else self._audit_parts()
        self._reset_parts()
        try:
            if audited:
                audited_handle = cast(PartitionAudit, self.handle)  # an audit runs on such handles only
                nobs, ll, nxt = audited_handle.pysp_em_step(
                    self.estimator, model, options=PassOptions(keep=audited)
                )
                first = {r.part: r.kept for r in audited_handle.last_parts if r.kept is not None}
                parts = audited_handle.last_parts
                second = audited_handle.pysp_partition_payloads(self.estimator, model, audited)
                audited_handle.last_parts = parts
                events.append(audit.check(self.iteration, first, second).describe())
            else:
                nobs, ll, nxt = em_step(self.handle, self.estimator, model)
        except DegenerateComponentError as err:
            nobs, ll = self.handle.pysp_seq_log_density_sum(model)  # the pass's ll went with the M-step
            nxt = self._degenerate(err, model, events)
        else:
            nxt = self._dead_components(nxt, events)
        return nobs, ll, nxt, [*self._backend_events(), *events]

    def _backend_events(self) -> list[str]:
        """What the backend reports about its workers since the last pass (resident tasks lost,
        restarted, data laid out again), for the trace and the progress log."""
        events, self.init_events = self.init_events, []
        return events + (list(self.handle.take_events()) if isinstance(self.handle, WorkerEvents) else [])

    def _audit_parts(self) -> frozenset[int]:
        if not (isinstance(self.handle, PartitionAudit) and self.handle.supports_pass_options):
            raise ValueError(
                f"audit: the {type(self.handle).__name__} backend cannot recompute single partitions; "
                "use the local, spark, mp or mpi backend"
            )
        parts = [r.part for r in self.handle.last_parts if r.rows > 0]
        if not parts:
            parts = list(self.handle.partition_ids())
        return self.options.sdc_audit.select(self.iteration, parts)  # type: ignore[no-any-return]

    def _reset_parts(self) -> None:
        if isinstance(self.handle, PartReports):
            self.handle.last_parts = ()

    # -- degenerate components ---------------------------------------------------------------
    def _degenerate(self, err: Any, model: Distribution, events: list[str]) -> Distribution:
        policy = self.options.on_degenerate
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
        if not isinstance(model, MixtureDistribution):
            return model
        w = np.asarray(model.w, dtype=np.float64)
        dead = [int(j) for j in np.flatnonzero(w <= 0.0)]
        if not dead:
            return model
        policy = self.options.on_degenerate
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
        seed, the iteration and ``j``): what the component would have started as. The
        :data:`MAX_RESEEDS`-th + 1 restart of one component stops the fit instead."""
        mixture = _mixture_of(self.estimator)
        if mixture is None:
            raise ValueError("on_degenerate='reseed' needs a MixtureEstimator")
        self.reseeds[j] = self.reseeds.get(j, 0) + 1
        if self.reseeds[j] > MAX_RESEEDS:
            raise self._stopped(
                DegenerateComponentError([(j, f"degenerate again after {MAX_RESEEDS} reseeds")]),
                f"component {j} degenerated again after {MAX_RESEEDS} reseeds; stopped: the data may not "
                "support this many components (fit fewer, or use on_degenerate='floor')",
            )
        fresh_seed = seed_to_int(f"{self.seed}:reseed:{self.iteration}:{j}")
        try:
            fresh = self.handle.pysp_seq_initialize(
                self.estimator, fresh_seed, init_fraction(self.options.init_p, mixture, len(self.handle))
            )
        except DegenerateComponentError as err:
            which = ", ".join(f"component {c} ({why})" for c, why in err.failures)
            raise self._stopped(
                err, f"reseeding component {j} failed: the fresh start could not build {which}; stopped"
            ) from err
        return fresh.components[j]  # type: ignore[attr-defined, no-any-return]  # a mixture: checked above

    def _stopped(self, err: Any, message: str) -> Any:
        """A DegenerateComponentError for this iteration, carrying the model it started from."""
        raised = DegenerateComponentError(
            err.failures, err.components, err.weights, message=f"iteration {self.iteration}: {message}"
        )
        raised.iteration, raised.last_model = self.iteration, self.model
        return raised

    # -- scoring, trace ----------------------------------------------------------------------
    def _score(self, ll: float, nobs: float, secs: float, mdl: Distribution, events: Any) -> bool:
        """Record a scored model; returns False when the run must stop (a decrease)."""
        it = self.iteration
        if not math.isfinite(ll):
            if it == 0 and self.prev_estimate is None and not math.isnan(ll):
                rec = IterationRecord(it, ll, None, nobs, secs)
                self._record(rec, mdl, [*events, "initial model gives some rows zero density"], note=True)
                return True
            raise nonfinite_error(it, ll, mdl, self.handle)
        last = next(
            (r.log_likelihood for r in reversed(self.history) if math.isfinite(r.log_likelihood)), None
        )
        gain = None if last is None else ll - last
        rec = IterationRecord(it, ll, gain, nobs, secs)
        self._record(rec, mdl, events)
        sel = ll if self.vhandle is None else self.vhandle.pysp_seq_log_density_sum(mdl)[1]
        best = self.best
        dropped = best is not None and has_decreased(ll, best[1], rounding_rtol(self.handle))
        if best is not None and self.options.stops and dropped and self.vhandle is None:
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
        self.history.append(rec)
        parts = [
            PartitionTiming(r.part, r.seconds, r.rows, r.stat_bytes)
            for r in (self.handle.last_parts if isinstance(self.handle, PartReports) else ())
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
        writer = not isinstance(self.handle, SingleWriter) or self.handle.is_root
        if self.options.trace_path is not None and writer:
            path = self.options.trace_path
            if len(self.trace):  # resumed: the file restarts from the checkpoint's records
                self.trace.to_jsonl(path)
            self.sinks.append(JsonLinesSink(path, self.trace.metadata, append=bool(len(self.trace))))
        use_mlflow = self.options.mlflow
        if use_mlflow or (use_mlflow is None and MlflowSink.active()):
            self.sinks.append(MlflowSink())
