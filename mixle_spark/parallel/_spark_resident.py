"""Resident E-steps for the spark backend: partitions decoded once, kept in long-lived tasks.

A per-iteration Spark job re-reads every partition through Arrow and pays Spark's task start-up
each time. For the many iterations of one fit this module runs ONE barrier job instead: each task
reads and encodes its partition once, keeps the encoded batches (and any cached features) in its
Python worker, connects back to a small TCP server on the driver, and then answers E-step requests
(the model in, one payload out) until the driver says stop. The driver merges the payloads in
partition order, so the result is the same as the per-iteration path up to rounding.

It is an accelerator, not a requirement: the handle falls back to per-iteration jobs when the
session cannot run it (Spark Connect, more partitions than task slots, tasks that cannot reach the
driver within ``connect_timeout``) or when it fails mid-fit (a lost task); the failed step is then
recomputed by a regular job, so nothing is lost and the estimates do not change.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import socket
import struct
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

__all__ = ["ResidentSession", "ResidentUnavailable"]

logger = logging.getLogger("mixle_spark.parallel.spark")

_HEADER = struct.Struct("!Q")


class ResidentUnavailable(RuntimeError):
    """The resident engine cannot serve (or stopped serving) this handle; use per-iteration jobs."""


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=5)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket) -> Any:
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    return pickle.loads(_recv_exact(sock, size))


def resident_task(
    address: tuple[str, int],
    secret: str,
    encode: Callable[[pa.RecordBatch], Any],
    compute: Callable[..., Any],
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The barrier task: encode the partition once, then serve E-step requests from the driver."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        chunks = [encode(b) for b in batches if b.num_rows]
        with socket.create_connection(address, timeout=None) as sock:
            _send(sock, ("hello", secret, ctx.partitionId(), ctx.attemptNumber(), os.getpid()))
            while True:
                request = _recv(sock)
                if request[0] == "stop":
                    break
                try:
                    reply: Any = ("ok", compute(chunks, request[1], ctx.partitionId()))
                except Exception as err:  # reported to the driver, which falls back
                    reply = ("error", f"{type(err).__name__}: {err}")
                _send(sock, reply)
        yield pa.RecordBatch.from_pydict({"payload": pa.array([], pa.binary())})

    return run


class ResidentSession:
    """Driver side of the resident engine for one encoded DataFrame.

    Parameters
    ----------
    frame : DataFrame
        The persisted encoded DataFrame; one barrier task per partition.
    num_partitions : int
        Partitions of ``frame`` (each must get a task slot at once).
    encode, compute : callables
        ``encode(batch) -> chunk`` runs once per batch in the task; ``compute(chunks, request,
        partition id) -> payload`` runs per E-step request.
    connect_timeout : float
        Seconds to wait for every task to connect before giving up (the handle then falls back).
    """

    def __init__(
        self,
        frame: Any,
        num_partitions: int,
        encode: Callable[..., Any],
        compute: Callable[..., Any],
        connect_timeout: float = 120.0,
    ) -> None:
        self.frame = frame
        self.num_partitions = num_partitions
        self.connect_timeout = connect_timeout
        self._encode = encode
        self._compute = compute
        self._conns: dict[int, socket.socket] = {}
        self._server: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._job_error: BaseException | None = None
        self._group = f"mixle-resident-{uuid.uuid4().hex}"
        self.active = False

    def start(self) -> None:
        """Launch the barrier job and wait until every partition's task has connected."""
        spark = self.frame.sparkSession
        sc = spark.sparkContext
        slots = sc.defaultParallelism
        if self.num_partitions > slots:
            raise ResidentUnavailable(
                f"{self.num_partitions} partitions but {slots} task slots (use num_chunks <= {slots})"
            )
        host = spark.conf.get("spark.driver.host", None) or socket.gethostname()
        server = socket.create_server((host if host != "localhost" else "127.0.0.1", 0))
        server.settimeout(self.connect_timeout)
        self._server = server
        secret = uuid.uuid4().hex
        task = resident_task(server.getsockname()[:2], secret, self._encode, self._compute)
        job = self.frame.mapInArrow(task, "payload binary", barrier=True)

        def run_job() -> None:
            sc.setJobGroup(self._group, "mixle_spark resident E-steps", interruptOnCancel=True)
            try:
                job.collect()
            except BaseException as err:
                self._job_error = err

        self._thread = threading.Thread(target=run_job, name=self._group, daemon=True)
        self._thread.start()
        try:
            while len(self._conns) < self.num_partitions:
                conn, _addr = server.accept()
                conn.settimeout(None)
                hello = _recv(conn)
                if hello[0] != "hello" or hello[1] != secret:
                    conn.close()
                    continue
                old = self._conns.pop(int(hello[2]), None)
                if old is not None:  # a retried attempt replaces the old connection
                    old.close()
                self._conns[int(hello[2])] = conn
        except (TimeoutError, OSError) as err:
            self.stop()
            raise ResidentUnavailable(f"tasks did not connect to the driver: {err}") from err
        self.active = True
        logger.info("resident E-steps: %d tasks connected", len(self._conns))

    def request(self, payload: Any) -> list[Any]:
        """Send one request to every task; their replies in partition order."""
        if not self.active:
            raise ResidentUnavailable("the resident session is not running")
        try:
            message = pickle.dumps(("step", payload), protocol=5)
            framed = _HEADER.pack(len(message)) + message
            for conn in self._conns.values():
                conn.sendall(framed)
            replies = []
            for pid in sorted(self._conns):
                status, value = _recv(self._conns[pid])
                if status != "ok":
                    raise ResidentUnavailable(f"partition {pid} failed: {value}")
                replies.append(value)
            return replies
        except (OSError, ConnectionError, EOFError, pickle.UnpicklingError) as err:
            self.stop()
            raise ResidentUnavailable(f"lost a resident task: {err}") from err
        except ResidentUnavailable:
            self.stop()
            raise

    def stop(self) -> None:
        """Tell the tasks to finish and wait for the job (idempotent); cancel it if it hangs."""
        was_active, self.active = self.active, False
        for conn in self._conns.values():
            with contextlib.suppress(OSError):
                if was_active:
                    _send(conn, ("stop",))
                conn.close()
        self._conns = {}
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=30)
            if self._thread.is_alive():
                self.frame.sparkSession.sparkContext.cancelJobGroup(self._group)
                self._thread.join(timeout=30)
            self._thread = None
