"""Checkpointed EM: a long fit survives the loss of its driver and resumes to the same estimates.

``optimize(data, estimator, checkpoint_dir=PATH, checkpoint_every=N)`` writes, after every ``N``
iterations, the current model, the iteration number, the log-likelihood history, the best model
seen so far, the EM trace and the random state (the fit's seed: every random draw of a fit — the
initial rows, the random responsibilities, re-seeded components, the audit's partition sample — is
a hash of the seed and a stable key, so the seed *is* the whole RNG state). Each checkpoint is one
JSON file written atomically (temporary file, fsync, rename) with a SHA-256 of its contents; the
newest ``keep`` are kept.

Run the same call again (same data, estimator, seed) and the fit resumes from the newest checkpoint
that verifies: a truncated, corrupt or foreign file is skipped with a
:class:`CorruptCheckpointWarning` and never loaded. The resumed fit gives exactly the estimates of
an uninterrupted run: models round-trip through JSON bit for bit, and every later pass is a
deterministic function of the model. A checkpoint of a *different* fit (other estimator, row count,
seed, ...) raises :class:`CheckpointMismatchError` instead of being used; ``resume=False`` starts
afresh and replaces the old checkpoints. A finished fit leaves a final checkpoint, so re-running a
completed pipeline stage returns the fitted model without a pass over the data.

``checkpoint_dir`` is a local path (Databricks: ``/dbfs/...``), a ``file://`` URI, or any URI
``pyarrow.fs`` understands (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``). Only the driver writes.

Spark task failures need nothing from this module: an E-step has no side effects, so Spark's task
retries (``spark.task.maxFailures``) recompute a lost partition and the estimates do not change
(``tests/spark/test_task_retry.py``). An error that persists fails the fit with the executor's
error; the checkpoints written before it stay valid.

The reference's ``checkpointed_fold`` is here too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

from mixle_spark.em._checkpoint_store import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    CheckpointStore,
    CheckpointStoreError,
    CorruptCheckpointWarning,
)
from mixle_spark.em._records import FitResult, IterationRecord
from mixle_spark.errors import CheckpointMismatchError
from mixle_spark.parallel.backends.contract import on_writer
from mixle_spark.stats.base import Distribution, Estimator

logger = logging.getLogger("mixle_spark.estimation")

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "CheckpointMismatchError",
    "CheckpointStore",
    "CheckpointStoreError",
    "CheckpointedRun",
    "CorruptCheckpointWarning",
    "check_fingerprint",
    "checkpointed_fold",
    "fit_fingerprint",
]


def _estimator_spec(estimator: Estimator | None) -> Any:
    if estimator is None:
        return None
    inner = getattr(estimator, "inner", None)  # ModelParallelEstimator threads; same fit
    if inner is not None:
        return _estimator_spec(inner)
    try:
        return estimator.to_dict()
    except Exception:  # an estimator without a spec form: its type must match at least
        return f"{type(estimator).__module__}.{type(estimator).__qualname__}"


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def fit_fingerprint(
    estimator: Estimator,
    *,
    rows: int,
    seed: int,
    init_p: float,
    delta: float | None,
    on_degenerate: str,
    prev_estimate: Distribution | None = None,
    init_estimator: Estimator | None = None,
    init: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What identifies a fit for resuming: the settings that change its path (``max_its`` is not one:
    a resumed fit may run longer)."""
    from mixle_spark.spec import model_to_dict

    return {
        "estimator": _digest(_estimator_spec(estimator)),
        "rows": int(rows),
        "seed": int(seed),
        "init_p": float(init_p),
        "delta": delta,
        "on_degenerate": on_degenerate,
        "prev_estimate": None if prev_estimate is None else _digest(model_to_dict(prev_estimate)["model"]),
        "init_estimator": _digest(_estimator_spec(init_estimator)) if init_estimator is not None else None,
        "init": None if init is None or prev_estimate is not None else dict(init),
    }


_WHAT = {
    "estimator": "the estimator (model spec)",
    "rows": "the number of rows",
    "seed": "the seed",
    "init_p": "init_p",
    "delta": "delta",
    "on_degenerate": "on_degenerate",
    "prev_estimate": "prev_estimate",
    "init_estimator": "init_estimator",
    "init": "the initialization (init, init_steps)",
}


def check_fingerprint(saved: Mapping[str, Any], current: Mapping[str, Any], where: str) -> None:
    """Raise :class:`CheckpointMismatchError` naming every setting that differs."""
    differs = []
    for key in sorted(set(saved) | set(current)):
        if key == "init" and key not in saved:  # written before init= existed: nothing to compare
            continue
        if saved.get(key) != current.get(key):
            if key in ("estimator", "prev_estimate", "init_estimator"):
                differs.append(f"{_WHAT.get(key, key)} differs")
            else:
                differs.append(
                    f"{_WHAT.get(key, key)}: checkpoint {saved.get(key)!r}, now {current.get(key)!r}"
                )
    if differs:
        raise CheckpointMismatchError.advising(where, tuple(differs), "resume=False")


def checkpointed_fold(
    estimator: Estimator, payloads: Iterable[Any], checkpoint_after: int | None = None
) -> Any:
    """Fold statistics ``payloads`` (accumulator values) in order, as a driver does.

    After ``checkpoint_after`` payloads the running accumulator is serialised, dropped and rebuilt
    from the bytes with ``from_value`` before the fold goes on — what a restart between payloads
    does. The result equals the uninterrupted fold exactly (tested); returns the merged value.
    """
    factory = estimator.accumulator_factory()
    acc = factory.make()
    for index, value in enumerate(payloads):
        acc.combine(value)
        if checkpoint_after is not None and index + 1 == checkpoint_after:
            saved = pickle.dumps(acc.value(), protocol=5)
            del acc
            acc = factory.make().from_value(pickle.loads(saved))
    return acc.value()


def _plain_model(model: Distribution) -> str:
    """The model as saved-model JSON text (a string, so the checkpoint's sorted keys cannot reorder
    a record's fields)."""
    from mixle_spark.spec import model_to_json

    return model_to_json(model)


def _load_model(payload: Any) -> Distribution:
    from mixle_spark.spec import model_from_json

    return model_from_json(payload)


class CheckpointedRun:
    """The checkpoint side of one EM fit (:class:`~mixle_spark.em._run.EMRun` is one): restore the
    newest valid checkpoint, save the fit's state. On an SPMD backend (MPI) the root process reads
    and writes the files and every process gets what it read
    (:func:`~mixle_spark.parallel.backends.contract.on_writer`)."""

    # Set by the fit that inherits this (EMRun).
    handle: Any
    store: Any
    settings: Any
    estimator: Any
    fingerprint: Any
    iteration: Any
    model: Any
    history: Any
    best: Any
    trace: Any
    dead_reported: Any
    reseeds: Any
    converged: Any
    stopped: Any
    resumed_from: Any
    seed: Any
    init_p: Any
    delta: Any
    max_its: Any
    prev_estimate: Any
    init_estimator: Any
    progress: Any
    _warn_not_converged: Any

    def _restore(self) -> Distribution | None:
        """Load the newest valid checkpoint (when asked); the final model if the fit had finished."""
        if self.settings.checkpoint_dir is None:
            return None
        from mixle_spark.em.observability import EMTrace
        from mixle_spark.em.resilient import CheckpointStore, check_fingerprint, fit_fingerprint

        self.store = CheckpointStore(self.settings.checkpoint_dir, key=self.settings.checkpoint_key)
        self.fingerprint = fit_fingerprint(
            self.estimator,
            rows=len(self.handle),
            seed=self.seed,
            init_p=self.init_p,
            delta=self.delta,
            on_degenerate=self.settings.on_degenerate,
            prev_estimate=self.prev_estimate,
            init_estimator=self.init_estimator,
            init=self.settings.seeding.to_dict(),
        )
        store = self.store
        if not self.settings.resume:
            on_writer(self.handle, store.clear)
            return None
        found = on_writer(self.handle, store.latest)
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
        self.reseeds = {int(j): int(n) for j, n in state.get("reseeds", {}).items()}
        self.converged = bool(state.get("converged", False))
        self.stopped = str(state.get("stopped", "max_its"))
        self.resumed_from = iteration
        self.progress(
            f"resuming from checkpoint {self.store.directory} at iteration {iteration}", 0, note=True
        )
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
            free_parameters=self.estimator.n_free_parameters(model),
        )
        self.progress(f"the fit in {self.store.directory} had finished; returning its model", 0, note=True)
        self._warn_not_converged(int(final["max_its"]))
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
            "reseeds": {str(j): n for j, n in sorted(self.reseeds.items())},
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
        store, iteration = self.store, self.iteration
        path = on_writer(self.handle, lambda: store.save(iteration, state))
        logger.info("checkpoint written: %s", path)
