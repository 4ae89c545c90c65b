"""The encoded-data contract: what the EM driver asks of a backend's handle, written down once.

:class:`EncodedData` is what every handle is (the reference's sequence-orchestrator contract, plus
``len`` and ``close``); ``optimize``, ``best_of``, ``select_k`` and the scoring functions need
nothing more. The EM driver uses the optional capabilities below when a handle has them and falls
back when it does not; each is a small :class:`typing.Protocol` checked with ``isinstance``:

============================  =======================================================================
:class:`EMStep`               one pass gives the previous model's log-likelihood and the next model
:class:`Accumulate`           one pass gives the model's log-likelihood and the statistics (updates)
                              (else two passes an iteration: a score and an estimate)
:class:`RowPasses`            row tasks over the data (the k-means|| seeding; fits sharing passes)
:class:`PartitionAudit`       recompute chosen partitions alone (the silent-corruption audit)
:class:`PartReports`          per-partition timings, rows and bytes of the last pass (the EM trace)
:class:`FitSession`           resources held for one fit (the spark backend's resident tasks)
:class:`WorkerEvents`         what happened to the workers since the last pass (for the trace)
:class:`RowDiagnosis`         the first row whose log-density is not finite (for the error message)
:class:`SingleWriter`         several processes run the fit (SPMD, MPI): one of them writes files
:class:`Named`                the backend's name for the trace when it is not the handle's class name
:class:`FoldSize`             the most rows one fold holds and a worker's memory (a fit that cannot
                              fit is refused before it starts)
:class:`MiniBatches`          the data is fitted by mini-batch (stepwise) EM over its global
                              mini-batches, not by full-data EM steps (the ``lightning`` backend)
============================  =======================================================================

:class:`~mixle_spark.parallel.fold.PayloadHandle` implements :class:`EncodedData`,
:class:`EMStep`, :class:`Accumulate`, :class:`RowPasses`, :class:`PartitionAudit` and
:class:`PartReports` over one method a backend writes (``_estep``: fold each partition's chunks,
merge the payloads); see ``docs/architecture.md`` for adding a backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar, runtime_checkable

from mixle_spark.stats.base import Distribution, Estimator

__all__ = [
    "Accumulate",
    "EMStep",
    "EncodedData",
    "FitSession",
    "FoldSize",
    "MiniBatches",
    "Named",
    "OneTask",
    "PartReports",
    "PartitionAudit",
    "RowDiagnosis",
    "RowPasses",
    "SingleWriter",
    "WorkerEvents",
    "backend_name",
    "on_writer",
]

_T = TypeVar("_T")


@runtime_checkable
class EncodedData(Protocol):
    """Encoded rows held by a backend, re-read by every pass; ``len`` is the number of rows."""

    def __len__(self) -> int: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...

    def close(self) -> None:
        """Release workers and caches; idempotent."""

    def pysp_seq_log_density_sum(self, estimate: Distribution) -> tuple[float, float]:
        """``(total weight, weighted total log-likelihood)`` of ``estimate``."""
        ...

    def pysp_seq_estimate(self, estimator: Estimator, prev_estimate: Distribution) -> Distribution:
        """The next EM estimate from ``prev_estimate``."""
        ...

    def pysp_seq_initialize(self, estimator: Estimator, rng: Any, p: float) -> Distribution:
        """An initial model from rows kept with probability ``p``, decided by a hash of the seed and
        the global row id (the same model on every backend and partitioning for one seed)."""
        ...

    def pysp_stream_accumulate(self, estimator: Estimator, model: Distribution) -> tuple[float, Any]:
        """The E-step fold without the M-step: ``(total weight, merged statistics value)``."""
        ...


@runtime_checkable
class Accumulate(Protocol):
    """One E-step pass that keeps the statistics: ``(total weight, log-likelihood of model, merged
    statistics value)``; an incremental update adds them to the statistics it holds."""

    def pysp_accumulate(self, estimator: Estimator, model: Distribution) -> tuple[float, float, Any]: ...


@runtime_checkable
class EMStep(Protocol):
    """One pass: ``(total weight, log-likelihood of prev_estimate, next estimate)``."""

    def pysp_em_step(
        self, estimator: Estimator, prev_estimate: Distribution, options: Any = None
    ) -> tuple[float, float, Distribution]: ...


@runtime_checkable
class RowPasses(Protocol):
    """Row tasks: ``task.fold(acc, encoded, weights, row_ids)`` over every chunk, merged."""

    def bind(self, estimator: Estimator) -> Estimator:
        """``estimator`` with the data's scanned vocabularies / ranges fixed."""
        ...

    def pysp_row_pass(self, factory: Any, task: Any) -> tuple[float, Any]:
        """``(total weight, merged value of factory's accumulators)``."""
        ...


@runtime_checkable
class PartReports(Protocol):
    """``last_parts``: the partitions' reports of the last pass (timings, rows, bytes)."""

    last_parts: tuple[Any, ...]


@runtime_checkable
class PartitionAudit(Protocol):
    """E-steps that keep or recompute single partitions (only when ``supports_pass_options``)."""

    supports_pass_options: bool
    last_parts: tuple[Any, ...]

    def partition_ids(self) -> Iterable[int]: ...

    def pysp_em_step(
        self, estimator: Estimator, prev_estimate: Distribution, options: Any = None
    ) -> tuple[float, float, Distribution]: ...

    def pysp_partition_payloads(
        self, estimator: Estimator, model: Distribution, parts: Iterable[int], *, reference: bool = True
    ) -> dict[int, tuple[float, float, Any]]: ...


@runtime_checkable
class OneTask(Protocol):
    """A handle whose rows, while they are small and not yet encoded, can be handed whole to one
    function where they live (Spark: one task of one job; the rows never reach the driver).

    ``in_one_task(fn)`` calls ``fn(table, options)`` there, with the rows as a ``pyarrow.Table`` in
    their order and ``options`` the local backend's keywords that read it (``column``, ``weights``),
    and returns ``(True, its result)``; ``(False, None)`` when the rows are not small or already
    encoded, or when ``fn`` raised (the caller then runs its passes as usual, which meets the same
    error where it can report it)."""

    def in_one_task(self, fn: Callable[[Any, dict[str, Any]], _T]) -> tuple[bool, _T | None]: ...


@runtime_checkable
class FitSession(Protocol):
    """Resources a handle holds only while a fit runs (``begin_fit`` ... ``end_fit``)."""

    def begin_fit(self) -> None: ...

    def end_fit(self) -> None: ...


@runtime_checkable
class WorkerEvents(Protocol):
    """What happened to the backend's workers since the last call (tasks lost, restarted, ...)."""

    def take_events(self) -> list[str]: ...


@runtime_checkable
class RowDiagnosis(Protocol):
    """``(global row, value)`` of the first row whose log-density is NaN or infinite, else None."""

    def first_nonfinite_row(self, estimate: Distribution) -> tuple[int, float] | None: ...


@runtime_checkable
class SingleWriter(Protocol):
    """A handle of an SPMD run: every process runs the fit; files are written by one of them.

    ``is_root`` is True on the writing process; ``on_root(fn)`` runs ``fn`` there and returns its
    result on every process (an error there is raised on every process).
    """

    is_root: bool

    def on_root(self, fn: Callable[[], _T]) -> _T: ...


@runtime_checkable
class Named(Protocol):
    """``backend_name``: what the EM trace records as the backend."""

    backend_name: str


@runtime_checkable
class FoldSize(Protocol):
    """``fold_rows()``: the most rows one fold (a chunk, an Arrow batch) scores at once;
    ``worker_memory()``: the bytes of memory one worker may use, None where the backend cannot tell."""

    def fold_rows(self) -> int: ...

    def worker_memory(self) -> int | None: ...


@runtime_checkable
class MiniBatches(Protocol):
    """Data fitted by mini-batch (stepwise) EM: a fit over such a handle (``optimize``, ``best_of``,
    ``select_k``) runs :func:`~mixle_spark.em.minibatch.minibatch_em` over its global mini-batches
    for ``epochs`` with step exponent ``alpha``, not full-data EM steps (its ``pysp_*`` passes still
    read every row: scoring, statistics). ``global_minibatches(epoch)`` yields the rows of each
    global mini-batch of ``epoch`` in order; ``world_size`` is how many ranks share each one."""

    world_size: int
    epochs: int
    alpha: float

    def global_minibatches(self, epoch: int) -> Iterable[Any]: ...


def backend_name(handle: Any) -> str:
    """The backend's name for the EM trace: ``handle.backend_name``, else the handle's class name."""
    return handle.backend_name if isinstance(handle, Named) else type(handle).__name__


def on_writer(handle: Any, fn: Callable[[], _T]) -> _T:
    """``fn()`` where files are written: on the root of an SPMD handle (result shared), else here."""
    if isinstance(handle, SingleWriter):
        return handle.on_root(fn)
    return fn()
