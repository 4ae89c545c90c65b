"""The ``ray`` backend: a Ray Dataset encoded once into row ranges held by a small set of actors.

The dataset's blocks are materialized in the dataset's order (``preserve_order``) and stay in Ray's
object store, referenced by the handle. The rows are split into contiguous, near-equal ranges, one
per actor (by default one actor per CPU slot of the Ray cluster, spread over its nodes; ``num_workers``
or ``resources`` say otherwise). Each actor reads the blocks its range overlaps, validates and encodes
its rows once and keeps the encoding; the vocabularies come from one scan whose per-actor results,
small sets of labels, are merged in this process.

An E-step is one call per actor returning one payload ``(weight, log-likelihood, statistics)`` (the
fold every backend runs, :func:`~mixle_spark.parallel.fold.accumulate_chunks`); payloads
are merged pairwise in a binary tree of actor calls, in row order, so only the merged statistics
reach this process and results do not depend on timing. Row ids are global, so one seed draws the
same initial rows as the local, Spark and Dask backends.

An actor that dies (its process killed, its node lost) is replaced: a new actor reads its range from
the blocks again, encodes it with the scanned encoder, and the E-step runs again; the estimates are
unchanged. (Blocks lost with a node are rebuilt by Ray from their lineage when it can.)
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from mixle_spark._frames import frame_engine
from mixle_spark._identity import MultisetDigest, frame_row_hashes, frame_schema
from mixle_spark.engines import Compute
from mixle_spark.errors import EmptyDataError
from mixle_spark.parallel.backends._handle import (
    bind_estimator,
    encode_part,
    scan_part,
)
from mixle_spark.parallel.backends._scoring import BatchScorer
from mixle_spark.parallel.backends.controls import check_control, take_controls
from mixle_spark.parallel.fold import Payload, PayloadHandle, Request, accumulate_chunks, merge_payloads
from mixle_spark.stats._tables import as_table, split
from mixle_spark.stats.base import Distribution, Encoder, Estimator

__all__ = ["RAY_CONTROLS", "RayEncodedData", "add_scores", "make_ray", "require_ray"]

RAY_CONTROLS = ("encoder", "resources", "num_workers", "num_chunks", "engine", "precision")
_INSTALL_HINT = "the 'ray' backend needs Ray Data: pip install 'mixle-spark[ray]'"
_RETRIES = 3
"""E-step attempts after actors died (each replaces the dead ones first)."""


def require_ray() -> Any:
    """The ``ray`` module (with ``ray.data`` imported), or ImportError naming the ``ray`` extra."""
    try:
        import ray
        import ray.data
    except ImportError as err:
        raise ImportError(f"{_INSTALL_HINT} ({err})") from err
    return ray


# -- what runs in the actors ------------------------------------------------------------------------
class _Holder:
    """A long-lived actor holding the encoded rows of every handle that uses it, by handle token.

    A handle's rows on this actor are rows ``[start, stop)`` of ``n``, read from ``blocks`` (the
    dataset's blocks the range overlaps, resolved by Ray), ``first`` being the row of the first
    block's first row.
    """

    def __init__(self) -> None:
        self.held: dict[int, tuple[int, list[Any]]] = {}

    def pid(self) -> int:
        return os.getpid()

    @staticmethod
    def _table(start: int, stop: int, first: int, blocks: tuple[Any, ...]) -> Any:
        """Rows ``[start, stop)`` out of ``blocks`` (Arrow tables, the first starting at row ``first``)."""
        import pyarrow as pa

        table = pa.concat_tables(blocks) if len(blocks) > 1 else blocks[0]
        return table.slice(start - first, stop - start)

    def scan(self, where: tuple[int, int, int, int], options: tuple[Any, ...], *blocks: Any) -> Any:
        start, stop, n, first = where
        encoder, weights, column = options[:3]
        return scan_part(self._table(start, stop, first, blocks), encoder, weights, column, start, n)

    def encode(
        self, token: int, part: int, where: tuple[int, int, int, int], options: tuple[Any, ...], *blocks: Any
    ) -> int:
        start, stop, n, first = where
        encoder, weights, column, num_chunks, compute = options
        table = self._table(start, stop, first, blocks)
        chunks = encode_part(table, encoder, weights, column, start, n, num_chunks, compute)
        self.held[token] = (part, chunks)
        return len(self.held[token][1])

    def estep(self, token: int, request: Request) -> Payload:
        part, chunks = self.held[token]
        return accumulate_chunks(chunks, request, part)

    def merge(self, request: Request, a: Payload | None, b: Payload | None) -> Payload | None:
        return merge_payloads(request[0], a, b)

    def drop(self, token: int) -> None:
        self.held.pop(token, None)


class _Pool:
    """The actors of this process's Ray runtime, shared by every handle (started on first use, one
    per requested slot, replaced when they die); a handle's range ``i`` lives on actor ``i``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.job: Any = None
        self.actors: list[Any] = []

    def get(self, ray: Any, count: int) -> list[Any]:
        with self.lock:
            job = ray.get_runtime_context().get_job_id()
            if job != self.job:  # a new runtime (ray.shutdown(), ray.init()): the old actors are gone
                self.job, self.actors = job, []
            holder = ray.remote(_Holder).options(scheduling_strategy="SPREAD")
            self.actors += [holder.remote() for _ in range(count - len(self.actors))]
            return self.actors[:count]

    def replace(self, ray: Any, dead: Any) -> Any:
        """The pool's actor in ``dead``'s place: a new one, unless another handle replaced it."""
        with self.lock:
            i = self.actors.index(dead) if dead in self.actors else None
            if i is None:
                return None
            self.actors[i] = ray.remote(_Holder).options(scheduling_strategy="SPREAD").remote()
            return self.actors[i]

    def current(self, i: int) -> Any:
        with self.lock:
            return self.actors[i] if i < len(self.actors) else None


_POOL = _Pool()
_TOKENS = itertools.count(1)


class RayEncodedData(PayloadHandle):
    """Encoded data held by actors of a Ray cluster (the ``ray`` backend).

    Parameters
    ----------
    data : ray.data.Dataset
        The rows, in the dataset's order. (A pandas DataFrame or a pyarrow Table is put into Ray's
        object store first.)
    estimator, model, encoder : what the data is encoded for.
    weights : str, optional
        A non-negative weight column (dropped from the rows).
    column : str, optional
        The column a non-Record model reads from a multi-column dataset.
    num_workers : int, optional
        Actors holding the rows (default: one per CPU slot of the cluster, at most one per row).
    num_chunks : int, optional
        Chunks per actor (default: chunks of at most 262,144 rows).
    compute : Compute, optional
        The engine and precision asked for (``engine`` / ``precision``): each actor stores its rows at
        that precision and folds them on that engine.

    The actors are long-lived and shared by the handles of this process (a second fit does not
    start new ones); ``partition_ids()`` are this handle's row ranges, one per actor, in row order.
    ``close()`` (or the handle being garbage-collected) drops its rows from the actors and releases
    the blocks; the Ray runtime is the caller's. While the handle is open the dataset's blocks stay
    in Ray's object store (which spills to disk under pressure) beside the encoded rows: an actor
    that dies is rebuilt from them.
    """

    def __init__(
        self,
        data: Any,
        estimator: Estimator | None = None,
        model: Distribution | None = None,
        *,
        encoder: Encoder | None = None,
        weights: str | None = None,
        column: str | None = None,
        num_workers: int | None = None,
        num_chunks: int | None = None,
        compute: Compute | None = None,
    ) -> None:
        ray = require_ray()
        if estimator is None and model is None and encoder is None:
            raise TypeError("RayEncodedData needs an estimator, a model or an encoder")
        if weights is not None and not isinstance(weights, str):
            raise TypeError(
                f"weights must be the name of a weight column for the ray backend, got {weights!r}"
            )
        num_workers = check_control("num_workers", num_workers)  # the actors
        self._ray, self.compute = ray, compute
        self._closed = True
        self._blocks = _block_refs(data if frame_engine(data) == "ray" else _as_dataset(ray, data))
        sizes = ray.get([_remote(ray, _num_rows).remote(b) for b in self._blocks])
        self.n = int(sum(sizes))
        if self.n == 0:
            raise EmptyDataError("no rows to encode: the data is empty")
        self._firsts = np.concatenate(([0], np.cumsum(sizes))).astype(int).tolist()
        count = num_workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._ranges = split(0, self.n, min(count, self.n))
        self._actors = _POOL.get(ray, len(self._ranges))
        self._token = next(_TOKENS)
        self._closed = False
        self._finalizer = weakref.finalize(self, _drop, ray, self._token, list(self._actors))
        base = encoder or (estimator.encoder() if estimator is not None else model.encoder())  # type: ignore[union-attr]
        self._scan: Any = None
        self.encoder = base
        if estimator is not None and base.needs_scan:
            options = (base, weights, column)
            calls = [
                actor.scan.remote(self._where(i), options, *self._overlapping(i))
                for i, actor in enumerate(self._actors)
            ]
            for i, scan in enumerate(_get(ray, calls)):
                self._scan = scan if i == 0 else base.merge_scans(self._scan, scan)
            self.encoder = estimator.with_scan(self._scan).encoder()
        self._options = (self.encoder, weights, column, num_chunks, compute)
        _get(ray, [self._encode(i) for i in range(len(self._actors))])

    # -- actors ----------------------------------------------------------------------------------
    def _where(self, i: int) -> tuple[int, int, int, int]:
        """``(start, stop, n, first)`` of range ``i``: ``first`` is the row of its first block."""
        start, stop = self._ranges[i]
        first = next(a for a, b in itertools.pairwise(self._firsts) if b > start)
        return start, stop, self.n, first

    def _overlapping(self, i: int) -> list[Any]:
        start, stop = self._ranges[i]
        return [
            block
            for block, (a, b) in zip(self._blocks, itertools.pairwise(self._firsts), strict=True)
            if a < stop and b > start and b > a
        ]

    def _encode(self, i: int) -> Any:
        return self._actors[i].encode.remote(
            self._token, i, self._where(i), self._options, *self._overlapping(i)
        )

    def _replace_dead_actors(self) -> int:
        """Put this handle's rows back on a live actor wherever its actor died; how many died."""
        died = []
        for i, actor in enumerate(self._actors):
            try:
                self._ray.get(actor.pid.remote())
            except self._ray.exceptions.RayActorError:
                died.append(i)
        for i in died:
            self._actors[i] = _POOL.replace(self._ray, self._actors[i]) or _POOL.current(i)
        _get(self._ray, [self._encode(i) for i in died])
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _drop, self._ray, self._token, list(self._actors))
        return len(died)

    def actor_pids(self) -> list[int]:
        """The process id of each actor holding this handle's rows, in row order (for monitoring and
        fault-injection tests)."""
        return [int(p) for p in _get(self._ray, [a.pid.remote() for a in self._actors])]

    # -- the handle contract ---------------------------------------------------------------------
    def bind(self, estimator: Estimator) -> Estimator:
        """``estimator`` with the scanned vocabularies / ranges fixed."""
        return bind_estimator(estimator, self._scan, self.encoder)

    def partition_ids(self) -> range:
        """The ids partitions report in ``last_parts``: the row ranges, one per actor, in order."""
        return range(len(self._actors))

    def _estep(self, request: Request) -> Payload:
        if self._closed:
            raise ValueError("this encoded-data handle is closed")
        ray = self._ray
        shipped = ray.put(request)  # once, read by every actor from the object store
        for attempt in range(_RETRIES + 1):
            level = [actor.estep.remote(self._token, shipped) for actor in self._actors]
            while len(level) > 1:  # pairwise, in row order, on the actors
                level = [
                    self._actors[i].merge.remote(shipped, level[i], level[i + 1])
                    if i + 1 < len(level)
                    else level[i]
                    for i in range(0, len(level), 2)
                ]
            try:
                return _get(ray, level[0])  # type: ignore[no-any-return]
            except ray.exceptions.RayActorError:
                if attempt == _RETRIES or not self._replace_dead_actors():
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Drop this handle's rows from the actors and release the blocks (idempotent)."""
        self._closed = True
        self._finalizer()
        self._blocks = []


def _drop(ray: Any, token: int, actors: list[Any]) -> None:
    """Forget a handle's rows on its actors (fire and forget: a dead actor holds nothing)."""
    if ray.is_initialized():
        for actor in actors:
            actor.drop.remote(token)


def _num_rows(block: Any) -> int:
    return len(block)


def _remote(ray: Any, fn: Any) -> Any:
    """``fn`` as a Ray task (made once per function and process)."""
    made = _REMOTE.get(fn)
    if made is None:
        made = _REMOTE[fn] = ray.remote(fn)
    return made


_REMOTE: dict[Any, Any] = {}


def _get(ray: Any, refs: Any) -> Any:
    """``ray.get(refs)``, raising a task's own error (a DataValueError naming the row, a SchemaError
    naming the column) rather than Ray's wrapper of it."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, Exception) and not isinstance(cause, ray.exceptions.RayError):
            raise cause from None
        raise


@contextmanager
def _order_preserved(dataset: Any) -> Iterator[None]:
    """Run ``dataset`` with its blocks in the dataset's order (Ray Data's streaming executor
    otherwise hands blocks out as they finish), then restore its setting."""
    options = dataset.context.execution_options
    saved = options.preserve_order
    options.preserve_order = True
    try:
        yield
    finally:
        options.preserve_order = saved


def _block_refs(dataset: Any) -> list[Any]:
    with _order_preserved(dataset):
        return list(dataset.to_arrow_refs())


def _as_dataset(ray: Any, data: Any) -> Any:
    table = as_table(data)
    if table is None:
        raise TypeError(
            "the ray backend reads a Ray Dataset (or a pandas DataFrame / pyarrow Table), "
            f"got {type(data).__name__}"
        )
    return ray.data.from_arrow(table)


def make_ray(data: Any, estimator: Any = None, model: Any = None, **options: Any) -> RayEncodedData:
    """Registry factory of the ``ray`` backend: honours :data:`RAY_CONTROLS` (``resources``: one actor
    per device, e.g. ``Resources.from_ray()``; ``num_workers``: the number of actors); ``weights=``
    (a column name) and ``column=`` pass through."""
    controls = take_controls("ray", options, RAY_CONTROLS, computes=True)
    resources = controls.pop("resources", None)
    if resources is not None:
        if controls.get("num_workers") is not None:
            raise ValueError("pass resources= or num_workers= to the ray backend, not both")
        controls["num_workers"] = len(resources.devices)
    return RayEncodedData(data, estimator=estimator, model=model, **controls, **options)


def add_scores(dataset: Any, scorer: BatchScorer, column: str | None) -> Any:
    """A lazy Ray Dataset: ``dataset`` with ``scorer``'s columns added block by block
    (:func:`mixle_spark.scoring.score`). A bad value raises when the dataset is consumed, naming its
    row in its block (Ray does not tell a batch which block it is)."""
    require_ray()
    scorer.read_columns(list(dataset.columns()), column)
    return dataset.map_batches(
        _score_block, fn_args=(scorer,), batch_format="pyarrow", batch_size=None, zero_copy_batch=True
    )


def _score_block(table: Any, scorer: BatchScorer) -> Any:
    import pyarrow as pa

    if table.num_rows == 0:
        arrays = [pa.array([], type=typ) for _, typ in scorer.added]
    else:
        batch = table.combine_chunks().to_batches()[0]  # the whole block, encoded at once
        arrays = scorer.scores(batch, scorer.encode(batch, 0, lambda: "a block of the dataset"))
    for (name, _), array in zip(scorer.added, arrays, strict=True):
        table = table.append_column(name, array)
    return table


def _batch_digest(batch: Any) -> Any:
    import pandas as pd

    state = MultisetDigest().add(frame_row_hashes(batch)).state()
    # as text: 64-bit values would become uint64 in one part and int64 in another, then floats
    return pd.DataFrame({c: [str(v)] for c, v in zip("nsqx", state, strict=True)})


def content_identity(dataset: Any) -> str:
    """The digest of a Ray Dataset's rows: each batch's row hashes folded where it lives
    (:class:`~mixle_spark._identity.MultisetDigest`), the parts merged here (order-free)."""
    parts = dataset.map_batches(_batch_digest, batch_format="pandas").take_all()
    digest = MultisetDigest()
    for part in parts:
        digest.merge([int(part[c]) for c in "nsqx"])
    return digest.hexdigest(frame_schema(dataset.schema().base_schema))
