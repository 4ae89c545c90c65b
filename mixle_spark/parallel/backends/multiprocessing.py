"""The ``mp`` backend: a pool of worker processes, each holding its share of the encoded data.

The rows are split into ``num_workers`` contiguous shards. Each worker process receives its shard
once, encodes it (with the vocabularies the driver learned in one scan) and keeps it for the life of
the handle; an EM iteration sends every worker only the request (accumulator factory and model) and
gets back one payload ``(weight, log-likelihood, statistics)``, exactly what a Spark partition
returns (:func:`~mixle_spark.parallel.fold.accumulate_chunks`). Payloads are merged in a
binary tree in shard order, so results do not depend on timing, and equal the local backend's.

Workers start with the ``spawn`` method (safe beside threads, JVMs and BLAS pools) and one BLAS
thread each. ``close()`` (or leaving the ``with`` block, or ``optimize`` finishing with a handle it
built) stops them; an exception inside a worker is re-raised in the driver with the worker's
traceback, and the workers stay usable; a worker that dies makes the handle raise and shut down
(:mod:`mixle_spark.parallel.backends.mp_resilient` has handles that recover instead, and audit).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle_spark.engines import Compute, narrow_encoded
from mixle_spark.errors import MixleError
from mixle_spark.parallel.backends._handle import bind_estimator, machine_memory
from mixle_spark.parallel.backends.controls import check_control, take_controls
from mixle_spark.parallel.fold import Payload, PayloadHandle, Request, accumulate_chunks, merge_payloads
from mixle_spark.stats._tables import TableRows, chunk_bounds, located, split
from mixle_spark.stats.base import Distribution, Encoder, Estimator

__all__ = ["MP_CONTROLS", "MPEncodedData", "WorkerError", "make_mp"]

MP_CONTROLS = ("encoder", "num_workers", "num_chunks", "sub_chunks", "resources", "engine", "precision")
_REPLY_POLL_SECONDS = 1.0
_BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class WorkerError(MixleError, RuntimeError):
    """A worker process died or could not be reached."""


def _worker_main(conn: Any) -> None:
    """A worker's loop: hold the encoded shard, answer E-step requests until told to stop."""
    chunks: list[tuple[Any, np.ndarray, np.ndarray]] = []
    part = 0
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        kind = message[0]
        if kind == "stop":
            conn.send(("ok", None))
            return
        try:
            if kind == "load":
                part = message[-1]
                chunks = _encode_shard(*message[1:-1])
                reply: Any = len(chunks)
            else:  # "estep"
                reply = accumulate_chunks(chunks, message[1], part)
            conn.send(("ok", reply))
        except BaseException as err:  # reported to the driver, which re-raises it
            send_error(conn, err)


def send_error(conn: Any, err: BaseException) -> None:
    """Send ``("error", err, traceback)`` to the driver (a RuntimeError naming ``err`` when it cannot
    be pickled)."""
    detail = traceback.format_exc()
    try:
        pickle.dumps(err)
        conn.send(("error", err, detail))
    except Exception:
        conn.send(("error", RuntimeError(f"{type(err).__name__}: {err}"), detail))


def _encode_shard(
    piece: Any,
    encoder: Encoder,
    start: int,
    n: int,
    weights: np.ndarray,
    bounds: list[tuple[int, int]],
    column: str | None,
    compute: Compute | None = None,
) -> list[tuple[Any, np.ndarray, np.ndarray]]:
    """Encode a shard's chunks (row ranges relative to the shard; ids are global row indices), each
    stored at ``compute``'s precision (:func:`~mixle_spark.engines.narrow_encoded`). A bad value is
    reported at its row in the whole data set."""
    encode = encoder.from_arrow if hasattr(piece, "slice") else encoder.encode
    out = []
    for a, b in bounds:
        part = piece.slice(a, b - a) if hasattr(piece, "slice") else piece[a:b]
        enc = narrow_encoded(encoder, located(encode, part, start + a, start + b, n, column), compute)
        out.append((enc, weights[a:b], np.arange(start + a, start + b, dtype=np.uint64)))
    return out


class MPEncodedData(PayloadHandle):
    """Encoded data spread over ``num_workers`` worker processes (the ``mp`` backend).

    Parameters
    ----------
    data : list, numpy array, pandas DataFrame, pyarrow Table or RecordBatch
        As for :class:`~mixle_spark.stats._tables.TableRows` (also ``weights``, ``column``).
    estimator, model, encoder : what the data is encoded for.
    num_workers : int, optional
        Worker processes (default: the machine's cores); at most one per row.
    num_chunks, sub_chunks : int, optional
        Chunks per worker (default: chunks of at most 262,144 rows), each split in ``sub_chunks``.
    start_method : str
        ``multiprocessing`` start method (default ``"spawn"``).
    timeout : float
        Seconds to wait for a worker's reply before declaring it stuck (default 3600).
    compute : Compute, optional
        The engine and precision (``encoded_data(..., engine=, precision=)``): each worker stores its
        chunks at that precision and runs its E-steps on that engine (None: numpy, float64).
    """

    def __init__(
        self,
        data: Any,
        estimator: Estimator | None = None,
        model: Distribution | None = None,
        *,
        encoder: Encoder | None = None,
        num_workers: int | None = None,
        num_chunks: int | None = None,
        sub_chunks: int = 1,
        weights: Any = None,
        column: str | None = None,
        start_method: str = "spawn",
        timeout: float = 3600.0,
        compute: Compute | None = None,
    ) -> None:
        num_workers = check_control("num_workers", num_workers)
        workers = os.cpu_count() or 1 if num_workers is None else num_workers
        # The driver checks the weights and runs the scan (vocabularies); the workers encode.
        if estimator is None and model is None and encoder is None:
            raise TypeError("MPEncodedData needs an estimator, a model or an encoder")
        rows = TableRows(data, weights, column)
        base_encoder = encoder or (estimator.encoder() if estimator is not None else model.encoder())  # type: ignore[union-attr]
        self._source, self.n, self._weights = rows.source(base_encoder), rows.n, rows.weights
        self._scan, self.encoder = rows.scanned(base_encoder, estimator, self._source, chunk_bounds(rows.n))
        self.timeout = float(timeout)
        self.compute = compute
        self._closed = False
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self.shards = split(0, self.n, min(workers, self.n))
        self.num_workers = len(self.shards)
        self._fold_rows = 0
        try:
            self._start(start_method)
            loads = []
            for i, (a, b) in enumerate(self.shards):
                bounds = _shard_chunks(b - a, num_chunks, sub_chunks)
                self._fold_rows = max(self._fold_rows, *(y - x for x, y in bounds))
                piece = self._source.slice(a, b - a) if hasattr(self._source, "slice") else self._source[a:b]
                load = (
                    "load",
                    piece,
                    self.encoder,
                    a,
                    self.n,
                    self._weights[a:b],
                    bounds,
                    rows.read_column,
                    compute,
                    i,
                )
                loads.append(load)
            self._load_workers(loads)
        except BaseException:
            self.close()
            raise
        self._source = None  # the workers hold the data now

    # -- process management -----------------------------------------------------------------
    _worker_target = staticmethod(_worker_main)
    """The worker processes' loop (a subclass's workers may answer more requests)."""

    def _start(self, method: str) -> None:
        self._context = mp.get_context(method)
        for i in range(self.num_workers):
            proc, conn = self._spawn(i)
            self._procs.append(proc)
            self._conns.append(conn)

    def _spawn(self, i: int) -> tuple[Any, Any]:
        """Start worker process ``i`` (one BLAS thread); its process and the driver's end of its pipe."""
        saved = {k: os.environ.get(k) for k in _BLAS_THREAD_VARIABLES}
        os.environ.update(dict.fromkeys(_BLAS_THREAD_VARIABLES, "1"))  # one BLAS thread per worker
        try:
            parent, child = self._context.Pipe()
            proc = self._context.Process(  # type: ignore[attr-defined]
                target=type(self)._worker_target, args=(child,), name=f"mixle-mp-{i}", daemon=True
            )
            proc.start()
            child.close()
            return proc, parent
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def _load_workers(self, loads: list[tuple[Any, ...]]) -> None:
        """Send worker ``i`` its shard's ``loads[i]`` and wait until every worker has encoded it."""
        for conn, load in zip(self._conns, loads, strict=True):
            conn.send(load)
        self._collect()

    def _collect(self) -> list[Any]:
        """One reply per worker, in worker order; a worker error is re-raised here."""
        replies: list[Any] = []
        first_error: tuple[int, BaseException, str] | None = None
        for i, conn in enumerate(self._conns):
            waited = 0.0
            while not conn.poll(_REPLY_POLL_SECONDS):
                waited += _REPLY_POLL_SECONDS
                if not self._procs[i].is_alive():
                    raise self._died(i)
                if waited >= self.timeout:
                    self.close()
                    raise WorkerError(f"mp worker {i} did not answer within {self.timeout:.0f} s")
            try:
                status, *rest = conn.recv()
            except (EOFError, OSError):
                raise self._died(i) from None
            if status == "error" and first_error is None:
                first_error = (i, rest[0], rest[1])
            replies.append(rest[0] if status == "ok" else None)
        if first_error is not None:
            i, err, detail = first_error
            note = getattr(err, "add_note", None)  # Python >= 3.11
            if note is not None:
                note(f"raised in mp worker {i}:\n{detail}")
            raise err
        return replies

    def _died(self, i: int) -> WorkerError:
        """Close the handle after worker ``i`` died; the error to raise."""
        self._procs[i].join(timeout=5)
        code = self._procs[i].exitcode
        self.close()
        return WorkerError(f"mp worker {i} died (exit code {code}); the handle is closed")

    def _send(self, message: Any) -> None:
        for i, conn in enumerate(self._conns):
            try:
                conn.send(message)
            except OSError:
                raise self._died(i) from None

    def close(self) -> None:
        """Stop the workers (idempotent); they are terminated if they do not stop in 10 s."""
        if self._closed:
            return
        self._closed = True
        for conn in self._conns:
            try:
                conn.send(("stop",))
            except (OSError, ValueError):
                pass
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []

    def __del__(self) -> None:  # a forgotten handle must not leave processes behind
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    # -- the handle contract -------------------------------------------------------------------
    def bind(self, estimator: Estimator) -> Estimator:
        """``estimator`` with the scanned vocabularies / ranges fixed."""
        return bind_estimator(estimator, self._scan, self.encoder)

    def partition_ids(self) -> range:
        """The ids partitions report in ``last_parts``: worker indices."""
        return range(self.num_workers)

    def fold_rows(self) -> int:
        """The most rows one chunk of a worker holds (each is folded at once)."""
        return self._fold_rows

    def worker_memory(self) -> int | None:
        """This machine's memory (the workers run here)."""
        return machine_memory()

    def _estep(self, request: Request) -> Payload:
        if self._closed:
            raise ValueError("this encoded-data handle is closed")
        self._send(("estep", request))
        return _tree_merge(request[0], self._collect())  # type: ignore[return-value]


def _shard_chunks(rows: int, num_chunks: int | None, sub_chunks: int) -> list[tuple[int, int]]:
    whole = chunk_bounds(rows, None, num_chunks)
    return [piece for a, b in whole for piece in split(a, b, sub_chunks)]


def _tree_merge(factory: Any, payloads: Sequence[Payload | None]) -> Payload | None:
    """Merge payloads pairwise in a binary tree, in worker order (deterministic)."""
    level = list(payloads)
    while len(level) > 1:
        level = [
            merge_payloads(factory, level[i], level[i + 1]) if i + 1 < len(level) else level[i]
            for i in range(0, len(level), 2)
        ]
    return level[0] if level else None


def make_mp(data: Any, estimator: Any = None, model: Any = None, **options: Any) -> MPEncodedData:
    """Registry factory of the ``mp`` backend (alias ``multiprocessing``): honours
    :data:`MP_CONTROLS` (``num_workers`` = processes; ``resources`` = one process per device)."""
    controls = take_controls("mp", options, MP_CONTROLS, computes=True)
    resources = controls.pop("resources", None)
    if resources is not None and controls.get("num_workers") is None:
        controls["num_workers"] = len(resources.devices)
    return MPEncodedData(data, estimator=estimator, model=model, **controls, **options)
