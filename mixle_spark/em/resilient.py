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
deterministic function of the model. A checkpoint of a *different* fit (other estimator, seed, ...)
raises :class:`CheckpointMismatchError` instead of being used; ``resume=False`` starts afresh and
replaces the old checkpoints. A finished fit leaves a final checkpoint, so re-running a completed
pipeline stage returns the fitted model without a pass over the data.

Every checkpoint records the identity of its data (:func:`mixle_spark._identity` digests: the rows'
content for tables and arrays, the files for a path, a Spark / Dask / Ray frame hashed where it
lives), so other data with the same number of rows is never taken for the same fit. A checkpoint of
the same fit on *other data* raises :class:`CheckpointMismatchError` naming it (the default,
``on_other_data="raise"``), or, with ``on_other_data="refit"`` (the fit job's), is replaced by a fit
from scratch whose result says why (``fit_result.checkpoint_refit``). A checkpoint written before
data identities existed counts as other data: it is never resumed on faith.

``checkpoint_dir`` is a local path (Databricks: ``/dbfs/...``), a ``file://`` URI, or any URI
``pyarrow.fs`` understands (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``). Only the driver writes.

Spark task failures need nothing from this module: an E-step has no side effects, so Spark's task
retries (``spark.task.maxFailures``) recompute a lost partition and the estimates do not change
(``tests/spark/test_task_retry.py``). An error that persists fails the fit with the executor's
error; the checkpoints written before it stay valid.

The EM loop holds a :class:`Checkpointer` (the store, the fit's fingerprint, what a checkpoint holds:
a :class:`Snapshot`); the reference's ``checkpointed_fold`` is here too. Its ``ResilientMPEncodedData``
(worker processes restarted, their shards recomputed) is a handle of the mp backend:
:mod:`mixle_spark.parallel.backends.mp_resilient` (the EM driver does not import backends).
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mixle_spark.em._checkpoint_store import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    CheckpointStore,
    CheckpointStoreError,
    CorruptCheckpointWarning,
)
from mixle_spark.em._records import ON_OTHER_DATA, IterationRecord
from mixle_spark.em.observability import EMTrace
from mixle_spark.errors import CheckpointMismatchError
from mixle_spark.parallel.backends.contract import EncodedData, on_writer
from mixle_spark.stats._random import seed_to_int
from mixle_spark.stats.base import Distribution, Estimator

if TYPE_CHECKING:
    from mixle_spark.em.options import FitOptions

logger = logging.getLogger("mixle_spark.estimation")

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "DATA_KEYS",
    "ON_OTHER_DATA",
    "CheckpointMismatchError",
    "CheckpointStore",
    "CheckpointStoreError",
    "Checkpointer",
    "CorruptCheckpointWarning",
    "Finished",
    "Snapshot",
    "check_fingerprint",
    "checkpointed_fold",
    "fingerprint_differences",
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
    tol: float | None = None,
    init_estimator: Estimator | None = None,
    init: Mapping[str, Any] | None = None,
    data: str | None = None,
) -> dict[str, Any]:
    """What identifies a fit for resuming: the data (its row count and ``data``, the digest of its
    content) and the settings that change its path (``max_its`` is not one: a resumed fit may run
    longer)."""
    from mixle_spark.model_file import model_to_dict

    return {
        "estimator": _digest(_estimator_spec(estimator)),
        "rows": int(rows),
        "data": data,
        "seed": int(seed),
        "init_p": float(init_p),
        "delta": delta,
        "on_degenerate": on_degenerate,
        "prev_estimate": None if prev_estimate is None else _digest(model_to_dict(prev_estimate)["model"]),
        "init_estimator": _digest(_estimator_spec(init_estimator)) if init_estimator is not None else None,
        "init": None if init is None or prev_estimate is not None else dict(init),
        **({} if tol is None else {"tol": float(tol)}),  # absent when unset: older checkpoints match
    }


_WHAT = {
    "estimator": "the estimator (model spec)",
    "rows": "the number of rows",
    "seed": "the seed",
    "init_p": "init_p",
    "delta": "delta",
    "tol": "tol",
    "on_degenerate": "on_degenerate",
    "prev_estimate": "prev_estimate",
    "init_estimator": "init_estimator",
    "init": "the initialization (init, init_steps)",
    "data": "the data",
}
DATA_KEYS = ("rows", "data")
"""The fingerprint's keys that describe the data (the rest describe the fit's settings)."""


def fingerprint_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, str]:
    """``{key: what differs}`` for every fingerprint entry where ``saved`` and ``current`` differ."""
    differs: dict[str, str] = {}
    for key in sorted(set(saved) | set(current)):
        if key == "init" and key not in saved:  # written before init= existed: nothing to compare
            continue
        if key == "data" and "data" not in saved:
            differs[key] = "the data: the checkpoint does not record which (written before data digests)"
        elif key == "data" and saved.get(key) != current.get(key):
            differs[key] = "the data differs (its content digest)"
        elif saved.get(key) != current.get(key):
            if key in ("estimator", "prev_estimate", "init_estimator"):
                differs[key] = f"{_WHAT.get(key, key)} differs"
            else:
                differs[key] = (
                    f"{_WHAT.get(key, key)}: checkpoint {saved.get(key)!r}, now {current.get(key)!r}"
                )
    return differs


def check_fingerprint(saved: Mapping[str, Any], current: Mapping[str, Any], where: str) -> None:
    """Raise :class:`CheckpointMismatchError` naming every setting that differs."""
    differs = fingerprint_differences(saved, current)
    if differs:
        raise CheckpointMismatchError.advising(where, tuple(differs.values()), "resume=False")


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
    from mixle_spark.model_file import model_to_json

    return model_to_json(model)


def _load_model(payload: Any) -> Distribution:
    from mixle_spark.model_file import model_from_json

    return model_from_json(payload)


@dataclass
class Finished:
    """What the final checkpoint of a finished fit records of its result."""

    model: Distribution
    log_likelihood: float
    max_its: int
    validation_log_likelihood: float | None
    seconds: float


@dataclass
class Snapshot:
    """A fit's state as a checkpoint holds it: what the loop needs to go on exactly where it stopped
    (``best`` is ``(selection score, log-likelihood, model)``; ``finished`` is set by a finished fit)."""

    iteration: int
    model: Distribution
    history: list[IterationRecord]
    best: tuple[float, float, Distribution] | None
    trace: EMTrace
    dead_reported: set[int]
    reseeds: dict[int, int]
    converged: bool
    stopped: str
    finished: Finished | None = None
    written_at: str | None = None
    """When the checkpoint was written (ISO 8601, UTC; None in checkpoints of earlier releases)."""


class Checkpointer:
    """The checkpoints of one EM fit, a component the loop (:class:`~mixle_spark.em._run.EMRun`)
    holds: it restores the newest valid checkpoint of this very fit (its fingerprint: the estimator,
    the row count and the options that change the fit's path) and saves the loop's
    :class:`Snapshot`. On an SPMD backend (MPI) the root process reads and writes the files and every
    process gets what it read (:func:`~mixle_spark.parallel.backends.contract.on_writer`).

    ``options`` is the fit's :class:`~mixle_spark.em.options.FitOptions` (``checkpoint_dir`` set).
    """

    def __init__(
        self,
        handle: EncodedData,
        estimator: Estimator,
        options: FitOptions,
        prev_estimate: Distribution | None = None,
        data: str | None = None,
    ) -> None:
        assert options.checkpoint_dir is not None  # the loop holds a Checkpointer only then
        self.handle = handle
        self.every = options.checkpoint_every
        self.resume = options.resume
        self.on_other_data = options.on_other_data
        self.store = CheckpointStore(options.checkpoint_dir, key=options.checkpoint_key)
        self.fingerprint = fit_fingerprint(
            estimator,
            rows=len(handle),
            seed=seed_to_int(options.seed),
            init_p=options.init_p,
            delta=options.delta,
            tol=options.tol,
            on_degenerate=options.on_degenerate,
            prev_estimate=prev_estimate,
            init_estimator=options.init_estimator,
            init=options.seeding.to_dict(),
            data=on_writer(handle, lambda: data),  # the writer's view: every process compares alike
        )
        self.refit_because: str | None = None
        """Why the checkpoints found were replaced by a fit from scratch (they were of other data,
        ``on_other_data="refit"``); None when they were not."""

    @property
    def directory(self) -> str:
        return self.store.directory

    def due(self, iteration: int) -> bool:
        """Whether the state after ``iteration`` M-steps is saved (every ``checkpoint_every``-th)."""
        return iteration % self.every == 0

    def restore(self, probe: bool = False) -> Snapshot | None:
        """The newest valid checkpoint of this fit; None when there is none, or (``resume=False``)
        after deleting the old ones. A checkpoint of another fit raises
        :class:`CheckpointMismatchError` naming what differs; one of this fit on other data too, or
        with ``on_other_data="refit"`` is deleted (not by a ``probe``, which only looks), its reason
        kept in :attr:`refit_because`, and None returned."""
        store = self.store
        if not self.resume:
            on_writer(self.handle, store.clear)
            return None
        found = on_writer(self.handle, store.latest)
        if found is None:
            return None
        _iteration, state = found
        saved = state.get("fingerprint", {})
        differs = fingerprint_differences(saved, self.fingerprint)
        if differs and self.on_other_data == "refit" and set(differs) <= set(DATA_KEYS):
            self.refit_because = "; ".join(differs.values())
            if not probe:
                on_writer(self.handle, store.clear)  # of this fit on other data: never resumed
            logger.info("checkpoints in %s are of other data (%s): fitting afresh", store.directory, differs)
            return None
        check_fingerprint(saved, self.fingerprint, str(store.directory))
        best, final = state.get("best"), state.get("final")
        return Snapshot(
            iteration=int(state["iteration"]),
            model=_load_model(state["model"]),
            history=[IterationRecord(**r) for r in state["history"]],
            best=None
            if best is None
            else (float(best["score"]), float(best["ll"]), _load_model(best["model"])),
            trace=EMTrace.from_dict(state["trace"]),
            dead_reported=set(state.get("dead_reported", [])),
            reseeds={int(j): int(n) for j, n in state.get("reseeds", {}).items()},
            converged=bool(state.get("converged", False)),
            stopped=str(state.get("stopped", "max_its")),
            written_at=state.get("written_at"),
            finished=None
            if final is None
            else Finished(
                model=_load_model(final["model"]),
                log_likelihood=float(final["log_likelihood"]),
                max_its=int(final["max_its"]),
                validation_log_likelihood=final.get("validation_log_likelihood"),
                seconds=float(final["seconds"]),
            ),
        )

    def save(self, snapshot: Snapshot) -> None:
        """Write ``snapshot`` as the checkpoint of its iteration (the root process writes)."""
        best, done = snapshot.best, snapshot.finished
        rng = {"seed": self.fingerprint["seed"], "streams": "row-keyed hashes of the seed; no other state"}
        state: dict[str, Any] = {
            "fingerprint": self.fingerprint,
            "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "iteration": snapshot.iteration,
            "model": _plain_model(snapshot.model),
            "history": [asdict(r) for r in snapshot.history],
            "best": None
            if best is None
            else {"score": best[0], "ll": best[1], "model": _plain_model(best[2])},
            "trace": snapshot.trace.to_dict(),
            "dead_reported": sorted(snapshot.dead_reported),
            "reseeds": {str(j): n for j, n in sorted(snapshot.reseeds.items())},
            "converged": snapshot.converged,
            "stopped": snapshot.stopped,
            "rng": rng,
            "final": None
            if done is None
            else {
                "model": _plain_model(done.model),
                "log_likelihood": done.log_likelihood,
                "max_its": done.max_its,
                "validation_log_likelihood": done.validation_log_likelihood,
                "seconds": done.seconds,
            },
        }
        store, iteration = self.store, snapshot.iteration
        path = on_writer(self.handle, lambda: store.save(iteration, state))
        logger.info("checkpoint written: %s", path)
