"""The driver's resident port: where the resident tasks connect and authenticate, and nobody else gets in.

Who can connect: on a local master (``local``, ``local[N]``, ``local-cluster[...]``: every Python
worker runs on this machine) the port listens on loopback only; on a cluster it listens on the
driver's ``spark.driver.bindAddress`` (else ``spark.driver.host``), where the executors reach the driver.
Any process that reaches that address can connect, so the port is open only while a session starts
(until every task has authenticated) and a connection is worth nothing until its peer proves it holds
the fit's secret (:mod:`._resident_wire`).

Why the handshakes run the way they do: real tasks must get through however many other peers are
connected. One thread serves every pending handshake through a selector, so a peer that says nothing
costs a file descriptor, not a thread. A task answers the driver's challenge as soon as it reads it, so
each peer has :data:`~._resident_wire.HANDSHAKE_TIMEOUT` seconds for its 96-byte reply and is refused at
its first byte that is not the protocol's. At most ``capacity`` handshakes are pending; a new
connection beyond that closes the oldest pending one. A task completes its handshake within a round
trip of connecting, so to crowd one out a peer would have to open ``capacity`` connections within that
round trip; keeping connections open, however many, delays nobody. Refused peers are counted and
reported in one warning when the listener closes, not one line each.
"""

from __future__ import annotations

import collections
import errno
import logging
import queue
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import mixle_spark.parallel.backends.spark._resident_wire as wire

try:
    import resource
except ImportError:  # Windows: no file limit to read
    resource = None  # type: ignore[assignment]

__all__ = ["MAX_PENDING_HANDSHAKES", "Listener", "Refusals", "is_local_master", "listen_addresses"]

logger = logging.getLogger("mixle_spark.parallel.backends.spark")

MAX_PENDING_HANDSHAKES = 1024
"""Handshakes pending at once (fewer when the process may open few files, never fewer than the tasks
plus 16); a connection beyond them closes the oldest pending one."""
_ACCEPT_BURST = 64  # connections accepted per wake-up before the pending peers are read again
_FD_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def is_local_master(master: str) -> bool:
    """True for masters whose executors all run on the driver's machine (``local*``, ``local-cluster``)."""
    return master.startswith("local")


def listen_addresses(spark: Any) -> tuple[str, str]:
    """(address the resident port binds, address the tasks connect to) for this session: loopback on a
    local master, the driver's bind address and host on a cluster."""
    if is_local_master(spark.sparkContext.master):
        return "127.0.0.1", "127.0.0.1"
    host = spark.conf.get("spark.driver.host", None) or socket.gethostname()
    bind = spark.conf.get("spark.driver.bindAddress", None) or host
    return ("127.0.0.1" if bind == "localhost" else bind), ("127.0.0.1" if host == "localhost" else host)


def pending_capacity(expected: int) -> int:
    """Handshakes allowed to be pending for ``expected`` tasks: :data:`MAX_PENDING_HANDSHAKES`, or a
    quarter of the files this process may open when that is fewer, and never fewer than the tasks + 16."""
    limit = MAX_PENDING_HANDSHAKES
    if resource is not None:
        try:
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (OSError, ValueError):
            soft = resource.RLIM_INFINITY
        if soft != resource.RLIM_INFINITY:
            limit = min(limit, soft // 4)
    return max(expected + 16, limit)


def _host(peer: Any) -> str:
    return str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)


def _peer(peer: Any) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)


class Refusals:
    """Peers the listener refused, counted by reason and by host, for one summary line."""

    def __init__(self) -> None:
        self.reasons: collections.Counter[str] = collections.Counter()
        self.hosts: collections.Counter[str] = collections.Counter()
        self.first: tuple[str, str] | None = None

    def add(self, peer: Any, reason: str) -> None:
        self.reasons[reason] += 1
        self.hosts[_host(peer)] += 1
        if self.first is None:
            self.first = (_peer(peer), reason)
        logger.debug("resident E-steps: refused a connection from %s: %s", _peer(peer), reason)

    @property
    def total(self) -> int:
        return sum(self.reasons.values())

    def summary(self, port: int) -> str | None:
        """One line: how many peers, why, from where (None when nobody was refused)."""
        if not self.reasons:
            return None
        total = self.total
        why = "; ".join(f"{reason}: {n}" for reason, n in self.reasons.most_common())
        hosts = ", ".join(f"{host} ({n})" for host, n in self.hosts.most_common(5))
        more = len(self.hosts) - 5
        hosts += f" and {more} more host(s)" if more > 0 else ""
        assert self.first is not None
        return (
            f"resident E-steps: refused {total} connection{'s' if total != 1 else ''} to the resident "
            f"port {port} that did not authenticate ({why}); from {hosts}; the first, from "
            f"{self.first[0]}: {self.first[1]}"
        )


@dataclass(eq=False)
class _Pending:
    sock: socket.socket
    peer: Any
    handshake: wire.DriverHandshake
    deadline: float
    closed: bool = field(default=False)


class Listener:
    """Accepts connections on the driver's resident port and authenticates them in one thread.

    Authenticated tasks are queued in :attr:`accepted` as ``(hello, channel)``. Closing and queueing
    exclude each other (one lock), so a task that authenticates while the listener closes is either
    queued before the close (and the close hangs up on it) or never queued: no channel is left open.
    """

    def __init__(
        self,
        server: socket.socket,
        secret: bytes,
        *,
        expected: int = 1,
        timeout: float | None = None,
        capacity: int | None = None,
    ) -> None:
        self.server = server
        self.secret = secret
        self.timeout = wire.HANDSHAKE_TIMEOUT if timeout is None else timeout
        self.capacity = pending_capacity(expected) if capacity is None else capacity
        self.accepted: queue.Queue[tuple[wire.Hello, wire.Channel]] = queue.Queue()
        self.refused = Refusals()
        self._port = server.getsockname()[1]
        self._pending: dict[socket.socket, _Pending] = {}  # oldest first
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        server.setblocking(False)
        self._selector.register(server, selectors.EVENT_READ)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, name="mixle-resident-accept", daemon=True)
        self._thread.start()

    # -- the serving thread --------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            while not self._closed.is_set():
                oldest = next(iter(self._pending.values()), None)
                wait = 0.5 if oldest is None else min(max(oldest.deadline - time.monotonic(), 0.0), 0.5)
                for key, _events in self._selector.select(wait):
                    if key.fileobj is self.server:
                        self._accept()
                    elif key.fileobj is self._wake_read:
                        self._drain_wake()
                    else:
                        self._advance(key.data)
                self._expire()
        except Exception:  # a bug here must not leave the port open; the tasks then time out
            logger.exception("resident E-steps: the resident port's listener failed")
        finally:
            for pending in list(self._pending.values()):
                self._refuse(pending, "still in its handshake when the listener closed")
            self._selector.close()
            self.server.close()

    def _drain_wake(self) -> None:
        try:
            while self._wake_read.recv(64):
                pass
        except OSError:
            pass

    def _accept(self) -> None:
        for _ in range(_ACCEPT_BURST):
            try:
                conn, peer = self.server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                if err.errno in _FD_ERRORS and self._pending:  # out of files: the oldest peer makes room
                    self._refuse(next(iter(self._pending.values())), "closed to make room (out of files)")
                    continue
                if err.errno in _FD_ERRORS:
                    time.sleep(0.05)  # nothing of ours to close; the connection waits in the backlog
                    return
                if self._closed.is_set() or self.server.fileno() < 0:
                    return
                continue  # ECONNABORTED and the like: that peer is gone already
            self._admit(conn, peer)

    def _admit(self, conn: socket.socket, peer: Any) -> None:
        if len(self._pending) >= self.capacity:
            self._refuse(
                next(iter(self._pending.values())),
                f"closed to make room ({self.capacity} handshakes were pending)",
            )
        pending = _Pending(conn, peer, wire.DriverHandshake(self.secret), time.monotonic() + self.timeout)
        try:
            conn.setblocking(False)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if conn.send(pending.handshake.greeting) != len(pending.handshake.greeting):
                raise wire.ProtocolError("the challenge could not be sent at once")
            self._selector.register(conn, selectors.EVENT_READ, pending)
        except Exception as err:
            self._refuse(pending, f"{type(err).__name__}: {err}")
            return
        self._pending[conn] = pending

    def _advance(self, pending: _Pending) -> None:
        """Read what the peer sent; refuse it on the first wrong byte; queue it once authenticated."""
        try:
            data = pending.sock.recv(pending.handshake.missing)
            if not data:
                got = pending.handshake.received
                self._refuse(
                    pending, f"closed the connection after {got} of {wire.TASK_REPLY} bytes of the handshake"
                )
                return
            if not pending.handshake.feed(data):
                return
            hello, proof, key = pending.handshake.finish()
            self._forget(pending)
            pending.sock.settimeout(self.timeout)  # 32 bytes into a fresh socket: sent at once
            pending.sock.sendall(proof)
        except (BlockingIOError, InterruptedError):
            return
        except Exception as err:  # garbage, a wrong secret, a vanished peer: that peer only
            self._refuse(pending, str(err) if isinstance(err, wire.ProtocolError) else _describe(err))
            return
        channel = wire.Channel(pending.sock, key, b"D", b"T")
        with self._lock:
            queued = not self._closed.is_set()
            if queued:
                self.accepted.put((hello, channel))
        if not queued:
            channel.close()

    def _expire(self) -> None:
        now = time.monotonic()
        while self._pending:
            oldest = next(iter(self._pending.values()))
            if oldest.deadline > now:
                return
            got = oldest.handshake.received
            self._refuse(
                oldest,
                f"did not complete the handshake in {self.timeout:g} s ({got} of {wire.TASK_REPLY} bytes)",
            )

    def _forget(self, pending: _Pending) -> None:
        if self._pending.pop(pending.sock, None) is not None:
            try:
                self._selector.unregister(pending.sock)
            except (KeyError, ValueError):
                pass

    def _refuse(self, pending: _Pending, reason: str) -> None:
        self._forget(pending)
        if not pending.closed:
            pending.closed = True
            pending.sock.close()
            self.refused.add(pending.peer, reason)

    # -- the caller's side ---------------------------------------------------------------------
    def close(self) -> None:
        """Stop accepting, close the pending peers and any channel authenticated but not taken (now or
        later), and log one summary of the refused peers."""
        with self._lock:
            self._closed.set()
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass
        self._thread.join(timeout=5)
        if self._thread.is_alive():  # only if the thread is stuck; closing its socket stops accepting
            self.server.close()
        self._wake_write.close()
        self._wake_read.close()
        while True:
            try:
                _hello, channel = self.accepted.get_nowait()
            except queue.Empty:
                break
            channel.close()
        line = self.refused.summary(self._port)
        if line is not None:
            logger.warning(line)


def _describe(err: BaseException) -> str:
    text = str(err)
    if isinstance(err, TimeoutError):
        return "timed out sending the handshake's proof"
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
