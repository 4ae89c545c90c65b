"""The ``local`` backend: encoded chunks held in this process, folded with numpy.

Built from a Python list of records, a numpy array, a pandas DataFrame or a pyarrow Table /
RecordBatch. Rows are split into contiguous chunks (``chunk_size`` rows each); every chunk is
encoded once and re-read by each EM iteration. Row ``i`` keeps the global row id ``i`` for
initialization, so results do not depend on the chunking.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from mixle_spark.engines import Compute, narrow_encoded
from mixle_spark.parallel.backends._handle import bind_estimator, machine_memory
from mixle_spark.parallel.backends.controls import take_controls
from mixle_spark.parallel.backends.model_parallel import EXECUTION_KIND, ModelParallelEstimator, check_workers
from mixle_spark.parallel.fold import Payload, PayloadHandle, Request, accumulate_chunks, merge_payloads
from mixle_spark.stats._tables import DEFAULT_CHUNK_SIZE, TableRows, chunk_bounds, split
from mixle_spark.stats.base import Distribution, Encoder, Estimator

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "LOCAL_CONTROLS",
    "ComponentParallelEncodedData",
    "LocalEncodedData",
    "ModelParallelEncodedData",
    "make_local",
    "make_model_parallel",
]


class LocalEncodedData(PayloadHandle):
    """Encoded data in this process; implements the encoded-data handle contract.

    Parameters
    ----------
    data : list, numpy array, pandas DataFrame, pyarrow Table or RecordBatch
        The records. A Record model reads the columns its fields name; any other model reads a
        table of exactly one column, or the one named by ``column``.
    estimator : Estimator, optional
        What will be fitted; its encoder (after a scan for vocabularies / ranges) encodes the data.
    model : Distribution, optional
        Encode for scoring with this model instead (no scan).
    chunk_size : int, optional
        Rows per chunk (default :data:`DEFAULT_CHUNK_SIZE`); ``num_chunks`` instead splits into
        that many near-equal chunks.
    weights : array-like or str, optional
        Per-row non-negative weights, or the name of a weight column.
    column : str, optional
        The column a non-Record model reads from a multi-column table.
    sub_chunks, placement, resources, parallel_chunks, chunk_workers, num_workers :
        See :func:`~mixle_spark.parallel.encoded_data`.

    Each chunk is a partition of the fold every backend shares
    (:class:`~mixle_spark.parallel.fold.PayloadHandle`): chunk ``i`` reports as partition
    ``i`` and the payloads are merged in chunk order, whether the chunks ran one after the other or
    in threads (``parallel_chunks``).
    """

    def __init__(
        self,
        data: Any,
        estimator: Estimator | None = None,
        model: Distribution | None = None,
        *,
        chunk_size: int | None = None,
        num_chunks: int | None = None,
        weights: Any = None,
        column: str | None = None,
        encoder: Encoder | None = None,
        sub_chunks: int = 1,
        placement: Any = None,
        resources: Any = None,
        parallel_chunks: bool = False,
        chunk_workers: int | None = None,
        num_workers: int | None = None,
        compute: Compute | None = None,
    ) -> None:
        if estimator is None and model is None and encoder is None:
            raise TypeError("LocalEncodedData needs an estimator, a model or an encoder")
        if type(parallel_chunks) is not bool:
            raise TypeError(f"parallel_chunks must be True or False, got {parallel_chunks!r}")
        for name, value in (("sub_chunks", sub_chunks), ("chunk_workers", chunk_workers)):
            if value is not None and (type(value) is not int or value < 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self.chunk_workers = chunk_workers if parallel_chunks else None
        self.parallel_chunks = parallel_chunks
        self.num_workers = num_workers
        self._closed = False
        rows = TableRows(data, weights, column)
        self.n = rows.n
        self._weights = rows.weights
        if placement is None and resources is not None:
            from mixle_spark.parallel.planning.planner import plan

            placement = plan(
                data, model=model, estimator=estimator, encoder=encoder, resources=resources,
                num_chunks=num_chunks, sub_chunks=sub_chunks,
                engine=None if compute is None else compute.engine,
                precision=None if compute is None else compute.precision,
            )  # fmt: skip
        if placement is not None:
            if chunk_size is not None or num_chunks is not None:
                raise ValueError("pass a placement (or resources) or chunk_size / num_chunks, not both")
            placement.validate(total_rows=self.n, resources=resources)
            shards = [(s.start, s.stop, s.sub_chunks) for s in placement.shards]
            bounds = [piece for a, b, k in shards for piece in split(a, b, k)]
        else:
            whole = chunk_bounds(self.n, chunk_size, num_chunks)
            bounds = [piece for a, b in whole for piece in split(a, b, sub_chunks)]
        self.placement = placement
        base_encoder = encoder or (estimator.encoder() if estimator is not None else model.encoder())  # type: ignore[union-attr]
        source = rows.source(base_encoder)
        self._scan, self.encoder = rows.scanned(base_encoder, estimator, source, bounds)
        self.compute = compute
        self.chunks: list[tuple[int, int, Any]] = [
            (a, b, narrow_encoded(self.encoder, enc, compute))
            for a, b, enc in rows.encode(self.encoder, source, bounds)
        ]

    # -- the handle contract: PayloadHandle's fold over the chunks ----------------------------
    def close(self) -> None:
        """Release the encoded chunks (idempotent)."""
        self._closed = True
        self.chunks = []

    def _iter_chunks(self) -> Iterator[tuple[np.ndarray, Any, np.ndarray]]:
        if self._closed:
            raise ValueError("this encoded-data handle is closed")
        for start, stop, enc in self.chunks:
            yield np.arange(start, stop, dtype=np.uint64), enc, self._weights[start:stop]

    def bind(self, estimator: Estimator) -> Estimator:
        """``estimator`` with this data's scanned vocabularies / ranges fixed (and its E-step
        threaded over ``num_workers`` threads when that was asked for)."""
        return bind_estimator(estimator, self._scan, self.encoder, self.num_workers)

    def partition_ids(self) -> range:
        """The ids partitions report in ``last_parts``: chunk indices."""
        return range(len(self.chunks))

    def fold_rows(self) -> int:
        """The most rows one chunk holds (each is folded at once)."""
        return max((stop - start for start, stop, _enc in self.chunks), default=0)

    def worker_memory(self) -> int | None:
        """This process's memory (the chunks are folded here)."""
        return machine_memory()

    def _map_items(self, fn: Any, items: list[Any]) -> Iterator[Any]:
        """``fn`` over ``items`` in order; threaded when ``parallel_chunks`` (results in order)."""
        if not self.parallel_chunks or len(items) < 2:
            return map(fn, items)
        from concurrent.futures import ThreadPoolExecutor

        workers = self.chunk_workers or min(len(items), os.cpu_count() or 1)
        with ThreadPoolExecutor(workers, thread_name_prefix="mixle-chunks") as pool:
            return iter(list(pool.map(fn, items)))

    def _estep(self, request: Request) -> Payload:
        """Every chunk folded by :func:`accumulate_chunks` as its own partition, merged in chunk order."""
        factory = request[0]

        def fold(item: tuple[int, tuple[np.ndarray, Any, np.ndarray]]) -> Payload:
            part, (ids, enc, w) = item
            return accumulate_chunks([(enc, w, ids)], request, part)

        merged: Payload | None = None
        for payload in self._map_items(fold, list(enumerate(self._iter_chunks()))):
            merged = merge_payloads(factory, merged, payload)
        return merged if merged is not None else (0.0, 0.0, None, ())

    def seq_log_density(self, estimate: Distribution) -> np.ndarray:
        """Per-row log-density of ``estimate``, shape (n,), in row order."""
        return np.concatenate([estimate.seq_log_density(enc) for _ids, enc, _w in self._iter_chunks()])

    def first_nonfinite_row(self, estimate: Distribution) -> tuple[int, float] | None:
        """(row index, value) of the first row whose log-density is NaN or infinite, if any."""
        for ids, enc, w in self._iter_chunks():
            ll = estimate.seq_log_density(enc)
            bad = ~np.isfinite(ll) & (w > 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                return int(ids[i]), float(ll[i])
        return None


LOCAL_CONTROLS = (
    "encoder",
    "num_chunks",
    "sub_chunks",
    "placement",
    "resources",
    "engine",
    "precision",
    "parallel_chunks",
    "chunk_workers",
    "num_workers",
)


def make_local(data: Any, estimator: Any = None, model: Any = None, **options: Any) -> LocalEncodedData:
    """Registry factory of the ``local`` backend: honours :data:`LOCAL_CONTROLS` (every engine and
    precision) and refuses the other controls of ``encoded_data``."""
    controls = take_controls("local", options, LOCAL_CONTROLS, computes=True)
    return LocalEncodedData(data, estimator=estimator, model=model, **controls, **options)


class ModelParallelEncodedData(LocalEncodedData):
    """In-process encoded data whose E-steps thread the model (the ``model_parallel`` backend).

    A :class:`LocalEncodedData` (same options: chunking, weights, column) that wraps every estimator
    it is asked to fit in :class:`~mixle_spark.parallel.backends.model_parallel.ModelParallelEstimator`.
    """

    execution_kind = EXECUTION_KIND

    def __init__(
        self,
        data: Any,
        *,
        estimator: Estimator | None = None,
        model: Distribution | None = None,
        encoder: Encoder | None = None,
        num_workers: int | None = None,
        **options: Any,
    ) -> None:
        workers = check_workers(num_workers)
        if isinstance(estimator, ModelParallelEstimator):
            estimator = estimator.inner
        super().__init__(data, estimator=estimator, model=model, encoder=encoder, **options)
        self.num_workers = workers

    def bind(self, estimator: Estimator) -> Estimator:
        bound = super().bind(estimator)
        if isinstance(bound, ModelParallelEstimator):
            return bound
        return ModelParallelEstimator(bound, self.num_workers)


def make_model_parallel(
    data: Any, estimator: Any = None, model: Any = None, **options: Any
) -> ModelParallelEncodedData:
    """Registry factory of the ``model_parallel`` backend (aliases ``component_parallel``, ``mp_model``):
    the ``local`` backend's controls (every engine and precision)."""
    controls = take_controls("model_parallel", options, LOCAL_CONTROLS, computes=True)
    return ModelParallelEncodedData(data, estimator=estimator, model=model, **controls, **options)


ComponentParallelEncodedData = ModelParallelEncodedData
