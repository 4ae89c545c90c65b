"""best_of / select_k never hang: the lockstep coordinator under random preemption.

The fits of :func:`mixle_spark.em._lockstep.run_together` run in threads that meet on one condition
variable. A wrong interleaving there hangs the fit for good, and a 2-core machine under load finds it
only now and then; here the interleavings are forced: every acquisition of the condition's lock (also
the one a waiter makes when it wakes) sleeps a random few microseconds first, so waiters wake late
and in random order, and the interpreter switches threads every microsecond. Each run has a watchdog:
a hang fails the test (naming the repetition) instead of hanging the suite.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from mixle_spark.em import _lockstep
from mixle_spark.em.routine import fit_routine
from mixle_spark.errors import ConvergenceWarning
from mixle_spark.estimation import FitOptions, best_of
from mixle_spark.model_selection import select_k
from mixle_spark.parallel import encoded_data
from mixle_spark.spec import model_to_dict
from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator

REPETITIONS = int(os.environ.get("MIXLE_LOCKSTEP_REPETITIONS", "50"))
"""best_of runs per test (``MIXLE_LOCKSTEP_REPETITIONS=1000`` for the long run)."""
HANG_SECONDS = 60.0
"""A run that has not finished after this long is hung (one takes ~0.1 s here, a few s on a busy machine)."""
MAX_JITTER = 300e-6
"""Longest sleep before a lock acquisition, in seconds."""


class JitteryLock:
    """A lock that sleeps a random 0..``MAX_JITTER`` s before every blocking acquisition."""

    def __init__(self, rng: random.Random) -> None:
        self._lock = threading.Lock()
        self._rng = rng

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if blocking:
            time.sleep(self._rng.random() * MAX_JITTER)
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextmanager
def preempted(monkeypatch: pytest.MonkeyPatch, seed: int) -> Iterator[None]:
    """Every coordinator made inside meets on a jittery condition; threads switch every microsecond."""
    rng = random.Random(seed)
    made = _lockstep._Coordinator.__init__

    def jittery(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self.cond = threading.Condition(JitteryLock(rng))  # type: ignore[arg-type]

    monkeypatch.setattr(_lockstep._Coordinator, "__init__", jittery)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        monkeypatch.undo()


def watched(call: Callable[[], Any], what: str) -> Any:
    """``call()`` in a daemon thread; fails the test if it has not returned within ``HANG_SECONDS``
    (its threads stay blocked, harmlessly, until the process exits)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as err:
            box["error"] = err

    thread = threading.Thread(target=target, name="lockstep-watchdog", daemon=True)
    thread.start()
    thread.join(HANG_SECONDS)
    if thread.is_alive():
        pytest.fail(f"{what} hung (no result after {HANG_SECONDS:.0f} s)")
    if "error" in box:
        raise box["error"]
    return box["result"]


def _blobs() -> np.ndarray:
    rng = np.random.default_rng(7)
    return np.vstack([rng.normal(c, 0.6, size=(60, 2)) for c in ([-3, 0], [3, 0], [0, 4])])


EST = MixtureEstimator([MultivariateGaussianEstimator()] * 3)


def test_best_of_never_hangs_and_never_changes_under_random_preemption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = _blobs()
    with encoded_data(x, EST) as handle, warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ll, model = best_of(handle, EST, trials=5, max_its=30, seed=0)  # undisturbed
        expected = (ll, model_to_dict(model))
        with preempted(monkeypatch, seed=1):
            for rep in range(REPETITIONS):
                ll, model = watched(
                    lambda: best_of(handle, EST, trials=5, max_its=30, seed=0),
                    f"best_of repetition {rep} of {REPETITIONS}",
                )
                assert (ll, model_to_dict(model)) == expected, f"repetition {rep}"


def test_select_k_never_hangs_under_random_preemption(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _blobs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        quiet = select_k(x, EST, [1, 2, 3, 4], max_its=20, seed=3)
        with preempted(monkeypatch, seed=2):
            for rep in range(max(1, REPETITIONS // 5)):
                chosen = watched(
                    lambda: select_k(x, EST, [1, 2, 3, 4], max_its=20, seed=3),
                    f"select_k repetition {rep}",
                )
                assert chosen.best_k == quiet.best_k == 3
                assert model_to_dict(chosen.model) == model_to_dict(quiet.model)


def test_a_failure_on_the_serving_thread_ends_every_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Serving itself fails (here: while taking the third batch): the error is raised, every fit
    waiting or asking later fails, and no fit thread outlives ``run_together``."""
    take = _lockstep._Coordinator._take
    batches = 0

    def failing(self: Any) -> Any:
        nonlocal batches
        batches += 1
        if batches == 3:
            raise RuntimeError("injected failure while serving batch 3")
        return take(self)

    monkeypatch.setattr(_lockstep._Coordinator, "_take", failing)
    runs = [fit_routine(FitOptions(max_its=10, print_iter=0), EST, seed=s) for s in (1, 2, 3)]
    with encoded_data(_blobs(), EST) as handle, pytest.raises(RuntimeError, match="serving batch 3"):
        watched(lambda: _lockstep.run_together(handle, runs), "run_together after a serving failure")
    assert batches == 3
    assert not [t.name for t in threading.enumerate() if t.name.startswith("mixle-fit-")]
