"""Resident E-steps for the spark backend: partitions decoded once, kept in long-lived tasks.

A per-iteration Spark job re-reads every partition through Arrow and pays Spark's task start-up
each time. For the many iterations of one fit this module runs ONE barrier job instead: each task
connects back to a small TCP server on the driver, authenticates (:mod:`._resident_wire`: nothing is
deserialized before the peer proves it holds the fit's secret), reads and decodes its partition of the
persisted encoded data once, keeps the chunks (and any cached features) in its Python worker, and then
answers E-step requests (the model in, one payload out) until the driver says stop. The driver merges
the payloads in partition order, so the result is the same as the per-iteration path up to rounding.

What it holds while a fit runs: one task slot per partition (the barrier stage needs all of them at
once) and, in every such Python worker, the decoded partition (and the features the E-step caches)
beside Spark's cached copy; the tasks report those bytes and their workers' resident memory
(:meth:`ResidentSession.memory`).

It is an accelerator, not a requirement. :class:`ResidentUnavailable` says why it cannot serve and
whether a later E-step may try again (``retry``): a lost task or a failed launch may, a session or a
layout that cannot run it (Spark Connect, dynamic allocation, more partitions than task slots) may not.
Its caller (:class:`~._executors.ResidentExecutor`) then runs the step as an ordinary Spark job,
so nothing is lost and the estimates do not change. A barrier stage that cannot get its slots within
``launch_timeout`` is cancelled together with Spark's pending resubmissions of it, so nothing keeps
retrying behind the fit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

import mixle_spark.parallel.backends.spark._resident_wire as wire
from mixle_spark.parallel.backends.spark._resident_listener import Listener as _Listener
from mixle_spark.parallel.backends.spark._resident_listener import listen_addresses
from mixle_spark.parallel.fold import stat_nbytes

__all__ = ["ResidentLost", "ResidentSession", "ResidentUnavailable", "resident_task"]

logger = logging.getLogger("mixle_spark.parallel.backends.spark")

LAUNCH_TIMEOUT = 30.0
"""Seconds for every task of the barrier stage to start and connect before the stage is cancelled."""
REPLY_TIMEOUT_FLOOR = 120.0
"""Least seconds a task has to answer one E-step request (more when steps or encoding are slower)."""
REPLY_TIMEOUT_FACTOR = 20.0
"""A task may take this many times the slowest step (or the encoding) seen so far before it is lost."""


class ResidentUnavailable(RuntimeError):
    """The resident engine cannot serve (or stopped serving) this handle; use per-iteration jobs.

    ``retry`` is True when a later E-step may start a new session (a lost task, a failed launch) and
    False when this session or layout cannot run one.
    """

    def __init__(self, message: str, *, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


class ResidentLost(ResidentUnavailable):
    """A resident task was lost mid-fit (its connection closed, timed out or failed to verify)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retry=True)


def _rss_bytes() -> int:
    """This process's resident memory in bytes (-1 where /proc is not available)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return -1


def resident_task(
    address: tuple[str, int],
    secret: bytes,
    decode: Callable[[Iterable[pa.RecordBatch]], Iterable[Any]],
    compute: Callable[..., Any],
    measure_at: int = 1,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The barrier task: authenticate to the driver, decode the partition once, serve E-step requests
    (the memory its chunks hold is measured after request ``measure_at``: the first E-step)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        part = ctx.partitionId()
        with socket.create_connection(address, timeout=wire.CONNECT_TIMEOUT) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            channel = wire.connect_driver(sock, secret, (part, ctx.attemptNumber(), os.getpid()))
            sock.settimeout(None)  # the driver paces the requests; it cancels the job when it is done
            started = time.perf_counter()
            try:
                chunks = list(decode(batches))
            except Exception as err:  # reported to the driver, which runs ordinary jobs instead
                channel.send(("error", f"{type(err).__name__}: {err}"))
                chunks = None
            if chunks is not None:
                rows = sum(len(c[1]) for c in chunks)
                seconds = time.perf_counter() - started
                channel.send(("ready", rows, stat_nbytes(chunks), _rss_bytes(), seconds))
                served = 0
                while True:
                    try:
                        request = channel.recv()
                    except OSError:  # the driver closed the session (it ended or cancels the job)
                        break
                    if request[0] == "stop":
                        break
                    try:
                        payload = compute(chunks, request[1], part)
                        # the first step caches the E-step's features in the chunks: measure once
                        served += 1
                        held = stat_nbytes(chunks) if served == measure_at else -1
                        reply: Any = ("ok", payload, held, _rss_bytes())
                    except Exception as err:  # reported to the driver, which falls back
                        reply = ("error", f"{type(err).__name__}: {err}")
                    channel.send(reply)
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
    decode, compute : callables
        ``decode(batches) -> chunks`` runs once in the task (over its partition); ``compute(chunks, request,
        partition id) -> payload`` runs per E-step request.
    launch_timeout : float, optional
        Seconds for every task to start and authenticate (default :data:`LAUNCH_TIMEOUT`); then the
        stage is cancelled.
    setup_requests : int
        Requests the caller sends before the first E-step (the memory the chunks hold is measured
        after that step).
    """

    def __init__(
        self,
        frame: Any,
        num_partitions: int,
        decode: Callable[..., Any],
        compute: Callable[..., Any],
        launch_timeout: float | None = None,
        setup_requests: int = 0,
    ) -> None:
        self.frame = frame
        self.setup_requests = setup_requests
        self.num_partitions = num_partitions
        self.launch_timeout = LAUNCH_TIMEOUT if launch_timeout is None else launch_timeout
        self._decode = decode
        self._compute = compute
        self._channels: dict[int, wire.Channel] = {}
        self._thread: threading.Thread | None = None
        self._job_error: BaseException | None = None
        self._group = f"mixle-resident-{uuid.uuid4().hex}"
        self.active = False
        self.rows = 0
        self.pids: dict[int, int] = {}
        self._held: dict[int, int] = {}
        self._rss: dict[int, int] = {}
        self._slowest = 0.0

    # -- start --------------------------------------------------------------------------------
    def _listening(self, address: tuple[str, int]) -> None:
        """Called once the driver's server listens, before any task is launched."""
        logger.debug("resident E-steps: listening on %s:%d", *address)

    def start(self) -> None:
        """Launch the barrier job; return once every partition's task has authenticated and decoded."""
        spark = self.frame.sparkSession
        sc = spark.sparkContext
        bind, host = listen_addresses(spark)
        # a full backlog would drop a task's SYN for a second while other peers crowd the port
        server = socket.create_server((bind, 0), backlog=socket.SOMAXCONN)
        address = (host, server.getsockname()[1])
        secret = wire.new_secret()
        listener = _Listener(server, secret, expected=self.num_partitions)
        self._listening(address)
        task = resident_task(address, secret, self._decode, self._compute, 1 + self.setup_requests)
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
            self._await_tasks(listener)
            self._await_ready()
        except ResidentUnavailable:
            self.stop(cancel=True)
            raise
        except (OSError, TypeError, ValueError) as err:  # one task's failure, whatever it sent
            self.stop(cancel=True)
            raise ResidentUnavailable(
                f"a resident task failed while starting ({type(err).__name__}: {err})", retry=True
            ) from err
        finally:
            listener.close()
        self.active = True
        logger.debug("resident E-steps: %s", self.describe())

    def _job_ended(self) -> ResidentUnavailable:
        cause = self._job_error
        reason = (
            f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}" if cause else "?"
        )
        return ResidentUnavailable(
            f"the resident job ended before its tasks were ready ({reason})", retry=True
        )

    def _await_tasks(self, listener: _Listener) -> None:
        assert self._thread is not None
        deadline = time.monotonic() + self.launch_timeout
        while len(self._channels) < self.num_partitions:
            try:
                hello, channel = listener.accepted.get(timeout=0.2)
            except queue.Empty:
                if not self._thread.is_alive():
                    raise self._job_ended() from None
                if time.monotonic() > deadline:
                    raise ResidentUnavailable(
                        f"the barrier stage did not start {self.num_partitions} tasks within "
                        f"{self.launch_timeout:.0f} s (its task slots are busy or missing); it was cancelled"
                    ) from None
                continue
            if not 0 <= hello.partition < self.num_partitions:
                channel.close()
                continue
            old = self._channels.pop(hello.partition, None)
            if old is not None:  # a retried attempt replaces the old connection
                old.close()
            self._channels[hello.partition] = channel
            self.pids[hello.partition] = hello.pid

    def _await_ready(self) -> None:
        slowest = 0.0
        for part in sorted(self._channels):
            message = self._message(part, None, "ready", 5)
            if message[0] != "ready":
                raise ResidentUnavailable(f"partition {part} could not be decoded in its task: {message[1]}")
            _tag, rows, held, rss, seconds = message
            self.rows += int(rows)
            self._held[part], self._rss[part] = int(held), int(rss)
            slowest = max(slowest, float(seconds))
        self._slowest = slowest

    def _receive(self, part: int, deadline: float | None) -> Any:
        """The next message of ``part``'s task, waiting while the job runs (and until ``deadline``)."""
        assert self._thread is not None
        sock = self._channels[part].sock
        sock.settimeout(0.5)
        while True:
            try:
                sock.recv(1, socket.MSG_PEEK)  # b"" at end of stream: recv below names the loss
                break
            except TimeoutError:
                pass
            if not self._thread.is_alive():
                raise self._job_ended() if not self.active else ResidentLost("the resident job ended")
            if deadline is not None and time.monotonic() > deadline:
                raise ResidentLost(
                    f"partition {part}'s task did not answer within {self._reply_timeout():.0f} s"
                )
        sock.settimeout(max(self._reply_timeout(), 60.0))  # bounds the rest of the message
        return self._channels[part].recv()

    def _message(self, part: int, deadline: float | None, tag: str, size: int) -> Any:
        """``part``'s next message: ``(tag, ...)`` of ``size`` items or ``("error", text)``. Anything else
        loses that task (ResidentLost), as a connection error would, and never fails the fit."""
        message = self._receive(part, deadline)
        if isinstance(message, tuple) and len(message) == 2 and message[0] == "error":
            return message
        if not (isinstance(message, tuple) and len(message) == size and message[0] == tag):
            raise ResidentLost(
                f"partition {part}'s task sent a {type(message).__name__}, not a {tag!r} message"
            )
        return message

    def _reply_timeout(self) -> float:
        return max(REPLY_TIMEOUT_FLOOR, REPLY_TIMEOUT_FACTOR * self._slowest)

    # -- steps --------------------------------------------------------------------------------
    def request(self, payload: Any) -> list[Any]:
        """Send one request to every task; their replies in partition order."""
        if not self.active:
            raise ResidentUnavailable("the resident session is not running", retry=True)
        if self._thread is None or not self._thread.is_alive():  # Spark failed the stage (a lost executor)
            self.stop(cancel=True)
            raise ResidentLost("the resident job ended (Spark failed its stage)")
        # cloudpickle, as Spark does for closures: classes of a notebook's __main__ travel by value
        from pyspark import cloudpickle

        try:
            body = cloudpickle.dumps(("step", payload), protocol=5)
        except Exception as err:  # a job would fail on it too, and report it
            self.stop()
            raise ResidentUnavailable(f"the request cannot be serialized: {err}") from err
        started = time.monotonic()
        deadline = started + self._reply_timeout()
        part = -1
        try:
            for part in self._channels:
                self._channels[part].send_pickled(body)
            replies = []
            for part in sorted(self._channels):
                message = self._message(part, deadline, "ok", 4)
                if message[0] != "ok":
                    raise ResidentUnavailable(f"partition {part} failed in its resident task: {message[1]}")
                replies.append(message[1])
                if message[2] >= 0:  # measured after the first step only
                    self._held[part] = int(message[2])
                self._rss[part] = int(message[3])
        except ResidentUnavailable as err:  # a task's error leaves the tasks able to stop themselves
            self.stop(cancel=isinstance(err, ResidentLost))
            raise
        except (OSError, TypeError, ValueError) as err:  # closed, reset, timed out, a frame refused
            self.stop(cancel=True)
            raise ResidentLost(
                f"lost the resident task of partition {part} ({type(err).__name__}: {err})"
            ) from err
        self._slowest = max(self._slowest, time.monotonic() - started)
        return replies

    def memory(self) -> tuple[int, int, int]:
        """(bytes of decoded data and cached features the tasks hold, rows they hold, resident memory
        of their Python workers in bytes, -1 where the platform does not report it)."""
        rss = -1 if any(v < 0 for v in self._rss.values()) else sum(self._rss.values())
        return sum(self._held.values()), self.rows, rss

    def describe(self) -> str:
        """One line: tasks, rows and the memory they hold."""
        held, rows, rss = self.memory()
        tasks = len(self._channels)
        who = "1 task holds" if tasks == 1 else f"{tasks} tasks hold"
        per_row = held / max(rows, 1)
        text = (
            f"{who} {rows:,} rows, {held / 2**20:.1f} MiB decoded in Python workers ({per_row:.0f} bytes/row)"
        )
        return text + (f", worker RSS {rss / 2**20:.0f} MiB" if rss >= 0 else "")

    # -- stop ---------------------------------------------------------------------------------
    def _cancel(self) -> None:
        from py4j.protocol import Py4JError

        sc = self.frame.sparkSession.sparkContext
        try:  # also refuses Spark's resubmissions of a barrier stage still waiting for slots
            sc._jsc.sc().cancelJobGroupAndFutureJobs(self._group)
        except Py4JError:  # Spark before 4.0
            sc.cancelJobGroup(self._group)

    def stop(self, cancel: bool = False) -> None:
        """End the resident job (idempotent): tell the tasks to finish and wait, or (``cancel``, after a
        failure) cancel the job group at once; a job that does not finish is cancelled too."""
        was_active, self.active = self.active, False
        if cancel and self._thread is not None and self._thread.is_alive():
            self._cancel()
        for channel in self._channels.values():
            with contextlib.suppress(OSError):  # a task already gone has nothing to hear
                if was_active and not cancel:
                    channel.send(("stop",))
            channel.close()
        self._channels = {}
        if self._thread is not None:
            self._thread.join(timeout=5 if cancel else 30)
            if self._thread.is_alive():
                self._cancel()
                self._thread.join(timeout=30)
            self._thread = None
