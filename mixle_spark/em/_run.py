"""The EM loop behind :mod:`mixle_spark.estimation` (private): one fit's iterations, their records,
checkpoints, the degenerate-component policy, the audit and the trace (the records and convergence
rules are in :mod:`mixle_spark.em._records`).

:func:`mixle_spark.estimation.optimize` and :func:`~mixle_spark.estimation.best_of` build an
:class:`EMRun` per fit (per trial); the public names (``FitResult``, ``IterationRecord``,
``init_fraction``, ``ON_DEGENERATE``, ``FLOOR_WEIGHT``) are re-exported there.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mixle_spark.em._records import (
    FLOOR_WEIGHT,
    MAX_RESEEDS,
    ON_DEGENERATE,
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
)
from mixle_spark.em.resilient import CheckpointedRun
from mixle_spark.em.seeding import Seeding, kmeans_parallel
from mixle_spark.errors import ConvergenceWarning
from mixle_spark.parallel.backends.contract import (
    PartitionAudit,
    PartReports,
    SingleWriter,
    WorkerEvents,
    backend_name,
)
from mixle_spark.stats._random import seed_to_int
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["EMRun", "Settings", "start_model"]

logger = logging.getLogger("mixle_spark.estimation")


@dataclass(frozen=True)
class Settings:
    """The reliability and observability options of one fit, validated."""

    checkpoint_dir: Any = None
    checkpoint_every: int = 1
    resume: bool = True
    on_degenerate: str = "stop"
    audit: Any = None
    trace_path: Any = None
    mlflow: bool | None = None
    seeding: Seeding = field(default_factory=Seeding)
    checkpoint_key: bytes | None = field(default=None, repr=False)
    """Authenticates the checkpoints (None: the environment's key, if any); never shown."""

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
        init: Any = "kmeans||",
        init_steps: Any = None,
        checkpoint_key: Any = None,
    ) -> Settings:
        if type(checkpoint_every) is not int or checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be an integer >= 1, got {checkpoint_every!r}")
        if type(resume) is not bool:
            raise TypeError(f"resume must be True or False, got {resume!r}")
        if on_degenerate not in ON_DEGENERATE:
            raise ValueError(
                f"on_degenerate must be one of {', '.join(map(repr, ON_DEGENERATE))}, got {on_degenerate!r}"
            )
        if audit is True:
            from mixle_spark.em.sdc_audit import SDCAudit

            audit = SDCAudit()
        elif audit is False:
            audit = None
        if audit is not None and not (hasattr(audit, "select") and hasattr(audit, "check")):
            raise TypeError(f"audit must be an SDCAudit, True or None, got {audit!r}")
        if mlflow is not None and type(mlflow) is not bool:
            raise TypeError(f"mlflow must be True, False or None, got {mlflow!r}")
        seeding = Seeding.build(init, init_steps)
        if checkpoint_key is not None:
            from mixle_spark.em._checkpoint_store import checkpoint_key as key_bytes

            checkpoint_key = key_bytes(checkpoint_key)
        return cls(
            checkpoint_dir,
            checkpoint_every,
            resume,
            on_degenerate,
            audit,
            trace_path,
            mlflow,
            seeding,
            checkpoint_key,
        )

    def for_trial(self, k: int) -> Settings:
        """Settings of restart ``k`` of ``best_of``: checkpoints and trace files per trial."""
        from dataclasses import replace

        ckpt = None if self.checkpoint_dir is None else f"{str(self.checkpoint_dir).rstrip('/')}/trial-{k}"
        trace = None
        if self.trace_path is not None:
            path = Path(self.trace_path)
            trace = path.with_name(f"{path.stem}.trial-{k}{path.suffix or '.jsonl'}")
        return replace(self, checkpoint_dir=ckpt, trace_path=trace)


def _mixture_of(estimator: Estimator) -> Any:
    """The MixtureEstimator ``estimator`` is (or threads), else None."""
    from mixle_spark.stats.mixture import MixtureEstimator

    inner = getattr(estimator, "inner", None)
    candidate = estimator if inner is None else inner
    return candidate if isinstance(candidate, MixtureEstimator) else None


def start_model(
    handle: Any,
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


class EMRun(CheckpointedRun):
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
        progress: Progress,
        started: float,
        settings: Settings,
    ) -> None:
        from mixle_spark.em.observability import EMTrace

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
        self.reseeds: dict[int, int] = {}
        self.resumed_from: int | None = None
        self.init_events: list[str] = []
        self.seeding_seconds = 0.0
        self.trace = EMTrace(
            metadata={
                "backend": backend_name(handle),
                "rows": len(handle),
                "estimator": type(estimator).__name__,
                "seed": seed,
                "init": settings.seeding.mode,
                "max_its": max_its,
                "delta": delta,
                "on_degenerate": settings.on_degenerate,
            }
        )
        self.store: Any = None
        self.fingerprint: dict[str, Any] | None = None
        self.sinks: list[Any] = []

    # -- the loop ----------------------------------------------------------------------------
    def finished(self) -> Distribution | None:
        """The fit's model when its checkpoint directory holds the final checkpoint of this very fit
        (what :meth:`run` would return at once), else None; reads no data but the row count."""
        check_rows(self.handle, self.estimator)
        finished = self._restore()
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
            while self.iteration < self.max_its:
                t0 = time.perf_counter()
                nobs, ll, nxt, events = self._step(self.model)
                if not self._score(ll, nobs, time.perf_counter() - t0, self.model, events):
                    self.stopped = "decrease"
                    break
                gain = self.history[-1].gain
                self.model, self.iteration = nxt, self.iteration + 1
                if self.delta is not None and has_converged(
                    gain, self.history[-1].log_likelihood, self.delta
                ):
                    self.converged, self.stopped = True, "converged"
                    break
                if self.store is not None and self.iteration % self.settings.checkpoint_every == 0:
                    self._save()
            return self._finish()
        finally:
            self._close_sinks()

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

        init_est = self.init_estimator or self.estimator
        return start_model(self.handle, init_est, self.seed, self.init_p, self.settings.seeding, report)

    def _finish(self) -> Distribution:
        assert self.model is not None
        if self.stopped != "decrease":
            t0 = time.perf_counter()
            self._reset_parts()
            nobs, ll = self.handle.pysp_seq_log_density_sum(self.model)
            if not self._score(ll, nobs, time.perf_counter() - t0, self.model, self._backend_events()):
                self.stopped = "decrease"
            elif not self.converged and self.delta is not None:
                # The last model's gain is known too: a run that reached max_its exactly as the
                # gain fell below delta has converged.
                if has_converged(self.history[-1].gain, self.history[-1].log_likelihood, self.delta):
                    self.converged, self.stopped = True, "converged"
        if self.best is None:  # only the initial model was scored and it had -inf rows
            raise nonfinite_error(self.iteration, self.history[-1].log_likelihood, self.model, self.handle)
        final = self.best[2] if (self.delta is not None or self.vhandle is not None) else self.model
        final_ll = self.best[1] if final is self.best[2] else self.history[-1].log_likelihood
        self._warn_not_converged(self.max_its)
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
            seeding_seconds=self.seeding_seconds,
            free_parameters=self.estimator.n_free_parameters(final),
        )
        final.fit_result = result
        if self.store is not None:
            self._save(final=(final, result))
        return final

    def _warn_not_converged(self, max_its: int) -> None:
        """The ConvergenceWarning of a fit that stopped at ``max_its`` (also when a finished fit is
        returned from its checkpoint: the warning is part of the result)."""
        if self.delta is not None and not self.converged and self.stopped == "max_its":
            warnings.warn(
                not_converged_message(max_its, self.delta, self.history[-1].gain),
                ConvergenceWarning,
                stacklevel=5,
            )

    def _step(self, model: Distribution) -> tuple[float, float, Distribution, list[str]]:
        """One pass and M-step from ``model``, with the audit and the degenerate-component policy."""
        from mixle_spark.errors import DegenerateComponentError

        events: list[str] = []
        audit = self.settings.audit
        audited = frozenset() if audit is None or not audit.due(self.iteration) else self._audit_parts()
        self._reset_parts()
        try:
            if audited:
                from mixle_spark.parallel.fold import PassOptions

                nobs, ll, nxt = self.handle.pysp_em_step(
                    self.estimator, model, options=PassOptions(keep=audited)
                )
                first = {r.part: r.kept for r in self.handle.last_parts if r.kept is not None}
                parts = self.handle.last_parts
                second = self.handle.pysp_partition_payloads(self.estimator, model, audited)
                self.handle.last_parts = parts
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
        return self.settings.audit.select(self.iteration, parts)  # type: ignore[no-any-return]

    def _reset_parts(self) -> None:
        if isinstance(self.handle, PartReports):
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
        seed, the iteration and ``j``): what the component would have started as. The
        :data:`MAX_RESEEDS`-th + 1 restart of one component stops the fit instead."""
        from mixle_spark.errors import DegenerateComponentError

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
                self.estimator, fresh_seed, init_fraction(self.init_p, mixture, len(self.handle))
            )
        except DegenerateComponentError as err:
            which = ", ".join(f"component {c} ({why})" for c, why in err.failures)
            raise self._stopped(
                err, f"reseeding component {j} failed: the fresh start could not build {which}; stopped"
            ) from err
        return fresh.components[j]  # type: ignore[no-any-return]

    def _stopped(self, err: Any, message: str) -> Any:
        """A DegenerateComponentError for this iteration, carrying the model it started from."""
        from mixle_spark.errors import DegenerateComponentError

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
        if (
            best is not None
            and self.delta is not None
            and has_decreased(ll, best[1])
            and self.vhandle is None
        ):
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
        from mixle_spark.em.observability import IterationTrace, PartitionTiming

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
        from mixle_spark.em.observability import JsonLinesSink, MlflowSink

        writer = not isinstance(self.handle, SingleWriter) or self.handle.is_root
        if self.settings.trace_path is not None and writer:
            path = self.settings.trace_path
            if len(self.trace):  # resumed: the file restarts from the checkpoint's records
                self.trace.to_jsonl(path)
            self.sinks.append(JsonLinesSink(path, self.trace.metadata, append=bool(len(self.trace))))
        use_mlflow = self.settings.mlflow
        if use_mlflow or (use_mlflow is None and MlflowSink.active()):
            self.sinks.append(MlflowSink())
