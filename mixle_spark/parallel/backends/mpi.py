"""The ``mpi`` backend: every MPI rank encodes its own share of the rows; statistics reduce over ranks.

SPMD: every rank builds :class:`MPIEncodedData` and runs the same ``optimize(...)`` call. A rank's
share is a contiguous range of the global rows: read from a Parquet file / directory or a Delta table
(only the row groups it needs), taken from in-memory data every rank holds, or, with
``root_only=True``, scattered from the root; with ``own_rows=True`` every rank passes only its own
rows (or its own path). Row ``i`` keeps the global id ``i`` (an exclusive scan of the ranks' row
counts: with ``own_rows``, rank 0's rows come first), so one seed gives the same initial model as the
local backend on the rows in rank order. Vocabulary
scans are gathered and merged in rank order.

Each E-step: every rank folds its chunks into one payload (:func:`~mixle_spark.parallel.backends._handle.
accumulate_chunks`, the code of the local and Spark backends); payloads merge up a binomial tree of
pickled values (:func:`~mixle_spark.parallel.fold.merge_payloads`; its shape depends only on the
number of ranks, so results never depend on timing); the root runs the M-step and broadcasts the
model, so every rank returns the same model.

Errors never hang: each local phase ends in a collective that carries an error flag, and the first
(lowest-rank) error is raised on every rank with its original type and message. The fit job runs
on it (see :mod:`mixle_spark.cli.fit`)::

    mpiexec -n 4 python -m mixle_spark.cli.fit --backend mpi --input PATH --model SPEC.json --output DIR
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable, Iterator
from io import TextIOBase
from typing import Any, TextIO

import numpy as np
import pyarrow as pa

from mixle_spark.engines import Compute, narrow_encoded
from mixle_spark.errors import EmptyDataError, FieldError, SchemaError, did_you_mean
from mixle_spark.parallel.backends import _mpi_io as io
from mixle_spark.parallel.backends._handle import bind_estimator
from mixle_spark.parallel.backends.controls import check_control, take_controls
from mixle_spark.parallel.fold import Payload, PayloadHandle, Request, accumulate_chunks, merge_payloads
from mixle_spark.stats._tables import one_column_error, split
from mixle_spark.stats._validate import check_weights
from mixle_spark.stats.base import Distribution, Encoder, Estimator

__all__ = ["DEFAULT_CHUNK_SIZE", "MPI_CONTROLS", "MPIEncodedData", "make_mpi", "mpi_out", "require_mpi"]

DEFAULT_CHUNK_SIZE = 262_144
"""Rows per encoded chunk within a rank (as in the local backend)."""

_TREE_TAG = 7301
_INSTALL_HINT = "the 'mpi' backend needs mpi4py and an MPI library: pip install 'mixle-spark[mpi]'"


def require_mpi() -> Any:
    """``mpi4py.MPI`` (initialising MPI), or ImportError naming the ``mpi`` extra."""
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise ImportError(f"{_INSTALL_HINT} ({err})") from err
    return MPI


# -- agreeing on errors -----------------------------------------------------------------------------
def _blob(err: BaseException, rank: int) -> bytes:
    """``err`` pickled (with its type and message), or a RuntimeError carrying them when it cannot be."""
    try:
        blob = pickle.dumps(err)
        pickle.loads(blob)
        return blob
    except Exception:
        return pickle.dumps(RuntimeError(f"{type(err).__name__} on MPI rank {rank}: {err}"))


def _raise_agreed(origin: int, blob: bytes, rank: int, own: BaseException | None) -> None:
    """Raise the error of rank ``origin`` here: the original object on that rank, a copy elsewhere."""
    err: Any = own if (origin == rank and own is not None) else pickle.loads(blob)
    err.mpi_rank = origin
    err.mpi_agreed = True
    if err is own:
        raise own
    copy: BaseException = err
    raise copy from None


def agree(comm: Any, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on every rank, then agree: if it raised anywhere, every rank raises the first error."""
    own: BaseException | None = None
    try:
        result, blob = fn(), None
    except Exception as err:
        own, result, blob = err, None, _blob(err, comm.Get_rank())
    for origin, other in enumerate(comm.allgather(blob)):
        if other is not None:
            _raise_agreed(origin, other, comm.Get_rank(), own)
    return result


def on_root(comm: Any, root: int, fn: Callable[[], Any], ready: Any = None) -> Any:
    """``fn()`` run on ``root`` and broadcast; an error (from ``fn`` or carried in ``ready``) is raised
    on every rank. ``ready`` is a tree-reduced item: ``("ok", value)`` or ``("err", rank, blob)``."""
    rank = comm.Get_rank()
    own: BaseException | None = None
    out: Any = None
    if rank == root:
        if ready is not None and ready[0] == "err":
            out = ready
        else:
            try:
                out = ("ok", fn())
            except Exception as err:
                own, out = err, ("err", rank, _blob(err, rank))
    out = comm.bcast(out, root=root)
    if out[0] == "err":
        _raise_agreed(out[1], out[2], rank, own)
    return out[1]


def tree_reduce(comm: Any, root: int, item: Any, merge: Callable[[Any, Any], Any]) -> Any:
    """Binomial-tree reduction of pickled items to ``root`` (None elsewhere).

    Rank ``r`` (relative to the root) merges ``merge(mine, from r + step)`` for step = 1, 2, 4, ...: a
    fixed tree over contiguous rank ranges, so the result depends only on the number of ranks.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    rel = (rank - root) % size
    step = 1
    while step < size:
        if rel % (2 * step):
            comm.send(item, dest=(rel - step + root) % size, tag=_TREE_TAG)
            return None
        if rel + step < size:
            item = merge(item, comm.recv(source=(rel + step + root) % size, tag=_TREE_TAG))
        step *= 2
    return item


def _merge_items(factory: Any, rank: int) -> Callable[[Any, Any], Any]:
    def merge(a: Any, b: Any) -> Any:
        if a[0] == "err" or b[0] == "err":
            errors = [x for x in (a, b) if x[0] == "err"]
            return min(errors, key=lambda e: e[1])
        try:
            return ("ok", merge_payloads(factory, a[1], b[1]))
        except Exception as err:
            return ("err", rank, _blob(err, rank))

    return merge


# -- the handle ---------------------------------------------------------------------------------------
def _check_weights(w: np.ndarray, offset: int, n: int | None) -> np.ndarray:
    return check_weights(w, first_row=offset, n_rows=n)


class MPIEncodedData(PayloadHandle):
    """Encoded data spread over the ranks of an MPI communicator (built collectively, SPMD).

    Parameters
    ----------
    data : str or path, list, numpy array, pandas DataFrame, pyarrow Table, or None
        A Parquet file / directory or Delta table path (each rank reads its rows), or in-memory data
        that every rank holds (each keeps its contiguous share; ranks passing different in-memory
        data are refused, naming their row counts). With ``root_only`` only the root's ``data`` is
        used (other ranks may pass None) and it is scattered in contiguous slices.
    estimator, model, encoder
        What the data is encoded for, as in :class:`~mixle_spark.parallel.backends.local.LocalEncodedData`.
    comm : mpi4py communicator, optional
        Default ``MPI.COMM_WORLD``; the handle works on a duplicate (freed by :meth:`close`).
    root : int
        The rank that runs the M-step (and holds the data with ``root_only``).
    own_rows : bool
        Every rank passes only its own rows (a shard it loaded itself) or its own Parquet / Delta
        path, read whole: the rows are the union of the ranks' data, in rank order. ``weights``
        are then the rank's own rows' weights.
    chunk_size, num_chunks, sub_chunks : int, optional
        Chunking within each rank: ``chunk_size`` rows per chunk (default :data:`DEFAULT_CHUNK_SIZE`),
        or ``num_chunks`` near-equal chunks per rank; each chunk split into ``sub_chunks``.
    weights : array-like or str, optional
        Per-row non-negative weights over all rows (every rank holds them, or the root with
        ``root_only``), or the name of a weight column.
    column : str, optional
        The column a non-Record model reads from a multi-column table.
    num_workers : int, optional
        Thread each rank's E-step over this many threads
        (:class:`~mixle_spark.parallel.backends.model_parallel.ModelParallelEstimator`).
    compute : Compute, optional
        The engine and precision asked for (``engine`` / ``precision``): each rank stores its chunks
        at that precision (float32 halves its share) and folds them on that engine.
    """

    def __init__(
        self,
        data: Any,
        estimator: Estimator | None = None,
        model: Distribution | None = None,
        *,
        comm: Any = None,
        root: int = 0,
        root_only: bool = False,
        own_rows: bool = False,
        chunk_size: int | None = None,
        num_chunks: int | None = None,
        sub_chunks: int = 1,
        weights: Any = None,
        column: str | None = None,
        encoder: Encoder | None = None,
        num_workers: int | None = None,
        compute: Compute | None = None,
    ) -> None:
        mpi = require_mpi() if comm is None else None  # any mpi4py-style communicator works
        if estimator is None and model is None and encoder is None:
            raise TypeError("MPIEncodedData needs an estimator, a model or an encoder")
        if chunk_size is not None and (type(chunk_size) is not int or chunk_size < 1):
            raise ValueError(f"chunk_size must be None or an integer >= 1, got {chunk_size!r}")
        num_chunks = check_control("num_chunks", num_chunks)
        num_workers = check_control("num_workers", num_workers)
        sub_chunks = check_control("sub_chunks", sub_chunks)
        if chunk_size is not None and num_chunks is not None:
            raise ValueError("pass chunk_size or num_chunks, not both")
        if type(root_only) is not bool:
            raise TypeError(f"root_only must be True or False, got {root_only!r}")
        if type(own_rows) is not bool:
            raise TypeError(f"own_rows must be True or False, got {own_rows!r}")
        if root_only and own_rows:
            raise ValueError(
                "pass root_only=True (the root holds every row) or own_rows=True (each rank its own rows), "
                "not both"
            )
        parent = mpi.COMM_WORLD if comm is None else comm  # type: ignore[union-attr]
        if type(root) is not int or not 0 <= root < parent.Get_size():
            raise ValueError(f"root must be a rank in [0, {parent.Get_size()}), got {root!r}")
        self.comm = parent.Dup()
        self.rank, self.size, self.root = self.comm.Get_rank(), self.comm.Get_size(), root
        self.num_workers, self.compute = num_workers, compute
        self._chunking = (chunk_size, num_chunks, sub_chunks)
        self._closed = False
        self.chunks: list[tuple[Any, np.ndarray, np.ndarray]] = []
        try:
            base = encoder or (estimator.encoder() if estimator is not None else model.encoder())  # type: ignore[union-attr]
            source, w, arrow = self._share(data, base, root_only, own_rows, weights, column)
            counts = np.array(agree(self.comm, lambda: self.comm.allgather(len(w))), dtype=np.int64)
            self.local_rows = int(counts[self.rank])
            self.offset = int(counts[: self.rank].sum())
            self.n = int(counts.sum())
            if self.n == 0:
                raise EmptyDataError("no rows to encode: the data is empty")
            bounds = self._bounds()
            self._scan: Any = None
            if estimator is not None and base.needs_scan:
                scans = self.comm.allgather(
                    agree(self.comm, lambda: self._local_scan(base, source, bounds, arrow))
                )
                for part in scans:
                    if part is not None:
                        self._scan = part if self._scan is None else base.merge_scans(self._scan, part)
                base = estimator.with_scan(self._scan).encoder()
            self.encoder = base
            self.chunks = agree(self.comm, lambda: self._encode_all(source, w, bounds, arrow))
        except BaseException:
            self.comm.Free()
            raise

    # -- construction ------------------------------------------------------------------------------
    def _share(
        self, data: Any, encoder: Encoder, root_only: bool, own_rows: bool, weights: Any, column: str | None
    ) -> Any:
        """(records or column source, weights, whether Arrow) of this rank: read, sliced, scattered or
        its own."""
        if root_only:
            own: BaseException | None = None
            parts: Any = None
            if self.rank == self.root:
                try:
                    parts = [("ok", p) for p in self._root_slices(data, weights, column)]
                except Exception as err:
                    own, parts = err, [("err", self.rank, _blob(err, self.rank))] * self.size
            mine = self.comm.scatter(parts, root=self.root)
            if mine[0] == "err":
                _raise_agreed(mine[1], mine[2], self.rank, own)
            piece, w = mine[1]
            return agree(self.comm, lambda: self._prepare(piece, w, encoder, column))
        if io.is_path(data):
            names = encoder.column_names()
            columns = None if names is None else [*names, *([weights] if isinstance(weights, str) else [])]

            def read(plan: io.PathPlan, start: int, stop: int) -> Any:
                missing = [c for c in columns or [] if c not in plan.schema.names]
                if missing:
                    raise SchemaError(
                        f"column(s) {missing} not found in {plan.source}"
                        f"{did_you_mean(missing, plan.schema.names)}; it has {plan.schema.names}"
                    )
                w = self._slice_weights(weights, start, stop, plan.num_rows)
                return self._prepare(io.read_rows(plan, start, stop, columns), w, encoder, column)

            if own_rows:

                def read_own() -> Any:
                    plan = io.plan_path(data)
                    return read(plan, 0, plan.num_rows)

                return agree(self.comm, read_own)
            shared = on_root(self.comm, self.root, lambda: io.plan_path(data))
            start, stop = io.contiguous_range(shared.num_rows, self.rank, self.size)
            return agree(self.comm, lambda: read(shared, start, stop))

        def take() -> Any:
            if data is None:
                raise TypeError("data is None: pass the data on every rank, root_only=True or own_rows=True")
            table = io.as_table(data, column)
            rows = table if table is not None else data
            n = table.num_rows if table is not None else len(data)
            if own_rows:
                return self._prepare(rows, self._slice_weights(weights, 0, n, n), encoder, column), None
            start, stop = io.contiguous_range(n, self.rank, self.size)
            piece = io.slice_rows(rows, start, stop)
            prepared = self._prepare(piece, self._slice_weights(weights, start, stop, n), encoder, column)
            return prepared, (n, io.fingerprint(rows, n))

        prepared, mark = agree(self.comm, take)
        if not own_rows:
            self._check_same_data(self.comm.allgather(mark))
        return prepared

    @staticmethod
    def _check_same_data(marks: list[tuple[int, str | None]]) -> None:
        """Refuse (on every rank alike) in-memory data that differs between ranks: each rank would
        keep its share of different rows, and the fit would see a fraction of each, with no error."""
        if len(set(marks)) == 1:
            return
        counts = [n for n, _ in marks]
        if len(set(counts)) > 1:
            seen = ", ".join(f"rank {r}: {n:,}" for r, n in enumerate(counts))
            what = f"different numbers of rows ({seen})"
        else:
            what = f"different rows ({counts[0]:,} each, with different values)"
        raise ValueError(
            f"the ranks passed {what}: with in-memory data every rank passes all the rows and keeps its "
            "share of them; pass own_rows=True when each rank holds only its own rows"
        )

    def _root_slices(self, data: Any, weights: Any, column: str | None) -> list[Any]:
        if data is None:
            raise TypeError("root_only=True: the root rank must pass the data")
        table = io.read_rows(plan := io.plan_path(data), 0, plan.num_rows) if io.is_path(data) else None
        table = table if table is not None else io.as_table(data, column)
        n = table.num_rows if table is not None else len(data)
        out = []
        for r in range(self.size):
            start, stop = io.contiguous_range(n, r, self.size)
            piece = io.slice_rows(table if table is not None else data, start, stop)
            out.append((piece, self._slice_weights(weights, start, stop, n)))
        return out

    @staticmethod
    def _slice_weights(weights: Any, start: int, stop: int, n: int) -> Any:
        if weights is None or isinstance(weights, str):
            return weights
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (n,):
            raise ValueError(f"weights must have one entry per row ({n}), got shape {w.shape}")
        return _check_weights(w[start:stop], start, n)

    @staticmethod
    def _prepare(
        piece: Any, weights: Any, encoder: Encoder, column: str | None
    ) -> tuple[Any, np.ndarray, bool]:
        """This rank's column source, weights (ones when not given) and whether it is Arrow."""
        arrow = isinstance(piece, pa.Table)
        if isinstance(weights, str):
            if not arrow or weights not in piece.column_names:
                names = piece.column_names if arrow else []
                raise SchemaError(f"weight column {weights!r} not found{did_you_mean(weights, names)}")
            w = piece.column(weights).to_numpy(zero_copy_only=False).astype(np.float64)
            piece = piece.drop_columns([weights])
            _check_weights(w, 0, None)
        else:
            w = np.ones(len(piece)) if weights is None else weights
        if arrow and encoder.column_names() is None:
            if column is not None:
                if column not in piece.column_names:
                    raise SchemaError(
                        f"column {column!r} not found{did_you_mean(column, piece.column_names)}; "
                        f"the data has columns {piece.column_names}"
                    )
                piece = piece.column(column)
            elif piece.num_columns != 1:
                raise one_column_error(piece.column_names)
            else:
                piece = piece.column(0)
        return piece, w, arrow

    def _bounds(self) -> list[tuple[int, int]]:
        chunk_size, num_chunks, sub_chunks = self._chunking
        m = self.local_rows
        if num_chunks is not None:
            whole = split(0, m, min(num_chunks, max(m, 1)))
        else:
            size = chunk_size or DEFAULT_CHUNK_SIZE
            whole = [(a, min(a + size, m)) for a in range(0, m, size)]
        return [piece for a, b in whole for piece in split(a, b, sub_chunks)]

    def _located(self, fn: Callable[[Any], Any], piece: Any, start: int, stop: int) -> Any:
        try:
            return fn(piece)
        except FieldError as err:
            raise err.in_rows(np.arange(self.offset + start, self.offset + stop), self.n) from None

    def _local_scan(self, encoder: Encoder, source: Any, bounds: list[tuple[int, int]], arrow: bool) -> Any:
        state: Any = None
        for start, stop in bounds:
            piece = source.slice(start, stop - start) if arrow else source[start:stop]
            part = self._located(encoder.scan_arrow if arrow else encoder.scan, piece, start, stop)
            state = part if state is None else encoder.merge_scans(state, part)
        return state

    def _encode_all(
        self, source: Any, w: np.ndarray, bounds: list[tuple[int, int]], arrow: bool
    ) -> list[tuple[Any, np.ndarray, np.ndarray]]:
        encode = self.encoder.from_arrow if arrow else self.encoder.encode
        chunks = []
        for start, stop in bounds:
            piece = source.slice(start, stop - start) if arrow else source[start:stop]
            ids = np.arange(self.offset + start, self.offset + stop, dtype=np.uint64)
            enc = narrow_encoded(self.encoder, self._located(encode, piece, start, stop), self.compute)
            chunks.append((enc, w[start:stop], ids))
        return chunks

    # -- the handle contract -----------------------------------------------------------------------
    @property
    def is_root(self) -> bool:
        """True on the rank that writes files (checkpoints, the trace): the root."""
        return bool(self.rank == self.root)

    def on_root(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run on the root and broadcast; its error is raised on every rank
        (:class:`~mixle_spark.parallel.backends.contract.SingleWriter`)."""
        return on_root(self.comm, self.root, fn)

    def close(self) -> None:
        """Release the encoded chunks and the duplicated communicator (idempotent; call on every rank)."""
        if not self._closed:
            self._closed = True
            self.chunks = []
            self.comm.Free()

    def bind(self, estimator: Estimator) -> Estimator:
        """``estimator`` with the scanned vocabularies fixed (threaded over ``num_workers`` if asked)."""
        return bind_estimator(estimator, self._scan, self.encoder, self.num_workers)

    def partition_ids(self) -> range:
        """The ids partitions report in ``last_parts``: ranks."""
        return range(self.size)

    def _chunks(self) -> Iterator[tuple[Any, np.ndarray, np.ndarray]]:
        if self._closed:
            raise ValueError("this encoded-data handle is closed")
        return iter(self.chunks)

    def _reduce(self, request: Any) -> Any:
        """This rank's payload merged up the tree: ``("ok", payload)`` / ``("err", ...)`` on the root."""
        try:
            item: Any = ("ok", accumulate_chunks(self._chunks(), request, self.rank))
        except Exception as err:
            item = ("err", self.rank, _blob(err, self.rank))
        merged = tree_reduce(self.comm, self.root, item, _merge_items(request[0], self.rank))
        if request[0] is not None and merged is not None and merged[0] == "ok" and merged[1][2] is None:
            return (
                "err",
                self.root,
                _blob(EmptyDataError("no rows: every rank's share is empty"), self.root),
            )
        return merged

    def _estep(self, request: Request) -> Payload:
        """The global payload (total weight, log-likelihood, merged statistics, partition reports)
        on every rank."""
        merged = self._reduce(request)
        return on_root(self.comm, self.root, lambda: merged[1], merged)  # type: ignore[no-any-return]

    def _finish(self, request: Request, finish: Callable[[Payload], Any]) -> Any:
        """One pass; ``finish`` (the M-step) runs once, on the root, and its result reaches every rank."""
        merged = self._reduce(self._asking(request))
        result, parts = on_root(self.comm, self.root, lambda: (finish(merged[1]), merged[1][3]), merged)
        self.last_parts = tuple(sorted(parts, key=lambda r: r.part))
        return result

    def first_nonfinite_row(self, estimate: Distribution) -> tuple[int, float] | None:
        """(global row index, value) of the first row whose log-density is NaN or infinite, if any."""

        def find() -> tuple[int, float] | None:
            for enc, w, ids in self._chunks():
                ll = estimate.seq_log_density(enc)
                bad = ~np.isfinite(ll) & (w > 0)
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    return int(ids[i]), float(ll[i])
            return None

        found = [f for f in self.comm.allgather(agree(self.comm, find)) if f is not None]
        return min(found) if found else None


MPI_CONTROLS = (
    "encoder",
    "num_chunks",
    "sub_chunks",
    "comm",
    "root",
    "root_only",
    "num_workers",
    "engine",
    "precision",
)


def make_mpi(data: Any, estimator: Any = None, model: Any = None, **options: Any) -> MPIEncodedData:
    """Registry factory of the ``mpi`` backend: honours :data:`MPI_CONTROLS` (``num_chunks`` and
    ``sub_chunks`` chunk within each rank; ``engine`` / ``precision`` store each rank's share at that
    precision) and refuses the other controls of ``encoded_data``."""
    controls = take_controls("mpi", options, MPI_CONTROLS, computes=True)
    return MPIEncodedData(data, estimator=estimator, model=model, **controls, **options)


class _DiscardedText(TextIOBase):
    """A text stream that drops what is written: the progress of the ranks that do not print."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)


def root_only_output(rank: int, root: int, size: int | None = None) -> TextIO:
    """``sys.stdout`` when ``rank == root``, else a stream that discards (nothing accumulates)."""
    if isinstance(root, bool) or not isinstance(root, int) or root < 0 or (size is not None and root >= size):
        limit = "" if size is None else f" below the world size {size}"
        raise ValueError(f"root: expected a rank >= 0{limit}, got {root!r}")
    return sys.stdout if rank == root else _DiscardedText()  # type: ignore[return-value]


def mpi_out(comm: Any = None, root: int = 0) -> TextIO:
    """The ``out`` of an SPMD fit, so its progress is printed once: ``sys.stdout`` on rank ``root``
    of ``comm`` (default ``MPI.COMM_WORLD``), a stream that discards on every other rank.

    ``optimize(handle, estimator, out=mpi_out())`` under ``mpiexec -n 4`` prints one progress log,
    not four. ``comm`` may be any communicator with ``Get_rank`` / ``Get_size`` (a
    :class:`~mixle_spark.parallel.backends.torchrun.TorchComm` too). Unlike the reference's
    ``io.StringIO``, the other ranks' lines are dropped, not kept in memory for the whole fit.
    """
    if comm is None:
        comm = require_mpi().COMM_WORLD
    return root_only_output(int(comm.Get_rank()), root, int(comm.Get_size()))
