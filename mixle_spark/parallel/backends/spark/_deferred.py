"""The executor of a spark handle whose encoding waits for its first pass (``defer_encoding``):
:class:`DeferredExecutor` stands in for the real one (:mod:`._executors`) until the data is encoded."""

from __future__ import annotations

from collections.abc import Callable

from mixle_spark.parallel.backends.spark._executors import Executor
from mixle_spark.parallel.fold import Payload, Request

__all__ = ["DeferredExecutor"]


class DeferredExecutor:
    """The executor of a handle whose encoding waits for its first pass (``defer_encoding``).

    ``settle(fused)`` encodes the data and returns the handle's real executor: with ``fused`` (the
    first pass comes during a fit) inside the resident session that then serves the fit, else by a
    job of its own. Fit bookkeeping (``begin_fit`` / ``end_fit``) before then is handed on.
    """

    def __init__(self, settle: Callable[[bool], Executor]) -> None:
        self._settle = settle
        self._fitting = 0
        self.real: Executor | None = None

    def settled(self, fused: bool = False) -> Executor:
        """The real executor (encoding the data first, if not yet)."""
        if self.real is None:
            self.real = self._settle(fused and self._fitting > 0)
        return self.real

    def run(self, request: Request) -> Payload:
        return self.settled(fused=True).run(request)

    def begin_fit(self) -> None:
        if self.real is None:
            self._fitting += 1
        else:
            self.real.begin_fit()

    def end_fit(self) -> None:
        if self.real is None:
            self._fitting = max(self._fitting - 1, 0)
        else:
            self.real.end_fit()

    @property
    def fitting(self) -> int:
        """Fits begun and not ended before the data was encoded (handed on to the real executor)."""
        return self._fitting

    def holds_slots(self) -> bool:
        return self.real is not None and self.real.holds_slots()

    def release_workers(self) -> None:
        if self.real is not None:
            self.real.release_workers()

    def close(self) -> None:
        if self.real is not None:
            self.real.close()
