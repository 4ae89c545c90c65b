"""The fold every pass over encoded data runs, and what a pass returns: the code half of the
encoded-data contract (its protocols are :mod:`mixle_spark.parallel.backends.contract`).

A pass asks every partition the same :data:`Request` ``(factory, model, initialize, options)``; each
partition folds its chunks into one :data:`Payload` ``(total weight, weighted log-likelihood,
statistics value, partition reports)`` (:func:`accumulate_chunks`, chunk by chunk :func:`fold_chunk`),
and payloads merge by addition (:func:`merge_payloads`). :class:`PayloadHandle` turns a backend's one
method (``_estep``: run the fold on every partition, merge) into the whole handle contract, once for
every backend. The EM driver (:mod:`mixle_spark.em`) uses these pieces too (the trace counts bytes with
:func:`stat_nbytes`, shared passes fold with :func:`fold_chunk`), which is why they live here and not
in a backend: the driver reaches backends through the contract, this module and the registry only.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, TypeVar

import numpy as np

from mixle_spark.engines import Compute, using_engine
from mixle_spark.stats._random import RowRandom, seed_to_int
from mixle_spark.stats.base import (
    Accumulator,
    AccumulatorFactory,
    Distribution,
    Estimator,
    seq_update_with_ll,
)

__all__ = [
    "PartReport",
    "PassOptions",
    "Payload",
    "PayloadHandle",
    "Request",
    "accumulate_chunks",
    "fold_chunk",
    "fold_key_passes",
    "initial_keep_weights",
    "merge_payloads",
    "seed_from",
    "stat_nbytes",
    "weighted_sum",
]


class PartReport(NamedTuple):
    """What one partition (chunk, worker, rank) reports about its share of a pass.

    ``kept`` is its own ``(total weight, log-likelihood, statistics value)`` when the pass was asked
    to keep it (:class:`PassOptions`), for the silent-corruption audit; else None.
    """

    part: int
    seconds: float
    rows: int
    stat_bytes: int
    kept: tuple[float, float, Any] | None = None


Payload = tuple[float, float, Any, tuple[PartReport, ...]]
"""What a chunk / partition contributes: (total weight, weighted log-likelihood, statistics value or
None, the reports of the partitions merged into it)."""

Request = tuple[Any, "Distribution | None", Any, "PassOptions | None"]
"""What one pass asks of every partition: ``(factory, model, initialize, options)`` (see
:func:`accumulate_chunks`)."""


@dataclass(frozen=True)
class PassOptions:
    """Extra asks of one pass over the data, travelling with the request to every partition.

    Attributes
    ----------
    keep : frozenset of int
        Partitions whose own payload is returned in their :class:`PartReport` (besides being merged).
    only : frozenset of int, optional
        Compute only these partitions; the others contribute an empty payload.
    compute : Compute, optional
        The compute engine and precision the handle's data was stored for (None: numpy): the pass
        runs its E-steps on that engine (:func:`mixle_spark.engines.using_engine`).
    reference : bool
        Use the independent reference kernels (:func:`mixle_spark.stats.mixture.reference_kernels`:
        per-component scoring instead of the fused matrix products, and the log-likelihood scored
        apart from the update) — the second pass of the silent-corruption audit.
    """

    keep: frozenset[int] = frozenset()
    only: frozenset[int] | None = None
    reference: bool = False
    compute: Compute | None = None


def fold_key_passes(acc: Accumulator) -> Accumulator:
    """Run the tying passes once over a fully merged accumulator tree (never per shard)."""
    stats: dict[Any, Any] = {}
    acc.key_merge(stats)
    acc.key_replace(stats)
    return acc


def initial_keep_weights(seed: int, row_ids: np.ndarray, p: float) -> np.ndarray:
    """1.0 for rows selected into the initial sample (each with probability p), else 0.0.

    The draw is a hash of (seed, row id): the same rows are selected on every backend.
    """
    u = RowRandom(seed, row_ids).child("init-select").uniform()
    return (u < p).astype(np.float64)


def seed_from(rng: Any) -> int:
    """A 64-bit seed from an int, None, a numpy Generator or a RandomState."""
    if rng is None or isinstance(rng, (int, str)):
        return seed_to_int(rng)
    if isinstance(rng, np.integer):
        return seed_to_int(int(rng))
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(0, 2**63 - 1))
    if isinstance(rng, np.random.RandomState):
        return int(rng.randint(0, 2**31 - 1))
    raise TypeError(f"rng must be an int seed, None, a numpy Generator or RandomState, got {rng!r}")


def weighted_sum(w: np.ndarray, rows_ll: np.ndarray) -> float:
    """Σ w_i ll_i over rows with positive weight (so a zero-weight -inf row contributes 0, not NaN)."""
    used = w > 0
    if used.all():
        return float(np.dot(w, rows_ll))
    return float(np.dot(w[used], rows_ll[used]))


def merge_payloads(factory: AccumulatorFactory, a: Payload | None, b: Payload | None) -> Payload | None:
    """Merge two payloads; statistics are combined in a fresh accumulator (never aliasing either)."""
    if a is None:
        return b
    if b is None:
        return a
    if a[2] is None:
        value = b[2]
    elif b[2] is None:
        value = a[2]
    else:
        value = factory.make().from_value(a[2]).combine(b[2]).value()
    return (a[0] + b[0], a[1] + b[1], value, a[3] + b[3])


def fold_chunk(
    acc: Accumulator | None,
    model: Distribution | None,
    initialize: Any,
    enc: Any,
    w: np.ndarray,
    ids: Any,
    reference: bool = False,
) -> tuple[float, float]:
    """Fold one encoded chunk into ``acc`` as the request ``(factory, model, initialize)`` asks (see
    :func:`accumulate_chunks`); returns the chunk's (total weight, weighted log-likelihood)."""
    ll = 0.0
    if acc is None:
        ll = weighted_sum(w, model.seq_log_density(enc))  # type: ignore[union-attr]
    elif isinstance(initialize, tuple):
        seed, p = initialize
        w = w * initial_keep_weights(seed, ids, p)
        acc.seq_initialize(enc, w, RowRandom(seed, ids).child("init"))
    elif initialize is not None:  # a row task (seeding): it folds the chunk into acc itself
        initialize.fold(acc, enc, w, ids)
    elif reference:
        from mixle_spark.stats.mixture import reference_kernels

        with reference_kernels():
            acc.seq_update(enc, w, model)
            ll = weighted_sum(w, model.seq_log_density(enc))  # type: ignore[union-attr]
    else:
        ll = weighted_sum(w, seq_update_with_ll(acc, enc, w, model))  # type: ignore[arg-type]
    return float(w.sum()), ll


def accumulate_chunks(chunks: Iterable[tuple[Any, np.ndarray, Any]], request: Any, part: int = 0) -> Payload:
    """One partition's payload: ``request = (factory, model, initialize[, options])``.

    ``factory`` None scores ``model`` only; ``initialize = (seed, p)`` runs the row-keyed initial
    selection; ``initialize`` a row task (:mod:`mixle_spark.em._seeding_passes`: an object with
    ``fold(acc, enc, weights, row_ids)``) folds every chunk into ``factory``'s accumulator; otherwise
    an E-step from ``model``. ``chunks`` are ``(encoded, weights, row ids)``;
    ``part`` is this partition's id in the payload's :class:`PartReport` (timing, rows, bytes of
    statistics) and in ``options`` (:class:`PassOptions`).
    """
    factory, model, initialize = request[:3]
    options: PassOptions | None = request[3] if len(request) > 3 else None
    if options is not None and options.only is not None and part not in options.only:
        return (0.0, 0.0, None, ())
    started = time.perf_counter()
    acc = None if factory is None else factory.make()
    reference = options is not None and options.reference
    touched = False
    nobs = ll = 0.0
    rows = 0
    with using_engine(None if options is None else options.compute):
        for enc, w, ids in chunks:
            touched = True
            rows += len(w)
            weight, chunk_ll = fold_chunk(acc, model, initialize, enc, w, ids, reference)
            nobs += weight
            ll += chunk_ll
    value = acc.value() if acc is not None and touched else None
    report = PartReport(
        int(part),
        time.perf_counter() - started,
        rows,
        0 if value is None else stat_nbytes(value),
        (nobs, ll, value) if options is not None and part in options.keep else None,
    )
    return (nobs, ll, value, (report,))


_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _slot_values(obj: Any) -> list[Any]:
    values = []
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                values.append(getattr(obj, name))
    return values


def _own_nbytes(obj: Any, pending: list[Any]) -> int:
    """Bytes of ``obj`` itself; pushes what it contains onto ``pending``."""
    if obj is None or (isinstance(obj, (bool, int, float)) and not isinstance(obj, np.generic)):
        return 8
    if isinstance(obj, (str, bytes, bytearray)):
        return len(obj)
    if isinstance(obj, complex):
        return 16
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:  # the pointers say nothing; count what they point to
            pending.extend(obj.ravel().tolist())
            return 0
        return int(obj.nbytes)
    if isinstance(obj, np.generic):
        return int(obj.nbytes)
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            pending += [key, value]
        return 0
    if isinstance(obj, (tuple, list, set, frozenset)):
        pending.extend(obj)
        return 0
    if isinstance(obj, _OPAQUE):
        return 0
    nbytes = getattr(obj, "nbytes", None)  # pyarrow arrays, memoryviews, ...
    if isinstance(nbytes, int) and not isinstance(nbytes, bool):
        return nbytes
    if hasattr(obj, "__dict__"):
        pending.extend(vars(obj).values())
    pending.extend(_slot_values(obj))
    return 0


def stat_nbytes(value: Any) -> int:
    """Approximate bytes of a sufficient-statistics value, as shipped between workers.

    numpy arrays count ``nbytes`` (object arrays count their elements); Python int, float, bool and
    None 8 each; str and bytes their length. Tuples, lists, sets, dicts (keys and values) and
    objects with ``__dict__`` or ``__slots__`` are walked; an object reached twice (shared or in a
    cycle) counts once. Never raises: what cannot be measured counts 0.

    >>> stat_nbytes((np.zeros(3), {"n": 2.0}))  # 24 + 1 + 8
    33
    """
    total = 0
    seen: set[int] = set()
    pending: list[Any] = [value]
    while pending:
        obj = pending.pop()
        if not isinstance(obj, (bool, int, float, complex, str, bytes, type(None))):
            if id(obj) in seen:
                continue
            seen.add(id(obj))
        try:
            total += _own_nbytes(obj, pending)
        except Exception:  # documented: an unmeasurable object counts 0 rather than failing a fit
            continue
    return total


_Handle = TypeVar("_Handle", bound="PayloadHandle")
_T = TypeVar("_T")


class PayloadHandle:
    """The handle contract for backends whose workers each fold their chunks into one payload.

    A subclass provides ``bind(estimator)``, ``partition_ids()`` and ``_estep(request) -> Payload``:
    every worker runs :func:`accumulate_chunks` over its chunks with the :data:`Request` ``(factory,
    model, initialize, options)`` and the payloads are merged (:func:`merge_payloads`). Everything
    else is decided here, once for every backend: the initial row selection and its fallback,
    weights, key tying, the M-step (:meth:`_finish`; an SPMD backend runs it on its root and shares
    the result). After each pass ``last_parts`` holds the partitions' reports (timings, rows, bytes
    of statistics) for the EM trace.
    """

    n: int
    last_parts: tuple[PartReport, ...] = ()
    supports_pass_options = True
    """E-steps accept :class:`PassOptions` (``pysp_em_step(..., options=)``, ``pysp_partition_payloads``)."""

    def bind(self, estimator: Estimator) -> Estimator:
        raise NotImplementedError

    def partition_ids(self) -> range:
        """The ids partitions report in ``last_parts`` (Spark partitions, mp workers, MPI ranks)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release workers and caches (idempotent)."""

    def __len__(self) -> int:
        return self.n

    def __enter__(self: _Handle) -> _Handle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _estep(self, request: Request) -> Payload:
        """The merged payload of one pass over every partition."""
        raise NotImplementedError

    compute: Compute | None = None
    """The engine and precision the data is stored for (None: numpy, float64); every pass asks for it."""

    def _asking(self, request: Request) -> Request:
        """``request`` asking for the handle's :attr:`compute` (when it is not the default)."""
        if self.compute is None or self.compute.default:
            return request
        options = request[3] if len(request) > 3 else None
        return (*request[:3], replace(options or PassOptions(), compute=self.compute))

    def _finish(self, request: Request, finish: Callable[[Payload], _T]) -> _T:
        """One pass, and ``finish(merged payload)`` (the M-step, or what the caller keeps of it)."""
        payload = self._estep(self._asking(request))
        self.last_parts = tuple(sorted(payload[3], key=lambda r: r.part))
        return finish(payload)

    def _statistics(self, factory: Any, value: Any) -> Any:
        return fold_key_passes(factory.make().from_value(value)).value()

    def pysp_em_step(
        self, estimator: Estimator, prev_estimate: Distribution, options: PassOptions | None = None
    ) -> tuple[float, float, Distribution]:
        """One pass: (total weight, log-likelihood of ``prev_estimate``, next estimate)."""
        bound = self.bind(estimator)
        factory = bound.accumulator_factory()

        def mstep(payload: Payload) -> tuple[float, float, Distribution]:
            nobs, ll, value, _parts = payload
            return nobs, ll, bound.estimate(nobs, self._statistics(factory, value))

        return self._finish((factory, prev_estimate, None, options), mstep)

    def pysp_partition_payloads(
        self, estimator: Estimator, model: Distribution, parts: Iterable[int], *, reference: bool = True
    ) -> dict[int, tuple[float, float, Any]]:
        """The own payloads ``(weight, log-likelihood, statistics)`` of ``parts``, computed again (with
        the independent reference kernels unless ``reference=False``); only those partitions run."""
        wanted = frozenset(int(p) for p in parts)
        factory = self.bind(estimator).accumulator_factory()
        payload = self._estep(
            (
                factory,
                model,
                None,
                PassOptions(keep=wanted, only=wanted, reference=reference, compute=self.compute),
            )
        )
        return {r.part: r.kept for r in payload[3] if r.kept is not None}

    def pysp_seq_estimate(self, estimator: Estimator, prev_estimate: Distribution) -> Distribution:
        """The next EM estimate from ``prev_estimate``."""
        return self.pysp_em_step(estimator, prev_estimate)[2]

    def pysp_stream_accumulate(self, estimator: Estimator, model: Distribution) -> tuple[float, Any]:
        """The E-step fold without the M-step: (total weight, merged statistics value)."""
        nobs, _ll, value = self.pysp_accumulate(estimator, model)
        return nobs, value

    def pysp_accumulate(self, estimator: Estimator, model: Distribution) -> tuple[float, float, Any]:
        """The E-step fold under ``model`` without the M-step: (total weight, log-likelihood of
        ``model``, merged statistics value after the tying passes), in one pass (an update's pass)."""
        factory = self.bind(estimator).accumulator_factory()
        return self._finish(
            (factory, model, None, None), lambda p: (p[0], p[1], self._statistics(factory, p[2]))
        )

    def pysp_seq_log_density_sum(self, estimate: Distribution) -> tuple[float, float]:
        """(total weight, weighted total log-likelihood of ``estimate``)."""
        return self._finish((None, estimate, None, None), lambda p: (p[0], p[1]))

    def pysp_row_pass(self, factory: Any, task: Any) -> tuple[float, Any]:
        """One pass of a row task (the seeding's passes): (total weight, merged value of ``factory``'s
        accumulators, each folded by ``task.fold(acc, enc, weights, row_ids)``)."""
        return self._finish((factory, None, task, None), lambda p: (p[0], p[2]))

    def pysp_seq_initialize(self, estimator: Estimator, rng: Any, p: float) -> Distribution:
        """An initial model from rows kept with probability ``p`` (a hash of seed and global row id)
        and row-keyed random statistics: the same model on every backend for one seed. When the kept
        rows weigh less than the estimator needs (:meth:`~Estimator.min_rows`), every row is used."""
        bound = self.bind(estimator)
        seed = seed_from(rng)
        p = 1.0 if p is None or p >= 1.0 else (0.1 if p <= 0.0 else float(p))
        factory = bound.accumulator_factory()

        def initial(fallback: bool) -> Callable[[Payload], Distribution | None]:
            def finish(payload: Payload) -> Distribution | None:
                nobs, _ll, value, _parts = payload
                if fallback and nobs < max(bound.min_rows(), 1):
                    return None
                return bound.estimate(nobs, self._statistics(factory, value))

            return finish

        model = self._finish((factory, None, (seed, p), None), initial(p < 1.0))
        if model is None:
            model = self._finish((factory, None, (seed, 1.0), None), initial(False))
        assert model is not None
        return model
