"""Fits that advance together, one pass over the data per step for all of them (private).

``best_of`` restarts and ``select_k`` candidates are independent EM fits over the same encoded data.
:func:`run_together` runs each fit's ordinary code (``EMRun``: seeding, iterations, convergence,
checkpoints, the degenerate-component policy) in its own thread against a :class:`SharedPassHandle`,
a stand-in for the real handle whose passes do not run at once: they wait until every fit still
running has asked for its next pass, and then run as *one* pass (:class:`~mixle_spark.em._shared_passes.
SharedPass`: one Spark job or resident request) on the calling thread. A fit that has converged has
ended its thread and asks for nothing; the others go on without it. Threads only order the control
flow: the passes, and everything that touches the real handle, run on the calling thread, one at a
time, in the fits' order, so the same passes run on every MPI rank and in every run.

Each fit gets exactly what its own pass would have given (see :mod:`mixle_spark.em._shared_passes`), so
the results equal the fits run one by one. Calls a shared pass cannot carry (an audited E-step, a
silent-corruption recomputation, finding the first non-finite row) run on their own, in turn.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

from mixle_spark.em._shared_passes import SharedPass
from mixle_spark.parallel.backends.contract import (
    EncodedData,
    FoldSize,
    MiniBatches,
    RowDiagnosis,
    RowPasses,
    WorkerEvents,
    backend_name,
    on_writer,
)
from mixle_spark.parallel.fold import Payload, PayloadHandle, Request
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["SharedPassHandle", "can_share_passes", "run_together"]


def can_share_passes(handle: EncodedData) -> bool:
    """Whether ``handle`` runs row tasks (:class:`RowPasses`), which shared passes are, for full-data
    fits (a handle that serves mini-batches, :class:`MiniBatches`, is fitted by mini-batch EM)."""
    return isinstance(handle, RowPasses) and not isinstance(handle, MiniBatches)


class _Request:
    """One fit's request: a shared-pass member or a call. Its outcome (``result`` / ``error``) and
    ``done`` are written only under the coordinator's lock, once, by the serving thread."""

    __slots__ = ("call", "done", "error", "member", "result")

    def __init__(self, member: tuple[Any, Any, Any] | None, call: Callable[[], Any] | None) -> None:
        self.member, self.call = member, call
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False


class _Stopped(RuntimeError):
    """Raised in the fits' threads when the serving thread stopped (an error or an interrupt on it):
    no pass will be served."""


class _Coordinator:
    """Collects the fits' requests and serves them, a shared pass when every running fit waits.

    Every shared field (``pending``, ``running``, ``stopped`` and each request's outcome) changes only
    under ``cond``. A request leaves ``pending`` when the serving thread takes it into a batch, so a
    fit that wakes early and asks again can only add a new request, never lose one.
    """

    def __init__(self, handle: EncodedData, count: int) -> None:
        self.handle = handle
        self.cond = threading.Condition()
        self.pending: dict[int, _Request] = {}
        self.running = set(range(count))
        self.stopped: BaseException | None = None
        self.passes = 0  # the serving thread's alone

    def ask(
        self, slot: int, member: tuple[Any, Any, Any] | None = None, call: Callable[[], Any] | None = None
    ) -> Any:
        request = _Request(member, call)
        with self.cond:
            if self.stopped is not None:
                raise _Stopped("the shared passes were stopped") from self.stopped
            self.pending[slot] = request
            self.cond.notify_all()
            while not request.done:
                self.cond.wait()
            error, result = request.error, request.result
        if error is not None:
            raise error
        return result

    def finished(self, slot: int) -> None:
        with self.cond:
            self.running.discard(slot)
            self.cond.notify_all()

    def serve(self) -> None:
        """Serve requests until every fit has finished (runs on the calling thread); if serving
        itself fails, every waiting and later request fails with :class:`_Stopped`."""
        try:
            while True:
                with self.cond:
                    while self.running and self.pending.keys() != self.running:
                        self.cond.wait()
                    if not self.running:
                        return
                    batch = self._take()
                outcomes = self._serve(batch)
                with self.cond:
                    for request, (result, error) in zip(batch, outcomes, strict=True):
                        request.result, request.error, request.done = result, error, True
                    self.cond.notify_all()
        except BaseException as err:
            self._stop(err)
            raise

    def _take(self) -> list[_Request]:
        """The next batch, taken out of ``pending`` (under the lock): the first call in fit order
        alone (a call a shared pass cannot carry), else every request, in fit order."""
        slots = sorted(self.pending)
        calls = [slot for slot in slots if self.pending[slot].call is not None]
        return [self.pending.pop(slot) for slot in (calls[:1] or slots)]

    def _serve(self, batch: list[_Request]) -> list[tuple[Any, BaseException | None]]:
        """Each request's ``(result, error)``; touches no shared state (runs outside the lock)."""
        if batch[0].call is not None:
            try:
                return [(batch[0].call(), None)]
            except BaseException as err:
                return [(None, err)]
        try:
            shared = SharedPass(tuple(r.member for r in batch))  # type: ignore[misc]
            _nobs, value = cast(RowPasses, self.handle).pysp_row_pass(shared.factory(), shared)
            self.passes += 1
            values, nobs, ll, _touched = value
            parts = tuple(getattr(self.handle, "last_parts", ()))
        except BaseException as err:
            return [(None, err)] * len(batch)
        return [((float(nobs[i]), float(ll[i]), values[i], parts), None) for i in range(len(batch))]

    def _stop(self, err: BaseException) -> None:
        with self.cond:
            self.stopped = err
            for request in self.pending.values():
                request.error = _Stopped("the shared passes were stopped")
                request.error.__cause__ = err
                request.done = True
            self.pending.clear()
            self.cond.notify_all()


class SharedPassHandle(PayloadHandle):
    """The stand-in handle one fit of :func:`run_together` sees: the pass contract is
    :class:`~mixle_spark.parallel.fold.PayloadHandle`'s, each pass a member of a shared pass;
    anything else is the real handle's, called on the serving thread."""

    supports_pass_options = False

    def __init__(self, coordinator: _Coordinator, slot: int) -> None:
        self._coordinator, self._slot = coordinator, slot
        self._handle = coordinator.handle
        self.backend_name = backend_name(self._handle)
        self.n = len(self._handle)

    def bind(self, estimator: Estimator) -> Estimator:
        return cast(RowPasses, self._handle).bind(estimator)

    def fold_rows(self) -> int:
        return self._handle.fold_rows() if isinstance(self._handle, FoldSize) else 0  # type: ignore[no-any-return]

    def worker_memory(self) -> int | None:
        return self._handle.worker_memory() if isinstance(self._handle, FoldSize) else None  # type: ignore[no-any-return]

    def take_events(self) -> list[str]:
        handle = self._handle
        return self._call(lambda: list(handle.take_events())) if isinstance(handle, WorkerEvents) else []

    def first_nonfinite_row(self, estimate: Distribution) -> Any:
        handle = self._handle
        return (
            self._call(lambda: handle.first_nonfinite_row(estimate))
            if isinstance(handle, RowDiagnosis)
            else None
        )

    def on_root(self, fn: Callable[[], Any]) -> Any:
        return self._call(lambda: on_writer(self._handle, fn))

    def _call(self, call: Callable[[], Any]) -> Any:
        return self._coordinator.ask(self._slot, call=call)

    def _estep(self, request: Request) -> Payload:
        if request[3] is not None:
            raise ValueError("shared passes carry no pass options (run audited fits one by one)")
        return self._coordinator.ask(self._slot, member=request[:3])  # type: ignore[no-any-return]


def run_together(handle: EncodedData, fits: Sequence[Callable[[Any], Any]]) -> tuple[list[Any], int]:
    """Run ``fits`` (each called with its :class:`SharedPassHandle`) with shared passes; returns their
    results in order (an exception a fit raised is raised here, the first in fit order) and the
    number of shared passes made."""
    coordinator = _Coordinator(handle, len(fits))
    results: list[Any] = [None] * len(fits)
    errors: list[BaseException | None] = [None] * len(fits)

    def work(slot: int) -> None:
        try:
            results[slot] = fits[slot](SharedPassHandle(coordinator, slot))
        except BaseException as err:
            errors[slot] = err
        finally:
            coordinator.finished(slot)

    threads = [
        threading.Thread(target=work, args=(i,), name=f"mixle-fit-{i}", daemon=True) for i in range(len(fits))
    ]
    for thread in threads:
        thread.start()
    try:
        coordinator.serve()
    finally:  # after a failed serve every fit fails at its next ask: none outlives this call
        for thread in threads:
            thread.join()
    for err in errors:
        if err is not None:
            raise err
    return results, coordinator.passes
