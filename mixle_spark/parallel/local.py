"""The ``local`` backend: encoded chunks held in this process, folded with numpy.

Built from a Python list of records, a numpy array, a pandas DataFrame or a pyarrow Table /
RecordBatch. Rows are split into contiguous chunks (``chunk_size`` rows each); every chunk is
encoded once and re-read by each EM iteration. Row ``i`` keeps the global row id ``i`` for
initialization, so results do not depend on the chunking.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.errors import EmptyDataError, FieldError, SchemaError
from mixle_spark.parallel._handle import (
    PartReport,
    PassOptions,
    accumulate_chunks,
    bind_estimator,
    check_engine_and_precision,
    fold_key_passes,
    initial_keep_weights,
    merge_payloads,
    one_column_error,
    seed_from,
    weighted_sum,
)
from mixle_spark.parallel.registry import CONTROL_DEFAULTS, refuse_controls
from mixle_spark.stats._random import RowRandom
from mixle_spark.stats._validate import check_weights
from mixle_spark.stats.base import Distribution, Encoder, Estimator, seq_update_with_ll

__all__ = ["DEFAULT_CHUNK_SIZE", "LOCAL_CONTROLS", "LocalEncodedData", "make_local"]

DEFAULT_CHUNK_SIZE = 262_144
"""Rows per encoded chunk: large enough for efficient matrix products, small enough that the
n x k temporaries of a mixture E-step stay in memory comfortably."""


def _split(start: int, stop: int, pieces: int) -> list[tuple[int, int]]:
    """``[start, stop)`` cut into ``pieces`` near-equal contiguous ranges (empty ones dropped)."""
    edges = np.linspace(start, stop, pieces + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges) if b > a]


def _as_table(data: Any) -> pa.Table | None:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a required dependency
        return None
    if isinstance(data, pd.DataFrame):
        return pa.Table.from_pandas(data, preserve_index=False)
    return None


class LocalEncodedData:
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
    encode : bool
        False validates the weights and runs the scan but encodes nothing: ``source`` then holds
        the rows (or the column) for another process to encode (the ``mp`` backend).
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
        encode: bool = True,
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
        table = _as_table(data)
        if table is None and isinstance(data, pa.ChunkedArray | pa.Array):
            table = pa.table({column or "value": data})
        n = table.num_rows if table is not None else len(data)
        if n == 0:
            raise EmptyDataError("no rows to encode: the data is empty")
        self.n = n
        self._weights = self._resolve_weights(weights, table, n)
        if table is not None and isinstance(weights, str):
            table = table.drop_columns([weights])
        if placement is None and resources is not None:
            from mixle_spark.parallel.planner import plan

            placement = plan(
                data, model=model, estimator=estimator, encoder=encoder, resources=resources,
                num_chunks=num_chunks, sub_chunks=sub_chunks,
            )  # fmt: skip
        if placement is not None:
            if chunk_size is not None or num_chunks is not None:
                raise ValueError("pass a placement (or resources) or chunk_size / num_chunks, not both")
            placement.validate(total_rows=n, resources=resources)
            shards = [(s.start, s.stop, s.sub_chunks) for s in placement.shards]
            bounds = [piece for a, b, k in shards for piece in _split(a, b, k)]
        else:
            whole = self._chunk_bounds(n, chunk_size, num_chunks)
            bounds = [piece for a, b in whole for piece in _split(a, b, sub_chunks)]
        self.placement = placement
        base_encoder = encoder or (estimator.encoder() if estimator is not None else model.encoder())  # type: ignore[union-attr]
        source = self._column_source(base_encoder, table, column) if table is not None else data
        self._scan: Any = None
        if estimator is not None and base_encoder.needs_scan:
            self._scan = self._run_scan(base_encoder, source, bounds, table is not None)
            base_encoder = estimator.with_scan(self._scan).encoder()
        self.encoder = base_encoder
        self.chunks: list[tuple[int, int, Any]] = []
        self.source: Any = None if encode else source
        for start, stop in bounds if encode else ():
            piece = source.slice(start, stop - start) if table is not None else source[start:stop]
            self.chunks.append((start, stop, self._encode(piece, start, stop, table is not None)))

    # -- construction helpers ------------------------------------------------------------------
    @staticmethod
    def _chunk_bounds(n: int, chunk_size: int | None, num_chunks: int | None) -> list[tuple[int, int]]:
        if chunk_size is not None and num_chunks is not None:
            raise ValueError("pass chunk_size or num_chunks, not both")
        if num_chunks is not None:
            if num_chunks < 1:
                raise ValueError(f"num_chunks must be >= 1, got {num_chunks}")
            edges = np.linspace(0, n, min(num_chunks, n) + 1).round().astype(int)
        else:
            size = DEFAULT_CHUNK_SIZE if chunk_size is None else chunk_size
            if size < 1:
                raise ValueError(f"chunk_size must be >= 1, got {size}")
            edges = np.append(np.arange(0, n, size), n)
        return [(int(a), int(b)) for a, b in itertools.pairwise(edges) if b > a]

    @staticmethod
    def _resolve_weights(weights: Any, table: pa.Table | None, n: int) -> np.ndarray:
        if weights is None:
            return np.ones(n)
        nulls = None
        if isinstance(weights, str):
            if table is None or weights not in table.column_names:
                raise SchemaError(f"weight column {weights!r} not found")
            column = table.column(weights)
            w = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
            if column.null_count:
                nulls = np.asarray(column.is_null().to_numpy(zero_copy_only=False))
        else:
            w = np.asarray(weights, dtype=np.float64)
        if w.shape != (n,):
            raise ValueError(f"weights must have one entry per row ({n}), got shape {w.shape}")
        return check_weights(w, name=weights if isinstance(weights, str) else None, nulls=nulls)

    @staticmethod
    def _column_source(encoder: Encoder, table: pa.Table, column: str | None) -> Any:
        names = encoder.column_names()
        if names is not None:
            return table
        if column is not None:
            if column not in table.column_names:
                raise SchemaError(f"column {column!r} not found; the data has columns {table.column_names}")
            return table.column(column)
        if table.num_columns != 1:
            raise one_column_error(table.column_names)
        return table.column(0)

    def _run_scan(self, encoder: Encoder, source: Any, bounds: list[tuple[int, int]], arrow: bool) -> Any:
        state: Any = None
        for i, (start, stop) in enumerate(bounds):
            piece = source.slice(start, stop - start) if arrow else source[start:stop]
            part = self._located(encoder.scan_arrow if arrow else encoder.scan, piece, start, stop)
            state = part if i == 0 else encoder.merge_scans(state, part)
        return state

    def _encode(self, piece: Any, start: int, stop: int, arrow: bool) -> Any:
        encode = self.encoder.from_arrow if arrow else self.encoder.encode
        return self._located(encode, piece, start, stop)

    def _located(self, fn: Any, piece: Any, start: int, stop: int) -> Any:
        # Errors inside a chunk report the row within the whole data set.
        try:
            return fn(piece)
        except FieldError as err:
            rows = np.arange(start, stop)
            raise err.in_rows(rows, self.n) from None

    # -- the handle contract -----------------------------------------------------------------
    def __len__(self) -> int:
        return self.n

    def __enter__(self) -> LocalEncodedData:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

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

    def _map_chunks(self, fn: Any) -> Iterator[Any]:
        """``fn`` over the chunks in order; threaded when ``parallel_chunks`` (results in order)."""
        return self._map_items(fn, list(self._iter_chunks()))

    def _map_items(self, fn: Any, items: list[Any]) -> Iterator[Any]:
        if not self.parallel_chunks or len(items) < 2:
            return map(fn, items)
        from concurrent.futures import ThreadPoolExecutor

        workers = self.chunk_workers or min(len(items), os.cpu_count() or 1)
        with ThreadPoolExecutor(workers, thread_name_prefix="mixle-chunks") as pool:
            return iter(list(pool.map(fn, items)))

    last_parts: tuple[PartReport, ...] = ()
    supports_pass_options = True
    """E-steps accept :class:`~mixle_spark.parallel._handle.PassOptions` (the audit's asks)."""

    def pysp_em_step(
        self, estimator: Estimator, prev_estimate: Distribution, options: PassOptions | None = None
    ) -> tuple[float, float, Distribution]:
        """One pass: (total weight, log-likelihood of ``prev_estimate``, next estimate)."""
        bound = self.bind(estimator)
        nobs, ll, acc = self._accumulate(bound, prev_estimate, options)
        return nobs, ll, bound.estimate(nobs, fold_key_passes(acc).value())

    def _accumulate(
        self, estimator: Estimator, model: Distribution, options: PassOptions | None = None
    ) -> tuple[float, float, Any]:
        """The E-step over the chunks (chunk ``i`` is partition ``i`` of ``last_parts``), merged in
        chunk order whatever ran them."""
        from mixle_spark.parallel.em_observability import stat_nbytes

        factory = estimator.accumulator_factory()
        reference = options is not None and options.reference
        only = None if options is None else options.only

        def fold(
            item: tuple[int, tuple[np.ndarray, Any, np.ndarray]],
        ) -> tuple[Any, float, float, PartReport]:
            part, (_ids, enc, w) = item
            started = time.perf_counter()
            acc = factory.make()
            if reference:
                from mixle_spark.stats.mixture import reference_kernels

                with reference_kernels():
                    acc.seq_update(enc, w, model)
                    chunk_ll = weighted_sum(w, model.seq_log_density(enc))
            else:
                chunk_ll = weighted_sum(w, seq_update_with_ll(acc, enc, w, model))
            chunk_n = float(w.sum())
            value = acc.value()
            keep = options is not None and part in options.keep
            report = PartReport(
                part, time.perf_counter() - started, len(w), stat_nbytes(value),
                (chunk_n, chunk_ll, value) if keep else None,
            )  # fmt: skip
            return acc, chunk_ll, chunk_n, report

        total: Any = None
        nobs = 0.0
        ll = 0.0
        reports = []
        chunks = [(i, c) for i, c in enumerate(self._iter_chunks()) if only is None or i in only]
        for acc, chunk_ll, chunk_n, report in self._map_items(fold, chunks):  # merged in chunk order
            ll += chunk_ll
            nobs += chunk_n
            reports.append(report)
            total = acc if total is None else total.combine(acc.value())
        self.last_parts = tuple(reports)
        return nobs, ll, total

    def partition_ids(self) -> range:
        """The ids partitions report in ``last_parts``: chunk indices."""
        return range(len(self.chunks))

    def pysp_partition_payloads(
        self, estimator: Estimator, model: Distribution, parts: Any, *, reference: bool = True
    ) -> dict[int, tuple[float, float, Any]]:
        """The own payloads ``(weight, log-likelihood, statistics)`` of chunks ``parts``, computed
        again (with the independent reference kernels unless ``reference=False``)."""
        wanted = frozenset(int(p) for p in parts)
        saved = self.last_parts
        try:
            options = PassOptions(keep=wanted, only=wanted, reference=reference)
            self._accumulate(self.bind(estimator), model, options)
            return {r.part: r.kept for r in self.last_parts if r.kept is not None}
        finally:
            self.last_parts = saved

    def pysp_seq_estimate(self, estimator: Estimator, prev_estimate: Distribution) -> Distribution:
        """The next EM estimate from ``prev_estimate``."""
        return self.pysp_em_step(estimator, prev_estimate)[2]

    def pysp_stream_accumulate(self, estimator: Estimator, model: Distribution) -> tuple[float, Any]:
        """The E-step fold without the M-step: (total weight, merged statistics value)."""
        nobs, _ll, acc = self._accumulate(self.bind(estimator), model)
        return nobs, fold_key_passes(acc).value()

    def pysp_seq_log_density_sum(self, estimate: Distribution) -> tuple[float, float]:
        """(total weight, weighted total log-likelihood of ``estimate``)."""
        nobs = 0.0
        ll = 0.0
        for chunk_ll, chunk_n in self._map_chunks(
            lambda c: (weighted_sum(c[2], estimate.seq_log_density(c[1])), float(c[2].sum()))
        ):
            ll += chunk_ll
            nobs += chunk_n
        return nobs, ll

    def seq_log_density(self, estimate: Distribution) -> np.ndarray:
        """Per-row log-density of ``estimate``, shape (n,), in row order."""
        return np.concatenate([estimate.seq_log_density(enc) for _ids, enc, _w in self._iter_chunks()])

    def pysp_row_pass(self, factory: Any, task: Any) -> tuple[float, Any]:
        """One pass of a row task (the seeding's passes): (total weight, merged value of ``factory``'s
        accumulators, each folded by ``task.fold(acc, enc, weights, row_ids)``), merged in chunk order."""
        payloads = self._map_chunks(lambda c: accumulate_chunks([(c[1], c[2], c[0])], (factory, None, task)))
        merged: Any = None
        for payload in payloads:
            merged = merge_payloads(factory, merged, payload)
        if merged is None or merged[2] is None:
            raise EmptyDataError("no rows: the encoded data is empty")
        return merged[0], merged[2]

    def pysp_seq_initialize(self, estimator: Estimator, rng: Any, p: float) -> Distribution:
        """An initial model: each row kept with probability ``p`` (decided by a hash of the seed and
        the row id), then randomised statistics (mixtures: random responsibilities) from the same
        row-keyed stream. If the kept rows weigh less than the rows the estimator needs, every row is
        used (the rule of every backend: they compare the payload's total weight)."""
        bound = self.bind(estimator)
        seed = seed_from(rng)
        p = 1.0 if p is None or p >= 1.0 else (0.1 if p <= 0.0 else float(p))
        keep = [initial_keep_weights(seed, ids, p) for ids, _enc, _w in self._iter_chunks()]
        kept_weight = sum(
            float(np.dot(k, w)) for k, (_ids, _enc, w) in zip(keep, self._iter_chunks(), strict=True)
        )
        if kept_weight < max(bound.min_rows(), 1) and p < 1.0:
            keep = [np.ones_like(k) for k in keep]
        factory = bound.accumulator_factory()
        total: Any = None
        nobs = 0.0
        for (ids, enc, w), kept in zip(self._iter_chunks(), keep, strict=True):
            acc = factory.make()
            kw = w * kept
            acc.seq_initialize(enc, kw, RowRandom(seed, ids).child("init"))
            nobs += float(kw.sum())
            total = acc if total is None else total.combine(acc.value())
        return bound.estimate(nobs, fold_key_passes(total).value())

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
    """Registry factory of the ``local`` backend: honours :data:`LOCAL_CONTROLS` and refuses the
    other controls of ``encoded_data`` (``engine`` only ``"numpy"``, ``precision`` only float64)."""
    controls = {k: options.pop(k) for k in list(options) if k in CONTROL_DEFAULTS}
    refuse_controls("local", controls, LOCAL_CONTROLS)
    check_engine_and_precision("local", controls.pop("engine", None), controls.pop("precision", None))
    return LocalEncodedData(data, estimator=estimator, model=model, **controls, **options)
